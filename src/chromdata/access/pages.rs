//! The pages of a row group's column chunks, served to the parquet crate's Arrow decoder
//! from memory: each run of adjacent chunks is fetched with one byte-range read (the
//! crate's own sync reader issues a positioned read for every few bytes of every page
//! header: ~95,000 reads for a 1 M-spot store), and ZSTD pages are decompressed with one
//! reused decompression context per thread.
//!
//! Why not the crate's codec: it creates a zstd compression *and* decompression context
//! for every column chunk, and each creation runs `cpuid` three times (zstd's BMI2
//! dispatch). On virtual machines `cpuid` traps to the hypervisor (31 µs each on the
//! project's 2-core VM), which made context creation 7 % of a full read's time. The
//! crate is given the chunk as UNCOMPRESSED (its page reader then hands out the stored page
//! bytes) and [`ZstdPages`] decompresses them. Other codecs keep the crate's own path.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::RowGroups;
use parquet::basic::Compression;
use parquet::column::page::{Page, PageIterator, PageMetadata, PageReader};
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::properties::ReaderProperties;
use parquet::file::serialized_reader::SerializedPageReader;

use crate::parquet_meta::chunks::{check_page_headers, chunk_range, ChunkBytes};

thread_local! {
    /// One zstd decompression context per thread, created on first use.
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    /// Buffers of finished pages and chunks, for the next ones decoded on this thread.
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Bytes kept in one thread's buffer pool at most.
const POOL_BYTES: usize = 16 << 20;

/// A buffer from this thread's pool with room for `n` bytes (empty), or a new one. Pages
/// and column chunks are 64 KiB–1 MiB: fresh ones are each a map / unmap of new memory
/// with a page fault per 4 KiB, which made a tenth of a full read's time.
pub(crate) fn pooled_buffer(n: usize) -> Vec<u8> {
    let reused = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|v| v.capacity() >= n)?;
            Some(p.swap_remove(i))
        })
        .ok()
        .flatten();
    match reused {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(n),
    }
}

/// Frees this thread's pooled buffers (a bulk read's decoding is over: kept, they would
/// sit beside its finished result at the read's peak).
pub(crate) fn release_buffers() {
    let _ = POOL.try_with(|p| std::mem::take(&mut *p.borrow_mut()));
}

/// A buffer's bytes, returned to the pool of the thread that drops them.
pub(crate) struct Pooled(pub(crate) Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        // During thread teardown the pool may be gone: then the buffer is just freed.
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            let held: usize = p.iter().map(Vec::capacity).sum();
            if held + v.capacity() <= POOL_BYTES {
                p.push(v);
            }
        });
    }
}

/// Largest page this reader decompresses without a size in the frame header (pages are
/// at most 2 GiB by the format's i32 sizes).
const MAX_PAGE: usize = i32::MAX as usize;

fn external(e: std::io::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// Decompresses one zstd page (`prefix` uncompressed bytes first: the levels of a v2 page)
/// with this thread's context.
fn unzstd(prefix: &[u8], data: &[u8]) -> PqResult<Bytes> {
    with_zstd(|d| {
        let known = zstd::zstd_safe::get_frame_content_size(data)
            .ok()
            .flatten()
            .filter(|&n| n <= MAX_PAGE as u64)
            .map(|n| n as usize);
        let mut cap = known.unwrap_or_else(|| data.len().saturating_mul(4).max(1 << 16));
        loop {
            let mut out = pooled_buffer(prefix.len() + cap);
            out.extend_from_slice(prefix);
            match d.decompress_to_buffer(data, &mut out) {
                Ok(_) => return Ok(Bytes::from_owner(Pooled(out))),
                // Without a content size (or with several frames) the output may not fit:
                // grow and retry.
                Err(_) if known.is_none() && cap < MAX_PAGE => {
                    cap = cap.saturating_mul(2).min(MAX_PAGE)
                }
                Err(e) => return Err(ParquetError::General(format!("zstd page: {e}"))),
            }
        }
    })
    .map_err(external)?
}

/// Runs `f` with this thread's zstd decompression context (created once per thread:
/// creating one per page or chunk cost more than decompressing small ones).
pub(crate) fn with_zstd<R>(
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> R,
) -> std::io::Result<R> {
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        Ok(f(slot.as_mut().expect("context just created")))
    })
}

/// A page reader over UNCOMPRESSED-labelled zstd pages: decompresses each page it hands out.
struct ZstdPages<R: PageReader> {
    inner: R,
}

impl<R: PageReader> ZstdPages<R> {
    fn decompress(page: Page) -> PqResult<Page> {
        Ok(match page {
            Page::DataPage {
                buf,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            } => Page::DataPage {
                buf: unzstd(&[], &buf)?,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            },
            Page::DataPageV2 {
                buf,
                num_values,
                encoding,
                num_nulls,
                num_rows,
                def_levels_byte_len,
                rep_levels_byte_len,
                is_compressed,
                statistics,
            } => {
                let levels =
                    (def_levels_byte_len as usize).saturating_add(rep_levels_byte_len as usize);
                if levels > buf.len() {
                    return Err(ParquetError::General(
                        "data page v2: level lengths exceed the page".into(),
                    ));
                }
                let buf = if is_compressed && levels < buf.len() {
                    unzstd(&buf[..levels], &buf[levels..])?
                } else {
                    buf
                };
                Page::DataPageV2 {
                    buf,
                    num_values,
                    encoding,
                    num_nulls,
                    num_rows,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    // Decompressed here: the decoder must not try again.
                    is_compressed: false,
                    statistics,
                }
            }
            Page::DictionaryPage {
                buf,
                num_values,
                encoding,
                is_sorted,
            } => Page::DictionaryPage {
                buf: unzstd(&[], &buf)?,
                num_values,
                encoding,
                is_sorted,
            },
        })
    }
}

