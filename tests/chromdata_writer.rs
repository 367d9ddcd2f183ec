//! Streaming ChromData writer: round trips through the Rust reader and the independent
//! Python reader (tests/chromdata/read_store.py), every layout and .cdz, batch-split and
//! thread-count invariance (byte-identical files), memory budget (spilled runs), atomicity,
//! FOF-CT import and the C ABI.

mod chromdata_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::DataType;
use chromdata_common::spots::{batch_of, expected, make_spots, Rng, Spots};
use chromdata_common::{assert_same, tree_bytes};
use deltacells::chromdata::{ChromData, ChromDataWriter, Columns, Layout, WriterOptions};
use deltacells::ErrorKind;

/// The store as the independent Python reader (tests/chromdata/read_store.py) sees it, in
/// original order; None when python tests are explicitly skipped.
fn python_read(store: &Path) -> Option<RecordBatch> {
    // Fails (no silent skip) without the modules unless DELTACELLS_SKIP_PYTHON_TESTS is set.
    Some(chromdata_common::read_store_py(store, false)?.0)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("chromdata-writer")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, s: &Spots, splits: &[usize], opts: WriterOptions) -> ChromDataWriter {
    let mut w = ChromDataWriter::create(path, opts).unwrap();
    let mut lo = 0;
    for &hi in splits.iter().chain([s.chrom.len()].iter()) {
        w.append(batch_of(s, lo, hi)).unwrap();
        lo = hi;
    }
    w.finish().unwrap();
    w
}

fn opts(layout: Layout) -> WriterOptions {
    WriterOptions {
        layout,
        row_group_size: 40,
        coords_row_group_size: 16,
        ..WriterOptions::default()
    }
}

const LAYOUTS: [(Layout, &str); 3] = [
    (Layout::Flat, "20"),
    (Layout::Partitioned, "21"),
    (Layout::PrimaryCoords, "22"),
];

#[test]
fn round_trip_every_layout_and_cdz() {
    let d = tmpdir("round_trip");
    let s = make_spots(700, 7);
    let want = expected(&s, false);
    for (layout, short) in LAYOUTS {
        for ext in ["chromdata.zarr", "cdz"] {
            let p = d.join(format!("s{short}.{ext}"));
            write(&p, &s, &[100, 101, 450], opts(layout));
            let cd = ChromData::open(&p).unwrap();
            let info = cd.info();
            assert_eq!(info.layout, layout);
            assert_eq!(info.n_spots, 700);
            assert!(info.has_source_row);
            let got = cd.read_spots(true, &Columns::All).unwrap();
            assert_same(&got, &want, &format!("{}", p.display()));
            if let Some(py) = python_read(&p) {
                assert_same(&py, &want, &format!("python reader, {}", p.display()));
            }
            // Canonical order: sorted by (cell, trace, chrom, bin).
            let canon = cd.read_spots(false, &Columns::All).unwrap();
            assert_eq!(canon.num_rows(), 700);
            // Categories sorted.
            let tc = cd.categories("spots", "trace_id").unwrap();
            let tc: Vec<String> = (0..tc.len())
                .map(|i| {
                    tc.as_any()
                        .downcast_ref::<StringArray>()
                        .unwrap()
                        .value(i)
                        .into()
                })
                .collect();
            let mut sorted = tc.clone();
            sorted.sort();
            assert_eq!(tc, sorted);
            let st = cd.categories("spots", "coord_status").unwrap();
            assert_eq!(st.len(), 3);
            if layout == Layout::PrimaryCoords {
                let summary = std::fs::read_to_string(
                    if ext == "cdz" {
                        None
                    } else {
                        Some(p.join("tables/zarr.json"))
                    }
                    .unwrap_or_else(|| d.join("s22.chromdata.zarr/tables/zarr.json")),
                )
                .unwrap();
                let v: serde_json::Value = serde_json::from_str(&summary).unwrap();
                let cols = v["attributes"]["tables"]["spots"]["columns"]
                    .as_array()
                    .unwrap();
                let storage = |n: &str| {
                    let c = cols.iter().find(|c| c["name"] == n).unwrap();
                    (
                        c["storage"].as_str().unwrap().to_string(),
                        c.get("key").cloned(),
                    )
                };
                assert_eq!(storage("probe").0, "derived");
                assert_eq!(storage("probe").1, Some(serde_json::json!("bin")));
                assert_eq!(storage("fov").1, Some(serde_json::json!("cell")));
                assert_eq!(storage("spot_id").0, "primary");
                assert_eq!(storage("odd name/tag").0, "primary");
                let tag = cols.iter().find(|c| c["name"] == "odd name/tag").unwrap();
                assert_eq!(tag["type"], "string", "unique strings stay strings");
                let cs = cols.iter().find(|c| c["name"] == "coord_status").unwrap();
                assert_eq!(cs["type"], "categorical");
                let probe = cols.iter().find(|c| c["name"] == "probe").unwrap();
                assert_eq!(
                    probe["type"], "categorical",
                    "few distinct strings: categorical"
                );
            }
        }
    }
}

