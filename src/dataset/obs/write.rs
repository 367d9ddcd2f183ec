//! Writing obs: batches are normalised and spilled to an Arrow IPC stream while the
//! vocabularies of categorical columns are counted; at finish the spill is read back tile by
//! tile into the Parquet shards.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, Int16Array, Int32Array, Int8Array, RecordBatch, StringArray};
use arrow_buffer::ArrowNativeType;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use sha2::{Digest, Sha256};

use crate::dataset::paths;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::fs;

use super::schema::{
    code_type, fingerprint, hex, is_numeric, name_of_type, shard_relpath, ObsColumn, ObsKind,
    ObsSchema, OBS_FORMAT, OBS_VERSION, SCHEMA_RELPATH,
};

fn internal(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{what}: {e}"))
}

/// Shard and row-group writing properties: zstd, no statistics of any kind.
fn shard_properties(max_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::None)
        .set_max_row_group_row_count(Some(max_rows.max(1)))
        .build()
}

/// What the writer learned about an input column.
#[derive(Debug)]
enum InputClass {
    /// Text (utf8 or a dictionary of text): distinct values so far, `None` once they
    /// exceed `max_categories`.
    Text(Option<HashSet<String>>),
    Numeric(DataType),
    Bool,
}

/// Converts a text-like array (utf8, large utf8, utf8 view, or a dictionary of them) to
/// utf8; `None` if the type is not text-like.
fn to_utf8(a: &dyn Array, name: &str) -> Result<Option<StringArray>> {
    let too_big = || {
        Error::invalid_argument(format!(
            "obs column \"{name}\": more than 2 GiB of text in one batch; append smaller batches"
        ))
    };
    Ok(Some(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().clone(),
        DataType::LargeUtf8 => {
            let l = a.as_string::<i64>();
            if l.value_data().len() >= i32::MAX as usize {
                return Err(too_big());
            }
            l.iter().collect()
        }
        DataType::Utf8View => {
            let v = a.as_string_view();
            let total: usize = v.iter().map(|s| s.map_or(0, str::len)).sum();
            if total >= i32::MAX as usize {
                return Err(too_big());
            }
            v.iter().collect()
        }
        DataType::Dictionary(k, _) => {
            let Some(values) = to_utf8(a.as_any_dictionary().values().as_ref(), name)? else {
                return Ok(None);
            };
            match k.as_ref() {
                DataType::Int8 => dict_to_utf8::<Int8Type>(a, &values),
                DataType::Int16 => dict_to_utf8::<Int16Type>(a, &values),
                DataType::Int32 => dict_to_utf8::<Int32Type>(a, &values),
                DataType::Int64 => dict_to_utf8::<Int64Type>(a, &values),
                DataType::UInt8 => dict_to_utf8::<UInt8Type>(a, &values),
                DataType::UInt16 => dict_to_utf8::<UInt16Type>(a, &values),
                DataType::UInt32 => dict_to_utf8::<UInt32Type>(a, &values),
                DataType::UInt64 => dict_to_utf8::<UInt64Type>(a, &values),
                _ => return Ok(None),
            }
            .ok_or_else(too_big)?
        }
        _ => return Ok(None),
    }))
}

fn dict_to_utf8<K: ArrowDictionaryKeyType>(
    a: &dyn Array,
    values: &StringArray,
) -> Option<StringArray> {
    let d = a.as_dictionary::<K>();
    let mut total = 0usize;
    let mut b = StringBuilder::with_capacity(d.len(), 0);
    for k in d.keys().iter() {
        match k.map(|k| k.as_usize()) {
            Some(k) if k < values.len() && values.is_valid(k) => {
                let s = values.value(k);
                total += s.len();
                if total >= i32::MAX as usize {
                    return None;
                }
                b.append_value(s);
            }
            _ => b.append_null(),
        }
    }
    Some(b.finish())
}

