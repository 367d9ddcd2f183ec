//! Reading at the format's limit (issue 13): every goal of the issue as a ratio against its
//! floor, measured in the same process, each timed call made through the C ABI (the `dc_*`
//! functions of include/deltacells.h, called as a C program calls them). Medians of
//! `--reps` runs (default 5) after one warm-up run, ours and the floor alternating.
//! Build, then time (first the data, outside timing, then the figures):
//!
//!     cargo bench --features cli --bench reads --no-run
//!     cargo bench --features cli --bench reads -- --prepare           # writes the datasets once
//!     /work/team/bin/quiet cargo bench --features cli --bench reads -- --only gather
//!     /work/team/bin/quiet cargo bench --features cli --bench reads -- --only batches
//!     /work/team/bin/quiet cargo bench --features cli --bench reads -- --only decode
//!     /work/team/bin/quiet cargo bench --features cli --bench reads -- --only decode-bound
//!     cargo bench --features cli --bench reads -- --quick             # small data, a smoke run
//!
//! Data (synthetic realistic counts, benches/synthetic; zstd 19, 8 chunks per tile), kept
//! under target/bench-reads/: 10,000 cells x 38,000 genes, ~5,000 nonzeros per cell, as
//! datasets of 1,000-cell tiles (10 tiles), of 500-cell tiles (the first 5,000 cells, 10
//! tiles) and of one 5,000-cell tile, and a 4,000-cell tile (20 M nonzeros) for decoding.
//!
//! Floors, each measured beside what it bounds, on the same bytes:
//! * gather: reading the touched tiles whole into a reused buffer, their CRC-32, and bare
//!   zstd of only the chunks holding the requested cells (one reused context, scratch out);
//! * batches: reading the same dataset tile by tile in order (`dc_dataset_read_tile` into
//!   caller buffers) — the iteration must deliver as many cells per second; beside it, a
//!   plain loop of `dc_dataset_gather` over the same batches (no read-ahead);
//! * tile decode: bare zstd of every frame + CRC-32; `decode-bound` measures beside it the
//!   lower bound of any decoder writing the API's output (benches/decode_bound/mod.rs).

use std::ffi::c_void;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use deltacells::convert::mtx::CellMatrix;
use deltacells::dataset::{Dataset, DatasetWriter, WriterOptions};
use deltacells::ffi as c;
use deltacells::tile::{self, EncodeOptions, Tile};
use rayon::prelude::*;
use zstd::zstd_safe::DCtx;

mod cabi;
mod decode_bound;
mod synthetic;
use cabi::{median, ok, CDataset, Csr};
use synthetic::{synthetic, Rng};

