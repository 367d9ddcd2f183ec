//! ChromData benchmark (not a test). Run:
//!
//!     cargo bench --features cli --bench chromdata                                 # 10 M spots, 60 tracks
//!     cargo bench --features cli --bench chromdata -- --spots 200000 --tracks 8     # quick (< 2 min)
//!
//! Options: `--spots N` (10,000,000), `--tracks K` (60 float32 spot tracks), `--budget MB`
//! (writer memory budget, 512 MiB), `--chroms C` (20; 3..=20), `--traces Q` (50 random
//! traces), `--cells Q` (20 random cells), `--seed S`, `--no-python`, `--keep`,
//! `--stores 2.0,2.1,2.2,cdz` (which stores to write / read; all by default), `--phase
//! write|read|all` with `--dir DIR` (write the input and stores and keep them, or read the
//! stores a write phase left there: a 10 M-spot run split into calls of a few minutes).
//!
//! One run, one synthetic chromatin-tracing dataset (cells ~ spots / 20,000, 2 traces per
//! cell, ~1,000 bins on C chromosomes, x / y / z float64 with ~0.2 % NaN, K float32 tracks
//! named `spot_tracks/t0..`, rows in shuffled, non-canonical order), dumped once as an Arrow
//! IPC file under `target/bench-chromdata/` (deleted at the end):
//!
//! 1. Writing. Our streaming `ChromDataWriter` writes 2.0 flat, 2.1 partitioned, 2.2
//!    primary+coords and 2.2 as `.cdz`, under the memory budget, each in a child process
//!    (this binary re-run with the hidden `--child-write`) that streams the IPC batches in,
//!    so its peak RSS (VmHWM) and CPU time (user + system) are the write's own. Baseline in
//!    the same run: the same data as one flat Parquet file (parquet crate, zstd 3, the flat
//!    layout's 65,536-row groups, input order), same child-process harness; and
//!    `pyarrow.parquet.write_table` of the same IPC data (tests/chromdata/bench_pyarrow.py,
//!    timed in Python).
//! 2. Reading, per store, ours through the C ABI (`dc_chromdata_*`, result streams drained):
//!    open (median of 31 fresh handles); get_trace (median over random traces), get_cell
//!    (random cells), get_chrom (every chromosome, all columns and `coords`), each with a
//!    fresh handle per query kind; get_chrom(coords) of the first five chromosomes one
//!    after the other (median of 5 rounds, fresh handles); full read (`read_spots`, all
//!    columns and coords) in child processes (the first read of each: time + peak RSS;
//!    then further reads in the same process, timed as pyarrow's are). Baseline: pyarrow
//!    reading exactly the same row groups and columns of the same files
//!    (`ChromData::read_plan` exports them), with and without threads.
//!
//! `--sets SPOTSxTRACKS,...` runs all this for several data sets, each in a subdirectory of
//! the bench directory; issue #17's three (split into a write phase under the shared-load
//! wrapper and a read phase timed alone):
//!
//!     cargo bench --features cli --bench chromdata -- --sets 2000000x1,1000000x30,10000000x60 \
//!         --stores 2.2 --phase write --dir /tmp/cd17
//!     target/release/deps/chromdata-* --sets 2000000x1,1000000x30,10000000x60 --stores 2.2 \
//!         --phase read --dir /tmp/cd17
//!
//! Prints markdown tables, ending with the goals (ours / pyarrow, same run).

use std::ffi::{c_char, CString};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use deltacells::chromdata::{
    CatValue, ChromData, ChromDataWriter, Columns, FileRead, Layout, PlanQuery, WriterOptions,
};
use deltacells::ffi::{
    dc_chromdata, dc_chromdata_free, dc_chromdata_get_cell, dc_chromdata_get_chrom,
    dc_chromdata_get_trace, dc_chromdata_open, dc_chromdata_read_spots, dc_last_error,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::{json, Value};

/// Target rows per row group of the flat layout (and of the Parquet baseline).
const FLAT_ROW_GROUP: usize = 65_536;
/// The stores of `--stores`: 2.0 flat, 2.1 partitioned, 2.2 primary+coords, 2.2 as `.cdz`.
const STORES: [&str; 4] = ["2.0", "2.1", "2.2", "cdz"];
/// Rows per input batch (IPC record batch, one `append`).
const BATCH_ROWS: usize = 65_536;

#[derive(Clone)]
struct Args {
    spots: u64,
    tracks: usize,
    budget_mb: u64,
    chroms: usize,
    traces: usize,
    cells: usize,
    seed: u64,
    python: bool,
    keep: bool,
    phase: Phase,
    dir: Option<PathBuf>,
    /// Stores to write / read (`--stores 2.0,2.1,2.2,cdz`; all by default).
    stores: Vec<String>,
    /// Data sets (`--sets 2000000x1,1000000x30`: spots x tracks), each in its own
    /// subdirectory of the bench directory; else the one of `--spots` / `--tracks`.
    sets: Option<Vec<(u64, usize)>>,
}

/// Which part of the benchmark to run (`--phase`): `write` generates the input and writes
/// the stores (kept for a later `read`), `read` benchmarks the stores a `write` left in the
/// same `--dir`, `all` does both, store by store, deleting each after its reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Write,
    Read,
    All,
}

