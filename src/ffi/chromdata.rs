//! §5 of the C API: ChromData stores, read backed.

use std::ffi::{c_char, c_int};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;

use crate::chromdata::{ChromData, Columns, Layout};
use crate::error::{Error, ErrorKind, Result};

use super::args::{slice_in, str_in, strs_in, Out};
use super::arrow::{export_stream, one_batch, one_column, string_column};
use super::error::*;
use super::handle::{castable, free_handle, new_handle, with_ref};

/// Spot-table layout of a store (`DC_LAYOUT_*`).
pub type dc_layout = i32;
/// Format 2.0: one flat spot table.
pub const DC_LAYOUT_FLAT: dc_layout = 0;
/// Format 2.1: spot tables partitioned by chromosome.
pub const DC_LAYOUT_PARTITIONED: dc_layout = 1;
/// Format 2.2: primary tables + coordinate partitions.
pub const DC_LAYOUT_PRIMARY_COORDS: dc_layout = 2;

/// An open ChromData store (opaque). May be used from several threads at once.
pub struct dc_chromdata {
    _opaque: [u8; 0],
}
castable!(dc_chromdata => ChromData);

/// Version, layout and counts of a store, filled by `dc_chromdata_info_get`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dc_chromdata_info {
    pub format_major: u32,
    pub format_minor: u32,
    pub layout: dc_layout,
    pub n_spots: u64,
    pub n_bins: u64,
    pub n_traces: u64,
    pub n_cells: u64,
    pub n_chroms: u64,
    pub has_coords: i32,
    pub has_cell_id: i32,
    pub n_runs: u64,
    pub n_row_groups: u64,
    pub has_source_row: i32,
    /// 32 or 64; 0 without coordinates.
    pub coord_bits: i32,
}

/// The column selection (`Columns::from_selectors`): NULL / 0 = all; `{"coords"}` = keys
/// + x, y, z; else names.
///
/// # Safety
/// `columns` is NULL (then `n` is ignored... only if 0) or points to `n` strings.
unsafe fn columns_in(columns: *const *const c_char, n: usize) -> Result<Columns> {
    if n == 0 {
        return Ok(Columns::All);
    }
    // SAFETY: caller guarantees `n` readable pointers at `columns` (NULL rejected inside).
    let ptrs = unsafe { slice_in(columns, n as u64, "columns")? };
    let mut names = Vec::with_capacity(n);
    for (i, &p) in ptrs.iter().enumerate() {
        // SAFETY: each element is a NUL-terminated string per the caller.
        names.push(unsafe { str_in(p, &format!("columns[{i}]"))? }.to_string());
    }
    Ok(Columns::from_selectors(&names))
}

/// Opens a store — a `*.chromdata.zarr` directory or a `.cdz` file, a `file://` URL, or an
/// object-store URL (`s3://bucket/prefix/x.chromdata.zarr`, `gs://…`, `az://…`,
/// `http(s)://…/x.cdz`; settings from the environment, see `dc_chromdata_open_opts`). Reads
/// the metadata, the index arrays, the small tables and the Parquet footers, and validates
/// them (spec §14).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a malformed URL), `DC_ERR_NOT_FOUND`
/// (path, prefix or a referenced part missing), `DC_ERR_FORMAT` (malformed or
/// inconsistent), `DC_ERR_UNSUPPORTED` (version, layout; a URL in a build without remote
/// storage), `DC_ERR_IO`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_open(
    path: *const c_char,
    out: *mut *mut dc_chromdata,
) -> dc_status {
    // SAFETY: forwarded caller guarantees; no options.
    unsafe { dc_chromdata_open_opts(path, std::ptr::null(), 0, out) }
}

