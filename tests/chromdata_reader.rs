//! The backed ChromData reader against stores written by the independent Python writer
//! (tests/chromdata/make_stores.py): every layout, directory and .cdz, answers every query
//! like pandas does on the logical data; invalid stores are rejected with the right kind.

mod chromdata_common;

use chromdata_common::*;
use deltacells::chromdata::{CatValue, ChromData, Columns};
use deltacells::ErrorKind;
use serde_json::Value;

#[test]
fn every_layout_answers_like_pandas() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    let mut n_checked = 0;
    for s in m["stores"].as_array().unwrap() {
        let path = dir.join(s["path"].as_str().unwrap());
        let cd = ChromData::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let info = cd.info();
        assert_eq!(info.n_spots, s["n_spots"].as_u64().unwrap());
        assert_eq!(info.has_cell_id, s["has_cell_id"].as_bool().unwrap());
        assert_eq!(info.layout.name(), s["layout"].as_str().unwrap());
        let exp_dir = dir.join(s["expected_dir"].as_str().unwrap());
        for q in s["queries"].as_array().unwrap() {
            let what = format!("{} {q}", s["path"]);
            let got = run(&cd, q);
            if let Some(err) = q.get("error") {
                let e = got.expect_err(&what);
                assert_eq!(e.kind, kind_of(err.as_str().unwrap()), "{what}: {e}");
                assert!(!e.message.is_empty());
            } else {
                let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                let want = read_expected(&exp_dir.join(q["file"].as_str().unwrap()));
                assert_same(&got, &want, &what);
            }
            n_checked += 1;
        }
    }
    assert!(n_checked > 1000, "only {n_checked} queries checked");
}

#[test]
fn iterators_cover_every_spot_once_in_whole_runs() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    for s in m["stores"].as_array().unwrap() {
        let path = dir.join(s["path"].as_str().unwrap());
        let cd = ChromData::open(&path).unwrap();
        let info = cd.info();
        let want = cd.read_spots(false, &Columns::All).unwrap();
        let mut iters = vec![("traces", 1u64), ("traces", 3), ("traces", 1000)];
        if info.has_cell_id {
            iters.extend([("cells", 1u64), ("cells", 2)]);
        }
        for (kind, b) in iters {
            let it = if kind == "traces" {
                cd.iter_traces(b, &Columns::All).unwrap()
            } else {
                cd.iter_cells(b, &Columns::All).unwrap()
            };
            let schema = arrow_array::RecordBatchReader::schema(&it);
            let batches: Vec<_> = it.collect::<Result<_, _>>().unwrap();
            let units = if kind == "traces" {
                info.n_runs
            } else {
                // cell segments: at least one per cell with spots
                batches.len() as u64 * b
            };
            if kind == "traces" {
                assert_eq!(
                    batches.len() as u64,
                    units.div_ceil(b),
                    "{path:?} {kind} {b}"
                );
            }
            for bt in &batches {
                assert!(bt.num_rows() > 0, "{path:?}: empty batch");
                // Whole runs: a batch of one run holds one trace (and one cell).
                if b == 1 && kind == "traces" {
                    let t = bt.column_by_name("trace_id").unwrap();
                    assert!(
                        (1..t.len()).all(|i| t.slice(i, 1).to_data() == t.slice(0, 1).to_data())
                    );
                }
            }
            let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
            assert_eq!(all.num_rows() as u64, info.n_spots);
            if info.n_spots > 0 {
                assert_same(
                    &sort_by(&all, "spot_id"),
                    &sort_by(&want, "spot_id"),
                    &format!("{path:?} iter {kind} {b}"),
                );
            }
        }
    }
}

