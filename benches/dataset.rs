//! Dataset benchmark (not a test). Run:
//!
//!     cargo bench --features cli --bench dataset
//!     cargo bench --features cli --bench dataset -- --batches 20 --reps 2   # quicker
//!
//! On the real matrices of tests/data/scrna, in one run:
//! 1. gathers: shuffled 5,000-cell batches from a 10-tile dataset (the mouse 10k-cell set,
//!    1,000 cells per tile, zstd 19), with 1 thread and with all threads; baseline: the same
//!    gathers from the matrix held decoded in memory (a plain CSR row copy, the floor).
//! 2. conversion throughput (`convert::convert`, defaults: zstd 19, 8 chunks, genes sorted):
//!    cells/s and MB/s of input; baseline: parsing the gzipped Matrix Market alone.
//! 3. size: bytes per cell of the dataset vs the gzipped Matrix Market input (matrix +
//!    features + barcodes) and vs an .h5ad of the same data (gzip-compressed, as anndata
//!    writes with compression="gzip"; generated with tests/data/make_h5ad.py when python3 +
//!    anndata are available, else only the bundled chr21 .h5ad).
//!
//! Prints markdown tables.

use std::path::{Path, PathBuf};
use std::time::Instant;

use deltacells::convert::{self, mtx, source::MtxSource, ConvertOptions};
use deltacells::dataset::{Dataset, WriterOptions};
use deltacells::tile::ValuesOut;

struct Args {
    batches: usize,
    reps: usize,
}

