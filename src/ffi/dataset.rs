//! §3 of the C API: reading datasets.

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, OnceLock};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;

use crate::dataset::{Dataset, ReaderParam};
use crate::error::{Error, ErrorKind, Result};

use super::args::{opt_str_in, slice_in, slice_out, str_in, strs_in, Out};
use super::arrow::export_stream;
use super::error::*;
use super::handle::{castable, free_handle, new_handle, with_ref};
use super::tile::{check_dtype, dc_dtype, values_out};

/// An open dataset (opaque). Created by `dc_dataset_open`, released by `dc_dataset_free`.
/// May be used from several threads at once.
pub struct dc_dataset {
    _opaque: [u8; 0],
}
castable!(dc_dataset => DatasetHandle);

/// What a `dc_dataset` owns.
pub(crate) struct DatasetHandle {
    /// Shared with the batch iterators made from the handle (they may outlive it).
    pub(super) dataset: Arc<Dataset>,
    /// Gene names as C strings, built on first use and owned by the handle.
    names: OnceLock<std::result::Result<Vec<CString>, Error>>,
}

/// Summary of a dataset, filled by `dc_dataset_info_get`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dc_dataset_info {
    pub n_cells: u64,
    pub n_genes: u32,
    /// Dataset format version (2).
    pub version: u32,
    pub n_tiles: u64,
    pub tile_size: u64,
    /// Sum of the tiles' stored nonzeros.
    pub nnz: u64,
    pub has_gene_order: i32,
    pub has_var_names: i32,
    pub has_var_table: i32,
    pub has_obs: i32,
}

/// A setting of a dataset handle (`DC_DATASET_*`), for `dc_dataset_set`.
pub type dc_dataset_param = i32;
/// Decode threads per call (0 = `DELTACELLS_NUM_THREADS`, else all cores). Default 0.
pub const DC_DATASET_THREADS: dc_dataset_param = 0;
/// Since contract 1.1 a shorthand for `DC_DATASET_CACHE_BYTES`: sets the budget to
/// `value` times the decoded size of this dataset's largest tile (4 bytes per nonzero plus
/// 12 per cell, plus 4 KiB), so that about `value` whole tiles' chunks fit. 0 disables the
/// cache. Whichever of the two was set last is in effect.
pub const DC_DATASET_TILE_CACHE: dc_dataset_param = 1;
/// 1 (default): check each tile's CRC-32 when it is read, before anything in it is
/// decompressed; 0: skip the check. Chunks served from the cache were checked when their
/// tile was read; sizing (`dc_dataset_batch_nnz`) reads only header, chunk table and indptr,
/// checked structurally.
pub const DC_DATASET_VERIFY_CRC: dc_dataset_param = 2;
/// Budget in bytes of the decoded-data cache, shared by every thread using the handle and
/// by its batch iterators (default 268435456 = 256 MiB; 0 disables it). The cache keeps
/// decompressed chunks (4 bytes per nonzero, 4 per cell, plus exceptions) and tile indexes
/// (header, chunk table, indptr: 8 bytes per cell), least recently used evicted first;
/// what a batch iterator has read ahead stays until its batch is handed out. Shrinking
/// evicts at once.
pub const DC_DATASET_CACHE_BYTES: dc_dataset_param = 3;

fn buffer_too_small(needed: u64, message: String) -> Error {
    Error::new(ErrorKind::BufferTooSmall { needed }, message)
}

/// Opens the dataset at `path` — a directory, a `file://` URL, or an object-store URL
/// (`s3://bucket/prefix`, `gs://…`, `az://…`, `http(s)://…`; settings from the environment,
/// see `dc_dataset_open_opts`) — and validates its `manifest.json` (format, version, and the
/// consistency of every count). Tiles are read on demand.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a malformed URL), `DC_ERR_NOT_FOUND`
/// (no such directory or prefix, or no manifest.json: an incomplete dataset),
/// `DC_ERR_FORMAT` (bad manifest), `DC_ERR_UNSUPPORTED` (another format or version; a URL in
/// a build without remote storage), `DC_ERR_IO`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_open(
    path: *const c_char,
    out: *mut *mut dc_dataset,
) -> dc_status {
    // SAFETY: forwarded caller guarantees; no options.
    unsafe { dc_dataset_open_opts(path, std::ptr::null(), 0, out) }
}

