//! Writer behaviour: atomic publication, abandonment, overwrite, states, input validation,
//! and the exact bytes of gene_order.npy.

mod dataset_support;

use dataset_support::*;
use deltacells::dataset::{Dataset, DatasetWriter, WriterOptions};
use deltacells::ErrorKind;
use serde_json::Value;

fn small_input(seed: u64) -> Csr {
    random_csr(&mut Rng::new(seed), 30, 12, 0.3, false)
}

#[test]
fn dropped_writer_leaves_nothing() {
    let dir = TempDir::new("drop");
    let path = dir.join("ds");
    let input = small_input(1);
    {
        let mut w = DatasetWriter::create(&path, 12, test_options(4)).unwrap();
        let tmp = w.temp_dir().to_path_buf();
        let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".ds.tmp-"), "{name}");
        append_in_pieces(&mut w, &input, &mut Rng::new(2));
        assert!(tmp.join("tiles").is_dir());
    }
    assert!(dir.entries().is_empty(), "left behind: {:?}", dir.entries());
    assert_eq!(
        Dataset::open(&path).err().unwrap().kind,
        ErrorKind::NotFound
    );
}

#[test]
fn killed_writer_leaves_only_a_temp_dir_that_never_opens() {
    let dir = TempDir::new("killed");
    let path = dir.join("ds");
    let input = small_input(3);
    let mut w = DatasetWriter::create(&path, 12, test_options(4)).unwrap();
    append_in_pieces(&mut w, &input, &mut Rng::new(4));
    let tmp = w.temp_dir().to_path_buf();
    // A killed process runs no destructor.
    std::mem::forget(w);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let entries = dir.entries();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].starts_with('.'), "hidden: {entries:?}");
    assert_eq!(
        Dataset::open(&path).err().unwrap().kind,
        ErrorKind::NotFound
    );
    assert_eq!(Dataset::open(&tmp).err().unwrap().kind, ErrorKind::NotFound);
    // Even with a manifest copied in (killed between manifest and rename), the temporary
    // directory is refused by name.
    write_dataset(&dir.join("other"), &input, test_options(4), None, None, 5);
    std::fs::copy(dir.join("other/manifest.json"), tmp.join("manifest.json")).unwrap();
    let e = Dataset::open(&tmp).err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.message.contains("temporary"), "{}", e.message);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn existing_target_without_overwrite_is_exists() {
    let dir = TempDir::new("exists");
    let path = dir.join("ds");
    std::fs::create_dir(&path).unwrap();
    let e = DatasetWriter::create(&path, 12, test_options(4))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert_eq!(dir.entries(), vec!["ds".to_string()], "no temporary left");
    // Deferred check (the C API's order): at the first append.
    let mut w = DatasetWriter::create_deferred(&path, 12, test_options(4)).unwrap();
    let e = w.append_csr(1, &[0, 1], &[3], &[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert_eq!(w.rows_appended(), 0);
    // ... or at finish.
    let mut w = DatasetWriter::create_deferred(&path, 12, test_options(4)).unwrap();
    assert_eq!(w.finish().unwrap_err().kind, ErrorKind::Exists);
    // Setting overwrite afterwards makes finish succeed (the directory is empty).
    w.set_overwrite(true).unwrap();
    w.finish().unwrap();
    assert_eq!(Dataset::open(&path).unwrap().info().n_cells, 0);
}

#[test]
fn target_appearing_during_the_write_is_not_replaced() {
    let dir = TempDir::new("appear");
    let path = dir.join("ds");
    let input = small_input(6);
    let mut w = DatasetWriter::create(&path, 12, test_options(4)).unwrap();
    append_in_pieces(&mut w, &input, &mut Rng::new(7));
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("precious.txt"), b"keep me").unwrap();
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert_eq!(
        std::fs::read(path.join("precious.txt")).unwrap(),
        b"keep me"
    );
    // No manifest is left in the unpublished temporary directory.
    assert!(!w.temp_dir().join("manifest.json").exists());
    // Overwrite refuses a directory that is not a dataset.
    w.set_overwrite(true).unwrap();
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert!(e.message.contains("precious.txt"), "{}", e.message);
    assert_eq!(
        std::fs::read(path.join("precious.txt")).unwrap(),
        b"keep me"
    );
    drop(w);
    assert_eq!(dir.entries(), vec!["ds".to_string()]);
}

#[test]
fn overwrite_replaces_a_dataset_only_at_finish() {
    let dir = TempDir::new("overwrite");
    let path = dir.join("ds");
    let old = small_input(8);
    write_dataset(&path, &old, test_options(4), None, None, 9);

    let new = random_csr(&mut Rng::new(10), 17, 12, 0.5, false);
    let opts = WriterOptions {
        overwrite: true,
        ..test_options(5)
    };
    let mut w = DatasetWriter::create(&path, 12, opts).unwrap();
    append_in_pieces(&mut w, &new, &mut Rng::new(11));
    // Until finish, the old dataset is intact and readable.
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.info().n_cells, 30);
    check_gather(&ds, &old, None, &[0, 29]);
    w.finish().unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(ds.info().n_cells, 17);
    let all: Vec<u64> = (0..17).collect();
    check_gather(&ds, &new, None, &all);
    assert_eq!(dir.entries(), vec!["ds".to_string()], "old copy removed");

    // An overwrite that is abandoned leaves the existing dataset alone.
    let mut w = DatasetWriter::create(&path, 12, opts).unwrap();
    w.append_csr(1, &[0, 1], &[0], &[1]).unwrap();
    drop(w);
    assert_eq!(Dataset::open(&path).unwrap().info().n_cells, 17);
    assert_eq!(dir.entries(), vec!["ds".to_string()]);
}

