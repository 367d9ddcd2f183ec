//! Parquet files of a store: footers read once at open, row groups decoded on demand with
//! column projection, a small cache of the last decoded row groups per file, and a counter
//! of row-group decodes (tests use it to check that only needed groups are read).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
};
use parquet::arrow::{parquet_to_arrow_field_levels, ProjectionMask};
use parquet::file::metadata::{
    ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};

use super::footer::FooterMap;
use super::pages::GroupChunks;
use super::store::{FileSlice, Store};
use crate::chromdata::values::normalise;
use crate::contain;
use crate::error::{Error, Result};

/// Decoded row groups kept per file (sequential iteration decodes each group once).
pub(crate) const CACHE_PER_FILE: usize = 2;

type CacheEntry = (usize, Vec<usize>, Vec<ArrayRef>);

/// A Parquet file of a store, its footer read.
pub(crate) struct ParquetFile {
    slice: FileSlice,
    /// The file-level metadata (schema, num_rows; no row groups).
    meta: ArrowReaderMetadata,
    /// The footer's `FileMetaData` bytes and where its row groups lie in them.
    footer: Vec<u8>,
    map: FooterMap,
    /// Row group g's metadata alone, decoded on first use.
    groups: Vec<OnceLock<Arc<ParquetMetaData>>>,
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

fn parquet_error(path: &str, e: impl std::fmt::Display) -> Error {
    Error::format(format!("{path}: {e}"))
}

/// Bytes read first from the end of a local file: the footers of most files of a store fit
/// (a coords partition's or a small table's take a few KB); a larger footer costs a second
/// read of exactly its missing head. (Reading 64 KB at once copied ten times the footers'
/// bytes out of the page cache at open: 1.4 MB for 116 KB of footers at 1 M spots × 30
/// tracks.)
const TAIL_GUESS: u64 = 16 * 1024;
/// The same at a URL, where a second request costs a round trip.
const TAIL_GUESS_REMOTE: u64 = 64 * 1024;

/// The `FileMetaData` bytes of a Parquet file (plaintext footer, `PAR1` trailer). Outer
/// error: the read failed (I/O, a request); inner: no valid footer.
fn read_footer(slice: &FileSlice) -> Result<std::result::Result<Vec<u8>, String>> {
    let len = slice.len();
    if len < 12 {
        return Ok(Err(format!("{len} bytes, too short for a Parquet file")));
    }
    let guess = if slice.is_local() {
        TAIL_GUESS
    } else {
        TAIL_GUESS_REMOTE
    };
    let tail_len = len.min(guess);
    let mut tail = slice.read_at(len - tail_len, tail_len as usize)?;
    let n = tail.len();
    if &tail[n - 4..] != b"PAR1" {
        return Ok(Err(
            "the file does not end with PAR1 (encrypted footers are not supported)".into(),
        ));
    }
    let meta_len = u32::from_le_bytes([tail[n - 8], tail[n - 7], tail[n - 6], tail[n - 5]]) as u64;
    if meta_len + 12 > len {
        return Ok(Err(format!(
            "footer of {meta_len} bytes in a file of {len} bytes"
        )));
    }
    tail.truncate(n - 8);
    if meta_len + 8 <= tail_len {
        let start = (tail_len - 8 - meta_len) as usize;
        tail.drain(..start);
        Ok(Ok(tail))
    } else {
        // The footer's head lies before the bytes read: read just that, then append.
        let head_len = meta_len + 8 - tail_len;
        let mut footer = slice.read_at(len - 8 - meta_len, head_len as usize)?;
        footer.extend_from_slice(&tail);
        Ok(Ok(footer))
    }
}

impl ParquetFile {
    /// Opens `path` (store-relative) and reads its footer: walked whole (structure, each row
    /// group's rows and column count), the file-level part decoded; the column chunks of a
    /// row group are decoded when it is first read ([`footer`](super::footer)). Missing →
    /// NotFound; no valid footer (e.g. a truncated file) → Format.
    pub(crate) fn open(store: &Store, path: &str, reads: Arc<AtomicU64>) -> Result<ParquetFile> {
        // At a URL the footer's likely bytes come with the slice (one request, not two).
        let slice = store.slice_tail(path, TAIL_GUESS_REMOTE)?;
        let full = format!("{}/{path}", store.display);
        let invalid = |e: &dyn std::fmt::Display| {
            parquet_error(&full, format_args!("no valid Parquet footer ({e})"))
        };
        let footer = read_footer(&slice)?.map_err(|e| invalid(&e))?;
        // The tail served the footer; the handle keeps no copy of it (a store may hold
        // thousands of files).
        let slice = slice.without_tail();
        let map = FooterMap::scan(&footer).map_err(|e| invalid(&e.message))?;
        // The parquet crate's decoders run contained (docs/reliability.md §1).
        let file_level = contain::decoding(&full, || {
            ParquetMetaDataReader::decode_metadata_with_options(&map.without_groups(&footer), None)
                .map_err(|e| invalid(&e))
        })?;
        let leaves = file_level.file_metadata().schema_descr().num_columns();
        if let Some(g) = map.groups.iter().position(|g| g.n_columns != leaves) {
            return Err(invalid(&format_args!(
                "row group {g} has {} column chunks, the schema {leaves} columns",
                map.groups[g].n_columns
            )));
        }
        // Readers must use the Parquet logical types, not the stored Arrow schema (§6.2).
        let opts = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let meta = contain::decoding(&full, || {
            ArrowReaderMetadata::try_new(Arc::new(file_level), opts).map_err(|e| invalid(&e))
        })?;
        Ok(ParquetFile {
            slice,
            groups: map.groups.iter().map(|_| OnceLock::new()).collect(),
            footer,
            map,
            meta,
            path: full,
            rel: path.to_string(),
            cache: Mutex::new(VecDeque::new()),
            reads: reads.clone(),
        })
    }

