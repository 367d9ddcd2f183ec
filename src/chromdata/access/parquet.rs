//! Parquet files of a store: footers read once at open, row groups decoded on demand with
//! column projection, a small cache of the last decoded row groups per file, and a counter
//! of row-group decodes (tests use it to check that only needed groups are read).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;

use super::store::{FileSlice, Store};
use crate::chromdata::values::normalise;
use crate::contain;
use crate::error::{Error, Result};

/// Decoded row groups kept per file (sequential iteration decodes each group once).
const CACHE_PER_FILE: usize = 2;

type CacheEntry = (usize, Vec<usize>, RecordBatch);

/// A Parquet file of a store, its footer read.
pub(crate) struct ParquetFile {
    slice: FileSlice,
    meta: ArrowReaderMetadata,
    /// Store path + relative path, for messages.
    pub(crate) path: String,
    /// Store-relative path (`tables/...`).
    pub(crate) rel: String,
    cache: Mutex<VecDeque<CacheEntry>>,
    reads: Arc<AtomicU64>,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFile")
            .field("path", &self.path)
            .finish()
    }
}

fn pq_err(path: &str, e: impl std::fmt::Display) -> Error {
    Error::format(format!("{path}: {e}"))
}

impl ParquetFile {
    /// Opens `path` (store-relative) and reads its footer. Missing → NotFound; no valid
    /// footer (e.g. a truncated file) → Format.
    pub(crate) fn open(store: &Store, path: &str, reads: Arc<AtomicU64>) -> Result<ParquetFile> {
        let slice = store.slice(path)?;
        let full = format!("{}/{path}", store.display);
        // Readers must use the Parquet logical types, not the stored Arrow schema (§6.2).
        let opts = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let meta = contain::decoding(&full, || {
            ArrowReaderMetadata::load(&slice, opts)
                .map_err(|e| pq_err(&full, format_args!("no valid Parquet footer ({e})")))
        })?;
        Ok(ParquetFile {
            slice,
            meta,
            path: full,
            rel: path.to_string(),
            cache: Mutex::new(VecDeque::new()),
            reads: reads.clone(),
        })
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        self.meta.schema()
    }

    pub(crate) fn num_rows(&self) -> u64 {
        self.meta.metadata().file_metadata().num_rows().max(0) as u64
    }

    pub(crate) fn row_group_rows(&self) -> Vec<u64> {
        self.meta
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows().max(0) as u64)
            .collect()
    }

    /// Top-level column index of `name`.
    pub(crate) fn column(&self, name: &str) -> Result<usize> {
        self.schema().index_of(name).map_err(|_| {
            Error::format(format!(
                "{}: column \"{name}\" listed in the metadata is not in the file",
                self.path
            ))
        })
    }

    fn build(
        &self,
        groups: Option<Vec<usize>>,
        cols: Option<&[usize]>,
    ) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
        let mut b = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.slice.clone(),
            self.meta.clone(),
        )
        .with_batch_size(64 * 1024);
        if let Some(g) = groups {
            b = b.with_row_groups(g);
        }
        if let Some(c) = cols {
            let mask = ProjectionMask::roots(self.meta.parquet_schema(), c.iter().copied());
            b = b.with_projection(mask);
        }
        contain::decoding(&self.path, || b.build().map_err(|e| pq_err(&self.path, e)))
    }

    fn collect(
        &self,
        reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
        schema: SchemaRef,
    ) -> Result<RecordBatch> {
        let batches = contain::decoding(&self.path, || {
            reader
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| pq_err(&self.path, format_args!("cannot decode: {e}")))
        })?;
        arrow_select::concat::concat_batches(&schema, &batches).map_err(|e| pq_err(&self.path, e))
    }

    /// Row group `g` with `cols` from the per-file cache, if there.
    pub(crate) fn cached(&self, g: usize, cols: &[usize]) -> Option<RecordBatch> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .iter()
            .find(|(cg, cc, _)| *cg == g && cc == cols)
            .map(|(_, _, b)| b.clone())
    }

    /// Puts a decoded row group into the per-file cache (the oldest entry leaves).
    pub(crate) fn remember(&self, g: usize, cols: &[usize], batch: RecordBatch) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_PER_FILE {
            cache.pop_front();
        }
        cache.push_back((g, cols.to_vec(), batch));
    }

    /// Decodes row group `g` with `cols` (in that order), bypassing the cache; safe to call
    /// from several threads at once.
    pub(crate) fn decode_group(&self, g: usize, cols: &[usize]) -> Result<RecordBatch> {
        let n_groups = self.meta.metadata().num_row_groups();
        if g >= n_groups {
            return Err(Error::format(format!(
                "{}: row group {g} requested, file has {n_groups}",
                self.path
            )));
        }
        // The projection returns columns in file order; reorder to the caller's order.
        let mut sorted: Vec<usize> = cols.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let proj_schema = Arc::new(
            self.schema()
                .project(&sorted)
                .map_err(|e| pq_err(&self.path, e))?,
        );
        self.reads.fetch_add(1, Ordering::Relaxed);
        let batch = self.collect(self.build(Some(vec![g]), Some(&sorted))?, proj_schema)?;
        let expected = self.meta.metadata().row_group(g).num_rows().max(0) as usize;
        if batch.num_rows() != expected {
            return Err(Error::format(format!(
                "{}: row group {g} decoded {} rows, footer says {expected}",
                self.path,
                batch.num_rows()
            )));
        }
        let order: Vec<usize> = cols
            .iter()
            .map(|c| sorted.binary_search(c).expect("column present"))
            .collect();
        batch.project(&order).map_err(|e| pq_err(&self.path, e))
    }

    /// The whole file, every column (small tables), normalised (§15.4).
    pub(crate) fn read_all(&self) -> Result<RecordBatch> {
        self.reads.fetch_add(
            self.meta.metadata().num_row_groups() as u64,
            Ordering::Relaxed,
        );
        let b = self.collect(self.build(None, None)?, self.schema().clone())?;
        normalise(&b).map_err(|e| e.context(&self.path))
    }
}
