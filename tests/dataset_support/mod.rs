//! Helpers shared by the dataset tests: a seeded RNG, random CSR data, temporary
//! directories, and the expected (dense, independently permuted) result of a write.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use deltacells::dataset::{Dataset, DatasetWriter, WriterOptions};
use deltacells::tile::ValuesOut;

/// splitmix64: small, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
    pub fn permutation(&mut self, n: usize) -> Vec<i32> {
        let mut v: Vec<i32> = (0..n as i32).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
        v
    }
}

/// A CSR matrix held by the test (rows = cells), indices sorted within rows.
#[derive(Debug, Clone)]
pub struct Csr {
    pub n_genes: u32,
    pub indptr: Vec<i64>,
    pub indices: Vec<i32>,
    pub values: Vec<i32>,
}

impl Csr {
    pub fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }

    /// Row r as a dense vector.
    pub fn dense_row(&self, r: usize) -> Vec<i32> {
        let mut out = vec![0; self.n_genes as usize];
        for j in self.indptr[r] as usize..self.indptr[r + 1] as usize {
            out[self.indices[j] as usize] = self.values[j];
        }
        out
    }
}

/// Random counts: about `density` of the entries nonzero, mostly small, with a few above
/// 65535 when `big` (value exceptions).
pub fn random_csr(rng: &mut Rng, n_rows: usize, n_genes: u32, density: f64, big: bool) -> Csr {
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for _ in 0..n_rows {
        // Some empty rows, some dense ones.
        let d = match rng.below(10) {
            0 => 0.0,
            1 => (density * 4.0).min(1.0),
            _ => density,
        };
        for g in 0..n_genes {
            if rng.chance(d) {
                indices.push(g as i32);
                let v = if big && rng.chance(0.002) {
                    65_536 + rng.below(1 << 30) as i32
                } else {
                    let range = if rng.chance(0.1) { 3000 } else { 5 };
                    1 + rng.below(range) as i32
                };
                values.push(v);
            }
        }
        indptr.push(indices.len() as i64);
    }
    Csr {
        n_genes,
        indptr,
        indices,
        values,
    }
}

/// Dense expected row r after the gene order: output column j = input column order[j].
pub fn expected_row(input: &Csr, order: Option<&[i32]>, r: usize) -> Vec<i32> {
    let dense = input.dense_row(r);
    match order {
        None => dense,
        Some(o) => o.iter().map(|&g| dense[g as usize]).collect(),
    }
}

/// A CSR result (from a gather or read_tile) row as a dense vector; checks that indices
/// increase strictly within the row.
pub fn dense_of(
    n_genes: u32,
    indptr: &[i64],
    indices: &[i32],
    values: &[i32],
    r: usize,
) -> Vec<i32> {
    let mut out = vec![0; n_genes as usize];
    let (a, b) = (indptr[r] as usize, indptr[r + 1] as usize);
    for j in a..b {
        if j > a {
            assert!(
                indices[j] > indices[j - 1],
                "row {r}: indices not increasing"
            );
        }
        assert!(values[j] >= 1, "row {r}: stored zero or negative count");
        out[indices[j] as usize] = values[j];
    }
    out
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "deltacells-test-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// Names of the entries of the directory, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fast settings for tests (the format does not depend on them).
pub fn test_options(tile_size: u64) -> WriterOptions {
    WriterOptions {
        tile_size,
        zstd_level: 1,
        n_chunks: 3,
        threads: 2,
        ..WriterOptions::default()
    }
}

/// Appends `input` in randomly sized slices (including empty ones), passing each slice's
/// indptr unrebased half of the time.
pub fn append_in_pieces(w: &mut DatasetWriter, input: &Csr, rng: &mut Rng) {
    let n = input.n_rows();
    let mut r = 0;
    while r <= n {
        let k = (rng.below(40) as usize).min(n - r);
        let ip = &input.indptr[r..=r + k];
        let (a, b) = (ip[0] as usize, ip[k] as usize);
        if rng.chance(0.5) {
            w.append_csr(k as u64, ip, &input.indices[a..b], &input.values[a..b])
                .unwrap();
        } else {
            let rebased: Vec<i64> = ip.iter().map(|&x| x - ip[0]).collect();
            w.append_csr(
                k as u64,
                &rebased,
                &input.indices[a..b],
                &input.values[a..b],
            )
            .unwrap();
        }
        if r == n {
            break;
        }
        r += k;
    }
}

/// Writes `input` as a dataset at `path`.
pub fn write_dataset(
    path: &Path,
    input: &Csr,
    opts: WriterOptions,
    order: Option<&[i32]>,
    names: Option<&[String]>,
    seed: u64,
) {
    let mut w = DatasetWriter::create(path, input.n_genes, opts).unwrap();
    if let Some(o) = order {
        w.set_gene_order(o).unwrap();
    }
    if let Some(n) = names {
        w.set_var_names(n).unwrap();
    }
    append_in_pieces(&mut w, input, &mut Rng::new(seed));
    w.finish().unwrap();
}

/// Gathers `cells` as int32 and checks every row against the expectation.
pub fn check_gather(ds: &Dataset, input: &Csr, order: Option<&[i32]>, cells: &[u64]) {
    let nnz = ds.batch_nnz(cells).unwrap();
    let mut indptr = vec![0i64; cells.len() + 1];
    let mut indices = vec![0i32; nnz as usize];
    let mut values = vec![0i32; nnz as usize];
    let got = ds
        .gather(
            cells,
            &mut indptr,
            &mut indices,
            ValuesOut::I32(&mut values),
        )
        .unwrap();
    assert_eq!(got, nnz);
    assert_eq!(indptr[cells.len()] as u64, nnz);
    for (i, &c) in cells.iter().enumerate() {
        assert_eq!(
            dense_of(input.n_genes, &indptr, &indices, &values, i),
            expected_row(input, order, c as usize),
            "row {i} (cell {c})"
        );
    }
}

/// The chunks holding `cells`, from the tiles' indexes, as (tile, chunk), sorted.
pub fn chunks_of(ds: &Dataset, cells: &[u64]) -> Vec<(u64, usize)> {
    let mut v: Vec<(u64, usize)> = cells
        .iter()
        .map(|&c| {
            let t = (0..ds.info().n_tiles)
                .find(|&t| {
                    let (first, n, _) = ds.tile_bounds(t).unwrap();
                    c >= first && c < first + n
                })
                .unwrap();
            let local = c - ds.tile_bounds(t).unwrap().0;
            let index = ds.tile_index(t).unwrap();
            let chunk = index
                .chunks
                .iter()
                .position(|e| e.cell_lo <= local && local < e.cell_hi)
                .unwrap();
            (t, chunk)
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