/// Like `dc_chromdata_open`, with `n_options` settings `"key=value"` (C API §7):
/// object-store settings under the `object_store` crate's names (`aws_endpoint`,
/// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `allow_http`, …) and the
/// library's `max_concurrency` (requests in flight per handle, 1..1024, default 16),
/// `timeout_ms` (per request, default 30000) and `retries` (default 5, exponential
/// backoff); what is not given comes from the standard environment variables. A URL whose
/// last component ends in `.cdz` is one `.cdz` object (its central directory and members
/// read by byte ranges), any other a directory store under that prefix. Remote reads: the
/// metadata and Zarr chunks one GET each, Parquet by byte ranges (footers once per handle,
/// the needed column chunks of the needed row groups, adjacent chunks in one request).
/// After the retries a failure is `DC_ERR_IO` naming the URL, the operation and the HTTP
/// status or transport error; no call waits past its timeouts; credentials never appear in
/// messages.
///
/// Errors: those of `dc_chromdata_open`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
/// value, `options` NULL with `n_options` > 0).
///
/// # Safety
/// `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
/// points to `n_options` NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_open_opts(
    path: *const c_char,
    options: *const *const c_char,
    n_options: usize,
    out: *mut *mut dc_chromdata,
) -> dc_status {
    new_handle(out, || {
        // SAFETY: caller guarantees a NUL-terminated string (or NULL, rejected).
        let path = unsafe { str_in(path, "path")? };
        // SAFETY: caller guarantees n_options strings at options.
        let options = unsafe { strs_in(options, n_options, "options")? };
        ChromData::open_url(path, &options)
    })
}

/// Releases a handle (NULL: no-op), and the result memory it kept (see
/// `dc_chromdata_read_spots`). Streams obtained from it stay valid.
///
/// # Safety
/// `cd` is NULL or a handle from `dc_chromdata_open` not yet freed, unused by other threads.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_free(cd: *mut dc_chromdata) {
    free_handle(cd)
}

/// Fills `*out` with the store's version, layout and counts.
///
/// # Safety
/// `cd` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_info_get(
    cd: *const dc_chromdata,
    out: *mut dc_chromdata_info,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        let i = cd.info();
        let info = dc_chromdata_info {
            format_major: i.format_major,
            format_minor: i.format_minor,
            layout: match i.layout {
                Layout::Flat => DC_LAYOUT_FLAT,
                Layout::Partitioned => DC_LAYOUT_PARTITIONED,
                Layout::PrimaryCoords => DC_LAYOUT_PRIMARY_COORDS,
            },
            n_spots: i.n_spots,
            n_bins: i.n_bins,
            n_traces: i.n_traces,
            n_cells: i.n_cells,
            n_chroms: i.n_chroms,
            has_coords: i.has_coords as i32,
            has_cell_id: i.has_cell_id as i32,
            n_runs: i.n_runs,
            n_row_groups: i.n_row_groups,
            has_source_row: i.has_source_row as i32,
            coord_bits: i.coord_bits as i32,
        };
        out.set(info);
        Ok(())
    })
}

