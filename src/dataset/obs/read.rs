//! Reading obs: the schema and shard table of an open dataset, columns read from the shards
//! (checked against the manifest's sizes and SHA-256) or from the local column cache.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, DictionaryArray, PrimitiveArray, RecordBatch, RecordBatchOptions,
    RecordBatchReader, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use sha2::{Digest, Sha256};

use crate::dataset::manifest::Manifest;
use crate::dataset::paths;
use crate::error::{Error, ErrorKind, Result};
use crate::parquet_meta::arrow_metadata;
use crate::parquet_meta::chunks::CheckedChunks;
use crate::storage::{fs, Root};

use super::schema::{fingerprint, hex, shard_relpath, url_quote, ObsSchema, SCHEMA_RELPATH};

fn arrow_err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::format(format!("{what}: {e}"))
}

fn internal(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{what}: {e}"))
}

/// An opened obs shard: a local file, or an object read by byte ranges.
enum Shard {
    File(File),
    #[cfg(feature = "remote")]
    Remote(crate::storage::remote::ranged::RangedObject),
}

/// Columns `idx` (top-level) of every row group of a shard, decoded: their column chunks
/// are fetched from `source` and their page headers walked first (crate::parquet_meta).
fn decode_columns<T: parquet::file::reader::ChunkReader>(
    source: &T,
    meta: ArrowReaderMetadata,
    idx: &[usize],
    what: &str,
) -> Result<Vec<RecordBatch>> {
    let mask = ProjectionMask::roots(meta.parquet_schema(), idx.iter().copied());
    let chunks = CheckedChunks::fetch(source, meta.metadata(), &mask, what)?;
    // The parquet crate decodes stored bytes: contained (docs/reliability.md §1).
    crate::contain::decoding(what, || {
        ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, meta)
            .with_projection(mask)
            .with_batch_size(1 << 16)
            .build()
            .map_err(|e| arrow_err(what, e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| arrow_err(what, e))
    })
}

/// Obs of an open dataset: the schema and what the manifest says of the shards.
#[derive(Debug)]
pub(crate) struct ObsMeta {
    /// The dataset's directory or URL (for messages).
    root: PathBuf,
    store: Root,
    pub(crate) schema: ObsSchema,
    schema_text: String,
    tile_cells: Vec<u64>,
    tiles_per_file: u64,
    shard_bytes: Vec<u64>,
    shard_sha256: Vec<String>,
    fingerprint: String,
    /// Vocabulary arrays of category columns (shared by every dictionary array).
    vocab: Vec<Option<ArrayRef>>,
}

/// Counters of shard reads (tests check that the cache is used).
#[derive(Debug, Default)]
pub(crate) struct ObsCounters {
    pub shard_reads: AtomicU64,
}

impl ObsMeta {
    /// Reads and checks `obs/schema.json` (the shards are checked when read).
    pub(crate) fn load(store: &Root, m: &Manifest) -> Result<ObsMeta> {
        let root = PathBuf::from(store.display());
        let path = root.join(SCHEMA_RELPATH);
        let text = store.read(SCHEMA_RELPATH).map_err(|e| {
            if e.kind == ErrorKind::NotFound && !store.deleted() {
                Error::format(format!(
                    "{}: missing, though the manifest's has_obs is true",
                    path.display()
                ))
            } else {
                e
            }
        })?;
        let what = path.display().to_string();
        let schema = ObsSchema::parse(&text, &what)?;
        let schema_text = String::from_utf8(text)
            .map_err(|e| Error::format(format!("{what}: not valid UTF-8 ({e})")))?;
        let vocab = schema
            .columns
            .iter()
            .map(|c| {
                c.categories.as_ref().map(|cats| {
                    Arc::new(
                        cats.iter()
                            .map(|s| Some(s.as_str()))
                            .collect::<StringArray>(),
                    ) as ArrayRef
                })
            })
            .collect();
        // Present when has_obs (validated by the manifest).
        Ok(ObsMeta {
            root,
            store: store.clone(),
            schema,
            schema_text,
            tile_cells: m.tile_cells.clone(),
            tiles_per_file: m.obs_tiles_per_file.unwrap_or(1),
            shard_bytes: m.obs_shard_bytes.clone().unwrap_or_default(),
            shard_sha256: m.obs_shard_sha256.clone().unwrap_or_default(),
            fingerprint: m.obs_fingerprint.clone().unwrap_or_default(),
            vocab,
        })
    }

