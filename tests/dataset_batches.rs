//! Batches read ahead (C API §3.1): output identical to gathers of the same cells over
//! random orders with repeats, every cache budget and thread count; peek; a buffer too
//! small keeps the batch; cancellation mid-iteration stops all work; a corrupt tile in the
//! middle fails that batch only; the iterator outlives the dataset; shuffled orders follow
//! their specification (checked against tests/shuffled_order.py).

mod dataset_support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use dataset_support::*;
use deltacells::dataset::{Batches, Dataset, WriterOptions};
use deltacells::tile::ValuesOut;
use deltacells::ErrorKind;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest, ProptestConfig};

struct Fixture {
    _dir: TempDir,
    path: PathBuf,
    input: Csr,
}

fn fixture(tag: &str, cells: usize, tile_size: u64, chunks: u32, seed: u64) -> Fixture {
    let mut rng = Rng::new(seed);
    let input = random_csr(&mut rng, cells, 300, 0.05, true);
    let dir = TempDir::new(tag);
    let path = dir.join("ds");
    let opts = WriterOptions {
        tile_size,
        zstd_level: 1,
        n_chunks: chunks,
        threads: 1,
        ..WriterOptions::default()
    };
    write_dataset(&path, &input, opts, None, None, seed);
    Fixture {
        _dir: dir,
        path,
        input,
    }
}

/// One batch as a gather writes it: (indptr, indices, values).
type Csr3 = (Vec<i64>, Vec<i32>, Vec<i32>);

fn gather_of(ds: &Dataset, cells: &[u64]) -> Csr3 {
    let nnz = ds.batch_nnz(cells).unwrap() as usize;
    let (mut ip, mut ix, mut vs) = (
        vec![0i64; cells.len() + 1],
        vec![0i32; nnz],
        vec![0i32; nnz],
    );
    ds.gather(cells, &mut ip, &mut ix, ValuesOut::I32(&mut vs))
        .unwrap();
    (ip, ix, vs)
}

/// The next batch with buffers sized by peek.
fn next_batch(b: &mut Batches) -> deltacells::Result<Option<Csr3>> {
    let (rows, nnz) = b.peek()?;
    let (mut ip, mut ix, mut vs) = (
        vec![-1i64; rows as usize + 1],
        vec![-1i32; nnz as usize],
        vec![-1i32; nnz as usize],
    );
    let (r, z) = b.next_into(&mut ip, &mut ix, ValuesOut::I32(&mut vs))?;
    assert_eq!((r, z), (rows, nnz), "next agrees with peek");
    Ok((r > 0).then_some((ip, ix, vs)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn batches_equal_gathers(seed in any::<u64>(), bs in 1usize..70, ra in 0u32..5, threads in 1usize..4, budget_kind in 0usize..4) {
        let f = fixture("batches-prop", 230, 40, 3, seed % 1000);
        let ds = Arc::new(Dataset::open(&f.path).unwrap());
        ds.set_threads(threads);
        let unit = ds.tile_cache_unit();
        ds.set_cache_bytes([0, 500, unit, 256 << 20][budget_kind]);
        let mut rng = Rng::new(seed);
        let n = rng.below(400) as usize;
        let cells: Vec<u64> = (0..n).map(|_| rng.below(230)).collect();
        let mut b = Batches::new(ds.clone(), &cells, bs, ra as usize).unwrap();
        prop_assert_eq!(b.n_batches(), n.div_ceil(bs));
        let mut k = 0;
        while let Some(got) = next_batch(&mut b).unwrap() {
            let part = &cells[k * bs..((k + 1) * bs).min(n)];
            let want = gather_of(&ds, part);
            prop_assert_eq!(&got, &want, "batch {}", k);
            for (i, &c) in part.iter().enumerate() {
                prop_assert_eq!(
                    dense_of(300, &got.0, &got.1, &got.2, i),
                    expected_row(&f.input, None, c as usize)
                );
            }
            k += 1;
        }
        prop_assert_eq!(k, b.n_batches());
        prop_assert_eq!(b.peek().unwrap(), (0, 0), "stays at the end");
        drop(b);
        // Nothing stays pinned: a zero budget empties the cache.
        ds.set_cache_bytes(0);
        prop_assert!(ds.cached_bytes() == 0, "{} bytes stay", ds.cached_bytes());
    }
}

#[test]
fn bad_arguments_are_named() {
    let f = fixture("batches-args", 50, 20, 2, 1);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    let e = Batches::new(ds.clone(), &[1, 2], 0, 0).err().unwrap();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("batch_size"), "{}", e.message);
    let e = Batches::new(ds.clone(), &[1, 2, 50, 3], 2, 0)
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(
        e.message.contains("cells[2] = 50") && e.message.contains("n_cells = 50"),
        "{}",
        e.message
    );
    // No cells: no batches.
    let mut b = Batches::new(ds, &[], 3, 0).unwrap();
    assert_eq!(b.peek().unwrap(), (0, 0));
    assert!(next_batch(&mut b).unwrap().is_none());
}

#[test]
fn a_buffer_too_small_keeps_the_batch() {
    let f = fixture("batches-small", 100, 30, 2, 2);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    let cells: Vec<u64> = (0..100).rev().collect();
    let mut b = Batches::new(ds.clone(), &cells, 16, 1).unwrap();
    let (rows, nnz) = b.peek().unwrap();
    assert_eq!(rows, 16);
    let mut ip = vec![0i64; 17];
    let mut ix = vec![0i32; nnz as usize - 1];
    let mut vs = vec![0f32; nnz as usize];
    let e = b
        .next_into(&mut ip, &mut ix, ValuesOut::F32(&mut vs))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: nnz });
    let got = next_batch(&mut b).unwrap().unwrap();
    assert_eq!(got, gather_of(&ds, &cells[..16]), "still the first batch");
}

