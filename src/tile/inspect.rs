//! Structural validation of a tile: everything a reader must check before decompressing.
//! `Tile::parse` either returns a view whose header, chunk table, indptr and frame headers
//! are consistent, or the precise error.

use crate::error::{Error, Result};

use super::header::*;

/// zstd cannot expand a frame more than this: a 4-byte RLE block yields at most one
/// 128 KiB block. Bounding claimed sizes by it means no header field can make us allocate
/// more than a fixed multiple of the input's size.
const ZSTD_MAX_BLOCK: u128 = 128 * 1024;

fn max_frame_content(len: u64) -> u128 {
    (len as u128 / 4 + 1) * ZSTD_MAX_BLOCK
}

/// A tile whose structure has been validated. Borrowed from the blob.
#[derive(Debug, Clone)]
pub struct Tile<'a> {
    blob: &'a [u8],
    pub header: TileHeader,
    pub chunks: Vec<ChunkEntry>,
    /// Value and gap exceptions of all chunks (from the exception frames' headers).
    pub n_exceptions: u64,
}

/// The summary `dc_tile_inspect` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileInfo {
    pub version: u32,
    pub n_chunks: u32,
    pub n_cells: u64,
    pub nnz: u64,
    pub n_genes: u32,
    pub n_exceptions: u64,
    pub total_size: u64,
}

/// Which stream of a chunk a frame is, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Gaps,
    Vals,
    Vexc,
    Gexc,
}

impl StreamKind {
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Gaps => "gaps",
            StreamKind::Vals => "vals",
            StreamKind::Vexc => "vexc",
            StreamKind::Gexc => "gexc",
        }
    }
}

fn refuse_big_endian() -> Result<()> {
    if cfg!(target_endian = "big") {
        return Err(Error::unsupported(
            "deltacells tiles are little-endian; this build runs on a big-endian host",
        ));
    }
    Ok(())
}

/// Checks the header fields that do not depend on the chunks against an object of `size`
/// bytes. Returns the end of the indptr: bytes `[0, indptr_end)` hold header, chunk table
/// and indptr, everything needed to locate cells (see `TileIndex`).
fn check_header(h: &TileHeader, size: u64) -> Result<u64> {
    refuse_big_endian()?;
    if h.version != FORMAT_VERSION {
        return Err(Error::unsupported(format!(
            "tile format version {} (byte 8); this build reads version {FORMAT_VERSION}",
            h.version
        )));
    }
    if h.flags != 0 {
        return Err(Error::unsupported(format!(
            "unknown tile flags 0x{:08x} (byte 12); version 2 defines none",
            h.flags
        )));
    }
    if h.reserved != 0 {
        return Err(Error::format(format!(
            "reserved header field (byte 60) is {}, must be 0",
            h.reserved
        )));
    }
    if h.total_size != size {
        return Err(Error::format(format!(
            "total_size (byte 48) is {} but the object is {size} bytes{}",
            h.total_size,
            if h.total_size > size {
                " (truncated)"
            } else {
                " (trailing bytes)"
            }
        )));
    }
    if h.n_genes == 0 || h.n_genes as u64 > MAX_GENES {
        return Err(Error::format(format!(
            "n_genes (byte 32) is {}, must be in 1..2^31",
            h.n_genes
        )));
    }
    let table_end = HEADER_SIZE as u64 + CHUNK_ENTRY_SIZE as u64 * h.n_chunks as u64;
    if table_end > size {
        return Err(Error::format(format!(
            "chunk table of {} entries (n_chunks, byte 36) ends at byte {table_end}, past the end of the {size}-byte tile",
            h.n_chunks
        )));
    }
    if !h.indptr_off.is_multiple_of(8) {
        return Err(Error::format(format!(
            "indptr_off (byte 40) is {}, not a multiple of 8",
            h.indptr_off
        )));
    }
    if h.indptr_off < table_end {
        return Err(Error::format(format!(
            "indptr_off (byte 40) is {}, inside the chunk table that ends at byte {table_end}",
            h.indptr_off
        )));
    }
    let indptr_end = h
        .n_cells
        .checked_add(1)
        .and_then(|n| n.checked_mul(8))
        .and_then(|b| b.checked_add(h.indptr_off))
        .filter(|&e| e <= size)
        .ok_or_else(|| {
            Error::format(format!(
                "indptr of {} cells (n_cells, byte 16) at byte {} runs past the end of the {size}-byte tile",
                h.n_cells, h.indptr_off
            ))
        })?;
    if h.n_cells == 0 && h.n_chunks != 0 {
        return Err(Error::format(format!(
            "a tile with zero cells has zero chunks, this one declares {}",
            h.n_chunks
        )));
    }
    if h.n_cells > 0 && h.n_chunks == 0 {
        return Err(Error::format(format!(
            "tile of {} cells has no chunks",
            h.n_cells
        )));
    }
    Ok(indptr_end)
}

