//! [`RangedObject`]: one object read by byte ranges, as the Parquet reader's `ChunkReader`.
//!
//! Readers first [`prefetch`](RangedObject::prefetch) what they will need — the footer (the
//! object's tail) once, then the column chunks of the row groups they decode — in one call:
//! ranges less than 1 MiB apart are coalesced into one request and the requests run
//! concurrently. The Parquet decoder then finds every byte it asks for in memory. A read that
//! misses the prefetched segments still works (a ranged GET of at least 256 KiB), so a
//! reader that prefetches too little is slower, never wrong.

use std::io::Read;
use std::ops::Range;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use crate::error::Result;

use super::ObjectRoot;

/// Smallest request made for a read that misses the prefetched segments.
const MISS_READ: u64 = 256 << 10;
/// Tail fetched to find the footer (most footers fit; a longer one costs one more request).
pub const FOOTER_GUESS: u64 = 64 << 10;

/// An object of known size read by ranges; cheap to clone (segments are shared).
#[derive(Clone)]
pub struct RangedObject {
    root: Arc<ObjectRoot>,
    rel: Arc<str>,
    len: u64,
    /// Fetched byte ranges: (start, bytes), sorted by start, not overlapping.
    segments: Arc<RwLock<Vec<(u64, Bytes)>>>,
}

impl std::fmt::Debug for RangedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangedObject")
            .field("url", &self.root.display(&self.rel))
            .field("len", &self.len)
            .finish()
    }
}

impl RangedObject {
    /// `rel` under `root`, `len` bytes long (from a manifest, or [`ObjectRoot::size`]).
    pub fn new(root: Arc<ObjectRoot>, rel: &str, len: u64) -> RangedObject {
        RangedObject {
            root,
            rel: Arc::from(rel),
            len,
            segments: Arc::default(),
        }
    }

    /// `rel` under `root`, its size asked with a HEAD request.
    pub fn open(root: Arc<ObjectRoot>, rel: &str) -> Result<RangedObject> {
        let len = root.size(rel)?;
        Ok(RangedObject::new(root, rel, len))
    }

    pub fn url(&self) -> String {
        self.root.display(&self.rel)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fetches the last `n` bytes (the footer of a Parquet file, usually).
    pub fn prefetch_tail(&self, n: u64) -> Result<()> {
        let n = n.min(self.len);
        self.prefetch(std::iter::once(self.len - n..self.len))
    }

    /// Fetches `ranges` not yet held (coalesced, concurrently), and holds them.
    pub fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        let mut missing: Vec<Range<u64>> = ranges
            .into_iter()
            .map(|r| r.start.min(self.len)..r.end.min(self.len))
            .filter(|r| r.start < r.end && self.find(r.start, (r.end - r.start) as usize).is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_by_key(|r| r.start);
        let got = self.root.get_ranges(&self.rel, missing.clone())?;
        let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
        for (r, b) in missing.into_iter().zip(got) {
            segs.push((r.start, b));
        }
        segs.sort_by_key(|(s, _)| *s);
        Ok(())
    }

    /// Bytes `start .. start + len` if one held segment contains them.
    fn find(&self, start: u64, len: usize) -> Option<Bytes> {
        let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
        let i = segs.partition_point(|(s, _)| *s <= start);
        // Segments may overlap after separate prefetches: look back a few.
        segs[..i].iter().rev().take(8).find_map(|(s, b)| {
            let off = (start - s) as usize;
            (off + len <= b.len()).then(|| b.slice(off..off + len))
        })
    }

    /// Up to `max` bytes from `start` (at least one) out of a held segment containing it.
    fn find_prefix(&self, start: u64, max: usize) -> Option<Bytes> {
        let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
        let i = segs.partition_point(|(s, _)| *s <= start);
        segs[..i].iter().rev().take(8).find_map(|(s, b)| {
            let off = (start - s) as usize;
            (off < b.len()).then(|| b.slice(off..(off + max).min(b.len())))
        })
    }

    /// Bytes `start .. start + len`, from a held segment or fetched (and then held).
    pub fn read_at(&self, start: u64, len: usize) -> Result<Bytes> {
        if let Some(b) = self.find(start, len) {
            return Ok(b);
        }
        let end = (start + (len as u64).max(MISS_READ)).min(self.len);
        self.prefetch(std::iter::once(start..end))?;
        match self.find(start, len) {
            Some(b) => Ok(b),
            None => Err(crate::error::Error::format(format!(
                "{}: read of {len} bytes at {start} past the end ({} bytes)",
                self.url(),
                self.len
            ))),
        }
    }
}

impl Length for RangedObject {
    fn len(&self) -> u64 {
        self.len
    }
}

/// Sequential reads from a position (what the page reader asks for to read page headers).
pub struct RangedRead {
    object: RangedObject,
    pos: u64,
}

impl Read for RangedRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.object.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        // Whatever part of the request a held segment covers, else a fetch.
        let bytes = match self.object.find_prefix(self.pos, n) {
            Some(b) => Ok(b),
            None => self.object.read_at(self.pos, n),
        }
        .map_err(|e| std::io::Error::other(e.message))?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        self.pos += bytes.len() as u64;
        Ok(bytes.len())
    }
}

impl ChunkReader for RangedObject {
    type T = RangedRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangedRead> {
        Ok(RangedRead {
            object: self.clone(),
            pos: start,
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.read_at(start, length)
            .map_err(|e| ParquetError::External(Box::new(e)))
    }
}

/// The byte ranges of the column chunks of `columns` (top-level indices) in `row_groups`.
pub fn column_chunk_ranges(
    meta: &parquet::file::metadata::ParquetMetaData,
    row_groups: &[usize],
    columns: &[usize],
) -> Vec<Range<u64>> {
    let schema = meta.file_metadata().schema_descr();
    let leaves: Vec<usize> = (0..schema.num_columns())
        .filter(|&leaf| columns.contains(&schema.get_column_root_idx(leaf)))
        .collect();
    let mut out = Vec::new();
    for &g in row_groups {
        let rg = meta.row_group(g);
        for &leaf in &leaves {
            let (start, len) = rg.column(leaf).byte_range();
            out.push(start..start + len);
        }
    }
    out
}
