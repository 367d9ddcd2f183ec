//! §4 of the C API: writing datasets.

use std::ffi::c_char;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};

use crate::dataset::{DatasetWriter, WriterOptions, WriterParam};
use crate::error::{Error, Result};
use crate::storage::Root;

use super::args::{null_arg, slice_in, str_in, strs_in, Out};
use super::arrow::BatchIn;
use super::error::*;
use super::handle::{castable, free_handle, new_handle, with_mut};

/// A dataset being written (opaque). Created by `dc_writer_create`, released by
/// `dc_writer_free`. Must not be used from several threads at once.
pub struct dc_writer {
    _opaque: [u8; 0],
}
castable!(dc_writer => DatasetWriter);

/// A setting of a writer (`DC_WRITER_*`), for `dc_writer_set`.
pub type dc_writer_param = i32;
/// Cells per tile (>= 1), default 10000. Before the first append.
pub const DC_WRITER_TILE_SIZE: dc_writer_param = 0;
/// Chunks per tile (1 ..= 65536), default 8. Before the first append.
pub const DC_WRITER_N_CHUNKS: dc_writer_param = 1;
/// zstd level (zstd's range; 0 = zstd's default), default 19. Before the first append.
pub const DC_WRITER_ZSTD_LEVEL: dc_writer_param = 2;
/// Encode threads (>= 0; 0 = `DELTACELLS_NUM_THREADS`, else all cores). Any time.
pub const DC_WRITER_THREADS: dc_writer_param = 3;
/// 0 (default): `DC_ERR_EXISTS` if the target exists; 1: replace an existing dataset at
/// the target, only when `dc_writer_finish` succeeds. Before finish.
pub const DC_WRITER_OVERWRITE: dc_writer_param = 4;
/// Tiles (row groups) per obs shard (>= 1), default 1000. Before the first append.
pub const DC_WRITER_OBS_TILES_PER_FILE: dc_writer_param = 5;
/// Categorical (dictionary) obs columns with more distinct values than this (>= 0) are
/// stored as strings instead of categories; default 20000. Before the first
/// `dc_writer_append_obs`.
pub const DC_WRITER_OBS_MAX_CATEGORIES: dc_writer_param = 6;

/// Starts writing a dataset of `n_genes` columns to the directory `path` (its parent must
/// exist). Everything is written to a hidden temporary directory next to it,
/// `.<name>.tmp-<pid>-<random>`, and moved into place by `dc_writer_finish`. `path` may also
/// be an object-store URL (`s3://bucket/prefix`, `gs://…`, `az://…`; settings from the
/// environment, see `dc_writer_create_opts`).
///
/// Whether `path` may already exist is decided by `DC_WRITER_OVERWRITE`, which can be set
/// after this call: the check is made by the first `dc_writer_append_csr` and again by
/// `dc_writer_finish` (`DC_ERR_EXISTS`).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, n_genes not in 1..2^31, a path without
/// a final name, a malformed URL), `DC_ERR_NOT_FOUND` (parent directory),
/// `DC_ERR_UNSUPPORTED` (an http(s):// URL, which is read only), `DC_ERR_IO`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_create(
    path: *const c_char,
    n_genes: u32,
    out: *mut *mut dc_writer,
) -> dc_status {
    // SAFETY: forwarded caller guarantees; no options.
    unsafe { dc_writer_create_opts(path, n_genes, std::ptr::null(), 0, out) }
}

/// Like `dc_writer_create`, with `n_options` settings `"key=value"` (as for
/// `dc_dataset_open_opts`). To an object store, each tile is uploaded (one PUT) as soon as
/// it is encoded; obs shards and the other files are built in a local spill directory
/// (`$DELTACELLS_SPILL_DIR`, else the system's temporary directory) and uploaded by
/// `dc_writer_finish`, which uploads `manifest.json` last: a prefix without it is not a
/// dataset, so a write that dies leaves nothing that opens. With `DC_WRITER_OVERWRITE`, the
/// old manifest is deleted before the first tile is uploaded.
///
/// Errors: those of `dc_writer_create`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
/// value, `options` NULL with `n_options` > 0).
///
/// # Safety
/// `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
/// points to `n_options` NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_create_opts(
    path: *const c_char,
    n_genes: u32,
    options: *const *const c_char,
    n_options: usize,
    out: *mut *mut dc_writer,
) -> dc_status {
    new_handle(out, || {
        // SAFETY: caller guarantees a NUL-terminated string (or NULL, rejected).
        let path = unsafe { str_in(path, "path")? };
        // SAFETY: caller guarantees n_options strings at options.
        let options = unsafe { strs_in(options, n_options, "options")? };
        let root = Root::parse(path, &options)?;
        DatasetWriter::create_deferred_at(root, n_genes, WriterOptions::default())
    })
}

