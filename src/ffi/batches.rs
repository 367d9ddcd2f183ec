//! §3.1 of the C API: batches in a declared order, read ahead; block-shuffled orders.

use std::ffi::c_void;

use crate::dataset::Batches;
use crate::error::{Error, ErrorKind};

use super::args::{slice_in, slice_out, Out};
use super::dataset::dc_dataset;
use super::error::*;
use super::handle::{castable, free_handle, into_handle, with_mut, with_ref};
use super::tile::{check_dtype, dc_dtype, values_out};

/// An iterator over batches of a dataset's cells (opaque). Created by
/// `dc_dataset_batches`, released by `dc_batches_free`. One thread at a time.
pub struct dc_batches {
    _opaque: [u8; 0],
}
castable!(dc_batches => Batches);

/// Iterates the cells `cells[0..n)` (any order, repeats allowed; the array is copied) in
/// batches of `batch_size` rows (the last may be shorter). While the caller works on one
/// batch, the next `read_ahead` batches (0 = 2, at most 64) are prepared on the dataset's
/// pool (`DC_DATASET_THREADS` at this call): their plans made and the chunks holding their
/// cells decompressed into the dataset's decoded-data cache, where they stay until their
/// batch is handed out. Memory: the cache's budget (`DC_DATASET_CACHE_BYTES`; with 0 only
/// the plans are prepared ahead) plus a few words per row of the batches prepared. All the
/// iterator's work runs on the pool; a calling thread only waits.
///
/// The iterator keeps what it needs of the dataset alive: `dc_dataset_free` may come first.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `ds`, `out`, or `cells` with n > 0;
/// `batch_size` 0), `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells: the message names its index
/// and value; every cell is checked here), `DC_ERR_IO` (the pool's threads cannot start).
///
/// # Safety
/// `ds` is a live handle; `cells` points to `n` values; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_batches(
    ds: *mut dc_dataset,
    cells: *const u64,
    n: usize,
    batch_size: usize,
    read_ahead: u32,
    out: *mut *mut dc_batches,
) -> dc_status {
    with_ref(ds, |h| {
        // SAFETY: writable per the caller.
        let out = unsafe { Out::new(out, "out")? };
        // SAFETY: the caller provides n cells.
        let cells = unsafe { slice_in(cells, n as u64, "cells")? };
        let it = Batches::new(h.dataset.clone(), cells, batch_size, read_ahead as usize)?;
        out.set(into_handle::<dc_batches>(it));
        Ok(())
    })
}

/// Rows and nonzeros of the next batch (to size buffers): `*n_rows = 0` at the end. Either
/// out-pointer may be NULL if not wanted. Waits for the batch's plan (header, chunk table and
/// indptr of its tiles; no decompression).
///
/// Errors: the errors of reading the batch's tile indexes (they name the tile); the batch
/// stays the next one and `dc_batches_next` returns the same error.
///
/// # Safety
/// `b` is a live iterator; the out-pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dc_batches_peek(
    b: *mut dc_batches,
    n_rows: *mut u64,
    nnz: *mut u64,
) -> dc_status {
    with_mut(b, |it| {
        // SAFETY: NULL or writable per the caller.
        let (n_rows, nnz) = unsafe { (Out::optional(n_rows), Out::optional(nnz)) };
        let (rows, z) = it.peek()?;
        if let Some(o) = n_rows {
            o.set(rows);
        }
        if let Some(o) = nnz {
            o.set(z);
        }
        Ok(())
    })
}