#[test]
fn dropping_mid_iteration_stops_all_work() {
    let f = fixture("batches-cancel", 2000, 50, 4, 3);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    ds.set_threads(2);
    let mut order = vec![0u64; 2000];
    ds.shuffled_order(5, 2, &mut order).unwrap();
    for taken in [0usize, 1, 3] {
        ds.set_cache_bytes(256 << 20);
        let mut b = Batches::new(ds.clone(), &order, 40, 16).unwrap();
        for _ in 0..taken {
            next_batch(&mut b).unwrap().unwrap();
        }
        drop(b);
        let after_drop = ds.counters().chunks_decompressed.load(Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(
            ds.counters().chunks_decompressed.load(Relaxed),
            after_drop,
            "no work after the drop returned ({taken} batches taken)"
        );
        // What was read ahead is released: nothing pinned survives a zero budget.
        ds.set_cache_bytes(0);
        assert_eq!(ds.cached_bytes(), 0);
    }
}

#[test]
fn a_corrupt_tile_fails_its_batch_and_iteration_goes_on() {
    let f = fixture("batches-corrupt", 200, 40, 3, 4);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    ds.set_cache_bytes(0);
    // Damage the last byte of tile 2 (a stream byte): the CRC no longer matches.
    let tile = f.path.join("tiles/tile_000002.dct");
    let mut bytes = std::fs::read(&tile).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x11;
    std::fs::write(&tile, &bytes).unwrap();
    // Batches of 20 cells in order: batches 4 and 5 are tile 2's.
    let cells: Vec<u64> = (0..200).collect();
    for threads in [1, 2] {
        ds.set_threads(threads);
        let mut b = Batches::new(ds.clone(), &cells, 20, 3).unwrap();
        for k in 0..10 {
            match next_batch(&mut b) {
                Ok(Some(got)) => {
                    assert!(k != 4 && k != 5, "batch {k} should fail");
                    assert_eq!(got, gather_of(&ds, &cells[k * 20..k * 20 + 20]));
                }
                Ok(None) => panic!("ended early at {k}"),
                Err(e) => {
                    assert!(k == 4 || k == 5, "batch {k}: {}", e.message);
                    assert_eq!(e.kind, ErrorKind::Checksum);
                    assert!(e.message.contains("tile 2 ("), "{}", e.message);
                }
            }
        }
        assert!(next_batch(&mut b).unwrap().is_none());
    }
}

#[test]
fn the_iterator_outlives_the_dataset() {
    let f = fixture("batches-outlive", 120, 30, 2, 6);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    let cells: Vec<u64> = (0..120).step_by(7).collect();
    let mut b = Batches::new(ds.clone(), &cells, 5, 2).unwrap();
    drop(ds);
    let mut rows = 0;
    while let Some((ip, ix, vs)) = next_batch(&mut b).unwrap() {
        for i in 0..ip.len() - 1 {
            assert_eq!(
                dense_of(300, &ip, &ix, &vs, i),
                expected_row(&f.input, None, cells[rows + i] as usize)
            );
        }
        rows += ip.len() - 1;
    }
    assert_eq!(rows, cells.len());
}

#[test]
fn shuffled_order_follows_its_specification() {
    let f = fixture("batches-order", 230, 40, 2, 7);
    let ds = Dataset::open(&f.path).unwrap();
    let n = 230usize;
    let tile_cells: Vec<String> = (0..ds.info().n_tiles)
        .map(|t| ds.tile_bounds(t).unwrap().1.to_string())
        .collect();
    for (seed, window) in [(0u64, 0usize), (42, 2), (u64::MAX, 3), (7, 100)] {
        let mut out = vec![u64::MAX; n];
        ds.shuffled_order(seed, window, &mut out).unwrap();
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n as u64).collect::<Vec<_>>(), "a permutation");
        // Each window's cells come together: cut the order where the tiles seen so far
        // are complete; no piece spans more than `window` tiles.
        let w = window.max(1);
        let cells_of = |t: u64| ds.tile_bounds(t).unwrap().1 as usize;
        let (mut seen, mut count) = (std::collections::BTreeSet::new(), 0usize);
        for &c in &out {
            seen.insert(c / 40);
            count += 1;
            assert!(seen.len() <= w, "a window spans {seen:?}");
            if seen.len() == w && count == seen.iter().map(|&t| cells_of(t)).sum::<usize>() {
                seen.clear();
                count = 0;
            }
        }
        assert_eq!(count, seen.iter().map(|&t| cells_of(t)).sum::<usize>());
        let mut again = vec![0u64; n];
        ds.shuffled_order(seed, window, &mut again).unwrap();
        assert_eq!(out, again, "deterministic");
        // The independent reference written from the documentation.
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/shuffled_order.py");
        let py = std::process::Command::new("python3")
            .arg(script)
            .arg(seed.to_string())
            .arg(window.to_string())
            .args(&tile_cells)
            .output()
            .expect("python3 runs");
        assert!(
            py.status.success(),
            "{}",
            String::from_utf8_lossy(&py.stderr)
        );
        let want: Vec<u64> = String::from_utf8(py.stdout)
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(out, want, "seed {seed} window {window}");
    }
    let e = ds.shuffled_order(1, 1, &mut vec![0u64; n - 1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: n as u64 });
}

