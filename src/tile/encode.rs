//! Tile encoding: CSR rows (cells) to a version-2 tile. Chunks are balanced by nonzeros and
//! built in parallel; each stream is compressed independently with the same settings, so the
//! output is byte-identical for any thread count.

use std::cell::RefCell;

use zstd::zstd_safe::{self, CCtx};

use crate::error::{Error, Result};
use crate::pool;

use super::header::*;

/// A borrowed CSR matrix, rows = cells. `indptr` has n_cells + 1 entries.
#[derive(Debug, Clone, Copy)]
pub struct CsrRef<'a> {
    pub n_genes: u32,
    pub indptr: &'a [i64],
    pub indices: &'a [i32],
    pub values: &'a [i32],
}

impl CsrRef<'_> {
    pub fn n_cells(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    pub zstd_level: i32,
    /// Requested chunks (0 = 8); a tile gets min(this, n_cells) chunks.
    pub n_chunks: u32,
    /// 0 = the library default.
    pub threads: usize,
}

pub const DEFAULT_ZSTD_LEVEL: i32 = 19;
pub const DEFAULT_CHUNKS: u32 = 8;

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            zstd_level: DEFAULT_ZSTD_LEVEL,
            n_chunks: DEFAULT_CHUNKS,
            threads: 0,
        }
    }
}

/// The policy limit on exceptions of either kind in one tile.
pub fn exception_limit(nnz: u64) -> u64 {
    (nnz / 200).max(1024)
}

/// A chunk's uint16 streams as byte planes, plus its exceptions (position, payload).
struct ChunkPlanes {
    gaps: Vec<u8>,
    vals: Vec<u8>,
    gexc: Vec<(u32, u32)>,
    vexc: Vec<(u32, u32)>,
}

struct ChunkFrames {
    gaps: Vec<u8>,
    vals: Vec<u8>,
    vexc: Vec<u8>,
    gexc: Vec<u8>,
}

thread_local! {
    static CCTX: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
}

fn compress(data: &[u8], level: i32) -> Result<Vec<u8>> {
    CCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let cctx = slot.get_or_insert_with(CCtx::create);
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        // ZSTD_compressCCtx resets the context's parameters and records the content size.
        cctx.compress(&mut out, data, level).map_err(|code| {
            Error::new(
                crate::error::ErrorKind::Internal,
                format!(
                    "zstd compression failed: {}",
                    zstd_safe::get_error_name(code)
                ),
            )
        })?;
        Ok(out)
    })
}

fn exception_frame(exc: &[(u32, u32)], level: i32) -> Result<Vec<u8>> {
    if exc.is_empty() {
        return Ok(Vec::new());
    }
    let mut raw = Vec::with_capacity(8 * exc.len());
    for &(p, _) in exc {
        raw.extend_from_slice(&p.to_le_bytes());
    }
    for &(_, v) in exc {
        raw.extend_from_slice(&v.to_le_bytes());
    }
    compress(&raw, level)
}

/// Checks the CSR's structure (not its entries, see `build_planes`).
fn check_csr(csr: &CsrRef<'_>) -> Result<()> {
    if csr.n_genes == 0 || csr.n_genes as u64 > MAX_GENES {
        return Err(Error::invalid_argument(format!(
            "n_genes is {}, must be in 1..2^31",
            csr.n_genes
        )));
    }
    if csr.indptr.is_empty() {
        return Err(Error::invalid_argument("indptr needs n_cells + 1 entries"));
    }
    if csr.indptr[0] != 0 {
        return Err(Error::invalid_argument(format!(
            "indptr[0] is {}, must be 0",
            csr.indptr[0]
        )));
    }
    if let Some(i) = csr.indptr.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::invalid_argument(format!(
            "indptr decreases at row {i} ({} -> {})",
            csr.indptr[i],
            csr.indptr[i + 1]
        )));
    }
    let nnz = *csr.indptr.last().unwrap() as u64;
    if (csr.indices.len() as u64) < nnz || (csr.values.len() as u64) < nnz {
        return Err(Error::invalid_argument(format!(
            "indptr ends at {nnz} but only {} indices / {} values were given",
            csr.indices.len(),
            csr.values.len()
        )));
    }
    Ok(())
}