/// Parses chunk table entry `c` (its bytes at `at`) and checks what needs no stream bytes:
/// it starts where the previous chunk ended (`cell`, `nz`), its ranges, and that each frame
/// it locates starts on an 8-byte boundary within the stream area `[indptr_end, size)`.
fn check_entry(
    h: &TileHeader,
    c: usize,
    at: usize,
    bytes: &[u8],
    (cell, nz): (u64, u64),
    indptr_end: u64,
) -> Result<ChunkEntry> {
    let e = ChunkEntry::parse(bytes);
    let fail =
        |rule: String| Error::format(format!("chunk {c} (table entry at byte {at}): {rule}"));
    if e.cell_lo != cell || e.nnz_lo != nz {
        return Err(fail(format!(
            "starts at cell {} / nonzero {}, previous chunk ended at cell {cell} / nonzero {nz}",
            e.cell_lo, e.nnz_lo
        )));
    }
    if e.cell_hi < e.cell_lo || e.cell_hi > h.n_cells {
        return Err(fail(format!(
            "cell range {}..{} is not within 0..{} (n_cells)",
            e.cell_lo, e.cell_hi, h.n_cells
        )));
    }
    if e.nnz_hi < e.nnz_lo || e.nnz_hi > h.nnz {
        return Err(fail(format!(
            "nonzero range {}..{} is not within 0..{} (nnz)",
            e.nnz_lo, e.nnz_hi, h.nnz
        )));
    }
    if e.nnz() >= 1 << 32 {
        return Err(fail(format!(
            "{} nonzeros; a chunk holds fewer than 2^32",
            e.nnz()
        )));
    }
    for (kind, s) in streams(&e) {
        if matches!(kind, StreamKind::Vexc | StreamKind::Gexc) && s.len == 0 {
            continue;
        }
        let rule = |r: &str| fail(format!("{} frame at byte {}: {r}", kind.name(), s.off));
        if !s.off.is_multiple_of(8) {
            return Err(rule("does not start on an 8-byte boundary"));
        }
        if s.off < indptr_end
            || s.off
                .checked_add(s.len)
                .is_none_or(|end| end > h.total_size)
        {
            return Err(rule(&format!(
                "{} bytes are not within the stream area [{indptr_end}, {})",
                s.len, h.total_size
            )));
        }
    }
    Ok(e)
}

/// Checks the chunks together (they end at n_cells / nnz) and the indptr (`indptr(i)` is
/// entry i): starts at 0, never decreases, ends at nnz, agrees with every chunk's range.
fn check_indptr(h: &TileHeader, chunks: &[ChunkEntry], indptr: impl Fn(u64) -> i64) -> Result<()> {
    let (cell, nz) = chunks.last().map_or((0, 0), |e| (e.cell_hi, e.nnz_hi));
    if cell != h.n_cells || nz != h.nnz {
        return Err(Error::format(format!(
            "chunks end at cell {cell} / nonzero {nz}, the tile has {} cells / {} nonzeros",
            h.n_cells, h.nnz
        )));
    }
    let first = indptr(0);
    if first != 0 {
        return Err(Error::format(format!(
            "indptr[0] (byte {}) is {first}, must be 0",
            h.indptr_off
        )));
    }
    let mut prev = 0i64;
    for i in 1..=h.n_cells {
        let v = indptr(i);
        if v < prev {
            return Err(Error::format(format!(
                "indptr decreases at cell {} ({} -> {v}, byte {})",
                i - 1,
                prev,
                h.indptr_off + 8 * i
            )));
        }
        prev = v;
    }
    if prev as u64 != h.nnz {
        return Err(Error::format(format!(
            "indptr[n_cells] is {prev}, the header says nnz = {}",
            h.nnz
        )));
    }
    for (c, e) in chunks.iter().enumerate() {
        let (lo, hi) = (indptr(e.cell_lo), indptr(e.cell_hi));
        if lo as u64 != e.nnz_lo || hi as u64 != e.nnz_hi {
            return Err(Error::format(format!(
                "chunk {c}: indptr[{}..={}] = {lo}..{hi} disagrees with the chunk's nonzeros {}..{}",
                e.cell_lo, e.cell_hi, e.nnz_lo, e.nnz_hi
            )));
        }
    }
    Ok(())
}