fn args() -> Args {
    let mut a = Args {
        batches: 40,
        reps: 3,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--batches" => a.batches = next.parse().unwrap(),
            "--reps" => a.reps = next.parse().unwrap(),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn shuffled(n: u64, rng: &mut Rng) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    for i in (1..v.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scrna")
}

fn tmp(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-dataset")
        .join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    p
}

fn best<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn files_bytes(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

fn main() {
    let a = args();
    let threads_all = deltacells::pool::default_threads();

    // 1. Gathers from a 10-tile dataset.
    let mouse = data().join("mouse-10k-cells-1k-genes");
    let ds_path = tmp("mouse-10tiles");
    let mut src = MtxSource::open(&mouse).unwrap();
    let m = src.matrix().clone();
    let opts = ConvertOptions {
        writer: WriterOptions {
            tile_size: 1000,
            ..WriterOptions::default()
        },
        sort_genes: true,
    };
    convert::convert(&mut src, &ds_path, &opts, &deltacells::progress::Silent).unwrap();
    let ds = Dataset::open(&ds_path).unwrap();
    assert_eq!(ds.info().n_tiles, 10);
    let mut rng = Rng(42);
    let batches: Vec<Vec<u64>> = (0..a.batches)
        .map(|_| shuffled(m.n_cells as u64, &mut rng)[..5000].to_vec())
        .collect();
    let max_nnz = batches
        .iter()
        .map(|b| ds.batch_nnz(b).unwrap())
        .max()
        .unwrap() as usize;
    let (mut ip, mut ix, mut v) = (vec![0i64; 5001], vec![0i32; max_nnz], vec![0f32; max_nnz]);
    // Baseline: the same rows copied from the decoded matrix in memory.
    let base = best(a.reps, || {
        for b in &batches {
            let mut o = 0usize;
            ip[0] = 0;
            for (r, &c) in b.iter().enumerate() {
                let (s, e) = (
                    m.indptr[c as usize] as usize,
                    m.indptr[c as usize + 1] as usize,
                );
                ix[o..o + e - s].copy_from_slice(&m.indices[s..e]);
                for (d, &x) in v[o..o + e - s].iter_mut().zip(&m.values[s..e]) {
                    *d = x as f32;
                }
                o += e - s;
                ip[r + 1] = o as i64;
            }
        }
    });
    let cells = (a.batches * 5000) as f64;
    println!(
        "### Gathers: shuffled 5,000-cell batches, 10-tile dataset (mouse 10k x 1k, zstd 19)\n"
    );
    println!("| reader | threads | cells/s | batches/s | time vs in-memory copy |");
    println!("|---|---|---|---|---|");
    println!(
        "| in-memory CSR row copy (baseline) | 1 | {:.0} | {:.1} | 1.0x |",
        cells / base,
        a.batches as f64 / base
    );
    for threads in [1, threads_all] {
        ds.set_threads(threads);
        let t = best(a.reps, || {
            for b in &batches {
                ds.gather(b, &mut ip, &mut ix, ValuesOut::F32(&mut v))
                    .unwrap();
            }
        });
        println!(
            "| Dataset::gather (float32 out) | {threads} | {:.0} | {:.1} | {:.1}x |",
            cells / t,
            a.batches as f64 / t,
            t / base
        );
    }

    // 2. Conversion throughput, 3. size.
    println!("\n### Conversion (zstd 19, 8 chunks, 10,000-cell tiles, genes sorted; {threads_all} threads)\n");
    println!("| input | cells x genes | nnz | parse .mtx.gz alone (baseline) | convert | cells/s | MB/s of input | time vs parse |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut sizes = Vec::new();
    for name in [
        "10x-v3-1107-cells-chr21",
        "human-559-cells-whole-transcriptome",
        "mouse-10k-cells-1k-genes",
    ] {
        let dir = data().join(name);
        let f = mtx::find_10x_folder(&dir).unwrap();
        let input_bytes = files_bytes(&[f.matrix.clone(), f.features.clone(), f.barcodes.clone()]);
        let parse = best(a.reps, || {
            mtx::read_matrix_market(&f.matrix, true).unwrap();
        });
        let out = tmp(name);
        let mut summary = None;
        let t = best(a.reps, || {
            let _ = std::fs::remove_dir_all(&out);
            let mut s = convert::open_source(&dir).unwrap();
            summary = Some(
                convert::convert(
                    s.as_mut(),
                    &out,
                    &ConvertOptions::default(),
                    &deltacells::progress::Silent,
                )
                .unwrap(),
            );
        });
        let s = summary.unwrap();
        println!(
            "| {name} | {} x {} | {} | {:.3} s | {:.3} s | {:.0} | {:.2} | {:.1}x |",
            s.n_cells,
            s.n_genes,
            s.nnz,
            parse,
            t,
            s.n_cells as f64 / t,
            input_bytes as f64 / 1e6 / t,
            t / parse
        );
        sizes.push((
            name.to_string(),
            s.n_cells,
            convert::source::dir_bytes(&out),
            input_bytes,
            dir,
        ));
    }

    // .h5ad of the same data: generated when possible, else the bundled chr21 one.
    let h5dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-dataset/h5ad");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/make_h5ad.py");
    println!("\n### Size on disk (bytes per cell)\n");
    println!("| data | cells | deltacells dataset | 10x .mtx.gz + tsv.gz | dataset / mtx.gz | .h5ad (gzip) | dataset / h5ad |");
    println!("|---|---|---|---|---|---|---|");
    for (name, n, ds_bytes, mtx_bytes, dir) in sizes {
        let h5 = h5dir.join(&name).join("csr.h5ad");
        if !h5.exists() {
            let _ = std::process::Command::new("python3")
                .arg(&script)
                .arg(&dir)
                .arg(h5dir.join(&name))
                .arg("csr")
                .output();
        }
        let h5 = if h5.exists() {
            Some(h5)
        } else if name == "10x-v3-1107-cells-chr21" {
            Some(data().join("10x-v3-1107-cells-chr21.h5ad"))
        } else {
            None
        };
        let per = |b: u64| b as f64 / n as f64;
        let (h5col, ratio) = match h5.and_then(|p| std::fs::metadata(p).ok()) {
            Some(md) => (
                format!("{:.1}", per(md.len())),
                format!("{:.2}", ds_bytes as f64 / md.len() as f64),
            ),
            None => ("n/a".into(), "n/a".into()),
        };
        println!(
            "| {name} | {n} | {:.1} | {:.1} | {:.2} | {h5col} | {ratio} |",
            per(ds_bytes),
            per(mtx_bytes),
            ds_bytes as f64 / mtx_bytes as f64
        );
    }
    println!("\n(dataset bytes include gene_order.npy and var_names.txt; the .h5ad includes obs/var tables built by make_h5ad.py.)");
}