/// Like `dc_dataset_open`, with `n_options` settings `"key=value"` (C API §7):
/// object-store settings under the `object_store` crate's names (`aws_endpoint`,
/// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `allow_http`,
/// `google_service_account`, `azure_storage_account_name`, …), and the library's
/// `max_concurrency` (requests in flight per handle, 1..1024, default 16), `timeout_ms` (per
/// request, default 30000) and `retries` (default 5, exponential backoff). What is not given
/// comes from the standard environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
/// …). Remote reads: one GET per tile (the tiles of a gather concurrently), obs and var by
/// byte ranges; after the retries a failure is `DC_ERR_IO` naming the URL, the operation and
/// the HTTP status or transport error; no call waits past its timeouts. Credentials never
/// appear in messages.
///
/// Errors: those of `dc_dataset_open`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
/// value, `options` NULL with `n_options` > 0).
///
/// # Safety
/// `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
/// points to `n_options` NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_open_opts(
    path: *const c_char,
    options: *const *const c_char,
    n_options: usize,
    out: *mut *mut dc_dataset,
) -> dc_status {
    new_handle(out, || {
        // SAFETY: caller guarantees a NUL-terminated string (or NULL, rejected).
        let path = unsafe { str_in(path, "path")? };
        // SAFETY: caller guarantees n_options strings at options.
        let options = unsafe { strs_in(options, n_options, "options")? };
        Ok(DatasetHandle {
            dataset: Arc::new(Dataset::open_url(path, &options)?),
            names: OnceLock::new(),
        })
    })
}

/// Releases a dataset handle and everything it owns (strings returned by
/// `dc_dataset_var_name` become invalid). NULL is a no-op.
///
/// # Safety
/// `ds` is NULL or a handle from `dc_dataset_open` not yet freed, and no other thread is
/// using it.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_free(ds: *mut dc_dataset) {
    free_handle(ds)
}

/// Sets a parameter of the handle: `DC_DATASET_THREADS` (>= 0), `DC_DATASET_TILE_CACHE`
/// (>= 0 tiles; shrinking evicts at once), `DC_DATASET_VERIFY_CRC` (0 or 1),
/// `DC_DATASET_CACHE_BYTES` (>= 0 bytes); `dc_dataset_param_bounds` gives each range. Safe to call
/// while other threads use the handle; calls already running keep their settings.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, unknown parameter, value out of range).
///
/// # Safety
/// `ds` is a live handle from `dc_dataset_open`.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_set(
    ds: *mut dc_dataset,
    p: dc_dataset_param,
    value: i64,
) -> dc_status {
    with_ref(ds, |h| h.dataset.set_param(reader_param(p)?, value))
}

/// The core's setting behind a `DC_DATASET_*` constant.
fn reader_param(p: dc_dataset_param) -> Result<ReaderParam> {
    match p {
        DC_DATASET_THREADS => Ok(ReaderParam::Threads),
        DC_DATASET_TILE_CACHE => Ok(ReaderParam::TileCache),
        DC_DATASET_VERIFY_CRC => Ok(ReaderParam::VerifyCrc),
        DC_DATASET_CACHE_BYTES => Ok(ReaderParam::CacheBytes),
        _ => Err(Error::invalid_argument(format!(
            "unknown dc_dataset_param {p}"
        ))),
    }
}

/// The range of values `dc_dataset_set` accepts for `p`: `*min ..= *max`. Needs no handle.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
///
/// # Safety
/// `min` and `max` are writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_param_bounds(
    p: dc_dataset_param,
    min: *mut i64,
    max: *mut i64,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let (min, max) = unsafe { (Out::new(min, "min")?, Out::new(max, "max")?) };
        let b = reader_param(p)?.bounds();
        min.set(b.min);
        max.set(b.max);
        Ok(())
    })
}

/// Fills `*out` with the dataset's summary.
///
/// # Safety
/// `ds` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_info_get(
    ds: *const dc_dataset,
    out: *mut dc_dataset_info,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        let i = h.dataset.info();
        let info = dc_dataset_info {
            n_cells: i.n_cells,
            n_genes: i.n_genes,
            version: i.version,
            n_tiles: i.n_tiles,
            tile_size: i.tile_size,
            nnz: i.nnz,
            has_gene_order: i.has_gene_order as i32,
            has_var_names: i.has_var_names as i32,
            has_var_table: i.has_var_table as i32,
            has_obs: i.has_obs as i32,
        };
        out.set(info);
        Ok(())
    })
}