/// A small table: "bins", "bin_tracks", "traces", "cells", "intervals/<key>",
/// "points/<key>" (dictionary columns decoded, strings as utf8). Absent → `DC_ERR_NOT_FOUND`.
///
/// # Safety
/// `cd` is a live handle; `name` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_table(
    cd: *mut dc_chromdata,
    name: *const c_char,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let name = unsafe { str_in(name, "name")? };
        let b = cd.table(name)?;
        let what = format!("{}: table {name:?}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// Original keys of a kind ("layers", "intervals", "points", "cellm", "binm", "results",
/// "uns", "contacts", "links") as a one-column utf8 table "key", in logical order.
///
/// # Safety
/// `cd` is a live handle; `kind` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_keys(
    cd: *mut dc_chromdata,
    kind: *const c_char,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let kind = unsafe { str_in(kind, "kind")? };
        let b = string_column("key", cd.keys(kind)?)?;
        let what = format!("{}: keys of {kind:?}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// The category list of a coded column, e.g. ("spots", "trace_id"), as a one-column table
/// "category" (utf8, int64, float64 or bool).
///
/// # Safety
/// `cd` is a live handle; `table`, `column` NUL-terminated strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_categories(
    cd: *mut dc_chromdata,
    table: *const c_char,
    column: *const c_char,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let (table, column) = unsafe { (str_in(table, "table")?, str_in(column, "column")?) };
        let b = one_column("category", cd.categories(table, column)?)?;
        let what = format!("{}: categories of {table}.{column}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// Shared body of the id queries.
///
/// # Safety
/// As for the exported functions calling it.
unsafe fn id_query(
    cd: *mut dc_chromdata,
    id: *const c_char,
    id_name: &str,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
    q: impl FnOnce(&ChromData, &str, &Columns) -> Result<arrow_array::RecordBatch>,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantees.
        let (id, cols) = unsafe { (str_in(id, id_name)?, columns_in(columns, n_columns)?) };
        let b = q(cd, id, &cols)?;
        let what = format!("{}: {id_name} {id:?}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// All spots of a trace, across cells and chromosomes, in canonical order (spec §15.2).
/// `columns`: NULL/0 = all; {"coords"} = keys + x, y, z; or explicit names. For integer
/// trace categories `trace_id` is the decimal value. Unknown id or column →
/// `DC_ERR_NOT_FOUND`.
///
/// # Safety
/// `cd` live; `trace_id` NUL-terminated; `columns` NULL or `n_columns` strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_get_trace(
    cd: *mut dc_chromdata,
    trace_id: *const c_char,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    // SAFETY: forwarded caller guarantees.
    unsafe {
        id_query(
            cd,
            trace_id,
            "trace_id",
            columns,
            n_columns,
            out,
            |cd, id, c| cd.get_trace(&cd.parse_id(id, false), c),
        )
    }
}

/// All spots of a cell, in canonical order. A store without cell_id → `DC_ERR_NOT_FOUND`.
///
/// # Safety
/// As `dc_chromdata_get_trace`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_get_cell(
    cd: *mut dc_chromdata,
    cell_id: *const c_char,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    // SAFETY: forwarded caller guarantees.
    unsafe {
        id_query(
            cd,
            cell_id,
            "cell_id",
            columns,
            n_columns,
            out,
            |cd, id, c| cd.get_cell(&cd.parse_id(id, true), c),
        )
    }
}

/// All spots on a chromosome, in canonical order.
///
/// # Safety
/// As `dc_chromdata_get_trace`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_get_chrom(
    cd: *mut dc_chromdata,
    chrom: *const c_char,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    // SAFETY: forwarded caller guarantees.
    unsafe {
        id_query(cd, chrom, "chrom", columns, n_columns, out, |cd, id, c| {
            cd.get_chrom(id, c)
        })
    }
}

/// Batches of `batch` whole runs (one trace in one cell and chromosome) in stored order,
/// read row group by row group as the stream is consumed. `batch` 0 →
/// `DC_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `cd` live; `columns` NULL or `n_columns` strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_iter_traces(
    cd: *mut dc_chromdata,
    batch: u64,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let cols = unsafe { columns_in(columns, n_columns)? };
        let it = cd.iter_traces(batch, &cols)?;
        let what = format!("{}: trace iterator", cd.display());
        export_stream(out, Box::new(it), &what)
    })
}

/// Batches of `batch` cell segments in stored order. No cell_id → `DC_ERR_NOT_FOUND`.
///
/// # Safety
/// As `dc_chromdata_iter_traces`.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_iter_cells(
    cd: *mut dc_chromdata,
    batch: u64,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let cols = unsafe { columns_in(columns, n_columns)? };
        let it = cd.iter_cells(batch, &cols)?;
        let what = format!("{}: cell iterator", cd.display());
        export_stream(out, Box::new(it), &what)
    })
}

