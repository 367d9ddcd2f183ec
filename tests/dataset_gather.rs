//! Gathers by chunk: random datasets (with value and gap exceptions), random orders with
//! repeats, every cache budget from none to plenty, one and several threads, int32 and
//! float32 — always equal to the input rows; only the chunks holding requested cells are
//! decompressed; a damaged chunk fails only the gathers that need it, naming tile and chunk.

mod dataset_support;

use std::sync::atomic::Ordering::Relaxed;

use dataset_support::*;
use deltacells::dataset::{Dataset, WriterOptions};
use deltacells::tile::ValuesOut;
use deltacells::ErrorKind;
use proptest::prelude::{
    any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig, Strategy,
    TestCaseError,
};

/// Row `r` of the input as (indices, values): the expectation, taken from the input only.
fn input_row(input: &Csr, r: usize) -> (Vec<i32>, Vec<i32>) {
    let (a, b) = (input.indptr[r] as usize, input.indptr[r + 1] as usize);
    (input.indices[a..b].to_vec(), input.values[a..b].to_vec())
}

/// Gathers `cells` as int32 and as float32 and compares every row with the input.
fn check_rows(ds: &Dataset, input: &Csr, cells: &[u64]) -> Result<(), TestCaseError> {
    let nnz = ds.batch_nnz(cells).unwrap();
    let mut indptr = vec![-1i64; cells.len() + 1];
    let mut indices = vec![-1i32; nnz as usize];
    let mut values = vec![-1i32; nnz as usize];
    let got = ds
        .gather(
            cells,
            &mut indptr,
            &mut indices,
            ValuesOut::I32(&mut values),
        )
        .unwrap();
    prop_assert_eq!(got, nnz);
    let mut fvalues = vec![-1f32; nnz as usize];
    let mut findices = vec![-1i32; nnz as usize];
    let mut findptr = vec![-1i64; cells.len() + 1];
    ds.gather(
        cells,
        &mut findptr,
        &mut findices,
        ValuesOut::F32(&mut fvalues),
    )
    .unwrap();
    prop_assert_eq!(&findptr, &indptr);
    prop_assert_eq!(&findices, &indices);
    prop_assert_eq!(indptr[0], 0);
    for (i, &c) in cells.iter().enumerate() {
        let (a, b) = (indptr[i] as usize, indptr[i + 1] as usize);
        let (want_idx, want_val) = input_row(input, c as usize);
        prop_assert_eq!(&indices[a..b], &want_idx[..], "row {} (cell {})", i, c);
        prop_assert_eq!(&values[a..b], &want_val[..], "row {} (cell {})", i, c);
        let f: Vec<f32> = want_val.iter().map(|&v| v as f32).collect();
        prop_assert_eq!(&fvalues[a..b], &f[..]);
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Case {
    n_cells: usize,
    n_genes: u32,
    density: f64,
    tile_size: u64,
    chunks: u32,
    seed: u64,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        1usize..260,
        prop_oneof![Just(7u32), Just(300), Just(70_000)],
        1u64..90,
        1u32..6,
        any::<u64>(),
    )
        .prop_map(|(n_cells, n_genes, tile_size, chunks, seed)| Case {
            n_cells,
            n_genes,
            // Sparse for many genes: gaps above 65535 (gap exceptions) now and then.
            density: if n_genes > 65_536 { 0.0001 } else { 0.1 },
            tile_size,
            chunks,
            seed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn gathers_equal_the_input(case in case_strategy()) {
        let mut rng = Rng::new(case.seed);
        let input = random_csr(&mut rng, case.n_cells, case.n_genes, case.density, true);
        let dir = TempDir::new("gather-prop");
        let path = dir.join("ds");
        let opts = WriterOptions {
            tile_size: case.tile_size,
            zstd_level: 1,
            n_chunks: case.chunks,
            threads: 1,
            ..WriterOptions::default()
        };
        write_dataset(&path, &input, opts, None, None, case.seed);
        let ds = Dataset::open(&path).unwrap();
        let unit = ds.tile_cache_unit();
        let n = case.n_cells as u64;
        for (round, budget) in [0, 1, 300, unit / 3, unit, 256 << 20].into_iter().enumerate() {
            ds.set_cache_bytes(budget);
            ds.set_threads(1 + round % 3);
            for _ in 0..3 {
                let k = rng.below(2 * n + 3) as usize;
                let cells: Vec<u64> = (0..k).map(|_| rng.below(n)).collect();
                let before = ds.counters().chunks_decompressed.load(Relaxed);
                check_rows(&ds, &input, &cells)?;
                let after = ds.counters().chunks_decompressed.load(Relaxed);
                // Two gathers (int32, float32): with the cache off each decompresses every
                // touched chunk exactly once; with a cache, at most that.
                let touched = chunks_of(&ds, &cells).len() as u64;
                if budget == 0 {
                    prop_assert_eq!(after - before, 2 * touched);
                } else {
                    prop_assert!(after - before <= 2 * touched);
                }
                prop_assert!(ds.cached_bytes() <= budget,
                    "cache holds {} bytes over a {}-byte budget", ds.cached_bytes(), budget);
            }
        }
    }
}

/// Gathers `cells` into scratch buffers, returning the error if any.
fn gather_result(ds: &Dataset, cells: &[u64]) -> Result<u64, deltacells::Error> {
    let mut ip = vec![0i64; cells.len() + 1];
    let mut ix = vec![0i32; 100_000];
    let mut vs = vec![0i32; 100_000];
    ds.gather(cells, &mut ip, &mut ix, ValuesOut::I32(&mut vs))
}

#[test]
fn a_damaged_chunk_fails_only_the_gathers_that_need_it() {
    let mut rng = Rng::new(5);
    let input = random_csr(&mut rng, 300, 200, 0.2, false);
    let dir = TempDir::new("gather-damage");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(100), None, None, 3);
    let ds = Dataset::open(&path).unwrap();
    ds.set_cache_bytes(0);
    let e1 = ds.tile_index(1).unwrap().chunks[1];
    let in_c1: Vec<u64> = (100 + e1.cell_lo..100 + e1.cell_hi).collect();
    let file = path.join("tiles/tile_000001.dct");
    let good = std::fs::read(&file).unwrap();

    // Damage the gaps frame of chunk 1 somewhere that the frame's structure check does
    // not see, but decompressing (or checking the cells) does.
    let mut found = false;
    for k in 8..e1.gaps.len {
        let mut bad = good.clone();
        bad[(e1.gaps.off + k) as usize] ^= 0xff;
        if deltacells::tile::Tile::parse(&bad, false).is_err() {
            continue;
        }
        std::fs::write(&file, &bad).unwrap();
        ds.set_verify_crc(false);
        if let Err(err) = gather_result(&ds, &in_c1) {
            assert_eq!(err.kind, ErrorKind::Format);
            assert!(
                err.message.contains("tile 1 (") && err.message.contains("chunk 1:"),
                "{}",
                err.message
            );
            // The same gather with the CRC on: the tile fails as a whole.
            ds.set_verify_crc(true);
            let err = gather_result(&ds, &in_c1).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Checksum);
            assert!(err.message.contains("tile 1 ("), "{}", err.message);
            found = true;
            break;
        }
    }
    assert!(found, "no damage of the gaps frame was detected");
    // CRC off: every other chunk of the tile still reads.
    ds.set_verify_crc(false);
    let others: Vec<u64> = (0..300).filter(|c| !in_c1.contains(c)).collect();
    check_gather(&ds, &input, None, &others);
}

#[test]
fn one_thread_and_two_agree_and_reads_are_counted() {
    let mut rng = Rng::new(11);
    let input = random_csr(&mut rng, 1000, 300, 0.05, true);
    let dir = TempDir::new("gather-threads");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(100), None, None, 4);
    let ds = Dataset::open(&path).unwrap();
    ds.set_cache_bytes(0);
    let cells: Vec<u64> = (0..10).map(|i| i * 100 + 7).collect();
    for threads in [1, 2] {
        ds.set_threads(threads);
        let tiles = ds.counters().tiles_read.load(Relaxed);
        check_gather(&ds, &input, None, &cells);
        assert_eq!(
            ds.counters().tiles_read.load(Relaxed) - tiles,
            10,
            "each touched tile read once"
        );
    }
}

