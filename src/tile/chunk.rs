//! Chunk-level reading: one chunk decompressed once (`ChunkData`), then any of its cells
//! recombined straight into the caller's buffers. This is how gathers and batches touch
//! only what they need: chunks are the format's unit of independence, and a decompressed
//! chunk (4 bytes per nonzero plus its exceptions) is what a reader's cache keeps.
//!
//! Every rule of the format that concerns a cell is checked when that cell is written out
//! (gene indices below n_genes and strictly increasing, no stored zero count, exceptions
//! in range and replacing a stored 65535); the frames are checked when the chunk is
//! decompressed (exact sizes, exception positions strictly increasing and in range).

use std::cell::RefCell;
use std::io::Cursor;

use zstd::zstd_safe::DCtx;

use crate::error::{Error, Result};

use super::exceptions::{check_positions, gap_payload_rule, value_payload_rule, Exceptions};
use super::header::{ChunkEntry, StreamRef, ESCAPE};
use super::inspect::{StreamKind, Tile};
use super::kernels;
use super::ValuesOut;

/// One chunk, decompressed: its gap and value planes, its exception frames and its part of
/// the indptr. Owned, so that a cache can keep it and several threads read it at once.
#[derive(Debug)]
pub struct ChunkData {
    chunk: usize,
    entry: ChunkEntry,
    n_genes: u64,
    /// Nonzeros.
    n: usize,
    /// `indptr[cell_lo..=cell_hi] - nnz_lo`: each cell's range within the chunk.
    bounds: Vec<u32>,
    /// gaps lo | gaps hi | vals lo | vals hi (n bytes each) | vexc (8 k) | gexc (8 k).
    buf: Vec<u8>,
    vexc_k: usize,
    gexc_k: usize,
}

/// Per-thread zstd context for chunk reads, reused across chunks and calls.
struct Scratch {
    dctx: DCtx<'static>,
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

fn with_dctx<R>(f: impl FnOnce(&mut DCtx<'static>) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        let s = slot.get_or_insert_with(|| Scratch {
            dctx: DCtx::create(),
        });
        f(&mut s.dctx)
    })
}

