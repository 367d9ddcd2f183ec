//! §2 of the C API: a tile object in memory.

use std::ffi::c_void;

use crate::error::{Error, ErrorKind};
use crate::tile::{self, CsrRef, EncodeOptions, Tile, ValuesOut};

use super::args::{null_arg, slice_in, slice_out, Out};
use super::error::*;

/// Element type of decoded counts (`DC_INT32` or `DC_FLOAT32`).
pub type dc_dtype = i32;
/// Counts as `int32_t`.
pub const DC_INT32: dc_dtype = 0;
/// Counts as `float` (exact up to 2^24).
pub const DC_FLOAT32: dc_dtype = 1;

/// Summary of a tile, filled by `dc_tile_inspect`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dc_tile_info {
    /// Format version of the tile (2).
    pub version: u32,
    pub n_chunks: u32,
    pub n_cells: u64,
    pub nnz: u64,
    pub n_genes: u32,
    /// Value + gap exceptions over all chunks (saturates at UINT32_MAX).
    pub n_exceptions: u32,
    pub total_size: u64,
}

pub(crate) fn check_dtype(dtype: dc_dtype) -> crate::Result<()> {
    match dtype {
        DC_INT32 | DC_FLOAT32 => Ok(()),
        _ => Err(Error::invalid_argument(format!(
            "dtype {dtype} is neither DC_INT32 (0) nor DC_FLOAT32 (1)"
        ))),
    }
}

/// # Safety
/// `values` must point to `n` elements of the type `dtype` names (or be NULL for n = 0).
pub(crate) unsafe fn values_out<'a>(
    dtype: dc_dtype,
    values: *mut c_void,
    n: u64,
) -> crate::Result<ValuesOut<'a>> {
    Ok(match dtype {
        // SAFETY: forwarded caller guarantee.
        DC_INT32 => ValuesOut::I32(unsafe { slice_out(values.cast::<i32>(), n, "values")? }),
        // SAFETY: forwarded caller guarantee.
        _ => ValuesOut::F32(unsafe { slice_out(values.cast::<f32>(), n, "values")? }),
    })
}

/// # Safety
/// `blob` must point to `len` readable bytes (it may be NULL only if `len` is 0).
unsafe fn blob_in<'a>(blob: *const u8, len: usize) -> crate::Result<&'a [u8]> {
    if blob.is_null() {
        return Err(null_arg("blob"));
    }
    // SAFETY: forwarded caller guarantee.
    unsafe { slice_in(blob, len as u64, "blob") }
}

/// Validates a tile's header, chunk table, indptr and the headers of its zstd frames, and
/// (if `verify_crc` is non-zero) its CRC-32; fills `*info`. Decompresses nothing.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL), `DC_ERR_FORMAT` (structure), `DC_ERR_CHECKSUM`,
/// `DC_ERR_UNSUPPORTED` (version, flags, big-endian host).
///
/// # Safety
/// `blob` points to `len` readable bytes; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dc_tile_inspect(
    blob: *const u8,
    len: usize,
    verify_crc: i32,
    info: *mut dc_tile_info,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let info = unsafe { Out::new(info, "info")? };
        // SAFETY: caller guarantees `len` readable bytes at `blob`.
        let blob = unsafe { blob_in(blob, len)? };
        let t = tile::inspect(blob, verify_crc != 0)?;
        let out = dc_tile_info {
            version: t.version,
            n_chunks: t.n_chunks,
            n_cells: t.n_cells,
            nnz: t.nnz,
            n_genes: t.n_genes,
            n_exceptions: t.n_exceptions.min(u32::MAX as u64) as u32,
            total_size: t.total_size,
        };
        info.set(out);
        Ok(())
    })
}

/// Decodes a whole tile into caller buffers, making every check of the format.
///
/// Outputs: `indptr[n_cells + 1]`, `indices[capacity]`, `values[capacity]` of type `dtype`
/// (`int32_t` or `float`). On success `*nnz_out` is the tile's nnz and the first nnz entries
/// of `indices` / `values` hold the cells' gene indices (increasing within a cell) and counts.
///
/// Size query: if `capacity < nnz`, returns `DC_ERR_BUFFER_TOO_SMALL` with `*nnz_out = nnz`
/// (the tile is validated first; `indptr`, `indices`, `values` may then be NULL).
/// `n_threads` 0 = the library pool (`DELTACELLS_NUM_THREADS` or all cores); 1 decodes on the
/// calling thread. `verify_crc` non-zero checks the CRC-32 before decoding.
/// On any error the output buffers hold no meaning.
///
/// # Safety
/// `blob` points to `len` readable bytes; `indptr` has room for `n_cells + 1` values and
/// `indices` / `values` for `capacity` elements each (NULL allowed where described above);
/// no output buffer overlaps another or the blob.
#[no_mangle]
pub unsafe extern "C" fn dc_tile_decode(
    blob: *const u8,
    len: usize,
    n_threads: u32,
    verify_crc: i32,
    dtype: dc_dtype,
    indptr: *mut i64,
    indices: *mut i32,
    values: *mut c_void,
    capacity: u64,
    nnz_out: *mut u64,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let nnz_out = unsafe { Out::new(nnz_out, "nnz_out")? };
        check_dtype(dtype)?;
        // SAFETY: caller guarantees `len` readable bytes at `blob`.
        let blob = unsafe { blob_in(blob, len)? };
        let t = Tile::parse(blob, verify_crc != 0)?;
        let nnz = t.header.nnz;
        if capacity < nnz {
            nnz_out.set(nnz);
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: nnz },
                format!("capacity {capacity} is below the tile's {nnz} nonzeros"),
            ));
        }
        // SAFETY: the caller provides n_cells + 1 indptr entries and `capacity` >= nnz
        // indices and values, none overlapping.
        let (indptr, indices, values) = unsafe {
            (
                slice_out(indptr, t.header.n_cells + 1, "indptr")?,
                slice_out(indices, nnz, "indices")?,
                values_out(dtype, values, nnz)?,
            )
        };
        tile::decode_parsed(&t, n_threads as usize, indptr, indices, values)?;
        nnz_out.set(nnz);
        Ok(())
    })
}