#[test]
fn overwrite_refuses_non_dataset_directories() {
    let dir = TempDir::new("refuse");
    let path = dir.join("home");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("thesis.tex"), b"...").unwrap();
    let opts = WriterOptions {
        overwrite: true,
        ..test_options(4)
    };
    let e = DatasetWriter::create(&path, 12, opts).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert!(path.join("thesis.tex").exists());
    // A plain file is not replaced either.
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(
        DatasetWriter::create(&file, 12, opts).err().unwrap().kind,
        ErrorKind::Exists
    );
}

#[test]
fn calls_after_finish_are_state_errors() {
    let dir = TempDir::new("state");
    let mut w = DatasetWriter::create(dir.join("ds"), 12, test_options(4)).unwrap();
    w.append_csr(2, &[0, 1, 2], &[0, 5], &[1, 2]).unwrap();
    assert_eq!(
        w.set_gene_order(&(0..12).collect::<Vec<_>>())
            .unwrap_err()
            .kind,
        ErrorKind::State
    );
    assert_eq!(w.set_tile_size(8).unwrap_err().kind, ErrorKind::State);
    w.finish().unwrap();
    assert_eq!(
        w.append_csr(1, &[0, 1], &[0], &[1]).unwrap_err().kind,
        ErrorKind::State
    );
    assert_eq!(w.finish().unwrap_err().kind, ErrorKind::State);
    assert_eq!(
        w.set_var_names(&["a"; 12]).unwrap_err().kind,
        ErrorKind::State
    );
    drop(w);
    assert_eq!(Dataset::open(dir.join("ds")).unwrap().info().n_cells, 2);
}

#[test]
fn invalid_gene_orders() {
    let dir = TempDir::new("order");
    let mut w = DatasetWriter::create(dir.join("ds"), 4, test_options(4)).unwrap();
    for bad in [
        vec![0, 1, 2],
        vec![0, 1, 2, 4],
        vec![0, 1, 1, 3],
        vec![-1, 0, 1, 2],
    ] {
        let e = w.set_gene_order(&bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad:?}");
    }
    w.set_gene_order(&[3, 2, 1, 0]).unwrap();
}