/// Tile `tile` holds global cells `[*first_cell, *first_cell + *n_cells)` and `*nnz` stored
/// nonzeros (from the manifest; nothing is read). Any out-pointer may be NULL if not wanted.
///
/// Errors: `DC_ERR_OUT_OF_RANGE` (tile >= n_tiles).
///
/// # Safety
/// `ds` is a live handle; the out-pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_tile_bounds(
    ds: *const dc_dataset,
    tile: u64,
    first_cell: *mut u64,
    n_cells: *mut u64,
    nnz: *mut u64,
) -> dc_status {
    with_ref(ds, |h| {
        let (f, c, z) = h.dataset.tile_bounds(tile)?;
        for (p, v) in [(first_cell, f), (n_cells, c), (nnz, z)] {
            // SAFETY: NULL or writable per the caller.
            if let Some(out) = unsafe { Out::optional(p) } {
                out.set(v);
            }
        }
        Ok(())
    })
}

/// Decodes tile `tile` into caller buffers: `indptr[n_cells + 1]` (offsets local to the
/// tile, starting at 0), `indices[capacity]` (gene indices, increasing within a cell) and
/// `values[capacity]` of type `dtype`. On success `*nnz_out` is the tile's nnz. The tile's
/// header must agree with the manifest (cells, nnz, genes, size).
///
/// Size query: if `capacity` is below the tile's nnz, returns `DC_ERR_BUFFER_TOO_SMALL` with
/// `*nnz_out` = nnz (`indptr`, `indices`, `values` may then be NULL); see also
/// `dc_dataset_tile_bounds`.
///
/// Errors: `DC_ERR_OUT_OF_RANGE` (tile), `DC_ERR_NOT_FOUND` (tile file missing),
/// `DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_UNSUPPORTED`, `DC_ERR_IO`. On error the
/// buffers hold no meaning.
///
/// # Safety
/// `ds` is a live handle; `indptr` has room for n_cells + 1 values, `indices` and `values`
/// for `capacity` elements (of the type `dtype` names); no buffer overlaps another.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_read_tile(
    ds: *mut dc_dataset,
    tile: u64,
    dtype: dc_dtype,
    indptr: *mut i64,
    indices: *mut i32,
    values: *mut c_void,
    capacity: u64,
    nnz_out: *mut u64,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let nnz_out = unsafe { Out::new(nnz_out, "nnz_out")? };
        check_dtype(dtype)?;
        let (_, cells, nnz) = h.dataset.tile_bounds(tile)?;
        if capacity < nnz {
            nnz_out.set(nnz);
            return Err(buffer_too_small(
                nnz,
                format!("tile {tile}: capacity {capacity} is below the tile's {nnz} nonzeros"),
            ));
        }
        // SAFETY: the caller provides n_cells + 1 indptr entries and capacity >= nnz
        // indices and values, none overlapping.
        let (indptr, indices, values) = unsafe {
            (
                slice_out(indptr, cells + 1, "indptr")?,
                slice_out(indices, nnz, "indices")?,
                values_out(dtype, values, nnz)?,
            )
        };
        nnz_out.set(h.dataset.read_tile(tile, indptr, indices, values)?);
        Ok(())
    })
}

/// Stored nonzeros of the cells `cells[0..n]` (repeats count again): the capacity a
/// `dc_dataset_gather` of the same cells needs. Reads only tile headers and indptrs (no
/// decompression; cached per tile).
///
/// Errors: `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells; the message names it), and the errors
/// of reading a tile header.
///
/// # Safety
/// `ds` is a live handle; `cells` points to `n` values (NULL allowed if n = 0); `nnz_out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_batch_nnz(
    ds: *mut dc_dataset,
    cells: *const u64,
    n: usize,
    nnz_out: *mut u64,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let nnz_out = unsafe { Out::new(nnz_out, "nnz_out")? };
        // SAFETY: the caller provides n cells.
        let cells = unsafe { slice_in(cells, n as u64, "cells")? };
        nnz_out.set(h.dataset.batch_nnz(cells)?);
        Ok(())
    })
}