/// Cell boundaries of `k` chunks with roughly equal nonzeros, every chunk non-empty in cells.
fn chunk_bounds(indptr: &[i64], k: usize) -> Vec<usize> {
    let n_cells = indptr.len() - 1;
    let nnz = indptr[n_cells] as u128;
    let mut bounds = vec![0usize; k + 1];
    bounds[k] = n_cells;
    for j in 1..k {
        let target = (nnz * j as u128 / k as u128) as i64;
        let cell = indptr.partition_point(|&v| v < target);
        // Keep at least one cell per chunk on both sides.
        bounds[j] = cell.max(bounds[j - 1] + 1).min(n_cells - (k - j));
    }
    bounds
}

fn build_planes(csr: &CsrRef<'_>, cells: std::ops::Range<usize>) -> Result<ChunkPlanes> {
    let nnz_lo = csr.indptr[cells.start] as usize;
    let n = csr.indptr[cells.end] as usize - nnz_lo;
    if n as u64 >= 1 << 32 {
        return Err(Error::limit(format!(
            "cells {}..{} hold {n} nonzeros; a chunk holds fewer than 2^32 (use more chunks)",
            cells.start, cells.end
        )));
    }
    let mut gaps = vec![0u8; 2 * n];
    let mut vals = vec![0u8; 2 * n];
    let (glo, ghi) = gaps.split_at_mut(n);
    let (vlo, vhi) = vals.split_at_mut(n);
    let mut gexc = Vec::new();
    let mut vexc = Vec::new();
    for cell in cells {
        let (a, b) = (csr.indptr[cell] as usize, csr.indptr[cell + 1] as usize);
        let mut prev: i64 = -1;
        for j in a..b {
            let (g, v) = (csr.indices[j], csr.values[j]);
            if g as i64 <= prev || g as u32 >= csr.n_genes {
                return Err(Error::invalid_argument(format!(
                    "row {cell}: column index {g} at entry {j} {}",
                    if g < 0 || g as u32 >= csr.n_genes {
                        format!("is outside 0..{}", csr.n_genes)
                    } else {
                        "does not increase (indices must be sorted and unique)".to_string()
                    }
                )));
            }
            if v < 1 {
                return Err(Error::invalid_argument(format!(
                    "row {cell}: count {v} at entry {j}; counts are >= 1 (zeros are not stored)"
                )));
            }
            // The first gap of a cell is its first gene index: cells decode independently.
            let gap = if prev < 0 {
                g as u32
            } else {
                (g as i64 - prev) as u32
            };
            prev = g as i64;
            let p = j - nnz_lo;
            let stored_gap = if gap > ESCAPE as u32 {
                gexc.push((p as u32, gap - ESCAPE as u32));
                ESCAPE
            } else {
                gap as u16
            };
            let stored_val = if v as u32 > ESCAPE as u32 {
                vexc.push((p as u32, v as u32));
                ESCAPE
            } else {
                v as u16
            };
            glo[p] = stored_gap as u8;
            ghi[p] = (stored_gap >> 8) as u8;
            vlo[p] = stored_val as u8;
            vhi[p] = (stored_val >> 8) as u8;
        }
    }
    Ok(ChunkPlanes {
        gaps,
        vals,
        gexc,
        vexc,
    })
}

fn align8(x: usize) -> usize {
    (x + 7) & !7
}

