//! §6 of the C API: the streaming ChromData writer.

use std::ffi::c_char;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::RecordBatch;

use crate::chromdata::{ChromDataWriter, Layout, WriterOptions, WriterParam};
use crate::error::{Error, Result};
use crate::storage::Root;

use super::args::{nonempty_str_in, str_in, strs_in, Out};
use super::arrow::BatchIn;
use super::chromdata::{DC_LAYOUT_FLAT, DC_LAYOUT_PARTITIONED, DC_LAYOUT_PRIMARY_COORDS};
use super::error::*;
use super::handle::{castable, free_handle, new_handle, with_mut};

/// A ChromData store being written (opaque), from `dc_chromdata_writer_create`, released
/// with `dc_chromdata_writer_free`. Must not be used from several threads at once.
pub struct dc_chromdata_writer {
    _opaque: [u8; 0],
}
castable!(dc_chromdata_writer => ChromDataWriter);

/// A setting of a ChromData writer (`DC_CDW_*`), for `dc_chromdata_writer_set`.
pub type dc_chromdata_writer_param = i32;
/// Bytes of memory the writer may use in all (>= 1 MiB; 0 = default, half of the
/// available RAM): unsorted spots, sorting, the merge and the Parquet writers share it,
/// after the per-trace index (about 100 bytes per (cell, trace, chromosome) triple). A
/// smaller budget means more spilled runs, more merge passes and, below what one default
/// row group of the widest file needs, smaller row groups (recorded in the store); below
/// what the column writers' dictionaries need (~96 KiB each: ~16 MB for 60 tracks in
/// 2.2), no column is dictionary-encoded (larger files, the same contents). The caller's
/// own batches are not counted, and each appended batch is converted in one
/// piece: keep batches well below the budget. Before finish.
pub const DC_CDW_MEMORY_BUDGET: dc_chromdata_writer_param = 0;
/// 0 (default): float64 coordinates; 1: float32. Before finish.
pub const DC_CDW_COORD_FLOAT32: dc_chromdata_writer_param = 1;
/// A `dc_layout`; default `DC_LAYOUT_PRIMARY_COORDS` (2.2). Before finish.
pub const DC_CDW_LAYOUT: dc_chromdata_writer_param = 2;
/// 0 (default): `DC_ERR_EXISTS` if a store exists at the target; 1: replace it (only a
/// store: any other existing path is always refused). Before finish.
pub const DC_CDW_OVERWRITE: dc_chromdata_writer_param = 3;
/// Worker threads (>= 0; 0 = `DELTACELLS_NUM_THREADS`, else all cores). The output does
/// not depend on it. With more than one, finishing also runs up to three helper threads
/// for its duration (the merge's block encoder, the writer of the store's files, the
/// removal of spilled runs), which mostly wait on the workers; with one, all work runs on
/// the calling thread.
pub const DC_CDW_THREADS: dc_chromdata_writer_param = 4;

/// Takes `array` (so that it is released on every path), imports it with `schema` as a
/// record batch named `what` in messages, and hands it to `body` with the writer.
///
/// # Safety
/// `array` is NULL or a valid `struct ArrowArray`; `schema` NULL or a valid
/// `struct ArrowSchema` describing it; `w` NULL or a live handle.
unsafe fn with_cdw_batch(
    w: *mut dc_chromdata_writer,
    array: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
    what: &'static str,
    body: impl FnOnce(&mut ChromDataWriter, RecordBatch) -> Result<()>,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let batch = unsafe { BatchIn::take(array, schema, what) };
    with_mut(w, move |w| body(w, batch.import()?))
}

/// Starts writing a ChromData store at `path`: a `*.chromdata.zarr` directory, or a zip
/// when the path ends in `.cdz` (its parent must exist). Everything is built in a hidden
/// temporary sibling `.<name>.tmp-<pid>-<random>` and moved into place by
/// `dc_chromdata_writer_finish`; the target is checked there (`DC_ERR_EXISTS`). `path` may
/// also be an object-store URL (`s3://bucket/prefix/name.chromdata.zarr`, `…/name.cdz`,
/// `gs://…`, `az://…`; settings from the environment, see `dc_chromdata_writer_create_opts`).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, no final name, a malformed URL),
/// `DC_ERR_NOT_FOUND` (parent directory), `DC_ERR_UNSUPPORTED` (an http(s):// URL, which is
/// read only), `DC_ERR_IO`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_create(
    path: *const c_char,
    out: *mut *mut dc_chromdata_writer,
) -> dc_status {
    // SAFETY: forwarded caller guarantees; no options.
    unsafe { dc_chromdata_writer_create_opts(path, std::ptr::null(), 0, out) }
}

