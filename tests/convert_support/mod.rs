//! Helpers of the converter tests: running the built `deltacells` binary, temporary
//! directories, and an independent Matrix Market parser (written for the tests, sharing no
//! code with src/convert) that yields sorted (cell, gene, count) triplets.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

use deltacells::dataset::Dataset;
use deltacells::tile::ValuesOut;

pub const BIN: &str = env!("CARGO_BIN_EXE_deltacells");

pub fn scrna(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/scrna")
        .join(name)
}

pub const FOLDERS: [&str; 3] = [
    "10x-v3-1107-cells-chr21",
    "human-559-cells-whole-transcriptome",
    "mouse-10k-cells-1k-genes",
];

/// A fresh directory under target/, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "convert-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("DELTACELLS_NUM_THREADS", "2")
        .output()
        .expect("run deltacells")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs and asserts success.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "deltacells {args:?} failed: {}{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Runs and asserts exit status 1 (bad data) with a one-line error; returns that line.
pub fn fails(args: &[&str]) -> String {
    fails_with(1, args)
}

/// Runs and asserts exit status `code` (`deltacells --help` lists them) with a one-line
/// error; returns that line.
pub fn fails_with(code: i32, args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "deltacells {args:?} should fail: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let e = stderr(&o);
    let last = e.lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("deltacells: error: "), "{e}");
    last
}

/// A Matrix Market file (gzipped or not) parsed independently: (n_rows, n_cols, sorted
/// (col, row, value) triplets with 0-based indices, zeros dropped). For 10x files rows are
/// genes and cols are cells, so the triplets are (cell, gene, count).
pub fn parse_mtx(path: &Path) -> (u64, u64, Vec<(u64, u64, i64)>) {
    let raw = std::fs::read(path).unwrap();
    let mut text = String::new();
    if raw.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_string(&mut text)
            .unwrap();
    } else {
        text = String::from_utf8(raw).unwrap();
    }
    let mut lines = text.lines().filter(|l| !l.starts_with('%'));
    let size: Vec<u64> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let mut t = Vec::new();
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.is_empty() {
            continue;
        }
        let v: f64 = w[2].parse().unwrap();
        if v != 0.0 {
            t.push((
                w[1].parse::<u64>().unwrap() - 1,
                w[0].parse::<u64>().unwrap() - 1,
                v as i64,
            ));
        }
    }
    assert_eq!(t.len() as u64, size[2], "{}: entries", path.display());
    t.sort_unstable();
    (size[0], size[1], t)
}

/// Every cell of a dataset as sorted (cell, input gene, count) triplets: dataset column j
/// is mapped back to input gene gene_order[j] when the dataset records an order.
pub fn dataset_triplets(ds: &Dataset) -> Vec<(u64, u64, i64)> {
    let info = ds.info();
    let cells: Vec<u64> = (0..info.n_cells).collect();
    let nnz = ds.batch_nnz(&cells).unwrap() as usize;
    let mut indptr = vec![0i64; cells.len() + 1];
    let mut indices = vec![0i32; nnz];
    let mut values = vec![0i32; nnz];
    ds.gather(
        &cells,
        &mut indptr,
        &mut indices,
        ValuesOut::I32(&mut values),
    )
    .unwrap();
    let order = if info.has_gene_order {
        Some(ds.gene_order().unwrap().to_vec())
    } else {
        None
    };
    let mut t = Vec::with_capacity(nnz);
    for c in 0..cells.len() {
        for k in indptr[c] as usize..indptr[c + 1] as usize {
            let j = indices[k] as usize;
            let g = order.as_ref().map_or(j as u64, |o| o[j] as u64);
            t.push((c as u64, g, values[k] as i64));
        }
    }
    t.sort_unstable();
    t
}

/// The lines of a (gzipped) text file.
pub fn gz_lines(path: &Path) -> Vec<String> {
    let raw = std::fs::read(path).unwrap();
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_string(&mut text)
        .unwrap();
    text.lines().map(str::to_string).collect()
}

/// Whether python3 with anndata is available (to generate .h5ad variants).
pub fn have_anndata() -> bool {
    Command::new("python3")
        .args(["-c", "import anndata, h5py"])
        .output()
        .is_ok_and(|o| o.status.success())
}
