//! The dataset C ABI (§3, §4), called as a C program would: write with dc_writer_*, read
//! with dc_dataset_*, check statuses, messages and out-parameter rules.

mod dataset_support;

use std::ffi::{c_void, CStr, CString};
use std::ptr;

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

/// Writes `input` through the C ABI with the given order and names.
unsafe fn c_write(
    path: &std::path::Path,
    input: &Csr,
    order: &[i32],
    names: &[CString],
    tile: i64,
) {
    let mut w: *mut dc_writer = ptr::null_mut();
    assert_eq!(
        dc_writer_create(cstr(path).as_ptr(), input.n_genes, &mut w),
        DC_OK
    );
    assert_eq!(dc_writer_set(w, DC_WRITER_TILE_SIZE, tile), DC_OK);
    assert_eq!(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 1), DC_OK);
    assert_eq!(dc_writer_set(w, DC_WRITER_N_CHUNKS, 2), DC_OK);
    assert_eq!(dc_writer_set(w, DC_WRITER_THREADS, 2), DC_OK);
    assert_eq!(
        dc_writer_set_gene_order(w, order.as_ptr(), order.len()),
        DC_OK
    );
    let ptrs: Vec<*const std::ffi::c_char> = names.iter().map(|s| s.as_ptr()).collect();
    assert_eq!(dc_writer_set_var_names(w, ptrs.as_ptr(), ptrs.len()), DC_OK);
    // Blocks of 7 rows, passed with pointers to their first entry (indptr not rebased).
    let n = input.n_rows();
    let mut r = 0;
    while r < n {
        let k = 7.min(n - r);
        let a = input.indptr[r] as usize;
        let st = dc_writer_append_csr(
            w,
            k as u64,
            input.indptr[r..].as_ptr(),
            input.indices[a..].as_ptr(),
            input.values[a..].as_ptr(),
        );
        assert_eq!(st, DC_OK, "{}", last_error());
        r += k;
    }
    assert_eq!(dc_writer_set(w, DC_WRITER_TILE_SIZE, 5), DC_ERR_STATE);
    assert_eq!(dc_writer_finish(w), DC_OK, "{}", last_error());
    assert_eq!(
        dc_writer_append_csr(w, 0, [0i64].as_ptr(), ptr::null(), ptr::null()),
        DC_ERR_STATE
    );
    assert!(last_error().contains("finished"), "{}", last_error());
    dc_writer_free(w);
}