/// A result larger than the cache is written with non-temporal stores (long rows) and
/// through the cache (short rows); on every kernel path (scalar, SSE2, AVX2 where the CPU
/// has them) the rows equal the input, with repeats and exceptions, on one and two threads.
#[test]
fn large_results_equal_the_input_on_every_kernel_path() {
    use deltacells::tile::{active_path, force_path, KernelPath};
    let mut rng = Rng::new(21);
    // ~1,000 nonzeros per cell beside cells of a few: > 2 MiB of result for 400 rows.
    let mut input = random_csr(&mut rng, 300, 3_000, 0.4, true);
    let sparse = random_csr(&mut rng, 100, 3_000, 0.002, true);
    let shift = *input.indptr.last().unwrap();
    input
        .indptr
        .extend(sparse.indptr[1..].iter().map(|p| p + shift));
    input.indices.extend(&sparse.indices);
    input.values.extend(&sparse.values);
    let dir = TempDir::new("gather-large");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(64), None, None, 8);
    let ds = Dataset::open(&path).unwrap();
    let cells: Vec<u64> = (0..600).map(|_| rng.below(400)).collect();
    assert!(
        8 * ds.batch_nnz(&cells).unwrap() > 2 << 20,
        "the result must exceed 2 MiB"
    );
    let paths: Vec<KernelPath> = [KernelPath::Scalar, KernelPath::Sse2, KernelPath::Avx2]
        .into_iter()
        .filter(|p| p.available())
        .collect();
    for &p in &paths {
        force_path(Some(p));
        assert_eq!(active_path(), p);
        for (threads, budget) in [(1, 0), (2, 0), (2, 256 << 20)] {
            ds.set_threads(threads);
            ds.set_cache_bytes(budget);
            check_rows(&ds, &input, &cells).unwrap();
        }
    }
    force_path(None);
}
