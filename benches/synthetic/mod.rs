//! The synthetic realistic count matrix of the benchmarks (shared by benches/tile.rs and
//! benches/reads.rs): gene means follow a power law, a cell's size factor is log-normal,
//! counts are negative-binomial-like; genes ordered by decreasing total, as the converter
//! does.

use deltacells::convert::mtx::CellMatrix;
use rayon::prelude::*;

/// SplitMix64 (deterministic data for every run).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        (-2.0 * self.unit().ln()).sqrt() * (2.0 * std::f64::consts::PI * self.unit()).cos()
    }
}

/// Synthetic cells: gene means follow a power law; a cell's size factor is log-normal; a
/// gene is detected with probability 1 - exp(-mean * size), and a detected count is
/// 1 + geometric (an overdispersed, negative-binomial-like tail). Genes are then ordered by
/// decreasing total count, as the converter does.
pub fn synthetic(cells: usize, genes: usize, nnz_per_cell: f64) -> CellMatrix {
    let shape = |g: usize| 1.0 / (g as f64 + 30.0).powf(1.1);
    let detected = |a: f64| -> f64 { (0..genes).map(|g| 1.0 - (-a * shape(g)).exp()).sum() };
    let (mut lo, mut hi) = (1e-3f64, 1e9f64);
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if detected(mid) < nnz_per_cell {
            lo = mid
        } else {
            hi = mid
        }
    }
    let means: Vec<f64> = (0..genes).map(|g| lo * shape(g)).collect();
    let rows: Vec<(Vec<i32>, Vec<i32>)> = (0..cells)
        .into_par_iter()
        .map(|c| {
            let mut rng = Rng(c as u64 * 7919 + 17);
            let size = (0.35 * rng.normal()).exp();
            let (mut idx, mut val) = (Vec::new(), Vec::new());
            for (g, &m) in means.iter().enumerate() {
                let lambda = m * size;
                if rng.unit() < 1.0 - (-lambda).exp() {
                    // geometric with mean ~ lambda on top of the first count
                    let q = lambda / (1.0 + lambda);
                    let extra = if q > 0.0 {
                        (rng.unit().ln() / q.ln()).floor()
                    } else {
                        0.0
                    };
                    idx.push(g as i32);
                    val.push((1.0 + extra).min(i32::MAX as f64) as i32);
                }
            }
            (idx, val)
        })
        .collect();
    let mut m = CellMatrix {
        n_cells: cells,
        n_genes: genes as u32,
        indptr: vec![0],
        indices: vec![],
        values: vec![],
    };
    for (i, v) in rows {
        m.indices.extend(i);
        m.values.extend(v);
        m.indptr.push(m.indices.len() as i64);
    }
    let order = m.order_by_decreasing_total();
    m.permute_genes(&order)
}