/// Gathers the cells `cells[0..n]` (any order, repeats allowed, across tiles) into CSR: row
/// i of the result is cell `cells[i]`. Outputs: `indptr[n + 1]` (starting at 0),
/// `indices[capacity]`, `values[capacity]` of type `dtype`; on success `*nnz_out` is the
/// result's nnz. Only the chunks holding requested cells are decompressed (or taken from
/// the handle's decoded-data cache, `DC_DATASET_CACHE_BYTES`), each tile read at most once
/// per call, in parallel (`DC_DATASET_THREADS`); every cell is written straight into its
/// rows of the outputs. The cells returned are checked against every rule of the format.
///
/// Size query: if `capacity` is below the result's nnz, returns `DC_ERR_BUFFER_TOO_SMALL`
/// with `*nnz_out` = the needed nnz, having decoded nothing (`indptr`, `indices`, `values`
/// may then be NULL); `dc_dataset_batch_nnz` gives the same number.
///
/// Errors: `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells), and the errors of reading a tile
/// (`DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_NOT_FOUND`, `DC_ERR_IO`, ...), which name
/// the tile. On error the buffers hold no meaning.
///
/// # Safety
/// `ds` is a live handle; `cells` points to `n` values; `indptr` has room for n + 1 values,
/// `indices` and `values` for `capacity` elements (of the type `dtype` names); no buffer
/// overlaps another or `cells`.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_gather(
    ds: *mut dc_dataset,
    cells: *const u64,
    n: usize,
    dtype: dc_dtype,
    indptr: *mut i64,
    indices: *mut i32,
    values: *mut c_void,
    capacity: u64,
    nnz_out: *mut u64,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let nnz_out = unsafe { Out::new(nnz_out, "nnz_out")? };
        check_dtype(dtype)?;
        // SAFETY: the caller provides n cells.
        let cells = unsafe { slice_in(cells, n as u64, "cells")? };
        let plan = h.dataset.plan_gather(cells)?;
        let nnz = plan.nnz();
        if capacity < nnz {
            nnz_out.set(nnz);
            return Err(buffer_too_small(
                nnz,
                format!(
                    "capacity {capacity} is below the {nnz} nonzeros of the {n} requested cells"
                ),
            ));
        }
        // SAFETY: the caller provides n + 1 indptr entries and capacity >= nnz indices and
        // values, none overlapping each other or `cells`.
        let (indptr, indices, values) = unsafe {
            (
                slice_out(indptr, n as u64 + 1, "indptr")?,
                slice_out(indices, nnz, "indices")?,
                values_out(dtype, values, nnz)?,
            )
        };
        nnz_out.set(h.dataset.gather_planned(&plan, indptr, indices, values)?);
        Ok(())
    })
}

/// Copies the gene order (`gene_order.npy`) to `out[0..n_genes]`: output column j was
/// input column `out[j]`. `len` is the room in `out` and must be at least n_genes.
///
/// Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene order), `DC_ERR_BUFFER_TOO_SMALL`
/// (len < n_genes), `DC_ERR_FORMAT` (the file is missing or not a valid int32 permutation).
///
/// # Safety
/// `ds` is a live handle; `out` has room for `len` values.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_gene_order(
    ds: *const dc_dataset,
    out: *mut i32,
    len: usize,
) -> dc_status {
    with_ref(ds, |h| {
        let order = h.dataset.gene_order()?;
        if len < order.len() {
            return Err(buffer_too_small(
                order.len() as u64,
                format!("len {len} is below n_genes = {}", order.len()),
            ));
        }
        // SAFETY: the caller provides len >= n_genes writable values (NULL is rejected).
        let out = unsafe { slice_out(out, order.len() as u64, "out")? };
        out.copy_from_slice(order);
        Ok(())
    })
}

/// The name of output column `gene` (`var_names.txt`), as a NUL-terminated UTF-8 string
/// owned by the handle (valid until `dc_dataset_free`).
///
/// Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene names), `DC_ERR_OUT_OF_RANGE`
/// (gene >= n_genes), `DC_ERR_FORMAT` (the file is missing, not UTF-8, has a line count other
/// than n_genes, or a NUL byte).
///
/// # Safety
/// `ds` is a live handle; `name_out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_var_name(
    ds: *const dc_dataset,
    gene: u32,
    name_out: *mut *const c_char,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let name_out = unsafe { Out::new(name_out, "name_out")? };
        let names = h
            .names
            .get_or_init(|| {
                let names = h.dataset.var_names()?;
                names
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        CString::new(s.as_str()).map_err(|_| {
                            Error::format(format!(
                                "{}: line {} contains a NUL byte",
                                h.dataset.root().join("var_names.txt").display(),
                                j + 1
                            ))
                        })
                    })
                    .collect()
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let name = names.get(gene as usize).ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "gene {gene} is out of range: the dataset has n_genes = {}",
                    names.len()
                ),
            )
        })?;
        // The string lives as long as the handle.
        name_out.set(name.as_ptr());
        Ok(())
    })
}

