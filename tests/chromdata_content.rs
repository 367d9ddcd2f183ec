//! Everything a store holds, written and rewritten (C API 1.1 §6.1): given category lists
//! (unused categories, non-lexical orders, dictionary columns), traces / cells tables,
//! cellm, binm, results, uns, contacts, links, interval attributes — through every layout
//! and `.cdz`, checked by the independent Python reader (tests/chromdata/read_store.py,
//! which dumps the components) and by re-reading; stores of the independent Python writer
//! written again from their logical input give the same stored rows; `rewrite` of 2.0 /
//! 2.1 / 2.2 stores keeps everything; every validation error with its kind.

mod chromdata_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::Array;
use arrow_array::{
    ArrayRef, DictionaryArray, FixedSizeListArray, Float64Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use chromdata_common::*;
use deltacells::chromdata::{
    rewrite, ChromData, ChromDataWriter, Columns, Layout, RewriteOptions, WriterOptions,
};
use deltacells::ErrorKind;
use serde_json::{json, Value};

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("content-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// read_store.py STORE: the spot table in original order and the component dump.
fn python_read(store: &Path) -> Option<(RecordBatch, Value)> {
    stores()?; // the Python modules are there (or the test is skipped explicitly)
    let dir = store.parent().unwrap();
    let name = store.file_name().unwrap().to_string_lossy();
    let (pq, js) = (
        dir.join(format!("{name}.spots.parquet")),
        dir.join(format!("{name}.json")),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chromdata/read_store.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(store)
        .arg(&pq)
        .arg(&js)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_store.py {}: {}",
        store.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let comps: Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    Some((read_expected(&pq), comps))
}

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

fn strs(v: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(v.to_vec()))
}

fn dict(keys: &[Option<i32>], values: &[&str]) -> ArrayRef {
    Arc::new(
        DictionaryArray::<Int32Type>::try_new(keys.iter().copied().collect(), strs(values))
            .unwrap(),
    )
}

/// A (n, k) float64 array batch as `ChromData::array` returns it.
fn matrix(n: usize, k: usize, base: f64) -> RecordBatch {
    let v = Float64Array::from((0..n * k).map(|i| base + i as f64).collect::<Vec<_>>());
    let item = Arc::new(Field::new("item", DataType::Float64, false));
    let l = FixedSizeListArray::try_new(item, k as i32, Arc::new(v), None).unwrap();
    let f = Field::new("value", l.data_type().clone(), false).with_metadata(
        std::collections::HashMap::from([("shape".to_string(), format!("[{n},{k}]"))]),
    );
    RecordBatch::try_new(Arc::new(Schema::new(vec![f])), vec![Arc::new(l)]).unwrap()
}

const TRACE_CATS: [&str; 5] = ["t3", "t1", "zz_unused", "t2", "t0"];
const CELL_DICT: [&str; 3] = ["cB", "c_unused", "cA"];
const STATUS: [&str; 3] = ["ok", "missing", "imputed"];

/// Spots of two batches: trace ids plain (a list is given), cell ids and coord_status as
/// dictionaries (the first batch's dictionary fixes those lists).
fn spot_batches() -> Vec<RecordBatch> {
    let mk = |lo: usize, hi: usize| {
        let idx: Vec<usize> = (lo..hi).collect();
        let chrom: Vec<&str> = idx.iter().map(|i| ["chr2", "chr1"][i % 2]).collect();
        let start: Vec<i64> = idx.iter().map(|i| ((i * 7) % 4) as i64 * 100).collect();
        let end: Vec<i64> = start.iter().map(|s| s + 100).collect();
        let trace: Vec<&str> = idx
            .iter()
            .map(|i| ["t0", "t1", "t2", "t3"][(i * 3) % 4])
            .collect();
        let cells: Vec<Option<i32>> = idx.iter().map(|i| Some([0, 2][i % 2])).collect();
        let status: Vec<Option<i32>> = idx
            .iter()
            .map(|i| {
                if i % 5 == 0 {
                    None
                } else {
                    Some((i % 3) as i32)
                }
            })
            .collect();
        let x: Vec<f64> = idx.iter().map(|&i| i as f64 * 0.5).collect();
        batch(vec![
            ("chrom", strs(&chrom)),
            ("start", Arc::new(Int64Array::from(start))),
            ("end", Arc::new(Int64Array::from(end))),
            ("trace_id", strs(&trace)),
            ("cell_id", dict(&cells, &CELL_DICT)),
            ("x", Arc::new(Float64Array::from(x.clone()))),
            ("y", Arc::new(Float64Array::from(x.clone()))),
            ("z", Arc::new(Float64Array::from(x))),
            ("coord_status", dict(&status, &STATUS)),
            (
                "spot_id",
                Arc::new(Int64Array::from_iter_values(lo as i64..hi as i64)),
            ),
        ])
    };
    vec![mk(0, 25), mk(25, 60)]
}

/// Writes the full store with `layout` at `path`; `dir` holds a linked contact file.
fn write_full(path: &Path, dir: &Path, layout: Layout) {
    let mut w = ChromDataWriter::create(
        path,
        WriterOptions {
            layout,
            memory_budget: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    w.set_categories("trace_id", strs(&TRACE_CATS)).unwrap();
    w.set_table(
        "traces",
        batch(vec![
            ("trace_id", strs(&["t0", "t1", "t2", "t3", "zz_unused"])),
            (
                "length",
                Arc::new(Int64Array::from(vec![10, 11, 12, 13, 99])),
            ),
            (
                "kind",
                dict(
                    &[Some(1), Some(0), Some(1), None, Some(0)],
                    &["b", "a", "never"],
                ),
            ),
        ]),
    )
    .unwrap();
    w.add_array("cellm", "pca", matrix(3, 4, 0.25)).unwrap();
    w.add_array("cellm", "umap 2d", matrix(3, 2, 7.0)).unwrap();
    for b in spot_batches() {
        w.append(b).unwrap();
    }
    w.set_table(
        "cells",
        batch(vec![
            ("cell_id", strs(&["cA", "cB", "c_unused"])),
            ("area", Arc::new(Float64Array::from(vec![1.5, 2.5, 3.5]))),
        ]),
    )
    .unwrap();
    let n_bins = 4; // chr2 at 0 / 200, chr1 at 100 / 300
    w.add_array("binm", "flag", matrix(n_bins, 1, 0.0)).unwrap();
    w.add_array("binm", "empty k", {
        let v = Float64Array::from(Vec::<f64>::new());
        let item = Arc::new(Field::new("item", DataType::Float64, false));
        let l = FixedSizeListArray::try_new(item, 0, Arc::new(v), None).unwrap();
        // n_bins rows of zero width: FixedSizeList<0> needs an explicit length
        let l = FixedSizeListArray::try_new_with_length(
            Arc::new(Field::new("item", DataType::Float64, false)),
            0,
            l.values().clone(),
            None,
            n_bins,
        )
        .unwrap();
        let f = Field::new("value", l.data_type().clone(), false).with_metadata(
            std::collections::HashMap::from([("shape".to_string(), format!("[{n_bins},0]"))]),
        );
        RecordBatch::try_new(Arc::new(Schema::new(vec![f])), vec![Arc::new(l)]).unwrap()
    })
    .unwrap();
    let tads = batch(vec![
        ("chrom", dict(&[Some(0), Some(1)], &["chr1", "chr2"])),
        ("start", Arc::new(Int64Array::from(vec![0, 100]))),
        ("end", Arc::new(Int64Array::from(vec![300, 200]))),
    ]);
    w.add_result(
        &["tads"],
        &json!({"type": "table", "kind": "tads", "function": "f", "params": {"w": 3},
                "inputs": {"chrom": ["chr1"]}, "uchrom_version": "0.3.0",
                "created_utc": "2026-01-01T00:00:00Z"}),
        Some(tads.clone()),
    )
    .unwrap();
    w.add_result(
        &["ens"],
        &json!({"type": "mapping", "kind": "ensemble"}),
        None,
    )
    .unwrap();
    w.add_result(&["ens", "chr1"], &json!({"type": "mapping"}), None)
        .unwrap();
    w.add_result(
        &["ens", "chr1", "mask"],
        &json!({"type": "array"}),
        Some(matrix(2, 2, 1.0)),
    )
    .unwrap();
    w.add_result(
        &["ens", "n/traces"],
        &json!({"type": "json", "value": {"n": 5, "r": {"__uchrom_type__": "float", "value": "inf"}}}),
        None,
    )
    .unwrap();
    w.add_result(&["none"], &json!({"type": "json", "value": null}), None)
        .unwrap();
    let big: Vec<f64> = (0..100).map(|i| i as f64 / 4.0).collect();
    let uns = json!({
        "a": 1, "nested": {"x": [1, 2], "tuple": {"__uchrom_type__": "tuple", "items": [1, "a"]}},
        "big": {"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [10, 10], "data": big},
        "small": {"__uchrom_type__": "ndarray", "dtype": "<i4", "shape": [3], "data": [1, 2, 3]},
        "flags": [{"__uchrom_type__": "ndarray", "dtype": "|b1", "shape": [65], "data": vec![true; 65]}]
    });
    w.set_json("uns", None, &uns.to_string()).unwrap();
    let contacts = json!([
        {"key": "hic", "path": dir.join("linked/x.mcool").to_str().unwrap(), "format": "mcool",
         "kind": "bulk", "resolutions": [5000]},
        {"key": "far", "path": "/nowhere/y.hic", "format": "hic", "relative_path": "z.hic"}
    ]);
    w.set_json("contacts", None, &contacts.to_string()).unwrap();
    w.set_json(
        "links",
        None,
        &json!([{"key": "rna", "path": "rna.h5ad", "format": "h5ad"}]).to_string(),
    )
    .unwrap();
    w.add_table("intervals", "tads", Some("domain"), tads)
        .unwrap();
    w.add_table(
        "points",
        "pts",
        None,
        batch(vec![("x", Arc::new(Float64Array::from(vec![1.0])))]),
    )
    .unwrap();
    w.set_json("intervals", Some("tads"), r#"{"source_result": "tads"}"#)
        .unwrap();
    w.finish().unwrap();
}

/// What read_store.py must find in the component dump.
fn check_components(c: &Value, dir: &Path, what: &str) {
    let cats = &c["categories"];
    assert_eq!(cats["spots.trace_id"], json!(TRACE_CATS), "{what}");
    assert_eq!(cats["spots.cell_id"], json!(CELL_DICT), "{what}");
    assert_eq!(cats["spots.coord_status"], json!(STATUS), "{what}");
    assert_eq!(cats["traces.kind"], json!(["b", "a", "never"]), "{what}");
    assert_eq!(c["traces"]["trace_id"], json!(TRACE_CATS), "{what}");
    assert_eq!(c["traces"]["length"], json!([13, 11, 99, 12, 10]), "{what}");
    assert_eq!(
        c["traces"]["kind"],
        json!([null, "b", "b", "a", "a"]),
        "{what}"
    );
    assert_eq!(c["cells"]["area"], json!([2.5, 3.5, 1.5]), "{what}");
    assert_eq!(c["cellm"]["pca"]["shape"], json!([3, 4]), "{what}");
    assert_eq!(c["cellm"]["pca"]["values"][5], json!(5.25), "{what}");
    assert_eq!(c["cellm"]["umap 2d"]["dtype"], json!("float64"), "{what}");
    assert_eq!(c["binm"]["empty k"]["shape"], json!([4, 0]), "{what}");
    let results = c["results"].as_array().unwrap();
    let paths: Vec<&Value> = results.iter().map(|r| &r["path"]).collect();
    assert_eq!(
        paths,
        [
            &json!(["tads"]),
            &json!(["ens"]),
            &json!(["ens", "chr1"]),
            &json!(["ens", "chr1", "mask"]),
            &json!(["ens", "n/traces"]),
            &json!(["none"])
        ],
        "{what}"
    );
    assert_eq!(
        results[0]["attrs"],
        json!({"type": "table", "kind": "tads", "function": "f", "params": {"w": 3},
               "inputs": {"chrom": ["chr1"]}, "uchrom_version": "0.3.0",
               "created_utc": "2026-01-01T00:00:00Z"}),
        "{what}"
    );
    assert_eq!(
        results[0]["table"]["chrom"],
        json!(["chr1", "chr2"]),
        "{what}"
    );
    assert_eq!(
        results[1]["attrs"]["keys"],
        json!(["chr1", "n/traces"]),
        "{what}"
    );
    assert_eq!(results[3]["shape"], json!([2, 2]), "{what}");
    assert_eq!(
        results[5]["attrs"],
        json!({"type": "json", "value": null}),
        "{what}"
    );
    let uns = &c["uns"];
    assert_eq!(
        uns["uns"]["big"],
        json!({"__uchrom_type__": "array_ref", "path": "uns/_0"}),
        "{what}"
    );
    assert_eq!(uns["uns"]["flags"][0]["path"], json!("uns/_1"), "{what}");
    assert_eq!(uns["uns"]["small"]["data"], json!([1, 2, 3]), "{what}");
    assert_eq!(uns["arrays"]["_0"]["shape"], json!([10, 10]), "{what}");
    assert_eq!(uns["arrays"]["_1"]["dtype"], json!("bool"), "{what}");
    assert_eq!(
        c["contacts"][0]["relative_path"],
        json!("linked/x.mcool"),
        "{what}"
    );
    assert_eq!(c["contacts"][1]["relative_path"], json!("z.hic"), "{what}");
    assert!(c["links"][0].get("relative_path").is_none(), "{what}");
    assert_eq!(
        c["intervals"]["tads"],
        json!({"kind": "domain", "source_result": "tads"}),
        "{what}"
    );
    let _ = dir;
}

/// Every component, every layout and .cdz: read_store.py's dump, the reader's §5.1 calls,
/// and the spots in canonical order by the given category lists.
#[test]
fn every_component_round_trips_every_layout() {
    if stores().is_none() {
        return;
    }
    let dir = tmpdir("full");
    std::fs::create_dir_all(dir.join("linked")).unwrap();
    std::fs::write(dir.join("linked/x.mcool"), b"").unwrap();
    let mut first: Option<RecordBatch> = None;
    for (layout, name) in [
        (Layout::Flat, "f.chromdata.zarr"),
        (Layout::Partitioned, "p.chromdata.zarr"),
        (Layout::PrimaryCoords, "q.chromdata.zarr"),
        (Layout::Flat, "f.cdz"),
        (Layout::Partitioned, "p.cdz"),
        (Layout::PrimaryCoords, "q.cdz"),
    ] {
        let path = dir.join(name);
        write_full(&path, &dir, layout);
        let (spots, comps) = python_read(&path).unwrap();
        check_components(&comps, &dir, name);
        // The spots in original order are the input (categoricals decoded).
        assert_eq!(spots.num_rows(), 60, "{name}");
        let cd = ChromData::open(&path).unwrap();
        let canon = cd.read_spots(false, &Columns::All).unwrap();
        match &first {
            None => first = Some(canon.clone()),
            Some(f) => assert_same(&canon, f, name),
        }
        // canonical order follows the given lists: cell cB (code 0) first, then its lowest-coded trace t2.
        let cell = canon.column_by_name("cell_id").unwrap();
        let trace = canon.column_by_name("trace_id").unwrap();
        use arrow_array::cast::AsArray;
        assert_eq!(cell.as_string::<i32>().value(0), "cB", "{name}");
        assert_eq!(trace.as_string::<i32>().value(0), "t2", "{name}");
        let a = cd.attrs("contacts", &[]).unwrap();
        assert_eq!(
            a[0]["resolved_path"],
            json!(dir.join("linked/x.mcool").to_str().unwrap()),
            "{name}"
        );
        assert_eq!(
            cd.attrs("results", &["ens", "n/traces"]).unwrap()["value"]["n"],
            json!(5)
        );
        let arr = cd.array("binm", &["empty k"]).unwrap();
        assert_eq!(arr.num_rows(), 4, "{name}");
        assert_eq!(cd.categories("traces", "kind").unwrap().len(), 3, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrites of the independent writer's 2.0 / 2.1 / 2.2 stores (directories and .cdz)
/// into every layout keep everything: read_store.py finds the same spots in original
/// order and the same components (contacts may gain the relative_path of §12).
#[test]
fn rewrite_keeps_everything() {
    let Some(src_dir) = stores() else { return };
    let dir = tmpdir("rewrite");
    let mut n = 0;
    for src in [
        "main_20.chromdata.zarr",
        "main_21.cdz",
        "main_22.chromdata.zarr",
        "nocell_21.chromdata.zarr",
        "sorted_22.cdz",
        "nocoords_20.chromdata.zarr",
        "empty_22.chromdata.zarr",
    ] {
        let src_path = src_dir.join(src);
        let (want_spots, mut want) = python_read(&src_path).unwrap();
        for (layout, ext) in [
            (Layout::Flat, "chromdata.zarr"),
            (Layout::Partitioned, "cdz"),
            (Layout::PrimaryCoords, "chromdata.zarr"),
        ] {
            let dst = dir.join(format!("{src}.{}.{ext}", layout.name().replace('+', "_")));
            let calls = std::sync::Mutex::new(Vec::new());
            let opts = RewriteOptions {
                layout,
                memory_budget: 4 << 20,
                ..Default::default()
            };
            let observer = |p: deltacells::progress::Progress| {
                calls.lock().unwrap().push((p.stage, p.done, p.total));
                true
            };
            rewrite(&src_path, &dst, &opts, &observer)
                .unwrap_or_else(|e| panic!("{src} -> {}: {e}", dst.display()));
            let total = ChromData::open(&src_path).unwrap().info().n_spots;
            let calls = calls.into_inner().unwrap();
            use deltacells::progress::Stage;
            assert!(
                calls.contains(&(Stage::Read, total, Some(total))),
                "progress of {src}: {calls:?}"
            );
            assert_eq!(calls.last(), Some(&(Stage::Finish, total, Some(total))));
            let (spots, mut got) = python_read(&dst).unwrap();
            let what = format!("{src} -> {}", layout.name());
            assert_same(&spots, &want_spots, &what);
            for c in [&mut got, &mut want] {
                for r in c["contacts"].as_array_mut().unwrap() {
                    r.as_object_mut().unwrap().remove("relative_path");
                }
            }
            assert_eq!(got, want, "{what}: components");
            n += 1;
        }
    }
    assert_eq!(n, 21);
    let e = rewrite(
        &src_dir.join("main_20.chromdata.zarr"),
        &src_dir.join("main_20.chromdata.zarr"),
        &RewriteOptions::default(),
        &deltacells::progress::Silent,
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The independent writer's logical input (read back in original order), written again
/// by the streaming writer with the same category lists and row-group targets, gives the
/// same stored rows, runs and row groups.
#[test]
fn given_lists_store_what_the_independent_writer_stores() {
    let Some(src_dir) = stores() else { return };
    let dir = tmpdir("same");
    for (src, layout) in [
        ("main_20.chromdata.zarr", Layout::Flat),
        ("main_21.chromdata.zarr", Layout::Partitioned),
        ("main_22.chromdata.zarr", Layout::PrimaryCoords),
        ("nocell_22.chromdata.zarr", Layout::PrimaryCoords),
    ] {
        let cd = ChromData::open(src_dir.join(src)).unwrap();
        let info = cd.info();
        let input = cd.read_spots(true, &Columns::All).unwrap();
        let dst = dir.join(src);
        let mut w = ChromDataWriter::create(
            &dst,
            WriterOptions {
                layout,
                row_group_size: 40,
                coords_row_group_size: 16,
                coord_float32: info.coord_bits == 32,
                ..Default::default()
            },
        )
        .unwrap();
        let bins = cd.table("bins").unwrap();
        let chroms = cd.categories("bins", "chrom").unwrap();
        let codes: Vec<i32> = {
            use arrow_array::cast::AsArray;
            let c = bins.column(0).as_string::<i32>();
            let cats = chroms.as_string::<i32>();
            (0..c.len())
                .map(|i| {
                    (0..cats.len())
                        .find(|&j| cats.value(j) == c.value(i))
                        .unwrap() as i32
                })
                .collect()
        };
        let chrom = DictionaryArray::<Int32Type>::try_new(codes.into(), chroms).unwrap();
        let bschema = bins.schema();
        let mut cols: Vec<(&str, ArrayRef)> = vec![("chrom", Arc::new(chrom))];
        for (i, f) in bschema.fields().iter().enumerate().skip(1) {
            cols.push((f.name().as_str(), bins.column(i).clone()));
        }
        let names: Vec<String> = cols.iter().map(|(n, _)| n.to_string()).collect();
        let cols: Vec<(&str, ArrayRef)> = names
            .iter()
            .map(String::as_str)
            .zip(cols.into_iter().map(|(_, a)| a))
            .collect();
        w.set_bins(batch(cols)).unwrap();
        w.set_categories("trace_id", cd.categories("spots", "trace_id").unwrap())
            .unwrap();
        if info.has_cell_id {
            w.set_categories("cell_id", cd.categories("spots", "cell_id").unwrap())
                .unwrap();
        }
        for c in ["coord_status", "tlabel"] {
            w.set_categories(c, cd.categories("spots", c).unwrap())
                .unwrap();
        }
        for lo in (0..input.num_rows()).step_by(37) {
            let len = 37.min(input.num_rows() - lo);
            w.append(input.slice(lo, len)).unwrap();
        }
        w.finish().unwrap();
        let ours = ChromData::open(&dst).unwrap();
        let oi = ours.info();
        assert_eq!(
            (oi.n_runs, oi.n_row_groups, oi.n_traces, oi.n_cells),
            (info.n_runs, info.n_row_groups, info.n_traces, info.n_cells),
            "{src}"
        );
        assert_same(
            &ours.read_spots(false, &Columns::All).unwrap(),
            &cd.read_spots(false, &Columns::All).unwrap(),
            src,
        );
        assert_same(&ours.read_spots(true, &Columns::All).unwrap(), &input, src);
        // Runs in stored order: same batches, same rows.
        let a: Vec<usize> = ours
            .iter_traces(1, &Columns::Coords)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .collect();
        let b: Vec<usize> = cd
            .iter_traces(1, &Columns::Coords)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .collect();
        assert_eq!(a, b, "{src}: runs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every validation error of §6.1 with its kind.
#[test]
fn validation_errors() {
    let dir = tmpdir("errors");
    let path = dir.join("x.chromdata.zarr");
    let kind = |r: deltacells::Result<()>| r.unwrap_err().kind;
    let mut w = ChromDataWriter::create(&path, WriterOptions::default()).unwrap();
    assert_eq!(
        kind(w.set_categories("trace_id", strs(&["a", "b", "a"]))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_categories("trace_id", Arc::new(Float64Array::from(vec![1.0])))),
        ErrorKind::Unsupported
    );
    w.set_categories("trace_id", strs(&["t0", "t1"])).unwrap();
    assert_eq!(
        kind(w.set_categories("trace_id", strs(&["t0"]))),
        ErrorKind::Exists
    );
    // ids not among the categories
    let b = &spot_batches()[0];
    let e = w.append(b.clone()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(
        e.message.contains("t2") || e.message.contains("t3"),
        "{}",
        e.message
    );
    assert_eq!(
        kind(w.set_table("traces", batch(vec![("trace_id", strs(&["t0", "t9"]))]))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_table("traces", batch(vec![("id", strs(&["t0"]))]))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_table("traces", batch(vec![("trace_id", strs(&["t0", "t0"]))]))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_table("genes", batch(vec![("trace_id", strs(&["t0"]))]))),
        ErrorKind::InvalidArgument
    );
    // unknown kinds, bad JSON, members before mappings, duplicates
    assert_eq!(
        kind(w.add_array("obsm", "k", matrix(2, 2, 0.0))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_json("notes", None, "{}")),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_json("uns", None, "{\"a\":")),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.set_json("uns", None, "[1]")),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.add_result(&["r"], &json!({"type": "frame"}), None)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.add_result(&["r"], &json!({"type": "table"}), None)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(w.add_result(&["m", "x"], &json!({"type": "json", "value": 1}), None)),
        ErrorKind::NotFound
    );
    w.add_result(&["m"], &json!({"type": "mapping"}), None)
        .unwrap();
    w.add_result(&["j"], &json!({"type": "json", "value": 1}), None)
        .unwrap();
    assert_eq!(
        kind(w.add_result(&["m"], &json!({"type": "mapping"}), None)),
        ErrorKind::Exists
    );
    assert_eq!(
        kind(w.add_result(&["j", "x"], &json!({"type": "json", "value": 1}), None)),
        ErrorKind::InvalidArgument
    );
    w.add_array("cellm", "k", matrix(2, 2, 0.0)).unwrap();
    assert_eq!(
        kind(w.add_array("cellm", "k", matrix(2, 2, 0.0))),
        ErrorKind::Exists
    );
    assert_eq!(
        kind(w.set_json(
            "links",
            None,
            r#"[{"key":"a","path":"p"},{"key":"a","path":"q"}]"#
        )),
        ErrorKind::Exists
    );
    assert_eq!(
        kind(w.set_json("links", None, r#"[{"path":"p"}]"#)),
        ErrorKind::InvalidArgument
    );
    // types Parquet or Zarr cannot store
    assert_eq!(
        kind(w.add_array("cellm", "s", batch(vec![("value", strs(&["a"]))]))),
        ErrorKind::Unsupported
    );
    assert_eq!(
        kind(w.set_json(
            "uns",
            None,
            r#"{"s":{"__uchrom_type__":"ndarray","dtype":"<U1","shape":[1],"data":["a"]}}"#
        )),
        ErrorKind::Unsupported
    );
    let nested: ArrayRef = Arc::new(
        arrow_array::ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1)])]),
    );
    assert_eq!(
        kind(w.set_table(
            "traces",
            batch(vec![("trace_id", strs(&["t0"])), ("l", nested)])
        )),
        ErrorKind::Unsupported
    );
    assert_eq!(
        kind(w.set_json("intervals", Some("nope"), r#"{"source_result":null}"#)),
        ErrorKind::NotFound
    );
    drop(w);
    // a category list after the first append; wrong first dimensions; missing table rows
    let mut w = ChromDataWriter::create(&path, WriterOptions::default()).unwrap();
    w.append(spot_batches()[0].clone()).unwrap();
    assert_eq!(
        kind(w.set_categories("trace_id", strs(&["t0"]))),
        ErrorKind::State
    );
    // n_cells is known (the first batch's dictionary fixed the cells): checked at once
    assert_eq!(
        kind(w.add_array("cellm", "k", matrix(5, 2, 0.0))),
        ErrorKind::InvalidArgument
    );
    // n_bins is known at finish only (bins from the loci)
    w.add_array("binm", "b", matrix(5, 2, 0.0)).unwrap();
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("binm \"b\""), "{}", e.message);
    assert!(!path.exists());
    let mut w = ChromDataWriter::create(&path, WriterOptions::default()).unwrap();
    w.append(spot_batches()[0].clone()).unwrap();
    w.set_table("traces", batch(vec![("trace_id", strs(&["t0"]))]))
        .unwrap();
    assert_eq!(kind(w.finish()), ErrorKind::InvalidArgument);
    // a later batch must carry the first batch's dictionary
    let mut w = ChromDataWriter::create(&path, WriterOptions::default()).unwrap();
    let bs = spot_batches();
    w.append(bs[0].clone()).unwrap();
    let mut cols: Vec<ArrayRef> = bs[1].columns().to_vec();
    cols[4] = strs(&vec!["cA"; bs[1].num_rows()]);
    let mut fields: Vec<Field> = bs[1]
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[4] = Field::new("cell_id", DataType::Utf8, true);
    let plain = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
    assert_eq!(kind(w.append(plain)), ErrorKind::InvalidArgument);
    w.append(bs[1].clone()).unwrap();
    w.finish().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