/// The four streams of a chunk, in table order.
fn streams(e: &ChunkEntry) -> [(StreamKind, StreamRef); 4] {
    [
        (StreamKind::Gaps, e.gaps),
        (StreamKind::Vals, e.vals),
        (StreamKind::Vexc, e.vexc),
        (StreamKind::Gexc, e.gexc),
    ]
}

fn le_i64(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What locates a tile's cells without its streams: header, chunk table and indptr (the
/// tile's first `indptr_end` bytes), validated as far as they go. The frames and the CRC,
/// which covers the whole tile, are checked when the tile itself is read (`Tile::parse`).
#[derive(Debug, Clone)]
pub struct TileIndex {
    pub header: TileHeader,
    pub chunks: Vec<ChunkEntry>,
    pub indptr: Vec<i64>,
}

impl TileIndex {
    /// From the first 64 bytes of a tile of `size` bytes: how many leading bytes `parse`
    /// needs (the end of the indptr), after checking the header.
    pub fn prefix_len(header: &[u8], size: u64) -> Result<u64> {
        check_header(&TileHeader::parse(header)?, size)
    }

    /// Parses and checks the leading `prefix_len` bytes of a tile of `size` bytes.
    pub fn parse(prefix: &[u8], size: u64) -> Result<TileIndex> {
        let h = TileHeader::parse(prefix)?;
        let indptr_end = check_header(&h, size)?;
        if (prefix.len() as u64) < indptr_end {
            return Err(Error::format(format!(
                "{} leading bytes given, the header, chunk table and indptr end at byte {indptr_end}",
                prefix.len()
            )));
        }
        let mut chunks = Vec::with_capacity(h.n_chunks as usize);
        let mut end = (0u64, 0u64);
        for c in 0..h.n_chunks as usize {
            let at = HEADER_SIZE + c * CHUNK_ENTRY_SIZE;
            let e = check_entry(
                &h,
                c,
                at,
                &prefix[at..at + CHUNK_ENTRY_SIZE],
                end,
                indptr_end,
            )?;
            end = (e.cell_hi, e.nnz_hi);
            chunks.push(e);
        }
        let at = h.indptr_off as usize;
        let indptr: Vec<i64> = (0..=h.n_cells as usize)
            .map(|i| le_i64(prefix, at + 8 * i))
            .collect();
        check_indptr(&h, &chunks, |i| indptr[i as usize])?;
        Ok(TileIndex {
            header: h,
            chunks,
            indptr,
        })
    }

    /// The chunk holding cell `cell` (< n_cells): the last chunk starting at or before it.
    /// Chunks of zero cells are never chosen.
    pub fn chunk_of(&self, cell: u64) -> usize {
        self.chunks.partition_point(|e| e.cell_hi <= cell)
    }

    /// Bytes this index occupies in memory (for cache budgets).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.chunks.len() * std::mem::size_of::<ChunkEntry>()
            + self.indptr.len() * 8
    }
}

impl<'a> Tile<'a> {
    /// Validates header, chunk table, indptr, the frame headers of every stream, and
    /// (if `verify_crc`) the CRC-32.
    pub fn parse(blob: &'a [u8], verify_crc: bool) -> Result<Tile<'a>> {
        let h = TileHeader::parse(blob)?;
        let size = blob.len() as u64;
        let indptr_end = check_header(&h, size)?;
        if verify_crc {
            let crc = crc32fast::hash(&blob[HEADER_SIZE..]);
            if crc != h.crc32 {
                return Err(Error::checksum(format!(
                    "CRC-32 of bytes [64, {size}) is 0x{crc:08x}, header (byte 56) says 0x{:08x}",
                    h.crc32
                )));
            }
        }

        let mut tile = Tile {
            blob,
            header: h,
            chunks: Vec::with_capacity(h.n_chunks as usize),
            n_exceptions: 0,
        };
        let mut end = (0u64, 0u64);
        for c in 0..h.n_chunks as usize {
            let at = HEADER_SIZE + c * CHUNK_ENTRY_SIZE;
            let e = check_entry(&h, c, at, &blob[at..at + CHUNK_ENTRY_SIZE], end, indptr_end)?;
            let n = e.nnz();
            for (kind, s) in streams(&e) {
                let exception = matches!(kind, StreamKind::Vexc | StreamKind::Gexc);
                if exception && s.len == 0 {
                    continue;
                }
                let content = tile.check_frame(c, at, kind, s)?;
                let rule = |r: String| {
                    Error::format(format!(
                        "chunk {c} (table entry at byte {at}): {} frame at byte {}: {r}",
                        kind.name(),
                        s.off
                    ))
                };
                if exception {
                    if !content.is_multiple_of(8) || content / 8 > n {
                        return Err(rule(format!(
                            "holds {content} bytes; an exception frame holds 8*k bytes with k <= {n} (the chunk's nonzeros)"
                        )));
                    }
                    tile.n_exceptions += content / 8;
                } else if content != 2 * n {
                    return Err(rule(format!(
                        "declares {content} bytes; a chunk of {n} nonzeros needs exactly {}",
                        2 * n
                    )));
                }
            }
            end = (e.cell_hi, e.nnz_hi);
            tile.chunks.push(e);
        }
        check_indptr(&h, &tile.chunks, |i| tile.indptr(i))?;
        Ok(tile)
    }

    /// A view of `blob` from the parts an earlier `Tile::parse` of the same bytes returned
    /// (nothing is checked again; other parts make a view whose reads fail or mislead).
    pub fn from_parts(
        blob: &'a [u8],
        header: TileHeader,
        chunks: Vec<ChunkEntry>,
        n_exceptions: u64,
    ) -> Tile<'a> {
        Tile {
            blob,
            header,
            chunks,
            n_exceptions,
        }
    }

