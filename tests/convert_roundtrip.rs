//! `deltacells convert` on the real matrices of tests/data/scrna (10x folders, a bare
//! Matrix Market file, .h5ad in every X layout), checked against an independent parse of
//! the source; `info`, `verify` and `export` on the results.
#![cfg(feature = "cli")]

mod convert_support;

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::Array;
use arrow_schema::DataType;
use convert_support::*;
use deltacells::convert::h5ad::H5adSource;
use deltacells::convert::CellSource;
use deltacells::dataset::Dataset;

fn convert(input: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--tile-size",
        "400",
        "--level",
        "3",
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

#[test]
fn every_real_matrix_round_trips_exactly() {
    for name in FOLDERS {
        let dir = TempDir::new("rt");
        let src = scrna(name);
        let out = dir.join("ds");
        let msg = convert(&src, &out, &[]);
        let (genes, cells, expected) = parse_mtx(&src.join("matrix.mtx.gz"));
        assert!(
            msg.contains(&format!("{cells} cells x {genes} genes")),
            "{msg}"
        );
        let ds = Dataset::open(&out).unwrap();
        let info = ds.info();
        assert_eq!((info.n_cells, info.n_genes as u64), (cells, genes));
        assert_eq!(info.n_tiles, cells.div_ceil(400));
        assert!(info.has_gene_order && info.has_var_names);
        assert_eq!(dataset_triplets(&ds), expected, "{name}");
        // Genes are sorted by decreasing total (recomputed here from the source).
        let mut totals = vec![0i64; genes as usize];
        for &(_, g, v) in &expected {
            totals[g as usize] += v;
        }
        let order = ds.gene_order().unwrap();
        assert!(order
            .windows(2)
            .all(|w| totals[w[0] as usize] >= totals[w[1] as usize]));
        // var names: in output order, from the features file.
        let features: Vec<Vec<String>> = gz_lines(&src.join("features.tsv.gz"))
            .iter()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect();
        let names: Vec<&str> = features.iter().map(|f| f[1].as_str()).collect();
        let unique = names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
        let col = if unique { 1 } else { 0 };
        let var = ds.var_names().unwrap();
        for (j, &g) in order.iter().enumerate() {
            assert_eq!(var[j], features[g as usize][col], "{name}: var name {j}");
        }
        if name.starts_with("mouse") {
            assert!(!unique, "the mouse set has repeated names");
            assert!(msg.contains("gene ids"), "{msg}");
        }
    }
}

#[test]
fn no_sort_genes_and_a_bare_matrix_market_file() {
    let dir = TempDir::new("nosort");
    let src = scrna("10x-v3-1107-cells-chr21").join("matrix.mtx.gz");
    let out = dir.join("ds");
    convert(&src, &out, &["--no-sort-genes", "--chunks", "2"]);
    let ds = Dataset::open(&out).unwrap();
    let info = ds.info();
    assert!(!info.has_gene_order && !info.has_var_names);
    assert_eq!(ds.manifest().n_chunks, Some(2));
    assert_eq!(dataset_triplets(&ds), parse_mtx(&src).2);
    // An existing target is refused without --overwrite, replaced with it.
    let e = fails_with(
        4,
        &["convert", src.to_str().unwrap(), out.to_str().unwrap()],
    );
    assert!(e.contains("exists"), "{e}");
    convert(&src, &out, &["--overwrite"]);
    assert!(Dataset::open(&out).unwrap().info().has_gene_order);
}

fn check_h5ad_dataset(h5ad: &Path, dir: &TempDir, tag: &str) {
    let out = dir.join(tag);
    convert(h5ad, &out, &[]);
    let ds = Dataset::open(&out).unwrap();
    let src = scrna("10x-v3-1107-cells-chr21");
    let expected = parse_mtx(&src.join("matrix.mtx.gz")).2;
    assert_eq!(dataset_triplets(&ds), expected, "{tag}");
    // var names: the var index (symbols, unique in this set).
    let features = gz_lines(&src.join("features.tsv.gz"));
    let order = ds.gene_order().unwrap();
    for (j, &g) in order.iter().enumerate() {
        let sym = features[g as usize].split('\t').nth(1).unwrap();
        assert_eq!(ds.var_names().unwrap()[j], sym, "{tag}");
    }
}

#[test]
fn bundled_h5ad_matches_the_10x_source() {
    let dir = TempDir::new("h5ad");
    check_h5ad_dataset(&scrna("10x-v3-1107-cells-chr21.h5ad"), &dir, "bundled");
}

#[test]
fn h5ad_obs_and_var_tables_are_arrow_batches() {
    let src = scrna("10x-v3-1107-cells-chr21");
    let mut h = H5adSource::open(&scrna("10x-v3-1107-cells-chr21.h5ad")).unwrap();
    let t = h.tables().unwrap();
    let obs = t.obs.unwrap();
    let var = t.var.unwrap();
    let barcodes = gz_lines(&src.join("barcodes.tsv.gz"));
    assert_eq!(obs.num_rows(), barcodes.len());
    let idx = obs.column(0).as_string::<i32>();
    assert_eq!(obs.schema().field(0).name(), "_index");
    for (i, b) in barcodes.iter().enumerate() {
        assert_eq!(idx.value(i), b);
    }
    let col = |n: &str| obs.column_by_name(n).unwrap_or_else(|| panic!("obs {n}"));
    // The generator's formulas (tests/data/make_h5ad.py), recomputed here.
    let ct = col("cell_type").as_dictionary::<Int32Type>();
    let ct_values = ct.values().as_string::<i32>();
    let batch = col("batch").as_dictionary::<Int32Type>();
    let batch_values = batch.values().as_string::<i32>();
    let frac = col("frac").as_primitive::<Float64Type>();
    let score = col("score32").as_primitive::<Float32Type>();
    let dbl = col("is_doublet").as_boolean();
    // anndata stores string columns as categoricals; accept either.
    let donor = col("donor");
    let text_at = |a: &dyn Array, i: usize| -> String {
        match a.data_type() {
            DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
            _ => {
                let d = a.as_dictionary::<Int32Type>();
                let k = d.keys().value(i) as usize;
                d.values().as_string::<i32>().value(k).to_string()
            }
        }
    };
    let opt = col("n_genes_opt").as_primitive::<Int64Type>();
    let counts = col("n_counts").as_primitive::<Int64Type>();
    let mut per_cell = vec![0i64; barcodes.len()];
    for (c, _, v) in parse_mtx(&src.join("matrix.mtx.gz")).2 {
        per_cell[c as usize] += v;
    }
    for i in 0..obs.num_rows() {
        let k = ct.keys().value(i) as usize;
        assert_eq!(ct_values.value(k), ["T", "B", "NK", "Mono"][i % 4]);
        if i % 7 == 0 {
            assert!(batch.is_null(i));
        } else {
            let k = batch.keys().value(i) as usize;
            assert_eq!(batch_values.value(k), ["b1", "b2"][i % 2]);
        }
        assert_eq!(frac.value(i), (i % 100) as f64 / 100.0);
        assert_eq!(score.value(i), (i % 10) as f32 / 4.0);
        assert_eq!(dbl.value(i), i % 5 == 0);
        assert_eq!(text_at(donor.as_ref(), i), format!("donor{}", i % 3));
        assert_eq!(counts.value(i), per_cell[i]);
        if i % 11 == 0 {
            assert!(opt.is_null(i));
        } else {
            assert_eq!(opt.value(i), (i % 50) as i64);
        }
    }
    assert_eq!(var.num_rows(), 507);
    assert_eq!(
        var.schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>(),
        ["_index", "gene_ids", "feature_types", "total"]
    );
    assert!(matches!(
        var.column(2).data_type(),
        DataType::Dictionary(_, _)
    ));
    let features = gz_lines(&src.join("features.tsv.gz"));
    let ids = var.column(1).as_string::<i32>();
    for (g, f) in features.iter().enumerate() {
        assert_eq!(ids.value(g), f.split('\t').next().unwrap());
    }
}

#[test]
fn generated_h5ad_variants_when_anndata_is_available() {
    if !have_anndata() {
        eprintln!("skipped: python3 with anndata and h5py is not available (scripts/setup.sh installs them)");
        return;
    }
    let dir = TempDir::new("h5gen");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/make_h5ad.py");
    let gen = dir.join("gen");
    let o = std::process::Command::new("python3")
        .arg(&script)
        .arg(scrna("10x-v3-1107-cells-chr21"))
        .arg(&gen)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for v in ["csr", "csc", "dense", "float", "csr64"] {
        check_h5ad_dataset(&gen.join(format!("{v}.h5ad")), &dir, v);
        let mut h = H5adSource::open(&gen.join(format!("{v}.h5ad"))).unwrap();
        assert_eq!(h.tables().unwrap().obs.unwrap().num_columns(), 9, "{v}");
    }
}

#[test]
fn tenx_tables_hold_barcodes_and_features() {
    let src = scrna("mouse-10k-cells-1k-genes");
    let mut s = deltacells::convert::open_source(&src).unwrap();
    let t = s.tables().unwrap();
    let obs = t.obs.unwrap();
    let barcodes = gz_lines(&src.join("barcodes.tsv.gz"));
    assert_eq!(obs.num_rows(), barcodes.len());
    assert_eq!(obs.column(0).as_string::<i32>().value(7), barcodes[7]);
    let var = t.var.unwrap();
    let features = gz_lines(&src.join("features.tsv.gz"));
    let f3: Vec<&str> = features[3].split('\t').collect();
    assert_eq!(var.column(0).as_string::<i32>().value(3), f3[0]); // ids: names repeat
    assert_eq!(
        var.column_by_name("gene_symbols")
            .unwrap()
            .as_string::<i32>()
            .value(3),
        f3[1]
    );
}

#[test]
fn info_verify_and_export() {
    let dir = TempDir::new("ive");
    let src = scrna("mouse-10k-cells-1k-genes");
    let out = dir.join("ds");
    convert(&src, &out, &[]);
    let ds_path = out.to_str().unwrap();
    let info = ok(&["info", ds_path]);
    assert!(
        info.contains("10000 cells x 1000 genes, 691914 nonzeros"),
        "{info}"
    );
    assert!(info.contains("25 tiles of up to 400 cells"), "{info}");
    assert!(info.contains("gene_order.npy: yes"), "{info}");
    assert!(info.contains("bytes per cell"), "{info}");
    let tiles = ok(&["info", ds_path, "--tiles"]);
    assert_eq!(tiles.lines().count(), info.lines().count() + 1 + 25);
    let v = ok(&["verify", ds_path]);
    assert!(
        v.contains("OK: 25 tiles, 10000 cells, 691914 nonzeros"),
        "{v}"
    );

    // Export of all cells == the source (same genes x cells orientation, input gene order).
    let mtx = dir.join("all.mtx");
    ok(&["export", ds_path, mtx.to_str().unwrap()]);
    let (g, c, t) = parse_mtx(&mtx);
    let (sg, sc, st) = parse_mtx(&src.join("matrix.mtx.gz"));
    assert_eq!((g, c), (sg, sc));
    assert_eq!(t, st);
    // ... and through the library's own reader too.
    let m = deltacells::convert::mtx::read_matrix_market(&mtx, true).unwrap();
    let m0 =
        deltacells::convert::mtx::read_matrix_market(&src.join("matrix.mtx.gz"), true).unwrap();
    assert_eq!(m, m0);

    // A subset, gzipped: column k is the k-th requested cell.
    let sub = dir.join("sub.mtx.gz");
    ok(&[
        "export",
        ds_path,
        sub.to_str().unwrap(),
        "--cells",
        "9,0,5-6",
    ]);
    let picked = [9u64, 0, 5, 6];
    let (g, c, t) = parse_mtx(&sub);
    assert_eq!((g, c), (1000, 4));
    let mut want: Vec<(u64, u64, i64)> = st
        .iter()
        .filter_map(|&(cell, gene, v)| {
            picked
                .iter()
                .position(|&p| p == cell)
                .map(|k| (k as u64, gene, v))
        })
        .collect();
    want.sort_unstable();
    assert_eq!(t, want);
    // Cells from a file.
    let list = dir.join("cells.txt");
    std::fs::write(&list, "3\n\n1\n").unwrap();
    let one = dir.join("one.mtx");
    ok(&[
        "export",
        ds_path,
        one.to_str().unwrap(),
        "--cells",
        list.to_str().unwrap(),
    ]);
    assert_eq!(parse_mtx(&one).1, 2);
    let e = fails_with(
        2,
        &["export", ds_path, one.to_str().unwrap(), "--cells", "10000"],
    );
    assert!(e.contains("cell 10000 is out of range"), "{e}");
    // Outputs are published atomically: no hidden temporary is left beside them.
    let hidden: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

#[test]
fn help_for_every_command() {
    for cmd in ["convert", "info", "verify", "export", "tile"] {
        let h = ok(&[cmd, "--help"]);
        assert!(h.starts_with("usage:"), "{cmd}: {h}");
        assert_eq!(ok(&["help", cmd]), h);
    }
    let h = ok(&["convert", "--help"]);
    for opt in [
        "--tile-size",
        "--chunks",
        "--level",
        "--threads",
        "--no-sort-genes",
        "--overwrite",
        "read whole",
    ] {
        assert!(h.contains(opt), "{opt}");
    }
    assert!(ok(&["--help"]).contains("deltacells convert INPUT OUTPUT"));
}
