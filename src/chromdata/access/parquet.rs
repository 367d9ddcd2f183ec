//! Parquet files of a store: footers read once at open, row groups decoded on demand with
//! column projection, a small cache of the last decoded row groups per file, and a counter
//! of row-group decodes (tests use it to check that only needed groups are read).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

use super::pages::GroupChunks;
use super::plain::{decode_plain_chunk, plain_width, Plain};
use super::store::{FileSlice, Store};
use crate::chromdata::values::normalise;
use crate::contain;
use crate::error::{Error, Result};
use crate::parquet_meta::footer::{head_without_groups, FooterMap};
use crate::parquet_meta::footer_at;

/// Decoded row groups kept per file (sequential iteration decodes each group once).
pub(crate) const CACHE_PER_FILE: usize = 2;

type CacheEntry = (usize, Vec<usize>, Vec<ArrayRef>);

/// A Parquet file of a store, its footer read.
pub(crate) struct ParquetFile {
    slice: FileSlice,
    /// The file-level metadata (schema, num_rows; no row groups).
    meta: ArrowReaderMetadata,
    footer_at: FooterAt,
    /// The footer walked: at open when it came with the first read, else on first use
    /// ([`ParquetFile::walked`]). A footer that fails the walk or its checks keeps the
    /// error (each use reports it); a failed read is not kept (the next use reads again).
    walk: OnceLock<Result<Walked>>,
    /// Rows of each row group as the store's index says (checked by the walk).
    expected_rows: Option<Vec<u64>>,
    /// Store path + relative path, for messages.
    pub(crate) path: String,
    /// Store-relative path (`tables/...`).
    pub(crate) rel: String,
    cache: Mutex<VecDeque<CacheEntry>>,
    reads: Arc<AtomicU64>,
    /// Top-level columns found not stored as plain pages ([`ParquetFile::decode_plain`]).
    not_plain: Vec<AtomicBool>,
}