/// The whole spot table in canonical order; `original_order` non-zero restores the
/// written order (source_row).
///
/// Memory: when you release a large result (its fixed-width columns, 2 MiB or more), the
/// handle keeps that memory for its next query, as pyarrow's allocator keeps freed memory:
/// at most `DELTACELLS_CHROMDATA_RETAIN_BYTES` bytes per handle (environment variable read
/// at open; default a quarter of physical memory, 0 keeps nothing), memory unused for a
/// second is freed at the handle's next query or release, and all of it at
/// `dc_chromdata_free` (kept memory is also given back to the kernel as reclaimable under
/// memory pressure). Every query returning spots does this.
///
/// # Safety
/// `cd` live; `columns` NULL or `n_columns` strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_read_spots(
    cd: *mut dc_chromdata,
    original_order: c_int,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantee.
        let cols = unsafe { columns_in(columns, n_columns)? };
        let b = cd.read_spots(original_order != 0, &cols)?;
        let what = format!("{}: spots", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// Metadata of a pass-through entry as JSON (UTF-8, no NUL terminator), in a buffer the
/// caller releases with `dc_bytes_free`. `kind` and `path` (original keys; member keys
/// inside results mappings, `n_path` = depth):
/// - "results", {key, ...} → `{"type", "kind", "function", "params", "inputs",
///   "uchrom_version", "created_utc" (each only if stored), "value" (json entries: the
///   stored tagged JSON), "keys" (mappings: member keys in order)}`;
/// - "cellm" | "binm", {key} → `{"shape": [...], "dtype": "float64" | ...}`;
/// - "intervals", {key} → `{"kind": ..., "source_result": ... or null}`; "points", {key} → `{}`;
/// - "uns", n_path 0 → the stored tagged-JSON dict (array references left as tags);
/// - "contacts" | "links", n_path 0 → the records, each with "resolved_path" added.
///
/// Unknown kind or key → `DC_ERR_NOT_FOUND`; a path of the wrong depth →
/// `DC_ERR_INVALID_ARGUMENT`; malformed stored metadata → `DC_ERR_FORMAT`.
///
/// # Safety
/// `cd` is a live handle; `kind` a NUL-terminated string; `path` NULL (n_path 0) or
/// `n_path` strings; `json_out` and `len_out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_attrs(
    cd: *mut dc_chromdata,
    kind: *const c_char,
    path: *const *const c_char,
    n_path: usize,
    json_out: *mut *mut u8,
    len_out: *mut usize,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let (json_out, len_out) = unsafe {
            (
                Out::new(json_out, "json_out")?,
                Out::new(len_out, "len_out")?,
            )
        };
        // SAFETY: forwarded caller guarantees.
        let (kind, path) = unsafe { (str_in(kind, "kind")?, strs_in(path, n_path, "path")?) };
        let doc = cd.attrs(kind, &path)?;
        let bytes =
            serde_json::to_vec(&doc).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let (p, n) = super::tile::bytes_to_c(&bytes)?;
        json_out.set(p);
        len_out.set(n);
        Ok(())
    })
}

/// An array entry ("cellm" / "binm" {key}, "results" {key, ...} of type array, "uns"
/// {stored array name}) as one record batch with one non-null column "value": 1-D → a
/// primitive array of the stored type; 2-D (n, k) → FixedSizeList<k>; more dimensions →
/// nested FixedSizeLists, row-major. Rows = the first dimension; the field metadata
/// "shape" holds the full shape as a JSON list.
///
/// Errors: unknown kind or key → `DC_ERR_NOT_FOUND`; a results entry that is not an array
/// → `DC_ERR_INVALID_ARGUMENT`; a data type or codec this build does not read →
/// `DC_ERR_UNSUPPORTED`.
///
/// # Safety
/// `cd` is a live handle; `kind` a NUL-terminated string; `path` NULL (n_path 0) or
/// `n_path` strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_array(
    cd: *mut dc_chromdata,
    kind: *const c_char,
    path: *const *const c_char,
    n_path: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantees.
        let (kind, path) = unsafe { (str_in(kind, "kind")?, strs_in(path, n_path, "path")?) };
        let b = cd.array(kind, &path)?;
        let what = format!("{}: {kind} {path:?}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}

/// A results entry of type table ({key, member keys...}) as a stream, normalised as
/// `dc_chromdata_table` normalises tables. Unknown key → `DC_ERR_NOT_FOUND`; an entry of
/// another type → `DC_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `cd` is a live handle; `path` points to `n_path` strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn dc_chromdata_result_table(
    cd: *mut dc_chromdata,
    path: *const *const c_char,
    n_path: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(cd, |cd| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: forwarded caller guarantees.
        let path = unsafe { strs_in(path, n_path, "path")? };
        let b = cd.result_table(&path)?;
        let what = format!("{}: results {path:?}", cd.display());
        export_stream(out, one_batch(b), &what)
    })
}