struct Args {
    prepare_only: bool,
    quick: bool,
    reps: usize,
    /// Sections to run (empty = all): gather, batches, decode, decode-bound.
    only: Vec<String>,
    /// Run one piece once, for `valgrind --tool=callgrind` or `perf record` (decode-floor,
    /// decode-ours, gather-{ours,floor}:{k}:{one,ten}, batches-{in-order,batches,plain}).
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

/// Median (of wall and of CPU time, each on its own) of several runs.
fn median_times(ts: &[Times]) -> Times {
    Times {
        wall: median(ts.iter().map(|t| t.wall).collect()),
        cpu: median(ts.iter().map(|t| t.cpu).collect()),
    }
}

/// Medians over `reps` runs of each closure after one warm-up run of each, the closures run
/// alternately (so that a change of machine load hits all of them).
fn medians<const N: usize>(reps: usize, fs: &mut [&mut dyn FnMut(); N]) -> [Times; N] {
    let ts = medians_dyn(reps, fs);
    std::array::from_fn(|i| ts[i])
}

/// `medians` of any number of closures.
fn medians_dyn(reps: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<Times> {
    for f in fs.iter_mut() {
        f();
    }
    let mut ts: Vec<Vec<Times>> = vec![Vec::new(); fs.len()];
    for _ in 0..reps {
        for (f, t) in fs.iter_mut().zip(ts.iter_mut()) {
            t.push(time(&mut **f));
        }
    }
    ts.iter().map(|t| median_times(t)).collect()
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
    /// The floor of one gather: every touched tile of `plan`.
    fn gather(&mut self, tiles: &[FloorTile], plan: &[(usize, Vec<usize>)]) -> usize {
        plan.iter()
            .map(|(t, chunks)| self.tile(&tiles[*t], chunks))
            .sum()
    }
}

/// The touched (tile, sorted distinct chunks) of a set of cells (the floor's plan, made with
/// the Rust API outside timing).
fn touched(ds: &Dataset, cells: &[u64]) -> Vec<(usize, Vec<usize>)> {
    let plan = ds.plan_gather(cells).unwrap();
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (t, c) in plan.chunks() {
        match out.last_mut() {
            Some((lt, cs)) if *lt == t as usize => cs.push(c),
            _ => out.push((t as usize, vec![c])),
        }
    }
    for (_, cs) in &mut out {
        cs.sort_unstable();
        cs.dedup();
    }
    out
}

/// `n` sets of `k` random cells: from tile `tile` only, or spread evenly over all the
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

/// Draws of one gather row, with what the floor and our side need.
struct GatherCase {
    ds: CDataset,
    sets: Vec<Vec<u64>>,
    tiles: Vec<FloorTile>,
    plans: Vec<Vec<(usize, Vec<usize>)>>,
    out: Csr,
}

/// Gathers drawn per row (12 sets of k cells, timed together and reported per gather).
const DRAWS: usize = 12;

impl GatherCase {
    fn new(path: &Path, k: usize, tile: Option<u64>, seed: u64) -> GatherCase {
        let rds = Dataset::open(path).unwrap();
        let sets = draws(&rds, k, tile, DRAWS, seed);
        let ds = CDataset::open(path.to_str().unwrap(), &[]);
        let max_nnz = sets.iter().map(|s| ds.batch_nnz(s)).max().unwrap() as usize;
        GatherCase {
            tiles: floor_tiles(&rds),
            plans: sets.iter().map(|s| touched(&rds, s)).collect(),
            out: Csr::new(k, max_nnz),
            sets,
            ds,
        }
    }
    /// Per gather: ours (threads, cache budget) and the floor, medians of `reps` runs each.
    fn vs_floor(&mut self, threads: usize, cache: i64, reps: usize) -> (Times, Times) {
        self.ds.threads(threads);
        self.ds.fresh_cache(cache);
        let mut floor = Floor::new();
        let (ds, sets, out, tiles, plans) = (
            &self.ds,
            &self.sets,
            &mut self.out,
            &self.tiles,
            &self.plans,
        );
        let [ours, fl] = medians(
            reps,
            &mut [
                &mut || {
                    for s in sets {
                        ds.gather(s, out);
                    }
                },
                &mut || {
                    let sink: usize = plans.iter().map(|p| floor.gather(tiles, p)).sum();
                    std::hint::black_box(sink);
                },
            ],
        );
        (ours.per(sets.len()), fl.per(sets.len()))
    }
}

struct Row {
    what: String,
    ours: Times,
    floor: Times,
    goal: &'static str,
}

fn print_rows(title: &str, floor: &str, rows: &[Row]) {
    println!("\n### {title}\n\nFloor: {floor}.\n");
    println!("| read | ours ms | floor ms | **ours / floor** (wall) | ours / floor (CPU) | goal | met? |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let ratio = r.ours.wall / r.floor.wall;
        let met = match r.goal.strip_prefix("<= ") {
            Some(g) if ratio <= g.parse::<f64>().unwrap() => "yes",
            Some(_) => "**no**",
            None => "",
        };
        println!(
            "| {} | {:.3} | {:.3} | **{:.3}** | {:.3} | {} | {met} |",
            r.what,
            r.ours.wall * 1e3,
            r.floor.wall * 1e3,
            ratio,
            r.ours.cpu / r.floor.cpu,
            r.goal
        );
    }
}

const GATHER_FLOOR: &str =
    "reading the touched tiles whole (one reused buffer) + their CRC-32 + bare zstd of only \
    the chunks holding the requested cells (one reused context), on 1 thread";

fn gathers(data: &Data, reps: usize) {
    let default_threads = deltacells::pool::default_threads();
    let cache_on = deltacells::dataset::DEFAULT_CACHE_BYTES as i64;
    let mut rows = Vec::new();
    for k in [10usize, 100] {
        for (name, path, tile) in [
            ("one 5,000-cell tile", data.tiles_5000(), Some(0)),
            ("ten 500-cell tiles", data.tiles_500(), None),
        ] {
            let mut case = GatherCase::new(&path, k, tile, 7 + k as u64);
            for (threads, cache) in [(1, 0), (0, 0), (1, cache_on), (0, cache_on)] {
                let (ours, floor) = case.vs_floor(threads, cache, reps);
                let t = if threads == 0 { default_threads } else { 1 };
                rows.push(Row {
                    what: format!(
                        "{k} random cells, {name}, {t} thread{}, cache {}",
                        if t > 1 { "s" } else { "" },
                        if cache == 0 {
                            "off"
                        } else {
                            "on (256 MiB, warm)"
                        }
                    ),
                    ours,
                    floor,
                    goal: if threads == 1 && cache == 0 {
                        "<= 1.2"
                    } else {
                        "—"
                    },
                });
            }
        }
    }
    print_rows(
        "Gathers (dc_dataset_gather, float32 out), per gather of 12 draws",
        GATHER_FLOOR,
        &rows,
    );

    // The former one-thread pathology: 10 cells over ten 1,000-cell tiles.
    let mut case = GatherCase::new(&data.tiles_1000(), 10, None, 99);
    let (t1, f1) = case.vs_floor(1, 0, reps);
    let (t2, _) = case.vs_floor(0, 0, reps);
    // The former cache thrash: the same 10 cells (spanning 10 tiles) again and again, with
    // the default cache; first call from an empty cache.
    case.ds.threads(1);
    case.ds.fresh_cache(cache_on);
    let cells = case.sets[0].clone();
    let first = time(|| {
        case.ds.gather(&cells, &mut case.out);
    });
    let mut again_f = || {
        case.ds.gather(&cells, &mut case.out);
    };
    let [again] = medians(reps, &mut [&mut again_f]);
    let rows = vec![
        Row {
            what: "10 cells across ten 1,000-cell tiles, 1 thread, cache off (was 114 ms)".into(),
            ours: t1,
            floor: f1,
            goal: "<= 1.2",
        },
        Row {
            what: format!("same, {default_threads} threads, cache off (was 17 ms)"),
            ours: t2,
            floor: f1,
            goal: "—",
        },
        Row {
            what: "the same 10 cells again and again, 1 thread, default cache (was 49 ms every call): first call".into(),
            ours: first,
            floor: f1,
            goal: "—",
        },
        Row {
            what: "... every later call".into(),
            ours: again,
            floor: f1,
            goal: "—",
        },
    ];
    print_rows(
        "Former pathologies (dc_dataset_gather)",
        GATHER_FLOOR,
        &rows,
    );
}

/// The caller's buffers for whole passes over `ds`: room for its largest tile and its
/// largest batch of `order`.
fn pass_buffers(ds: &CDataset, rds: &Dataset, order: &[u64], batch_size: usize) -> Csr {
    let (rows, nnz) = (0..rds.info().n_tiles)
        .map(|t| rds.tile_bounds(t).unwrap())
        .fold((0, 0), |a, b| (a.0.max(b.1), a.1.max(b.2)));
    let max_batch = order
        .chunks(batch_size)
        .map(|b| ds.batch_nnz(b))
        .max()
        .unwrap_or(0);
    Csr::new((rows as usize).max(batch_size), nnz.max(max_batch) as usize)
}

/// The batches section's dataset, order and buffers (shared by its table and its `perf` runs).
struct BatchCase {
    ds: CDataset,
    /// A second handle on the same dataset for `epoch` (its own cache, never emptied).
    epochs: CDataset,
    n_tiles: u64,
    n_cells: u64,
    order: Vec<u64>,
    out: Csr,
}

const BATCH_SIZE: usize = 256;

impl BatchCase {
    fn new(data: &Data) -> BatchCase {
        let path = data.tiles_1000();
        let rds = Dataset::open(&path).unwrap();
        let ds = CDataset::open(path.to_str().unwrap(), &[]);
        let epochs = CDataset::open(path.to_str().unwrap(), &[]);
        let info = rds.info();
        let order = ds.shuffled(2026, 2, info.n_cells as usize);
        let out = pass_buffers(&ds, &rds, &order, BATCH_SIZE);
        check_epochs_decompress_all(&rds, &order);
        BatchCase {
            ds,
            epochs,
            n_tiles: info.n_tiles,
            n_cells: info.n_cells,
            order,
            out,
        }
    }

    /// The floor: every tile in order, from an empty cache.
    #[inline(never)]
    fn in_order(&mut self) {
        self.ds
            .fresh_cache(deltacells::dataset::DEFAULT_CACHE_BYTES as i64);
        for t in 0..self.n_tiles {
            self.ds.read_tile(t, &mut self.out);
        }
    }

    /// The iterator over the whole order, read-ahead 2, from an empty cache.
    #[inline(never)]
    fn batched(&mut self) {
        self.ds
            .fresh_cache(deltacells::dataset::DEFAULT_CACHE_BYTES as i64);
        let (rows, _) = self
            .ds
            .batches_pass(&self.order, BATCH_SIZE, 2, &mut self.out);
        assert_eq!(rows, self.n_cells);
    }

    /// The iterator over the whole order again on a handle that only ever runs this, as a
    /// training loop runs epoch after epoch: the cache is not emptied, so the chunk buffers
    /// the last epoch gave back are warm; it holds no chunk (each tile leaves the cache
    /// after its last batch; `check_epochs_decompress_all`), so every chunk is decompressed.
    #[inline(never)]
    fn epoch(&mut self) {
        let (rows, _) = self
            .epochs
            .batches_pass(&self.order, BATCH_SIZE, 2, &mut self.out);
        assert_eq!(rows, self.n_cells);
    }

    fn threads(&self, n: usize) {
        self.ds.threads(n);
        self.epochs.threads(n);
    }

    /// A plain loop of gathers over the same batches, from an empty cache.
    #[inline(never)]
    fn plain(&mut self) {
        self.ds
            .fresh_cache(deltacells::dataset::DEFAULT_CACHE_BYTES as i64);
        for b in self.order.chunks(BATCH_SIZE) {
            self.ds.gather(b, &mut self.out);
        }
    }
}

/// Checks (untimed, through the Rust API, which exposes the reader's counters) that a
/// second epoch on one handle decompresses every chunk of the dataset again, as the first
/// did: epochs share warm buffers, not decoded chunks.
fn check_epochs_decompress_all(rds: &Dataset, order: &[u64]) {
    let ds = std::sync::Arc::new(Dataset::open(rds.root()).unwrap());
    let chunks: u64 = (0..ds.info().n_tiles)
        .map(|t| ds.tile_index(t).unwrap().chunks.len() as u64)
        .sum();
    let mut out = (vec![0i64; BATCH_SIZE + 1], Vec::new(), Vec::new());
    for epoch in 0..2 {
        let before = ds
            .counters()
            .chunks_decompressed
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut b = deltacells::dataset::Batches::new(ds.clone(), order, BATCH_SIZE, 2).unwrap();
        loop {
            let (_, nnz) = b.peek().unwrap();
            out.1.resize(nnz as usize, 0i32);
            out.2.resize(nnz as usize, 0f32);
            let (rows, _) = b
                .next_into(&mut out.0, &mut out.1, tile::ValuesOut::F32(&mut out.2))
                .unwrap();
            if rows == 0 {
                break;
            }
        }
        let done = ds
            .counters()
            .chunks_decompressed
            .load(std::sync::atomic::Ordering::Relaxed)
            - before;
        assert_eq!(done, chunks, "epoch {epoch}: chunks decompressed");
    }
}

/// One pass of the batches table, 20 times, for `perf record`: `which` is `in-order`,
/// `batches`, `epochs` or `plain`; threads from DELTACELLS_NUM_THREADS (default all).
fn callgrind_batches(data: &Data, which: &str) {
    let mut case = BatchCase::new(data);
    for _ in 0..20 {
        match which {
            "in-order" => case.in_order(),
            "batches" => case.batched(),
            "plain" => case.plain(),
            "epochs" => case.epoch(),
            _ => panic!("--callgrind batches-{{in-order|batches|epochs|plain}}"),
        }
    }
}

fn batches(data: &Data, reps: usize) {
    let case = std::cell::RefCell::new(BatchCase::new(data));
    let (n_cells, n_tiles) = (case.borrow().n_cells, case.borrow().n_tiles);
    let batch_size = BATCH_SIZE;
    let nnz = Dataset::open(data.tiles_1000()).unwrap().info().nnz;
    let default_threads = deltacells::pool::default_threads();
    let mut res = Vec::new();
    for threads in [1usize, 0] {
        case.borrow().threads(threads);
        let [in_order, batched, epoch, plain] = medians(
            reps,
            &mut [
                &mut || case.borrow_mut().in_order(),
                &mut || case.borrow_mut().batched(),
                &mut || case.borrow_mut().epoch(),
                &mut || case.borrow_mut().plain(),
            ],
        );
        res.push((
            if threads == 0 { default_threads } else { 1 },
            in_order,
            batched,
            epoch,
            plain,
        ));
    }
    let cells = n_cells as f64;
    println!(
        "\n### Batches: a block-shuffled epoch (window of 2 tiles) of {n_cells} x {} ({n_tiles} tiles of 1,000 cells, {nnz} nonzeros), batches of {batch_size}, float32 out, default cache (256 MiB), every pass from an empty cache\n",
        data.genes
    );
    println!("Floor: the same dataset tile by tile in order (dc_dataset_read_tile into reused buffers). Batches: a fresh iterator over the order, read-ahead 2, first epoch (the cache emptied before every pass, so the chunk buffers are allocated afresh) and epoch after epoch (a second handle that only runs this: its cache keeps the buffers the last epoch gave back, and no chunk: every chunk is decompressed in every epoch, checked before timing). Plain loop: dc_dataset_gather of each batch's cells in turn (no read-ahead, empty cache).\n");
    println!("| threads | in order (floor) cells/s | batches, first epoch, cells/s | **first epoch / in order** | by CPU time | batches, epoch after epoch, cells/s | **epoch after epoch / in order** | by CPU time | plain loop / in order | goal | met (first / later epochs)? |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let yes = |r: f64| if r >= 0.9 { "yes" } else { "**no**" };
    for (threads, in_order, batched, epoch, plain) in &res {
        let first = in_order.wall / batched.wall;
        let later = in_order.wall / epoch.wall;
        println!(
            "| {threads} | {:.0} | {:.0} | **{first:.3}** | {:.3} | {:.0} | **{later:.3}** | {:.3} | {:.3} | >= 0.9 | {} / {} |",
            cells / in_order.wall,
            cells / batched.wall,
            in_order.cpu / batched.cpu,
            cells / epoch.wall,
            in_order.cpu / epoch.cpu,
            in_order.wall / plain.wall,
            yes(first),
            yes(later)
        );
    }
    let (one, all) = (&res[0], &res[1]);
    let met = |x: f64| if x >= 1.8 { "met" } else { "**not met**" };
    let (first, later) = (one.2.wall / all.2.wall, one.3.wall / all.3.wall);
    println!(
        "\nspeed-up {} threads / 1: batches first epoch **{first:.2}x** ({}), epoch after epoch **{later:.2}x** ({}) (goal >= 1.8); in order (the floor's own) {:.2}x, plain loop {:.2}x",
        all.0,
        met(first),
        met(later),
        one.1.wall / all.1.wall,
        one.4.wall / all.4.wall
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

/// `dc_tile_decode` with the CRC check, int32 out.
#[inline(never)]
fn our_decode(blob: &[u8], threads: u32, out: &mut (Vec<i64>, Vec<i32>, Vec<i32>)) -> u64 {
    let mut nnz = 0;
    // SAFETY: `blob` is readable; indptr has n_cells + 1 values, indices and values `capacity`.
    ok(
        unsafe {
            c::dc_tile_decode(
                blob.as_ptr(),
                blob.len(),
                threads,
                1,
                c::DC_INT32,
                out.0.as_mut_ptr(),
                out.1.as_mut_ptr(),
                out.2.as_mut_ptr().cast::<c_void>(),
                out.1.len() as u64,
                &mut nnz,
            )
        },
        "dc_tile_decode",
    );
    nnz
}

fn decode(data: &Data, reps: usize, callgrind: Option<&str>) {
    let blob = std::fs::read(data.decode_tile()).unwrap();
    let t = Tile::parse(&blob, true).unwrap();
    let (cells, nnz) = (t.header.n_cells as usize, t.header.nnz as usize);
    let mut out = (vec![0i64; cells + 1], vec![0i32; nnz], vec![0i32; nnz]);
    let mut scratch = Vec::new();
    let mut dctx = DCtx::create();
    match callgrind {
        Some("decode-floor") => {
            std::hint::black_box(floor_decode(&blob, &t, &mut scratch, &mut dctx));
            return;
        }
        Some("decode-ours") => {
            std::hint::black_box(our_decode(&blob, 1, &mut out));
            return;
        }
        // For `perf record`: 50 decodes on all threads.
        Some("decode-ours-all") => {
            let mut ms = Vec::new();
            for _ in 0..50 {
                if std::env::var("DC_BENCH_ONE_BETWEEN").is_ok() {
                    std::hint::black_box(our_decode(&blob, 1, &mut out));
                }
                if std::env::var("DC_BENCH_FLOOR_BETWEEN").is_ok() {
                    std::hint::black_box(floor_decode(&blob, &t, &mut scratch, &mut dctx));
                }
                if let Ok(v) = std::env::var("DC_BENCH_PAUSE_MS") {
                    std::thread::sleep(std::time::Duration::from_millis(v.parse().unwrap()));
                }
                let t0 = Instant::now();
                std::hint::black_box(our_decode(&blob, 0, &mut out));
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            ms.sort_by(f64::total_cmp);
            eprintln!(
                "decode on all threads, ms: min {:.2} median {:.2}",
                ms[0], ms[25]
            );
            return;
        }
        _ => {}
    }
    let threads = deltacells::pool::default_threads();
    let pool = deltacells::pool::pool(threads).unwrap();
    let out = std::cell::RefCell::new(out);
    // Ours and the floor in the same order (1 thread, then all): a parallel run right after
    // a single-threaded one on the calling thread is 2-4 ms slower than back to back (the
    // pool's threads wake onto the CPUs again), so the order must not favour either.
    let [ours1, ours_all, floor1, floor_all] = medians(
        reps,
        &mut [
            &mut || {
                our_decode(&blob, 1, &mut out.borrow_mut());
            },
            &mut || {
                our_decode(&blob, 0, &mut out.borrow_mut());
            },
            &mut || {
                std::hint::black_box(floor_decode(&blob, &t, &mut scratch, &mut dctx));
            },
            &mut || {
                // Each worker keeps its context and scratch across chunks and runs, as the
                // library's decoder does (a fresh 5 MB buffer per chunk would cost the floor
                // page faults and kernel zeroing that the library does not pay).
                pool.install(|| {
                    t.chunks.par_iter().for_each(|e| {
                        FLOOR_SCRATCH.with(|cell| {
                            let (d, s) = &mut *cell.borrow_mut();
                            for st in [e.gaps, e.vals, e.vexc, e.gexc] {
                                if st.len > 0 {
                                    s.clear();
                                    s.reserve(2 * e.nnz() as usize + 64);
                                    d.decompress(s, t.bytes(st)).unwrap();
                                }
                            }
                        })
                    })
                });
                std::hint::black_box(crc32fast::hash(&blob[64..]));
            },
        ],
    );
    let outputs = out.borrow().1.len() * 4 + out.borrow().2.len() * 4;
    let [fill1, fill_all] = medians(
        reps,
        &mut [
            &mut || fill_outputs(&mut out.borrow_mut(), 1, &pool),
            &mut || fill_outputs(&mut out.borrow_mut(), threads, &pool),
        ],
    );
    let title = format!(
        "Tile decode (dc_tile_decode, CRC checked, int32 out): {cells} cells, {} genes, {nnz} nonzeros, {:.1} MB, zstd 19, {} chunks",
        t.header.n_genes,
        blob.len() as f64 / 1e6,
        t.chunks.len()
    );
    let rows = vec![
        Row {
            what: "1 thread".into(),
            ours: ours1,
            floor: floor1,
            goal: "<= 1.15",
        },
        Row {
            what: format!("{threads} threads (floor: the chunks' zstd in parallel + CRC)"),
            ours: ours_all,
            floor: floor_all,
            goal: "—",
        },
    ];
    print_rows(
        &title,
        "bare zstd of every frame (one reused context) + CRC-32 of the tile, 1 thread",
        &rows,
    );
    let speedup = ours1.wall / ours_all.wall;
    println!(
        "\nspeed-up {threads} threads / 1: **{speedup:.2}x** (goal >= 1.85: {}); the floor's own: {:.2}x",
        if speedup >= 1.85 { "met" } else { "**not met**" },
        floor1.wall / floor_all.wall
    );
    println!(
        "\nwriting the outputs alone (indices + values, {:.0} MB, ordinary stores: slice::fill; \
         cheaper stores in --only decode-bound): 1 thread {:.3} ms = {:.3}x the 1-thread \
         floor, {:.1} GB/s; {threads} threads {:.3} ms, {:.1} GB/s (speed-up {:.2}x). \
         A decode writes these bytes on top of the floor's work.",
        outputs as f64 / 1e6,
        fill1.wall * 1e3,
        fill1.wall / floor1.wall,
        outputs as f64 / fill1.wall / 1e9,
        fill_all.wall * 1e3,
        outputs as f64 / fill_all.wall / 1e9,
        fill1.wall / fill_all.wall
    );
}

thread_local! {
    static FLOOR_SCRATCH: std::cell::RefCell<(DCtx<'static>, Vec<u8>)> =
        std::cell::RefCell::new((DCtx::create(), Vec::new()));
}

/// Writes every byte of the indices and values outputs (the part of a decode's memory
/// traffic the zstd floor does not have), split over `threads` workers of `pool`.
#[inline(never)]
fn fill_outputs(
    out: &mut (Vec<i64>, Vec<i32>, Vec<i32>),
    threads: usize,
    pool: &rayon::ThreadPool,
) {
    let v = std::hint::black_box(7i32);
    let per = out.1.len().div_ceil(threads.max(1)).max(1);
    pool.install(|| {
        out.1
            .par_chunks_mut(per)
            .zip(out.2.par_chunks_mut(per))
            .for_each(|(a, b)| {
                a.fill(v);
                b.fill(v);
            })
    });
    std::hint::black_box(&out.1[0]);
}

/// One piece of the gather table once, for `valgrind --tool=callgrind` or `perf record`:
/// `spec` is `{ours|floor}:{k}:{one|ten}` (the 12 draws of that row, 1 thread, cache off).
fn callgrind_gather(data: &Data, spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let (which, k, where_) = (parts[0], parts[1].parse::<usize>().unwrap(), parts[2]);
    let (path, tile) = match where_ {
        "one" => (data.tiles_5000(), Some(0)),
        _ => (data.tiles_500(), None),
    };
    let mut case = GatherCase::new(&path, k, tile, 7 + k as u64);
    case.ds.threads(1);
    case.ds.cache_bytes(0);
    if which == "floor" {
        std::hint::black_box(cg_gather_floor(&case));
    } else {
        cg_gather_ours(&mut case);
    }
}

/// The floor of `callgrind_gather` (collect with `--toggle-collect=*cg_gather_floor*`).
#[inline(never)]
fn cg_gather_floor(case: &GatherCase) -> usize {
    let mut floor = Floor::new();
    case.plans
        .iter()
        .map(|p| floor.gather(&case.tiles, p))
        .sum()
}

/// Our side of `callgrind_gather` (collect with `--toggle-collect=*cg_gather_ours*`).
#[inline(never)]
fn cg_gather_ours(case: &mut GatherCase) {
    for s in &case.sets {
        case.ds.gather(s, &mut case.out);
    }
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
        if let Some(which) = what.strip_prefix("batches-") {
            callgrind_batches(&data, which);
        } else if let Some(spec) = what.strip_prefix("gather-") {
            callgrind_gather(&data, spec);
        } else {
            decode(&data, 1, Some(what));
        }
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
    if run("decode-bound") {
        decode_bound::decode_bound(&data, a.reps);
    }
}