/// The next batch into caller buffers, exactly as `dc_dataset_gather` of its cells writes
/// them: `indptr[n_rows + 1]` (starting at 0), `indices[capacity]`, `values[capacity]` of
/// type `dtype`; `*n_rows_out` rows and `*nnz_out` nonzeros. At the end: `DC_OK` with
/// `*n_rows_out = 0` and `*nnz_out = 0`, nothing else written (the buffers may be NULL).
///
/// Size query: if `capacity` is below the batch's nnz, returns `DC_ERR_BUFFER_TOO_SMALL`
/// with `*nnz_out` = the needed nnz, and the batch stays the next one (`indptr`, `indices`,
/// `values` may then be NULL); `dc_batches_peek` gives the same numbers.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `b`, `n_rows_out`, `nnz_out`, or a NULL buffer
/// the batch needs; bad dtype), and the errors of reading the batch's tiles
/// (`DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_NOT_FOUND`, `DC_ERR_IO`, ...), whose
/// message names the tile and, where one chunk is at fault, the chunk and cell. After such
/// an error the batch is consumed: the iterator stays usable and the next call returns the
/// batch after it. On error the buffers hold no meaning.
///
/// # Safety
/// `b` is a live iterator; `indptr` has room for n_rows + 1 values (at most batch_size + 1),
/// `indices` and `values` for `capacity` elements (of the type `dtype` names); no buffer
/// overlaps another; the out-pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn dc_batches_next(
    b: *mut dc_batches,
    dtype: dc_dtype,
    indptr: *mut i64,
    indices: *mut i32,
    values: *mut c_void,
    capacity: u64,
    n_rows_out: *mut u64,
    nnz_out: *mut u64,
) -> dc_status {
    with_mut(b, |it| {
        // SAFETY: writable per the caller.
        let (n_rows_out, nnz_out) = unsafe {
            (
                Out::new(n_rows_out, "n_rows_out")?,
                Out::new(nnz_out, "nnz_out")?,
            )
        };
        check_dtype(dtype)?;
        let (rows, nnz) = match it.peek() {
            Ok(v) => v,
            // Hand out (and so consume) the failed batch: it fails again, the same way.
            Err(e) => {
                let _ = it.next_into(&mut [], &mut [], crate::tile::ValuesOut::I32(&mut []));
                return Err(e);
            }
        };
        if rows == 0 {
            n_rows_out.set(0);
            nnz_out.set(0);
            return Ok(());
        }
        if capacity < nnz {
            nnz_out.set(nnz);
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: nnz },
                format!("capacity {capacity} is below the {nnz} nonzeros of the next batch ({rows} rows)"),
            ));
        }
        // SAFETY: the caller provides rows + 1 indptr entries and capacity >= nnz indices
        // and values, none overlapping.
        let (indptr, indices, values) = unsafe {
            (
                slice_out(indptr, rows + 1, "indptr")?,
                slice_out(indices, nnz, "indices")?,
                values_out(dtype, values, nnz)?,
            )
        };
        let (r, z) = it.next_into(indptr, indices, values)?;
        n_rows_out.set(r);
        nnz_out.set(z);
        Ok(())
    })
}

/// Releases a batch iterator: read-ahead not yet started is cancelled, read-ahead running
/// is waited for (at most one chunk per thread), and what was read ahead is released; no
/// work of the iterator continues after this returns. NULL is a no-op.
///
/// # Safety
/// `b` is NULL or an iterator from `dc_dataset_batches` not yet freed, not in use by
/// another thread.
#[no_mangle]
pub unsafe extern "C" fn dc_batches_free(b: *mut dc_batches) {
    free_handle(b)
}

/// A block-shuffled permutation of all cells into `out[0..n_cells)`: the tiles in a random
/// order, the cells shuffled within windows of `window_tiles` consecutive tiles of that
/// order (0 = 1), so that each window's cells come together. The same `seed` gives the same
/// order on every platform: the stream is SplitMix64 seeded with `seed`; a draw below m is
/// Lemire's multiply-shift with rejection (x = next, p = x * m in 128 bits, redraw while
/// (p mod 2^64) < (2^64 - m) mod m, result p >> 64); a shuffle is Fisher-Yates from the end
/// (for i = len-1 down to 1, swap a[i] with a[draw below i+1]). First the tile indices
/// 0..n_tiles are shuffled; then, window after window of that order, the window's cells
/// (its tiles in window order, each tile's cells ascending) are listed and shuffled with the
/// same stream, and appended.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `ds`, NULL `out` with n_cells > 0),
/// `DC_ERR_BUFFER_TOO_SMALL` (`len` < n_cells; the message gives n_cells).
///
/// # Safety
/// `ds` is a live handle; `out` has room for `len` values.
#[no_mangle]
pub unsafe extern "C" fn dc_dataset_shuffled_order(
    ds: *const dc_dataset,
    seed: u64,
    window_tiles: u32,
    out: *mut u64,
    len: usize,
) -> dc_status {
    with_ref(ds, |h| {
        let n_cells = h.dataset.info().n_cells;
        if (len as u64) < n_cells {
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: n_cells },
                format!("len {len} is below the dataset's n_cells = {n_cells}"),
            ));
        }
        // SAFETY: the caller provides len >= n_cells writable values.
        let out = unsafe { slice_out(out, n_cells, "out")? };
        h.dataset.shuffled_order(seed, window_tiles as usize, out)
    })
}