/// Encodes one tile from CSR rows (cells): `indptr[n_cells + 1]` (starting at 0,
/// non-decreasing), and `indptr[n_cells]` entries of `indices` (sorted and unique within a
/// row, in `0 .. n_genes-1`) and `values` (counts >= 1).
///
/// `zstd_level` 0 = zstd's default (3; the format's writers use 19); `n_chunks` 0 = 8 (a tile
/// gets at most one chunk per cell); `n_threads` 0 = the library pool. The output is the
/// same for any thread count. On success `*blob_out` / `*len_out` receive a library-allocated
/// buffer; release it with `dc_bytes_free`.
///
/// Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad CSR, bad level), `DC_ERR_LIMIT` (more than
/// max(1024, nnz/200) counts or gaps above 65535, or a chunk of 2^32 nonzeros).
///
/// # Safety
/// `indptr` points to `n_cells + 1` readable values, `indices` and `values` to
/// `indptr[n_cells]` each (NULL allowed when that is 0); the out-pointers are writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dc_tile_encode(
    n_cells: u64,
    n_genes: u32,
    indptr: *const i64,
    indices: *const i32,
    values: *const i32,
    zstd_level: i32,
    n_chunks: u32,
    n_threads: u32,
    blob_out: *mut *mut u8,
    len_out: *mut usize,
) -> dc_status {
    guard(|| {
        // SAFETY: writable per the caller.
        let (blob_out, len_out) = unsafe {
            (
                Out::new(blob_out, "blob_out")?,
                Out::new(len_out, "len_out")?,
            )
        };
        if indptr.is_null() {
            return Err(null_arg("indptr"));
        }
        let rows = n_cells
            .checked_add(1)
            .ok_or_else(|| Error::invalid_argument("n_cells is too large"))?;
        // SAFETY: the caller provides n_cells + 1 indptr entries.
        let indptr = unsafe { slice_in(indptr, rows, "indptr")? };
        let nnz = indptr[n_cells as usize];
        if nnz < 0 {
            return Err(Error::invalid_argument(format!(
                "indptr[n_cells] is {nnz}, negative"
            )));
        }
        // SAFETY: the caller provides indptr[n_cells] indices and values.
        let (indices, values) = unsafe {
            (
                slice_in(indices, nnz as u64, "indices")?,
                slice_in(values, nnz as u64, "values")?,
            )
        };
        let csr = CsrRef {
            n_genes,
            indptr,
            indices,
            values,
        };
        let opts = EncodeOptions {
            zstd_level,
            n_chunks,
            threads: n_threads as usize,
        };
        let blob = tile::encode_tile(&csr, opts)?;
        let (ptr, len) = bytes_to_c(&blob)?;
        blob_out.set(ptr);
        len_out.set(len);
        Ok(())
    })
}

/// cbindgen:ignore
mod libc_alloc {
    use std::ffi::c_void;
    extern "C" {
        pub fn malloc(size: usize) -> *mut c_void;
        pub fn free(p: *mut c_void);
    }
}
use libc_alloc::{free, malloc};

/// Copies bytes into a `malloc` buffer, so that `dc_bytes_free` does not depend on the
/// length the caller passes back.
pub(crate) fn bytes_to_c(bytes: &[u8]) -> crate::Result<(*mut u8, usize)> {
    // SAFETY: malloc of a non-zero size; checked for NULL below.
    let p = unsafe { malloc(bytes.len().max(1)) }.cast::<u8>();
    if p.is_null() {
        return Err(Error::new(
            ErrorKind::Limit,
            format!("out of memory for a {}-byte buffer", bytes.len()),
        ));
    }
    // SAFETY: p has room for bytes.len() bytes and does not overlap `bytes`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    Ok((p, bytes.len()))
}

/// Releases a buffer returned by the library (e.g. by `dc_tile_encode`). `blob` NULL is a
/// no-op; `len` is the length that was returned (accepted for symmetry, not needed).
///
/// # Safety
/// `blob` is NULL or a buffer returned by the library and not yet released.
#[no_mangle]
pub unsafe extern "C" fn dc_bytes_free(blob: *mut u8, len: usize) {
    let _ = len;
    guard_value((), || {
        if !blob.is_null() {
            // SAFETY: blob came from `bytes_to_c` (malloc) and is released once.
            unsafe { free(blob.cast()) }
        }
    })
}
