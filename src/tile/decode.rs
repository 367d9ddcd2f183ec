//! Tile decoding: chunks decode independently (in parallel) straight into disjoint ranges of
//! the caller's output slices. Per worker thread, one zstd context and one scratch buffer are
//! reused across chunks and calls.

use std::cell::RefCell;

use zstd::zstd_safe::DCtx;

use crate::error::{Error, ErrorKind, Result};
use crate::pool;

use super::exceptions::{apply_gap_exceptions, apply_value_exceptions, read_exceptions};
use super::header::ChunkEntry;
use super::inspect::{StreamKind, Tile};
use super::kernels::{self, CellError};
use super::values::ValuesOut;

#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    /// 0 = the library default (DELTACELLS_NUM_THREADS or all cores).
    pub threads: usize,
    pub verify_crc: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            threads: 0,
            verify_crc: true,
        }
    }
}

/// Below this many nonzeros per thread, a decode uses fewer threads (measured with
/// benches/tile.rs on the 24k-nonzero chr21 tile: two threads were slower than one).
const MIN_NNZ_PER_THREAD: u64 = 32 * 1024;

/// Per-thread decoding state, reused across chunks and calls.
struct Scratch {
    dctx: DCtx<'static>,
    planes: Vec<u8>,
    exceptions: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        let scratch = slot.get_or_insert_with(|| Scratch {
            dctx: DCtx::create(),
            planes: Vec::new(),
            exceptions: Vec::new(),
        });
        f(scratch)
    })
}

/// Decodes a whole tile into `indptr` (n_cells + 1), `indices` and `values` (>= nnz each).
/// Returns nnz. Every check of the format is made; on error the outputs hold no meaning.
pub fn decode_tile(
    blob: &[u8],
    opts: DecodeOptions,
    indptr: &mut [i64],
    indices: &mut [i32],
    values: ValuesOut<'_>,
) -> Result<u64> {
    let tile = Tile::parse(blob, opts.verify_crc)?;
    decode_parsed(&tile, opts.threads, indptr, indices, values)
}

/// Decodes an already validated tile (see `decode_tile`).
pub fn decode_parsed(
    tile: &Tile<'_>,
    threads: usize,
    indptr: &mut [i64],
    indices: &mut [i32],
    mut values: ValuesOut<'_>,
) -> Result<u64> {
    let h = &tile.header;
    let nnz = h.nnz;
    if (indices.len() as u64) < nnz || (values.len() as u64) < nnz {
        return Err(Error::new(
            ErrorKind::BufferTooSmall { needed: nnz },
            format!(
                "output holds {} nonzeros, the tile has {nnz}",
                indices.len().min(values.len())
            ),
        ));
    }
    let n_cells = h.n_cells as usize;
    if indptr.len() < n_cells + 1 {
        return Err(Error::new(
            ErrorKind::BufferTooSmall {
                needed: n_cells as u64 + 1,
            },
            format!(
                "indptr output holds {} entries, the tile needs n_cells + 1 = {}",
                indptr.len(),
                n_cells + 1
            ),
        ));
    }
    let indptr = &mut indptr[..n_cells + 1];
    for (out, b) in indptr.iter_mut().zip(tile.indptr_bytes().chunks_exact(8)) {
        *out = i64::from_le_bytes(b.try_into().unwrap());
    }
    let indptr: &[i64] = indptr;

    // Give every chunk its own disjoint output range.
    let mut rest_idx = &mut indices[..nnz as usize];
    let mut jobs = Vec::with_capacity(tile.chunks.len());
    for (c, e) in tile.chunks.iter().enumerate() {
        let n = e.nnz() as usize;
        let (idx, tail) = std::mem::take(&mut rest_idx).split_at_mut(n);
        rest_idx = tail;
        jobs.push((c, e, idx, values.take_front(n)));
    }
    // Waking workers costs more than decoding a few thousand nonzeros.
    let worth = (nnz / MIN_NNZ_PER_THREAD).max(1) as usize;
    let threads = pool::resolve_threads(threads)
        .min(jobs.len().max(1))
        .min(worth);
    pool::map(threads, jobs, |(c, e, idx, vals)| {
        with_scratch(|s| decode_chunk(tile, c, e, indptr, idx, vals, s))
    })?;
    Ok(nnz)
}

