//! Reading at the format's limit (issue 13): every figure as a ratio against its floor,
//! measured in the same run. Run (first the data, outside timing, then the figures alone):
//!
//!     cargo bench --features cli --bench reads -- --prepare          # writes the datasets once
//!     /work/team/bin/quiet cargo bench --features cli --bench reads  # prints every table
//!     cargo bench --features cli --bench reads -- --quick            # small data, a smoke run
//!
//! Data (synthetic realistic counts, benches/synthetic; zstd 19, 8 chunks per tile), kept
//! under target/bench-reads/: 10,000 cells x 38,000 genes, ~5,000 nonzeros per cell, as
//! datasets of 1,000-cell tiles (10 tiles), of 500-cell tiles (the first 5,000 cells, 10
//! tiles) and of one 5,000-cell tile, and a 4,000-cell tile (20 M nonzeros) for decoding.
//!
//! Floors, each measured beside what it bounds, on the same bytes:
//! * gather: reading the touched tiles whole into a reused buffer, their CRC-32, and bare
//!   zstd of only the chunks holding the requested cells (one reused context, scratch out);
//! * batches: reading the same dataset tile by tile in order (`read_tile` into caller
//!   buffers) — the iteration must deliver as many cells per second;
//! * tile decode: bare zstd of every frame + CRC-32.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use deltacells::convert::mtx::CellMatrix;
use deltacells::dataset::{Dataset, DatasetWriter, WriterOptions};
use deltacells::tile::{self, DecodeOptions, EncodeOptions, Tile, ValuesOut};
use rayon::prelude::*;
use zstd::zstd_safe::DCtx;

mod synthetic;
use synthetic::{synthetic, Rng};

