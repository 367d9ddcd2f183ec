//! Concurrency stress (issue 19, item 6): many threads gathering from one dataset handle
//! with a tiny cache (its budget changed under them), many threads querying one ChromData
//! handle — every result equal to the single-threaded one, itself checked against the input;
//! and readers racing a writer that replaces the dataset (or store) at their path: each
//! handle sees the old or the new one whole — a member missing once the old one is deleted
//! (`NotFound`) — never one's manifest with the other's files.
//!
//! `DC_STRESS_ROUNDS` scales the work (default 1, CI; the long mode in docs/reliability.md
//! is `DC_STRESS_ROUNDS=40`).

mod dataset_support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use dataset_support::*;
use deltacells::chromdata::{CatValue, ChromData, ChromDataWriter, Columns, Layout};
use deltacells::dataset::{Dataset, DatasetWriter};
use deltacells::tile::ValuesOut;
use deltacells::ErrorKind;

const THREADS: usize = 8;

fn rounds() -> usize {
    std::env::var("DC_STRESS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// (indptr, indices, values) of a gather of `cells`.
type Gathered = (Vec<i64>, Vec<i32>, Vec<i32>);

fn gather(ds: &Dataset, cells: &[u64]) -> deltacells::Result<Gathered> {
    let nnz = ds.batch_nnz(cells)? as usize;
    let (mut ip, mut ix, mut v) = (vec![0i64; cells.len() + 1], vec![0; nnz], vec![0; nnz]);
    ds.gather(cells, &mut ip, &mut ix, ValuesOut::I32(&mut v))?;
    Ok((ip, ix, v))
}

/// A gather's rows against the input rows (the independent expectation).
fn check_against_input(input: &Csr, cells: &[u64], g: &Gathered) {
    let (ip, ix, v) = g;
    for (i, &c) in cells.iter().enumerate() {
        assert_eq!(
            dense_of(input.n_genes, ip, ix, v, i),
            expected_row(input, None, c as usize),
            "row {i} (cell {c})"
        );
    }
}

#[test]
fn threads_gathering_one_dataset_with_a_tiny_cache_match_one_thread() {
    let dir = TempDir::new("stress-gather");
    let mut rng = Rng::new(19);
    let input = random_csr(&mut rng, 900, 257, 0.08, true);
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(64), None, None, 7);
    let ds = Arc::new(Dataset::open(&path).unwrap());
    ds.set_threads(2);
    // A few chunks' worth: the threads evict each other's chunks all the time.
    let tiny = 3 * ds.tile_cache_unit() / 8;
    ds.set_cache_bytes(tiny);
    // Random cell lists (repeats, any order), their single-threaded results checked
    // against the input.
    let lists: Vec<Vec<u64>> = (0..48)
        .map(|_| {
            let n = 1 + rng.below(120) as usize;
            (0..n).map(|_| rng.below(900)).collect()
        })
        .collect();
    let want: Vec<Gathered> = lists.iter().map(|c| gather(&ds, c).unwrap()).collect();
    for (c, g) in lists.iter().zip(&want) {
        check_against_input(&input, c, g);
    }
    let (lists, want) = (Arc::new(lists), Arc::new(want));
    let iterations = 60 * rounds();
    let done = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (ds, lists, want) = (ds.clone(), lists.clone(), want.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng::new(100 + t as u64);
            for _ in 0..iterations {
                let k = rng.below(lists.len() as u64) as usize;
                let got = gather(&ds, &lists[k]).unwrap();
                assert!(
                    got == want[k],
                    "thread {t}, list {k}: differs from one thread"
                );
            }
        }));
    }
    // Meanwhile the budget changes: none, tiny, plenty.
    let tuner = {
        let (ds, done) = (ds.clone(), done.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !done.load(Relaxed) {
                ds.set_cache_bytes([0, tiny, 1 << 26][(i % 3) as usize]);
                i += 1;
                std::thread::yield_now();
            }
            i
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    done.store(true, Relaxed);
    let changes = tuner.join().unwrap();
    assert!(changes > 0);
    eprintln!(
        "{THREADS} threads x {iterations} gathers equal to one thread's; {changes} budget changes; {} tiles read",
        ds.counters().tiles_read.load(Relaxed)
    );
}

const CHROMS: [&str; 3] = ["chr1", "chr2", "chrX"];

/// A ChromData input of `n` spots in `traces` traces over 3 chromosomes; coordinates carry
/// `tag` so that two stores are told apart by any spot.
fn spots(n: usize, traces: u64, tag: f64, seed: u64) -> RecordBatch {
    let mut r = Rng::new(seed);
    let mut chrom = Vec::new();
    let (mut start, mut end, mut trace, mut cell) = (vec![], vec![], vec![], vec![]);
    let (mut x, mut y, mut z) = (vec![], vec![], vec![]);
    for _ in 0..n {
        let c = r.below(3) as usize;
        let b = r.below(40) as i64;
        chrom.push(CHROMS[c]);
        start.push(b * 1000);
        end.push(b * 1000 + 1000);
        let t = r.below(traces);
        trace.push(format!("t{t}"));
        cell.push((t % 5) as i64);
        x.push(tag);
        y.push(r.below(1000) as f64);
        z.push(-(r.below(1000) as f64));
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("chrom", Arc::new(StringArray::from(chrom))),
        ("start", Arc::new(Int64Array::from(start))),
        ("end", Arc::new(Int64Array::from(end))),
        ("trace_id", Arc::new(StringArray::from(trace))),
        ("cell_id", Arc::new(Int64Array::from(cell))),
        ("x", Arc::new(Float64Array::from(x))),
        ("y", Arc::new(Float64Array::from(y))),
        ("z", Arc::new(Float64Array::from(z))),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

fn write_store(path: &Path, layout: Layout, batch: RecordBatch, overwrite: bool) {
    let opts = deltacells::chromdata::WriterOptions {
        layout,
        overwrite,
        threads: 1,
        row_group_size: 64,
        coords_row_group_size: 32,
        memory_budget: 16 << 20,
        ..Default::default()
    };
    let mut w = ChromDataWriter::create(path, opts).unwrap();
    w.append(batch).unwrap();
    w.finish().unwrap();
}

#[derive(Debug, Clone)]
enum Query {
    Trace(String),
    Cell(i64),
    Chrom(&'static str),
    Spots(bool),
}

fn run(cd: &ChromData, q: &Query) -> deltacells::Result<RecordBatch> {
    let all = Columns::All;
    match q {
        Query::Trace(t) => cd.get_trace(&CatValue::Str(t.clone()), &all),
        Query::Cell(c) => cd.get_cell(&CatValue::Int(*c), &Columns::Coords),
        Query::Chrom(c) => cd.get_chrom(c, &all),
        Query::Spots(original) => cd.read_spots(*original, &all),
    }
}

fn queries(traces: u64) -> Vec<Query> {
    let mut q: Vec<Query> = (0..traces).map(|t| Query::Trace(format!("t{t}"))).collect();
    q.extend((0..5).map(Query::Cell));
    q.extend(CHROMS.iter().map(|c| Query::Chrom(c)));
    q.push(Query::Trace("absent".into()));
    q.extend([Query::Spots(false), Query::Spots(true)]);
    q
}

#[test]
fn threads_querying_one_chromdata_store_match_one_thread() {
    let dir = TempDir::new("stress-chromdata");
    let traces = 23;
    let input = spots(1500, traces, 1.5, 5);
    for layout in Layout::ALL {
        for ext in ["chromdata.zarr", "cdz"] {
            let path = dir.join(&format!("s-{}.{ext}", layout.format_version()));
            write_store(&path, layout, input.clone(), false);
            let cd = ChromData::open(&path).unwrap();
            let qs = Arc::new(queries(traces));
            let want: Arc<Vec<_>> = Arc::new(qs.iter().map(|q| run(&cd, q)).collect());
            // The single-threaded answers are real: every spot comes back once by trace,
            // and an absent trace is an error.
            let by_trace: usize = want[..traces as usize]
                .iter()
                .map(|r| r.as_ref().unwrap().num_rows())
                .sum();
            assert_eq!(by_trace, input.num_rows(), "{}", path.display());
            assert!(want[traces as usize + 8].is_err());
            let iterations = 40 * rounds();
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (cd, qs, want) = (cd.clone(), qs.clone(), want.clone());
                    std::thread::spawn(move || {
                        let mut rng = Rng::new(7 + t as u64);
                        for _ in 0..iterations {
                            let k = rng.below(qs.len() as u64) as usize;
                            assert!(
                                run(&cd, &qs[k]) == want[k],
                                "thread {t}: {:?} differs from one thread",
                                qs[k]
                            );
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        }
    }
}

/// Generation `g` of the raced dataset: its own size, genes and values, so that any mix of
/// two generations fails a check.
fn generation(g: u64) -> (Csr, Vec<String>) {
    let mut rng = Rng::new(1000 + g);
    let n_genes = 40 + (g % 4) as u32 * 7;
    let input = random_csr(&mut rng, 150 + (g % 3) as usize * 61, n_genes, 0.1, false);
    let names = (0..n_genes).map(|j| format!("gen{g}_gene{j}")).collect();
    (input, names)
}

/// One reader pass over a handle: which generation its names say, then the whole content
/// against that generation. Ok(None): a member was gone (the old dataset deleted after a
/// replace), which is allowed; any other error or difference is a mix.
fn read_whole(ds: &Dataset) -> Result<Option<u64>, String> {
    let allowed = |e: deltacells::Error| match e.kind {
        ErrorKind::NotFound => Ok(None),
        _ => Err(format!("{:?}: {e}", e.kind)),
    };
    let names = match ds.var_names() {
        Ok(n) => n.to_vec(),
        Err(e) => return allowed(e),
    };
    let g: u64 = names[0]
        .strip_prefix("gen")
        .and_then(|s| s.split('_').next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("unexpected gene name {}", names[0]))?;
    let (input, want_names) = generation(g);
    if names != want_names || ds.info().n_cells != input.n_rows() as u64 {
        return Err(format!(
            "generation {g}: names or size of another generation"
        ));
    }
    let cells: Vec<u64> = (0..input.n_rows() as u64).collect();
    let got = match gather(ds, &cells) {
        Ok(got) => got,
        Err(e) => return allowed(e),
    };
    for (i, &c) in cells.iter().enumerate() {
        let (ip, ix, v) = &got;
        if dense_of(input.n_genes, ip, ix, v, i) != expected_row(&input, None, c as usize) {
            return Err(format!("generation {g}: cell {c} of another generation"));
        }
    }
    Ok(Some(g))
}

fn write_generation(path: &Path, g: u64) {
    let (input, names) = generation(g);
    let mut opts = test_options(32 + (g % 2) * 32);
    opts.overwrite = true;
    let mut w = DatasetWriter::create(path, input.n_genes, opts).unwrap();
    w.set_var_names(&names).unwrap();
    append_in_pieces(&mut w, &input, &mut Rng::new(g));
    w.finish().unwrap();
}

#[test]
fn readers_racing_a_replacing_writer_never_see_a_mix() {
    let dir = TempDir::new("stress-replace");
    let path = dir.join("ds");
    write_generation(&path, 0);
    let generations = 12 * rounds() as u64;
    let writing = Arc::new(AtomicBool::new(true));
    let (whole, gone, seen_new) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (path, writing) = (path.clone(), writing.clone());
            let (whole, gone, seen_new) = (whole.clone(), gone.clone(), seen_new.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                loop {
                    let stop = !writing.load(Relaxed);
                    // The path always holds a dataset (the replace is one exchange).
                    let ds = Dataset::open(&path).unwrap();
                    ds.set_cache_bytes(1 << 12);
                    match read_whole(&ds) {
                        Ok(Some(g)) => {
                            whole.fetch_add(1, Relaxed);
                            if g > last {
                                seen_new.fetch_add(1, Relaxed);
                            }
                            last = last.max(g);
                        }
                        Ok(None) => {
                            gone.fetch_add(1, Relaxed);
                        }
                        Err(e) => panic!("a reader saw a mix: {e}"),
                    }
                    if stop {
                        return last;
                    }
                }
            })
        })
        .collect();
    for g in 1..=generations {
        write_generation(&path, g);
    }
    writing.store(false, Relaxed);
    for r in readers {
        // Each reader's last pass began after the last write: it saw the last generation.
        assert_eq!(r.join().unwrap(), generations);
    }
    let left: Vec<String> = dir.entries();
    assert_eq!(left, ["ds"], "no temporary or old dataset left");
    eprintln!(
        "{generations} replaces; reader passes: {} whole, {} found the old dataset deleted, {} saw a newer one",
        whole.load(Relaxed),
        gone.load(Relaxed),
        seen_new.load(Relaxed)
    );
}

#[test]
fn a_handle_opened_before_a_replace_never_reads_the_new_dataset() {
    let dir = TempDir::new("stress-old-handle");
    let path = dir.join("ds");
    write_generation(&path, 0);
    let old = Dataset::open(&path).unwrap();
    // Read before the replace: served from memory afterwards.
    let (input0, names0) = generation(0);
    let first = gather(&old, &[0, 1, 2]).unwrap();
    check_against_input(&input0, &[0, 1, 2], &first);
    write_generation(&path, 1);
    // Members not read yet: the old directory is gone, so they are missing — never the
    // new dataset's gene names under the old manifest.
    match old.var_names() {
        Ok(n) => assert_eq!(n, &names0[..]),
        Err(e) => assert_eq!(e.kind, ErrorKind::NotFound, "{e}"),
    }
    let cells: Vec<u64> = (0..input0.n_rows() as u64).collect();
    match gather(&old, &cells) {
        Ok(g) => check_against_input(&input0, &cells, &g),
        Err(e) => assert_eq!(e.kind, ErrorKind::NotFound, "{e}"),
    }
    // A handle opened now reads the new one.
    let new = Dataset::open(&path).unwrap();
    assert_eq!(read_whole(&new), Ok(Some(1)));
}

/// A store handle opened before a replace keeps its own files (a `.cdz` stays open; a
/// directory's members are opened relative to the directory it opened).
#[test]
fn a_store_handle_opened_before_a_replace_never_reads_the_new_store() {
    let dir = TempDir::new("stress-store-replace");
    for ext in ["chromdata.zarr", "cdz"] {
        let path: PathBuf = dir.join(&format!("s.{ext}"));
        write_store(&path, Layout::PrimaryCoords, spots(400, 9, 1.0, 1), false);
        let old = ChromData::open(&path).unwrap();
        write_store(&path, Layout::PrimaryCoords, spots(300, 9, 2.0, 2), true);
        for q in queries(9) {
            match run(&old, &q) {
                Ok(b) => {
                    let x = b.column_by_name("x").unwrap();
                    let x = x.as_any().downcast_ref::<Float64Array>().unwrap();
                    assert!(x.iter().all(|v| v == Some(1.0)), "{ext} {q:?}: new spots");
                }
                Err(e) => assert!(
                    e.kind == ErrorKind::NotFound
                        || matches!(q, Query::Trace(ref t) if t == "absent"),
                    "{ext} {q:?}: {e}"
                ),
            }
        }
        let new = ChromData::open(&path).unwrap();
        assert_eq!(new.info().n_spots, 300);
    }
}

/// Readers opening a store while a writer replaces it again and again: every open succeeds
/// (one replacing the directory during an open begins it again on the new store) and each
/// handle reads one generation whole — its spot count and every spot's tag agree — or
/// finds a member gone (`NotFound`) once its directory is deleted; never a mix.
#[test]
fn store_readers_racing_a_replacing_writer_always_open_and_never_see_a_mix() {
    let dir = TempDir::new("stress-store-race");
    let n_spots = |g: u64| 120 + 10 * g as usize;
    for ext in ["chromdata.zarr", "cdz"] {
        let path: PathBuf = dir.join(&format!("s.{ext}"));
        let write = |g: u64| {
            let batch = spots(n_spots(g), 7, g as f64, g);
            write_store(&path, Layout::PrimaryCoords, batch, g > 0);
        };
        write(0);
        let generations = 8 * rounds() as u64;
        let writing = AtomicBool::new(true);
        let (whole, gone) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| loop {
                    let stop = !writing.load(Relaxed);
                    let cd = ChromData::open(&path)
                        .unwrap_or_else(|e| panic!("{ext}: an open failed during a replace: {e}"));
                    let n = cd.info().n_spots;
                    let g = (n - 120) / 10;
                    match cd.read_spots(false, &Columns::All) {
                        Ok(b) => {
                            assert_eq!(b.num_rows() as u64, n, "{ext}");
                            let x = b.column_by_name("x").unwrap();
                            let x = x.as_any().downcast_ref::<Float64Array>().unwrap();
                            assert!(
                                x.iter().all(|v| v == Some(g as f64)),
                                "{ext}: {n} spots (generation {g}) with another generation's"
                            );
                            whole.fetch_add(1, Relaxed);
                        }
                        Err(e) => {
                            assert_eq!(e.kind, ErrorKind::NotFound, "{ext}: {e}");
                            gone.fetch_add(1, Relaxed);
                        }
                    }
                    if stop {
                        assert_eq!(g, generations, "{ext}: the last pass saw the last store");
                        return;
                    }
                });
            }
            for g in 1..=generations {
                write(g);
            }
            writing.store(false, Relaxed);
        });
        eprintln!(
            "{ext}: {generations} replaces; reader passes: {} whole, {} found the old store deleted",
            whole.load(Relaxed),
            gone.load(Relaxed)
        );
    }
}