/// The gene table (`var.parquet`: one row per output column, in output order, the pandas
/// index as a column) as an Arrow stream written to `*out`. The caller owns the stream and
/// calls its `release`; it stays valid after `dc_dataset_free`.
///
/// Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene table), `DC_ERR_FORMAT` (the file is
/// missing, unreadable, or does not have n_genes rows), `DC_ERR_IO`.
///
/// # Safety
/// `ds` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_var_table(
    ds: *mut dc_dataset,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        let what = format!("{}: var table", h.dataset.root().display());
        export_stream(out, h.dataset.var_table()?, &what)
    })
}

/// Obs columns `columns[0..n_columns]` (NULL or 0 = all, in schema order) as an Arrow
/// stream written to `*out`: one record batch per tile, in cell order. Category columns
/// arrive as dictionary arrays (int8/16/32 keys as stored, utf8 values = the global
/// vocabulary; a missing value is null); numeric, bool and string columns as stored. The
/// first request of a column copies it into the local cache (`dc_dataset_set_cache_dir`),
/// later ones read it from there. The caller owns the stream and calls its `release`; it
/// stays valid after `dc_dataset_free`.
///
/// Errors: `DC_ERR_NOT_FOUND` (no obs, or an unknown column: the message names it),
/// `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a column named twice), `DC_ERR_FORMAT` (the
/// obs files disagree with the manifest), `DC_ERR_UNSUPPORTED`, `DC_ERR_IO`.
///
/// # Safety
/// `ds` is a live handle; `columns` is NULL or points to `n_columns` NUL-terminated
/// strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_obs(
    ds: *mut dc_dataset,
    columns: *const *const c_char,
    n_columns: usize,
    out: *mut FFI_ArrowArrayStream,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        let names = if columns.is_null() || n_columns == 0 {
            None
        } else {
            // SAFETY: the caller provides n_columns NUL-terminated strings.
            Some(unsafe { strs_in(columns, n_columns, "columns")? })
        };
        let what = format!("{}: obs", h.dataset.root().display());
        export_stream(out, h.dataset.obs(names.as_deref())?, &what)
    })
}

/// Sets the directory of the local obs column cache (columns go to
/// `<dir>/<obs_fingerprint>/obs/`). NULL restores the default: `$DELTACELLS_CACHE`, else
/// `$XDG_CACHE_HOME/deltacells`, else `~/.cache/deltacells`. A cache that cannot be
/// written is no error: obs is then read from the dataset each time.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL handle, bad UTF-8).
///
/// # Safety
/// `ds` is a live handle; `dir` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_set_cache_dir(
    ds: *mut dc_dataset,
    dir: *const c_char,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: NULL or NUL-terminated per the caller.
        let dir = unsafe { opt_str_in(dir, "dir")? };
        h.dataset.set_cache_dir(dir.map(std::path::PathBuf::from));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{DatasetWriter, WriterOptions};

    #[test]
    fn a_caught_panic_poisons_the_handle() {
        let dir = std::env::temp_dir().join(format!("deltacells-poison-ds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ds");
        let mut w = DatasetWriter::create(&path, 3, WriterOptions::default()).unwrap();
        w.append_csr(1, &[0, 1], &[2], &[5]).unwrap();
        w.finish().unwrap();
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let mut ds: *mut dc_dataset = std::ptr::null_mut();
        // SAFETY: valid string and out-pointer.
        assert_eq!(unsafe { dc_dataset_open(c.as_ptr(), &mut ds) }, DC_OK);
        assert_eq!(with_ref(ds, |_| panic!("boom")), DC_ERR_INTERNAL);
        let mut info = dc_dataset_info::default();
        // SAFETY: live handle, writable out.
        assert_eq!(unsafe { dc_dataset_info_get(ds, &mut info) }, DC_ERR_STATE);
        assert_eq!(info.n_cells, 0, "not written on error");
        // SAFETY: live handle, freed once.
        unsafe { dc_dataset_free(ds) };
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
