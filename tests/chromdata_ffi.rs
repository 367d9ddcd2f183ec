//! The §5 C functions, called through their exported symbols with C-style arguments, on
//! stores written by the independent Python writer.

mod chromdata_common;

use std::ffi::{c_char, CStr, CString};
use std::ptr;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{RecordBatch, RecordBatchReader};
use chromdata_common::*;
use deltacells::chromdata::{CatValue, ChromData, Columns};
use deltacells::ffi::*;

fn last_error() -> String {
    // SAFETY: dc_last_error never returns NULL.
    unsafe { CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn read_stream(mut s: FFI_ArrowArrayStream) -> RecordBatch {
    // SAFETY: a stream exported by the library.
    let r = unsafe { RecordBatchStreamReader::from_raw(&mut s) }.unwrap();
    let schema = r.schema();
    let batches: Vec<RecordBatch> = r.collect::<Result<_, _>>().unwrap();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

fn open(path: &std::path::Path) -> *mut dc_chromdata {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let mut h = ptr::null_mut();
    // SAFETY: valid string and out-pointer.
    let st = unsafe { dc_chromdata_open(p.as_ptr(), &mut h) };
    assert_eq!(st, DC_OK, "{}", last_error());
    h
}

fn cols(names: &[&str]) -> (Vec<CString>, Vec<*const c_char>) {
    let owned: Vec<CString> = names.iter().map(|n| CString::new(*n).unwrap()).collect();
    let ptrs = owned.iter().map(|c| c.as_ptr()).collect();
    (owned, ptrs)
}

#[test]
fn c_queries_match_the_rust_api() {
    let Some(dir) = stores() else { return };
    for name in ["main_20.chromdata.zarr", "main_21.cdz", "main_22.cdz"] {
        let path = dir.join(name);
        let cd = ChromData::open(&path).unwrap();
        let h = open(&path);
        let mut info = dc_chromdata_info::default();
        // SAFETY: live handle, writable out.
        assert_eq!(unsafe { dc_chromdata_info_get(h, &mut info) }, DC_OK);
        let ri = cd.info();
        assert_eq!(info.n_spots, ri.n_spots);
        assert_eq!(info.n_runs, ri.n_runs);
        assert_eq!(info.format_major, 2);
        assert_eq!(info.layout as u32, info.format_minor);
        assert_eq!(info.coord_bits, 64);
        assert_eq!((info.has_cell_id, info.has_coords), (1, 1));

        let t0 = CString::new("t0").unwrap();
        let sets: Vec<(Vec<&str>, Columns)> = vec![
            (vec![], Columns::All),
            (vec!["coords"], Columns::Coords),
            (
                vec!["probe", "spot_tracks/intensity", "fov"],
                Columns::Names(vec![
                    "probe".into(),
                    "spot_tracks/intensity".into(),
                    "fov".into(),
                ]),
            ),
        ];
        for (names, rc) in &sets {
            let (_o, p) = cols(names);
            let cp = if p.is_empty() {
                ptr::null()
            } else {
                p.as_ptr()
            };
            let mut s = FFI_ArrowArrayStream::empty();
            // SAFETY: valid arguments.
            let st = unsafe { dc_chromdata_get_trace(h, t0.as_ptr(), cp, p.len(), &mut s) };
            assert_eq!(st, DC_OK, "{}", last_error());
            let want = cd.get_trace(&CatValue::Str("t0".into()), rc).unwrap();
            assert_same(&read_stream(s), &want, "C get_trace");

            let chr = CString::new("chr 3/x").unwrap();
            let mut s = FFI_ArrowArrayStream::empty();
            // SAFETY: valid arguments.
            let st = unsafe { dc_chromdata_get_chrom(h, chr.as_ptr(), cp, p.len(), &mut s) };
            assert_eq!(st, DC_OK, "{}", last_error());
            assert_same(
                &read_stream(s),
                &cd.get_chrom("chr 3/x", rc).unwrap(),
                "C get_chrom",
            );

            let c1 = CString::new("cell1").unwrap();
            let mut s = FFI_ArrowArrayStream::empty();
            // SAFETY: valid arguments.
            let st = unsafe { dc_chromdata_get_cell(h, c1.as_ptr(), cp, p.len(), &mut s) };
            assert_eq!(st, DC_OK, "{}", last_error());
            let want = cd.get_cell(&CatValue::Str("cell1".into()), rc).unwrap();
            assert_same(&read_stream(s), &want, "C get_cell");

            let mut s = FFI_ArrowArrayStream::empty();
            // SAFETY: valid arguments.
            let st = unsafe { dc_chromdata_read_spots(h, 1, cp, p.len(), &mut s) };
            assert_eq!(st, DC_OK, "{}", last_error());
            assert_same(
                &read_stream(s),
                &cd.read_spots(true, rc).unwrap(),
                "C read_spots",
            );
        }

        // Small tables, keys, categories.
        for t in [
            "bins",
            "bin_tracks",
            "traces",
            "cells",
            "intervals/my tads",
            "points/fiducials",
        ] {
            let c = CString::new(t).unwrap();
            let mut s = FFI_ArrowArrayStream::empty();
            // SAFETY: valid arguments.
            assert_eq!(
                unsafe { dc_chromdata_table(h, c.as_ptr(), &mut s) },
                DC_OK,
                "{t}"
            );
            assert_same(&read_stream(s), &cd.table(t).unwrap(), t);
        }
        let k = CString::new("layers").unwrap();
        let mut s = FFI_ArrowArrayStream::empty();
        // SAFETY: valid arguments.
        assert_eq!(unsafe { dc_chromdata_keys(h, k.as_ptr(), &mut s) }, DC_OK);
        let keys = read_stream(s);
        assert_eq!(keys.schema().field(0).name(), "key");
        assert_eq!(keys.num_rows(), 2);
        let (tb, col) = (
            CString::new("spots").unwrap(),
            CString::new("trace_id").unwrap(),
        );
        let mut s = FFI_ArrowArrayStream::empty();
        // SAFETY: valid arguments.
        assert_eq!(
            unsafe { dc_chromdata_categories(h, tb.as_ptr(), col.as_ptr(), &mut s) },
            DC_OK
        );
        let cats = read_stream(s);
        assert_eq!(cats.schema().field(0).name(), "category");
        assert_eq!(cats.num_rows() as u64, info.n_traces);

        // Streams outlive the handle.
        let mut it = FFI_ArrowArrayStream::empty();
        // SAFETY: valid arguments.
        assert_eq!(
            unsafe { dc_chromdata_iter_traces(h, 2, ptr::null(), 0, &mut it) },
            DC_OK
        );
        let mut ic = FFI_ArrowArrayStream::empty();
        // SAFETY: valid arguments.
        assert_eq!(
            unsafe { dc_chromdata_iter_cells(h, 1, ptr::null(), 0, &mut ic) },
            DC_OK
        );
        // SAFETY: live handle, freed once.
        unsafe { dc_chromdata_free(h) };
        assert_eq!(read_stream(it).num_rows() as u64, info.n_spots);
        assert_eq!(read_stream(ic).num_rows() as u64, info.n_spots);
    }
}

#[test]
fn c_errors_and_argument_checks() {
    let Some(dir) = stores() else { return };
    let h = open(&dir.join("nocell_22.chromdata.zarr"));
    let mut s = FFI_ArrowArrayStream::empty();
    // Integer trace categories: the id text is the decimal value.
    let id = CString::new("100").unwrap();
    // SAFETY: valid arguments.
    assert_eq!(
        unsafe { dc_chromdata_get_trace(h, id.as_ptr(), ptr::null(), 0, &mut s) },
        DC_OK
    );
    assert!(read_stream(s).num_rows() > 0);
    let bad = CString::new("t0").unwrap();
    let mut s = FFI_ArrowArrayStream::empty();
    // SAFETY: valid arguments.
    let st = unsafe { dc_chromdata_get_trace(h, bad.as_ptr(), ptr::null(), 0, &mut s) };
    assert_eq!(st, DC_ERR_NOT_FOUND);
    assert!(last_error().contains("t0"), "{}", last_error());
    assert!(s.release().is_none(), "out written on error");
    // No cell_id.
    // SAFETY: valid arguments.
    let st = unsafe { dc_chromdata_get_cell(h, bad.as_ptr(), ptr::null(), 0, &mut s) };
    assert_eq!(st, DC_ERR_NOT_FOUND);
    // SAFETY: valid arguments.
    let st = unsafe { dc_chromdata_iter_cells(h, 1, ptr::null(), 0, &mut s) };
    assert_eq!(st, DC_ERR_NOT_FOUND);
    // Unknown column; NULL pointers; bad UTF-8; batch 0; bad kind.
    let (_o, p) = cols(&["nope"]);
    // SAFETY: valid arguments.
    let st = unsafe { dc_chromdata_get_trace(h, id.as_ptr(), p.as_ptr(), 1, &mut s) };
    assert_eq!(st, DC_ERR_NOT_FOUND);
    // SAFETY: NULL handle / NULL strings / NULL out are checked.
    unsafe {
        assert_eq!(
            dc_chromdata_get_trace(ptr::null_mut(), id.as_ptr(), ptr::null(), 0, &mut s),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_get_trace(h, ptr::null(), ptr::null(), 0, &mut s),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_get_trace(h, id.as_ptr(), ptr::null(), 0, ptr::null_mut()),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_get_trace(h, id.as_ptr(), ptr::null(), 2, &mut s),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_info_get(h, ptr::null_mut()),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_chromdata_iter_traces(h, 0, ptr::null(), 0, &mut s),
            DC_ERR_INVALID_ARGUMENT
        );
    }
    let invalid = [0xffu8, 0xfe, 0];
    // SAFETY: NUL-terminated bytes.
    let st = unsafe { dc_chromdata_get_chrom(h, invalid.as_ptr().cast(), ptr::null(), 0, &mut s) };
    assert_eq!(st, DC_ERR_INVALID_ARGUMENT);
    let kind = CString::new("genes").unwrap();
    // SAFETY: valid arguments.
    assert_eq!(
        unsafe { dc_chromdata_keys(h, kind.as_ptr(), &mut s) },
        DC_ERR_INVALID_ARGUMENT
    );
    assert!(s.release().is_none());
    // SAFETY: live handle; then NULL is a no-op.
    unsafe {
        dc_chromdata_free(h);
        dc_chromdata_free(ptr::null_mut());
    }
}

#[test]
fn c_open_reports_the_status_of_each_invalid_store() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    for c in m["invalid"].as_array().unwrap() {
        let p = CString::new(dir.join(c["path"].as_str().unwrap()).to_str().unwrap()).unwrap();
        let mut h: *mut dc_chromdata = ptr::null_mut();
        // SAFETY: valid arguments.
        let st = unsafe { dc_chromdata_open(p.as_ptr(), &mut h) };
        let want = match c["error"].as_str().unwrap() {
            "NotFound" => DC_ERR_NOT_FOUND,
            "Format" => DC_ERR_FORMAT,
            "Unsupported" => DC_ERR_UNSUPPORTED,
            k => panic!("{k}"),
        };
        assert_eq!(st, want, "{}: {}", c["name"], last_error());
        assert!(h.is_null(), "out written on error");
        assert!(!last_error().is_empty());
    }
    let missing = CString::new(dir.join("no_such.chromdata.zarr").to_str().unwrap()).unwrap();
    let mut h = ptr::null_mut();
    // SAFETY: valid arguments.
    assert_eq!(
        unsafe { dc_chromdata_open(missing.as_ptr(), &mut h) },
        DC_ERR_NOT_FOUND
    );
}

fn status_of_kind(s: &str) -> dc_status {
    match s {
        "NotFound" => DC_ERR_NOT_FOUND,
        "InvalidArgument" => DC_ERR_INVALID_ARGUMENT,
        "Format" => DC_ERR_FORMAT,
        other => panic!("unknown kind {other}"),
    }
}

/// §5.1 through the C functions: dc_chromdata_attrs (JSON bytes freed with dc_bytes_free),
/// dc_chromdata_array and dc_chromdata_result_table answer like the manifest says, with
/// the expected statuses for unknown kinds, keys and wrong types; argument checks.
#[test]
fn c_pass_through_content() {
    let Some(dir) = stores() else { return };
    let m = manifest(dir);
    let mut n = 0;
    for s in m["stores"].as_array().unwrap() {
        let name = s["path"].as_str().unwrap();
        if !name.starts_with("main_") && !name.starts_with("nocell_") {
            continue;
        }
        let h = open(&dir.join(name));
        let exp_dir = dir.join(s["expected_dir"].as_str().unwrap());
        for q in s["components"].as_array().unwrap() {
            let what = format!("{name} {q}");
            let path: Vec<&str> = q["path"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let (_owned, ptrs) = cols(&path);
            let pp = if ptrs.is_empty() {
                ptr::null()
            } else {
                ptrs.as_ptr()
            };
            let kind = CString::new(q["what"].as_str().unwrap_or("results")).unwrap();
            let mut out = FFI_ArrowArrayStream::empty();
            let mut json: *mut u8 = ptr::null_mut();
            let mut len = 0usize;
            // SAFETY: live handle, valid strings and out-parameters.
            let st = unsafe {
                match q["kind"].as_str().unwrap() {
                    "attrs" => {
                        dc_chromdata_attrs(h, kind.as_ptr(), pp, ptrs.len(), &mut json, &mut len)
                    }
                    "array" => dc_chromdata_array(h, kind.as_ptr(), pp, ptrs.len(), &mut out),
                    _ => dc_chromdata_result_table(h, pp, ptrs.len(), &mut out),
                }
            };
            if let Some(err) = q.get("error") {
                assert_eq!(st, status_of_kind(err.as_str().unwrap()), "{what}");
                assert!(json.is_null(), "{what}: out-parameter written on error");
                assert!(!last_error().is_empty());
                n += 1;
                continue;
            }
            assert_eq!(st, DC_OK, "{what}: {}", last_error());
            match q["kind"].as_str().unwrap() {
                "attrs" => {
                    // SAFETY: json/len returned by the library.
                    let bytes = unsafe { std::slice::from_raw_parts(json, len) }.to_vec();
                    // SAFETY: released once.
                    unsafe { dc_bytes_free(json, len) };
                    let got: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    assert_eq!(got, q["json"], "{what}");
                }
                "array" => {
                    let b = read_stream(out);
                    let f = b.schema().field(0).clone();
                    assert_eq!(
                        serde_json::from_str::<serde_json::Value>(&f.metadata()["shape"]).unwrap(),
                        q["shape"],
                        "{what}"
                    );
                    assert_eq!(b.num_rows() as u64, q["shape"][0].as_u64().unwrap());
                }
                _ => {
                    let got = read_stream(out);
                    let want = read_expected(&exp_dir.join(q["file"].as_str().unwrap()));
                    assert_same(&got, &want, &what);
                }
            }
            n += 1;
        }
        // Argument checks: NULL out-parameters, NULL path with n_path > 0, bad UTF-8.
        let kind = CString::new("uns").unwrap();
        let mut json: *mut u8 = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: deliberately bad arguments; the library checks them.
        unsafe {
            assert_eq!(
                dc_chromdata_attrs(h, kind.as_ptr(), ptr::null(), 0, ptr::null_mut(), &mut len),
                DC_ERR_INVALID_ARGUMENT
            );
            assert_eq!(
                dc_chromdata_attrs(h, kind.as_ptr(), ptr::null(), 1, &mut json, &mut len),
                DC_ERR_INVALID_ARGUMENT
            );
            assert_eq!(
                dc_chromdata_attrs(
                    ptr::null_mut(),
                    kind.as_ptr(),
                    ptr::null(),
                    0,
                    &mut json,
                    &mut len
                ),
                DC_ERR_INVALID_ARGUMENT
            );
            let bad = [0xffu8, 0];
            let mut out = FFI_ArrowArrayStream::empty();
            let p = [bad.as_ptr() as *const c_char];
            assert_eq!(
                dc_chromdata_array(h, c"cellm".as_ptr(), p.as_ptr(), 1, &mut out),
                DC_ERR_INVALID_ARGUMENT
            );
            assert_eq!(
                dc_chromdata_result_table(h, p.as_ptr(), 1, ptr::null_mut()),
                DC_ERR_INVALID_ARGUMENT
            );
            dc_chromdata_free(h);
        }
    }
    assert!(n > 150, "only {n} component calls checked");
}