/// Sets a parameter (see the `DC_WRITER_*` constants for ranges and when each may be set).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, unknown parameter, value out of range),
/// `DC_ERR_STATE` (too late: after the first append, or after finish).
///
/// # Safety
/// `w` is a live writer.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_set(
    w: *mut dc_writer,
    p: dc_writer_param,
    value: i64,
) -> dc_status {
    with_mut(w, |w| w.set_param(writer_param(p)?, value))
}

/// The core's setting behind a `DC_WRITER_*` constant.
fn writer_param(p: dc_writer_param) -> Result<WriterParam> {
    Ok(match p {
        DC_WRITER_TILE_SIZE => WriterParam::TileSize,
        DC_WRITER_N_CHUNKS => WriterParam::NChunks,
        DC_WRITER_ZSTD_LEVEL => WriterParam::ZstdLevel,
        DC_WRITER_THREADS => WriterParam::Threads,
        DC_WRITER_OVERWRITE => WriterParam::Overwrite,
        DC_WRITER_OBS_TILES_PER_FILE => WriterParam::ObsTilesPerFile,
        DC_WRITER_OBS_MAX_CATEGORIES => WriterParam::ObsMaxCategories,
        _ => {
            return Err(Error::invalid_argument(format!(
                "unknown dc_writer_param {p}"
            )))
        }
    })
}

/// The range of values `dc_writer_set` accepts for `p`: `*min ..= *max` (for
/// `DC_WRITER_ZSTD_LEVEL`, the range of the zstd the library was built with). Needs no
/// handle.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
///
/// # Safety
/// `min` and `max` are writable.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_param_bounds(
    p: dc_writer_param,
    min: *mut i64,
    max: *mut i64,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let (min, max) = unsafe { (Out::new(min, "min")?, Out::new(max, "max")?) };
        let b = writer_param(p)?.bounds();
        min.set(b.min);
        max.set(b.max);
        Ok(())
    })
}

/// Sets the gene order, before the first append: output column j = input column
/// `order[j]`. `order[0..n]` must be a permutation of 0..n_genes (n = n_genes). Written as
/// `gene_order.npy`; appended rows are remapped and re-sorted.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, n != n_genes, not a permutation; the message
/// names the entry), `DC_ERR_STATE` (after the first append or finish).
///
/// # Safety
/// `w` is a live writer; `order` points to `n` values.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_set_gene_order(
    w: *mut dc_writer,
    order: *const i32,
    n: usize,
) -> dc_status {
    with_mut(w, |w| {
        if order.is_null() {
            return Err(null_arg("order"));
        }
        // SAFETY: the caller provides n values.
        let order = unsafe { slice_in(order, n as u64, "order")? };
        w.set_gene_order(order)
    })
}

/// Sets the gene names `names[0..n]` in input column order (n = n_genes); they are written
/// to `var_names.txt` in output order. Names must be UTF-8 without line breaks. May be
/// called any time before finish (the last call wins).
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, n != n_genes, bad UTF-8, a line break; the message
/// names the index), `DC_ERR_STATE` (after finish).
///
/// # Safety
/// `w` is a live writer; `names` points to `n` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_set_var_names(
    w: *mut dc_writer,
    names: *const *const c_char,
    n: usize,
) -> dc_status {
    with_mut(w, |w| {
        if names.is_null() {
            return Err(null_arg("names"));
        }
        // SAFETY: the caller provides n NUL-terminated strings.
        let names = unsafe { strs_in(names, n, "names")? };
        w.set_var_names(&names)
    })
}

/// Appends `n_rows` cells (rows) in input column space; any number of rows per call, and
/// every `DC_WRITER_TILE_SIZE` rows make a tile, encoded in the background. Row r holds the
/// entries `indptr[r] - indptr[0] .. indptr[r + 1] - indptr[0]` of `indices` (column indices
/// in 0..n_genes, each at most once per row, in any order) and `values` (counts >= 0;
/// explicit zeros are dropped). So a block of rows of a larger CSR matrix can be passed
/// with pointers to its first entry, rebased or not. The call is all or nothing.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad indptr, column out of range or repeated,
/// negative count; the message names the row), `DC_ERR_EXISTS` (target exists and
/// overwrite is off), `DC_ERR_LIMIT` (a tile has too many counts or gaps above 65535),
/// `DC_ERR_STATE` (after finish, or after an earlier encoding error), `DC_ERR_IO`.
///
/// # Safety
/// `w` is a live writer; `indptr` points to `n_rows + 1` values, `indices` and `values` to
/// `indptr[n_rows] - indptr[0]` values each (NULL allowed when that is 0).
#[no_mangle]
pub unsafe extern "C" fn dc_writer_append_csr(
    w: *mut dc_writer,
    n_rows: u64,
    indptr: *const i64,
    indices: *const i32,
    values: *const i32,
) -> dc_status {
    with_mut(w, |w| {
        if indptr.is_null() {
            return Err(null_arg("indptr"));
        }
        let rows = n_rows
            .checked_add(1)
            .ok_or_else(|| Error::invalid_argument("n_rows is too large"))?;
        // SAFETY: the caller provides n_rows + 1 indptr values.
        let indptr = unsafe { slice_in(indptr, rows, "indptr")? };
        let (first, last) = (indptr[0], indptr[n_rows as usize]);
        if first < 0 || last < first {
            return Err(Error::invalid_argument(format!(
                "append_csr: indptr runs from {first} to {last}; it must start >= 0 and not decrease"
            )));
        }
        let total = (last - first) as u64;
        // SAFETY: the caller provides indptr[n_rows] - indptr[0] indices and values.
        let (indices, values) = unsafe {
            (
                slice_in(indices, total, "indices")?,
                slice_in(values, total, "values")?,
            )
        };
        w.append_csr(n_rows, indptr, indices, values)
    })
}

