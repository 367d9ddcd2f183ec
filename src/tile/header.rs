//! The fixed-size parts of a tile: the 64-byte header and the 96-byte chunk table entries.

use crate::error::{Error, Result};

pub const MAGIC: &[u8; 8] = b"DELTACEL";
pub const FORMAT_VERSION: u32 = 2;
pub const HEADER_SIZE: usize = 64;
pub const CHUNK_ENTRY_SIZE: usize = 96;
/// Largest `n_genes` a version-2 tile may declare (decoded indices are int32).
pub const MAX_GENES: u64 = 1 << 31;
/// Largest count a tile can hold (decoded values are int32).
pub const MAX_COUNT: u32 = i32::MAX as u32;
/// A stored uint16 of this value may stand for a larger gap or count (an exception).
pub const ESCAPE: u16 = u16::MAX;

/// The 64-byte tile header, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileHeader {
    pub version: u32,
    pub flags: u32,
    pub n_cells: u64,
    pub nnz: u64,
    pub n_genes: u32,
    pub n_chunks: u32,
    pub indptr_off: u64,
    pub total_size: u64,
    pub crc32: u32,
    pub reserved: u32,
}

/// One chunk table entry: a contiguous range of cells and nonzeros and where its streams are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkEntry {
    pub cell_lo: u64,
    pub cell_hi: u64,
    pub nnz_lo: u64,
    pub nnz_hi: u64,
    pub gaps: StreamRef,
    pub vals: StreamRef,
    pub vexc: StreamRef,
    pub gexc: StreamRef,
}

/// Location of one compressed stream inside the tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamRef {
    pub off: u64,
    pub len: u64,
}

impl ChunkEntry {
    /// Nonzeros in the chunk.
    pub fn nnz(&self) -> u64 {
        self.nnz_hi - self.nnz_lo
    }
}

pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub(crate) fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl TileHeader {
    /// Parses the header bytes without judging them (see `tile::inspect` for the checks).
    pub fn parse(blob: &[u8]) -> Result<TileHeader> {
        if blob.len() < HEADER_SIZE {
            return Err(Error::format(format!(
                "tile is {} bytes, shorter than the {HEADER_SIZE}-byte header",
                blob.len()
            )));
        }
        if &blob[0..8] != MAGIC {
            return Err(Error::format("bad magic: not a deltacells tile"));
        }
        Ok(TileHeader {
            version: read_u32(blob, 8),
            flags: read_u32(blob, 12),
            n_cells: read_u64(blob, 16),
            nnz: read_u64(blob, 24),
            n_genes: read_u32(blob, 32),
            n_chunks: read_u32(blob, 36),
            indptr_off: read_u64(blob, 40),
            total_size: read_u64(blob, 48),
            crc32: read_u32(blob, 56),
            reserved: read_u32(blob, 60),
        })
    }

    pub fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..24].copy_from_slice(&self.n_cells.to_le_bytes());
        out[24..32].copy_from_slice(&self.nnz.to_le_bytes());
        out[32..36].copy_from_slice(&self.n_genes.to_le_bytes());
        out[36..40].copy_from_slice(&self.n_chunks.to_le_bytes());
        out[40..48].copy_from_slice(&self.indptr_off.to_le_bytes());
        out[48..56].copy_from_slice(&self.total_size.to_le_bytes());
        out[56..60].copy_from_slice(&self.crc32.to_le_bytes());
        out[60..64].copy_from_slice(&self.reserved.to_le_bytes());
    }
}

impl ChunkEntry {
    pub fn parse(b: &[u8]) -> ChunkEntry {
        let f = |i: usize| read_u64(b, i * 8);
        ChunkEntry {
            cell_lo: f(0),
            cell_hi: f(1),
            nnz_lo: f(2),
            nnz_hi: f(3),
            gaps: StreamRef {
                off: f(4),
                len: f(5),
            },
            vals: StreamRef {
                off: f(6),
                len: f(7),
            },
            vexc: StreamRef {
                off: f(8),
                len: f(9),
            },
            gexc: StreamRef {
                off: f(10),
                len: f(11),
            },
        }
    }

    pub fn write(&self, out: &mut [u8]) {
        let fields = [
            self.cell_lo,
            self.cell_hi,
            self.nnz_lo,
            self.nnz_hi,
            self.gaps.off,
            self.gaps.len,
            self.vals.off,
            self.vals.len,
            self.vexc.off,
            self.vexc.len,
            self.gexc.off,
            self.gexc.len,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}