/// An epoch keeps about its window of tiles in the cache: once the batch reading a tile for
/// the last time is handed out, that tile's chunks are gone (their buffers serve the next
/// tiles), and the cache stays within its budget, spares included. Rows stay exact.
#[test]
fn a_tile_leaves_the_cache_after_its_last_batch() {
    let f = fixture("batches-release", 200, 40, 3, 11);
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    // The expected batches come from another handle, so that they leave nothing in `ds`.
    let reference = Dataset::open(&f.path).unwrap();
    for threads in [1usize, 2] {
        ds.set_threads(threads);
        let budget = 4 * ds.tile_cache_unit();
        ds.set_cache_bytes(budget);
        let mut order = vec![0u64; 200];
        ds.shuffled_order(9 + threads as u64, 2, &mut order)
            .unwrap();
        let bs = 15;
        let mut b = Batches::new(ds.clone(), &order, bs, 2).unwrap();
        let mut k = 0;
        while let Some(got) = next_batch(&mut b).unwrap() {
            let end = ((k + 1) * bs).min(200);
            assert_eq!(got, gather_of(&reference, &order[k * bs..end]), "batch {k}");
            // Tile t holds cells 40t..40t + 40; only tiles later batches read may stay.
            let later: HashSet<u64> = order[end..].iter().map(|c| c / 40).collect();
            for (t, c) in ds.cached_chunks() {
                assert!(
                    later.contains(&t),
                    "after batch {k}: chunk {c} of tile {t} stays, no later batch reads it"
                );
            }
            assert!(
                ds.cached_bytes() <= budget,
                "{} bytes over a budget of {budget}",
                ds.cached_bytes()
            );
            k += 1;
        }
        assert_eq!(
            ds.cached_chunks(),
            vec![],
            "nothing stays after the last batch"
        );
        drop(b);
        ds.set_cache_bytes(0);
        assert_eq!(ds.cached_bytes(), 0, "spares are dropped with the budget");
    }
}