/// Like `dc_chromdata_writer_create` at `url` (a path or a URL), with `n_options` settings
/// `"key=value"` (as for `dc_dataset_open_opts`). To an object store, the store is built in a local spill
/// directory (`$DELTACELLS_SPILL_DIR`, else the system's temporary directory) and uploaded
/// by `dc_chromdata_writer_finish`: a `.cdz` as one multipart upload (complete or absent:
/// aborted on any failure), a directory store as every object first and its root
/// `zarr.json` last (a prefix without it does not open). With `DC_CDW_OVERWRITE`, an old
/// directory store's root `zarr.json` is deleted first, then its other objects. Objects
/// under a directory target without a store's root `zarr.json` (what a write that died
/// leaves) are refused (`DC_ERR_EXISTS`), never deleted. A write that dies leaves nothing
/// that opens; after the retries, a failed request is `DC_ERR_IO` naming the URL.
///
/// Errors: those of `dc_chromdata_writer_create`; `DC_ERR_INVALID_ARGUMENT` (an unknown
/// key, a bad value, `options` NULL with `n_options` > 0).
///
/// # Safety
/// `url` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
/// points to `n_options` NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_create_opts(
    url: *const c_char,
    options: *const *const c_char,
    n_options: usize,
    out: *mut *mut dc_chromdata_writer,
) -> dc_status {
    new_handle(out, || {
        // SAFETY: caller guarantees a NUL-terminated string (or NULL, rejected).
        let url = unsafe { str_in(url, "url")? };
        // SAFETY: caller guarantees n_options strings at options.
        let options = unsafe { strs_in(options, n_options, "options")? };
        let root = Root::parse(url, &options)?;
        ChromDataWriter::create_deferred_at(root, WriterOptions::default())
    })
}

/// Sets a parameter (`DC_CDW_*`). Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter,
/// value out of range), `DC_ERR_STATE` (after finish).
///
/// # Safety
/// `w` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set(
    w: *mut dc_chromdata_writer,
    p: dc_chromdata_writer_param,
    value: i64,
) -> dc_status {
    with_mut(w, |w| w.set_param(cdw_param(p)?, value))
}

// `DC_CDW_LAYOUT` takes a `dc_layout`, which is the format minor version the core expects.
const _: () =
    assert!(DC_LAYOUT_FLAT == 0 && DC_LAYOUT_PARTITIONED == 1 && DC_LAYOUT_PRIMARY_COORDS == 2);

/// The core's setting behind a `DC_CDW_*` constant.
fn cdw_param(p: dc_chromdata_writer_param) -> Result<WriterParam> {
    Ok(match p {
        DC_CDW_MEMORY_BUDGET => WriterParam::MemoryBudget,
        DC_CDW_COORD_FLOAT32 => WriterParam::CoordFloat32,
        DC_CDW_LAYOUT => WriterParam::Layout,
        DC_CDW_OVERWRITE => WriterParam::Overwrite,
        DC_CDW_THREADS => WriterParam::Threads,
        _ => {
            return Err(Error::invalid_argument(format!(
                "unknown dc_chromdata_writer_param {p}"
            )))
        }
    })
}

/// The range of values `dc_chromdata_writer_set` accepts for `p`: `*min ..= *max` (for
/// `DC_CDW_MEMORY_BUDGET` also: 0 or at least 1 MiB; for `DC_CDW_LAYOUT` the `dc_layout`
/// values). Needs no handle.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
///
/// # Safety
/// `min` and `max` are writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_param_bounds(
    p: dc_chromdata_writer_param,
    min: *mut i64,
    max: *mut i64,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let (min, max) = unsafe { (Out::new(min, "min")?, Out::new(max, "max")?) };
        let b = cdw_param(p)?.bounds();
        min.set(b.min);
        max.set(b.max);
        Ok(())
    })
}

/// Sets the bins table (chrom, start, end, ...), before the first append. `bins` (a struct
/// array) is moved into the library (released on every path); `schema` is borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad table), `DC_ERR_UNSUPPORTED` (column type),
/// `DC_ERR_STATE` (after an append or finish).
///
/// # Safety
/// `bins` is NULL or a valid `struct ArrowArray`; `schema` NULL or a valid
/// `struct ArrowSchema` describing it.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set_bins(
    w: *mut dc_chromdata_writer,
    bins: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller.
    unsafe { with_cdw_batch(w, bins, schema, "bins", |w, b| w.set_bins(b)) }
}