#[test]
fn write_and_read_through_the_c_abi() {
    let mut rng = Rng::new(42);
    let input = random_csr(&mut rng, 95, 33, 0.15, true);
    let order = rng.permutation(33);
    let names: Vec<CString> = (0..33)
        .map(|i| CString::new(format!("gene_{i}")).unwrap())
        .collect();
    let dir = TempDir::new("ffi");
    let path = dir.join("ds");
    unsafe {
        c_write(&path, &input, &order, &names, 20);

        let mut ds: *mut dc_dataset = ptr::null_mut();
        assert_eq!(dc_dataset_open(cstr(&path).as_ptr(), &mut ds), DC_OK);
        let mut info = dc_dataset_info::default();
        assert_eq!(dc_dataset_info_get(ds, &mut info), DC_OK);
        assert_eq!(
            (
                info.n_cells,
                info.n_genes,
                info.version,
                info.n_tiles,
                info.tile_size
            ),
            (95, 33, 2, 5, 20)
        );
        assert_eq!(
            (
                info.has_gene_order,
                info.has_var_names,
                info.has_var_table,
                info.has_obs
            ),
            (1, 1, 0, 0)
        );

        let (mut first, mut cells, mut nnz) = (0u64, 0u64, 0u64);
        assert_eq!(
            dc_dataset_tile_bounds(ds, 4, &mut first, &mut cells, &mut nnz),
            DC_OK
        );
        assert_eq!((first, cells), (80, 15));
        assert_eq!(
            dc_dataset_tile_bounds(ds, 4, ptr::null_mut(), ptr::null_mut(), ptr::null_mut()),
            DC_OK
        );
        first = 777;
        assert_eq!(
            dc_dataset_tile_bounds(ds, 5, &mut first, &mut cells, &mut nnz),
            DC_ERR_OUT_OF_RANGE
        );
        assert_eq!(first, 777, "out-parameters untouched on error");

        for threads in [1i64, 2] {
            assert_eq!(dc_dataset_set(ds, DC_DATASET_THREADS, threads), DC_OK);
            let want: Vec<u64> = (0..200).map(|_| rng.below(95)).collect();
            // Size query with NULL buffers.
            let mut need = 0u64;
            assert_eq!(
                dc_dataset_batch_nnz(ds, want.as_ptr(), want.len(), &mut need),
                DC_OK
            );
            let mut reported = 0u64;
            let st = dc_dataset_gather(
                ds,
                want.as_ptr(),
                want.len(),
                DC_INT32,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0,
                &mut reported,
            );
            assert_eq!(st, DC_ERR_BUFFER_TOO_SMALL);
            assert_eq!(reported, need);
            let mut indptr = vec![0i64; want.len() + 1];
            let mut indices = vec![0i32; need as usize];
            let mut values = vec![0f32; need as usize];
            let mut got = 0u64;
            let st = dc_dataset_gather(
                ds,
                want.as_ptr(),
                want.len(),
                DC_FLOAT32,
                indptr.as_mut_ptr(),
                indices.as_mut_ptr(),
                values.as_mut_ptr() as *mut c_void,
                need,
                &mut got,
            );
            assert_eq!(st, DC_OK, "{}", last_error());
            assert_eq!(got, need);
            let as_i32: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            for (i, &c) in want.iter().enumerate() {
                let expect: Vec<i32> = expected_row(&input, Some(&order), c as usize)
                    .iter()
                    .map(|&v| v as f32 as i32)
                    .collect();
                assert_eq!(dense_of(33, &indptr, &indices, &as_i32, i), expect);
            }
        }

        // read_tile: size query, then the tile.
        let mut tile_nnz = 0u64;
        assert_eq!(
            dc_dataset_tile_bounds(ds, 2, ptr::null_mut(), ptr::null_mut(), &mut tile_nnz),
            DC_OK
        );
        let mut reported = 0;
        assert_eq!(
            dc_dataset_read_tile(
                ds,
                2,
                DC_INT32,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0,
                &mut reported
            ),
            if tile_nnz > 0 {
                DC_ERR_BUFFER_TOO_SMALL
            } else {
                DC_ERR_INVALID_ARGUMENT
            }
        );
        if tile_nnz > 0 {
            assert_eq!(reported, tile_nnz);
        }
        let mut indptr = vec![0i64; 21];
        let mut indices = vec![0i32; tile_nnz as usize + 5];
        let mut values = vec![0i32; tile_nnz as usize + 5];
        let mut got = 0;
        assert_eq!(
            dc_dataset_read_tile(
                ds,
                2,
                DC_INT32,
                indptr.as_mut_ptr(),
                indices.as_mut_ptr(),
                values.as_mut_ptr() as *mut c_void,
                tile_nnz + 5,
                &mut got
            ),
            DC_OK
        );
        assert_eq!(got, tile_nnz);
        for r in 0..20 {
            assert_eq!(
                dense_of(33, &indptr, &indices, &values, r),
                expected_row(&input, Some(&order), 40 + r)
            );
        }
        assert_eq!(
            dc_dataset_read_tile(
                ds,
                2,
                7,
                indptr.as_mut_ptr(),
                indices.as_mut_ptr(),
                values.as_mut_ptr() as *mut c_void,
                tile_nnz,
                &mut got
            ),
            DC_ERR_INVALID_ARGUMENT
        );

        // Optional parts.
        let mut got_order = vec![0i32; 33];
        assert_eq!(
            dc_dataset_gene_order(ds, got_order.as_mut_ptr(), 32),
            DC_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!(dc_dataset_gene_order(ds, got_order.as_mut_ptr(), 33), DC_OK);
        assert_eq!(got_order, order);
        let mut name: *const std::ffi::c_char = ptr::null();
        assert_eq!(dc_dataset_var_name(ds, 0, &mut name), DC_OK);
        assert_eq!(
            CStr::from_ptr(name).to_str().unwrap(),
            format!("gene_{}", order[0])
        );
        let first_name = name;
        assert_eq!(dc_dataset_var_name(ds, 0, &mut name), DC_OK);
        assert_eq!(name, first_name, "strings are owned by the handle");
        assert_eq!(dc_dataset_var_name(ds, 33, &mut name), DC_ERR_OUT_OF_RANGE);
        let mut stream = arrow_array::ffi_stream::FFI_ArrowArrayStream::empty();
        assert_eq!(dc_dataset_var_table(ds, &mut stream), DC_ERR_NOT_FOUND);
        assert_eq!(
            dc_dataset_obs(ds, ptr::null(), 0, &mut stream),
            DC_ERR_NOT_FOUND
        );

        // Errors and parameters.
        let bad = [95u64];
        let mut n = 0u64;
        assert_eq!(
            dc_dataset_batch_nnz(ds, bad.as_ptr(), 1, &mut n),
            DC_ERR_OUT_OF_RANGE
        );
        assert!(last_error().contains("95"), "{}", last_error());
        assert_eq!(dc_dataset_set(ds, 99, 0), DC_ERR_INVALID_ARGUMENT);
        assert_eq!(
            dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 2),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_dataset_set(ds, DC_DATASET_TILE_CACHE, -1),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 0), DC_OK);
        assert_eq!(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 0), DC_OK);
        assert_eq!(
            dc_dataset_info_get(ptr::null(), &mut info),
            DC_ERR_INVALID_ARGUMENT
        );
        dc_dataset_free(ds);
        dc_dataset_free(ptr::null_mut());
    }
}