/// A walked footer: its bytes, where its row groups lie, and each row group's metadata.
struct Walked {
    /// The footer's `FileMetaData` bytes.
    footer: Vec<u8>,
    map: FooterMap,
    /// Row group g's metadata alone, decoded on first use.
    groups: Vec<OnceLock<Arc<ParquetMetaData>>>,
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

/// The error of a footer that is not valid Parquet.
fn invalid_footer(path: &str, e: impl std::fmt::Display) -> Error {
    parquet_error(path, format_args!("no valid Parquet footer ({e})"))
}

/// Bytes read first from the end of a local file: the footers of most files of a store fit
/// (a coords partition's or a small table's take a few KB); a larger footer costs a second
/// read of exactly its missing head. (Reading 64 KB at once copied ten times the footers'
/// bytes out of the page cache at open: 1.4 MB for 116 KB of footers at 1 M spots × 30
/// tracks.)
const TAIL_GUESS: u64 = 16 * 1024;
/// The same at a URL, where a second request costs a round trip.
const TAIL_GUESS_REMOTE: u64 = 64 * 1024;
/// Bytes of a footer's head read at open when the footer is larger than the first read:
/// the fields before the row groups (the schema: some 40 bytes a column).
const HEAD_GUESS: u64 = 16 * 1024;

/// Where a footer's `FileMetaData` lies in its file: (offset, length).
type FooterAt = (u64, usize);

/// A footer as open reads it.
enum Footer {
    /// The whole `FileMetaData` bytes (they came with the first read, or the head alone
    /// did not reach the row groups).
    Whole(Vec<u8>),
    /// Its first bytes, reaching the start of `row_groups` at `start` (the rest is read on
    /// first use).
    Head { head: Vec<u8>, start: usize },
}

/// The `FileMetaData` of a Parquet file (plaintext footer, `PAR1` trailer): where it lies
/// and its bytes, whole or only its head (see [`Footer`]). Outer error: the read failed
/// (I/O, a request); inner: no valid footer.
fn read_footer(slice: &FileSlice) -> Result<std::result::Result<(FooterAt, Footer), String>> {
    let len = slice.len();
    let guess = if slice.is_local() {
        TAIL_GUESS
    } else {
        TAIL_GUESS_REMOTE
    };
    let tail_len = len.min(guess);
    let mut tail = if len >= 12 {
        slice.read_at(len - tail_len, tail_len as usize)?
    } else {
        Vec::new()
    };
    let n = tail.len();
    let at = match footer_at(len, &tail) {
        Ok(at) => at,
        Err(e) => return Ok(Err(e)),
    };
    let meta_len = at.1 as u64;
    tail.truncate(n - 8);
    if meta_len + 8 <= tail_len {
        let start = (tail_len - 8 - meta_len) as usize;
        tail.drain(..start);
        return Ok(Ok((at, Footer::Whole(tail))));
    }
    // A footer larger than the first read and than a head (a wide file with many row
    // groups): its head, for the file-level part; the row groups are walked on first use.
    if meta_len > HEAD_GUESS {
        let head = slice.read_at(at.0, HEAD_GUESS as usize)?;
        if let Some(start) = FooterMap::row_groups_start(&head) {
            return Ok(Ok((at, Footer::Head { head, start })));
        }
    }
    // The footer's head lies before the bytes read: read just that, then append.
    let head_len = meta_len + 8 - tail_len;
    let mut footer = slice.read_at(at.0, head_len as usize)?;
    footer.extend_from_slice(&tail);
    Ok(Ok((at, Footer::Whole(footer))))
}

/// Walks a whole footer ([`FooterMap::scan`]) and checks it ([`checked_walk`]).
fn walk_footer(path: &str, footer: Vec<u8>, leaves: usize) -> Result<Walked> {
    let map = FooterMap::scan(&footer).map_err(|e| invalid_footer(path, &e.message))?;
    checked_walk(path, footer, map, leaves)
}

/// A walked footer, once each row group is checked to have a column chunk for each of the
/// schema's `leaves` columns.
fn checked_walk(path: &str, footer: Vec<u8>, map: FooterMap, leaves: usize) -> Result<Walked> {
    if let Some(g) = map.groups.iter().position(|g| g.n_columns != leaves) {
        return Err(invalid_footer(
            path,
            format_args!(
                "row group {g} has {} column chunks, the schema {leaves} columns",
                map.groups[g].n_columns
            ),
        ));
    }
    Ok(Walked {
        groups: map.groups.iter().map(|_| OnceLock::new()).collect(),
        footer,
        map,
    })
}

/// Row groups of the rows `got` (the footer's) where the index says `expected`: an error.
fn check_group_rows(path: &str, map: &FooterMap, expected: &[u64]) -> Result<()> {
    let got: Vec<u64> = map
        .groups
        .iter()
        .map(|g| g.num_rows.max(0) as u64)
        .collect();
    if got != expected {
        return Err(Error::format(format!(
            "{}: row groups of {:?} rows, the index says {:?} (row groups must match index/row_groups)",
            path,
            if got.len() > 8 { &got[..8] } else { &got[..] },
            if expected.len() > 8 { &expected[..8] } else { expected },
        )));
    }
    Ok(())
}

impl ParquetFile {
    /// Opens `path` (store-relative) and reads its footer; the file-level part (schema,
    /// num_rows) is decoded. A footer that came with the first read is walked whole
    /// (structure, each row group's rows and column count) now; a larger one (a wide file
    /// with many row groups, whose walk is most of an open) only from its head, the rest
    /// being read and walked by [`ParquetFile::walk_now`] (open runs it on the pool beside
    /// the index) or at the latest by [`ParquetFile::expect_group_rows`] — still within open
    /// (§14). The column chunks of a row group are decoded when it is first read
    /// ([`footer`](crate::parquet_meta::footer)).
    /// Missing → NotFound; no valid footer (e.g. a truncated file) → Format.
    pub(crate) fn open(store: &Store, path: &str, reads: Arc<AtomicU64>) -> Result<ParquetFile> {
        // At a URL the footer's likely bytes come with the slice (one request, not two).
        let slice = store.slice_tail(path, TAIL_GUESS_REMOTE)?;
        let full = format!("{}/{path}", store.display);
        let (footer_at, footer) = read_footer(&slice)?.map_err(|e| invalid_footer(&full, e))?;
        // The tail served the footer; the handle keeps no copy of it (a store may hold
        // thousands of files).
        let slice = slice.without_tail();
        let (file_level_bytes, whole) = match footer {
            Footer::Whole(bytes) => {
                let map = FooterMap::scan(&bytes).map_err(|e| invalid_footer(&full, &e.message))?;
                (map.without_groups(&bytes), Some((bytes, map)))
            }
            Footer::Head { head, start } => {
                // Walked before the crate decodes it, like every footer (crate::parquet_meta).
                let bytes = head_without_groups(&head, start);
                FooterMap::scan(&bytes).map_err(|e| invalid_footer(&full, &e.message))?;
                (bytes, None)
            }
        };
        // The parquet crate's decoders run contained (docs/reliability.md §1).
        let file_level = contain::decoding(&full, || {
            ParquetMetaDataReader::decode_metadata_with_options(&file_level_bytes, None)
                .map_err(|e| invalid_footer(&full, &e))
        })?;
        let leaves = file_level.file_metadata().schema_descr().num_columns();
        let walk = OnceLock::new();
        if let Some((bytes, map)) = whole {
            let _ = walk.set(Ok(checked_walk(&full, bytes, map, leaves)?));
        }
        // Readers must use the Parquet logical types, not the stored Arrow schema (§6.2).
        let opts = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
        let meta = contain::decoding(&full, || {
            ArrowReaderMetadata::try_new(Arc::new(file_level), opts)
                .map_err(|e| invalid_footer(&full, &e))
        })?;
        let n_columns = meta.schema().fields().len();
        Ok(ParquetFile {
            slice,
            footer_at,
            walk,
            expected_rows: None,
            meta,
            path: full,
            rel: path.to_string(),
            cache: Mutex::new(VecDeque::new()),
            reads: reads.clone(),
            not_plain: (0..n_columns).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// Sets the rows of each row group the store's index gives and checks them now (§14
    /// rule 4 is an open-time rule: a store whose files disagree with its index is refused
    /// at open, never found out by a later read). A footer not walked yet (a wide one, see
    /// [`ParquetFile::open`]; open walks those ahead on the pool, [`ParquetFile::walk_now`])
    /// is walked here.
    pub(crate) fn expect_group_rows(&mut self, expected: Vec<u64>) -> Result<()> {
        let walked_before = self.walk.get().is_some();
        self.expected_rows = Some(expected);
        let w = self.walked()?;
        if walked_before {
            let expected = self.expected_rows.as_deref().unwrap_or_default();
            check_group_rows(&self.path, &w.map, expected)?;
        }
        Ok(())
    }

    /// Walks a footer that open read only the head of (its structure and row groups), so
    /// that the walk runs beside open's other work; an error is kept for
    /// [`ParquetFile::expect_group_rows`] to report in its order.
    pub(crate) fn walk_now(&self) {
        let _ = self.walked();
    }

    /// The footer walked and checked (structure, column chunks per row group, rows per row
    /// group against the index), once per file; see [`ParquetFile::open`].
    fn walked(&self) -> Result<&Walked> {
        if let Some(w) = self.walk.get() {
            return w.as_ref().map_err(Error::clone);
        }
        // A failed read is reported, not kept.
        let footer = self.slice.read_at(self.footer_at.0, self.footer_at.1)?;
        let leaves = self.meta.parquet_schema().num_columns();
        let walked =
            walk_footer(&self.path, footer, leaves).and_then(|w| match &self.expected_rows {
                Some(expected) => check_group_rows(&self.path, &w.map, expected).map(|()| w),
                None => Ok(w),
            });
        self.walk
            .get_or_init(|| walked)
            .as_ref()
            .map_err(Error::clone)
    }

    /// The metadata of row group `g` alone (as its group 0), decoded on first use.
    /// Statistics are never used: not decoding them makes it 2x cheaper.
    fn group_meta(&self, g: usize) -> Result<&Arc<ParquetMetaData>> {
        let w = self.walked()?;
        if let Some(m) = w.groups[g].get() {
            return Ok(m);
        }
        let opts = ParquetMetaDataOptions::new()
            .with_schema(self.meta.metadata().file_metadata().schema_descr_ptr())
            .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
            .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll);
        let one = contain::decoding(&self.path, || {
            ParquetMetaDataReader::decode_metadata_with_options(
                &w.map.only_group(&w.footer, g),
                Some(&opts),
            )
            .map_err(|e| {
                parquet_error(
                    &self.path,
                    format_args!("invalid footer entry of row group {g} ({e})"),
                )
            })
        })?;
        Ok(w.groups[g].get_or_init(|| Arc::new(one)))
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

    /// Rows of row group `g` as its footer gives them.
    fn group_rows(&self, g: usize) -> Result<usize> {
        Ok(self.walked()?.map.groups[g].num_rows.max(0) as usize)
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
    pub(crate) fn num_row_groups(&self) -> Result<usize> {
        Ok(self.walked()?.map.groups.len())
    }

    /// Counts `n` row-group decodes (see `ChromData::row_group_reads`).
    pub(crate) fn count_reads(&self, n: u64) {
        self.reads.fetch_add(n, Ordering::Relaxed);
    }

    /// Decodes row group `g` with the top-level columns `cols`, returned in that order;
    /// bypasses the cache and the read counter; safe to call from several threads at once.
    pub(crate) fn decode_columns(&self, g: usize, cols: &[usize]) -> Result<Vec<ArrayRef>> {
        let rows = if g < self.num_row_groups()? {
            self.group_rows(g)?.max(1)
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

    /// Hands out top-level column `col` of row group `g` page by page as `f(first row,
    /// values' bytes)` when the column is a fixed-width Arrow `t` stored without nulls as
    /// PLAIN pages or as indices into a dictionary page ([`plain`](super::plain));
    /// [`Plain::NotPlain`] otherwise (some pages
    /// may have been handed out: the caller decodes the column again with
    /// [`decode_batches`](Self::decode_batches)). Bypasses the cache and the read counter.
    /// A column found not plain in one row group is not tried again in this file (a
    /// nullable column with nulls would otherwise be read twice in every group). Local
    /// files only: each column is fetched alone here, and at a URL that would be a request
    /// per column where the crate's path makes one per run of adjacent chunks.
    pub(crate) fn decode_plain(
        &self,
        g: usize,
        col: usize,
        t: &arrow_schema::DataType,
        f: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<Plain> {
        let Some(flag) = self.not_plain.get(col).filter(|_| !self.slice.is_remote()) else {
            return Ok(Plain::NotPlain);
        };
        if flag.load(Ordering::Relaxed) {
            return Ok(Plain::NotPlain);
        }
        let r = self.decode_plain_group(g, col, t, f);
        if matches!(r, Ok(Plain::NotPlain)) {
            flag.store(true, Ordering::Relaxed);
        }
        r
    }

    /// [`decode_plain`](Self::decode_plain) of one row group.
    fn decode_plain_group(
        &self,
        g: usize,
        col: usize,
        t: &arrow_schema::DataType,
        f: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<Plain> {
        if g >= self.num_row_groups()? {
            return Ok(Plain::NotPlain); // reported by the crate's path
        }
        let schema = self.meta.parquet_schema();
        let mut leaves =
            (0..schema.num_columns()).filter(|&l| schema.get_column_root_idx(l) == col);
        let (Some(leaf), None) = (leaves.next(), leaves.next()) else {
            return Ok(Plain::NotPlain);
        };
        let d = schema.column(leaf);
        let width = plain_width(d.physical_type(), t);
        if width.is_none() || d.max_rep_level() != 0 || d.path().parts().len() != 1 {
            return Ok(Plain::NotPlain);
        }
        let md = self.group_meta(g)?;
        let compression = md.row_group(0).column(leaf).compression();
        let read_error: Mutex<Option<Error>> = Mutex::new(None);
        let chunks = GroupChunks::fetch(md, 0, &[leaf], |s, buf, l| {
            self.slice.read_into(s, buf, l).map_err(|e| {
                let m = e.message.clone();
                *read_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                std::io::Error::other(m)
            })
        });
        let chunks = match chunks {
            Ok(c) => c,
            // A failed read is reported as itself; a damaged chunk by the crate's path.
            Err(_) => match read_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
                Some(e) => return Err(e),
                None => return Ok(Plain::NotPlain),
            },
        };
        let Some(chunk) = chunks.chunk(leaf) else {
            return Ok(Plain::NotPlain);
        };
        let rows = self.group_rows(g)?;
        decode_plain_chunk(
            chunk,
            compression,
            d.max_def_level(),
            width.unwrap_or(0),
            rows,
            f,
        )
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
        let n_groups = self.num_row_groups()?;
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
        let expected = self.group_rows(g)?;
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
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(self.group_rows(g)?)),
        )
        .map_err(|e| parquet_error(&self.path, e))
    }

    /// The whole file, every column (small tables), normalised (§15.4).
    pub(crate) fn read_all(&self) -> Result<RecordBatch> {
        let cols: Vec<usize> = (0..self.schema().fields().len()).collect();
        let groups = (0..self.num_row_groups()?)
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
    use arrow_schema::DataType;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    /// Writes `groups` row groups of 5 rows × `cols` float columns (value c * 100 + row).
    fn write_file(path: &std::path::Path, cols: usize, groups: usize) {
        let rows = 5usize;
        let batch = RecordBatch::try_from_iter((0..cols).map(|c| {
            let v: Vec<f32> = (0..rows).map(|r| (c * 100 + r) as f32).collect();
            (format!("c{c}"), Arc::new(Float32Array::from(v)) as ArrayRef)
        }))
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows))
            .build();
        let file = std::fs::File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        for _ in 0..groups {
            w.write(&batch).unwrap();
            w.flush().unwrap();
        }
        w.close().unwrap();
    }

    /// A footer larger than the first tail read (a wide file: 40 columns × 12 row groups)
    /// and one that fits it decode to the same row groups and values as written. The one
    /// that fits is walked at open, the larger one on first use.
    #[test]
    fn footers_larger_than_the_first_read() {
        let dir = std::env::temp_dir().join(format!("dc-footer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store_dir = dir.clone();
        for (name, cols, groups) in [("wide.parquet", 40usize, 12usize), ("narrow.parquet", 2, 2)] {
            let rows = 5usize;
            write_file(&dir.join(name), cols, groups);
            let store = Store::open(&store_dir).unwrap();
            let f = ParquetFile::open(&store, name, Arc::new(AtomicU64::new(0))).unwrap();
            let footer = f.footer_at.1 as u64;
            if cols == 40 {
                assert!(footer > TAIL_GUESS.max(HEAD_GUESS), "{footer}");
                assert!(f.walk.get().is_none(), "walked at open");
            } else {
                assert!(footer < TAIL_GUESS);
                assert!(f.walk.get().is_some(), "not walked at open");
            }
            assert_eq!(f.num_rows(), (rows * groups) as u64);
            assert_eq!(f.num_row_groups().unwrap(), groups);
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

    /// A column of PLAIN pages, and one of dictionary indices, is handed out page by page
    /// with the values decode_columns gives; with a null in its last page (pages before it
    /// handed out) or a type other than the stored one, it is not plain.
    #[test]
    fn plain_columns_match_the_crates_decoding() {
        use arrow_array::{Float64Array, Int32Array};
        let dir = std::env::temp_dir().join(format!("dc-plain-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows = 5000usize;
        let x: Vec<f64> = (0..rows).map(|i| (i as f64) * 0.25 - 3.0).collect();
        let mut with_null: Vec<Option<f64>> = x.iter().copied().map(Some).collect();
        with_null[rows - 1] = None;
        let batch = RecordBatch::try_from_iter([
            ("x", Arc::new(Float64Array::from(x.clone())) as ArrayRef),
            ("n", Arc::new(Float64Array::from(with_null)) as ArrayRef),
            (
                "d",
                Arc::new(Int32Array::from_iter_values(
                    (0..rows as i32).map(|i| i % 7),
                )),
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_column_dictionary_enabled("x".into(), false)
            .set_column_dictionary_enabled("n".into(), false)
            .set_data_page_row_count_limit(700)
            .set_write_batch_size(700)
            .set_max_row_group_row_count(Some(3000))
            .build();
        let file = std::fs::File::create(dir.join("p.parquet")).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let store = Store::open(&dir).unwrap();
        let f = ParquetFile::open(&store, "p.parquet", Arc::new(AtomicU64::new(0))).unwrap();
        let mut all = Vec::new();
        for g in 0..f.num_row_groups().unwrap() {
            let (mut pages, mut bytes) = (0, Vec::new());
            let r = f
                .decode_plain(g, 0, &DataType::Float64, |at, v| {
                    assert_eq!(at * 8, bytes.len(), "consecutive pages");
                    pages += 1;
                    bytes.extend_from_slice(v);
                    Ok(())
                })
                .unwrap();
            assert_eq!(r, Plain::Done);
            assert!(pages > 1, "several pages in row group {g}");
            let crate_x = f.decode_columns(g, &[0]).unwrap();
            let want = crate_x[0].as_any().downcast_ref::<Float64Array>().unwrap();
            let want: Vec<u8> = want.values().iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(bytes, want, "row group {g}");
            all.extend(bytes);
        }
        let want: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(all, want);
        let last = f.num_row_groups().unwrap() - 1;
        let mut handed = 0;
        let r = f
            .decode_plain(last, 1, &DataType::Float64, |_, _| {
                handed += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(
            (r, handed > 0),
            (Plain::NotPlain, true),
            "null in the last page"
        );
        // Not tried again in this file: the first group, without nulls, is not handed out.
        let r = f
            .decode_plain(0, 1, &DataType::Float64, |_, _| panic!("tried again"))
            .unwrap();
        assert_eq!(r, Plain::NotPlain);
        for g in 0..f.num_row_groups().unwrap() {
            let mut bytes = Vec::new();
            let r = f
                .decode_plain(g, 2, &DataType::Int32, |at, v| {
                    assert_eq!(at * 4, bytes.len(), "consecutive pages");
                    bytes.extend_from_slice(v);
                    Ok(())
                })
                .unwrap();
            assert_eq!(r, Plain::Done, "dictionary column, row group {g}");
            let crate_d = f.decode_columns(g, &[2]).unwrap();
            let want = crate_d[0].as_any().downcast_ref::<Int32Array>().unwrap();
            let want: Vec<u8> = want.values().iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(bytes, want, "dictionary column, row group {g}");
        }
        for (col, t) in [
            (2, DataType::Int64),
            (0, DataType::Float32),
            (0, DataType::Int64),
        ] {
            let r = f.decode_plain(0, col, &t, |_, _| Ok(())).unwrap();
            assert_eq!(r, Plain::NotPlain, "column {col} as {t}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Row groups disagreeing with the index: refused when the rows are set (within open),
    /// narrow and wide footers alike; agreeing rows read as before.
    #[test]
    fn row_groups_are_checked_against_the_index_when_walked() {
        let dir = std::env::temp_dir().join(format!("dc-rowcheck-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_file(&dir.join("narrow.parquet"), 2, 3);
        write_file(&dir.join("wider.parquet"), 40, 12);
        let store = Store::open(&dir).unwrap();
        let open =
            |name: &str| ParquetFile::open(&store, name, Arc::new(AtomicU64::new(0))).unwrap();
        let wrong = |n: usize| {
            let mut v = vec![5u64; n];
            v[0] = 4;
            v[1] = 6;
            v
        };
        let mut narrow = open("narrow.parquet");
        let e = narrow.expect_group_rows(wrong(3)).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Format);
        assert!(
            e.message
                .contains("narrow.parquet: row groups of [5, 5, 5] rows, the index says [4, 6, 5]"),
            "{e}"
        );

        // A wide footer, not walked by open itself: refused when the rows are set, whether
        // it was walked ahead (walk_now) or not.
        for ahead in [false, true] {
            let mut wider = open("wider.parquet");
            assert!(wider.walk.get().is_none());
            if ahead {
                wider.walk_now();
                assert!(wider.walk.get().is_some());
            }
            assert_eq!(wider.num_rows(), 60);
            assert_eq!(wider.schema().fields().len(), 40);
            let e = wider.expect_group_rows(wrong(12)).unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Format);
            assert!(e.message.contains("wider.parquet: row groups of [5, 5, 5, 5, 5, 5, 5, 5] rows, the index says [4, 6, 5, 5, 5, 5, 5, 5]"), "{e}");
        }

        let mut right = open("wider.parquet");
        right.expect_group_rows(vec![5; 12]).unwrap();
        let b = right.decode_group(11, &[39]).unwrap();
        assert_eq!(b.num_rows(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
