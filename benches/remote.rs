//! Object storage (issue 15): gathers from an S3 server on loopback behind a proxy that holds
//! every request 20 ms, against gathers of the same cells from the same dataset on local disk,
//! in the same run, through the C ABI (`dc_dataset_open_opts`, `dc_dataset_gather`), at
//! `max_concurrency` 1, 4 and 16. The decoded-data cache is off for both (every gather
//! reads its tiles again), so the figure is what a worker pays per batch on a cold cache.
//!
//!     cargo bench --features cli --bench remote                 # 10,000 cells, 20 tiles
//!     cargo bench --features cli --bench remote -- --quick      # small data, a smoke run
//!     cargo bench --features cli --bench remote -- --reps 5 --latency-ms 20
//!
//! Then ChromData (c-api.md §7, `dc_chromdata_open_opts`): open, 10 get_cell, one get_chrom
//! and the full read of a 400,000-spot store (layout 2.2, directory and `.cdz`) at S3
//! through the same proxy at max_concurrency 1, 4 and 16, against the same store on local
//! disk (rows checked equal).
//!
//! The servers are the tests' (scripts/remote_servers.py: an S3 server and the latency
//! proxy). The S3 server is moto (`pip install 'moto[server]'`, done by scripts/setup.sh);
//! `--server s3s-fs` uses s3s-fs instead (crates.io, a Rust server: `cargo install
//! --locked s3s-fs@0.14.1 --features binary`), which measured slower here. Options:
//! `--only datasets|batches|chromdata` runs the dataset tables (gathers and batch
//! iterator), the batch iterator's alone, or the ChromData table. Data: the benchmarks'
//! synthetic realistic counts (benches/synthetic), 38,000 genes, zstd 19, 8 chunks per tile,
//! written under target/bench-remote/ once.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use deltacells::chromdata::{ChromData, ChromDataWriter, Layout, WriterOptions as StoreOptions};
use deltacells::dataset::paths::tile_relpath;
use deltacells::dataset::{DatasetWriter, WriterOptions};
use deltacells::ffi as c;
use deltacells::storage::remote::ObjectRoot;
use deltacells::storage::{Location, Options};

mod cabi;
mod synthetic;
use cabi::{median, ok, with_c_args, CDataset, Csr};
use synthetic::{synthetic, Rng};

const BUCKET: &str = "dc-bench";

struct Args {
    quick: bool,
    /// `datasets` or `chromdata`: only that table (default both).
    only: Option<String>,
    /// `moto` (the default) or `s3s-fs`.
    server: Option<String>,
    reps: usize,
    latency_ms: f64,
}