#[test]
fn float32_coordinates() {
    let d = tmpdir("f32");
    let s = make_spots(200, 3);
    let p = d.join("a.chromdata.zarr");
    let o = WriterOptions {
        coord_float32: true,
        ..opts(Layout::PrimaryCoords)
    };
    write(&p, &s, &[], o);
    let cd = ChromData::open(&p).unwrap();
    assert_eq!(cd.info().coord_bits, 32);
    let got = cd.read_spots(true, &Columns::All).unwrap();
    assert_same(&got, &expected(&s, true), "float32");
}

#[test]
fn identical_bytes_for_any_split_threads_and_budget() {
    let d = tmpdir("identical");
    let s = make_spots(3000, 11);
    for (layout, short) in LAYOUTS {
        let a = d.join(format!("a{short}.cdz"));
        write(&a, &s, &[], opts(layout));
        let want = tree_bytes(&a);
        let b = d.join(format!("b{short}.cdz"));
        let o = WriterOptions {
            threads: 1,
            ..opts(layout)
        };
        write(&b, &s, &[1, 2, 500, 501, 2999], o);
        assert!(want == tree_bytes(&b), "{short}: split / 1 thread differs");
        // A tiny budget: many spilled runs, same bytes.
        let c = d.join(format!("c{short}.chromdata.zarr"));
        let o = WriterOptions {
            threads: 3,
            memory_budget: 1 << 20,
            ..opts(layout)
        };
        let mut w = ChromDataWriter::create(&c, o).unwrap();
        for lo in (0..3000).step_by(100) {
            w.append(batch_of(&s, lo, lo + 100)).unwrap();
        }
        w.finish().unwrap();
        let e = d.join(format!("e{short}.chromdata.zarr"));
        write(&e, &s, &[], opts(layout));
        assert!(tree_bytes(&e) == tree_bytes(&c), "{short}: budget differs");
    }
}

#[test]
fn memory_budget_spills_runs() {
    let d = tmpdir("budget");
    let s = make_spots(12000, 5);
    let p = d.join("a.chromdata.zarr");
    let o = WriterOptions {
        memory_budget: 1 << 20,
        ..opts(Layout::PrimaryCoords)
    };
    let mut w = ChromDataWriter::create(&p, o).unwrap();
    let mut max_runs = 0;
    for lo in (0..12000).step_by(500) {
        w.append(batch_of(&s, lo, lo + 500)).unwrap();
        let spill = w.temp_dir().join("_spill");
        // A run is one file per column group (written in parallel): run-N.arrow,
        // run-N-g1.arrow, ...
        let mut runs: Vec<String> = std::fs::read_dir(&spill)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy()[..10].to_string())
            .collect();
        runs.sort();
        runs.dedup();
        max_runs = max_runs.max(runs.len());
    }
    let runs = w.runs_spilled();
    assert!(
        runs >= 4,
        "a 1 MiB budget over ~2 MB of spots spills runs ({runs})"
    );
    assert_eq!(max_runs, runs);
    w.finish().unwrap();
    let cd = ChromData::open(&p).unwrap();
    assert_same(
        &cd.read_spots(true, &Columns::All).unwrap(),
        &expected(&s, false),
        "budget",
    );
    // A large budget keeps everything in memory: no run file at all.
    let q = d.join("b.chromdata.zarr");
    let w = write(&q, &s, &[6000], opts(Layout::Flat));
    assert_eq!(w.runs_spilled(), 0);
}

#[test]
fn failed_spill_fails_the_writer_naming_its_batches() {
    // The spill's error is the first (naming the run's batches and the file), the
    // writer is failed from then on (that run's spots are gone), nothing is left behind.
    let d = tmpdir("spill-error");
    let s = make_spots(12000, 31);
    for threads in [1, 2] {
        let p = d.join(format!("t{threads}.chromdata.zarr"));
        let o = WriterOptions {
            threads,
            memory_budget: 1 << 20,
            ..opts(Layout::PrimaryCoords)
        };
        let mut w = ChromDataWriter::create(&p, o).unwrap();
        let tmp = w.temp_dir().to_path_buf();
        std::fs::remove_dir_all(tmp.join("_spill")).unwrap();
        let mut first = None;
        for lo in (0..12000).step_by(500) {
            if let Err(e) = w.append(batch_of(&s, lo, lo + 500)) {
                first = Some(e);
                break;
            }
        }
        let e = match first {
            Some(e) => {
                // Failed: later calls are refused.
                let again = w.append(batch_of(&s, 0, 10)).unwrap_err();
                assert_eq!(again.kind, ErrorKind::State, "{again}");
                w.finish().unwrap_err();
                e
            }
            None => w.finish().unwrap_err(),
        };
        // The run's file cannot be created: its directory is gone.
        assert_eq!(e.kind, ErrorKind::NotFound, "{threads} threads: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("spilling the run of appended batches 1-") && msg.contains("run-000000"),
            "{threads} threads: {msg}"
        );
        drop(w);
        assert!(!tmp.exists(), "{threads} threads: temporary left");
        assert!(!p.exists());
    }
}

