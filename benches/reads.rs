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
use std::sync::Arc;
use std::time::Instant;

use deltacells::convert::mtx::CellMatrix;
use deltacells::dataset::{Batches, Dataset, DatasetWriter, WriterOptions};
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
    /// Force a kernel path (scalar, sse2, avx2); default: the best the CPU has.
    kernels: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        prepare_only: false,
        quick: false,
        reps: 5,
        only: Vec::new(),
        callgrind: None,
        kernels: None,
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
            "--kernels" => {
                a.kernels = Some(v[i + 1].clone());
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

/// Wall time and process CPU time (all threads), in seconds. On a machine shared with other
/// work, CPU time is the steadier of the two for one-thread figures (it leaves out the time
/// spent waiting for a core, not the effects of shared caches and memory bandwidth).
#[derive(Debug, Clone, Copy)]
struct Times {
    wall: f64,
    cpu: f64,
}

impl Times {
    const INF: Times = Times {
        wall: f64::INFINITY,
        cpu: f64::INFINITY,
    };
    fn min(self, o: Times) -> Times {
        Times {
            wall: self.wall.min(o.wall),
            cpu: self.cpu.min(o.cpu),
        }
    }
    fn per(self, n: usize) -> Times {
        Times {
            wall: self.wall / n as f64,
            cpu: self.cpu / n as f64,
        }
    }
}

fn cpu_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn time(f: impl FnOnce()) -> Times {
    let (w, c) = (Instant::now(), cpu_now());
    f();
    Times {
        wall: w.elapsed().as_secs_f64(),
        cpu: cpu_now() - c,
    }
}

/// Minimum over `reps` runs of each closure, the two run alternately (so that a change of
/// machine load hits both).
fn best_pair(reps: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Times, Times) {
    a();
    b();
    let (mut ta, mut tb) = (Times::INF, Times::INF);
    for _ in 0..reps {
        ta = ta.min(time(&mut a));
        tb = tb.min(time(&mut b));
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
    ours: Times,
    floor: Times,
    floor_name: &'static str,
    goal: &'static str,
}

fn print_figures(title: &str, figs: &[Figure]) {
    println!("\n### {title}\n");
    println!("| read | ours ms | floor ms | floor | **ours / floor** (wall) | ours / floor (CPU) | goal |");
    println!("|---|---|---|---|---|---|---|");
    for f in figs {
        println!(
            "| {} | {:.3} | {:.3} | {} | **{:.3}** | {:.3} | {} |",
            f.what,
            f.ours.wall * 1e3,
            f.floor.wall * 1e3,
            f.floor_name,
            f.ours.wall / f.floor.wall,
            f.ours.cpu / f.floor.cpu,
            f.goal
        );
    }
}

/// Times gathers of `sets` (threads, cache off) against the floor; per gather.
fn gather_vs_floor(ds: &Dataset, sets: &[Vec<u64>], threads: usize, reps: usize) -> (Times, Times) {
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
    (ours.per(sets.len()), fl.per(sets.len()))
}

fn gathers(data: &Data, reps: usize) {
    let one = Dataset::open(data.tiles_5000()).unwrap();
    let ten = Dataset::open(data.tiles_500()).unwrap();
    let mut figs = Vec::new();
    for k in [10usize, 100] {
        for (name, ds, tile) in [
            ("one 5,000-cell tile", &one, Some(0)),
            ("ten 500-cell tiles", &ten, None),
        ] {
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
    println!("\n10 cells across ten 1,000-cell tiles, cache off: 1 thread {:.2} ms ({:.3}x its floor {:.2} ms; CPU {:.3}x), 2 threads {:.2} ms (speed-up {:.2}x)",
        t1.wall * 1e3, t1.wall / f1.wall, f1.wall * 1e3, t1.cpu / f1.cpu, t2.wall * 1e3, t1.wall / t2.wall);
    // Default cache: the same 10 cells gathered again and again.
    ds.set_cache_bytes(deltacells::dataset::DEFAULT_CACHE_BYTES);
    ds.set_threads(1);
    let s = &sets[0];
    let nnz = ds.batch_nnz(s).unwrap() as usize;
    let (mut ip, mut ix, mut vs) = (vec![0i64; s.len() + 1], vec![0i32; nnz], vec![0f32; nnz]);
    let first = time(|| {
        ds.gather(s, &mut ip, &mut ix, ValuesOut::F32(&mut vs))
            .unwrap();
    })
    .wall;
    let (again, _) = best_pair(
        reps,
        || {
            ds.gather(s, &mut ip, &mut ix, ValuesOut::F32(&mut vs))
                .unwrap();
        },
        || {},
    );
    println!(
        "the same 10 cells, default cache (256 MiB), 1 thread: first call {:.2} ms, again {:.3} ms",
        first * 1e3,
        again.wall * 1e3
    );
}

/// One full pass over the 1,000-cell-tile dataset, tile by tile in order (`read_tile` into
/// reused buffers), and as a block-shuffled permutation (window of 2 tiles) in batches read
/// ahead, each pass starting from an empty cache; returns (tile-by-tile s, batches s).
fn epoch_pair(ds: &Arc<Dataset>, order: &[u64], batch_size: usize, reps: usize) -> (Times, Times) {
    let n_tiles = ds.info().n_tiles;
    let max_tile = (0..n_tiles)
        .map(|t| ds.tile_bounds(t).unwrap())
        .fold((0, 0), |a, b| (a.0.max(b.1), a.1.max(b.2)));
    let max_batch = order
        .chunks(batch_size)
        .map(|b| ds.batch_nnz(b).unwrap())
        .max()
        .unwrap_or(0);
    let cap = max_batch.max(max_tile.1) as usize;
    let (mut ip, mut ix, mut vs) = (
        vec![0i64; (max_tile.0 as usize).max(batch_size) + 1],
        vec![0i32; cap],
        vec![0f32; cap],
    );
    let fresh_cache = || {
        ds.set_cache_bytes(0);
        ds.set_cache_bytes(deltacells::dataset::DEFAULT_CACHE_BYTES);
    };
    let (mut tiles_best, mut batches_best) = (Times::INF, Times::INF);
    for rep in 0..=reps {
        fresh_cache();
        let tiles_s = time(|| {
            for tile in 0..n_tiles {
                ds.read_tile(tile, &mut ip, &mut ix, ValuesOut::F32(&mut vs))
                    .unwrap();
            }
        });
        fresh_cache();
        let mut rows = 0;
        let batches_s = time(|| {
            let mut b = Batches::new(ds.clone(), order, batch_size, 0).unwrap();
            loop {
                let (r, _) = b
                    .next_into(&mut ip, &mut ix, ValuesOut::F32(&mut vs))
                    .unwrap();
                if r == 0 {
                    break;
                }
                rows += r;
            }
        });
        assert_eq!(rows as usize, order.len());
        if rep > 0 {
            tiles_best = tiles_best.min(tiles_s);
            batches_best = batches_best.min(batches_s);
        }
    }
    (tiles_best, batches_best)
}

fn batches(data: &Data, reps: usize) {
    let ds = Arc::new(Dataset::open(data.tiles_1000()).unwrap());
    let info = ds.info();
    let mut order = vec![0u64; info.n_cells as usize];
    ds.shuffled_order(2026, 2, &mut order).unwrap();
    let batch_size = 256;
    let mut res = Vec::new();
    for threads in [1usize, 2] {
        ds.set_threads(threads);
        res.push((threads, epoch_pair(&ds, &order, batch_size, reps)));
    }
    let cells = info.n_cells as f64;
    println!(
        "\n### Batches: a block-shuffled epoch (window of 2 tiles) of {} x {} ({} tiles, {} nonzeros), batches of {batch_size}, read-ahead 2, float32 out, default cache, each pass from an empty cache\n",
        info.n_cells, info.n_genes, info.n_tiles, info.nnz
    );
    println!("| threads | tile by tile in order (floor) cells/s | batches, shuffled cells/s | **batches / in order** (cells/s, goal >= 0.9) | same, by CPU time |");
    println!("|---|---|---|---|---|");
    for (threads, (tiles_s, batches_s)) in &res {
        println!(
            "| {threads} | {:.0} | {:.0} | **{:.3}** | {:.3} |",
            cells / tiles_s.wall,
            cells / batches_s.wall,
            tiles_s.wall / batches_s.wall,
            tiles_s.cpu / batches_s.cpu
        );
    }
    let (one, two) = (res[0].1, res[1].1);
    println!(
        "\nspeed-up with 2 threads: batches **{:.2}x** (goal >= 1.8), tile by tile {:.2}x",
        one.1.wall / two.1.wall,
        one.0.wall / two.0.wall
    );
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
fn floor_decode(
    blob: &[u8],
    t: &Tile<'_>,
    scratch: &mut Vec<u8>,
    dctx: &mut DCtx<'static>,
) -> usize {
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
    println!("| decode | ours ms | floor ms | floor | **ours / floor** (wall) | ours / floor (CPU) | goal |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| 1 thread | {:.2} | {:.2} | bare zstd + CRC-32, 1 thread | **{:.3}** | {:.3} | <= 1.15 |",
        ours1.wall * 1e3,
        floor1.wall * 1e3,
        ours1.wall / floor1.wall,
        ours1.cpu / floor1.cpu
    );
    println!(
        "| {threads} threads | {:.2} | {:.2} | bare zstd of the chunks in parallel | **{:.3}** | | speed-up {:.2}x (goal >= 1.85) |",
        ours_all.wall * 1e3,
        floor_all.wall * 1e3,
        ours_all.wall / floor_all.wall,
        ours1.wall / ours_all.wall
    );
}

fn main() {
    let a = args();
    let data = Data::new(a.quick);
    data.prepare();
    if a.prepare_only {
        return;
    }
    if let Some(k) = a.kernels.as_deref() {
        let path = match k {
            "scalar" => tile::KernelPath::Scalar,
            "sse2" => tile::KernelPath::Sse2,
            "avx2" => tile::KernelPath::Avx2,
            _ => panic!("--kernels scalar|sse2|avx2"),
        };
        tile::force_path(Some(path));
    }
    if let Some(what) = a.callgrind.as_deref() {
        decode(&data, 1, Some(what));
        return;
    }
    let run = |s: &str| a.only.is_empty() || a.only.iter().any(|o| o == s);
    println!(
        "data: {}; kernels: {:?}",
        data.root.display(),
        tile::active_path()
    );
    if run("gather") {
        gathers(&data, a.reps);
    }
    if run("batches") {
        batches(&data, a.reps);
    }
    if run("decode") {
        decode(&data, a.reps, None);
    }
}