/// Appends spots in any order: chrom, start, end (or bin_id with bins set), trace_id,
/// [cell_id], [x, y, z], extra columns (`spot_tracks/<name>`, `layers/<key>/x|y|z` for
/// tracks and layers). `batch` is moved into the library; `schema` is borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, missing / inconsistent columns, types that
/// cannot be unified), `DC_ERR_UNSUPPORTED` (column type), `DC_ERR_IO` (spill),
/// `DC_ERR_STATE` (after finish).
///
/// # Safety
/// As `dc_chromdata_writer_set_bins`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_append(
    w: *mut dc_chromdata_writer,
    batch: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller.
    unsafe { with_cdw_batch(w, batch, schema, "batch", |w, b| w.append(b)) }
}

/// Sets the bin tracks (spec §5.2): one row per bin of the table given with
/// `dc_chromdata_writer_set_bins` (row i = bin i); columns bool, integers, floats or
/// strings. Any time before finish; a second call replaces the first. `table` (a struct
/// array) is moved into the library (released on every path); `schema` is borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, row count differs from the bins, no columns,
/// empty or repeated names), `DC_ERR_UNSUPPORTED` (column type), `DC_ERR_STATE` (no bins
/// table set, or after finish).
///
/// # Safety
/// As `dc_chromdata_writer_set_bins`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set_bin_tracks(
    w: *mut dc_chromdata_writer,
    table: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller.
    unsafe { with_cdw_batch(w, table, schema, "table", |w, b| w.set_bin_tracks(b)) }
}

/// Adds a pass-through table (spec §12), stored as given: `collection` is `"intervals"`
/// (then `kind` is `"domain"`, `"pair"`, `"peak"`, `"segment"` — their required columns are
/// checked — or any other non-empty kind) or `"points"` (then `kind` is NULL or `""`). `key` is
/// the table's name (unique per collection; any UTF-8, stored under a portable file
/// name). The table is written to the temporary directory at once. Any time before
/// finish. `table` is moved into the library; `schema` is borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL where a string is needed, unknown collection,
/// missing kind or required column, empty key), `DC_ERR_EXISTS` (key used already),
/// `DC_ERR_UNSUPPORTED` (a type Parquet cannot store), `DC_ERR_IO`, `DC_ERR_STATE`.
///
/// # Safety
/// `collection`, `key` are NUL-terminated strings, `kind` one or NULL; `table` and
/// `schema` as in `dc_chromdata_writer_set_bins`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_add_table(
    w: *mut dc_chromdata_writer,
    collection: *const c_char,
    key: *const c_char,
    kind: *const c_char,
    table: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    let body = move |w: &mut ChromDataWriter, b: RecordBatch| {
        // SAFETY: NUL-terminated strings per the caller (NULL is rejected or means none).
        let (collection, key) = unsafe { (str_in(collection, "collection")?, str_in(key, "key")?) };
        // SAFETY: as above.
        let kind = unsafe { nonempty_str_in(kind, "kind")? };
        w.add_table(collection, key, kind, b)
    };
    // SAFETY: per the caller.
    unsafe { with_cdw_batch(w, table, schema, "table", body) }
}

/// Merges the spilled runs, writes the layout, the index and the metadata, and moves the
/// store into place atomically. On error nothing is left at the target.
///
/// Errors: `DC_ERR_EXISTS`, `DC_ERR_IO`, `DC_ERR_STATE` (finished or failed before).
///
/// # Safety
/// `w` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_finish(w: *mut dc_chromdata_writer) -> dc_status {
    with_mut(w, |w| w.finish())
}

/// Releases the writer; without a successful finish the write is abandoned and its
/// temporary files removed. NULL is a no-op.
///
/// # Safety
/// `w` is NULL or a handle from `dc_chromdata_writer_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_free(w: *mut dc_chromdata_writer) {
    free_handle(w)
}

/// The one column of a category-list batch.
fn list_column(b: RecordBatch) -> Result<arrow_array::ArrayRef> {
    if b.num_columns() != 1 {
        return Err(Error::invalid_argument(format!(
            "a category list is a batch of one column, got {} columns",
            b.num_columns()
        )));
    }
    Ok(b.column(0).clone())
}

