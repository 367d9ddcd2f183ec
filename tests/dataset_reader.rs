//! Reader behaviour: header/manifest agreement, CRC failures, caches, concurrency, errors.

mod dataset_support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use dataset_support::*;
use deltacells::dataset::{npy, Dataset};
use deltacells::tile::ValuesOut;
use deltacells::ErrorKind;
use serde_json::Value;

struct Fixture {
    _dir: TempDir,
    path: PathBuf,
    input: Csr,
    order: Vec<i32>,
}

/// 250 cells, 40 genes, tiles of 100 (100, 100, 50), with a gene order and names.
fn fixture(tag: &str) -> Fixture {
    let mut rng = Rng::new(99);
    let input = random_csr(&mut rng, 250, 40, 0.2, false);
    let order = rng.permutation(40);
    let names: Vec<String> = (0..40).map(|i| format!("g{i}")).collect();
    let dir = TempDir::new(tag);
    let path = dir.join("ds");
    write_dataset(
        &path,
        &input,
        test_options(100),
        Some(&order),
        Some(&names),
        9,
    );
    Fixture {
        _dir: dir,
        path,
        input,
        order,
    }
}

fn edit_manifest(path: &Path, f: impl FnOnce(&mut Value)) {
    let p = path.join("manifest.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
}

fn gather_err(ds: &Dataset, cells: &[u64]) -> deltacells::Error {
    let mut indptr = vec![0i64; cells.len() + 1];
    let mut indices = vec![0i32; 100_000];
    let mut values = vec![0i32; 100_000];
    ds.gather(
        cells,
        &mut indptr,
        &mut indices,
        ValuesOut::I32(&mut values),
    )
    .unwrap_err()
}

#[test]
fn dataset_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Dataset>();
}

#[test]
fn header_nnz_disagreeing_with_manifest_is_format() {
    let f = fixture("hdr-nnz");
    edit_manifest(&f.path, |v| {
        v["tile_nnz"][1] = Value::from(v["tile_nnz"][1].as_u64().unwrap() + 1)
    });
    let ds = Dataset::open(&f.path).unwrap();
    // Tile 0 is fine; tile 1 disagrees, both for batch_nnz (header only) and gather.
    check_gather(&ds, &f.input, Some(&f.order), &[0, 99]);
    let e = ds.batch_nnz(&[150]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(
        e.message.contains("tile 1") && e.message.contains("tile_nnz[1]"),
        "{}",
        e.message
    );
    assert_eq!(gather_err(&ds, &[150]).kind, ErrorKind::Format);
    let mut indptr = vec![0i64; 101];
    let mut big = vec![0i32; 10_000];
    let mut vals = vec![0i32; 10_000];
    let e = ds
        .read_tile(1, &mut indptr, &mut big, ValuesOut::I32(&mut vals))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
}

#[test]
fn header_n_genes_disagreeing_with_manifest_is_format() {
    let f = fixture("hdr-genes");
    edit_manifest(&f.path, |v| v["n_genes"] = Value::from(41));
    let ds = Dataset::open(&f.path).unwrap();
    let e = gather_err(&ds, &[3]);
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("n_genes"), "{}", e.message);
}

#[test]
fn tile_size_disagreeing_with_manifest_is_format() {
    let f = fixture("hdr-bytes");
    edit_manifest(&f.path, |v| {
        v["tile_bytes"][2] = Value::from(v["tile_bytes"][2].as_u64().unwrap() + 8)
    });
    let ds = Dataset::open(&f.path).unwrap();
    let e = gather_err(&ds, &[249]);
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("tile_bytes[2]"), "{}", e.message);
}

#[test]
fn header_cells_disagreeing_with_manifest_is_format() {
    // Swap two tiles' files: tile 2 (50 cells) now holds tile 0's 100 cells.
    let f = fixture("hdr-cells");
    let t0 = f.path.join("tiles/tile_000000.dct");
    let t2 = f.path.join("tiles/tile_000002.dct");
    std::fs::copy(&t0, &t2).unwrap();
    let len = std::fs::metadata(&t2).unwrap().len();
    edit_manifest(&f.path, |v| v["tile_bytes"][2] = Value::from(len));
    let ds = Dataset::open(&f.path).unwrap();
    let e = gather_err(&ds, &[200]);
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("n_cells"), "{}", e.message);
}

#[test]
fn missing_tile_is_not_found() {
    let f = fixture("missing-tile");
    std::fs::remove_file(f.path.join("tiles/tile_000001.dct")).unwrap();
    let ds = Dataset::open(&f.path).unwrap();
    let e = gather_err(&ds, &[120]);
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.message.contains("tile_000001.dct"), "{}", e.message);
}