/// Decompresses one stream of a chunk into `out` (which must end up exactly `expected` bytes).
fn decompress_exact(
    dctx: &mut DCtx<'static>,
    tile: &Tile<'_>,
    c: usize,
    kind: StreamKind,
    s: super::header::StreamRef,
    out: &mut Vec<u8>,
    expected: usize,
) -> Result<()> {
    out.clear();
    // Reused across chunks and calls: allocated (huge pages advised) once per thread.
    crate::memory::try_reserve_huge(out, expected).map_err(|_| {
        Error::limit(format!(
            "chunk {c}: cannot allocate {expected} bytes to decompress its {} frame (out of memory)",
            kind.name()
        ))
    })?;
    match dctx.decompress(out, tile.bytes(s)) {
        Ok(n) if n == expected => Ok(()),
        Ok(n) => Err(Error::format(format!(
            "chunk {c}: {} frame at byte {}: decompressed to {n} bytes, expected {expected}",
            kind.name(),
            s.off
        ))),
        Err(code) => Err(Error::format(format!(
            "chunk {c}: {} frame at byte {}: zstd: {} (expected {expected} bytes)",
            kind.name(),
            s.off,
            zstd::zstd_safe::get_error_name(code)
        ))),
    }
}

fn decode_chunk(
    tile: &Tile<'_>,
    c: usize,
    e: &ChunkEntry,
    indptr: &[i64],
    indices: &mut [i32],
    mut values: ValuesOut<'_>,
    s: &mut Scratch,
) -> Result<()> {
    let n = e.nnz() as usize;
    let n_genes = tile.header.n_genes as u64;
    let base = e.nnz_lo as i64;
    // Streaming stores pay off for outputs larger than the cache, written in long runs.
    let n_cells = (e.cell_hi - e.cell_lo).max(1) as usize;
    let stream = 4 * n >= kernels::STREAM_STORE_MIN_BYTES && n / n_cells >= 64;

    // Gene indices: per cell, prefix-sum the gaps.
    decompress_exact(
        &mut s.dctx,
        tile,
        c,
        StreamKind::Gaps,
        e.gaps,
        &mut s.planes,
        2 * n,
    )?;
    let (lo, hi) = s.planes.split_at(n);
    let bounds = &indptr[e.cell_lo as usize..=e.cell_hi as usize];
    match kernels::prefix_sum_cells(indices, lo, hi, bounds, base, n_genes, stream) {
        Ok(()) => {}
        Err(CellError::GeneRange { k, last }) => {
            return Err(Error::format(format!(
                "chunk {c}: cell {}: gene index {last} >= n_genes {n_genes}",
                e.cell_lo as usize + k
            )))
        }
        Err(CellError::RepeatedGene { k }) => {
            // Rare: find the position for the message. The cell's first gap may be 0.
            let a = (bounds[k] - base) as usize;
            let p = kernels::find_zero_u16(lo, hi, a + 1).unwrap_or(a);
            return Err(Error::format(format!(
                "chunk {c}: gaps frame at byte {}: cell {}: gap 0 at nonzero {} repeats a gene (indices must strictly increase)",
                e.gaps.off,
                e.cell_lo as usize + k,
                e.nnz_lo as usize + p
            )));
        }
    }
    if e.gexc.len > 0 {
        let exc = read_exceptions(&mut s.dctx, tile, c, StreamKind::Gexc, e, &mut s.exceptions)?;
        apply_gap_exceptions(c, e, indptr, lo, hi, &exc, indices, n_genes)?;
    }

    // Counts: recombine the byte planes.
    decompress_exact(
        &mut s.dctx,
        tile,
        c,
        StreamKind::Vals,
        e.vals,
        &mut s.planes,
        2 * n,
    )?;
    let (lo, hi) = s.planes.split_at(n);
    let zero_count = match &mut values {
        ValuesOut::I32(v) => kernels::planes_to_i32(v, lo, hi, stream),
        ValuesOut::F32(v) => kernels::planes_to_f32(v, lo, hi, stream),
    };
    if stream {
        kernels::store_fence();
    }
    if zero_count {
        let p = kernels::find_zero_u16(lo, hi, 0).unwrap_or(0);
        return Err(Error::format(format!(
            "chunk {c}: vals frame at byte {}: count 0 at nonzero {} (zeros are never stored)",
            e.vals.off,
            e.nnz_lo as usize + p
        )));
    }
    if e.vexc.len > 0 {
        let exc = read_exceptions(&mut s.dctx, tile, c, StreamKind::Vexc, e, &mut s.exceptions)?;
        apply_value_exceptions(c, e, &exc, &mut values)?;
    }
    Ok(())
}