/// Fixes the category list of a coded column: "trace_id", "cell_id" or an extra
/// categorical spot column; before the first append. `values` is a batch of one column
/// (any name; strings or integers, distinct, no nulls), moved in; `schema` borrowed. The
/// list keeps its order and unused categories. Without this call, a dictionary-typed
/// column of the first appended batch fixes the list (its dictionary, in order); later
/// batches then carry the same dictionary. Plain values give sorted categories.
///
/// Errors: `DC_ERR_STATE` (after the first append, or finish), `DC_ERR_EXISTS` (the
/// column's list was given already), `DC_ERR_INVALID_ARGUMENT` (NULL, nulls, duplicates),
/// `DC_ERR_UNSUPPORTED` (a value type other than strings or integers). An appended value
/// outside the list is `DC_ERR_INVALID_ARGUMENT` naming it.
///
/// # Safety
/// `w` NULL or a live handle; `column` a NUL-terminated string; `values` NULL or a valid
/// `struct ArrowArray`; `schema` NULL or a valid `struct ArrowSchema` describing it.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set_categories(
    w: *mut dc_chromdata_writer,
    column: *const c_char,
    values: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    let body = move |w: &mut ChromDataWriter, b: RecordBatch| {
        // SAFETY: a NUL-terminated string per the caller.
        let column = unsafe { str_in(column, "column")? };
        w.set_categories(column, list_column(b)?)
    };
    // SAFETY: per the caller.
    unsafe { with_cdw_batch(w, values, schema, "values", body) }
}

/// Sets the "traces" or "cells" annotation table (chromdata-zarr.md §5.3): a first column
/// `trace_id` / `cell_id` holding each category once (any order; the writer orders rows
/// by category), then annotation columns (bool, integers, floats, strings; dictionary
/// columns are categorical and keep their dictionary). Moved in; any time before finish.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown name, first column, repeated ids, ids not
/// among given categories; ids missing from the table are reported by finish),
/// `DC_ERR_EXISTS` (set twice), `DC_ERR_UNSUPPORTED` (a column type), `DC_ERR_STATE`.
///
/// # Safety
/// As `dc_chromdata_writer_set_categories`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set_table(
    w: *mut dc_chromdata_writer,
    name: *const c_char,
    table: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let batch = unsafe { BatchIn::take(table, schema, "table") };
    with_mut(w, move |w| {
        // SAFETY: a NUL-terminated string per the caller.
        let name = unsafe { str_in(name, "name")? };
        if name != "traces" && name != "cells" {
            return Err(Error::invalid_argument(format!(
                "unknown table \"{name}\" (expected traces or cells)"
            )));
        }
        w.set_table(name, batch.import()?)
    })
}

/// Adds a "cellm" or "binm" array under `key`, encoded as `dc_chromdata_array` returns it:
/// a batch of one column, primitive (1-D) or nested FixedSizeLists, no nulls; the field
/// metadata "shape" (a JSON list), when present, must agree (it gives the inner
/// dimensions of an array without rows). First dimension n_cells / n_bins, checked now
/// when known, else by finish. Written to disk at the call (not held in memory).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown kind, empty key, nulls, wrong first
/// dimension), `DC_ERR_EXISTS` (key added already), `DC_ERR_UNSUPPORTED` (an element
/// type a Zarr array cannot hold: bool, integers, float32, float64 only).
///
/// # Safety
/// As `dc_chromdata_writer_set_categories`; `kind`, `key` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_add_array(
    w: *mut dc_chromdata_writer,
    kind: *const c_char,
    key: *const c_char,
    array: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let batch = unsafe { BatchIn::take(array, schema, "array") };
    with_mut(w, move |w| {
        // SAFETY: NUL-terminated strings per the caller.
        let (kind, key) = unsafe { (str_in(kind, "kind")?, str_in(key, "key")?) };
        if kind != "cellm" && kind != "binm" {
            return Err(Error::invalid_argument(format!(
                "unknown array kind \"{kind}\" (expected cellm or binm)"
            )));
        }
        w.add_array(kind, key, batch.import()?)
    })
}

