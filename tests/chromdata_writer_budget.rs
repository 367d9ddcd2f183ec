//! The ChromData writer's memory budget in accounted bytes: a counting global allocator
//! records the peak of the bytes allocated and not yet freed (by every thread of this test
//! process) while a writer appends and finishes, and that peak, less what the test itself
//! held before, must stay within the writer's budget. Bytes, not RSS and not time: what
//! the allocator keeps after frees is not counted (see docs/performance.md for peak RSS).
//!
//! One test function in this file, so no other test's allocations run beside it.

mod chromdata_common;

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_select::concat::concat_batches;
use deltacells::chromdata::{ChromDataWriter, Layout, WriterOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only
// observe the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: AllocLayout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        // SAFETY: `p` was allocated by `System` with `l` (every allocation goes through here).
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, new: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the new size is the caller's.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new > l.size() {
                add(new - l.size());
            } else {
                LIVE.fetch_sub(l.size() - new, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const CHROMS: [&str; 5] = ["chr1", "chr2", "chr3", "chr4", "chrX"];
const BINS_PER_CHROM: i64 = 40;

fn bins() -> RecordBatch {
    let n = CHROMS.len() as i64 * BINS_PER_CHROM;
    let chrom = DictionaryArray::<Int32Type>::try_new(
        Int32Array::from_iter_values((0..n).map(|i| (i / BINS_PER_CHROM) as i32)),
        Arc::new(StringArray::from(CHROMS.to_vec())),
    )
    .unwrap();
    RecordBatch::try_from_iter(vec![
        ("chrom", Arc::new(chrom) as ArrayRef),
        (
            "start",
            Arc::new(Int64Array::from_iter_values(
                (0..n).map(|i| i % BINS_PER_CHROM * 1000),
            )),
        ),
        (
            "end",
            Arc::new(Int64Array::from_iter_values(
                (0..n).map(|i| (i % BINS_PER_CHROM + 1) * 1000),
            )),
        ),
    ])
    .unwrap()
}

/// Shuffled spots shaped like the benchmark's (cell, trace and bin drawn per row; x, y, z;
/// `tracks` float32 tracks with few distinct values), in batches of `rows`.
fn batches(n_batches: usize, rows: usize, tracks: usize) -> Vec<RecordBatch> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let n_bins = CHROMS.len() as u64 * BINS_PER_CHROM as u64;
    (0..n_batches)
        .map(|_| {
            let cell: Vec<i64> = (0..rows).map(|_| rng.below(40) as i64 + 1).collect();
            let trace: Vec<i64> = cell.iter().map(|c| 2 * c + rng.below(2) as i64).collect();
            let bin: Vec<i32> = (0..rows).map(|_| rng.below(n_bins) as i32).collect();
            let mut cols: Vec<(String, ArrayRef)> = vec![
                ("trace_id".into(), Arc::new(Int64Array::from(trace))),
                ("cell_id".into(), Arc::new(Int64Array::from(cell))),
                ("bin_id".into(), Arc::new(Int32Array::from(bin))),
            ];
            for a in ["x", "y", "z"] {
                let v = (0..rows).map(|_| rng.below(50_000) as f64 * 0.5);
                cols.push((a.into(), Arc::new(Float64Array::from_iter_values(v))));
            }
            for k in 0..tracks {
                let v = (0..rows).map(|_| (rng.below(2000) as f32 - 1000.0) / 100.0);
                cols.push((
                    format!("spot_tracks/t{k}"),
                    Arc::new(Float32Array::from_iter_values(v)),
                ));
            }
            RecordBatch::try_from_iter(cols).unwrap()
        })
        .collect()
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("dc-cdw-budget-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Peak bytes allocated by the writer (and its pool) over what was live before it was
/// created, for one store; and the runs it spilled.
fn write_peak(
    path: &std::path::Path,
    input: &[RecordBatch],
    opts: WriterOptions,
) -> (usize, usize) {
    let bins = bins();
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let runs = {
        let mut w = ChromDataWriter::create(path, opts).unwrap();
        w.set_bins(bins).unwrap();
        for b in input {
            w.append(b.clone()).unwrap();
        }
        w.finish().unwrap();
        w.runs_spilled()
    };
    (PEAK.load(Relaxed) - before, runs)
}

/// A Parquet file's rows in one batch, and whether any of its column chunks has a
/// dictionary page.
fn parquet_rows(path: &Path) -> (RecordBatch, bool) {
    let f = std::fs::File::open(path).unwrap();
    let b = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let dict = b
        .metadata()
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .any(|c| c.dictionary_page_offset().is_some());
    let schema = b.schema().clone();
    let batches: Vec<RecordBatch> = b.build().unwrap().map(|r| r.unwrap()).collect();
    (concat_batches(&schema, &batches).unwrap(), dict)
}

/// The files of a store written under a small budget hold the same rows as under a large
/// one; under the large one some columns of the spot files are dictionary-encoded, under
/// the small one none is (the column writers' dictionaries would not fit).
fn same_rows_without_dictionaries(small: &Path, large: &Path, what: &str) {
    let parquet = |dir: &Path| -> Vec<String> {
        let files = chromdata_common::tree_files(dir);
        files
            .into_iter()
            .filter(|f| f.ends_with(".parquet"))
            .collect()
    };
    let files = parquet(large);
    assert_eq!(parquet(small), files, "{what}: the same files");
    let mut large_dict = false;
    for rel in &files {
        let (a, a_dict) = parquet_rows(&small.join(rel));
        let (b, b_dict) = parquet_rows(&large.join(rel));
        assert!(a == b, "{what}: {rel} holds other rows");
        // The spot-aligned files (the small tables are written whole, outside the plan).
        let spot_file = Path::new(rel).components().nth(1).is_some_and(|c| {
            let c = c.as_os_str().to_string_lossy();
            ["spots", "spot_tracks", "primary", "coords"]
                .iter()
                .any(|f| *c == **f || c.strip_suffix(".parquet") == Some(f))
        });
        if spot_file {
            assert!(!a_dict, "{what}: {rel} is dictionary-encoded");
            large_dict |= b_dict;
        }
    }
    assert!(large_dict, "{what}: no dictionary under the large budget");
}

#[test]
fn allocations_stay_within_the_memory_budget() {
    let d = tmpdir();
    // ~44 MB of spots in 1,024-row batches (~290 KB each in the writer's form): a 48 MiB
    // budget spills it in 3 runs, 12 MiB in 10. (A store of 60 dictionary-encoded tracks
    // needs 48 MiB: its ~160 open column writers' dictionaries alone hold ~16 MB; under
    // 12 MiB the writer encodes no column with a dictionary.)
    let input = batches(150, 1024, 60);
    // Warm the library's pools, so that their threads' setup is not counted in one case
    // and not another.
    let _ = write_peak(
        &d.join("warm.chromdata.zarr"),
        &input[..2],
        WriterOptions::default(),
    );
    for layout in [Layout::PrimaryCoords, Layout::Flat, Layout::Partitioned] {
        for threads in [1, 2] {
            let mut stores = Vec::new();
            for budget in [12u64 << 20, 48 << 20] {
                let path = d.join(format!("{layout:?}-{threads}-{budget}.chromdata.zarr"));
                let opts = WriterOptions {
                    memory_budget: budget,
                    layout,
                    threads,
                    ..WriterOptions::default()
                };
                let (peak, runs) = write_peak(&path, &input, opts);
                let what = format!("budget {budget}, {layout:?}, {threads} threads");
                assert!(runs >= 2, "{what}: the input spills ({runs} runs)");
                assert!(
                    peak as u64 <= budget,
                    "{what}: {peak} bytes allocated at the peak, over the budget"
                );
                stores.push(path);
            }
            let what = format!("{layout:?}, {threads} threads");
            same_rows_without_dictionaries(&stores[0], &stores[1], &what);
            for p in stores {
                std::fs::remove_dir_all(&p).unwrap();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
