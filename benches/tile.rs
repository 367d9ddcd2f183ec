//! Tile codec benchmark (not a test). Run:
//!
//!     cargo bench --features cli --bench tile
//!     cargo bench --features cli --bench tile -- --cells 2000 --reps 3   # quicker
//!
//! Measures, in one run and on the same frames: our decode with 1 thread and with all
//! threads; bare zstd decompression of the tile's frames into scratch (the floor the format
//! allows) and the CRC-32; encode time and size. First on a synthetic realistic tile
//! (10,000 cells, ~38,000 genes, ~5,000 nonzeros per cell, negative-binomial-like counts,
//! genes ordered by decreasing total, zstd 19, 8 chunks), then on the real matrices of
//! tests/data/scrna. Prints markdown tables for docs/performance.md.

use std::path::Path;
use std::time::Instant;

use deltacells::convert::mtx::{self, CellMatrix};
use deltacells::tile::{self, DecodeOptions, EncodeOptions, Tile, ValuesOut};
use rayon::prelude::*;
use zstd::zstd_safe::DCtx;

mod synthetic;
use synthetic::synthetic;

struct Args {
    cells: usize,
    genes: usize,
    nnz_per_cell: f64,
    level: i32,
    chunks: u32,
    reps: usize,
    synthetic: bool,
    real: bool,
}

fn args() -> Args {
    let mut a = Args {
        cells: 10_000,
        genes: 38_000,
        nnz_per_cell: 5_000.0,
        level: 19,
        chunks: 8,
        reps: 7,
        synthetic: true,
        real: true,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = |i: usize| v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--cells" => a.cells = next(i).parse().unwrap(),
            "--genes" => a.genes = next(i).parse().unwrap(),
            "--nnz-per-cell" => a.nnz_per_cell = next(i).parse().unwrap(),
            "--level" => a.level = next(i).parse().unwrap(),
            "--chunks" => a.chunks = next(i).parse().unwrap(),
            "--reps" => a.reps = next(i).parse().unwrap(),
            "--real-only" => {
                a.synthetic = false;
                i += 1;
                continue;
            }
            "--synthetic-only" => {
                a.real = false;
                i += 1;
                continue;
            }
            _ => {
                i += 1; // cargo bench passes --bench
                continue;
            }
        }
        i += 2;
    }
    a
}

/// Best (minimum) wall time of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Decompresses every frame of the tile into scratch with one reused context: the floor.
fn bare_zstd(t: &Tile<'_>, scratch: &mut Vec<u8>, dctx: &mut DCtx<'static>) -> usize {
    let mut total = 0;
    for e in &t.chunks {
        for s in [e.gaps, e.vals, e.vexc, e.gexc] {
            if s.len == 0 {
                continue;
            }
            scratch.clear();
            scratch.reserve(2 * e.nnz() as usize + 64);
            total += dctx.decompress(scratch, t.bytes(s)).unwrap();
        }
    }
    total
}

struct Row {
    name: String,
    cells: usize,
    genes: u32,
    nnz: usize,
    raw_mb: f64,
    tile_mb: f64,
    encode_s: f64,
    floor_1t: f64,
    crc_1t: f64,
    fill_1t: f64,
    dec_1t: f64,
    dec_1t_nocrc: f64,
    floor_all: f64,
    dec_all: f64,
}