#[test]
fn invalid_var_names() {
    let dir = TempDir::new("names");
    let mut w = DatasetWriter::create(dir.join("ds"), 3, test_options(4)).unwrap();
    let e = w.set_var_names(&["a", "b\nc", "d"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("var name 1"), "{}", e.message);
    assert_eq!(
        w.set_var_names(&["a", "b\r", "d"]).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        w.set_var_names(&["a", "b"]).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    w.set_var_names(&["a", "b", ""]).unwrap();
}

/// Column names cross the Arrow C Data Interface as C strings: a NUL byte in one would make
/// the written dataset's obs or var table unreadable, so the writer refuses it.
#[test]
fn column_names_with_nul_are_refused() {
    use std::sync::Arc;
    let dir = TempDir::new("nulname");
    let mut w = DatasetWriter::create(dir.join("ds"), 2, test_options(4)).unwrap();
    let col: arrow_array::ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![1, 2]));
    let batch = arrow_array::RecordBatch::try_from_iter([("sco\0re", col.clone())]).unwrap();
    let e = w.append_obs(batch).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(e.message.contains("NUL byte"), "{e}");
    let table = arrow_array::RecordBatch::try_from_iter([("ge\0ne", col)]).unwrap();
    let e = w.set_var_table(table).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(e.message.contains("NUL byte"), "{e}");
}