    /// Indices of the named columns (all when `None`).
    pub(crate) fn resolve(&self, columns: Option<&[&str]>) -> Result<Vec<usize>> {
        let Some(names) = columns else {
            return Ok((0..self.schema.columns.len()).collect());
        };
        let mut out = Vec::with_capacity(names.len());
        for &n in names {
            let i = self
                .schema
                .columns
                .iter()
                .position(|c| c.name == n)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        format!(
                            "obs has no column \"{n}\" ({})",
                            self.root.join(SCHEMA_RELPATH).display()
                        ),
                    )
                })?;
            if out.contains(&i) {
                return Err(Error::invalid_argument(format!(
                    "obs column \"{n}\" is requested twice"
                )));
            }
            out.push(i);
        }
        Ok(out)
    }

    fn n_shards(&self) -> usize {
        self.shard_bytes.len()
    }

    fn shard_tiles(&self, s: usize) -> std::ops::Range<usize> {
        let k = self.tiles_per_file as usize;
        s * k..((s + 1) * k).min(self.tile_cells.len())
    }

    fn shard_path(&self, s: usize) -> PathBuf {
        self.root.join(shard_relpath(s as u64))
    }

    /// Opens shard `s`, checks its size, row groups and schema; returns the file and its
    /// parsed footer.
    fn open_shard(&self, s: usize) -> Result<(Shard, ArrowReaderMetadata)> {
        let path = self.shard_path(s);
        let what = format!("obs shard {s} ({})", path.display());
        let missing = |e: Error| {
            if e.kind == ErrorKind::NotFound && !self.store.deleted() {
                Error::format(format!("{what}: missing, though the manifest lists it"))
            } else {
                e
            }
        };
        #[cfg(feature = "remote")]
        if let Some(remote) = self.store.remote() {
            // Size from the manifest (no HEAD); the footer from the object's tail.
            let rel = shard_relpath(s as u64);
            let object = crate::storage::remote::ranged::RangedObject::new(
                remote.clone(),
                &rel,
                self.shard_bytes[s],
            );
            object
                .prefetch_tail(crate::storage::remote::ranged::FOOTER_GUESS)
                .map_err(missing)?;
            let meta = arrow_metadata(&object, &what, ArrowReaderOptions::new())?;
            self.check_shard(s, &what, &meta)?;
            return Ok((Shard::Remote(object), meta));
        }
        let file = self
            .store
            .open_file(&shard_relpath(s as u64))
            .map_err(missing)?;
        let len = file.metadata().map_err(|e| Error::io(&path, &e))?.len();
        if len != self.shard_bytes[s] {
            return Err(Error::format(format!(
                "{what}: file is {len} bytes, manifest obs_shard_bytes[{s}] says {}",
                self.shard_bytes[s]
            )));
        }
        let meta = arrow_metadata(&file, &what, ArrowReaderOptions::new())?;
        self.check_shard(s, &what, &meta)?;
        Ok((Shard::File(file), meta))
    }

    /// A shard's footer against the manifest and the schema: one row group per tile with
    /// its cells, the schema's columns and types.
    fn check_shard(&self, s: usize, what: &str, meta: &ArrowReaderMetadata) -> Result<()> {
        let tiles = self.shard_tiles(s);
        let rgs = meta.metadata().row_groups();
        if rgs.len() != tiles.len() {
            return Err(Error::format(format!(
                "{what}: {} row groups, must be one per tile ({} tiles: {}..{})",
                rgs.len(),
                tiles.len(),
                tiles.start,
                tiles.end
            )));
        }
        for (rg, t) in rgs.iter().zip(tiles) {
            if rg.num_rows() as u64 != self.tile_cells[t] {
                return Err(Error::format(format!(
                    "{what}: the row group of tile {t} has {} rows, tile_cells[{t}] is {}",
                    rg.num_rows(),
                    self.tile_cells[t]
                )));
            }
        }
        let got = meta.schema();
        let want = &self.schema.columns;
        if got.fields().len() != want.len() {
            return Err(Error::format(format!(
                "{what}: {} columns, obs/schema.json lists {}",
                got.fields().len(),
                want.len()
            )));
        }
        for (f, c) in got.fields().iter().zip(want) {
            if f.name() != &c.name || f.data_type() != &c.stored_type() {
                return Err(Error::format(format!(
                    "{what}: column \"{}\" of type {}, obs/schema.json says \"{}\" of type {} ({})",
                    f.name(),
                    f.data_type(),
                    c.name,
                    c.arrow_type,
                    c.stored_type()
                )));
            }
        }
        Ok(())
    }

    /// Reads the stored columns `idx` of every tile from the shards: result[k][t].
    fn fetch(&self, idx: &[usize], counters: &ObsCounters) -> Result<Vec<Vec<ArrayRef>>> {
        let mut out: Vec<Vec<ArrayRef>> =
            vec![Vec::with_capacity(self.tile_cells.len()); idx.len()];
        for s in 0..self.n_shards() {
            let (shard, meta) = self.open_shard(s)?;
            counters.shard_reads.fetch_add(1, Ordering::Relaxed);
            let what = format!("obs shard {s} ({})", self.shard_path(s).display());
            let batches = match shard {
                Shard::File(file) => decode_columns(&file, meta, idx, &what)?,
                #[cfg(feature = "remote")]
                Shard::Remote(object) => {
                    // The needed column chunks of every row group, coalesced and concurrent.
                    let groups: Vec<usize> = (0..meta.metadata().num_row_groups()).collect();
                    let ranges = crate::storage::remote::ranged::column_chunk_ranges(
                        meta.metadata(),
                        &groups,
                        idx,
                    );
                    object.prefetch(ranges)?;
                    decode_columns(&object, meta, idx, &what)?
                }
            };
            // The projection keeps the file's column order; map back to the request's.
            let mut order: Vec<usize> = idx.to_vec();
            order.sort_unstable();
            for (k, &i) in idx.iter().enumerate() {
                let pos = order.binary_search(&i).unwrap();
                let parts: Vec<&dyn Array> =
                    batches.iter().map(|b| b.column(pos).as_ref()).collect();
                let whole = if parts.is_empty() {
                    arrow_array::new_empty_array(&self.schema.columns[i].stored_type())
                } else {
                    arrow_select::concat::concat(&parts).map_err(|e| arrow_err(&what, e))?
                };
                let tiles = self.shard_tiles(s);
                let want: u64 = self.tile_cells[tiles.clone()].iter().sum();
                if whole.len() as u64 != want {
                    return Err(Error::format(format!(
                        "{what}: column \"{}\" has {} rows, its tiles hold {want} cells",
                        self.schema.columns[i].name,
                        whole.len()
                    )));
                }
                let mut at = 0usize;
                for t in tiles {
                    let n = self.tile_cells[t] as usize;
                    out[k].push(whole.slice(at, n));
                    at += n;
                }
            }
        }
        Ok(out)
    }

    /// Converts a stored column of tile `t` to what `Dataset::obs` yields, checking codes.
    fn output_array(&self, i: usize, t: usize, a: &ArrayRef) -> Result<ArrayRef> {
        let c = &self.schema.columns[i];
        if a.data_type() != &c.stored_type() || a.len() as u64 != self.tile_cells[t] {
            return Err(Error::format(format!(
                "obs column \"{}\", tile {t}: {} rows of {}, expected {} rows of {}",
                c.name,
                a.len(),
                a.data_type(),
                self.tile_cells[t],
                c.stored_type()
            )));
        }
        let Some(values) = &self.vocab[i] else {
            return Ok(a.clone());
        };
        let n = values.len() as i64;
        match a.data_type() {
            DataType::Int8 => to_dictionary::<Int8Type>(a, values, n, &c.name, t),
            DataType::Int16 => to_dictionary::<Int16Type>(a, values, n, &c.name, t),
            _ => to_dictionary::<Int32Type>(a, values, n, &c.name, t),
        }
    }

    /// The stored columns `idx`, per tile, through the cache when there is one.
    pub(crate) fn read(
        &self,
        idx: &[usize],
        cache_root: Option<PathBuf>,
        counters: &ObsCounters,
    ) -> Result<Vec<Vec<ArrayRef>>> {
        let dir = cache_root.map(|c| c.join(&self.fingerprint).join(paths::OBS_DIR));
        let lock = dir.as_ref().and_then(|d| {
            std::fs::create_dir_all(d).ok()?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(d.join(".lock"))
                .ok()?;
            f.lock().ok()?;
            Some(f)
        });
        let (Some(dir), Some(lock)) = (dir, lock) else {
            // No usable cache: read the shards directly.
            return self.fetch(idx, counters);
        };
        let mut have: Vec<Option<Vec<ArrayRef>>> =
            idx.iter().map(|&i| self.load_cached(&dir, i)).collect();
        let missing: Vec<usize> = (0..idx.len()).filter(|&k| have[k].is_none()).collect();
        if !missing.is_empty() {
            let want: Vec<usize> = missing.iter().map(|&k| idx[k]).collect();
            let fetched = self.fetch(&want, counters)?;
            for (k, data) in missing.into_iter().zip(fetched) {
                // A cache that cannot be written is no error: the data is in hand.
                let _ = self.store_cached(&dir, idx[k], &data);
                have[k] = Some(data);
            }
        }
        drop(lock);
        Ok(have.into_iter().map(Option::unwrap).collect())
    }

    fn cache_file(&self, dir: &Path, i: usize) -> PathBuf {
        dir.join(format!("{}.arrow", url_quote(&self.schema.columns[i].name)))
    }

    /// A cached column, if present and in agreement with the manifest; a cached file that
    /// disagrees is deleted.
    fn load_cached(&self, dir: &Path, i: usize) -> Option<Vec<ArrayRef>> {
        let path = self.cache_file(dir, i);
        let file = File::open(&path).ok()?;
        let c = &self.schema.columns[i];
        // arrow-ipc decodes the cache file: contained, a panic is a bad cache file.
        let ok = crate::contain::catch(|| {
            let r = arrow_ipc::reader::FileReader::try_new(BufReader::new(file), None).ok()?;
            let s = r.schema();
            if r.num_batches() != self.tile_cells.len()
                || s.fields().len() != 1
                || s.field(0).name() != &c.name
                || s.field(0).data_type() != &c.stored_type()
            {
                return None;
            }
            let mut out = Vec::with_capacity(self.tile_cells.len());
            for (t, b) in r.enumerate() {
                let b = b.ok()?;
                if b.num_rows() as u64 != self.tile_cells[t] {
                    return None;
                }
                let a = b.column(0).clone();
                // A cached column must decode like the shards would.
                self.output_array(i, t, &a).ok()?;
                out.push(a);
            }
            Some(out)
        })
        .ok()
        .flatten();
        if ok.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        ok
    }

    fn store_cached(&self, dir: &Path, i: usize, data: &[ArrayRef]) -> Result<()> {
        let path = self.cache_file(dir, i);
        let c = &self.schema.columns[i];
        let schema = Arc::new(Schema::new(vec![Field::new(
            &c.name,
            c.stored_type(),
            true,
        )]));
        fs::write_file_atomically(&path, |f| {
            let r = (|| -> std::result::Result<(), Box<dyn std::error::Error>> {
                let mut w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &schema)?;
                for a in data {
                    w.write(&RecordBatch::try_new(schema.clone(), vec![a.clone()])?)?;
                }
                w.finish()?;
                w.into_inner()?.flush()?;
                Ok(())
            })();
            r.map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", path.display())))
        })
    }

    /// Sizes, SHA-256 and structure of every shard, and the fingerprint.
    pub(crate) fn verify(&self) -> Result<()> {
        for s in 0..self.n_shards() {
            let (_, _) = self.open_shard(s)?;
            let path = self.shard_path(s);
            let mut h = Sha256::new();
            if self.store.is_remote() {
                let bytes = self.store.read(&shard_relpath(s as u64))?;
                if bytes.len() as u64 != self.shard_bytes[s] {
                    return Err(Error::format(format!(
                        "obs shard {s} ({}): object is {} bytes, manifest obs_shard_bytes[{s}] says {}",
                        path.display(),
                        bytes.len(),
                        self.shard_bytes[s]
                    )));
                }
                h.update(&bytes);
            } else {
                let mut f = self.store.open_file(&shard_relpath(s as u64))?;
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = f.read(&mut buf).map_err(|e| Error::io(&path, &e))?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
            let got = hex(&h.finalize());
            if !got.eq_ignore_ascii_case(&self.shard_sha256[s]) {
                return Err(Error::checksum(format!(
                    "obs shard {s} ({}): SHA-256 is {got}, manifest obs_shard_sha256[{s}] says {}",
                    path.display(),
                    self.shard_sha256[s]
                )));
            }
        }
        let shas: Vec<String> = self
            .shard_sha256
            .iter()
            .map(|s| s.to_ascii_lowercase())
            .collect();
        let fp = fingerprint(&self.schema_text, &self.tile_cells, &shas);
        if !fp.eq_ignore_ascii_case(&self.fingerprint) {
            return Err(Error::checksum(format!(
                "{}: obs_fingerprint is {}, but obs/schema.json, tile_cells and obs_shard_sha256 give {fp}",
                self.root.join(paths::MANIFEST).display(),
                self.fingerprint
            )));
        }
        Ok(())
    }

    /// A reader yielding one batch per tile of the columns `idx` (data from `read`).
    pub(crate) fn stream(
        &self,
        idx: &[usize],
        data: Vec<Vec<ArrayRef>>,
    ) -> Result<Box<dyn RecordBatchReader + Send>> {
        let schema = self.schema.output_schema(idx);
        let mut batches = Vec::with_capacity(self.tile_cells.len());
        for t in 0..self.tile_cells.len() {
            let cols = idx
                .iter()
                .zip(&data)
                .map(|(&i, col)| self.output_array(i, t, &col[t]))
                .collect::<Result<Vec<_>>>()?;
            let opts = RecordBatchOptions::new().with_row_count(Some(self.tile_cells[t] as usize));
            let b = RecordBatch::try_new_with_options(schema.clone(), cols, &opts)
                .map_err(|e| internal("obs batch", e))?;
            batches.push(Ok(b));
        }
        Ok(Box::new(arrow_array::RecordBatchIterator::new(
            batches, schema,
        )))
    }
}