/// Obs rows spilled by the writer until `finish`.
pub(crate) struct ObsSpill {
    path: PathBuf,
    writer: Option<arrow_ipc::writer::StreamWriter<BufWriter<File>>>,
    /// Normalised schema (text as utf8, all nullable).
    schema: Option<SchemaRef>,
    classes: Vec<InputClass>,
    rows: u64,
    max_categories: usize,
}

/// What `ObsSpill::write_shards` produced, for the manifest.
#[derive(Debug)]
pub(crate) struct ObsWritten {
    pub shard_bytes: Vec<u64>,
    pub shard_sha256: Vec<String>,
    pub fingerprint: String,
}

impl ObsSpill {
    pub(crate) fn new(path: PathBuf, max_categories: usize) -> ObsSpill {
        ObsSpill {
            path,
            writer: None,
            schema: None,
            classes: Vec::new(),
            rows: 0,
            max_categories,
        }
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// Checks and normalises `batch` (all or nothing), then spills it.
    pub(crate) fn append(&mut self, batch: &RecordBatch) -> Result<()> {
        let schema = batch.schema();
        if schema.fields().is_empty() {
            return Err(Error::invalid_argument("obs batch has no columns"));
        }
        let mut seen = HashSet::new();
        for f in schema.fields() {
            if f.name().contains('\0') {
                // obs/schema.json would hold it, and readers refuse it (an Arrow field name
                // is a C string across the C Data Interface).
                return Err(Error::invalid_argument(format!(
                    "obs batch: column name {:?} contains a NUL byte",
                    f.name()
                )));
            }
            if !seen.insert(f.name().as_str()) {
                return Err(Error::invalid_argument(format!(
                    "obs batch: column \"{}\" appears twice",
                    f.name()
                )));
            }
        }
        if let Some(first) = &self.schema {
            let names: Vec<&String> = first.fields().iter().map(|f| f.name()).collect();
            let got: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
            if names != got {
                return Err(Error::invalid_argument(format!(
                    "obs batch columns {got:?} differ from the first batch's {names:?}"
                )));
            }
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        let mut classes = Vec::with_capacity(batch.num_columns());
        for (f, a) in schema.fields().iter().zip(batch.columns()) {
            let name = f.name();
            // pandas semantics: a categorical (Arrow dictionary) column is a category
            // column unless its vocabulary exceeds max_categories; plain text is a string
            // column.
            let categorical = matches!(a.data_type(), DataType::Dictionary(..));
            if let Some(s) = to_utf8(a.as_ref(), name)? {
                columns.push(Arc::new(s));
                classes.push(if categorical { 0u8 } else { 3 });
            } else if is_numeric(a.data_type()) {
                columns.push(a.clone());
                classes.push(1);
            } else if a.data_type() == &DataType::Boolean {
                columns.push(a.clone());
                classes.push(2);
            } else {
                return Err(Error::invalid_argument(format!(
                    "obs column \"{name}\": Arrow type {} is not supported (obs holds categorical, numeric, boolean and string columns)",
                    a.data_type()
                )));
            }
        }
        if let Some(first) = &self.schema {
            for (f, a) in first.fields().iter().zip(&columns) {
                if f.data_type() != a.data_type() {
                    return Err(Error::invalid_argument(format!(
                        "obs column \"{}\" is {} in this batch but {} in the first one",
                        f.name(),
                        a.data_type(),
                        f.data_type()
                    )));
                }
            }
        }
        let norm_schema = match &self.schema {
            Some(s) => s.clone(),
            None => Arc::new(Schema::new(
                schema
                    .fields()
                    .iter()
                    .zip(&columns)
                    .map(|(f, a)| Field::new(f.name(), a.data_type().clone(), true))
                    .collect::<Vec<_>>(),
            )),
        };
        let norm = RecordBatch::try_new(norm_schema.clone(), columns)
            .map_err(|e| Error::invalid_argument(format!("obs batch: {e}")))?;
        if self.writer.is_none() {
            let file = File::create(&self.path).map_err(|e| Error::io(&self.path, &e))?;
            let w = arrow_ipc::writer::StreamWriter::try_new(BufWriter::new(file), &norm_schema)
                .map_err(|e| internal(self.path.display(), e))?;
            self.writer = Some(w);
            self.schema = Some(norm_schema);
            self.classes = classes
                .iter()
                .zip(norm.columns())
                .map(|(&c, a)| match c {
                    0 => InputClass::Text(Some(HashSet::new())),
                    3 => InputClass::Text(None),
                    1 => InputClass::Numeric(a.data_type().clone()),
                    _ => InputClass::Bool,
                })
                .collect();
        }
        self.writer
            .as_mut()
            .unwrap()
            .write(&norm)
            .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display())))?;
        let max = self.max_categories;
        for (class, a) in self.classes.iter_mut().zip(norm.columns()) {
            if let InputClass::Text(Some(set)) = class {
                for s in a.as_string::<i32>().iter().flatten() {
                    if !set.contains(s) {
                        set.insert(s.to_string());
                    }
                    if set.len() > max {
                        *class = InputClass::Text(None);
                        break;
                    }
                }
            }
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// The final schema: vocabularies sorted, code widths chosen.
    fn schema(&self) -> ObsSchema {
        let fields = self.schema.as_ref().map(|s| s.fields().clone());
        let columns = fields
            .iter()
            .flat_map(|f| f.iter())
            .zip(&self.classes)
            .map(|(f, class)| {
                let name = f.name().clone();
                match class {
                    InputClass::Text(Some(set)) => {
                        let cats: Vec<String> = set
                            .iter()
                            .cloned()
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        ObsColumn {
                            name,
                            kind: ObsKind::Category,
                            arrow_type: name_of_type(&code_type(cats.len())).unwrap().into(),
                            categories: Some(cats),
                        }
                    }
                    InputClass::Text(None) => ObsColumn {
                        name,
                        kind: ObsKind::String,
                        arrow_type: "string".into(),
                        categories: None,
                    },
                    InputClass::Numeric(t) => ObsColumn {
                        name,
                        kind: ObsKind::Numeric,
                        arrow_type: name_of_type(t).unwrap_or("null").into(),
                        categories: None,
                    },
                    InputClass::Bool => ObsColumn {
                        name,
                        kind: ObsKind::Bool,
                        arrow_type: "bool".into(),
                        categories: None,
                    },
                }
            })
            .collect();
        ObsSchema {
            format: OBS_FORMAT.into(),
            version: OBS_VERSION,
            columns,
        }
    }

    /// Writes `obs/schema.json` and the shards into `root` (the temporary dataset
    /// directory) from the spill, then removes the spill.
    pub(crate) fn write_shards(
        &mut self,
        root: &Path,
        tile_cells: &[u64],
        tiles_per_file: u64,
    ) -> Result<ObsWritten> {
        let total: u64 = tile_cells.iter().sum();
        if total != self.rows {
            return Err(Error::invalid_argument(format!(
                "obs has {} rows but {total} cells were appended; they must match",
                self.rows
            )));
        }
        if let Some(mut w) = self.writer.take() {
            w.finish()
                .and_then(|_| w.get_mut().flush().map_err(ArrowError::from))
                .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display())))?;
        }
        let schema = self.schema();
        let text = schema.to_json()?;
        let obs_dir = root.join(paths::OBS_DIR);
        std::fs::create_dir_all(&obs_dir).map_err(|e| Error::io(&obs_dir, &e))?;
        fs::write_synced(&root.join(SCHEMA_RELPATH), text.as_bytes())?;

        let stored = schema.stored_schema();
        let lookups: Vec<Option<HashMap<&str, i32>>> = schema
            .columns
            .iter()
            .map(|c| {
                c.categories.as_ref().map(|cats| {
                    cats.iter()
                        .enumerate()
                        .map(|(i, s)| (s.as_str(), i as i32))
                        .collect()
                })
            })
            .collect();
        let max_tile = tile_cells.iter().copied().max().unwrap_or(1) as usize;
        let props = shard_properties(max_tile);

        let mut source: Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> =
            if tile_cells.is_empty() {
                Box::new(std::iter::empty())
            } else {
                let f = File::open(&self.path).map_err(|e| Error::io(&self.path, &e))?;
                Box::new(
                    arrow_ipc::reader::StreamReader::try_new(BufReader::new(f), None)
                        .map_err(|e| internal(self.path.display(), e))?,
                )
            };
        let mut carry: Option<RecordBatch> = None;
        let mut written = ObsWritten {
            shard_bytes: Vec::new(),
            shard_sha256: Vec::new(),
            fingerprint: String::new(),
        };
        let k = tiles_per_file as usize;
        for (s, tiles) in tile_cells.chunks(k).enumerate() {
            let path = root.join(shard_relpath(s as u64));
            let file = File::create(&path).map_err(|e| Error::io(&path, &e))?;
            let mut out = HashingWriter {
                inner: BufWriter::new(file),
                hasher: Sha256::new(),
                bytes: 0,
            };
            let io = |e: parquet::errors::ParquetError| {
                Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
            };
            let mut w = ArrowWriter::try_new(&mut out, stored.clone(), Some(props.clone()))
                .map_err(|e| internal(path.display(), e))?;
            for &cells in tiles {
                let mut parts = Vec::new();
                let mut need = cells as usize;
                while need > 0 {
                    let b = match carry.take() {
                        Some(b) => b,
                        None => source
                            .next()
                            .ok_or_else(|| internal(self.path.display(), "obs spill ended early"))?
                            .map_err(|e| internal(self.path.display(), e))?,
                    };
                    if b.num_rows() > need {
                        parts.push(b.slice(0, need));
                        carry = Some(b.slice(need, b.num_rows() - need));
                        need = 0;
                    } else {
                        need -= b.num_rows();
                        parts.push(b);
                    }
                }
                let tile =
                    arrow_select::concat::concat_batches(self.schema.as_ref().unwrap(), &parts)
                        .map_err(|e| internal("obs tile", e))?;
                let columns = tile
                    .columns()
                    .iter()
                    .zip(&schema.columns)
                    .zip(&lookups)
                    .map(|((a, c), lookup)| match lookup {
                        Some(map) => encode_codes(a.as_string::<i32>(), map, &c.stored_type()),
                        None => a.clone(),
                    })
                    .collect::<Vec<_>>();
                let batch = RecordBatch::try_new(stored.clone(), columns)
                    .map_err(|e| internal("obs tile", e))?;
                w.write(&batch).map_err(io)?;
                w.flush().map_err(io)?;
            }
            w.into_inner().map_err(io)?;
            out.inner
                .flush()
                .and_then(|_| out.inner.get_ref().sync_all())
                .map_err(|e| Error::io(&path, &e))?;
            written.shard_bytes.push(out.bytes);
            written.shard_sha256.push(hex(&out.hasher.finalize()));
        }
        fs::sync_dir(&obs_dir)?;
        let _ = std::fs::remove_file(&self.path);
        written.fingerprint = fingerprint(&text, tile_cells, &written.shard_sha256);
        Ok(written)
    }
}

fn encode_codes(a: &StringArray, lookup: &HashMap<&str, i32>, t: &DataType) -> ArrayRef {
    let codes = a
        .iter()
        .map(|s| s.and_then(|s| lookup.get(s).copied()).unwrap_or(-1));
    match t {
        DataType::Int8 => Arc::new(codes.map(|c| c as i8).collect::<Int8Array>()),
        DataType::Int16 => Arc::new(codes.map(|c| c as i16).collect::<Int16Array>()),
        _ => Arc::new(codes.collect::<Int32Array>()),
    }
}

/// A writer that hashes and counts what passes through.
struct HashingWriter {
    inner: BufWriter<File>,
    hasher: Sha256,
    bytes: u64,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