fn args() -> Args {
    let mut a = Args {
        quick: false,
        only: None,
        server: None,
        reps: 3,
        latency_ms: 20.0,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        match v[i].as_str() {
            "--quick" => a.quick = true,
            "--reps" => {
                a.reps = v[i + 1].parse().expect("--reps N");
                i += 1
            }
            "--server" => {
                a.server = Some(v[i + 1].clone());
                i += 1
            }
            "--only" => {
                a.only = Some(v[i + 1].clone());
                i += 1
            }
            "--latency-ms" => {
                a.latency_ms = v[i + 1].parse().expect("--latency-ms MS");
                i += 1
            }
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
        i += 1;
    }
    a
}

/// The test servers (an S3 server + the latency proxy in front of it); killed on drop.
struct Servers {
    child: Child,
    s3: String,
    slow: String,
    /// Which S3 server: "s3s-fs" or "moto".
    name: &'static str,
}

/// The s3s-fs binary (crates.io: `cargo install --locked s3s-fs@0.14.1 --features
/// binary`, a Rust S3 server over a directory) with `--server s3s-fs`:
/// `$DELTACELLS_BENCH_S3S_FS`, else `s3s-fs` on the PATH or in ~/.cargo/bin. Not the default:
/// measured here it serves a 0.75 MB GET in ~32 ms against moto's ~6 ms
/// (docs/performance.md), so moto stays the server of the figures.
fn s3s_fs(server: Option<&str>) -> Option<PathBuf> {
    match server {
        Some("moto") | None => return None,
        Some("s3s-fs") => {}
        Some(other) => panic!("--server {other}: moto or s3s-fs"),
    }
    let env = std::env::var_os("DELTACELLS_BENCH_S3S_FS").map(PathBuf::from);
    let path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin")))
        .map(|d| d.join("s3s-fs"));
    let found = env.into_iter().chain(path).find(|p| p.is_file());
    assert!(found.is_some(), "--server s3s-fs: no s3s-fs binary found");
    found
}

impl Servers {
    fn start(serve_dir: &Path, latency_ms: f64, server: Option<&str>) -> Servers {
        let mut cmd = Command::new("python3");
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/remote_servers.py"))
            .arg("--serve-dir")
            .arg(serve_dir)
            .args(["--bucket", BUCKET, "--latency-ms", &latency_ms.to_string()]);
        let mut name = "moto";
        if let Some(bin) = s3s_fs(server) {
            let data = serve_dir.with_file_name("s3s-fs-data");
            let _ = std::fs::remove_dir_all(&data);
            std::fs::create_dir_all(&data).unwrap();
            cmd.arg("--s3s-fs").arg(bin).arg("--s3s-fs-dir").arg(&data);
            name = "s3s-fs";
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 scripts/remote_servers.py (needs moto[server]: scripts/setup.sh)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("test servers did not start ({e}): {line:?}"));
        let get = |k: &str| v[k].as_str().unwrap().to_string();
        Servers {
            s3: get("s3"),
            slow: get("slow"),
            child,
            name,
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3_options(endpoint: &str) -> Vec<String> {
    vec![
        format!("aws_endpoint={endpoint}"),
        "aws_region=us-east-1".into(),
        "aws_access_key_id=bench-key-id".into(),
        "aws_secret_access_key=bench-secret".into(),
        "allow_http=true".into(),
    ]
}

/// A dataset handle with the decoded-data cache off: every gather reads its tiles again.
fn open_uncached(source: &str, options: &[String]) -> CDataset {
    let d = CDataset::open(source, options);
    d.cache_bytes(0);
    d
}

/// Writes the dataset once (`cells` synthetic cells in `tiles` tiles) and returns its path.
fn prepare(quick: bool) -> (PathBuf, usize, u64) {
    let (cells, nnz_per_cell, tiles) = if quick {
        (2_000, 500.0, 10)
    } else {
        (10_000, 2_000.0, 20)
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-remote")
        .join(format!("v1-{cells}-{nnz_per_cell}-{tiles}"));
    let ds = root.join("ds");
    if !root.join("done").exists() {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let m = synthetic(cells, 38_000, nnz_per_cell);
        let opts = WriterOptions {
            tile_size: (cells / tiles) as u64,
            n_chunks: 8,
            zstd_level: 19,
            threads: 0,
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::create(&ds, m.n_genes, opts).unwrap();
        w.append_csr(cells as u64, &m.indptr, &m.indices, &m.values)
            .unwrap();
        w.finish().unwrap();
        std::fs::write(root.join("done"), b"").unwrap();
    }
    (ds, cells, (cells / tiles) as u64)
}

/// The library's object root at `url` with `options` (for the upload and the floor).
fn object_root(url: &str, options: &[String]) -> Arc<ObjectRoot> {
    let strs: Vec<&str> = options.iter().map(String::as_str).collect();
    let loc = Location::parse(url).unwrap();
    let o = Options::parse(&strs, &loc).unwrap();
    match loc {
        Location::Remote(u) => ObjectRoot::new(u, o).unwrap(),
        Location::Local(_) => unreachable!("{url} is remote"),
    }
}

/// Uploads every file of the local dataset `dir` under `s3://BUCKET/<prefix>/` (moto's
/// server starts empty; the library's own writer could do it too, but this keeps the bytes
/// identical to the local copy).
fn upload(dir: &Path, servers: &Servers, prefix: &str) {
    if dir.is_file() {
        let (parent, name) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let root = object_root(&format!("s3://{BUCKET}/{parent}"), &s3_options(&servers.s3));
        root.put_file(name, dir).unwrap();
        return;
    }
    let root = object_root(&format!("s3://{BUCKET}/{prefix}"), &s3_options(&servers.s3));
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
                files.push((rel, p));
            }
        }
    }
    root.put_files(files).unwrap();
}

/// A ChromData handle of the C ABI, opened with options; each query's stream is imported
/// and drained (every batch taken), as a caller does.
struct CStore(*mut c::dc_chromdata);

impl CStore {
    fn open(source: &str, options: &[String]) -> CStore {
        let mut h = std::ptr::null_mut();
        with_c_args(source, options, |p, opts, n| {
            // SAFETY: `p` and the `n` options at `opts` are NUL-terminated strings alive for
            // the call (with_c_args); `h` is writable.
            ok(
                unsafe { c::dc_chromdata_open_opts(p, opts, n, &mut h) },
                "dc_chromdata_open_opts",
            )
        });
        CStore(h)
    }

    /// Rows of one query: a cell (`Some(id)`, `false`), a chromosome (`Some(name)`, `true`)
    /// or every spot (`None`); all columns.
    fn rows(&self, query: Option<&str>, chrom: bool) -> usize {
        let mut stream = FFI_ArrowArrayStream::empty();
        let out = &mut stream as *mut FFI_ArrowArrayStream;
        let key = query.map(|q| CString::new(q).unwrap());
        // SAFETY: a live handle; `key` is NUL-terminated and alive for the call; no column
        // selection (NULL, 0: every column); `out` is writable.
        let st = unsafe {
            let none = std::ptr::null();
            match (&key, chrom) {
                (Some(k), false) => c::dc_chromdata_get_cell(self.0, k.as_ptr(), none, 0, out),
                (Some(k), true) => c::dc_chromdata_get_chrom(self.0, k.as_ptr(), none, 0, out),
                (None, _) => c::dc_chromdata_read_spots(self.0, 0, none, 0, out),
            }
        };
        ok(st, "chromdata query");
        RecordBatchStreamReader::try_new(stream)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum()
    }
}

impl Drop for CStore {
    fn drop(&mut self) {
        // SAFETY: a handle from dc_chromdata_open_opts, freed once.
        unsafe { c::dc_chromdata_free(self.0) };
    }
}

const CHROMS: [&str; 5] = ["chr1", "chr2", "chr3", "chr4", "chr5"];
const BINS_PER_CHROM: usize = 200;

/// Writes a ChromData store (layout 2.2, primary + coords) once, as a directory and as a
/// `.cdz`: `cells` cells of 2 traces, each trace one random walk over the 200 loci of one of
/// 5 chromosomes. Returns the two paths.
fn prepare_store(quick: bool) -> (PathBuf, PathBuf, usize) {
    let cells = if quick { 100 } else { 1_000 };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-remote")
        .join(format!("store-v1-{cells}"));
    let (dir, cdz) = (root.join("s.chromdata.zarr"), root.join("s.cdz"));
    if root.join("done").exists() {
        return (dir, cdz, cells);
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let keys: Vec<i32> = (0..CHROMS.len() * BINS_PER_CHROM)
        .map(|b| (b / BINS_PER_CHROM) as i32)
        .collect();
    let start: Vec<i64> = (0..keys.len())
        .map(|b| (b % BINS_PER_CHROM) as i64 * 30_000)
        .collect();
    let end: Vec<i64> = start.iter().map(|s| s + 30_000).collect();
    let chrom = DictionaryArray::<Int32Type>::try_new(
        Int32Array::from(keys),
        Arc::new(StringArray::from(CHROMS.to_vec())),
    )
    .unwrap();
    let bins = RecordBatch::try_from_iter(vec![
        ("chrom", Arc::new(chrom) as ArrayRef),
        ("start", Arc::new(Int64Array::from(start)) as ArrayRef),
        ("end", Arc::new(Int64Array::from(end)) as ArrayRef),
    ])
    .unwrap();
    let (mut trace, mut cell, mut bin) = (Vec::new(), Vec::new(), Vec::new());
    let mut xyz: [Vec<f64>; 3] = Default::default();
    let mut rng = Rng(7);
    for t in 0..2 * cells {
        let first = (t % CHROMS.len()) * BINS_PER_CHROM;
        let mut at = [0.0f64; 3];
        for b in first..first + BINS_PER_CHROM {
            trace.push(t as i64 + 1);
            cell.push((t / 2) as i64 + 1);
            bin.push(b as i32);
            for (k, v) in xyz.iter_mut().enumerate() {
                at[k] += 110.0 * (rng.unit() - 0.5);
                v.push(at[k]);
            }
        }
    }
    let mut cols: Vec<(&str, ArrayRef)> = vec![
        ("trace_id", Arc::new(Int64Array::from(trace))),
        ("cell_id", Arc::new(Int64Array::from(cell))),
        ("bin_id", Arc::new(Int32Array::from(bin))),
    ];
    for (name, v) in ["x", "y", "z"].into_iter().zip(xyz) {
        cols.push((name, Arc::new(Float64Array::from(v))));
    }
    let spots = RecordBatch::try_from_iter(cols).unwrap();
    for path in [&dir, &cdz] {
        let opts = StoreOptions {
            layout: Layout::PrimaryCoords,
            ..StoreOptions::default()
        };
        let mut w = ChromDataWriter::create(path, opts).unwrap();
        w.set_bins(bins.clone()).unwrap();
        w.append(spots.clone()).unwrap();
        w.finish().unwrap();
    }
    std::fs::write(root.join("done"), b"").unwrap();
    (dir, cdz, cells)
}

/// ChromData queries at S3 (through the latency proxy) against the same store on local
/// disk: open, 10 get_cell, one get_chrom, the full read, each on a fresh handle per
/// repetition (opened outside the timing of the queries).
fn chromdata_table(a: &Args, servers: &Servers) {
    let (dir, cdz, cells) = prepare_store(a.quick);
    upload(&dir, servers, "store/s.chromdata.zarr");
    upload(&cdz, servers, "store/s.cdz");
    let mut rng = Rng(0xce11);
    let cell_ids: Vec<String> = (0..10)
        .map(|_| (1 + rng.next() % cells as u64).to_string())
        .collect();
    println!();
    println!(
        "ChromData (layout 2.2, {} spots) at S3 ({} on loopback, {} ms per request) against \
         local, through the C ABI; ms per query, medians of {}",
        2 * cells * BINS_PER_CHROM,
        servers.name,
        a.latency_ms,
        a.reps
    );
    println!(
        "| store | reader | open | open requests | 10 x get_cell | get_chrom | full read \
         | full read S3 / local |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, path, key) in [
        ("directory", &dir, "store/s.chromdata.zarr"),
        (".cdz", &cdz, "store/s.cdz"),
    ] {
        let mut readers: Vec<(String, String, Vec<String>)> =
            vec![("local".into(), path.to_str().unwrap().into(), Vec::new())];
        for mc in [1usize, 4, 16] {
            let mut o = s3_options(&servers.slow);
            o.push(format!("max_concurrency={mc}"));
            readers.push((
                format!("S3, max_concurrency {mc}"),
                format!("s3://{BUCKET}/{key}"),
                o,
            ));
        }
        let mut local_full = 0.0;
        let mut want: Option<[usize; 3]> = None;
        for (label, source, opts) in &readers {
            let mut t: [Vec<f64>; 4] = Default::default();
            let mut rows_seen = [0usize; 3];
            for rep in 0..=a.reps {
                let clock = Instant::now();
                let h = CStore::open(source, opts);
                let open = clock.elapsed().as_secs_f64();
                let clock = Instant::now();
                rows_seen[0] = cell_ids.iter().map(|c| h.rows(Some(c), false)).sum();
                let cell = clock.elapsed().as_secs_f64();
                let clock = Instant::now();
                rows_seen[1] = h.rows(Some(CHROMS[1]), true);
                let chrom = clock.elapsed().as_secs_f64();
                let h = CStore::open(source, opts);
                let clock = Instant::now();
                rows_seen[2] = h.rows(None, false);
                let full = clock.elapsed().as_secs_f64();
                assert_eq!(
                    rows_seen[2],
                    2 * cells * BINS_PER_CHROM,
                    "{label}: full read"
                );
                if rep > 0 {
                    for (v, x) in t.iter_mut().zip([open, cell, chrom, full]) {
                        v.push(x * 1e3);
                    }
                }
            }
            assert_eq!(
                *want.get_or_insert(rows_seen),
                rows_seen,
                "{label}: rows differ"
            );
            let m: Vec<f64> = t.iter().map(|v| median(v.clone())).collect();
            if label == "local" {
                local_full = m[3];
            }
            // Requests of one open (GET and HEAD; a coalesced ranged read counts once).
            let o: Vec<&str> = opts.iter().map(String::as_str).collect();
            let requests = ChromData::open_url(source, &o).unwrap().requests_sent();
            println!(
                "| {name} | {label} | {:.1} | {requests} | {:.1} | {:.1} | {:.1} | {:.2} |",
                m[0],
                m[1],
                m[2],
                m[3],
                m[3] / local_full
            );
        }
    }
}

fn main() {
    let a = args();
    let (dir, cells, tile_size) = prepare(a.quick);
    let servers = Servers::start(&dir, a.latency_ms, a.server.as_deref());
    let only = a.only.as_deref();
    if only != Some("chromdata") {
        upload(&dir, &servers, "ds");
    }
    if matches!(only, None | Some("datasets")) {
        datasets_table(&a, &servers, &dir, cells, tile_size);
    }
    if matches!(only, None | Some("datasets") | Some("batches")) {
        batches_table(&a, &servers, &dir, cells);
    }
    if matches!(only, None | Some("chromdata")) {
        chromdata_table(&a, &servers);
    }
}

/// Gathers at S3 against local gathers and against the bare-GET floor.
fn datasets_table(a: &Args, servers: &Servers, dir: &Path, cells: usize, tile_size: u64) {
    let url = format!("s3://{BUCKET}/ds");

    // Draws of k random cells (the same for every reader), a fresh draw per repetition.
    let ks = [100usize, 1_000, cells];
    let mut rng = Rng(0x5eed);
    let draws: Vec<Vec<Vec<u64>>> = ks
        .iter()
        .map(|&k| {
            (0..=a.reps)
                .map(|_| (0..k).map(|_| rng.next() % cells as u64).collect())
                .collect()
        })
        .collect();
    // Room for the largest gather (all `cells` cells drawn at random, repeats allowed:
    // about 1.2x the dataset's nonzeros at most in practice).
    let cap = 3 * cells * 2_000;
    let mut out = Csr::new(cells, cap);

    let local = open_uncached(dir.to_str().unwrap(), &[]);
    // Each reader at max_concurrency mc beside its floor: bare GETs of the same tiles
    // through the same proxy, mc in flight, nothing decoded.
    let remotes: Vec<(usize, CDataset, Arc<ObjectRoot>)> = [1usize, 4, 16]
        .iter()
        .map(|&mc| {
            let mut o = s3_options(&servers.slow);
            o.push(format!("max_concurrency={mc}"));
            (mc, open_uncached(&url, &o), object_root(&url, &o))
        })
        .collect();
    let floor = |root: &Arc<ObjectRoot>, cells: &[u64]| {
        let mut tiles: Vec<u64> = cells.iter().map(|c| c / tile_size).collect();
        tiles.sort_unstable();
        tiles.dedup();
        let got = root
            .get_many(tiles.iter().map(|&t| tile_relpath(t)).collect())
            .unwrap();
        got.iter().map(|b| b.len()).sum::<usize>()
    };

    println!(
        "Gathers from S3 ({} on loopback, {} ms per request), cache off, through the C ABI; \
         medians of {} (after one warm-up). Floor: bare GETs of the touched tiles, same \
         proxy and concurrency, no decoding",
        servers.name, a.latency_ms, a.reps
    );
    println!(
        "| cells per gather | local cells/s | max_concurrency | S3 cells/s | S3 / local \
         | floor cells/s | S3 / floor |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (ki, &k) in ks.iter().enumerate() {
        // The same cells through every reader, alternating readers per repetition:
        // slot 0 local, then for each mc its reader and its floor.
        let n = 1 + 2 * remotes.len();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
        for (rep, cells) in draws[ki].iter().enumerate() {
            let mut timed = |i: usize, f: &mut dyn FnMut()| {
                let t = Instant::now();
                f();
                if rep > 0 {
                    times[i].push(t.elapsed().as_secs_f64());
                }
            };
            let mut want = 0;
            timed(0, &mut || want = local.gather(cells, &mut out));
            for (j, (_, r, root)) in remotes.iter().enumerate() {
                let mut got = 0;
                timed(1 + 2 * j, &mut || got = r.gather(cells, &mut out));
                assert_eq!(got, want, "remote gather differs from local");
                timed(2 + 2 * j, &mut || {
                    floor(root, cells);
                });
            }
        }
        let rate = |i: usize| k as f64 / median(times[i].clone());
        let local_rate = rate(0);
        for (j, (mc, _, _)) in remotes.iter().enumerate() {
            let (ours, fl) = (rate(1 + 2 * j), rate(2 + 2 * j));
            println!(
                "| {k} | {local_rate:.0} | {mc} | {ours:.0} | {:.3} | {fl:.0} | {:.3} |",
                ours / local_rate,
                ours / fl
            );
        }
    }
}

/// Epochs of the batch iterator (`dc_dataset_batches`), block-shuffled order with windows of
/// 2 tiles (`dc_dataset_shuffled_order`, a new seed per repetition, the same for every
/// reader), batches of 256 cells, the default cache (256 MiB): at S3 against local, for
/// read_ahead 2 and 4. A fresh handle per epoch (its open not timed), so that no reader
/// starts with anything cached.
fn batches_table(a: &Args, servers: &Servers, dir: &Path, cells: usize) {
    const BATCH: usize = 256;
    let url = format!("s3://{BUCKET}/ds");
    let mut readers: Vec<(String, String, Vec<String>)> =
        vec![("local".into(), dir.to_str().unwrap().into(), Vec::new())];
    for mc in [1usize, 4, 16] {
        let mut o = s3_options(&servers.slow);
        o.push(format!("max_concurrency={mc}"));
        readers.push((format!("{mc}"), url.clone(), o));
    }
    let read_aheads = [2u32, 4];
    let mut out = Csr::new(BATCH, BATCH * 40_000);
    // times[read_ahead][reader]
    let mut times = vec![vec![Vec::new(); readers.len()]; read_aheads.len()];
    for rep in 0..=a.reps {
        for (ri, &ra) in read_aheads.iter().enumerate() {
            let mut want = None;
            for (i, (label, source, opts)) in readers.iter().enumerate() {
                let ds = CDataset::open(source, opts);
                let order = ds.shuffled(rep as u64 + 1, 2, cells);
                let t = Instant::now();
                let (_, nnz) = ds.batches_pass(&order, BATCH, ra, &mut out);
                let el = t.elapsed().as_secs_f64();
                assert_eq!(*want.get_or_insert(nnz), nnz, "{label}: nonzeros differ");
                if rep > 0 {
                    times[ri][i].push(el);
                }
            }
        }
    }
    println!();
    println!(
        "Batch iterator epochs from S3 ({} on loopback, {} ms per request) against local, \
         through the C ABI: all {cells} cells in a block-shuffled order (windows of 2 tiles), \
         batches of {BATCH}, default cache, a fresh handle per epoch; cells/s, medians of {}",
        servers.name, a.latency_ms, a.reps
    );
    println!("| read_ahead | local cells/s | max_concurrency | S3 cells/s | S3 / local |");
    println!("|---|---|---|---|---|");
    for (ri, &ra) in read_aheads.iter().enumerate() {
        let rate = |i: usize| cells as f64 / median(times[ri][i].clone());
        let local = rate(0);
        for (i, (label, _, _)) in readers.iter().enumerate().skip(1) {
            println!(
                "| {ra} | {local:.0} | {label} | {:.0} | {:.3} |",
                rate(i),
                rate(i) / local
            );
        }
    }
}