#[test]
fn crc_failure_is_reported_and_not_cached() {
    let f = fixture("crc");
    let tile = f.path.join("tiles/tile_000000.dct");
    let good = std::fs::read(&tile).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    std::fs::write(&tile, &bad).unwrap();

    let ds = Dataset::open(&f.path).unwrap();
    // Headers and indptr are intact: sizing works without decompressing anything.
    let expected: u64 = (0..3)
        .map(|r| (f.input.indptr[r + 1] - f.input.indptr[r]) as u64)
        .sum();
    assert_eq!(ds.batch_nnz(&[0, 1, 2]).unwrap(), expected);
    assert!(ds.cached_chunks().is_empty(), "batch_nnz decodes nothing");
    assert_eq!(ds.counters().chunks_decompressed.load(Relaxed), 0);

    let e = gather_err(&ds, &[5, 150]);
    assert_eq!(e.kind, ErrorKind::Checksum);
    assert!(e.message.contains("tile 0"), "{}", e.message);
    assert!(
        ds.cached_chunks().iter().all(|&(t, _)| t != 0),
        "nothing of a failing tile is cached"
    );
    // Asked again, it is read again (and fails again).
    assert_eq!(gather_err(&ds, &[5]).kind, ErrorKind::Checksum);

    // Repaired on disk: the same handle now reads it.
    std::fs::write(&tile, &good).unwrap();
    check_gather(&ds, &f.input, Some(&f.order), &[5, 150, 5]);
    assert!(ds.cached_chunks().iter().any(|&(t, _)| t == 0));
}

#[test]
fn cache_is_a_byte_budget_of_chunks() {
    let f = fixture("cache");
    let ds = Dataset::open(&f.path).unwrap();
    assert_eq!(ds.cache_bytes(), 256 << 20, "default budget 256 MiB");
    let decompressed = || ds.counters().chunks_decompressed.load(Relaxed);
    let cells = [0u64, 150, 220, 151];
    let want = chunks_of(&ds, &cells);
    check_gather(&ds, &f.input, Some(&f.order), &cells);
    assert_eq!(
        ds.cached_chunks(),
        want,
        "exactly the chunks holding the cells"
    );
    assert_eq!(decompressed(), want.len() as u64, "each once");
    check_gather(&ds, &f.input, Some(&f.order), &[220, 0, 150]);
    assert_eq!(decompressed(), want.len() as u64, "served from the cache");

    // A budget that holds about one chunk keeps at most that much.
    let used = ds.cached_bytes();
    let one = used / want.len();
    ds.set_cache_bytes(one + one / 2);
    assert!(ds.cached_bytes() <= one + one / 2);
    check_gather(&ds, &f.input, Some(&f.order), &[10, 110, 210, 10]);
    assert!(ds.cached_bytes() <= one + one / 2, "{}", ds.cached_bytes());

    ds.set_cache_bytes(0);
    assert!(ds.cached_chunks().is_empty() && ds.cached_bytes() == 0);
    let before = decompressed();
    check_gather(&ds, &f.input, Some(&f.order), &[10, 110, 210, 10]);
    assert!(ds.cached_chunks().is_empty());
    assert_eq!(
        decompressed() - before,
        chunks_of(&ds, &[10, 110, 210]).len() as u64,
        "cache off: each touched chunk once per gather, no more"
    );

    // DC_DATASET_TILE_CACHE: a budget of n whole tiles of this dataset.
    ds.set_tile_cache(3);
    assert_eq!(ds.cache_bytes(), 3 * ds.tile_cache_unit());
    let all: Vec<u64> = (0..250).collect();
    check_gather(&ds, &f.input, Some(&f.order), &all);
    assert_eq!(ds.cached_chunks().len(), chunks_of(&ds, &all).len());
    ds.set_tile_cache(1);
    assert!(ds.cached_bytes() <= ds.tile_cache_unit());
}

#[test]
fn out_of_range_cell_names_cell_and_n_cells() {
    let f = fixture("oor");
    let ds = Dataset::open(&f.path).unwrap();
    let e = ds.batch_nnz(&[3, 250]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(
        e.message.contains("250") && e.message.contains("n_cells = 250"),
        "{}",
        e.message
    );
    assert_eq!(gather_err(&ds, &[u64::MAX]).kind, ErrorKind::OutOfRange);
    let mut ip = vec![0i64; 1];
    let e = ds
        .read_tile(3, &mut ip, &mut [], ValuesOut::I32(&mut []))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
}

#[test]
fn small_buffers_report_the_needed_nnz() {
    let f = fixture("small");
    let ds = Dataset::open(&f.path).unwrap();
    let cells = [1u64, 1, 200];
    let need = ds.batch_nnz(&cells).unwrap();
    assert!(need > 1);
    let mut indptr = vec![0i64; 4];
    let mut indices = vec![0i32; need as usize - 1];
    let mut values = vec![0i32; need as usize];
    let e = ds
        .gather(
            &cells,
            &mut indptr,
            &mut indices,
            ValuesOut::I32(&mut values),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: need });
    let (_, _, tile_nnz) = ds.tile_bounds(0).unwrap();
    let mut ip = vec![0i64; 101];
    let e = ds
        .read_tile(0, &mut ip, &mut [], ValuesOut::I32(&mut []))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: tile_nnz });
}

