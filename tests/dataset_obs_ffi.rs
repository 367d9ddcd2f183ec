//! Obs and var tables through the C ABI, with Arrow's C data / stream structs, as a C
//! program would use them.

mod dataset_support;

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Schema};
use dataset_support::*;
use deltacells::ffi::*;

fn last_error() -> String {
    // SAFETY: dc_last_error never returns NULL.
    unsafe { CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn cstr(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// A record batch as the C data interface's (array, schema) pair.
fn export(batch: &RecordBatch) -> (FFI_ArrowArray, FFI_ArrowSchema) {
    let st = StructArray::from(batch.clone());
    let (a, _) = to_ffi(&st.to_data()).unwrap();
    // The schema with its metadata (to_ffi of the data type alone would drop it).
    let s = FFI_ArrowSchema::try_from(batch.schema().as_ref()).unwrap();
    (a, s)
}

fn obs_rows(a: usize, b: usize) -> RecordBatch {
    let labels = ["x", "y", "z"];
    RecordBatch::try_from_iter([
        (
            "label",
            // A categorical column (pandas `category`), as a dictionary array.
            Arc::new(
                (a..b)
                    .map(|i| (i % 4 != 0).then(|| labels[i % 3]))
                    .collect::<DictionaryArray<Int32Type>>(),
            ) as ArrayRef,
        ),
        (
            "n",
            Arc::new(Int64Array::from(
                (a..b).map(|i| i as i64).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ])
    .unwrap()
}

/// Reads a stream to the end (the stream is consumed).
fn drain(stream: &mut FFI_ArrowArrayStream) -> Vec<RecordBatch> {
    // SAFETY: a valid stream produced by the library; ownership moves to the reader.
    let reader = unsafe { RecordBatchStreamReader::from_raw(stream) }.unwrap();
    reader.collect::<Result<Vec<_>, _>>().unwrap()
}

#[test]
fn obs_and_var_through_the_c_abi() {
    let dir = TempDir::new("obs-ffi");
    let path = dir.join("ds");
    let n_genes = 4u32;
    unsafe {
        let mut w: *mut dc_writer = ptr::null_mut();
        assert_eq!(
            dc_writer_create(cstr(&path).as_ptr(), n_genes, &mut w),
            DC_OK
        );
        assert_eq!(dc_writer_set(w, DC_WRITER_TILE_SIZE, 3), DC_OK);
        assert_eq!(dc_writer_set(w, DC_WRITER_OBS_TILES_PER_FILE, 2), DC_OK);
        assert_eq!(
            dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, -1),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, 100), DC_OK);
        let order = [2i32, 0, 3, 1];
        assert_eq!(dc_writer_set_gene_order(w, order.as_ptr(), 4), DC_OK);
        // 8 cells, one nonzero each.
        let indptr: Vec<i64> = (0..=8).collect();
        let indices: Vec<i32> = (0..8).map(|i| i % 4).collect();
        let values: Vec<i32> = (1..=8).collect();
        assert_eq!(
            dc_writer_append_csr(w, 8, indptr.as_ptr(), indices.as_ptr(), values.as_ptr()),
            DC_OK
        );
        for (a, b) in [(0, 5), (5, 8)] {
            let (mut arr, mut sch) = export(&obs_rows(a, b));
            let st = dc_writer_append_obs(w, &mut arr, &mut sch);
            assert_eq!(st, DC_OK, "{}", last_error());
            assert!(arr.is_released(), "moved into the library");
            // The schema is only borrowed: still usable by the caller.
            assert!(DataType::try_from(&sch).is_ok());
        }
        assert_eq!(
            dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, 5),
            DC_ERR_STATE
        );
        // The gene table in input order, with pandas metadata.
        let var = RecordBatch::try_new(
            Arc::new(
                Schema::new(vec![Field::new("gene", DataType::Utf8, true)]).with_metadata(
                    [(
                        "pandas".to_string(),
                        "{\"index_columns\":[\"gene\"]}".to_string(),
                    )]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
                ),
            ),
            vec![Arc::new(StringArray::from(vec!["g0", "g1", "g2", "g3"]))],
        )
        .unwrap();
        let (mut arr, mut sch) = export(&var);
        assert_eq!(
            dc_writer_set_var_table(w, &mut arr, &mut sch),
            DC_OK,
            "{}",
            last_error()
        );
        assert!(arr.is_released());
        assert_eq!(dc_writer_finish(w), DC_OK, "{}", last_error());
        dc_writer_free(w);

        let mut ds: *mut dc_dataset = ptr::null_mut();
        assert_eq!(dc_dataset_open(cstr(&path).as_ptr(), &mut ds), DC_OK);
        let mut info = dc_dataset_info::default();
        assert_eq!(dc_dataset_info_get(ds, &mut info), DC_OK);
        assert_eq!((info.has_obs, info.has_var_table), (1, 1));
        let cache = cstr(&dir.join("cache"));
        assert_eq!(dc_dataset_set_cache_dir(ds, cache.as_ptr()), DC_OK);

        // All columns; the streams outlive the handle.
        let mut all = FFI_ArrowArrayStream::empty();
        assert_eq!(
            dc_dataset_obs(ds, ptr::null(), 0, &mut all),
            DC_OK,
            "{}",
            last_error()
        );
        let names = [CString::new("n").unwrap()];
        let ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
        let mut sub = FFI_ArrowArrayStream::empty();
        assert_eq!(dc_dataset_obs(ds, ptrs.as_ptr(), 1, &mut sub), DC_OK);
        let mut var_stream = FFI_ArrowArrayStream::empty();
        assert_eq!(
            dc_dataset_var_table(ds, &mut var_stream),
            DC_OK,
            "{}",
            last_error()
        );
        // Errors.
        let bad = [CString::new("nope").unwrap()];
        let bad_ptrs: Vec<*const c_char> = bad.iter().map(|s| s.as_ptr()).collect();
        let mut unused = FFI_ArrowArrayStream::empty();
        assert_eq!(
            dc_dataset_obs(ds, bad_ptrs.as_ptr(), 1, &mut unused),
            DC_ERR_NOT_FOUND
        );
        assert!(last_error().contains("nope"), "{}", last_error());
        assert!(unused.release().is_none(), "not written on error");
        let nulls: [*const c_char; 1] = [ptr::null()];
        assert_eq!(
            dc_dataset_obs(ds, nulls.as_ptr(), 1, &mut unused),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_dataset_obs(ds, ptr::null(), 0, ptr::null_mut()),
            DC_ERR_INVALID_ARGUMENT
        );
        dc_dataset_free(ds);

        let batches = drain(&mut all);
        assert_eq!(
            batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            [3, 3, 2]
        );
        let label = batches[0].column(0);
        assert_eq!(
            label.data_type(),
            &DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8))
        );
        let mut got: Vec<Option<String>> = Vec::new();
        for b in &batches {
            let d = b.column(0).as_any_dictionary();
            let values = d.values().as_string::<i32>();
            let keys = d.normalized_keys();
            for (i, &k) in keys.iter().enumerate() {
                got.push(b.column(0).is_valid(i).then(|| values.value(k).to_string()));
            }
        }
        let labels = ["x", "y", "z"];
        let want: Vec<Option<String>> = (0..8)
            .map(|i| (i % 4 != 0).then(|| labels[i % 3].to_string()))
            .collect();
        assert_eq!(got, want);
        let sub = drain(&mut sub);
        assert_eq!(sub[0].num_columns(), 1);
        let n: Vec<i64> = sub
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(n, (0..8).collect::<Vec<i64>>());
        // SAFETY: a valid stream from the library.
        let var_reader = RecordBatchStreamReader::from_raw(&mut var_stream).unwrap();
        // arrow-rs rebuilds each imported batch's schema without metadata; the stream's
        // schema carries it.
        use arrow_array::RecordBatchReader;
        assert!(var_reader.schema().metadata().contains_key("pandas"));
        let var: Vec<RecordBatch> = var_reader.map(Result::unwrap).collect();
        let genes: Vec<&str> = var[0]
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(genes, ["g2", "g0", "g3", "g1"], "output order");
    }
}