#[test]
fn invalid_stores_are_rejected_with_their_kind() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    let cases = m["invalid"].as_array().unwrap();
    assert!(cases.len() > 50);
    for c in cases {
        let path = dir.join(c["path"].as_str().unwrap());
        match ChromData::open(&path) {
            Ok(_) => panic!("{}: opened, expected {}", c["name"], c["error"]),
            Err(e) => {
                assert_eq!(
                    e.kind,
                    kind_of(c["error"].as_str().unwrap()),
                    "{}: {e}",
                    c["name"]
                );
                assert!(
                    !e.message.contains('\n'),
                    "{}: multi-line message",
                    c["name"]
                );
                assert!(
                    e.message.contains("bad_"),
                    "{}: message does not name the store: {e}",
                    c["name"]
                );
            }
        }
    }
}

/// Table metadata of a store, read directly from its JSON (independent of the reader).
fn tables_json(dir: &std::path::Path) -> Value {
    let j: Value =
        serde_json::from_slice(&std::fs::read(dir.join("tables/zarr.json")).unwrap()).unwrap();
    j["attributes"]["tables"].clone()
}

#[test]
fn only_needed_row_groups_are_decoded() {
    let Some(dir) = stores() else { return };
    // Flat: a full read decodes each row group of each of the 4 row-aligned files once
    // (spots, spot_tracks, 2 layers); so does a sequential iteration (row-group cache).
    let p = dir.join("main_20.chromdata.zarr");
    let cd = ChromData::open(&p).unwrap();
    let n_rg = cd.info().n_row_groups;
    assert!(n_rg >= 3, "test store should have several row groups");
    let r0 = cd.row_group_reads();
    cd.read_spots(false, &Columns::All).unwrap();
    assert_eq!(cd.row_group_reads() - r0, 4 * n_rg);
    let cd = ChromData::open(&p).unwrap();
    let r0 = cd.row_group_reads();
    for b in cd.iter_traces(1, &Columns::All).unwrap() {
        b.unwrap();
    }
    assert_eq!(
        cd.row_group_reads() - r0,
        4 * n_rg,
        "iteration decoded a group twice"
    );
    // "coords" reads no extra file: only spots.parquet groups.
    let cd = ChromData::open(&p).unwrap();
    let r0 = cd.row_group_reads();
    cd.read_spots(false, &Columns::Coords).unwrap();
    assert_eq!(cd.row_group_reads() - r0, n_rg);
    // A single cell of the flat layout lies in at most a few groups, fewer than all.
    let cd = ChromData::open(&p).unwrap();
    let r0 = cd.row_group_reads();
    cd.get_cell(&CatValue::Str("cell0".into()), &Columns::Coords)
        .unwrap();
    assert!(cd.row_group_reads() - r0 < n_rg);

    // 2.2: get_chrom(coords) reads exactly the coords row groups of that partition.
    for (code, chrom) in ["chr1", "chr2", "chr 3/x"].iter().enumerate() {
        let p = dir.join("main_22.chromdata.zarr");
        let parts = &tables_json(&p)["spots"]["partitions"];
        let part = parts
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["chrom_code"] == code)
            .unwrap();
        let cd = ChromData::open(&p).unwrap();
        let r0 = cd.row_group_reads();
        cd.get_chrom(chrom, &Columns::Coords).unwrap();
        assert_eq!(
            cd.row_group_reads() - r0,
            part["n_row_groups"].as_u64().unwrap(),
            "{chrom}"
        );
        // 2.1: likewise with the spots partition.
        let p = dir.join("main_21.cdz");
        let cd = ChromData::open(&p).unwrap();
        let parts = &tables_json(&dir.join("main_21.chromdata.zarr"))["spots"]["partitions"];
        let part = parts
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["chrom_code"] == code)
            .unwrap();
        let r0 = cd.row_group_reads();
        cd.get_chrom(chrom, &Columns::Coords).unwrap();
        assert_eq!(
            cd.row_group_reads() - r0,
            part["n_row_groups"].as_u64().unwrap(),
            "{chrom}"
        );
    }
}

