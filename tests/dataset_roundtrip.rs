//! Write -> read round trips against an independent (dense) expectation.

mod dataset_support;

use dataset_support::*;
use deltacells::dataset::{Dataset, DatasetWriter};
use deltacells::tile::ValuesOut;

fn names(n: u32) -> Vec<String> {
    (0..n).map(|i| format!("GENE{i}-α")).collect()
}

#[test]
fn random_round_trip_with_gene_order_and_names() {
    let mut rng = Rng::new(7);
    let input = random_csr(&mut rng, 1000, 300, 0.05, true);
    let order = rng.permutation(300);
    let names = names(300);
    let dir = TempDir::new("rt");
    let path = dir.join("ds");
    write_dataset(
        &path,
        &input,
        test_options(128),
        Some(&order),
        Some(&names),
        1,
    );
    assert_eq!(
        dir.entries(),
        vec!["ds".to_string()],
        "no temporary left over"
    );

    let ds = Dataset::open(&path).unwrap();
    let info = ds.info();
    assert_eq!(info.n_cells, 1000);
    assert_eq!(info.n_genes, 300);
    assert_eq!(info.version, 2);
    assert_eq!(info.n_tiles, 8);
    assert_eq!(info.tile_size, 128);
    assert_eq!(
        info.nnz,
        input.values.iter().filter(|&&v| v != 0).count() as u64
    );
    assert!(info.has_gene_order && info.has_var_names);
    assert!(!info.has_var_table && !info.has_obs);

    // Every cell in order, then random cells with repeats, across tiles.
    let all: Vec<u64> = (0..1000).collect();
    check_gather(&ds, &input, Some(&order), &all);
    for _ in 0..10 {
        let n = rng.below(300) as usize;
        let cells: Vec<u64> = (0..n).map(|_| rng.below(1000)).collect();
        check_gather(&ds, &input, Some(&order), &cells);
    }
    let repeats = vec![5u64, 5, 999, 0, 5, 128, 127, 999];
    check_gather(&ds, &input, Some(&order), &repeats);
    check_gather(&ds, &input, Some(&order), &[]);

    // Whole tiles, both dtypes.
    for t in 0..info.n_tiles {
        let (first, cells, nnz) = ds.tile_bounds(t).unwrap();
        assert_eq!(first, t * 128);
        assert_eq!(cells, if t == 7 { 1000 - 7 * 128 } else { 128 });
        let mut indptr = vec![0i64; cells as usize + 1];
        let mut indices = vec![0i32; nnz as usize];
        let mut values = vec![0f32; nnz as usize];
        let got = ds
            .read_tile(t, &mut indptr, &mut indices, ValuesOut::F32(&mut values))
            .unwrap();
        assert_eq!(got, nnz);
        let as_i32: Vec<i32> = values.iter().map(|&v| v as i32).collect();
        for r in 0..cells as usize {
            let want: Vec<i32> = expected_row(&input, Some(&order), first as usize + r)
                .into_iter()
                .map(|v| v as f32 as i32)
                .collect();
            assert_eq!(dense_of(300, &indptr, &indices, &as_i32, r), want);
        }
    }

    // Optional parts: the order as given, the names in output order.
    assert_eq!(ds.gene_order().unwrap(), &order[..]);
    let got_names = ds.var_names().unwrap();
    for j in 0..300 {
        assert_eq!(got_names[j], names[order[j] as usize]);
    }
    let text = std::fs::read_to_string(path.join("var_names.txt")).unwrap();
    assert_eq!(text.lines().count(), 300);
    assert!(text.ends_with('\n'));
}

#[test]
fn float32_gather_matches_int32() {
    let mut rng = Rng::new(11);
    let input = random_csr(&mut rng, 300, 50, 0.2, false);
    let dir = TempDir::new("f32");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(64), None, None, 2);
    let ds = Dataset::open(&path).unwrap();
    let cells: Vec<u64> = (0..500).map(|_| rng.below(300)).collect();
    let nnz = ds.batch_nnz(&cells).unwrap() as usize;
    let (mut p1, mut i1, mut v1) = (vec![0; 501], vec![0; nnz], vec![0i32; nnz]);
    let (mut p2, mut i2, mut v2) = (vec![0; 501], vec![0; nnz], vec![0f32; nnz]);
    ds.gather(&cells, &mut p1, &mut i1, ValuesOut::I32(&mut v1))
        .unwrap();
    ds.gather(&cells, &mut p2, &mut i2, ValuesOut::F32(&mut v2))
        .unwrap();
    assert_eq!(p1, p2);
    assert_eq!(i1, i2);
    assert_eq!(v1.iter().map(|&v| v as f32).collect::<Vec<_>>(), v2);
}