struct Args {
    prepare_only: bool,
    quick: bool,
    reps: usize,
    /// Sections to run (empty = all): gather, batches, decode.
    only: Vec<String>,
    /// Run one piece once, for `valgrind --tool=callgrind` (decode-floor, decode-ours).
    callgrind: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        prepare_only: false,
        quick: false,
        reps: 5,
        only: Vec::new(),
        callgrind: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        match v[i].as_str() {
            "--prepare" => a.prepare_only = true,
            "--quick" => a.quick = true,
            "--reps" => {
                a.reps = v[i + 1].parse().unwrap();
                i += 1
            }
            "--only" => {
                a.only.push(v[i + 1].clone());
                i += 1
            }
            "--callgrind" => {
                a.callgrind = Some(v[i + 1].clone());
                i += 1
            }
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    a
}

/// Where the data lives and what it is.
struct Data {
    root: PathBuf,
    cells: usize,
    genes: usize,
    nnz_per_cell: f64,
}

impl Data {
    fn new(quick: bool) -> Data {
        let (cells, genes, nnz_per_cell) = if quick {
            (2_000, 38_000, 500.0)
        } else {
            (10_000, 38_000, 5_000.0)
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/bench-reads")
            .join(format!("v1-{cells}x{genes}-{nnz_per_cell}"));
        Data {
            root,
            cells,
            genes,
            nnz_per_cell,
        }
    }
    fn tiles_1000(&self) -> PathBuf {
        self.root.join("tiles-1000")
    }
    fn tiles_500(&self) -> PathBuf {
        self.root.join("tiles-500")
    }
    fn tiles_5000(&self) -> PathBuf {
        self.root.join("tiles-5000")
    }
    fn decode_tile(&self) -> PathBuf {
        self.root.join("tile-4000.dct")
    }
    fn ready(&self) -> bool {
        self.root.join("done").exists()
    }

    fn prepare(&self) {
        if self.ready() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        std::fs::create_dir_all(&self.root).unwrap();
        let t = Instant::now();
        let m = synthetic(self.cells, self.genes, self.nnz_per_cell);
        eprintln!(
            "data: {} cells x {} genes, {} nonzeros, generated in {:.1}s",
            m.n_cells,
            m.n_genes,
            m.indices.len(),
            t.elapsed().as_secs_f64()
        );
        let scale = self.cells / 10;
        write(&m, m.n_cells, scale as u64, &self.tiles_1000());
        write(&m, m.n_cells / 2, scale as u64 / 2, &self.tiles_500());
        write(&m, m.n_cells / 2, m.n_cells as u64 / 2, &self.tiles_5000());
        let n = 2 * m.n_cells / 5;
        let part = CellMatrix {
            n_cells: n,
            n_genes: m.n_genes,
            indptr: m.indptr[..=n].to_vec(),
            indices: m.indices[..m.indptr[n] as usize].to_vec(),
            values: m.values[..m.indptr[n] as usize].to_vec(),
        };
        let opts = EncodeOptions {
            zstd_level: 19,
            n_chunks: 8,
            threads: 0,
        };
        let blob = tile::encode_tile(&part.as_csr(), opts).unwrap();
        std::fs::write(self.decode_tile(), blob).unwrap();
        std::fs::write(self.root.join("done"), b"").unwrap();
        eprintln!("data written in {:.1}s", t.elapsed().as_secs_f64());
    }
}

/// The first `cells` cells of `m` as a dataset of `tile_size`-cell tiles (zstd 19, 8 chunks).
fn write(m: &CellMatrix, cells: usize, tile_size: u64, path: &Path) {
    let opts = WriterOptions {
        tile_size,
        n_chunks: 8,
        zstd_level: 19,
        threads: 0,
        ..WriterOptions::default()
    };
    let mut w = DatasetWriter::create(path, m.n_genes, opts).unwrap();
    let end = m.indptr[cells] as usize;
    w.append_csr(
        cells as u64,
        &m.indptr[..=cells],
        &m.indices[..end],
        &m.values[..end],
    )
    .unwrap();
    w.finish().unwrap();
}

/// Minimum over `reps` runs of each closure, the two run alternately (so that a change of
/// machine load hits both), in seconds.
fn best_pair(reps: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    a();
    b();
    let (mut ta, mut tb) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        let t = Instant::now();
        a();
        ta = ta.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        b();
        tb = tb.min(t.elapsed().as_secs_f64());
    }
    (ta, tb)
}

/// The gather floor's view of one tile: its path and the frames of each chunk.
struct FloorTile {
    path: PathBuf,
    frames: Vec<Vec<(usize, usize)>>,
}

fn floor_tiles(ds: &Dataset) -> Vec<FloorTile> {
    (0..ds.info().n_tiles)
        .map(|t| {
            let path = ds.root().join(format!("tiles/tile_{t:06}.dct"));
            let blob = std::fs::read(&path).unwrap();
            let tile = Tile::parse(&blob, true).unwrap();
            let frames = tile
                .chunks
                .iter()
                .map(|e| {
                    [e.gaps, e.vals, e.vexc, e.gexc]
                        .iter()
                        .filter(|s| s.len > 0)
                        .map(|s| (s.off as usize, s.len as usize))
                        .collect()
                })
                .collect();
            FloorTile { path, frames }
        })
        .collect()
}

/// Reusable state of the floor: one read buffer, one zstd context, one scratch.
struct Floor {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    dctx: DCtx<'static>,
}

impl Floor {
    fn new() -> Floor {
        Floor {
            buf: Vec::new(),
            scratch: Vec::new(),
            dctx: DCtx::create(),
        }
    }
    /// Reads tile `t` whole, checks its CRC, decompresses the frames of `chunks`.
    fn tile(&mut self, t: &FloorTile, chunks: &[usize]) -> usize {
        self.buf.clear();
        File::open(&t.path)
            .unwrap()
            .read_to_end(&mut self.buf)
            .unwrap();
        let mut out = crc32fast::hash(&self.buf[64..]) as usize;
        for &c in chunks {
            for &(off, len) in &t.frames[c] {
                self.scratch.clear();
                self.scratch.reserve(8 << 20);
                out += self
                    .dctx
                    .decompress(&mut self.scratch, &self.buf[off..off + len])
                    .unwrap();
            }
        }
        out
    }
}

/// The touched (tile, sorted distinct chunks) of a set of cells.
fn touched(ds: &Dataset, cells: &[u64]) -> Vec<(usize, Vec<usize>)> {
    let plan = ds.plan_gather(cells).unwrap();
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (t, c) in plan.chunks() {
        match out.last_mut() {
            Some((lt, cs)) if *lt == t as usize => cs.push(c),
            _ => out.push((t as usize, vec![c])),
        }
    }
    out
}

/// `draws` sets of `k` random cells: from tile `tile` only, or spread evenly over all the
/// dataset's tiles (k / n_tiles in each).
fn draws(ds: &Dataset, k: usize, tile: Option<u64>, n: usize, seed: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(seed);
    let n_tiles = ds.info().n_tiles;
    (0..n)
        .map(|_| {
            (0..k)
                .map(|i| {
                    let t = tile.unwrap_or(i as u64 % n_tiles);
                    let (first, cells, _) = ds.tile_bounds(t).unwrap();
                    first + rng.next() % cells
                })
                .collect()
        })
        .collect()
}

struct Figure {
    what: String,
    ours: f64,
    floor: f64,
    floor_name: &'static str,
    goal: &'static str,
}

fn print_figures(title: &str, figs: &[Figure]) {
    println!("\n### {title}\n");
    println!("| read | ours ms | floor ms | floor | **ours / floor** | goal |");
    println!("|---|---|---|---|---|---|");
    for f in figs {
        println!(
            "| {} | {:.3} | {:.3} | {} | **{:.3}** | {} |",
            f.what,
            f.ours * 1e3,
            f.floor * 1e3,
            f.floor_name,
            f.ours / f.floor,
            f.goal
        );
    }
}

/// Times gathers of `sets` (threads, cache off) against the floor; per gather, in seconds.
fn gather_vs_floor(ds: &Dataset, sets: &[Vec<u64>], threads: usize, reps: usize) -> (f64, f64) {
    ds.set_threads(threads);
    ds.set_cache_bytes(0);
    let tiles = floor_tiles(ds);
    let plans: Vec<Vec<(usize, Vec<usize>)>> = sets.iter().map(|s| touched(ds, s)).collect();
    let max_nnz = sets.iter().map(|s| ds.batch_nnz(s).unwrap()).max().unwrap() as usize;
    let max_rows = sets.iter().map(Vec::len).max().unwrap();
    let (mut ip, mut ix, mut vs) = (
        vec![0i64; max_rows + 1],
        vec![0i32; max_nnz],
        vec![0f32; max_nnz],
    );
    let mut floor = Floor::new();
    let (ours, fl) = best_pair(
        reps,
        || {
            for s in sets {
                ds.gather(s, &mut ip, &mut ix, ValuesOut::F32(&mut vs))
                    .unwrap();
            }
        },
        || {
            let mut sink = 0;
            for p in &plans {
                for (t, chunks) in p {
                    sink += floor.tile(&tiles[*t], chunks);
                }
            }
            std::hint::black_box(sink);
        },
    );
    (ours / sets.len() as f64, fl / sets.len() as f64)
}

fn gathers(data: &Data, reps: usize) {
    let one = Dataset::open(data.tiles_5000()).unwrap();
    let ten = Dataset::open(data.tiles_500()).unwrap();
    let mut figs = Vec::new();
    for k in [10usize, 100] {
        for (name, ds, tile) in [("one 5,000-cell tile", &one, Some(0)), ("ten 500-cell tiles", &ten, None)] {
            let sets = draws(ds, k, tile, 12, 7 + k as u64);
            let (ours, floor) = gather_vs_floor(ds, &sets, 1, reps);
            figs.push(Figure {
                what: format!("{k} random cells, {name}, 1 thread, cache off"),
                ours,
                floor,
                floor_name: "read touched tiles + CRC + zstd of touched chunks",
                goal: "<= 1.2",
            });
        }
    }
    print_figures("Gathers (float32 out), per gather", &figs);

    // The one-thread path: 10 cells over ten 1,000-cell tiles, 1 and 2 threads.
    let ds = Dataset::open(data.tiles_1000()).unwrap();
    let sets = draws(&ds, 10, None, 12, 99);
    let (t1, f1) = gather_vs_floor(&ds, &sets, 1, reps);
    let (t2, _) = gather_vs_floor(&ds, &sets, 2, reps);
    println!("\n10 cells across ten 1,000-cell tiles, cache off: 1 thread {:.2} ms ({:.3}x its floor {:.2} ms), 2 threads {:.2} ms (speed-up {:.2}x)",
        t1 * 1e3, t1 / f1, f1 * 1e3, t2 * 1e3, t1 / t2);
    // Default cache: the same 10 cells gathered again and again.
    ds.set_cache_bytes(deltacells::dataset::DEFAULT_CACHE_BYTES);
    ds.set_threads(1);
    let s = &sets[0];
    let nnz = ds.batch_nnz(s).unwrap() as usize;
    let (mut ip, mut ix, mut vs) = (vec![0i64; s.len() + 1], vec![0i32; nnz], vec![0f32; nnz]);
    let t = Instant::now();
    ds.gather(s, &mut ip, &mut ix, ValuesOut::F32(&mut vs)).unwrap();
    let first = t.elapsed().as_secs_f64();
    let (again, _) = best_pair(reps, || {
        ds.gather(s, &mut ip, &mut ix, ValuesOut::F32(&mut vs)).unwrap();
    }, || {});
    println!("the same 10 cells, default cache (256 MiB), 1 thread: first call {:.2} ms, again {:.3} ms", first * 1e3, again * 1e3);
}

/// Decompresses every frame of the tile into scratch with one reused context.
#[inline(never)]
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

#[inline(never)]
fn floor_decode(blob: &[u8], t: &Tile<'_>, scratch: &mut Vec<u8>, dctx: &mut DCtx<'static>) -> usize {
    crc32fast::hash(&blob[64..]) as usize + bare_zstd(t, scratch, dctx)
}

#[inline(never)]
fn our_decode(blob: &[u8], threads: usize, ip: &mut [i64], ix: &mut [i32], vs: &mut [i32]) -> u64 {
    let o = DecodeOptions {
        threads,
        verify_crc: true,
    };
    tile::decode_tile(blob, o, ip, ix, ValuesOut::I32(vs)).unwrap()
}

fn decode(data: &Data, reps: usize, callgrind: Option<&str>) {
    let blob = std::fs::read(data.decode_tile()).unwrap();
    let t = Tile::parse(&blob, true).unwrap();
    let (cells, nnz) = (t.header.n_cells as usize, t.header.nnz as usize);
    let (mut ip, mut ix, mut vs) = (vec![0i64; cells + 1], vec![0i32; nnz], vec![0i32; nnz]);
    let mut scratch = Vec::new();
    let mut dctx = DCtx::create();
    match callgrind {
        Some("decode-floor") => {
            std::hint::black_box(floor_decode(&blob, &t, &mut scratch, &mut dctx));
            return;
        }
        Some("decode-ours") => {
            std::hint::black_box(our_decode(&blob, 1, &mut ip, &mut ix, &mut vs));
            return;
        }
        _ => {}
    }
    let (ours1, floor1) = best_pair(
        reps,
        || {
            our_decode(&blob, 1, &mut ip, &mut ix, &mut vs);
        },
        || {
            std::hint::black_box(floor_decode(&blob, &t, &mut scratch, &mut dctx));
        },
    );
    let threads = deltacells::pool::default_threads();
    let (ours_all, floor_all) = best_pair(
        reps,
        || {
            our_decode(&blob, threads, &mut ip, &mut ix, &mut vs);
        },
        || {
            let pool = deltacells::pool::pool(threads.max(2)).unwrap();
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
            });
        },
    );
    println!(
        "\n### Tile decode: {cells} cells, {} genes, {nnz} nonzeros, {:.1} MB, zstd 19, {} chunks\n",
        t.header.n_genes,
        blob.len() as f64 / 1e6,
        t.chunks.len()
    );
    println!("| decode | ours ms | floor ms | floor | **ours / floor** | goal |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| 1 thread | {:.2} | {:.2} | bare zstd + CRC-32, 1 thread | **{:.3}** | <= 1.15 |",
        ours1 * 1e3,
        floor1 * 1e3,
        ours1 / floor1
    );
    println!(
        "| {threads} threads | {:.2} | {:.2} | bare zstd of the chunks in parallel | **{:.3}** | speed-up {:.2}x (goal >= 1.85) |",
        ours_all * 1e3,
        floor_all * 1e3,
        ours_all / floor_all,
        ours1 / ours_all
    );
}

fn main() {
    let a = args();
    let data = Data::new(a.quick);
    data.prepare();
    if a.prepare_only {
        return;
    }
    if let Some(what) = a.callgrind.as_deref() {
        decode(&data, 1, Some(what));
        return;
    }
    let run = |s: &str| a.only.is_empty() || a.only.iter().any(|o| o == s);
    println!("data: {}", data.root.display());
    if run("gather") {
        gathers(&data, a.reps);
    }
    if run("decode") {
        decode(&data, a.reps, None);
    }
}