    /// A stream (located by `check_entry`) must be one zstd frame of exactly its length
    /// that declares its content size. Returns that size.
    fn check_frame(
        &self,
        chunk: usize,
        entry_at: usize,
        kind: StreamKind,
        s: StreamRef,
    ) -> Result<u64> {
        let rule = |r: String| {
            Error::format(format!(
                "chunk {chunk} (table entry at byte {entry_at}): {} frame at byte {}: {r}",
                kind.name(),
                s.off
            ))
        };
        let frame = self.bytes(s);
        let content = match zstd::zstd_safe::get_frame_content_size(frame) {
            Ok(Some(n)) => n,
            Ok(None) => return Err(rule("zstd frame does not declare its content size".into())),
            Err(_) => return Err(rule("not a zstd frame".into())),
        };
        match zstd::zstd_safe::find_frame_compressed_size(frame) {
            Ok(n) if n as u64 == s.len => {}
            Ok(n) => {
                return Err(rule(format!(
                    "the zstd frame is {n} bytes but the stream is {} (one frame per stream)",
                    s.len
                )))
            }
            Err(_) => return Err(rule("truncated or corrupt zstd frame".into())),
        }
        if content as u128 > max_frame_content(s.len) {
            return Err(rule(format!(
                "claims {content} bytes, more than a {}-byte zstd frame can hold",
                s.len
            )));
        }
        Ok(content)
    }

    /// indptr[i] (i <= n_cells), read from the blob (which need not be 8-byte aligned).
    #[inline]
    pub fn indptr(&self, i: u64) -> i64 {
        let at = (self.header.indptr_off + 8 * i) as usize;
        i64::from_le_bytes(self.blob[at..at + 8].try_into().unwrap())
    }

    /// The stored indptr, `(n_cells + 1) * 8` little-endian bytes.
    pub fn indptr_bytes(&self) -> &'a [u8] {
        let at = self.header.indptr_off as usize;
        &self.blob[at..at + 8 * (self.header.n_cells as usize + 1)]
    }

    /// The bytes of a stream (already checked to lie within the blob).
    pub fn bytes(&self, s: StreamRef) -> &'a [u8] {
        &self.blob[s.off as usize..(s.off + s.len) as usize]
    }

    /// The table entry and indptr agree with an index read of the same tile earlier (the
    /// object did not change in between).
    pub fn agrees_with(&self, index: &TileIndex) -> bool {
        self.header == index.header
            && self.chunks == index.chunks
            && self
                .indptr_bytes()
                .chunks_exact(8)
                .zip(&index.indptr)
                .all(|(b, &v)| le_i64(b, 0) == v)
    }

    pub fn info(&self) -> TileInfo {
        TileInfo {
            version: self.header.version,
            n_chunks: self.header.n_chunks,
            n_cells: self.header.n_cells,
            nnz: self.header.nnz,
            n_genes: self.header.n_genes,
            n_exceptions: self.n_exceptions,
            total_size: self.header.total_size,
        }
    }
}

/// Validates a tile and summarizes it (no decompression).
pub fn inspect(blob: &[u8], verify_crc: bool) -> Result<TileInfo> {
    Ok(Tile::parse(blob, verify_crc)?.info())
}