#[test]
fn read_tile_and_gathers_agree() {
    let f = fixture("readtile");
    let ds = Dataset::open(&f.path).unwrap();
    let (_, cells, nnz) = ds.tile_bounds(1).unwrap();
    let read = |ds: &Dataset| {
        let mut ip = vec![0i64; cells as usize + 1];
        let mut ix = vec![0i32; nnz as usize];
        let mut vs = vec![0i32; nnz as usize];
        ds.read_tile(1, &mut ip, &mut ix, ValuesOut::I32(&mut vs))
            .unwrap();
        (ip, ix, vs)
    };
    let cold = read(&ds);
    assert!(
        ds.cached_chunks().is_empty(),
        "read_tile does not fill the cache"
    );
    check_gather(&ds, &f.input, Some(&f.order), &[100]);
    assert_eq!(ds.cached_chunks(), vec![(1, 0)]);
    assert_eq!(read(&ds), cold);
    for r in 0..cells as usize {
        assert_eq!(
            dense_of(40, &cold.0, &cold.1, &cold.2, r),
            expected_row(&f.input, Some(&f.order), 100 + r)
        );
    }
}

#[test]
fn concurrent_gathers() {
    let f = fixture("concurrent");
    let ds = Arc::new(Dataset::open(&f.path).unwrap());
    ds.set_tile_cache(1);
    ds.set_threads(2);
    let input = Arc::new(f.input.clone());
    let order = Arc::new(f.order.clone());
    let handles: Vec<_> = (0..4)
        .map(|k| {
            let (ds, input, order) = (ds.clone(), input.clone(), order.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(1000 + k);
                for _ in 0..15 {
                    let n = 1 + rng.below(120) as usize;
                    let cells: Vec<u64> = (0..n).map(|_| rng.below(250)).collect();
                    check_gather(&ds, &input, Some(&order), &cells);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn gene_order_file_is_validated() {
    let f = fixture("npy");
    let p = f.path.join("gene_order.npy");
    assert_eq!(
        Dataset::open(&f.path).unwrap().gene_order().unwrap(),
        &f.order[..]
    );

    // int64 instead of int32.
    let mut bytes = npy::write_i32(&f.order);
    let at = bytes.windows(3).position(|w| w == b"<i4").unwrap();
    bytes[at + 2] = b'8';
    std::fs::write(&p, &bytes).unwrap();
    let e = Dataset::open(&f.path).unwrap().gene_order().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("'<i8'"), "{}", e.message);

    // Wrong shape.
    std::fs::write(&p, npy::write_i32(&f.order[..39])).unwrap();
    let e = Dataset::open(&f.path).unwrap().gene_order().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("shape"), "{}", e.message);

    // Not a permutation.
    let mut dup = f.order.clone();
    dup[1] = dup[0];
    std::fs::write(&p, npy::write_i32(&dup)).unwrap();
    let e = Dataset::open(&f.path).unwrap().gene_order().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("permutation"), "{}", e.message);

    // Fortran order.
    let mut fortran = npy::write_i32(&f.order);
    let at = fortran.windows(5).position(|w| w == b"False").unwrap();
    fortran.splice(at..at + 5, b"True ".iter().copied());
    std::fs::write(&p, &fortran).unwrap();
    let e = Dataset::open(&f.path).unwrap().gene_order().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("fortran_order"), "{}", e.message);

    // Bad magic; missing though listed.
    std::fs::write(&p, b"not an npy file at all").unwrap();
    assert_eq!(
        Dataset::open(&f.path)
            .unwrap()
            .gene_order()
            .unwrap_err()
            .kind,
        ErrorKind::Format
    );
    std::fs::remove_file(&p).unwrap();
    let e = Dataset::open(&f.path).unwrap().gene_order().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("has_gene_order"), "{}", e.message);

    // Not listed: NotFound.
    edit_manifest(&f.path, |v| v["has_gene_order"] = Value::from(false));
    assert_eq!(
        Dataset::open(&f.path)
            .unwrap()
            .gene_order()
            .unwrap_err()
            .kind,
        ErrorKind::NotFound
    );
}

#[test]
fn var_names_must_have_n_genes_lines() {
    let f = fixture("names");
    let p = f.path.join("var_names.txt");
    let ds = Dataset::open(&f.path).unwrap();
    assert_eq!(ds.var_names().unwrap().len(), 40);
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, format!("{text}extra\n")).unwrap();
    let e = Dataset::open(&f.path).unwrap().var_names().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.contains("41 lines"), "{}", e.message);
    // Without the final newline it still reads.
    std::fs::write(&p, text.trim_end_matches('\n')).unwrap();
    assert_eq!(
        Dataset::open(&f.path).unwrap().var_names().unwrap().len(),
        40
    );
    edit_manifest(&f.path, |v| v["has_var_names"] = Value::from(false));
    assert_eq!(
        Dataset::open(&f.path)
            .unwrap()
            .var_names()
            .unwrap_err()
            .kind,
        ErrorKind::NotFound
    );
}

#[test]
fn unverified_crc_still_checks_structure() {
    let f = fixture("nocrc");
    let ds = Dataset::open(&f.path).unwrap();
    ds.set_verify_crc(false);
    check_gather(&ds, &f.input, Some(&f.order), &[0, 249]);
}