/// Appends the decompressed frame `s` to `buf`; it must be exactly `expected` bytes.
fn append_frame(
    dctx: &mut DCtx<'static>,
    tile: &Tile<'_>,
    c: usize,
    kind: StreamKind,
    s: StreamRef,
    buf: &mut Vec<u8>,
    expected: usize,
) -> Result<()> {
    let start = buf.len();
    buf.reserve(expected);
    let mut cursor = Cursor::new(&mut *buf);
    cursor.set_position(start as u64);
    match dctx.decompress(&mut cursor, tile.bytes(s)) {
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

/// The content size an exception frame declares (checked by `Tile::parse`), 0 if absent.
fn exception_bytes(tile: &Tile<'_>, s: StreamRef) -> usize {
    if s.len == 0 {
        return 0;
    }
    zstd::zstd_safe::get_frame_content_size(tile.bytes(s))
        .ok()
        .flatten()
        .unwrap_or(0) as usize
}

impl ChunkData {
    /// Decompresses chunk `c` of a validated tile into `buf` (whose contents are discarded;
    /// pass a recycled buffer to avoid allocating). Checks the frame sizes and the exception
    /// positions; the cells are checked when written out.
    pub fn decompress(tile: &Tile<'_>, c: usize, mut buf: Vec<u8>) -> Result<ChunkData> {
        let e = tile.chunks[c];
        let n = e.nnz() as usize;
        let (vexc_bytes, gexc_bytes) =
            (exception_bytes(tile, e.vexc), exception_bytes(tile, e.gexc));
        buf.clear();
        let need = 4 * n + vexc_bytes + gexc_bytes;
        if buf.capacity() < need {
            // Growing a recycled buffer would copy its old contents (realloc does not know
            // they are dead) and fault in fresh pages anyway: start a new one, with room
            // for chunks a little larger than this one, so that it can be recycled for them.
            buf = Vec::new();
        }
        let need_alloc = if buf.capacity() >= need {
            need
        } else {
            need + need / 8
        };
        // A corrupt header may claim far more than memory holds: an error, not an abort.
        crate::memory::try_reserve_huge(&mut buf, need_alloc).map_err(|_| {
            Error::limit(format!(
                "chunk {c}: cannot allocate {need} bytes to decompress it (out of memory)"
            ))
        })?;
        with_dctx(|dctx| {
            append_frame(dctx, tile, c, StreamKind::Gaps, e.gaps, &mut buf, 2 * n)?;
            append_frame(dctx, tile, c, StreamKind::Vals, e.vals, &mut buf, 2 * n)?;
            if vexc_bytes > 0 {
                append_frame(
                    dctx,
                    tile,
                    c,
                    StreamKind::Vexc,
                    e.vexc,
                    &mut buf,
                    vexc_bytes,
                )?;
            }
            if gexc_bytes > 0 {
                append_frame(
                    dctx,
                    tile,
                    c,
                    StreamKind::Gexc,
                    e.gexc,
                    &mut buf,
                    gexc_bytes,
                )?;
            }
            Ok::<(), Error>(())
        })?;
        let (vexc_k, gexc_k) = (vexc_bytes / 8, gexc_bytes / 8);
        let v = Exceptions::new(&buf[4 * n..4 * n + vexc_bytes], vexc_k);
        check_positions(c, StreamKind::Vexc, e.vexc, &v, n)?;
        let g = Exceptions::new(&buf[4 * n + vexc_bytes..], gexc_k);
        check_positions(c, StreamKind::Gexc, e.gexc, &g, n)?;
        // `Tile::parse` checked the indptr: non-decreasing and within the chunk's range.
        let bounds = (e.cell_lo..=e.cell_hi)
            .map(|i| (tile.indptr(i) as u64 - e.nnz_lo) as u32)
            .collect();
        Ok(ChunkData {
            chunk: c,
            entry: e,
            n_genes: tile.header.n_genes as u64,
            n,
            bounds,
            buf,
            vexc_k,
            gexc_k,
        })
    }

    /// The chunk's index within its tile.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Its table entry (cells `cell_lo..cell_hi`, nonzeros `nnz_lo..nnz_hi`).
    pub fn entry(&self) -> &ChunkEntry {
        &self.entry
    }

    /// Memory held (for cache budgets).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.buf.capacity() + 4 * self.bounds.capacity()
    }

    /// Gives the buffer back for reuse.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// Nonzeros of tile cell `cell` (which this chunk holds) and where they start within
    /// the chunk.
    pub fn cell_range(&self, cell: u64) -> (usize, usize) {
        let k = (cell - self.entry.cell_lo) as usize;
        let (a, b) = (self.bounds[k] as usize, self.bounds[k + 1] as usize);
        (a, b - a)
    }

    fn exceptions(&self, kind: StreamKind) -> Exceptions<'_> {
        let at = 4 * self.n;
        let vexc = 8 * self.vexc_k;
        match kind {
            StreamKind::Vexc => Exceptions::new(&self.buf[at..at + vexc], self.vexc_k),
            _ => Exceptions::new(&self.buf[at + vexc..], self.gexc_k),
        }
    }

    /// Writes tile cell `cell` (held by this chunk) to `indices` and `values`, whose length
    /// must be the cell's nonzeros, checking every rule of the format for it. With `stream`,
    /// long runs are written with non-temporal stores (for outputs larger than the cache:
    /// no read of the output lines first, no eviction of the chunk being read); the caller
    /// then calls `tile::store_fence` before the outputs are handed on.
    pub fn cell_into(
        &self,
        cell: u64,
        indices: &mut [i32],
        values: ValuesOut<'_>,
        stream: bool,
    ) -> Result<()> {
        let (a, len) = self.cell_range(cell);
        assert!(indices.len() == len && values.len() == len);
        let c = self.chunk;
        let b = a + len;
        let n = self.n;
        let (glo, ghi) = (&self.buf[a..b], &self.buf[n + a..n + b]);
        let (vlo, vhi) = (
            &self.buf[2 * n + a..2 * n + b],
            &self.buf[3 * n + a..3 * n + b],
        );
        let (mut last, repeat) = kernels::prefix_sum_gaps(indices, glo, ghi, stream);
        if repeat {
            let p = kernels::find_zero_u16(glo, ghi, 1).unwrap_or(0);
            return Err(Error::format(format!(
                "chunk {c}: gaps frame at byte {}: cell {cell}: gap 0 at nonzero {} repeats a gene (indices must strictly increase)",
                self.entry.gaps.off,
                self.entry.nnz_lo as usize + a + p
            )));
        }
        let gexc = self.exceptions(StreamKind::Gexc);
        let first = gexc.first_at_or_after(a);
        for i in first..gexc.k {
            let (p, extra) = (gexc.position(i), gexc.payload(i));
            if p >= b {
                break;
            }
            let fail = |rule: String| {
                Error::format(format!(
                    "chunk {c}: gexc frame at byte {}: exception {i} (position {p}): {rule}",
                    self.entry.gexc.off
                ))
            };
            if let Some(rule) = gap_payload_rule(extra, self.n_genes) {
                return Err(fail(rule));
            }
            if self.buf[p] != 0xff || self.buf[n + p] != 0xff {
                return Err(fail("the stored gap there is not 65535".into()));
            }
            for idx in &mut indices[p - a..] {
                *idx = idx.wrapping_add(extra as i32);
            }
            last += extra as u64;
        }
        // Indices only grow within a cell, so checking the last one bounds them all.
        if len > 0 && last >= self.n_genes {
            return Err(Error::format(format!(
                "chunk {c}: cell {cell}: gene index {last} >= n_genes {}",
                self.n_genes
            )));
        }
        self.values_into(cell, a, values, vlo, vhi, stream)
    }

    fn values_into(
        &self,
        cell: u64,
        a: usize,
        mut values: ValuesOut<'_>,
        lo: &[u8],
        hi: &[u8],
        stream: bool,
    ) -> Result<()> {
        let c = self.chunk;
        let zero = match &mut values {
            ValuesOut::I32(v) => kernels::planes_to_i32(v, lo, hi, stream),
            ValuesOut::F32(v) => kernels::planes_to_f32(v, lo, hi, stream),
        };
        if zero {
            let p = kernels::find_zero_u16(lo, hi, 0).unwrap_or(0);
            return Err(Error::format(format!(
                "chunk {c}: vals frame at byte {}: cell {cell}: count 0 at nonzero {} (zeros are never stored)",
                self.entry.vals.off,
                self.entry.nnz_lo as usize + a + p
            )));
        }
        let vexc = self.exceptions(StreamKind::Vexc);
        let b = a + lo.len();
        for i in vexc.first_at_or_after(a)..vexc.k {
            let (p, v) = (vexc.position(i), vexc.payload(i));
            if p >= b {
                break;
            }
            let fail = |rule: String| {
                Error::format(format!(
                    "chunk {c}: vexc frame at byte {}: exception {i} (position {p}): {rule}",
                    self.entry.vexc.off
                ))
            };
            if let Some(rule) = value_payload_rule(v) {
                return Err(fail(rule));
            }
            if lo[p - a] as u16 | (hi[p - a] as u16) << 8 != ESCAPE {
                return Err(fail("the stored count there is not 65535".into()));
            }
            match &mut values {
                ValuesOut::I32(out) => out[p - a] = v as i32,
                ValuesOut::F32(out) => out[p - a] = v as f32,
            }
        }
        Ok(())
    }
}
