//! Everything a store holds, written and rewritten (C API 1.1 §6.1): given category lists
//! (unused categories, non-lexical orders, dictionary columns), traces / cells tables,
//! cellm, binm, results, uns, contacts, links, interval attributes — through every layout
//! and `.cdz`, checked by the independent Python reader (tests/chromdata/read_store.py,
//! which dumps the components) and by re-reading; stores of the independent Python writer
//! written again from their logical input give the same stored rows; `rewrite` of 2.0 /
//! 2.1 / 2.2 stores keeps everything; every validation error with its kind.

mod chromdata_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::types::{Int32Type, Int64Type};
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
    read_store_py(store, true)
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
        &json!({"type": "json", "value": {"r": {"__uchrom_type__": "float", "value": "inf"}, "n": 5}}),
        None,
    )
    .unwrap();
    w.add_result(&["none"], &json!({"type": "json", "value": null}), None)
        .unwrap();
    let big: Vec<f64> = (0..100).map(|i| i as f64 / 4.0).collect();
    // Keys not in lexical order: a Python writer numbers uns/_<i> in the dict's order
    // (flags before big), sorted keys would number big first.
    let uns = format!(
        r#"{{"a": 1, "nested": {{"x": [1, 2], "tuple": {{"__uchrom_type__": "tuple", "items": [1, "a"]}}}},
        "flags": [{}], "small": {}, "edge": {}, "big": {}}}"#,
        json!({"__uchrom_type__": "ndarray", "dtype": "|b1", "shape": [65], "data": vec![true; 65]}),
        json!({"__uchrom_type__": "ndarray", "dtype": "<i4", "shape": [3], "data": [1, 2, 3]}),
        json!({"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [8, 8], "data": vec![0.5; 64]}),
        json!({"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [10, 10], "data": big}),
    );
    w.set_json("uns", None, &uns).unwrap();
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

/// The keys of a JSON object, in stored order.
fn keys_of(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
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
    // The user's key order kept (Value equality ignores order: compare the key lists).
    assert_eq!(keys_of(&results[4]["attrs"]["value"]), ["r", "n"], "{what}");
    let uns = &c["uns"];
    assert_eq!(
        keys_of(&uns["uns"]),
        ["a", "nested", "flags", "small", "edge", "big"],
        "{what}"
    );
    assert_eq!(keys_of(&uns["uns"]["nested"]), ["x", "tuple"], "{what}");
    // uns/_<i> numbered depth-first in the dict's order (§12): flags, then big.
    assert_eq!(
        uns["uns"]["flags"][0],
        json!({"__uchrom_type__": "array_ref", "path": "uns/_0"}),
        "{what}"
    );
    assert_eq!(uns["uns"]["big"]["path"], json!("uns/_1"), "{what}");
    assert_eq!(uns["uns"]["small"]["data"], json!([1, 2, 3]), "{what}");
    // 64 elements stay inline, 65 go to a Zarr array (§12)
    assert_eq!(uns["uns"]["edge"]["shape"], json!([8, 8]), "{what}");
    assert_eq!(uns["uns"]["edge"]["data"], json!(vec![0.5; 64]), "{what}");
    assert_eq!(uns["arrays"].as_object().unwrap().len(), 2, "{what}");
    assert_eq!(uns["arrays"]["_0"]["dtype"], json!("bool"), "{what}");
    assert_eq!(uns["arrays"]["_1"]["shape"], json!([10, 10]), "{what}");
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
        let uns = cd.attrs("uns", &[]).unwrap();
        assert_eq!(
            keys_of(&uns),
            ["a", "nested", "flags", "small", "edge", "big"],
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// §12 path rule: a store moved with the files it links finds them by `relative_path`
/// (the absolute `path` no longer exists); a record whose files exist nowhere keeps `path`.
#[test]
fn moved_store_finds_linked_files_by_relative_path() {
    if stores().is_none() {
        return;
    }
    let dir = tmpdir("moved");
    for (layout, name) in [
        (Layout::PrimaryCoords, "q.chromdata.zarr"),
        (Layout::Flat, "f.cdz"),
    ] {
        let (a, b) = (dir.join(format!("a-{name}")), dir.join(format!("b-{name}")));
        std::fs::create_dir_all(a.join("linked")).unwrap();
        std::fs::write(a.join("linked/x.mcool"), b"").unwrap();
        write_full(&a.join(name), &a, layout);
        std::fs::rename(&a, &b).unwrap();
        let cd = ChromData::open(b.join(name)).unwrap();
        let c = cd.attrs("contacts", &[]).unwrap();
        assert_eq!(
            c[0]["path"],
            json!(a.join("linked/x.mcool").to_str().unwrap()),
            "{name}"
        );
        assert_eq!(c[0]["relative_path"], json!("linked/x.mcool"), "{name}");
        assert_eq!(
            c[0]["resolved_path"],
            json!(b.join("linked/x.mcool").to_str().unwrap()),
            "{name}"
        );
        assert_eq!(c[1]["resolved_path"], json!("/nowhere/y.hic"), "{name}");
        let l = cd.attrs("links", &[]).unwrap();
        assert_eq!(l[0]["resolved_path"], json!("rna.h5ad"), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// C API §6.1 / §16: arrays and tables go to the store being built at the call, not at
/// finish (the writer holds no copy: its memory budget covers the spots only). Each is on
/// disk, complete, right after its call, and reads back equal after finish.
#[test]
fn arrays_and_tables_are_on_disk_at_the_call() {
    let dir = tmpdir("at-call");
    let path = dir.join("x.chromdata.zarr");
    let mut w = ChromDataWriter::create(
        &path,
        WriterOptions {
            memory_budget: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let tmp = w.temp_dir().to_path_buf();
    let files_under = |rel: &str| -> u64 {
        fn walk(p: &Path) -> u64 {
            std::fs::read_dir(p)
                .map(|d| {
                    d.map(|e| {
                        let e = e.unwrap();
                        if e.file_type().unwrap().is_dir() {
                            walk(&e.path())
                        } else {
                            e.metadata().unwrap().len()
                        }
                    })
                    .sum()
                })
                .unwrap_or(0)
        }
        walk(&tmp.join(rel))
    };
    // 4 bins x 300,000 float64 = 9.6 MB, far above the 1 MiB budget
    let big = matrix(4, 300_000, 0.5);
    w.add_array("binm", "big", big.clone()).unwrap();
    let on_disk = files_under("binm/big");
    assert!(on_disk > 0, "binm \"big\" not written at the call");
    w.add_result(&["r"], &json!({"type": "array"}), Some(big.clone()))
        .unwrap();
    assert!(
        files_under("results/r") > 0,
        "result array not written at the call"
    );
    let t = batch(vec![("v", Arc::new(Float64Array::from(vec![1.0; 1000])))]);
    w.add_result(&["t"], &json!({"type": "table"}), Some(t.clone()))
        .unwrap();
    assert!(
        files_under("results/t") > 0,
        "result table not written at the call"
    );
    let many: Vec<f64> = (0..70_000).map(f64::from).collect();
    w.set_json(
        "uns",
        None,
        &json!({"m": {"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [70000], "data": many}})
            .to_string(),
    )
    .unwrap();
    assert!(
        files_under("uns/_0") > 0,
        "uns array not written at the call"
    );
    for b in spot_batches() {
        w.append(b).unwrap();
    }
    w.finish().unwrap();
    let cd = ChromData::open(&path).unwrap();
    for (kind, p) in [("binm", "big"), ("results", "r")] {
        let back = cd.array(kind, &[p]).unwrap();
        assert_eq!(back.column(0).to_data(), big.column(0).to_data(), "{kind}");
        assert_eq!(
            back.schema().field(0).metadata()["shape"],
            "[4,300000]",
            "{kind}"
        );
    }
    assert_same(&cd.result_table(&["t"]).unwrap(), &t, "result table");
    let u = cd.array("uns", &["_0"]).unwrap();
    assert_eq!(u.num_rows(), 70_000);
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
        "main_20.cdz",
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
            (Layout::PrimaryCoords, "cdz"),
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
                    r.as_object_mut().unwrap().shift_remove("relative_path");
                }
            }
            assert_eq!(got, want, "{what}: components");
            // and in the same order (the independent writer's dicts are not sorted)
            assert_eq!(got.to_string(), want.to_string(), "{what}: key order");
            n += 1;
        }
    }
    assert_eq!(n, 32);
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

/// `col` as a dictionary array over `cats` (its category list), as R factors and pandas
/// categoricals arrive through the Arrow C Data Interface.
fn as_dictionary(col: &ArrayRef, cats: &ArrayRef) -> ArrayRef {
    use arrow_array::cast::AsArray;
    let text = |a: &ArrayRef, i: usize| match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).to_string(),
        t => panic!("categories of type {t}"),
    };
    let cat_text: Vec<String> = (0..cats.len()).map(|j| text(cats, j)).collect();
    let codes: Vec<Option<i32>> = (0..col.len())
        .map(|i| {
            (!col.is_null(i)).then(|| {
                let v = text(col, i);
                cat_text.iter().position(|c| *c == v).unwrap() as i32
            })
        })
        .collect();
    Arc::new(DictionaryArray::<Int32Type>::try_new(codes.into(), cats.clone()).unwrap())
}

/// `b` with the columns that are categorical in `table` of `cd` as dictionary arrays over
/// their stored category lists.
fn with_lists(cd: &ChromData, table: &str, b: &RecordBatch) -> RecordBatch {
    let schema = b.schema();
    let mut fields = Vec::new();
    let mut cols = Vec::new();
    for (f, c) in schema.fields().iter().zip(b.columns()) {
        match cd.categories(table, f.name()) {
            Ok(cats) => {
                let d = as_dictionary(c, &cats);
                fields.push(Field::new(f.name(), d.data_type().clone(), true));
                cols.push(d);
            }
            Err(_) => {
                fields.push(f.as_ref().clone());
                cols.push(c.clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

/// How the category lists reach the streaming writer.
#[derive(Clone, Copy, Debug)]
enum Lists {
    /// dc_chromdata_writer_set_categories, then plain values
    Given,
    /// dictionary-typed columns in every appended batch
    Dictionaries,
}

/// The independent writer's logical input written by the streaming writer (`lists`), with
/// its tables, intervals and points and the same row-group targets, into `dst`.
fn write_logical_input(cd: &ChromData, dst: &Path, layout: Layout, lists: Lists) {
    let info = cd.info();
    let mut w = ChromDataWriter::create(
        dst,
        WriterOptions {
            layout,
            row_group_size: 40,
            coords_row_group_size: 16,
            coord_float32: info.coord_bits == 32,
            memory_budget: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    w.set_bins(with_lists(cd, "bins", &cd.table("bins").unwrap()))
        .unwrap();
    w.set_bin_tracks(cd.table("bin_tracks").unwrap()).unwrap();
    let input = cd.read_spots(true, &Columns::All).unwrap();
    let input = match lists {
        Lists::Dictionaries => with_lists(cd, "spots", &input),
        Lists::Given => {
            for f in input.schema().fields() {
                if let Ok(cats) = cd.categories("spots", f.name()) {
                    w.set_categories(f.name(), cats).unwrap();
                }
            }
            input
        }
    };
    w.set_table(
        "traces",
        with_lists(cd, "traces", &cd.table("traces").unwrap()),
    )
    .unwrap();
    for lo in (0..input.num_rows()).step_by(37) {
        w.append(input.slice(lo, 37.min(input.num_rows() - lo)))
            .unwrap();
    }
    if input.num_rows() == 0 {
        w.append(input.clone()).unwrap();
    }
    if info.has_cell_id {
        w.set_table(
            "cells",
            with_lists(cd, "cells", &cd.table("cells").unwrap()),
        )
        .unwrap();
    }
    for coll in ["intervals", "points"] {
        for key in cd.keys(coll).unwrap() {
            let a = cd.attrs(coll, &[&key]).unwrap();
            let t = cd.table(&format!("{coll}/{key}")).unwrap();
            w.add_table(coll, &key, a["kind"].as_str(), t).unwrap();
            if coll == "intervals" {
                let src = json!({"source_result": a["source_result"]}).to_string();
                w.set_json(coll, Some(&key), &src).unwrap();
            }
        }
    }
    w.finish().unwrap();
}

/// chromdata-zarr.md §16 as issue #14 measured it: the logical input of the independent
/// writer's stores (make_stores.py), written again by the streaming writer with the
/// categorical columns given as lists (dictionary-typed columns, or set_categories), in four
/// layouts (2.0, 2.1, 2.2, .cdz) gives the same stored rows, runs and row groups, answers
/// every query of the manifest as pandas answers it on the logical data, and the
/// independent reader (read_store.py) finds the same spots, categories and tables in both.
#[test]
fn given_lists_store_what_the_independent_writer_stores() {
    let Some(src_dir) = stores() else { return };
    let m = manifest(src_dir);
    let dir = tmpdir("same");
    // Component keys are not written here (rewrite_keeps_everything covers them).
    let skipped = |q: &Value| {
        q["kind"] == "keys"
            && ["cellm", "binm", "results", "uns", "contacts", "links"]
                .contains(&q["what"].as_str().unwrap())
    };
    let mut n_queries = 0;
    for dataset in ["main", "nocell", "sorted", "nocoords"] {
        for (reference, layout) in [
            (format!("{dataset}_20.chromdata.zarr"), Layout::Flat),
            (format!("{dataset}_21.chromdata.zarr"), Layout::Partitioned),
            (
                format!("{dataset}_22.chromdata.zarr"),
                Layout::PrimaryCoords,
            ),
            (format!("{dataset}_22.cdz"), Layout::PrimaryCoords),
        ] {
            let entry = m["stores"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["path"] == reference.as_str())
                .unwrap();
            let exp_dir = src_dir.join(entry["expected_dir"].as_str().unwrap());
            let cd = ChromData::open(src_dir.join(&reference)).unwrap();
            let info = cd.info();
            let (want_spots, want) = python_read(&src_dir.join(&reference)).unwrap();
            for lists in [Lists::Given, Lists::Dictionaries] {
                let what = format!("{reference} ({lists:?})");
                let dst = dir.join(format!("{lists:?}-{reference}"));
                write_logical_input(&cd, &dst, layout, lists);
                let ours = ChromData::open(&dst).unwrap();
                let oi = ours.info();
                assert_eq!(
                    (oi.layout, oi.n_spots, oi.n_runs, oi.n_row_groups),
                    (info.layout, info.n_spots, info.n_runs, info.n_row_groups),
                    "{what}"
                );
                assert_eq!((oi.n_traces, oi.n_cells), (info.n_traces, info.n_cells));
                for q in entry["queries"].as_array().unwrap() {
                    if skipped(q) {
                        continue;
                    }
                    let got = run(&ours, q);
                    let what = format!("{what} {q}");
                    if let Some(err) = q.get("error") {
                        let e = got.expect_err(&what);
                        assert_eq!(e.kind, kind_of(err.as_str().unwrap()), "{what}: {e}");
                    } else {
                        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                        let want = read_expected(&exp_dir.join(q["file"].as_str().unwrap()));
                        assert_same(&got, &want, &what);
                    }
                    n_queries += 1;
                }
                // Runs in stored order: same batches, same rows.
                let runs = |c: &ChromData| -> Vec<usize> {
                    c.iter_traces(1, &Columns::Coords)
                        .unwrap()
                        .map(|b| b.unwrap().num_rows())
                        .collect()
                };
                assert_eq!(runs(&ours), runs(&cd), "{what}: runs");
                let (spots, got) = python_read(&dst).unwrap();
                assert_same(&spots, &want_spots, &what);
                for part in ["traces", "cells", "intervals"] {
                    assert_eq!(got.get(part), want.get(part), "{what}: {part}");
                }
                for (name, cats) in want["categories"].as_object().unwrap() {
                    if ["spots.readout", "spots.probe"].contains(&name.as_str()) {
                        continue; // plain strings there, categorical or not here
                    }
                    assert_eq!(&got["categories"][name], cats, "{what}: {name}");
                }
            }
        }
    }
    assert!(n_queries > 1000, "only {n_queries} queries checked");
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