#[test]
fn invalid_appends_append_nothing() {
    let dir = TempDir::new("append");
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(&path, 5, test_options(2)).unwrap();
    w.append_csr(1, &[0, 2], &[0, 4], &[1, 1]).unwrap();
    type Case = (u64, Vec<i64>, Vec<i32>, Vec<i32>, &'static str);
    let cases: Vec<Case> = vec![
        (2, vec![0, 1, 2], vec![1, 5], vec![1, 1], "outside 0..5"),
        (
            2,
            vec![0, 1, 3],
            vec![1, 2, 2],
            vec![1, 1, 1],
            "appears twice",
        ),
        (1, vec![0, 1], vec![1], vec![-3], "negative"),
        (2, vec![0, 2, 1], vec![1, 2], vec![1, 1], "decreases"),
        (2, vec![0, 1], vec![1], vec![1], "n_rows + 1"),
        (1, vec![0, 3], vec![1, 2], vec![1, 1], "indptr spans 3"),
    ];
    for (n, ip, ix, vs, needle) in cases {
        let e = w.append_csr(n, &ip, &ix, &vs).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{needle}");
        assert!(e.message.contains(needle), "{} lacks {needle}", e.message);
        assert_eq!(w.rows_appended(), 1);
    }
    let e = w.append_csr(u64::MAX, &[0], &[], &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    // A bad row after good ones in the same call: none of the call is taken.
    assert!(w
        .append_csr(3, &[0, 1, 2, 3], &[0, 1, 9], &[1, 1, 1])
        .is_err());
    assert_eq!(w.rows_appended(), 1);
    w.finish().unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert_eq!((ds.info().n_cells, ds.info().nnz), (1, 2));
}

#[test]
fn encoder_limit_fails_the_writer_and_cleans_up() {
    // More than 1024 counts above 65535 in one tile is refused by the tile encoder.
    let dir = TempDir::new("limit");
    let mut w = DatasetWriter::create(dir.join("ds"), 2000, test_options(10)).unwrap();
    let n = 1500;
    let indices: Vec<i32> = (0..n).collect();
    let values = vec![100_000; n as usize];
    let r = w.append_csr(1, &[0, n as i64], &indices, &values);
    let e = r.and_then(|_| w.finish()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit, "{}", e.message);
    assert_eq!(
        w.append_csr(0, &[0], &[], &[]).unwrap_err().kind,
        ErrorKind::State
    );
    assert_eq!(w.finish().unwrap_err().kind, ErrorKind::State);
    drop(w);
    assert!(dir.entries().is_empty());
}

#[test]
fn options_are_validated() {
    let dir = TempDir::new("opts");
    for bad in [
        WriterOptions {
            tile_size: 0,
            ..WriterOptions::default()
        },
        WriterOptions {
            n_chunks: 0,
            ..WriterOptions::default()
        },
        WriterOptions {
            zstd_level: 99,
            ..WriterOptions::default()
        },
        WriterOptions {
            obs_tiles_per_file: 0,
            ..WriterOptions::default()
        },
    ] {
        let e = DatasetWriter::create(dir.join("ds"), 3, bad).err().unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad:?}");
    }
    for n_genes in [0u32, (1u32 << 31) + 1] {
        let e = DatasetWriter::create(dir.join("ds"), n_genes, WriterOptions::default())
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
    let e = DatasetWriter::create(dir.join("no/such/parent/ds"), 3, WriterOptions::default())
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(dir.entries().is_empty());
}

#[test]
fn manifest_records_settings_and_empty_metadata() {
    let dir = TempDir::new("manifest");
    let path = dir.join("ds");
    write_dataset(&path, &small_input(12), test_options(7), None, None, 13);
    let v: Value =
        serde_json::from_slice(&std::fs::read(path.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(v["format"], "deltacells-dataset");
    assert_eq!(v["version"], 2);
    assert_eq!(v["metadata"], serde_json::json!({}));
    assert_eq!(v["n_chunks"], 3);
    assert_eq!(v["zstd_level"], 1);
    assert_eq!(v["tile_size"], 7);
    assert_eq!(v["tile_cells"], serde_json::json!([7, 7, 7, 7, 2]));
    assert_eq!(v["has_gene_order"], false);
    assert_eq!(v["has_obs"], false);
    for (t, bytes) in v["tile_bytes"].as_array().unwrap().iter().enumerate() {
        let f = path.join(format!("tiles/tile_{t:06}.dct"));
        assert_eq!(std::fs::metadata(f).unwrap().len(), bytes.as_u64().unwrap());
    }
    assert!(!path.join("gene_order.npy").exists());
    assert!(!path.join("var_names.txt").exists());
}

#[test]
fn gene_order_npy_is_byte_exact() {
    let dir = TempDir::new("npy");
    let path = dir.join("ds");
    let order = [3i32, 0, 4, 1, 2];
    let mut w = DatasetWriter::create(&path, 5, test_options(4)).unwrap();
    w.set_gene_order(&order).unwrap();
    w.append_csr(1, &[0, 2], &[0, 3], &[5, 6]).unwrap();
    w.finish().unwrap();

    // What numpy.save writes for np.array([3, 0, 4, 1, 2], dtype='<i4'): format 1.0, the
    // dict, 21 - len("5") spaces of growth room, padding to 64 bytes, '\n'.
    let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }";
    let mut header = dict.to_string() + &" ".repeat(20);
    let pad = 64 - (10 + header.len() + 1) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    assert_eq!((10 + header.len()) % 64, 0);
    let mut expected = b"\x93NUMPY\x01\x00".to_vec();
    expected.extend_from_slice(&(header.len() as u16).to_le_bytes());
    expected.extend_from_slice(header.as_bytes());
    for v in order {
        expected.extend_from_slice(&v.to_le_bytes());
    }
    let got = std::fs::read(path.join("gene_order.npy")).unwrap();
    assert_eq!(got.len(), 128 + 20);
    assert_eq!(got, expected);

    // And the data went through it: output column j = input column order[j], so input
    // columns 0 and 3 land in output columns 1 and 0.
    let ds = Dataset::open(&path).unwrap();
    let mut indptr = [0i64; 2];
    let mut indices = [0i32; 2];
    let mut values = [0i32; 2];
    ds.gather(
        &[0],
        &mut indptr,
        &mut indices,
        deltacells::tile::ValuesOut::I32(&mut values),
    )
    .unwrap();
    assert_eq!(indices, [0, 1]);
    assert_eq!(values, [6, 5]);
}

#[test]
fn single_threaded_writer_matches_multi_threaded() {
    let input = random_csr(&mut Rng::new(20), 90, 30, 0.2, true);
    let dir = TempDir::new("threads");
    let mut blobs = Vec::new();
    for threads in [1usize, 2, 3] {
        let path = dir.join(&format!("ds{threads}"));
        let opts = WriterOptions {
            threads,
            ..test_options(16)
        };
        write_dataset(&path, &input, opts, None, None, threads as u64);
        let mut files = Vec::new();
        for t in 0..6 {
            files.push(std::fs::read(path.join(format!("tiles/tile_{t:06}.dct"))).unwrap());
        }
        blobs.push(files);
        let all: Vec<u64> = (0..90).collect();
        check_gather(&Dataset::open(&path).unwrap(), &input, None, &all);
    }
    assert_eq!(blobs[0], blobs[1]);
    assert_eq!(blobs[0], blobs[2]);
}