fn tile_size_case(n_rows: usize, tile_size: u64, expect_cells: &[u64]) {
    let mut rng = Rng::new(n_rows as u64 * 31 + tile_size);
    let input = random_csr(&mut rng, n_rows, 40, 0.1, false);
    let dir = TempDir::new("ts");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(tile_size), None, None, 3);
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.manifest().tile_cells, expect_cells);
    assert_eq!(ds.info().n_cells, n_rows as u64);
    let all: Vec<u64> = (0..n_rows as u64).collect();
    check_gather(&ds, &input, None, &all);
    let rev: Vec<u64> = all.iter().rev().copied().collect();
    check_gather(&ds, &input, None, &rev);
}

#[test]
fn last_tile_partial() {
    tile_size_case(250, 100, &[100, 100, 50]);
}

#[test]
fn last_tile_exactly_full() {
    tile_size_case(300, 100, &[100, 100, 100]);
}

#[test]
fn one_cell_per_tile() {
    tile_size_case(7, 1, &[1; 7]);
}

#[test]
fn single_tile_smaller_than_tile_size() {
    tile_size_case(5, 10_000, &[5]);
}

#[test]
fn zero_cell_dataset() {
    let dir = TempDir::new("zero");
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(&path, 10, test_options(4)).unwrap();
    w.append_csr(0, &[0], &[], &[]).unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&path).unwrap();
    let info = ds.info();
    assert_eq!((info.n_cells, info.n_tiles, info.nnz), (0, 0, 0));
    assert_eq!(ds.batch_nnz(&[]).unwrap(), 0);
    let mut indptr = [7i64];
    assert_eq!(
        ds.gather(&[], &mut indptr, &mut [], ValuesOut::I32(&mut []))
            .unwrap(),
        0
    );
    assert_eq!(indptr, [0]);
    assert_eq!(
        ds.tile_bounds(0).unwrap_err().kind,
        deltacells::ErrorKind::OutOfRange
    );
}

#[test]
fn gap_exceptions_with_many_genes() {
    // Genes far apart make gaps above 65535 (gap exceptions); a few huge counts too.
    let n_genes = 200_000u32;
    let mut rng = Rng::new(5);
    let mut input = Csr {
        n_genes,
        indptr: vec![0],
        indices: vec![],
        values: vec![],
    };
    for _ in 0..50 {
        let mut g = rng.below(1000) as i64;
        while g < n_genes as i64 {
            input.indices.push(g as i32);
            input.values.push(if rng.chance(0.05) {
                1 << 20
            } else {
                1 + rng.below(9) as i32
            });
            let step = if rng.chance(0.3) { 120_000 } else { 3000 };
            g += 1 + rng.below(step) as i64;
        }
        input.indptr.push(input.indices.len() as i64);
    }
    let order = rng.permutation(n_genes as usize);
    let dir = TempDir::new("gap");
    let path = dir.join("ds");
    write_dataset(&path, &input, test_options(16), Some(&order), None, 4);
    let ds = Dataset::open(&path).unwrap();
    let cells: Vec<u64> = (0..200).map(|_| rng.below(50)).collect();
    check_gather(&ds, &input, Some(&order), &cells);
}

#[test]
fn unsorted_rows_and_explicit_zeros() {
    let dir = TempDir::new("unsorted");
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(&path, 6, test_options(2)).unwrap();
    // Row 0: unsorted with an explicit zero; row 1: empty; row 2: sorted.
    w.append_csr(3, &[0, 4, 4, 6], &[5, 0, 3, 2, 1, 4], &[7, 1, 0, 2, 9, 8])
        .unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.info().nnz, 5);
    let mut indptr = vec![0i64; 4];
    let mut indices = vec![0i32; 5];
    let mut values = vec![0i32; 5];
    ds.gather(
        &[0, 1, 2],
        &mut indptr,
        &mut indices,
        ValuesOut::I32(&mut values),
    )
    .unwrap();
    assert_eq!(indptr, [0, 3, 3, 5]);
    assert_eq!(indices, [0, 2, 5, 1, 4]);
    assert_eq!(values, [1, 2, 7, 9, 8]);
}