/// Adds a results entry at `path` (its key, then member keys inside mappings; n_path =
/// depth). `attrs_json` is what `dc_chromdata_attrs` returns for results: `"type"`
/// required (table, array, json or mapping), `"value"` for json entries, provenance
/// (kind, function, params, inputs, uchrom_version, created_utc) optional, `"keys"`
/// ignored. `data`: the table ("table") or the one-column array batch ("array"), moved
/// in; NULL (and `schema` NULL) for json and mapping. A mapping's members come after it.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (bad JSON, unknown type, data not matching the type,
/// a member of an entry that is not a mapping), `DC_ERR_NOT_FOUND` (a member before its
/// mapping), `DC_ERR_EXISTS` (key added already), `DC_ERR_UNSUPPORTED` (a type Parquet
/// or Zarr cannot store).
///
/// # Safety
/// `w` NULL or a live handle; `path` NULL (n_path 0) or `n_path` strings; `attrs_json` a
/// NUL-terminated string; `data` NULL or a valid `struct ArrowArray` and `schema` a valid
/// `struct ArrowSchema` describing it.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_add_result(
    w: *mut dc_chromdata_writer,
    path: *const *const c_char,
    n_path: usize,
    attrs_json: *const c_char,
    data: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let batch = (!data.is_null()).then(|| unsafe { BatchIn::take(data, schema, "data") });
    with_mut(w, move |w| {
        // SAFETY: forwarded caller guarantees.
        let (path, attrs) = unsafe {
            (
                strs_in(path, n_path, "path")?,
                str_in(attrs_json, "attrs_json")?,
            )
        };
        let attrs: serde_json::Value = serde_json::from_str(attrs).map_err(|e| {
            Error::invalid_argument(format!("results {path:?}: attrs_json does not parse: {e}"))
        })?;
        let data = match batch {
            Some(b) => Some(b.import()?),
            None => None,
        };
        w.add_result(&path, &attrs, data)
    })
}

/// JSON parts (chromdata-zarr.md §12): ("uns", NULL, a tagged-JSON dict; inline ndarray
/// tags of any size, the writer applies the 64-element rule), ("contacts", NULL, an array
/// of records with "key" and "path"), ("links", NULL, the same) — the writer adds
/// "relative_path" where §12 asks — and ("intervals", key, `{"source_result": ...}`) for
/// a table added with `dc_chromdata_writer_add_table`.
///
/// An empty `key` is the same as NULL.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown kind, bad JSON, a key for another kind),
/// `DC_ERR_NOT_FOUND` (unknown intervals key), `DC_ERR_EXISTS` (set twice, record keys
/// repeated), `DC_ERR_UNSUPPORTED` (an ndarray dtype Zarr cannot store).
///
/// # Safety
/// `w` NULL or a live handle; `kind`, `json` NUL-terminated strings; `key` NULL or one.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_writer_set_json(
    w: *mut dc_chromdata_writer,
    kind: *const c_char,
    key: *const c_char,
    json: *const c_char,
) -> dc_status {
    with_mut(w, |w| {
        // SAFETY: NUL-terminated strings (key may be NULL) per the caller.
        let (kind, key, json) = unsafe {
            (
                str_in(kind, "kind")?,
                nonempty_str_in(key, "key")?,
                str_in(json, "json")?,
            )
        };
        w.set_json(kind, key, json)
    })
}

/// Rewrites a store (any version, layout, directory or .cdz) into another layout and
/// place with everything it holds, keeping the original row order recoverable
/// (source_row); e.g. a 2.0 / 2.1 store into 2.2. Streaming, under the writer's default
/// memory budget; `dst` ending in `.cdz` writes a zip. `overwrite` non-zero replaces a
/// store at `dst`.
///
/// Errors: those of `dc_chromdata_open` for `src`; `DC_ERR_EXISTS` (a store at `dst` and
/// `overwrite` 0, or something else there); `DC_ERR_INVALID_ARGUMENT` (NULL, a bad
/// layout, `dst` is `src`); `DC_ERR_IO`.
///
/// # Safety
/// `src`, `dst` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_rewrite(
    src: *const c_char,
    dst: *const c_char,
    layout: super::chromdata::dc_layout,
    overwrite: std::ffi::c_int,
) -> dc_status {
    guard(|| {
        // SAFETY: NUL-terminated strings per the caller.
        let (src, dst) = unsafe { (str_in(src, "src")?, str_in(dst, "dst")?) };
        let layout = match layout {
            DC_LAYOUT_FLAT => Layout::Flat,
            DC_LAYOUT_PARTITIONED => Layout::Partitioned,
            DC_LAYOUT_PRIMARY_COORDS => Layout::PrimaryCoords,
            l => {
                return Err(Error::invalid_argument(format!(
                    "layout {l} is not a dc_layout (0, 1 or 2)"
                )))
            }
        };
        let opts = crate::chromdata::RewriteOptions {
            layout,
            overwrite: overwrite != 0,
            ..Default::default()
        };
        crate::chromdata::rewrite(
            std::path::Path::new(src),
            std::path::Path::new(dst),
            &opts,
            &crate::progress::Silent,
        )
    })
}