#[test]
fn open_errors() {
    let dir = TempDir::new("ffi-open");
    std::fs::create_dir(dir.join("incomplete")).unwrap();
    let mut ds: *mut dc_dataset = ptr::null_mut();
    unsafe {
        assert_eq!(
            dc_dataset_open(cstr(&dir.join("incomplete")).as_ptr(), &mut ds),
            DC_ERR_NOT_FOUND
        );
        assert!(
            last_error().contains("no manifest.json"),
            "{}",
            last_error()
        );
        assert!(ds.is_null());
        assert_eq!(
            dc_dataset_open(ptr::null(), &mut ds),
            DC_ERR_INVALID_ARGUMENT
        );
        let bad_utf8 = CString::new(vec![0xffu8, 0xfe]).unwrap();
        assert_eq!(
            dc_dataset_open(bad_utf8.as_ptr(), &mut ds),
            DC_ERR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn writer_exists_and_overwrite() {
    let dir = TempDir::new("ffi-exists");
    let path = dir.join("ds");
    std::fs::create_dir(&path).unwrap();
    unsafe {
        let mut w: *mut dc_writer = ptr::null_mut();
        assert_eq!(dc_writer_create(cstr(&path).as_ptr(), 4, &mut w), DC_OK);
        let st = dc_writer_append_csr(w, 1, [0i64, 1].as_ptr(), [2].as_ptr(), [3].as_ptr());
        assert_eq!(st, DC_ERR_EXISTS);
        assert_eq!(
            dc_writer_set(w, DC_WRITER_OVERWRITE, 2),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_writer_set(w, DC_WRITER_OVERWRITE, 1), DC_OK);
        let st = dc_writer_append_csr(w, 1, [0i64, 1].as_ptr(), [2].as_ptr(), [3].as_ptr());
        assert_eq!(st, DC_OK, "{}", last_error());
        // Bad input through the ABI.
        assert_eq!(
            dc_writer_append_csr(w, 1, [0i64, 1].as_ptr(), [4].as_ptr(), [3].as_ptr()),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_writer_append_csr(w, 1, ptr::null(), ptr::null(), ptr::null()),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            dc_writer_set_gene_order(w, [0, 1, 2, 3].as_ptr(), 4),
            DC_ERR_STATE
        );
        let names = [c"a".as_ptr(), ptr::null()];
        assert_eq!(
            dc_writer_set_var_names(w, names.as_ptr(), 2),
            DC_ERR_INVALID_ARGUMENT
        );
        assert_eq!(dc_writer_finish(w), DC_OK, "{}", last_error());
        dc_writer_free(w);
        dc_writer_free(ptr::null_mut());
        let mut ds: *mut dc_dataset = ptr::null_mut();
        assert_eq!(dc_dataset_open(cstr(&path).as_ptr(), &mut ds), DC_OK);
        let mut info = dc_dataset_info::default();
        assert_eq!(dc_dataset_info_get(ds, &mut info), DC_OK);
        assert_eq!((info.n_cells, info.nnz), (1, 1));
        dc_dataset_free(ds);
    }
}

#[test]
fn freed_writer_abandons_the_write() {
    let dir = TempDir::new("ffi-free");
    unsafe {
        let mut w: *mut dc_writer = ptr::null_mut();
        assert_eq!(
            dc_writer_create(cstr(&dir.join("ds")).as_ptr(), 4, &mut w),
            DC_OK
        );
        assert_eq!(
            dc_writer_append_csr(w, 1, [0i64, 1].as_ptr(), [2].as_ptr(), [3].as_ptr()),
            DC_OK
        );
        dc_writer_free(w);
    }
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
}

#[test]
fn append_obs_takes_ownership_of_the_batch_even_when_rejecting_it() {
    use arrow_array::{Array, Int32Array};
    let dir = TempDir::new("ffi-obs");
    let array = Int32Array::from(vec![1, 2, 3]);
    let (mut ffi_array, mut ffi_schema) = arrow_array::ffi::to_ffi(&array.to_data()).unwrap();
    unsafe {
        let mut w: *mut dc_writer = ptr::null_mut();
        assert_eq!(
            dc_writer_create(cstr(&dir.join("ds")).as_ptr(), 4, &mut w),
            DC_OK
        );
        assert_eq!(
            dc_writer_append_obs(w, &mut ffi_array, &mut ffi_schema),
            DC_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("struct array"), "{}", last_error());
        assert!(
            ffi_array.is_released(),
            "the input array is moved into the library"
        );
        // Moved even when the writer is NULL.
        let (mut a2, mut s2) = arrow_array::ffi::to_ffi(&array.to_data()).unwrap();
        assert_eq!(
            dc_writer_append_obs(ptr::null_mut(), &mut a2, &mut s2),
            DC_ERR_INVALID_ARGUMENT
        );
        assert!(a2.is_released());
        dc_writer_free(w);
    }
}