fn args(v: &[String]) -> Args {
    let mut a = Args {
        spots: 10_000_000,
        tracks: 60,
        budget_mb: 512,
        chroms: 20,
        traces: 50,
        cells: 20,
        seed: 42,
        python: true,
        keep: false,
        phase: Phase::All,
        dir: None,
        stores: STORES.iter().map(|s| s.to_string()).collect(),
        sets: None,
    };
    let mut i = 0;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        let num = |s: &str| -> u64 {
            s.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{}: not a number: {s:?}", v[i]))
        };
        match v[i].as_str() {
            "--spots" => a.spots = num(&next),
            "--tracks" => a.tracks = num(&next) as usize,
            "--budget" => a.budget_mb = num(&next),
            "--chroms" => a.chroms = (num(&next) as usize).clamp(3, 20),
            "--traces" => a.traces = num(&next) as usize,
            "--cells" => a.cells = num(&next) as usize,
            "--seed" => a.seed = num(&next),
            "--phase" => {
                a.phase = match next.as_str() {
                    "write" => Phase::Write,
                    "read" => Phase::Read,
                    "all" => Phase::All,
                    other => panic!("--phase: write, read or all, not {other:?}"),
                }
            }
            "--dir" => a.dir = Some(PathBuf::from(&next)),
            "--stores" => {
                a.stores = next.split(',').map(str::to_string).collect();
                if let Some(bad) = a.stores.iter().find(|s| !STORES.contains(&s.as_str())) {
                    panic!("--stores: one of {STORES:?}, not {bad:?}");
                }
            }
            "--sets" => {
                let set = |x: &str| -> (u64, usize) {
                    let (n, k) = x
                        .split_once('x')
                        .unwrap_or_else(|| panic!("--sets: SPOTSxTRACKS, not {x:?}"));
                    (num(n), num(k) as usize)
                };
                a.sets = Some(next.split(',').map(set).collect());
            }
            "--no-python" => {
                a.python = false;
                i += 1;
                continue;
            }
            "--keep" => {
                a.keep = true;
                i += 1;
                continue;
            }
            _ => {
                // `cargo bench` adds `--bench`; ignore what we do not know.
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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const CHROM_NAMES: [&str; 20] = [
    "chr1", "chr2", "chr3", "chr4", "chr5", "chr6", "chr7", "chr8", "chr9", "chr10", "chr11",
    "chr12", "chr13", "chr14", "chr15", "chr16", "chr17", "chr18", "chr19", "chrX",
];

/// ~1,000 bins of 100 kb, more on the first chromosomes; `chrom` is a dictionary column
/// so the chromosome categories keep genome order.
fn make_bins(n_chroms: usize) -> RecordBatch {
    let weights: Vec<usize> = (0..n_chroms).map(|c| 2 * n_chroms - c).collect();
    let total: usize = weights.iter().sum();
    let (mut keys, mut start, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for (c, w) in weights.iter().enumerate() {
        let n = (1000 * w).div_ceil(total);
        for k in 0..n as i64 {
            keys.push(c as i32);
            start.push(k * 100_000);
            end.push((k + 1) * 100_000);
        }
    }
    let chrom = DictionaryArray::<Int32Type>::try_new(
        Int32Array::from(keys),
        Arc::new(StringArray::from(CHROM_NAMES[..n_chroms].to_vec())),
    )
    .unwrap();
    RecordBatch::try_from_iter(vec![
        ("chrom", Arc::new(chrom) as ArrayRef),
        ("start", Arc::new(Int64Array::from(start)) as ArrayRef),
        ("end", Arc::new(Int64Array::from(end)) as ArrayRef),
    ])
    .unwrap()
}

/// Dataset shape derived from the arguments.
struct Shape {
    n_cells: u64,
    n_bins: u64,
}

fn shape(a: &Args, bins: &RecordBatch) -> Shape {
    Shape {
        n_cells: (a.spots / 20_000).max(1),
        n_bins: bins.num_rows() as u64,
    }
}

/// One input batch of spots in shuffled order: every row draws its cell, trace (2 per
/// cell: ids `2 cell`, `2 cell + 1`) and bin at random.
fn make_batch(rng: &mut Rng, rows: usize, a: &Args, s: &Shape) -> RecordBatch {
    let (mut trace, mut cell, mut bin) = (
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
    );
    let mut xyz: [Vec<f64>; 3] = std::array::from_fn(|_| Vec::with_capacity(rows));
    for _ in 0..rows {
        let c = rng.below(s.n_cells);
        let t = 2 * c + rng.below(2);
        let b = rng.below(s.n_bins);
        cell.push(c as i64 + 1);
        trace.push(t as i64 + 1);
        bin.push(b as i32);
        let missing = rng.below(500) == 0;
        for (k, v) in xyz.iter_mut().enumerate() {
            // A trace-dependent centre plus ~0.3 µm noise (values in nm).
            let centre = ((t * 7919 + k as u64 * 104_729) % 50_000) as f64;
            v.push(if missing {
                f64::NAN
            } else {
                centre + 300.0 * (rng.unit() - 0.5) + b as f64
            });
        }
    }
    let mut cols: Vec<(String, ArrayRef)> = vec![
        ("trace_id".into(), Arc::new(Int64Array::from(trace))),
        ("cell_id".into(), Arc::new(Int64Array::from(cell))),
        ("bin_id".into(), Arc::new(Int32Array::from(bin))),
    ];
    for (k, v) in xyz.into_iter().enumerate() {
        cols.push((["x", "y", "z"][k].into(), Arc::new(Float64Array::from(v))));
    }
    for k in 0..a.tracks {
        // z-score-like values on a 0.01 grid in [-10, 10): 2,000 distinct values.
        let v: Vec<f32> = (0..rows)
            .map(|_| (rng.below(2000) as f32 - 1000.0) / 100.0)
            .collect();
        cols.push((
            format!("spot_tracks/t{k}"),
            Arc::new(Float32Array::from(v)) as ArrayRef,
        ));
    }
    RecordBatch::try_from_iter(cols).unwrap()
}

/// Our reader through the C ABI (`dc_chromdata_*`, what C, C++, R, Julia and Python callers
/// get): every result stream is imported and drained (each batch taken) before the clock
/// stops, as a caller would.
struct CStore(*mut dc_chromdata);

impl CStore {
    fn open(path: &Path) -> CStore {
        let p = CString::new(path.to_str().unwrap()).unwrap();
        let mut h = std::ptr::null_mut();
        // SAFETY: `p` is NUL-terminated, `h` writable.
        check("dc_chromdata_open", unsafe {
            dc_chromdata_open(p.as_ptr(), &mut h)
        });
        CStore(h)
    }

    /// Runs one query and returns its batches.
    fn query(&self, q: &PlanQuery, columns: &Columns) -> Vec<RecordBatch> {
        let names: Vec<CString> = match columns {
            Columns::All => Vec::new(),
            Columns::Coords => vec![CString::new("coords").unwrap()],
            Columns::Names(v) => v
                .iter()
                .map(|n| CString::new(n.as_str()).unwrap())
                .collect(),
        };
        let ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let cols = if ptrs.is_empty() {
            std::ptr::null()
        } else {
            ptrs.as_ptr()
        };
        let id = |v: &CatValue| match v {
            CatValue::Int(i) => CString::new(i.to_string()).unwrap(),
            CatValue::Str(s) => CString::new(s.as_str()).unwrap(),
        };
        let mut stream = FFI_ArrowArrayStream::empty();
        let (h, n, out) = (self.0, ptrs.len(), &mut stream as *mut FFI_ArrowArrayStream);
        // SAFETY: live handle, NUL-terminated strings alive for the call, `n` column
        // pointers at `cols`, `out` writable.
        let st = unsafe {
            match q {
                PlanQuery::Trace(t) => dc_chromdata_get_trace(h, id(t).as_ptr(), cols, n, out),
                PlanQuery::Cell(c) => dc_chromdata_get_cell(h, id(c).as_ptr(), cols, n, out),
                PlanQuery::Chrom(c) => {
                    let c = CString::new(c.as_str()).unwrap();
                    dc_chromdata_get_chrom(h, c.as_ptr(), cols, n, out)
                }
                PlanQuery::All => dc_chromdata_read_spots(h, 0, cols, n, out),
            }
        };
        check("query", st);
        RecordBatchStreamReader::try_new(stream)
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }
}

impl Drop for CStore {
    fn drop(&mut self) {
        // SAFETY: a handle from dc_chromdata_open, freed once.
        unsafe { dc_chromdata_free(self.0) }
    }
}

fn check(what: &str, st: i32) {
    if st != 0 {
        // SAFETY: dc_last_error returns a NUL-terminated string of this thread.
        let msg = unsafe { std::ffi::CStr::from_ptr(dc_last_error()) };
        panic!("{what}: status {st}: {}", msg.to_string_lossy());
    }
}

fn rows_of(b: &[RecordBatch]) -> usize {
    b.iter().map(RecordBatch::num_rows).sum()
}

fn write_ipc(path: &Path, batches: impl Iterator<Item = RecordBatch>) {
    let mut w: Option<arrow_ipc::writer::FileWriter<BufWriter<File>>> = None;
    for b in batches {
        let w = w.get_or_insert_with(|| {
            arrow_ipc::writer::FileWriter::try_new(
                BufWriter::new(File::create(path).unwrap()),
                &b.schema(),
            )
            .unwrap()
        });
        w.write(&b).unwrap();
    }
    w.expect("at least one batch").finish().unwrap();
}

fn read_ipc(path: &Path) -> arrow_ipc::reader::FileReader<BufReader<File>> {
    arrow_ipc::reader::FileReader::try_new(BufReader::new(File::open(path).unwrap()), None).unwrap()
}

/// Peak resident set size of this process (VmHWM), kB.
fn vm_hwm_kb() -> u64 {
    vm_kb("VmHWM:")
}

/// This process's CPU time so far, (user, system) seconds, from `/proc/self/stat` (ticks of
/// USER_HZ, which Linux fixes at 100 for `/proc`); NaN where unreadable. The write table shows
/// both: on this VM a write's system time depends on how much fresh page-cache memory it
/// takes (docs/performance.md, "ChromData: writing").
fn cpu_secs() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (in parentheses, possibly with spaces): state first.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let secs = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(f64::NAN, |t| t / 100.0)
    };
    (secs(11), secs(12))
}

/// A kB figure of /proc/self/status (`VmHWM:`, `VmRSS:`).
fn vm_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Rows appended so far by `child_write` (u64::MAX once `finish` runs), for its memory trace.
static TRACE_ROWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A running memory trace: its stop flag and its thread.
type Trace = (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
);

/// glibc's allocator counters in kB: in use, free but kept, mmapped (zeros elsewhere).
fn malloc_kb() -> [usize; 3] {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters (under its locks).
        let mi = unsafe { libc::mallinfo2() };
        [mi.uordblks / 1024, mi.fordblks / 1024, mi.hblkhd / 1024]
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    [0; 3]
}

/// With `CHROMDATA_BENCH_TRACE=FILE`, `child_write` samples its memory every 50 ms into FILE
/// (CSV: seconds, rows appended or `finish`, VmRSS, and glibc's `mallinfo2` — bytes in use,
/// free bytes kept in the arenas, mmapped bytes): where the peak RSS is, and how much of it
/// is live allocations and how much the allocator keeps after frees.
fn start_trace() -> Option<Trace> {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let path = std::env::var_os("CHROMDATA_BENCH_TRACE")?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut out = String::from("secs,rows,rss_kb,in_use_kb,free_kept_kb,mmapped_kb\n");
        while !s.load(Relaxed) {
            let rows = TRACE_ROWS.load(Relaxed);
            let [in_use, free_kept, mmapped] = malloc_kb();
            let rows = if rows == u64::MAX {
                "finish".to_string()
            } else {
                rows.to_string()
            };
            out.push_str(&format!(
                "{:.3},{rows},{},{in_use},{free_kept},{mmapped}\n",
                t0.elapsed().as_secs_f64(),
                vm_kb("VmRSS:"),
            ));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::write(path, out).unwrap();
    });
    Some((stop, h))
}

/// `--child-write KIND INPUT BINS OUT BUDGET_BYTES`: streams the IPC batches into one
/// writer; prints {"secs", "peak_rss_kb"}.
fn child_write(v: &[String]) {
    let trace = start_trace();
    let (kind, input, bins, out, budget) = (
        v[0].as_str(),
        Path::new(&v[1]),
        Path::new(&v[2]),
        Path::new(&v[3]),
        v[4].parse::<u64>().unwrap(),
    );
    let t = Instant::now();
    let batches = read_ipc(input);
    let mut spill = None;
    let rows = match kind {
        "input" => batches.map(|b| b.unwrap().num_rows()).sum::<usize>(),
        "parquet" => {
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
                .set_max_row_group_row_count(Some(FLAT_ROW_GROUP))
                .build();
            let mut w: Option<ArrowWriter<File>> = None;
            let mut n = 0;
            for b in batches {
                let b = b.unwrap();
                let w = w.get_or_insert_with(|| {
                    ArrowWriter::try_new(
                        File::create(out).unwrap(),
                        b.schema(),
                        Some(props.clone()),
                    )
                    .unwrap()
                });
                w.write(&b).unwrap();
                n += b.num_rows();
            }
            w.unwrap().close().unwrap();
            n
        }
        layout => {
            let layout = match layout {
                "flat" => Layout::Flat,
                "partitioned" => Layout::Partitioned,
                _ => Layout::PrimaryCoords,
            };
            let bins = read_ipc(bins).next().unwrap().unwrap();
            let mut w = ChromDataWriter::create(
                out,
                WriterOptions {
                    memory_budget: budget,
                    layout,
                    ..WriterOptions::default()
                },
            )
            .unwrap();
            w.set_bins(bins).unwrap();
            let mut n = 0;
            for b in batches {
                let b = b.unwrap();
                n += b.num_rows();
                w.append(b).unwrap();
                TRACE_ROWS.store(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
            TRACE_ROWS.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
            w.finish().unwrap();
            spill = Some((w.runs_spilled(), w.merge_passes()));
            n
        }
    };
    let secs = t.elapsed().as_secs_f64();
    if let Some((stop, h)) = trace {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap();
    }
    let (runs, passes) = spill.unwrap_or((0, 0));
    let (user, system) = cpu_secs();
    println!(
        "{}",
        json!({"secs": secs, "rows": rows, "peak_rss_kb": vm_hwm_kb(),
               "runs_spilled": runs, "merge_passes": passes,
               "user_secs": user, "sys_secs": system})
    );
}

/// `--child-read STORE all|coords WARM`: through the C ABI, opens (timed separately) and
/// reads every spot; prints the times, peak RSS, RSS after open and the result's size; then
/// reads WARM times more on the same handle, each result released before the next read
/// (pool started, allocator warm, as pyarrow's reads are timed on files it keeps open). A
/// full read reads every row group whole, which the handle's row-group cache never keeps;
/// what the handle keeps is released result memory (`DELTACELLS_CHROMDATA_RETAIN_BYTES`).
fn child_read(v: &[String]) {
    let columns = match v.get(1).map(String::as_str) {
        Some("coords") => Columns::Coords,
        _ => Columns::All,
    };
    let warm_runs: usize = v.get(2).map_or(WARM_RUNS, |w| w.parse().unwrap());
    let store = Path::new(&v[0]);
    let t = Instant::now();
    let cd = CStore::open(store);
    let open = t.elapsed().as_secs_f64();
    let open_rss = vm_kb("VmRSS:");
    let t = Instant::now();
    let b = cd.query(&PlanQuery::All, &columns);
    let secs = t.elapsed().as_secs_f64();
    let result_bytes: usize = b
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    let (rows, cols, peak) = (rows_of(&b), b[0].num_columns(), vm_hwm_kb());
    drop(b);
    let warm: Vec<f64> = (0..warm_runs)
        .map(|_| {
            let t = Instant::now();
            let b = cd.query(&PlanQuery::All, &columns);
            let s = t.elapsed().as_secs_f64();
            drop(b);
            s
        })
        .collect();
    drop(cd);
    println!(
        "{}",
        json!({"open": open, "secs": secs, "warm": warm, "rows": rows, "cols": cols,
               "peak_rss_kb": peak, "open_rss_kb": open_rss, "result_bytes": result_bytes})
    );
}

/// `--repeat STORE QUERY all|coords N` (for `perf record`): repeats one query N times through
/// the C ABI and prints the mean time. QUERY: `open` (open and free), `all` (read_spots),
/// `chroms:K` (get_chrom of the first K chromosomes of the bins table, one handle per
/// round), `trace:ID` or `cell:ID` (`all`, `trace`, `cell`: one handle for all rounds).
fn repeat(v: &[String]) {
    let store = Path::new(&v[0]);
    let columns = match v[2].as_str() {
        "coords" => Columns::Coords,
        _ => Columns::All,
    };
    let n: usize = v[3].parse().unwrap();
    let queries: Vec<PlanQuery> = match v[1].split_once(':') {
        _ if v[1] == "open" => Vec::new(),
        _ if v[1] == "all" => vec![PlanQuery::All],
        Some(("chroms", k)) => {
            let cd = ChromData::open(store).unwrap();
            let cats = cd.categories("bins", "chrom").unwrap();
            let names = cats.as_any().downcast_ref::<StringArray>().unwrap();
            (0..k.parse::<usize>().unwrap())
                .map(|i| PlanQuery::Chrom(names.value(i).to_string()))
                .collect()
        }
        Some(("trace", id)) => vec![PlanQuery::Trace(CatValue::Str(id.into()))],
        Some(("cell", id)) => vec![PlanQuery::Cell(CatValue::Str(id.into()))],
        _ => panic!("--repeat: unknown query {:?}", v[1]),
    };
    let shared = CStore::open(store);
    let t = Instant::now();
    for _ in 0..n {
        let fresh;
        let cd = if matches!(
            queries.first(),
            Some(PlanQuery::Trace(_) | PlanQuery::Cell(_) | PlanQuery::All)
        ) {
            &shared
        } else {
            fresh = CStore::open(store);
            &fresh
        };
        for q in &queries {
            assert!(rows_of(&cd.query(q, &columns)) > 0, "empty answer");
        }
    }
    let mean = t.elapsed().as_secs_f64() / n as f64;
    println!("{}", json!({"query": v[1], "n": n, "mean_secs": mean}));
}

fn run_json(cmd: &mut Command) -> Value {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{cmd:?}: no JSON in output:\n{text}"));
    serde_json::from_str(line).unwrap()
}

fn self_cmd() -> Command {
    Command::new(std::env::current_exe().unwrap())
}

fn disk_bytes(p: &Path) -> u64 {
    let md = std::fs::symlink_metadata(p).unwrap();
    if md.is_dir() {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| disk_bytes(&e.unwrap().path()))
            .sum()
    } else {
        md.len()
    }
}

fn remove(p: &Path) {
    let _ = std::fs::remove_dir_all(p);
    let _ = std::fs::remove_file(p);
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn secs(s: f64) -> String {
    if s.is_nan() {
        "n/a".into()
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_nan() || b.is_nan() || b == 0.0 {
        "n/a".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

fn shell(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn python_ok() -> Option<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import pyarrow as pa; print(pa.__version__ + ', default memory pool ' + \
             pa.default_memory_pool().backend_name)",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn plan_json(reads: &[FileRead]) -> Value {
    Value::Array(
        reads
            .iter()
            .map(|r| json!({"path": r.path, "row_groups": r.row_groups, "columns": r.columns}))
            .collect(),
    )
}

/// Our times and the pyarrow plan of one query kind.
struct Kind {
    name: &'static str,
    ours: Vec<f64>,
    plans: Vec<Value>,
    /// Row groups in the plans (what pyarrow reads; ours reads the same, less what its
    /// per-file cache of the last decoded groups serves).
    planned: u64,
}

/// One store's read results: per kind (ours median, pyarrow threads median, pyarrow
/// single-thread median).
struct ReadRow {
    store: String,
    kind: String,
    n: usize,
    /// Row groups read by pyarrow, summed over the queries of one timing.
    groups: String,
    ours: f64,
    py: f64,
    py1: f64,
}

/// Times each query alone, all on one handle (opened untimed), through the C ABI.
fn time_kind(store: &Path, name: &'static str, ids: &[PlanQuery], columns: &Columns) -> Kind {
    let cd = CStore::open(store);
    let planner = ChromData::open(store).unwrap();
    let mut ours = Vec::new();
    let mut plans = Vec::new();
    let mut planned = 0;
    for q in ids {
        let t = Instant::now();
        let b = cd.query(q, columns);
        ours.push(t.elapsed().as_secs_f64());
        assert!(rows_of(&b) > 0, "{name}: empty answer");
        drop(b);
        let plan = planner.read_plan(q, columns).unwrap();
        planned += plan.iter().map(|f| f.row_groups.len() as u64).sum::<u64>();
        plans.push(plan_json(&plan));
    }
    Kind {
        name,
        ours,
        plans,
        planned,
    }
}

/// Times `rounds` runs of all `ids` together (the "get_chrom(coords) x5"), each
/// round on a fresh handle opened untimed; pyarrow gets one item per round with the reads
/// of all the queries.
fn time_rounds(
    store: &Path,
    name: &'static str,
    ids: &[PlanQuery],
    columns: &Columns,
    rounds: usize,
) -> Kind {
    let planner = ChromData::open(store).unwrap();
    let mut reads = Vec::new();
    for q in ids {
        reads.extend(planner.read_plan(q, columns).unwrap());
    }
    let planned = reads.iter().map(|f| f.row_groups.len() as u64).sum();
    let ours = (0..rounds)
        .map(|_| {
            let cd = CStore::open(store);
            let t = Instant::now();
            for q in ids {
                assert!(rows_of(&cd.query(q, columns)) > 0, "{name}: empty answer");
            }
            t.elapsed().as_secs_f64()
        })
        .collect();
    Kind {
        name,
        ours,
        plans: vec![plan_json(&reads); rounds],
        planned,
    }
}

struct Ctx {
    dir: PathBuf,
    input: PathBuf,
    bins: PathBuf,
    budget: u64,
    python: bool,
    script: PathBuf,
}

fn child_write_run(ctx: &Ctx, kind: &str, out: &Path) -> Value {
    remove(out);
    run_json(self_cmd().arg("--child-write").args([
        kind,
        ctx.input.to_str().unwrap(),
        ctx.bins.to_str().unwrap(),
        out.to_str().unwrap(),
        &ctx.budget.to_string(),
    ]))
}

fn py_read(ctx: &Ctx, store: &Path, queries: Value, once: bool) -> Option<Value> {
    if !ctx.python {
        return None;
    }
    let plan = ctx.dir.join("plan.json");
    std::fs::write(
        &plan,
        serde_json::to_vec(&json!({ "queries": queries })).unwrap(),
    )
    .unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(&ctx.script).arg("read").arg(store).arg(&plan);
    if once {
        cmd.arg("--once");
    }
    let v = run_json(&mut cmd);
    let _ = std::fs::remove_file(&plan);
    Some(v)
}

fn py_median(v: &Option<Value>, kind: &str, key: &str) -> f64 {
    let Some(v) = v else { return f64::NAN };
    let xs: Vec<f64> = v["kinds"][kind][key]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    median(&xs)
}

/// A full read (`read_spots`, all columns or coords) of one store: ours (median of
/// `FULL_RUNS` fresh processes) and pyarrow on the same row groups and columns.
struct FullRow {
    store: String,
    columns: &'static str,
    /// Median of the reads after the first in each child process.
    ours: f64,
    /// Median of the first read of each child process (fresh process, after open).
    fresh: f64,
    /// Peak RSS, RSS after open, result size (bytes), of our median run.
    peak: u64,
    open_rss: u64,
    result: u64,
    /// Decoded bytes of the largest partition (2.1 / 2.2) or row group (2.0) of the read:
    /// the design's bound on a full read's peak is the result plus one partition.
    partition: u64,
    py: f64,
    /// pyarrow's first read in a fresh process (median of `FULL_RUNS`) and its peak RSS.
    py_fresh: f64,
    py_peak: u64,
}

/// Fresh processes per full read of ours (median taken).
const FULL_RUNS: usize = 3;
/// Further full reads per child process, timed after its first (see `child_read`).
const WARM_RUNS: usize = 2;

/// Largest share of the rows in one partition (2.1 / 2.2: one file of the coords-only full
/// read per partition) or in one row group (2.0: a single file).
fn largest_partition_share(store: &Path) -> f64 {
    let cd = ChromData::open(store).unwrap();
    let plan = cd.read_plan(&PlanQuery::All, &Columns::Coords).unwrap();
    let groups = |f: &FileRead| f.row_groups.len() as f64;
    let total: f64 = plan.iter().map(groups).sum();
    let largest = match cd.info().layout {
        Layout::Flat => 1.0,
        _ => plan.iter().map(groups).fold(0.0, f64::max),
    };
    largest / total.max(1.0)
}

/// Chromosomes of the "get_chrom(coords) x5" (the first five, read one after the
/// other), and rounds of that timing (median taken).
const CHROMS_X5: usize = 5;
const ROUNDS_X5: usize = 5;

/// Fresh handles opened, on each side, for the open row (median taken): an open takes
/// milliseconds and this VM's speed varies from one moment to the next, so the median of
/// a few opens moved by 2x between runs of the same code.
const OPEN_ROUNDS: usize = 31;

/// Read benchmarks of one store; returns the per-kind rows and the full-read rows.
fn bench_reads(
    ctx: &Ctx,
    label: &str,
    store: &Path,
    traces: &[CatValue],
    cells: &[CatValue],
    chroms: &[String],
) -> (Vec<ReadRow>, Vec<FullRow>) {
    // Open through the C ABI: fresh handle each time, median of OPEN_ROUNDS.
    let open: Vec<f64> = (0..OPEN_ROUNDS)
        .map(|_| {
            let t = Instant::now();
            let cd = CStore::open(store);
            let s = t.elapsed().as_secs_f64();
            drop(cd);
            s
        })
        .collect();
    let cd = ChromData::open(store).unwrap();
    let full_plans: Vec<(&'static str, Vec<FileRead>)> =
        [("all columns", Columns::All), ("coords", Columns::Coords)]
            .into_iter()
            .map(|(name, c)| (name, cd.read_plan(&PlanQuery::All, &c).unwrap()))
            .collect();
    drop(cd);
    let q = |f: fn(CatValue) -> PlanQuery, ids: &[CatValue]| -> Vec<PlanQuery> {
        ids.iter().cloned().map(f).collect()
    };
    let chrom_q: Vec<PlanQuery> = chroms.iter().cloned().map(PlanQuery::Chrom).collect();
    let x5 = &chrom_q[..CHROMS_X5.min(chrom_q.len())];
    let kinds = vec![
        time_kind(
            store,
            "get_trace",
            &q(PlanQuery::Trace, traces),
            &Columns::All,
        ),
        time_kind(store, "get_cell", &q(PlanQuery::Cell, cells), &Columns::All),
        time_kind(store, "get_chrom (all columns)", &chrom_q, &Columns::All),
        time_kind(store, "get_chrom (coords)", &chrom_q, &Columns::Coords),
        time_rounds(
            store,
            "get_chrom (coords) x5",
            x5,
            &Columns::Coords,
            ROUNDS_X5,
        ),
    ];
    let all_plan = plan_json(&full_plans[0].1);
    let mut queries = vec![json!({"kind": "open", "items": [all_plan], "rounds": OPEN_ROUNDS})];
    for k in &kinds {
        queries.push(json!({"kind": k.name, "items": k.plans}));
    }
    for (name, plan) in &full_plans {
        queries.push(json!({"kind": format!("full read ({name})"),
                            "items": vec![plan_json(plan); FULL_RUNS], "threads_only": true}));
    }
    let py = py_read(ctx, store, Value::Array(queries), false);

    let mut rows = vec![ReadRow {
        store: label.into(),
        kind: "open".into(),
        n: OPEN_ROUNDS,
        groups: "footers".into(),
        ours: median(&open),
        py: py_median(&py, "open", "threads"),
        py1: py_median(&py, "open", "single"),
    }];
    for k in &kinds {
        rows.push(ReadRow {
            store: label.into(),
            kind: k.name.into(),
            n: k.ours.len(),
            groups: k.planned.to_string(),
            ours: median(&k.ours),
            py: py_median(&py, k.name, "threads"),
            py1: py_median(&py, k.name, "single"),
        });
    }
    let fulls = full_reads(ctx, label, store, &full_plans, &py, &mut rows);
    (rows, fulls)
}

/// Full reads: ours in child processes (time and memory), pyarrow's memory in a fresh
/// process of its own; pyarrow's times come from `py` (the run of all kinds).
fn full_reads(
    ctx: &Ctx,
    label: &str,
    store: &Path,
    full_plans: &[(&'static str, Vec<FileRead>)],
    py: &Option<Value>,
    rows: &mut Vec<ReadRow>,
) -> Vec<FullRow> {
    let share = largest_partition_share(store);
    let mut fulls = Vec::new();
    for (name, plan) in full_plans {
        let arg = if *name == "coords" { "coords" } else { "all" };
        let mut runs: Vec<Value> = (0..FULL_RUNS)
            .map(|_| {
                run_json(
                    self_cmd()
                        .arg("--child-read")
                        .arg(store)
                        .arg(arg)
                        .arg(WARM_RUNS.to_string()),
                )
            })
            .collect();
        runs.sort_by(|a, b| a["secs"].as_f64().partial_cmp(&b["secs"].as_f64()).unwrap());
        let mid = &runs[FULL_RUNS / 2];
        let warm: Vec<f64> = runs
            .iter()
            .flat_map(|r| r["warm"].as_array().unwrap().iter())
            .map(|s| s.as_f64().unwrap())
            .collect();
        let kind = format!("full read ({name})");
        // pyarrow's first read in a fresh Python process (files opened untimed, as ours),
        // FULL_RUNS processes: the median time and the peak RSS of that run.
        let mut py_runs: Vec<(f64, u64)> = (0..FULL_RUNS)
            .filter_map(|_| {
                let v = py_read(
                    ctx,
                    store,
                    json!([{"kind": kind.clone(), "items": [plan_json(plan)]}]),
                    true,
                )?;
                let secs = v["kinds"][kind.as_str()]["threads"][0].as_f64()?;
                Some((secs, v["peak_rss_kb"].as_u64().unwrap_or(0) * 1024))
            })
            .collect();
        py_runs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let (py_fresh, py_peak) = py_runs
            .get(py_runs.len() / 2)
            .copied()
            .unwrap_or((f64::NAN, 0));
        let result = mid["result_bytes"].as_u64().unwrap();
        rows.push(ReadRow {
            store: label.into(),
            kind: format!("{kind}, in process"),
            n: warm.len(),
            groups: plan
                .iter()
                .map(|f| f.row_groups.len())
                .sum::<usize>()
                .to_string(),
            ours: median(&warm),
            py: py_median(py, &kind, "threads"),
            py1: f64::NAN,
        });
        rows.push(ReadRow {
            store: label.into(),
            kind: format!("{kind}, fresh process"),
            n: FULL_RUNS,
            groups: rows.last().map(|r| r.groups.clone()).unwrap_or_default(),
            ours: mid["secs"].as_f64().unwrap(),
            py: py_fresh,
            py1: f64::NAN,
        });
        fulls.push(FullRow {
            store: label.into(),
            columns: name,
            ours: median(&warm),
            fresh: mid["secs"].as_f64().unwrap(),
            peak: mid["peak_rss_kb"].as_u64().unwrap() * 1024,
            open_rss: mid["open_rss_kb"].as_u64().unwrap() * 1024,
            result,
            partition: (result as f64 * share) as u64,
            py: py_median(py, &kind, "threads"),
            py_fresh,
            py_peak,
        });
    }
    fulls
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--child-write") {
        return child_write(&argv[1..]);
    }
    if argv.first().map(String::as_str) == Some("--child-read") {
        return child_read(&argv[1..]);
    }
    if argv.first().map(String::as_str) == Some("--repeat") {
        return repeat(&argv[1..]);
    }
    let a = args(&argv);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base = a
        .dir
        .clone()
        .unwrap_or_else(|| root.join("target/bench-chromdata"));
    let py_version = if a.python { python_ok() } else { None };
    let sets = a.sets.clone().unwrap_or_else(|| vec![(a.spots, a.tracks)]);
    let mut results = Vec::new();
    for &(spots, tracks) in &sets {
        let set = Args {
            spots,
            tracks,
            ..a.clone()
        };
        let dir = match a.sets {
            Some(_) => base.join(format!("{spots}x{tracks}")),
            None => base.clone(),
        };
        let (reads, _) = run_set(&set, &dir, &py_version);
        results.push((
            format!("{} M spots, {tracks} tracks", spots as f64 / 1e6),
            reads,
        ));
    }
    if a.phase != Phase::Write {
        print_goals(&results);
    }
}

/// Writes and / or reads the stores of one data set (`--spots`, `--tracks`) in `dir` and
/// prints its tables; returns the read rows and full-read rows.
fn run_set(a: &Args, dir: &Path, py_version: &Option<String>) -> (Vec<ReadRow>, Vec<FullRow>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = dir.to_path_buf();
    if a.phase != Phase::Read {
        remove(&dir);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let ctx = Ctx {
        input: dir.join("input.arrow"),
        bins: dir.join("bins.arrow"),
        dir: dir.clone(),
        budget: a.budget_mb << 20,
        python: py_version.is_some(),
        script: root.join("tests/chromdata/bench_pyarrow.py"),
    };
    let load_before = shell("uptime");
    let bins = make_bins(a.chroms);
    let s = shape(a, &bins);

    println!("## ChromData benchmark\n");
    if a.phase != Phase::Read {
        // The dataset, once, as an Arrow IPC file.
        write_ipc(&ctx.bins, std::iter::once(bins.clone()));
        let t = Instant::now();
        let mut rng = Rng(a.seed);
        let mut left = a.spots as usize;
        write_ipc(
            &ctx.input,
            std::iter::from_fn(|| {
                if left == 0 {
                    return None;
                }
                let n = left.min(BATCH_ROWS);
                left -= n;
                Some(make_batch(&mut rng, n, a, &s))
            }),
        );
        println!(
            "Arrow IPC input {} (generated in {:.1} s).",
            mb(disk_bytes(&ctx.input) as f64),
            t.elapsed().as_secs_f64()
        );
    }
    println!(
        "{} spots, {} float32 spot tracks, {} cells, {} traces, {} bins on {} chromosomes; \
         x/y/z float64 (~0.2 % NaN); input shuffled (cell, trace, bin drawn per row). \
         Writer memory budget {} MiB.",
        a.spots,
        a.tracks,
        s.n_cells,
        2 * s.n_cells,
        s.n_bins,
        a.chroms,
        a.budget_mb
    );
    println!(
        "Machine: {} cores (nproc), {}. pyarrow: {}.\n",
        shell("nproc"),
        shell("lscpu | sed -n 's/^Model name: *//p' | head -1"),
        py_version.clone().unwrap_or_else(|| {
            "MISSING (python3 -c 'import pyarrow' failed): pyarrow columns are n/a".into()
        })
    );

    // Random ids, fixed for all stores.
    let mut qrng = Rng(a.seed ^ 0x5EED);
    let traces: Vec<CatValue> = (0..a.traces)
        .map(|_| CatValue::Int(qrng.below(2 * s.n_cells) as i64 + 1))
        .collect();
    let cells: Vec<CatValue> = (0..a.cells)
        .map(|_| CatValue::Int(qrng.below(s.n_cells) as i64 + 1))
        .collect();
    let chroms: Vec<String> = CHROM_NAMES[..a.chroms]
        .iter()
        .map(|c| c.to_string())
        .collect();

    let mut writes: Vec<WriteRow> = Vec::new();
    let mut input_secs = f64::NAN;
    let mut base = (f64::NAN, 0u64);
    let pq_rs = dir.join("flat-rs.parquet");
    if a.phase != Phase::Read {
        input_secs = child_write_run(&ctx, "input", &dir.join("none"))["secs"]
            .as_f64()
            .unwrap();
        let v = child_write_run(&ctx, "parquet", &pq_rs);
        base = (v["secs"].as_f64().unwrap(), disk_bytes(&pq_rs));
        writes.push(WriteRow {
            store: "flat Parquet, parquet crate (baseline)".into(),
            secs: base.0,
            peak: v["peak_rss_kb"].as_u64().unwrap() * 1024,
            bytes: base.1,
            cpu: child_cpu(&v),
        });
        if ctx.python {
            let pq_py = dir.join("flat-pyarrow.parquet");
            let v = run_json(
                Command::new("python3")
                    .arg(&ctx.script)
                    .arg("write")
                    .arg(&ctx.input)
                    .arg(&pq_py)
                    .arg(FLAT_ROW_GROUP.to_string()),
            );
            writes.push(WriteRow {
                store: "flat Parquet, pyarrow.parquet.write_table".into(),
                secs: v["secs"].as_f64().unwrap(),
                peak: v["peak_rss_kb"].as_u64().unwrap() * 1024,
                bytes: disk_bytes(&pq_py),
                cpu: None,
            });
            remove(&pq_py);
        }
    }
    let mut full_rows: Vec<FullRow> = Vec::new();
    if a.phase != Phase::Write && ctx.python && pq_rs.exists() {
        full_rows.push(baseline_full_read(&ctx, &pq_rs));
    }
    if a.phase == Phase::All {
        remove(&pq_rs);
    }

    let mut reads: Vec<ReadRow> = Vec::new();
    for (short, kind, label, name) in [
        ("2.0", "flat", "2.0 flat", "bench-2.0.chromdata.zarr"),
        (
            "2.1",
            "partitioned",
            "2.1 partitioned",
            "bench-2.1.chromdata.zarr",
        ),
        (
            "2.2",
            "primary",
            "2.2 primary+coords",
            "bench-2.2.chromdata.zarr",
        ),
        ("cdz", "primary", "2.2 primary+coords .cdz", "bench-2.2.cdz"),
    ] {
        if !a.stores.iter().any(|s| s == short) {
            continue;
        }
        let out = dir.join(name);
        if a.phase != Phase::Read {
            let v = child_write_run(&ctx, kind, &out);
            assert_eq!(v["rows"].as_u64(), Some(a.spots));
            writes.push(WriteRow {
                store: format!("{label} (ours, streaming)"),
                secs: v["secs"].as_f64().unwrap(),
                peak: v["peak_rss_kb"].as_u64().unwrap() * 1024,
                bytes: disk_bytes(&out),
                cpu: child_cpu(&v),
            });
        }
        if a.phase != Phase::Write {
            let (r, full) = bench_reads(&ctx, label, &out, &traces, &cells, &chroms);
            reads.extend(r);
            full_rows.extend(full);
        }
        if a.phase == Phase::All {
            remove(&out);
        }
    }
    let load_after = shell("uptime");
    if a.phase != Phase::Read {
        print_writes(&writes, input_secs, base, ctx.python);
    }
    if a.phase != Phase::Write {
        print_reads(a, &reads, &full_rows);
    }
    println!("\nLoad before: `{load_before}`; after: `{load_after}`.");

    if a.phase != Phase::All || a.keep {
        eprintln!("kept {}", dir.display());
    } else {
        remove(&dir);
    }
    (reads, full_rows)
}

/// The goals (#17) for each data set and store read: ours through the C ABI
/// against pyarrow with threads on the same files, measured above in the same run.
fn print_goals(results: &[(String, Vec<ReadRow>)]) {
    println!("\n### ChromData reads: goals against pyarrow (same run)\n");
    println!(
        "Ours through the C ABI (streams drained); pyarrow with threads on the same row \
         groups and columns of the same files. Full reads: ours in process (see above). \
         Full reads in process: reads after a first one in the same process (pyarrow: \
         its allocator keeps freed memory; ours: the handle keeps released result memory); \
         fresh process: the first read of a new process on both sides (median of \
         {FULL_RUNS} processes). Open: median of {OPEN_ROUNDS} fresh handles on each side. \
         get_chrom(coords) x5: the first {CHROMS_X5} chromosomes one after the other, \
         median of {ROUNDS_X5} rounds on fresh handles. Point queries: median per query, \
         kept as fast as before (no fixed goal).\n"
    );
    println!("| data | store | query | ours | pyarrow (threads) | ours / pyarrow | goal | met? |");
    println!("|---|---|---|---|---|---|---|---|");
    let goals: [(&str, &str, f64, bool); 8] = [
        ("full read (all columns), in process", "<= 0.8x", 0.8, true),
        (
            "full read (all columns), fresh process",
            "<= 0.8x",
            0.8,
            true,
        ),
        ("full read (coords), in process", "<= 0.8x", 0.8, true),
        ("full read (coords), fresh process", "<= 0.8x", 0.8, true),
        ("get_chrom (coords) x5", "<= 1.0x", 1.0, true),
        ("open", "<= 2 ms", 0.002, false),
        ("get_trace", "as before", f64::NAN, true),
        ("get_cell", "as before", f64::NAN, true),
    ];
    for (data, reads) in results {
        for (kind, goal, limit, relative) in goals {
            for r in reads.iter().filter(|r| r.kind == kind) {
                let figure = if relative { r.ours / r.py } else { r.ours };
                let met = if limit.is_nan() || figure.is_nan() {
                    "—"
                } else if figure <= limit {
                    "yes"
                } else {
                    "no"
                };
                println!(
                    "| {data} | {} | {kind} | {} | {} | {} | {goal} | {met} |",
                    r.store,
                    secs(r.ours),
                    secs(r.py),
                    ratio(r.ours, r.py)
                );
            }
        }
    }
}

struct WriteRow {
    store: String,
    secs: f64,
    peak: u64,
    bytes: u64,
    /// CPU seconds (user, system) of the writing process, where it reports them.
    cpu: Option<(f64, f64)>,
}

/// The CPU seconds a `--child-write` reported.
fn child_cpu(v: &Value) -> Option<(f64, f64)> {
    Some((v["user_secs"].as_f64()?, v["sys_secs"].as_f64()?))
}

/// pyarrow reading the whole flat Parquet baseline file (reference for the full reads).
fn baseline_full_read(ctx: &Ctx, pq_rs: &Path) -> FullRow {
    let md = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(File::open(pq_rs).unwrap())
            .unwrap(),
    )
    .clone();
    let groups: Vec<usize> = (0..md.num_row_groups()).collect();
    let cols: Vec<String> = md
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let item = json!([{"path": "", "row_groups": groups, "columns": cols}]);
    let py = py_read(
        ctx,
        pq_rs,
        json!([{"kind": "full read", "items": [item]}]),
        true,
    );
    FullRow {
        store: "flat Parquet baseline file (input order)".into(),
        columns: "all columns",
        ours: f64::NAN,
        fresh: f64::NAN,
        peak: 0,
        open_rss: 0,
        result: 0,
        partition: 0,
        py: py_median(&py, "full read", "threads"),
        py_fresh: f64::NAN,
        py_peak: py
            .as_ref()
            .and_then(|v| v["peak_rss_kb"].as_u64())
            .unwrap_or(0)
            * 1024,
    }
}

fn print_writes(writes: &[WriteRow], input_secs: f64, base: (f64, u64), python: bool) {
    let (base_secs, base_bytes) = base;
    println!("### ChromData: writing\n");
    println!(
        "Time from the first IPC batch read to the file closed (streaming from the IPC file; \
         reading it alone takes {}); peak RSS = VmHWM of the writing process (the pyarrow row: \
         of the Python process, which holds the whole table in memory and times write_table only); \
         CPU = user + system seconds of the whole writing process (reading the IPC input included).\n",
        secs(input_secs)
    );
    println!("| store | write time | vs parquet crate | CPU (user + system) | peak RSS | size on disk | size vs parquet crate |");
    println!("|---|---|---|---|---|---|---|");
    for w in writes {
        let cpu = w
            .cpu
            .map_or("n/a".to_string(), |(u, s)| format!("{u:.2} + {s:.2} s"));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            w.store,
            secs(w.secs),
            ratio(w.secs, base_secs),
            cpu,
            mb(w.peak as f64),
            mb(w.bytes as f64),
            ratio(w.bytes as f64, base_bytes as f64)
        );
    }
    if !python {
        println!("\nNo pyarrow rows (--no-python, or python3 -c 'import pyarrow' failed).");
    }
}

fn print_reads(a: &Args, reads: &[ReadRow], full_rows: &[FullRow]) {
    println!("\n### ChromData: reading\n");
    println!(
        "Median per query ({} random traces, {} random cells, each of the {} chromosomes); one \
         fresh handle per query kind; warm page cache. pyarrow reads exactly the same row groups \
         and columns of the same files (ParquetFile.read_row_groups, files opened beforehand), \
         with use_threads=True and False (full reads: True only); ours, through the C ABI \
         (result streams drained), also decodes categories and assembles one batch \
         in canonical order. Row groups are those of one query (x5: of the five); ours reads \
         the same, less what its per-file cache of the last decoded groups serves. \
         Open: ours reads metadata, index arrays, small tables and every \
         footer; pyarrow parses the same footers and reads the small tables. Full read \
         (read_spots, canonical order): as pyarrow's, timed in a process that has read before \
         (ours: each of {FULL_RUNS} child processes opens and reads once, then {WARM_RUNS} times \
         more with a fresh handle each; the median of those later reads; the first reads are \
         in the next table).\n",
        a.traces, a.cells, a.chroms
    );
    println!("| store | query | n | row groups read (pyarrow) | ours | pyarrow (threads) | ours / pyarrow | pyarrow (1 thread) | ours / pyarrow 1 thread |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in reads {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.store,
            r.kind,
            r.n,
            r.groups,
            secs(r.ours),
            secs(r.py),
            ratio(r.ours, r.py),
            secs(r.py1),
            ratio(r.ours, r.py1)
        );
    }
    println!("\n#### Full read: time and memory\n");
    println!(
        "Ours: in process = as in the table above (later reads on the child's handle); \
         fresh process = median of the first reads of the {FULL_RUNS} child processes (open, \
         then read_spots); memory of the median first read: peak RSS (VmHWM), RSS after open, \
         the result's size (Arrow buffers of its columns), and what the read needed beyond \
         open + result (the design's bound: one partition — for 2.0 one row group — decoded, \
         given beside it). pyarrow: in process as in the table above (median of {FULL_RUNS}); \
         fresh process = median of the first reads of {FULL_RUNS} new Python processes \
         (files opened untimed), with the peak RSS of that process.\n"
    );
    println!("| store | columns | ours, in process | pyarrow, in process | ratio | ours, fresh process | pyarrow, fresh process | ratio | ours: peak RSS | after open | result | peak - open - result | one partition | pyarrow: peak RSS | peak ours / pyarrow |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for f in full_rows {
        let pm = |p: u64| {
            if p == 0 {
                "n/a".to_string()
            } else {
                mb(p as f64)
            }
        };
        let over = (f.peak as f64) - (f.open_rss as f64) - (f.result as f64);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.store,
            f.columns,
            secs(f.ours),
            secs(f.py),
            ratio(f.ours, f.py),
            secs(f.fresh),
            secs(f.py_fresh),
            ratio(f.fresh, f.py_fresh),
            pm(f.peak),
            pm(f.open_rss),
            pm(f.result),
            if f.peak == 0 { "n/a".into() } else { mb(over) },
            pm(f.partition),
            pm(f.py_peak),
            if f.peak == 0 || f.py_peak == 0 {
                "n/a".into()
            } else {
                ratio(f.peak as f64, f.py_peak as f64)
            }
        );
    }
}