#[test]
fn handle_is_shared_across_threads() {
    let Some(dir) = stores() else { return };
    let cd = ChromData::open(dir.join("main_22.cdz")).unwrap();
    let want: Vec<_> = (0..6)
        .map(|t| {
            cd.get_trace(&CatValue::Str(format!("t{t}")), &Columns::All)
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for k in 0..4 {
            let cd = cd.clone();
            let want = &want;
            s.spawn(move || {
                for rep in 0..20 {
                    let t = (k + rep) % 6;
                    let got = cd
                        .get_trace(&CatValue::Str(format!("t{t}")), &Columns::All)
                        .unwrap();
                    assert_same(&got, &want[t], "threaded get_trace");
                }
            });
        }
    });
}

#[test]
fn stream_outlives_the_handle() {
    let Some(dir) = stores() else { return };
    let cd = ChromData::open(dir.join("main_21.chromdata.zarr")).unwrap();
    let it = cd.iter_cells(1, &Columns::Coords).unwrap();
    drop(cd);
    let n: usize = it.map(|b| b.unwrap().num_rows()).sum();
    assert!(n > 0);
}

/// The metadata model (src/chromdata/spec) against the independent Python writer: every
/// layout's root and tables documents parse, and what the model emits is the same JSON
/// value (unknown members included) that parses back to the same model.
#[test]
fn metadata_model_round_trips_every_python_store() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    let mut layouts = std::collections::HashSet::new();
    for s in m["stores"].as_array().unwrap() {
        let path = dir.join(s["path"].as_str().unwrap());
        if !path.is_dir() {
            continue;
        }
        let read = |rel: &str| -> Value {
            serde_json::from_slice(&std::fs::read(path.join(rel)).unwrap()).unwrap()
        };
        let (root, tables) = (read("zarr.json"), read("tables/zarr.json"));
        let (root_out, tables_out) = deltacells::chromdata::metadata_round_trip(&root, &tables)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let parsed = |b: &[u8]| -> Value { serde_json::from_slice(b).unwrap() };
        assert_eq!(parsed(&root_out), root, "{}: root", path.display());
        assert_eq!(parsed(&tables_out), tables, "{}: tables", path.display());
        layouts.insert(s["layout"].as_str().unwrap().to_string());
    }
    assert_eq!(layouts.len(), 3, "every layout checked: {layouts:?}");
}

/// Flattens the `value` column of an array batch (nested fixed-size lists) to JSON values,
/// row-major, and returns them with the shape from the field metadata.
pub fn array_values(b: &arrow_array::RecordBatch) -> (Vec<u64>, Value) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    use arrow_array::Array;
    use arrow_schema::DataType;
    assert_eq!(b.num_columns(), 1);
    let f = b.schema().field(0).clone();
    assert_eq!(f.name(), "value");
    assert!(!f.is_nullable(), "value is a non-null column");
    let shape: Vec<u64> = serde_json::from_str(&f.metadata()["shape"]).unwrap();
    assert_eq!(b.num_rows() as u64, shape.first().copied().unwrap_or(1));
    let mut a = b.column(0).clone();
    let mut depth = 1;
    while let DataType::FixedSizeList(_, k) = a.data_type() {
        assert_eq!(*k as u64, shape[depth], "list size at depth {depth}");
        depth += 1;
        a = a.as_fixed_size_list().values().clone();
    }
    assert_eq!(depth, shape.len().max(1), "nesting depth = dimensions");
    assert_eq!(a.null_count(), 0);
    macro_rules! vals {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|v| serde_json::json!(v))
                .collect()
        };
    }
    let v: Vec<Value> = match a.data_type() {
        DataType::Boolean => a.as_boolean().values().iter().map(Value::Bool).collect(),
        DataType::Int8 => vals!(Int8Type),
        DataType::Int16 => vals!(Int16Type),
        DataType::Int32 => vals!(Int32Type),
        DataType::Int64 => vals!(Int64Type),
        DataType::UInt8 => vals!(UInt8Type),
        DataType::UInt16 => vals!(UInt16Type),
        DataType::UInt32 => vals!(UInt32Type),
        DataType::UInt64 => vals!(UInt64Type),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .map(|v| serde_json::json!(f64::from(*v)))
            .collect(),
        DataType::Float64 => vals!(Float64Type),
        t => panic!("unexpected element type {t}"),
    };
    (shape, Value::Array(v))
}

