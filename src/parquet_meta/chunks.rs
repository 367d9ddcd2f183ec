//! Column chunks held in memory, their page headers walked before the parquet crate decodes
//! them ([`footer::page_header`](super::footer::page_header): the crate's own Thrift
//! skipping can loop for minutes on a damaged header, see [`super::footer`]).

use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::reader::{ChunkReader, Length};

use super::footer::page_header;
use crate::error::{Error, Result};

/// Bytes of a file from `start` on (one or more adjacent column chunks), addressed by file
/// offsets as the crate's page reader asks for them.
#[derive(Clone)]
pub(crate) struct ChunkBytes {
    pub(crate) start: u64,
    pub(crate) data: Bytes,
}

impl ChunkBytes {
    fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    fn range(&self, start: u64, len: usize) -> PqResult<std::ops::Range<usize>> {
        let s = start.checked_sub(self.start).map(|s| s as usize);
        match s {
            Some(s) if s.checked_add(len).is_some_and(|e| e <= self.data.len()) => Ok(s..s + len),
            _ => Err(ParquetError::EOF(format!(
                "page at file offset {start} ({len} bytes) lies outside its column chunk"
            ))),
        }
    }
}

impl Length for ChunkBytes {
    fn len(&self) -> u64 {
        self.end()
    }
}

impl ChunkReader for ChunkBytes {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> PqResult<Self::T> {
        let r = self.range(start, 0)?;
        Ok(bytes::Buf::reader(self.data.slice(r.start..)))
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        Ok(self.data.slice(self.range(start, length)?))
    }
}

/// File byte range of a column chunk: (start, length). The crate's `byte_range` panics on
/// negative values, which a damaged footer can hold.
pub(crate) fn chunk_range(c: &ColumnChunkMetaData) -> PqResult<(u64, u64)> {
    let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
    let len = c.compressed_size();
    if start < 0 || len < 0 {
        return Err(ParquetError::General(format!(
            "column chunk with negative offset {start} or size {len}"
        )));
    }
    Ok((start as u64, len as u64))
}

/// Walks the header of every page of a column chunk's bytes: each must be whole and
/// well-formed, and the pages must tile the chunk exactly. The message names the page.
pub(crate) fn check_page_headers(chunk: &[u8]) -> std::result::Result<(), String> {
    let mut pos = 0usize;
    while pos < chunk.len() {
        let at = |e: &dyn std::fmt::Display| format!("page at byte {pos} of the column chunk: {e}");
        let (header, size) = page_header(&chunk[pos..]).map_err(|e| at(&e.message))?;
        pos = pos
            .checked_add(header)
            .and_then(|p| p.checked_add(size))
            .filter(|&end| end <= chunk.len())
            .ok_or_else(|| {
                at(&format_args!(
                    "{size} bytes after a {header}-byte header run past the chunk's {} bytes",
                    chunk.len()
                ))
            })?;
    }
    Ok(())
}

/// The column chunks a projection reads from a file, fetched (one read each) and their page
/// headers walked: what the crate's decoder reads through [`ChunkReader`], from memory.
pub(crate) struct CheckedChunks {
    /// Sorted by start.
    chunks: Vec<ChunkBytes>,
    len: u64,
}

impl CheckedChunks {
    /// Fetches from `source` the chunk of every leaf column in `mask` of every row group of
    /// `meta`, walking each one's page headers. `what` names the file in errors.
    pub(crate) fn fetch<R: ChunkReader>(
        source: &R,
        meta: &ParquetMetaData,
        mask: &ProjectionMask,
        what: &str,
    ) -> Result<CheckedChunks> {
        let bad = |e: &dyn std::fmt::Display| Error::format(format!("{what}: {e}"));
        let mut chunks = Vec::new();
        for (g, rg) in meta.row_groups().iter().enumerate() {
            for (c, col) in rg.columns().iter().enumerate() {
                if !mask.leaf_included(c) {
                    continue;
                }
                let name = col.column_path().string();
                let in_chunk = |e: &dyn std::fmt::Display| {
                    bad(&format_args!("column \"{name}\" of row group {g}: {e}"))
                };
                let (start, len) = chunk_range(col).map_err(|e| in_chunk(&e))?;
                let len = usize::try_from(len).map_err(|e| in_chunk(&e))?;
                if start
                    .checked_add(len as u64)
                    .is_none_or(|end| end > source.len())
                {
                    return Err(in_chunk(&format_args!(
                        "{len} bytes at {start} lie past the file's end ({} bytes)",
                        source.len()
                    )));
                }
                let data = source.get_bytes(start, len).map_err(|e| in_chunk(&e))?;
                check_page_headers(&data).map_err(|e| in_chunk(&e))?;
                chunks.push(ChunkBytes { start, data });
            }
        }
        chunks.sort_unstable_by_key(|c| c.start);
        Ok(CheckedChunks {
            chunks,
            len: source.len(),
        })
    }

    /// The fetched chunk holding file offset `start`.
    fn holding(&self, start: u64) -> PqResult<&ChunkBytes> {
        let i = self.chunks.partition_point(|c| c.start <= start);
        i.checked_sub(1)
            .map(|i| &self.chunks[i])
            .filter(|c| start < c.end() || (start == c.end() && c.data.is_empty()))
            .ok_or_else(|| {
                ParquetError::EOF(format!(
                    "file offset {start} lies outside the column chunks read"
                ))
            })
    }
}

impl Length for CheckedChunks {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for CheckedChunks {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> PqResult<Self::T> {
        self.holding(start)?.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        self.holding(start)?.get_bytes(start, length)
    }
}