impl<R: PageReader> Iterator for ZstdPages<R> {
    type Item = PqResult<Page>;
    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<R: PageReader> PageReader for ZstdPages<R> {
    fn get_next_page(&mut self) -> PqResult<Option<Page>> {
        self.inner
            .get_next_page()?
            .map(Self::decompress)
            .transpose()
    }
    fn peek_next_page(&mut self) -> PqResult<Option<PageMetadata>> {
        self.inner.peek_next_page()
    }
    fn skip_next_page(&mut self) -> PqResult<()> {
        self.inner.skip_next_page()
    }
    fn supports_deferred_dictionary(&self) -> bool {
        self.inner.supports_deferred_dictionary()
    }
    fn take_deferred_dictionary(&mut self) -> PqResult<Option<Page>> {
        self.inner
            .take_deferred_dictionary()?
            .map(Self::decompress)
            .transpose()
    }
    fn at_record_boundary(&mut self) -> PqResult<bool> {
        self.inner.at_record_boundary()
    }
}

/// The single page reader of one column chunk, as the decoder's page iterator.
struct OneChunk(Option<Box<dyn PageReader>>);

impl Iterator for OneChunk {
    type Item = PqResult<Box<dyn PageReader>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.take().map(Ok)
    }
}

impl PageIterator for OneChunk {}

/// Column chunks of one row group, in memory.
pub(crate) struct GroupChunks<'a> {
    meta: &'a ParquetMetaData,
    group: usize,
    /// Leaf column → its chunk's bytes.
    chunks: HashMap<usize, ChunkBytes>,
    props: Arc<ReaderProperties>,
}

impl<'a> GroupChunks<'a> {
    /// Fetches the chunks of `leaves` (leaf column indices) of row group `group`, with one
    /// `read(start, buffer, len)` (fills `buffer` with `len` bytes at `start`) per run of
    /// adjacent chunks, and walks their page headers.
    pub(crate) fn fetch(
        meta: &'a ParquetMetaData,
        group: usize,
        leaves: &[usize],
        read: impl Fn(u64, &mut Vec<u8>, usize) -> std::io::Result<()>,
    ) -> PqResult<GroupChunks<'a>> {
        let rg = meta.row_group(group);
        let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(leaves.len());
        for &leaf in leaves {
            let c = rg.columns().get(leaf).ok_or_else(|| {
                ParquetError::General(format!("row group {group} has no column {leaf}"))
            })?;
            let (start, len) = chunk_range(c)?;
            ranges.push((start, start + len, leaf));
        }
        ranges.sort_unstable();
        let mut chunks = HashMap::with_capacity(ranges.len());
        let mut i = 0;
        while i < ranges.len() {
            // A run of chunks that touch or overlap: one read.
            let (start, mut end) = (ranges[i].0, ranges[i].1);
            let mut j = i + 1;
            while j < ranges.len() && ranges[j].0 <= end {
                end = end.max(ranges[j].1);
                j += 1;
            }
            let len = usize::try_from(end - start)
                .map_err(|_| ParquetError::General("column chunk too large".into()))?;
            let mut buf = pooled_buffer(len);
            read(start, &mut buf, len).map_err(external)?;
            let data = Bytes::from_owner(Pooled(buf));
            for &(s, e, leaf) in &ranges[i..j] {
                let part = data.slice((s - start) as usize..(e - start) as usize);
                // Every page header the decoder will parse, walked first (crate::parquet_meta).
                check_page_headers(&part).map_err(|e| {
                    let column = rg.column(leaf).column_path().string();
                    ParquetError::General(format!("column \"{column}\": {e}"))
                })?;
                chunks.insert(
                    leaf,
                    ChunkBytes {
                        start: s,
                        data: part,
                    },
                );
            }
            i = j;
        }
        Ok(GroupChunks {
            meta,
            group,
            chunks,
            props: Arc::new(ReaderProperties::builder().build()),
        })
    }
}

impl GroupChunks<'_> {
    /// The bytes of leaf column `leaf`'s chunk, if fetched.
    pub(crate) fn chunk(&self, leaf: usize) -> Option<&[u8]> {
        self.chunks.get(&leaf).map(|c| c.data.as_ref())
    }
}

impl RowGroups for GroupChunks<'_> {
    fn num_rows(&self) -> usize {
        self.meta.row_group(self.group).num_rows().max(0) as usize
    }

    fn column_chunks(&self, i: usize) -> PqResult<Box<dyn PageIterator>> {
        let bytes = self
            .chunks
            .get(&i)
            .cloned()
            .ok_or_else(|| ParquetError::General(format!("column {i} was not fetched")))?;
        let meta = self.meta.row_group(self.group).column(i);
        let rows = self.num_rows();
        let reader: Box<dyn PageReader> = if matches!(meta.compression(), Compression::ZSTD(_)) {
            let plain = meta
                .clone()
                .into_builder()
                .set_compression(Compression::UNCOMPRESSED)
                .build()?;
            Box::new(ZstdPages {
                inner: SerializedPageReader::new_with_properties(
                    Arc::new(bytes),
                    &plain,
                    rows,
                    None,
                    self.props.clone(),
                )?,
            })
        } else {
            Box::new(SerializedPageReader::new_with_properties(
                Arc::new(bytes),
                meta,
                rows,
                None,
                self.props.clone(),
            )?)
        };
        Ok(Box::new(OneChunk(Some(reader))))
    }

    fn row_groups(&self) -> Box<dyn Iterator<Item = &RowGroupMetaData> + '_> {
        Box::new(std::iter::once(self.meta.row_group(self.group)))
    }

    fn metadata(&self) -> &ParquetMetaData {
        self.meta
    }
}