    /// The metadata of row group `g` alone (as its group 0), decoded on first use.
    /// Statistics are never used: not decoding them makes it 2x cheaper.
    fn group_meta(&self, g: usize) -> Result<&Arc<ParquetMetaData>> {
        if let Some(m) = self.groups[g].get() {
            return Ok(m);
        }
        let opts = ParquetMetaDataOptions::new()
            .with_schema(self.meta.metadata().file_metadata().schema_descr_ptr())
            .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll);
        let one = contain::decoding(&self.path, || {
            ParquetMetaDataReader::decode_metadata_with_options(
                &self.map.only_group(&self.footer, g),
                Some(&opts),
            )
            .map_err(|e| {
                parquet_error(
                    &self.path,
                    format_args!("invalid footer entry of row group {g} ({e})"),
                )
            })
        })?;
        Ok(self.groups[g].get_or_init(|| Arc::new(one)))
    }

    /// Requests this file's reads may have in flight at once (1 locally).
    pub(crate) fn request_width(&self) -> usize {
        self.slice.request_width()
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        self.meta.schema()
    }

    pub(crate) fn num_rows(&self) -> u64 {
        self.meta.metadata().file_metadata().num_rows().max(0) as u64
    }

    pub(crate) fn row_group_rows(&self) -> Vec<u64> {
        self.map
            .groups
            .iter()
            .map(|g| g.num_rows.max(0) as u64)
            .collect()
    }

    /// Rows of row group `g` as its footer gives them.
    fn group_rows(&self, g: usize) -> usize {
        self.map.groups[g].num_rows.max(0) as usize
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

    /// Row group `g` with `cols` (arrays in that order) from the per-file cache, if there.
    pub(crate) fn cached(&self, g: usize, cols: &[usize]) -> Option<Vec<ArrayRef>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .iter()
            .find(|(cg, cc, _)| *cg == g && cc == cols)
            .map(|(_, _, b)| b.clone())
    }