/// Appends obs rows: one Arrow record batch (a struct array with its schema) per call. Row
/// i overall describes cell i: batch boundaries need not match the `dc_writer_append_csr`
/// calls, but at `dc_writer_finish` there must be exactly one obs row per cell. Every
/// batch has the first one's columns (names, order, types). Categorical columns
/// (dictionaries of utf8, as pandas `category`) are stored as categories over a global
/// sorted vocabulary, or as strings when they have more than 20,000 distinct values
/// (`DC_WRITER_OBS_MAX_CATEGORIES`); plain text (utf8, large utf8) as strings; integers
/// and floats as numeric; bool as bool.
///
/// `batch` is moved into the library (released, and the caller's struct marked
/// released, even on error); `schema` is only borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, not a struct array, invalid buffers, an
/// unsupported column type or a batch unlike the first; the message names the column),
/// `DC_ERR_STATE` (after finish), `DC_ERR_IO`.
///
/// # Safety
/// `w` is a live writer; `batch` is NULL or a valid `struct ArrowArray`; `schema` is NULL
/// or a valid `struct ArrowSchema` describing it.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_append_obs(
    w: *mut dc_writer,
    batch: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let batch = unsafe { BatchIn::take(batch, schema, "batch") };
    with_mut(w, move |w| w.append_obs(batch.import()?))
}

/// Sets the gene table (`var.parquet`): a record batch of n_genes rows in input column
/// order, written in output order (permuted by the gene order). Keep the pandas index as a
/// column; a schema metadata entry `"pandas"` is written unchanged. Any time before
/// finish (the last call wins). `table` is moved into the library like
/// `dc_writer_append_obs`'s batch; `schema` is borrowed.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, not a struct array, row count != n_genes),
/// `DC_ERR_STATE` (after finish).
///
/// # Safety
/// As `dc_writer_append_obs`.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_set_var_table(
    w: *mut dc_writer,
    table: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> dc_status {
    // SAFETY: per the caller; taken first, so that it is released on every path.
    let table = unsafe { BatchIn::take(table, schema, "table") };
    with_mut(w, move |w| w.set_var_table(table.import()?))
}

/// Encodes the remaining rows, waits for every tile, writes `gene_order.npy`,
/// `var_names.txt` and `manifest.json` (last), syncs, and renames the temporary directory
/// to the target: the dataset appears complete or not at all. With `DC_WRITER_OVERWRITE`,
/// an existing dataset at the target is replaced only now (a directory holding anything but
/// a dataset's files is never replaced).
///
/// Errors: `DC_ERR_EXISTS` (the target exists; nothing is lost and finish may be called
/// again, e.g. after setting `DC_WRITER_OVERWRITE`), `DC_ERR_LIMIT` / `DC_ERR_IO` (a tile
/// failed; the writer is then unusable), `DC_ERR_STATE` (already finished or failed).
///
/// # Safety
/// `w` is a live writer.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_finish(w: *mut dc_writer) -> dc_status {
    with_mut(w, |w| w.finish())
}

/// Releases a writer. Without a successful `dc_writer_finish` the write is abandoned: its
/// temporary directory is removed and no manifest is left behind (an existing dataset at
/// the target is untouched). NULL is a no-op.
///
/// # Safety
/// `w` is NULL or a writer from `dc_writer_create` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn dc_writer_free(w: *mut dc_writer) {
    free_handle(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn a_caught_panic_poisons_the_writer() {
        let dir = std::env::temp_dir().join(format!("deltacells-poison-w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = CString::new(dir.join("ds").to_str().unwrap()).unwrap();
        let mut w: *mut dc_writer = std::ptr::null_mut();
        // SAFETY: valid string and out-pointer.
        assert_eq!(unsafe { dc_writer_create(c.as_ptr(), 3, &mut w) }, DC_OK);
        assert_eq!(with_mut(w, |_| panic!("boom")), DC_ERR_INTERNAL);
        // SAFETY: live writer.
        assert_eq!(unsafe { dc_writer_finish(w) }, DC_ERR_STATE);
        // SAFETY: live writer, freed once; the abandoned write is cleaned up.
        unsafe { dc_writer_free(w) };
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