fn measure(name: &str, m: &CellMatrix, a: &Args) -> Row {
    let opts = EncodeOptions {
        zstd_level: a.level,
        n_chunks: a.chunks,
        threads: 0,
    };
    let t0 = Instant::now();
    let blob = tile::encode_tile(&m.as_csr(), opts).unwrap();
    let encode_s = t0.elapsed().as_secs_f64();
    let t = Tile::parse(&blob, true).unwrap();
    let nnz = m.indices.len();
    let mut indptr = vec![0i64; m.n_cells + 1];
    let mut indices = vec![0i32; nnz];
    let mut values = vec![0i32; nnz];
    let decode = |threads: usize,
                  verify_crc: bool,
                  indptr: &mut [i64],
                  indices: &mut [i32],
                  values: &mut [i32]| {
        let o = DecodeOptions {
            threads,
            verify_crc,
        };
        tile::decode_tile(&blob, o, indptr, indices, ValuesOut::I32(values)).unwrap();
    };
    let dec_1t = best(a.reps, || {
        decode(1, true, &mut indptr, &mut indices, &mut values)
    });
    let dec_1t_nocrc = best(a.reps, || {
        decode(1, false, &mut indptr, &mut indices, &mut values)
    });
    let dec_all = best(a.reps, || {
        decode(0, true, &mut indptr, &mut indices, &mut values)
    });
    assert!(
        indices == m.indices && values == m.values,
        "{name}: decode mismatch"
    );
    let mut scratch = Vec::new();
    let mut dctx = DCtx::create();
    let floor_1t = best(a.reps, || {
        bare_zstd(&t, &mut scratch, &mut dctx);
    });
    // Writing the decoded output alone (int32 indices + values), for reference.
    let fill_1t = best(a.reps, || {
        indices.fill(std::hint::black_box(1));
        values.fill(std::hint::black_box(2));
    });
    let crc_1t = best(a.reps, || {
        std::hint::black_box(crc32fast::hash(&blob[64..]));
    });
    // The floor with all cores: chunks decompressed in parallel, nothing else.
    let pool = rayon::ThreadPoolBuilder::new().build().unwrap();
    let floor_all = best(a.reps, || {
        pool.install(|| {
            t.chunks.par_iter().for_each(|e| {
                let mut d = DCtx::create();
                let mut s = Vec::with_capacity(2 * e.nnz() as usize + 64);
                for st in [e.gaps, e.vals, e.vexc, e.gexc] {
                    if st.len > 0 {
                        s.clear();
                        d.decompress(&mut s, t.bytes(st)).unwrap();
                    }
                }
            })
        })
    });
    Row {
        name: name.to_string(),
        cells: m.n_cells,
        genes: m.n_genes,
        nnz,
        raw_mb: (nnz * 8) as f64 / 1e6,
        tile_mb: blob.len() as f64 / 1e6,
        encode_s,
        floor_1t,
        crc_1t,
        fill_1t,
        dec_1t,
        dec_1t_nocrc,
        floor_all,
        dec_all,
    }
}

fn load(dir: &Path) -> CellMatrix {
    let f = mtx::find_10x_folder(dir).unwrap();
    let m = mtx::read_matrix_market(&f.matrix, true).unwrap();
    let order = m.order_by_decreasing_total();
    m.permute_genes(&order)
}

fn main() {
    let a = args();
    let threads = rayon::current_num_threads();
    let mut rows = Vec::new();
    if a.synthetic {
        let t = Instant::now();
        let m = synthetic(a.cells, a.genes, a.nnz_per_cell);
        eprintln!(
            "synthetic tile: {} cells x {} genes, {} nonzeros ({:.0}/cell), max count {}, generated in {:.1}s",
            m.n_cells,
            m.n_genes,
            m.indices.len(),
            m.indices.len() as f64 / m.n_cells as f64,
            m.values.iter().max().unwrap_or(&0),
            t.elapsed().as_secs_f64()
        );
        rows.push(measure("synthetic", &m, &a));
    }
    if a.real {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scrna");
        for name in [
            "mouse-10k-cells-1k-genes",
            "human-559-cells-whole-transcriptome",
            "10x-v3-1107-cells-chr21",
        ] {
            let m = load(&root.join(name));
            rows.push(measure(name, &m, &a));
        }
    }
    println!(
        "\nzstd level {}, {} chunks requested, best of {} runs, {} threads for \"all\".\n",
        a.level, a.chunks, a.reps, threads
    );
    println!("| tile | cells | genes | nnz | int32 CSR MB | tile MB | bytes/nnz | encode s (all threads) |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.2} | {:.3} | {:.2} |",
            r.name,
            r.cells,
            r.genes,
            r.nnz,
            r.raw_mb,
            r.tile_mb,
            r.tile_mb * 1e6 / r.nnz as f64,
            r.encode_s
        );
    }
    println!();
    println!("| tile | bare zstd 1T ms | CRC 1T ms | output fill 1T ms | decode 1T ms | decode 1T / bare zstd | **decode 1T / (bare zstd + CRC)** | decode 1T no CRC / bare zstd | decode 1T Mnnz/s | bare zstd all ms | decode all ms | speed-up all/1T | decode all / bare zstd all |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | **{:.3}** | {:.3} | {:.0} | {:.2} | {:.2} | {:.2} | {:.3} |",
            r.name,
            r.floor_1t * 1e3,
            r.crc_1t * 1e3,
            r.fill_1t * 1e3,
            r.dec_1t * 1e3,
            r.dec_1t / r.floor_1t,
            r.dec_1t / (r.floor_1t + r.crc_1t),
            r.dec_1t_nocrc / r.floor_1t,
            r.nnz as f64 / r.dec_1t / 1e6,
            r.floor_all * 1e3,
            r.dec_all * 1e3,
            r.dec_1t / r.dec_all,
            r.dec_all / r.floor_all,
        );
    }
}