fn to_dictionary<K: ArrowDictionaryKeyType>(
    a: &ArrayRef,
    values: &ArrayRef,
    n: i64,
    name: &str,
    t: usize,
) -> Result<ArrayRef>
where
    K::Native: Into<i64>,
{
    let codes = a.as_primitive::<K>();
    let mut valid = Vec::with_capacity(codes.len());
    for (r, c) in codes.iter().enumerate() {
        match c.map(Into::into) {
            None | Some(-1) => valid.push(false),
            Some(c) if (0..n).contains(&c) => valid.push(true),
            Some(c) => {
                return Err(Error::format(format!(
                    "obs column \"{name}\", tile {t}, row {r}: code {c} is outside -1..{n} (the vocabulary has {n} categories)"
                )))
            }
        }
    }
    // Null slots get key 0, so that no consumer ever sees -1 as an index.
    let raw: Vec<K::Native> = codes
        .values()
        .iter()
        .zip(&valid)
        .map(|(&c, &v)| if v { c } else { K::Native::default() })
        .collect();
    let keys = PrimitiveArray::<K>::new(raw.into(), Some(arrow_buffer::NullBuffer::from(valid)));
    let d = DictionaryArray::<K>::try_new(keys, values.clone())
        .map_err(|e| internal(format!("obs column \"{name}\", tile {t}"), e))?;
    Ok(Arc::new(d))
}