/// Encodes CSR rows into one tile.
pub fn encode_tile(csr: &CsrRef<'_>, opts: EncodeOptions) -> Result<Vec<u8>> {
    check_csr(csr)?;
    let level = if opts.zstd_level == 0 {
        zstd_safe::CLEVEL_DEFAULT
    } else {
        opts.zstd_level
    };
    if !(zstd_safe::min_c_level()..=zstd_safe::max_c_level()).contains(&level) {
        return Err(Error::invalid_argument(format!(
            "zstd level {level} is outside {}..={}",
            zstd_safe::min_c_level(),
            zstd_safe::max_c_level()
        )));
    }
    let n_cells = csr.n_cells();
    let nnz = csr.indptr[n_cells] as u64;
    let requested = if opts.n_chunks == 0 {
        DEFAULT_CHUNKS
    } else {
        opts.n_chunks
    };
    let k = (requested as usize).min(n_cells);
    let bounds = chunk_bounds(csr.indptr, k);
    let threads = pool::resolve_threads(opts.threads).min(k.max(1));

    let ranges: Vec<_> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let planes = pool::map(threads, ranges, |r| build_planes(csr, r))?;
    let limit = exception_limit(nnz);
    for (kind, count) in [
        (
            "count",
            planes.iter().map(|p| p.vexc.len() as u64).sum::<u64>(),
        ),
        (
            "gap",
            planes.iter().map(|p| p.gexc.len() as u64).sum::<u64>(),
        ),
    ] {
        if count > limit {
            return Err(Error::limit(format!(
                "{count} {kind}s above 65535 in one tile of {nnz} nonzeros; the limit is {limit} (max(1024, nnz/200)): this does not look like raw counts"
            )));
        }
    }
    let frames = pool::map(threads, planes, |p| {
        Ok(ChunkFrames {
            gaps: compress(&p.gaps, level)?,
            vals: compress(&p.vals, level)?,
            vexc: exception_frame(&p.vexc, level)?,
            gexc: exception_frame(&p.gexc, level)?,
        })
    })?;

    // Layout: header, chunk table, indptr, then each chunk's streams on 8-byte boundaries.
    let indptr_off = HEADER_SIZE + CHUNK_ENTRY_SIZE * k;
    let mut pos = indptr_off + 8 * (n_cells + 1);
    let mut entries = Vec::with_capacity(k);
    for (j, f) in frames.iter().enumerate() {
        let mut place = |bytes: &Vec<u8>| {
            if bytes.is_empty() {
                return StreamRef::default();
            }
            pos = align8(pos);
            let s = StreamRef {
                off: pos as u64,
                len: bytes.len() as u64,
            };
            pos += bytes.len();
            s
        };
        entries.push(ChunkEntry {
            cell_lo: bounds[j] as u64,
            cell_hi: bounds[j + 1] as u64,
            nnz_lo: csr.indptr[bounds[j]] as u64,
            nnz_hi: csr.indptr[bounds[j + 1]] as u64,
            gaps: place(&f.gaps),
            vals: place(&f.vals),
            vexc: place(&f.vexc),
            gexc: place(&f.gexc),
        });
    }
    let total = pos;
    let mut blob = vec![0u8; total];
    for (j, (e, f)) in entries.iter().zip(&frames).enumerate() {
        let at = HEADER_SIZE + j * CHUNK_ENTRY_SIZE;
        e.write(&mut blob[at..at + CHUNK_ENTRY_SIZE]);
        for (s, bytes) in [
            (e.gaps, &f.gaps),
            (e.vals, &f.vals),
            (e.vexc, &f.vexc),
            (e.gexc, &f.gexc),
        ] {
            blob[s.off as usize..(s.off + s.len) as usize].copy_from_slice(bytes);
        }
    }
    for (i, v) in csr.indptr.iter().enumerate() {
        let at = indptr_off + 8 * i;
        blob[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    let header = TileHeader {
        version: FORMAT_VERSION,
        flags: 0,
        n_cells: n_cells as u64,
        nnz,
        n_genes: csr.n_genes,
        n_chunks: k as u32,
        indptr_off: indptr_off as u64,
        total_size: total as u64,
        crc32: crc32fast::hash(&blob[HEADER_SIZE..]),
        reserved: 0,
    };
    header.write(&mut blob[..HEADER_SIZE]);
    Ok(blob)
}