fn err_kind(s: &str) -> ErrorKind {
    match s {
        "InvalidArgument" => ErrorKind::InvalidArgument,
        other => kind_of(other),
    }
}

/// §12 content (C API §5.1): attributes, arrays and result tables of every layout and .cdz
/// equal what the independent writer stored.
#[test]
fn components_read_as_stored() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    let mut n = 0;
    for s in m["stores"].as_array().unwrap() {
        let path = dir.join(s["path"].as_str().unwrap());
        let cd = ChromData::open(&path).unwrap();
        let exp_dir = dir.join(s["expected_dir"].as_str().unwrap());
        for q in s["components"].as_array().unwrap() {
            let what = format!("{} {q}", s["path"]);
            let p: Vec<&str> = q["path"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let kind = q["kind"].as_str().unwrap();
            let w = q["what"].as_str().unwrap_or("results");
            if let Some(err) = q.get("error") {
                let e = match kind {
                    "attrs" => cd.attrs(w, &p).map(|_| ()),
                    "array" => cd.array(w, &p).map(|_| ()),
                    _ => cd.result_table(&p).map(|_| ()),
                }
                .expect_err(&what);
                assert_eq!(e.kind, err_kind(err.as_str().unwrap()), "{what}: {e}");
            } else {
                match kind {
                    "attrs" => {
                        let got = cd.attrs(w, &p).unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(got, q["json"], "{what}");
                    }
                    "array" => {
                        let b = cd.array(w, &p).unwrap_or_else(|e| panic!("{what}: {e}"));
                        let (shape, vals) = array_values(&b);
                        assert_eq!(serde_json::json!(shape), q["shape"], "{what}");
                        assert_eq!(vals, q["values"], "{what}");
                        let a = cd.attrs(w, &p);
                        if w != "results" && w != "uns" {
                            assert_eq!(a.unwrap()["dtype"], q["dtype"], "{what}");
                        }
                    }
                    _ => {
                        let got = cd
                            .result_table(&p)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        let want = read_expected(&exp_dir.join(q["file"].as_str().unwrap()));
                        assert_same(&got, &want, &what);
                    }
                }
            }
            n += 1;
        }
    }
    assert!(n > 500, "only {n} component queries checked");
}

/// The §12 part of the metadata model: every component group and results member of the
/// Python stores parses, and what the model emits is the same JSON value.
#[test]
fn component_model_round_trips_every_python_store() {
    let Some(dir) = stores() else { return };
    let path = dir.join("main_22.chromdata.zarr");
    let read = |rel: &str| -> Value {
        serde_json::from_slice(&std::fs::read(path.join(rel)).unwrap()).unwrap()
    };
    let check = |what: &str, rel: &str| {
        let doc = read(rel);
        let out = deltacells::chromdata::component_metadata_round_trip(what, &doc)
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, doc, "{rel}");
    };
    for g in ["cellm", "binm", "results", "uns", "contacts", "links"] {
        check("group", &format!("{g}/zarr.json"));
    }
    let mut n = 0;
    for rel in [
        "results/tads.arcfish",
        "results/dist",
        "results/summary",
        "results/nothing",
        "results/fishnet.ensemble",
        "results/fishnet.ensemble/chr1",
        "results/fishnet.ensemble/chr1/mask",
        "results/fishnet.ensemble/_1",
        "results/_5",
    ] {
        check("result", &format!("{rel}/zarr.json"));
        n += 1;
    }
    assert_eq!(n, 9);
}