#[test]
fn drop_without_finish_leaves_nothing() {
    let d = tmpdir("drop");
    let s = make_spots(100, 9);
    let p = d.join("a.chromdata.zarr");
    let mut w = ChromDataWriter::create(&p, opts(Layout::Flat)).unwrap();
    w.append(batch_of(&s, 0, 100)).unwrap();
    let tmp = w.temp_dir().to_path_buf();
    assert!(tmp.exists());
    // A killed writer leaves only its hidden temporary sibling, which never opens.
    let e = ChromData::open(&tmp).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    drop(w);
    assert!(!tmp.exists());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}

#[test]
fn overwrite_rules() {
    let d = tmpdir("overwrite");
    let s = make_spots(50, 2);
    let p = d.join("a.chromdata.zarr");
    write(&p, &s, &[], opts(Layout::Flat));
    let e = ChromDataWriter::create(&p, opts(Layout::Flat)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    let o = WriterOptions {
        overwrite: true,
        ..opts(Layout::PrimaryCoords)
    };
    write(&p, &s, &[], o.clone());
    assert_eq!(
        ChromData::open(&p).unwrap().info().layout,
        Layout::PrimaryCoords
    );
    // Not a store: refused even with overwrite.
    let other = d.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("precious.txt"), b"x").unwrap();
    let e = ChromDataWriter::create(&other, o.clone()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    assert!(other.join("precious.txt").exists());
    let f = d.join("file.cdz");
    std::fs::write(&f, b"not a zip").unwrap();
    assert_eq!(
        ChromDataWriter::create(&f, o).unwrap_err().kind,
        ErrorKind::Exists
    );
}

#[test]
fn type_unification_and_errors() {
    let d = tmpdir("types");
    let mk = |v: ArrayRef, trace: &str| {
        let n = v.len();
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("chrom", Arc::new(StringArray::from(vec!["c1"; n]))),
            ("start", Arc::new(Int64Array::from(vec![0; n]))),
            ("end", Arc::new(Int64Array::from(vec![10; n]))),
            ("trace_id", Arc::new(StringArray::from(vec![trace; n]))),
            ("v", v),
        ];
        chromdata_common::batch(cols)
    };
    let p = d.join("a.chromdata.zarr");
    let mut w = ChromDataWriter::create(&p, opts(Layout::Flat)).unwrap();
    w.append(mk(Arc::new(Int32Array::from(vec![1, 2])), "b"))
        .unwrap();
    w.append(mk(Arc::new(Int32Array::from(vec![Some(3), None])), "a"))
        .unwrap();
    // Strings where integers were: refused, the writer stays usable.
    let e = w
        .append(mk(Arc::new(StringArray::from(vec!["x"])), "a"))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    w.finish().unwrap();
    let cd = ChromData::open(&p).unwrap();
    let b = cd.read_spots(true, &Columns::All).unwrap();
    let v = b.column_by_name("v").unwrap();
    assert_eq!(
        v.data_type(),
        &DataType::Float64,
        "int with a null becomes float64"
    );
    let v = v.as_any().downcast_ref::<Float64Array>().unwrap();
    assert_eq!(v.value(0), 1.0);
    assert_eq!(v.value(2), 3.0);
    assert!(v.is_null(3));
    // Finished: further calls are state errors.
    assert_eq!(
        w.append(mk(Arc::new(Int32Array::from(vec![1])), "a"))
            .unwrap_err()
            .kind,
        ErrorKind::State
    );
}