    /// Puts a decoded row group (arrays of `cols`) into the per-file cache (the oldest entry
    /// leaves).
    pub(crate) fn remember_arrays(&self, g: usize, cols: &[usize], arrays: Vec<ArrayRef>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_PER_FILE {
            cache.pop_front();
        }
        cache.push_back((g, cols.to_vec(), arrays));
    }

    /// Number of row groups.
    pub(crate) fn num_row_groups(&self) -> usize {
        self.map.groups.len()
    }

    /// Counts `n` row-group decodes (see `ChromData::row_group_reads`).
    pub(crate) fn count_reads(&self, n: u64) {
        self.reads.fetch_add(n, Ordering::Relaxed);
    }

    /// Decodes row group `g` with the top-level columns `cols`, returned in that order;
    /// bypasses the cache and the read counter; safe to call from several threads at once.
    pub(crate) fn decode_columns(&self, g: usize, cols: &[usize]) -> Result<Vec<ArrayRef>> {
        let rows = if g < self.num_row_groups() {
            self.group_rows(g).max(1)
        } else {
            1
        };
        let mut parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); cols.len()];
        self.decode_batches(g, cols, rows, |_, arrays| {
            for (p, a) in parts.iter_mut().zip(arrays) {
                p.push(a);
            }
            Ok(())
        })?;
        parts
            .into_iter()
            .zip(cols)
            .map(|(p, &c)| match p.as_slice() {
                [one] => Ok(one.clone()),
                [] => Ok(arrow_array::new_empty_array(
                    self.schema().field(c).data_type(),
                )),
                many => {
                    let refs: Vec<&dyn arrow_array::Array> =
                        many.iter().map(|a| a.as_ref()).collect();
                    arrow_select::concat::concat(&refs).map_err(|e| parquet_error(&self.path, e))
                }
            })
            .collect()
    }

    /// Decodes row group `g` with the top-level columns `cols` in batches of up to
    /// `batch_rows` rows, handing each batch's arrays (in `cols` order) and its first row
    /// in the group to `f`; bypasses the cache and the read counter; safe to call from
    /// several threads at once. Each run of adjacent column chunks is one byte-range read.
    pub(crate) fn decode_batches(
        &self,
        g: usize,
        cols: &[usize],
        batch_rows: usize,
        mut f: impl FnMut(usize, Vec<ArrayRef>) -> Result<()>,
    ) -> Result<()> {
        let n_groups = self.num_row_groups();
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
        let order: Vec<usize> = cols
            .iter()
            .map(|c| sorted.binary_search(c).expect("column present"))
            .collect();
        let schema = self.meta.parquet_schema();
        let leaves: Vec<usize> = (0..schema.num_columns())
            .filter(|&l| sorted.binary_search(&schema.get_column_root_idx(l)).is_ok())
            .collect();
        let mask = ProjectionMask::roots(schema, sorted.iter().copied());
        let fail = |e: &dyn std::fmt::Display| {
            parquet_error(&self.path, format_args!("cannot decode: {e}"))
        };
        let levels = contain::decoding(&self.path, || {
            parquet_to_arrow_field_levels(schema, mask, None).map_err(|e| fail(&e))
        })?;
        let md = self.group_meta(g)?;
        // A failed read (I/O, a request) is reported as itself, not as a decoding error.
        let read_error: Mutex<Option<Error>> = Mutex::new(None);
        let chunks = GroupChunks::fetch(md, 0, &leaves, |s, buf, l| {
            self.slice.read_into(s, buf, l).map_err(|e| {
                let m = e.message.clone();
                read_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                std::io::Error::other(m)
            })
        })
        .map_err(|e| {
            read_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_else(|| fail(&e))
        })?;
        let expected = self.group_rows(g);
        let mut reader = contain::decoding(&self.path, || {
            ParquetRecordBatchReader::try_new_with_row_groups(
                &levels,
                &chunks,
                batch_rows.max(1),
                None,
            )
            .map_err(|e| fail(&e))
        })?;
        let mut rows = 0usize;
        // Only the decoder is contained, not `f` (our code: a panic there is a bug).
        while let Some(b) = contain::decoding(&self.path, || {
            reader.next().transpose().map_err(|e| fail(&e))
        })? {
            let n = b.num_rows();
            if rows + n > expected {
                break;
            }
            f(rows, order.iter().map(|&k| b.column(k).clone()).collect())?;
            rows += n;
        }
        if rows != expected {
            return Err(Error::format(format!(
                "{}: row group {g} decoded {rows} rows or more, footer says {expected}",
                self.path
            )));
        }
        Ok(())
    }

    /// Decodes row group `g` with `cols` (in that order) as a batch, counting the read;
    /// bypasses the cache.
    pub(crate) fn decode_group(&self, g: usize, cols: &[usize]) -> Result<RecordBatch> {
        let arrays = self.decode_columns(g, cols)?;
        self.count_reads(1);
        let fields: Vec<arrow_schema::FieldRef> = cols
            .iter()
            .map(|&c| self.schema().fields()[c].clone())
            .collect();
        RecordBatch::try_new_with_options(
            Arc::new(arrow_schema::Schema::new(fields)),
            arrays,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(self.group_rows(g))),
        )
        .map_err(|e| parquet_error(&self.path, e))
    }

    /// The whole file, every column (small tables), normalised (§15.4).
    pub(crate) fn read_all(&self) -> Result<RecordBatch> {
        let cols: Vec<usize> = (0..self.schema().fields().len()).collect();
        let groups = (0..self.num_row_groups())
            .map(|g| self.decode_group(g, &cols))
            .collect::<Result<Vec<_>>>()?;
        let b = arrow_select::concat::concat_batches(self.schema(), &groups)
            .map_err(|e| parquet_error(&self.path, e))?;
        normalise(&b).map_err(|e| e.context(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Float32Array, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    /// A footer larger than the first tail read (a wide file: 40 columns × 12 row groups)
    /// is read in two pieces and decodes to the same row groups and values as written;
    /// a footer that fits the first read too.
    #[test]
    fn footers_larger_than_the_first_read() {
        let dir = std::env::temp_dir().join(format!("dc-footer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, cols, groups) in [("wide.parquet", 40usize, 12usize), ("narrow.parquet", 2, 2)] {
            let rows = 5usize;
            let batch = RecordBatch::try_from_iter((0..cols).map(|c| {
                let v: Vec<f32> = (0..rows).map(|r| (c * 100 + r) as f32).collect();
                (format!("c{c}"), Arc::new(Float32Array::from(v)) as ArrayRef)
            }))
            .unwrap();
            let props = WriterProperties::builder()
                .set_max_row_group_row_count(Some(rows))
                .build();
            let file = std::fs::File::create(dir.join(name)).unwrap();
            let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
            for _ in 0..groups {
                w.write(&batch).unwrap();
                w.flush().unwrap();
            }
            w.close().unwrap();
            let store = Store::open(&dir).unwrap();
            let f = ParquetFile::open(&store, name, Arc::new(AtomicU64::new(0))).unwrap();
            if cols == 40 {
                assert!(
                    f.footer.len() as u64 > TAIL_GUESS,
                    "footer {}",
                    f.footer.len()
                );
            } else {
                assert!((f.footer.len() as u64) < TAIL_GUESS);
            }
            assert_eq!(f.num_row_groups(), groups);
            assert_eq!(f.num_rows(), (rows * groups) as u64);
            let last = f.decode_group(groups - 1, &[cols - 1]).unwrap();
            let got = last
                .column(0)
                .as_any()
                .downcast_ref::<Float32Array>()
                .unwrap();
            assert_eq!(got.len(), rows);
            assert_eq!(got.value(rows - 1), ((cols - 1) * 100 + rows - 1) as f32);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