#[test]
fn given_bins_and_bin_ids() {
    let d = tmpdir("bins");
    let chrom: DictionaryArray<arrow_array::types::Int32Type> =
        vec!["chrB", "chrB", "chrA"].into_iter().collect();
    let bins = RecordBatch::try_from_iter(vec![
        ("chrom", Arc::new(chrom) as ArrayRef),
        (
            "start",
            Arc::new(Int64Array::from(vec![0, 100, 0])) as ArrayRef,
        ),
        (
            "end",
            Arc::new(Int64Array::from(vec![100, 200, 100])) as ArrayRef,
        ),
        (
            "name",
            Arc::new(StringArray::from(vec!["b0", "b1", "a0"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let spots = RecordBatch::try_from_iter(vec![
        (
            "bin_id",
            Arc::new(Int32Array::from(vec![2, 0, 1, 2, 0])) as ArrayRef,
        ),
        (
            "trace_id",
            Arc::new(Int64Array::from(vec![5, 5, 5, 1, 1])) as ArrayRef,
        ),
        (
            "readout",
            Arc::new(StringArray::from(vec!["a0", "b0", "b1", "a0", "b0"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let p = d.join("a.chromdata.zarr");
    let mut w = ChromDataWriter::create(&p, opts(Layout::PrimaryCoords)).unwrap();
    w.set_bins(bins).unwrap();
    w.append(spots.clone()).unwrap();
    w.finish().unwrap();
    let cd = ChromData::open(&p).unwrap();
    let b = cd.read_spots(true, &Columns::All).unwrap();
    assert_same(
        &b.project(&[0, 1, 2]).unwrap(),
        &RecordBatch::try_from_iter(vec![
            (
                "bin_id",
                Arc::new(Int32Array::from(vec![2, 0, 1, 2, 0])) as ArrayRef,
            ),
            (
                "trace_id",
                Arc::new(Int64Array::from(vec![5, 5, 5, 1, 1])) as ArrayRef,
            ),
            (
                "readout",
                Arc::new(StringArray::from(vec!["a0", "b0", "b1", "a0", "b0"])) as ArrayRef,
            ),
        ])
        .unwrap(),
        "given bins",
    );
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("tables/zarr.json")).unwrap()).unwrap();
    let c = &t["attributes"]["tables"]["spots"]["columns"][0];
    assert_eq!(c["storage"], "bins", "{c}");
    assert_eq!(c["source"], "name");
    // Chromosome order of the dictionary is kept: chrB is code 0.
    let cats = cd.categories("bins", "chrom").unwrap();
    let cats = cats.as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(cats.value(0), "chrB");
}

#[test]
fn empty_store() {
    let d = tmpdir("empty");
    for (layout, short) in LAYOUTS {
        let p = d.join(format!("e{short}.chromdata.zarr"));
        let mut w = ChromDataWriter::create(&p, opts(layout)).unwrap();
        let s = make_spots(5, 1);
        w.append(batch_of(&s, 0, 0)).unwrap();
        w.finish().unwrap();
        let cd = ChromData::open(&p).unwrap();
        assert_eq!(cd.info().n_spots, 0);
        assert_eq!(cd.read_spots(false, &Columns::All).unwrap().num_rows(), 0);
    }
}

#[test]
fn c_abi_writer() {
    use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
    use deltacells::ffi::*;
    use std::ffi::CString;
    let d = tmpdir("ffi");
    let s = make_spots(300, 21);
    let p = d.join("c.cdz");
    let cp = CString::new(p.to_str().unwrap()).unwrap();
    let mut w: *mut dc_chromdata_writer = std::ptr::null_mut();
    // SAFETY (test): valid pointers throughout; FFI structs built by arrow-rs.
    unsafe {
        assert_eq!(dc_chromdata_writer_create(cp.as_ptr(), &mut w), DC_OK);
        assert_eq!(
            dc_chromdata_writer_set(w, DC_CDW_LAYOUT, DC_LAYOUT_PARTITIONED as i64),
            DC_OK
        );
        assert_eq!(
            dc_chromdata_writer_set(w, DC_CDW_LAYOUT, 7),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_chromdata_writer_set(w, 99, 0), DC_ERR_INVALID_ARGUMENT);
        assert_eq!(
            dc_chromdata_writer_set(w, DC_CDW_MEMORY_BUDGET, 1 << 20),
            DC_OK
        );
        assert_eq!(dc_chromdata_writer_set(w, DC_CDW_THREADS, 2), DC_OK);
        assert_eq!(dc_chromdata_writer_set(w, DC_CDW_COORD_FLOAT32, 0), DC_OK);
        // Below the minimum budget, negative values: refused, the writer stays usable.
        assert_eq!(
            dc_chromdata_writer_set(w, DC_CDW_MEMORY_BUDGET, 1000),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_writer_set(w, DC_CDW_THREADS, -1),
            DC_ERR_INVALID_ARGUMENT
        );
        // The ranges come from the core (WriterParam::bounds).
        let (mut lo, mut hi) = (-9i64, -9i64);
        for (p, want) in [
            (DC_CDW_LAYOUT, (0, 2)),
            (DC_CDW_OVERWRITE, (0, 1)),
            (DC_CDW_COORD_FLOAT32, (0, 1)),
            (DC_CDW_MEMORY_BUDGET, (0, i64::MAX)),
        ] {
            assert_eq!(dc_chromdata_writer_param_bounds(p, &mut lo, &mut hi), DC_OK);
            assert_eq!((lo, hi), want, "param {p}");
        }
        assert_eq!(
            dc_chromdata_writer_param_bounds(99, &mut lo, &mut hi),
            DC_ERR_INVALID_ARGUMENT
        );
        for (lo, hi) in [(0, 120), (120, 300)] {
            let b = batch_of(&s, lo, hi);
            let st: arrow_array::StructArray = b.into();
            let mut arr = FFI_ArrowArray::new(&st.to_data());
            let mut sch = FFI_ArrowSchema::try_from(st.data_type()).unwrap();
            assert_eq!(dc_chromdata_writer_append(w, &mut arr, &mut sch), DC_OK);
            assert!(
                arr.is_released(),
                "the input array is moved into the library"
            );
        }
        // A bad batch: no trace_id.
        let bad = RecordBatch::try_from_iter(vec![(
            "chrom",
            Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
        )])
        .unwrap();
        let st: arrow_array::StructArray = bad.into();
        let mut arr = FFI_ArrowArray::new(&st.to_data());
        let mut sch = FFI_ArrowSchema::try_from(st.data_type()).unwrap();
        assert_eq!(
            dc_chromdata_writer_append(w, &mut arr, &mut sch),
            DC_ERR_INVALID_ARGUMENT
        );
        assert!(arr.is_released());
        assert_eq!(
            dc_chromdata_writer_append(w, std::ptr::null_mut(), &mut sch),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_chromdata_writer_finish(w), DC_OK);
        assert_eq!(dc_chromdata_writer_finish(w), DC_ERR_STATE);
        dc_chromdata_writer_free(w);
        dc_chromdata_writer_free(std::ptr::null_mut());
        // Existing store without overwrite: DC_ERR_EXISTS at finish.
        let mut w2: *mut dc_chromdata_writer = std::ptr::null_mut();
        assert_eq!(dc_chromdata_writer_create(cp.as_ptr(), &mut w2), DC_OK);
        assert_eq!(dc_chromdata_writer_finish(w2), DC_ERR_EXISTS);
        dc_chromdata_writer_free(w2);
    }
    let cd = ChromData::open(&p).unwrap();
    assert_eq!(cd.info().layout, Layout::Partitioned);
    assert_same(
        &cd.read_spots(true, &Columns::All).unwrap(),
        &expected(&s, false),
        "C ABI",
    );
    // Only the store is left in the directory.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
}

#[test]
fn fofct_import_and_errors() {
    use deltacells::chromdata::fofct;
    let d = tmpdir("fofct");
    let mut text = String::from(
        "##FOF-CT_version=v0.1\n##Table_namespace=4dn_FOF-CT_core\n\
         ##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, Cell_ID, Extra_Cell_ROI_ID)\n\
         # a comment\n",
    );
    let mut r = Rng(99);
    let mut rows = Vec::new();
    for i in 0..400 {
        let t = r.below(20);
        let ch = ["chr1", "chr2"][r.below(2) as usize];
        let b = r.below(5) as i64 * 30000;
        let x = if i % 17 == 0 {
            "NaN".to_string()
        } else {
            format!("{:.3}", r.unit() * 5.0)
        };
        rows.push((t, ch, b));
        text.push_str(&format!(
            "{},{t},{x},{:.3},{:.3},{ch},{b},{},{},{}\n",
            i + 1,
            r.unit(),
            r.unit(),
            b + 30000,
            t % 4,
            if i % 9 == 0 {
                String::new()
            } else {
                format!("roi{}", t % 3)
            }
        ));
    }
    let csv = d.join("core.csv");
    std::fs::write(&csv, &text).unwrap();
    let out = d.join("f.cdz");
    let n = fofct::import(&csv, &out, WriterOptions::default()).unwrap();
    assert_eq!(n, 400);
    let cd = ChromData::open(&out).unwrap();
    let b = cd.read_spots(true, &Columns::All).unwrap();
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "bin_id",
            "trace_id",
            "cell_id",
            "x",
            "y",
            "z",
            "Spot_ID",
            "Extra_Cell_ROI_ID"
        ]
    );
    let spot = b
        .column_by_name("Spot_ID")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(spot.values().to_vec(), (1..=400).collect::<Vec<i64>>());
    let trace = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
    for (i, (t, _, _)) in rows.iter().enumerate() {
        assert_eq!(trace.value(i), *t as i64);
    }
    let x = b.column(3).as_any().downcast_ref::<Float64Array>().unwrap();
    assert!(x.value(0).is_nan() && !x.value(1).is_nan());
    let roi = b.column(7).as_any().downcast_ref::<StringArray>().unwrap();
    assert!(roi.is_null(0) && roi.value(1).starts_with("roi"));
    assert_eq!(cd.info().n_bins, 10);

    // Malformed lines: reported with their line number; nothing is left behind.
    let head = "##FOF-CT_version=v0.1\n##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End)\n";
    for (body, want) in [
        (
            "1,t1,1,2,3,chr1,0,10\n2,t1,1,2,chr1,0,10\n",
            "bad.csv:4: expected 8 fields, found 7",
        ),
        (
            "1,t1,1,2,3,chr1,0,10\n2,t1,1,2,3,chr1,zero,10\n",
            "bad.csv:4: column Chrom_Start: not an integer: \"zero\"",
        ),
        (
            "1,t1,abc,2,3,chr1,0,10\n",
            "bad.csv:3: column X: not a number: \"abc\"",
        ),
        (
            "1,,1,2,3,chr1,0,10\n",
            "bad.csv:3: column Trace_ID: missing value",
        ),
    ] {
        let bad = d.join("bad.csv");
        std::fs::write(&bad, format!("{head}{body}")).unwrap();
        let o = d.join("bad.chromdata.zarr");
        let e = fofct::import(&bad, &o, WriterOptions::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Format, "{e}");
        assert!(
            e.message.contains(want),
            "{} does not contain {want}",
            e.message
        );
        assert!(!o.exists());
    }
    let bad = d.join("nocols.csv");
    std::fs::write(&bad, "##columns=(Spot_ID, X)\n1,2\n").unwrap();
    let e = fofct::import(&bad, d.join("n.cdz"), WriterOptions::default()).unwrap_err();
    assert!(
        e.message
            .contains("nocols.csv:2: required FOF-CT column Trace_ID"),
        "{e}"
    );
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with('.')),
        "temporary leftovers: {names:?}"
    );
}

/// Key-side values of the rows in the planned row groups of a store-relative Parquet file:
/// one `Vec<i64>` per requested column name.
fn planned_values(
    store: &Path,
    fr: &deltacells::chromdata::FileRead,
    names: &[&str],
) -> Vec<Vec<i64>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ProjectionMask;
    let f = std::fs::File::open(store.join(&fr.path)).unwrap();
    let b = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let idx: Vec<usize> = names
        .iter()
        .map(|n| b.schema().index_of(n).unwrap())
        .collect();
    let mask = ProjectionMask::roots(b.parquet_schema(), idx);
    let r = b
        .with_row_groups(fr.row_groups.clone())
        .with_projection(mask)
        .build()
        .unwrap();
    let mut out = vec![Vec::new(); names.len()];
    for batch in r {
        let batch = batch.unwrap();
        for (k, n) in names.iter().enumerate() {
            let a = arrow_cast_i64(batch.column_by_name(n).unwrap());
            out[k].extend(a);
        }
    }
    out
}

fn arrow_cast_i64(a: &ArrayRef) -> Vec<i64> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int16Type, Int32Type};
    match a.data_type() {
        DataType::Int16 => a
            .as_primitive::<Int16Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::Int32 => a
            .as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        t => panic!("unexpected code type {t}"),
    }
}

/// `read_plan` (used by benches/chromdata.rs to replay a query's reads with pyarrow) lists
/// row groups that hold every row of the answer and only groups that hold some, no more
/// groups than the query decodes, and only the files the column selection needs.
#[test]
fn read_plan_lists_the_row_groups_a_query_reads() {
    use deltacells::chromdata::{CatValue, PlanQuery};
    let d = tmpdir("read_plan");
    let s = make_spots(700, 11);
    for (layout, short) in LAYOUTS {
        let p = d.join(format!("s{short}.chromdata.zarr"));
        write(&p, &s, &[300], opts(layout));
        let cd = ChromData::open(&p).unwrap();
        let trace_cats = cd.categories("spots", "trace_id").unwrap();
        let trace_cats = trace_cats.as_any().downcast_ref::<StringArray>().unwrap();
        let cell_cats = cd.categories("spots", "cell_id").unwrap();
        let cell_cats = cell_cats.as_any().downcast_ref::<Int64Array>().unwrap();
        let queries = [
            (PlanQuery::Trace(CatValue::Str("t3".into())), Columns::All),
            (
                PlanQuery::Trace(CatValue::Str("t7".into())),
                Columns::Coords,
            ),
            (PlanQuery::Cell(CatValue::Int(93)), Columns::All),
            (PlanQuery::Cell(CatValue::Int(100)), Columns::Coords),
            (PlanQuery::Chrom("chr10".into()), Columns::All),
            (PlanQuery::All, Columns::All),
        ];
        for (q, cols) in queries {
            let what = format!("{}: {q:?} {cols:?}", p.display());
            let fresh = ChromData::open(&p).unwrap();
            let before = fresh.row_group_reads();
            let answer = match &q {
                PlanQuery::Trace(id) => fresh.get_trace(id, &cols),
                PlanQuery::Cell(id) => fresh.get_cell(id, &cols),
                PlanQuery::Chrom(c) => fresh.get_chrom(c, &cols),
                PlanQuery::All => fresh.read_spots(false, &cols),
            }
            .unwrap();
            let decoded = fresh.row_group_reads() - before;
            let plan = fresh.read_plan(&q, &cols).unwrap();
            let planned: usize = plan.iter().map(|f| f.row_groups.len()).sum();
            assert!(
                planned > 0 && planned as u64 <= decoded,
                "{what}: {planned} planned, {decoded} decoded"
            );
            let tracks = plan
                .iter()
                .any(|f| f.columns.iter().any(|c| c == "intensity"));
            assert_eq!(
                tracks,
                cols == Columns::All,
                "{what}: spot tracks file in the plan"
            );
            // Key files (those with trace_id): the planned groups hold every answer row,
            // and each planned group holds at least one (for trace / cell queries).
            let code = |v: &CatValue| -> i64 {
                match v {
                    CatValue::Str(t) => (0..trace_cats.len())
                        .find(|&i| trace_cats.value(i) == t)
                        .unwrap() as i64,
                    CatValue::Int(c) => (0..cell_cats.len())
                        .find(|&i| cell_cats.value(i) == *c)
                        .unwrap() as i64,
                }
            };
            let mut matched = 0usize;
            for fr in plan
                .iter()
                .filter(|f| f.columns.iter().any(|c| c == "trace_id"))
            {
                let mut g = fr.row_groups.clone();
                g.sort_unstable();
                g.dedup();
                assert_eq!(g.len(), fr.row_groups.len(), "{what}: duplicate groups");
                match &q {
                    PlanQuery::Trace(id) | PlanQuery::Cell(id) => {
                        let col = if matches!(q, PlanQuery::Trace(_)) {
                            "trace_id"
                        } else {
                            "cell_id"
                        };
                        let want = code(id);
                        for single in &fr.row_groups {
                            let one = deltacells::chromdata::FileRead {
                                row_groups: vec![*single],
                                ..fr.clone()
                            };
                            let v = &planned_values(&p, &one, &[col])[0];
                            let n = v.iter().filter(|&&c| c == want).count();
                            assert!(
                                n > 0,
                                "{what}: {} group {single} holds no answer row",
                                fr.path
                            );
                            matched += n;
                        }
                    }
                    _ => matched += planned_values(&p, fr, &["trace_id"])[0].len(),
                }
            }
            match &q {
                PlanQuery::Chrom(_) => assert!(matched >= answer.num_rows(), "{what}"),
                _ => assert_eq!(matched, answer.num_rows(), "{what}"),
            }
        }
    }
}

/// Appends `s` in batches of `step` rows to a writer with `o`; `relayout` is set just before
/// `finish` (after every run was spilled).
fn write_in_steps(
    path: &Path,
    s: &Spots,
    step: usize,
    o: WriterOptions,
    relayout: Option<Layout>,
) -> ChromDataWriter {
    let mut w = ChromDataWriter::create(path, o).unwrap();
    let n = s.chrom.len();
    for lo in (0..n).step_by(step) {
        w.append(batch_of(s, lo, (lo + step).min(n))).unwrap();
    }
    if let Some(l) = relayout {
        let mut o = w.options().clone();
        o.layout = l;
        w.set_options(o).unwrap();
    }
    w.finish().unwrap();
    w
}

#[test]
fn tiny_budget_merges_in_passes_with_the_same_bytes() {
    let d = tmpdir("passes");
    // ~25 runs under 1 MiB, more than the merge can hold a batch of at once.
    let s = make_spots(40000, 17);
    for (layout, short) in LAYOUTS {
        let want_path = d.join(format!("want{short}.chromdata.zarr"));
        write(&want_path, &s, &[], opts(layout));
        let want = tree_bytes(&want_path);
        let p = d.join(format!("tiny{short}.chromdata.zarr"));
        let o = WriterOptions {
            memory_budget: 1 << 20,
            ..opts(layout)
        };
        let w = write_in_steps(&p, &s, 1000, o, None);
        assert!(
            w.runs_spilled() >= 3,
            "{short}: {} runs spilled",
            w.runs_spilled()
        );
        assert!(
            w.merge_passes() >= 1,
            "{short}: the merge of {} runs under 1 MiB took no intermediate pass",
            w.runs_spilled()
        );
        assert!(want == tree_bytes(&p), "{short}: multi-pass merge differs");
    }
}

#[test]
fn layout_changed_after_spilling_gives_the_same_bytes() {
    let d = tmpdir("relayout");
    let s = make_spots(6000, 23);
    let pairs = [
        (Layout::Flat, Layout::Partitioned, "20-21"),
        (Layout::Partitioned, Layout::PrimaryCoords, "21-22"),
        (Layout::PrimaryCoords, Layout::Flat, "22-20"),
    ];
    for (first, last, name) in pairs {
        let want_path = d.join(format!("want{name}.chromdata.zarr"));
        write(&want_path, &s, &[], opts(last));
        let p = d.join(format!("re{name}.chromdata.zarr"));
        let o = WriterOptions {
            memory_budget: 1 << 20,
            ..opts(first)
        };
        let w = write_in_steps(&p, &s, 500, o, Some(last));
        assert!(w.runs_spilled() >= 2, "{name}: nothing was spilled");
        assert_eq!(ChromData::open(&p).unwrap().info().layout, last);
        assert!(
            tree_bytes(&want_path) == tree_bytes(&p),
            "{name}: re-sorted runs give other bytes"
        );
    }
}

/// The 3-bin table of `given_bins_and_bin_ids`.
fn three_bins() -> RecordBatch {
    let chrom: DictionaryArray<arrow_array::types::Int32Type> =
        vec!["chrB", "chrB", "chrA"].into_iter().collect();
    RecordBatch::try_from_iter(vec![
        ("chrom", Arc::new(chrom) as ArrayRef),
        (
            "start",
            Arc::new(Int64Array::from(vec![0, 100, 0])) as ArrayRef,
        ),
        (
            "end",
            Arc::new(Int64Array::from(vec![100, 200, 100])) as ArrayRef,
        ),
    ])
    .unwrap()
}

#[test]
fn bin_tracks_and_pass_through_tables_round_trip() {
    let d = tmpdir("passthrough");
    let tracks = RecordBatch::try_from_iter(vec![
        (
            "signal",
            Arc::new(arrow_array::Float32Array::from(vec![
                Some(0.5),
                None,
                Some(2.0),
            ])) as ArrayRef,
        ),
        (
            "label",
            Arc::new(StringArray::from(vec!["x", "y", "x"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let tads = RecordBatch::try_from_iter(vec![
        (
            "chrom",
            Arc::new(StringArray::from(vec!["chrA", "chrB"])) as ArrayRef,
        ),
        ("start", Arc::new(Int64Array::from(vec![0, 50])) as ArrayRef),
        (
            "end",
            Arc::new(Int64Array::from(vec![100, 150])) as ArrayRef,
        ),
        (
            "score",
            Arc::new(arrow_array::Float64Array::from(vec![1.5, f64::NAN])) as ArrayRef,
        ),
    ])
    .unwrap();
    let fiducials = RecordBatch::try_from_iter(vec![
        (
            "x",
            Arc::new(arrow_array::Float64Array::from(vec![1.0, 2.0, 3.0])) as ArrayRef,
        ),
        (
            "note",
            Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])) as ArrayRef,
        ),
    ])
    .unwrap();
    let spots = RecordBatch::try_from_iter(vec![
        (
            "bin_id",
            Arc::new(Int32Array::from(vec![2, 0, 1])) as ArrayRef,
        ),
        (
            "trace_id",
            Arc::new(Int64Array::from(vec![5, 5, 1])) as ArrayRef,
        ),
    ])
    .unwrap();
    for (layout, short) in LAYOUTS {
        for ext in ["chromdata.zarr", "cdz"] {
            let p = d.join(format!("s{short}.{ext}"));
            let mut w = ChromDataWriter::create(&p, opts(layout)).unwrap();
            // Bin tracks need the bins table first.
            let e = w.set_bin_tracks(tracks.clone()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::State, "{e}");
            w.set_bins(three_bins()).unwrap();
            let e = w.set_bin_tracks(tracks.slice(0, 2)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            w.set_bin_tracks(tracks.clone()).unwrap();
            // Keys needing a portable name and the kind checks.
            w.add_table("intervals", "tads/arcfish v1", Some("domain"), tads.clone())
                .unwrap();
            let e = w
                .add_table("intervals", "loops", Some("pair"), tads.clone())
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            assert!(e.message.contains("chrom1"), "{e}");
            let e = w
                .add_table("intervals", "tads/arcfish v1", Some("domain"), tads.clone())
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Exists, "{e}");
            let e = w
                .add_table("intervals", "x", None, tads.clone())
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            let e = w.add_table("results", "x", None, tads.clone()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            w.append(spots.clone()).unwrap();
            w.add_table("points", "fiducials", None, fiducials.clone())
                .unwrap();
            w.finish().unwrap();

            let cd = ChromData::open(&p).unwrap();
            let bt = cd.table("bin_tracks").unwrap();
            assert_eq!(bt.num_rows(), 3);
            assert_same(&bt, &tracks, &format!("{short} {ext} bin_tracks"));
            assert_eq!(cd.keys("intervals").unwrap(), vec!["tads/arcfish v1"]);
            assert_eq!(cd.keys("points").unwrap(), vec!["fiducials"]);
            let t = cd.table("intervals/tads/arcfish v1").unwrap();
            assert_same(&t, &tads, &format!("{short} {ext} intervals"));
            let f = cd.table("points/fiducials").unwrap();
            assert_same(&f, &fiducials, &format!("{short} {ext} points"));
            assert_eq!(cd.info().n_spots, 3);
            // The independent reader checks the small tables' metadata and row counts.
            if let Some(py) = python_read(&p) {
                assert_eq!(py.num_rows(), 3);
            }
        }
    }
}

/// The writer stores its metadata through the same model the reader parses: parsing its
/// root and tables documents and emitting them again gives the same bytes, every layout.
#[test]
fn metadata_documents_are_the_model_emitted() {
    let d = tmpdir("metadata_model");
    let s = make_spots(300, 11);
    for (layout, short) in LAYOUTS {
        let p = d.join(format!("s{short}.chromdata.zarr"));
        write(&p, &s, &[120], opts(layout));
        let root = std::fs::read(p.join("zarr.json")).unwrap();
        let tables = std::fs::read(p.join("tables/zarr.json")).unwrap();
        let json = |b: &[u8]| -> serde_json::Value { serde_json::from_slice(b).unwrap() };
        let (root_out, tables_out) =
            deltacells::chromdata::metadata_round_trip(&json(&root), &json(&tables)).unwrap();
        assert!(
            root_out == root,
            "{short}: root zarr.json differs from the model's"
        );
        assert!(
            tables_out == tables,
            "{short}: tables/zarr.json differs from the model's"
        );
    }
}
