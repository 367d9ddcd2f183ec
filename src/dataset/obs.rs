//! Obs: per-cell metadata stored beside the tiles (format v2, "Obs").
//!
//! * `obs/schema.json` describes the columns: `{"format": "deltacells-obs", "version": 1,
//!   "columns": [{"name", "kind", "arrow_type", "categories"}, ...]}`. Every column object
//!   carries all four keys; `categories` is the sorted global vocabulary of a `category`
//!   column and `null` for the other kinds (a reader also accepts it absent).
//! * `obs/obs_NNNN.parquet` shards hold `obs_tiles_per_file` tiles each, one row group per
//!   tile, zstd, no statistics.
//!
//! Writing streams: batches are normalised (text columns to utf8) and spilled to an Arrow
//! IPC stream in the temporary dataset directory, while the distinct values of each
//! categorical (dictionary) column are counted (up to `max_categories`; beyond it the column
//! is stored as string, as the format says). Plain text columns are string columns. At finish the vocabularies are final, and
//! the spill is read back tile by tile into the shards.
//!
//! Reading localises columns into a per-fingerprint cache (`<cache>/<fingerprint>/obs/
//! <url-quoted name>.arrow`, uncompressed Arrow IPC, one record batch per tile), written
//! to a temporary file and renamed under `obs/.lock`; later reads never touch the shards.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Int16Array, Int32Array, Int8Array, PrimitiveArray,
    RecordBatch, RecordBatchOptions, RecordBatchReader, StringArray,
};
use arrow_buffer::ArrowNativeType;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::fs;

use super::manifest::{Manifest, FINGERPRINT_LEN};
use super::paths;

/// The `format` of `obs/schema.json`.
pub const OBS_FORMAT: &str = "deltacells-obs";
/// The `version` of `obs/schema.json` this build reads and writes.
pub const OBS_VERSION: u64 = 1;
/// Text columns with more distinct values than this are stored as `string`.
pub const DEFAULT_MAX_CATEGORIES: usize = 20_000;
/// `obs/schema.json`.
pub const SCHEMA_RELPATH: &str = "obs/schema.json";

/// `obs/obs_NNNN.parquet` (zero-padded to 4 digits).
pub fn shard_relpath(s: u64) -> String {
    format!("{}/obs_{s:04}.parquet", paths::OBS_DIR)
}

/// How an obs column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObsKind {
    /// Integer codes into the global `categories` (-1 = missing); read as a dictionary.
    Category,
    /// Integers or floats as stored; nulls are missing values.
    Numeric,
    /// Arrow bool; nulls are missing values.
    Bool,
    /// Arrow utf8 (text columns with more than `max_categories` distinct values).
    String,
}

impl ObsKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObsKind::Category => "category",
            ObsKind::Numeric => "numeric",
            ObsKind::Bool => "bool",
            ObsKind::String => "string",
        }
    }
}

/// One column of `obs/schema.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObsColumn {
    pub name: String,
    pub kind: ObsKind,
    /// The Arrow type of the stored column, named as pyarrow does (`int8`, `double`,
    /// `float`, `bool`, `string`, ...).
    pub arrow_type: String,
    /// The vocabulary of a category column (code i means `categories[i]`); `None` otherwise.
    pub categories: Option<Vec<String>>,
}

impl ObsColumn {
    /// The Arrow type of the stored (parquet) column.
    pub fn stored_type(&self) -> DataType {
        // Validated when the schema was built or parsed.
        type_of_name(&self.arrow_type).unwrap_or(DataType::Null)
    }

    /// The Arrow type `Dataset::obs` yields: a dictionary over the vocabulary for
    /// categories, the stored type otherwise.
    pub fn output_type(&self) -> DataType {
        match self.kind {
            ObsKind::Category => {
                DataType::Dictionary(Box::new(self.stored_type()), Box::new(DataType::Utf8))
            }
            _ => self.stored_type(),
        }
    }
}

/// The parsed `obs/schema.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObsSchema {
    pub format: String,
    pub version: u64,
    pub columns: Vec<ObsColumn>,
}

/// The Arrow type named `name` (pyarrow's names, plus a few common aliases).
pub fn type_of_name(name: &str) -> Option<DataType> {
    Some(match name {
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "uint8" => DataType::UInt8,
        "uint16" => DataType::UInt16,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "float" | "float32" => DataType::Float32,
        "double" | "float64" => DataType::Float64,
        "bool" | "boolean" => DataType::Boolean,
        "string" | "utf8" => DataType::Utf8,
        _ => return None,
    })
}

/// pyarrow's name of a stored type (`None` for types obs does not store).
pub fn name_of_type(t: &DataType) -> Option<&'static str> {
    Some(match t {
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::UInt8 => "uint8",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::UInt64 => "uint64",
        DataType::Float32 => "float",
        DataType::Float64 => "double",
        DataType::Boolean => "bool",
        DataType::Utf8 => "string",
        _ => return None,
    })
}

fn is_numeric(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
    )
}

/// The smallest code type holding codes 0..n-1 and -1.
pub fn code_type(n_categories: usize) -> DataType {
    if n_categories <= 1 << 7 {
        DataType::Int8
    } else if n_categories <= 1 << 15 {
        DataType::Int16
    } else {
        DataType::Int32
    }
}

impl ObsSchema {
    /// Parses and validates `obs/schema.json` text (`what` names the file in errors).
    pub fn parse(text: &[u8], what: &str) -> Result<ObsSchema> {
        let bad = |rule: String| Error::format(format!("{what}: {rule}"));
        let v: Value =
            serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("must be a JSON object".into()))?;
        match obj.get("format").and_then(Value::as_str) {
            Some(OBS_FORMAT) => {}
            Some(f) => {
                return Err(Error::unsupported(format!(
                    "{what}: \"format\" is \"{f}\", this build reads \"{OBS_FORMAT}\""
                )))
            }
            None => return Err(bad("\"format\" is missing or not a string".into())),
        }
        match obj.get("version") {
            Some(x) if x.as_u64() == Some(OBS_VERSION) => {}
            Some(x) if x.is_number() => {
                return Err(Error::unsupported(format!(
                    "{what}: \"version\" is {x}, this build reads version {OBS_VERSION}"
                )))
            }
            _ => return Err(bad("\"version\" is missing or not an integer".into())),
        }
        let cols = obj
            .get("columns")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("\"columns\" is missing or not a list".into()))?;
        if cols.is_empty() {
            return Err(bad("\"columns\" is empty".into()));
        }
        let mut columns = Vec::with_capacity(cols.len());
        let mut names = HashSet::new();
        for (i, c) in cols.iter().enumerate() {
            let field = |key: &str| {
                c.get(key).and_then(Value::as_str).ok_or_else(|| {
                    bad(format!(
                        "columns[{i}]: \"{key}\" is missing or not a string"
                    ))
                })
            };
            let name = field("name")?.to_string();
            if !names.insert(name.clone()) {
                return Err(bad(format!("column \"{name}\" appears twice")));
            }
            let col = |rule: String| bad(format!("column \"{name}\": {rule}"));
            let kind = match field("kind")? {
                "category" => ObsKind::Category,
                "numeric" => ObsKind::Numeric,
                "bool" => ObsKind::Bool,
                "string" => ObsKind::String,
                k => {
                    return Err(col(format!(
                        "kind \"{k}\" is not one of category, numeric, bool, string"
                    )))
                }
            };
            let arrow_type = field("arrow_type")?.to_string();
            let t = type_of_name(&arrow_type).ok_or_else(|| {
                Error::unsupported(format!(
                    "{what}: column \"{name}\": arrow_type \"{arrow_type}\" is not a type this build reads"
                ))
            })?;
            let fits = match kind {
                ObsKind::Category => {
                    matches!(t, DataType::Int8 | DataType::Int16 | DataType::Int32)
                }
                ObsKind::Numeric => is_numeric(&t),
                ObsKind::Bool => t == DataType::Boolean,
                ObsKind::String => t == DataType::Utf8,
            };
            if !fits {
                return Err(col(format!(
                    "arrow_type \"{arrow_type}\" does not suit kind \"{}\"",
                    kind.as_str()
                )));
            }
            let categories = match (kind, c.get("categories")) {
                (ObsKind::Category, Some(Value::Array(a))) => {
                    let mut cats = Vec::with_capacity(a.len());
                    let mut seen = HashSet::with_capacity(a.len());
                    for x in a {
                        let s = x
                            .as_str()
                            .ok_or_else(|| col(format!("categories must be strings, got {x}")))?;
                        if !seen.insert(s) {
                            return Err(col(format!("category \"{s}\" appears twice")));
                        }
                        cats.push(s.to_string());
                    }
                    Some(cats)
                }
                (ObsKind::Category, _) => {
                    return Err(col("a category column needs a \"categories\" list".into()))
                }
                (_, None | Some(Value::Null)) => None,
                (_, Some(_)) => {
                    return Err(col(format!(
                        "\"categories\" must be null for kind \"{}\"",
                        kind.as_str()
                    )))
                }
            };
            columns.push(ObsColumn {
                name,
                kind,
                arrow_type,
                categories,
            });
        }
        Ok(ObsSchema {
            format: OBS_FORMAT.into(),
            version: OBS_VERSION,
            columns,
        })
    }

    /// The text written to `obs/schema.json` (compact JSON, keys in the spec's order, no
    /// final newline); the fingerprint covers exactly this text.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot serialize the obs schema: {e}"),
            )
        })
    }

    /// The schema of the stored (parquet) columns.
    pub fn stored_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| Field::new(&c.name, c.stored_type(), c.kind != ObsKind::Category))
                .collect::<Vec<_>>(),
        ))
    }

    /// The schema `Dataset::obs` yields for the columns `idx`.
    pub fn output_schema(&self, idx: &[usize]) -> SchemaRef {
        Arc::new(Schema::new(
            idx.iter()
                .map(|&i| {
                    let c = &self.columns[i];
                    Field::new(&c.name, c.output_type(), true)
                })
                .collect::<Vec<_>>(),
        ))
    }
}

/// `obs_fingerprint`: the first 24 hex characters of the SHA-256 of the canonical JSON
/// `{"schema": <schema text>, "shards": [...], "tile_cells": [...]}` (sorted keys, `,` and
/// `:` separators, non-ASCII as UTF-8: Python's `json.dumps(..., sort_keys=True,
/// separators=(",", ":"), ensure_ascii=False)`).
pub fn fingerprint(schema_text: &str, tile_cells: &[u64], shard_sha256: &[String]) -> String {
    let mut j = String::from("{\"schema\":");
    // serde_json escapes exactly as Python's json does with ensure_ascii=False: `"`, `\`,
    // \b \f \n \r \t, other control characters as \u00xx (lowercase), nothing else.
    j.push_str(&serde_json::to_string(schema_text).unwrap_or_default());
    j.push_str(",\"shards\":[");
    for (i, s) in shard_sha256.iter().enumerate() {
        if i > 0 {
            j.push(',');
        }
        j.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
    j.push_str("],\"tile_cells\":[");
    for (i, c) in tile_cells.iter().enumerate() {
        if i > 0 {
            j.push(',');
        }
        j.push_str(&c.to_string());
    }
    j.push_str("]}");
    let mut h = hex(&Sha256::digest(j.as_bytes()));
    h.truncate(FINGERPRINT_LEN);
    h
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Percent-encodes every byte but ASCII letters, digits and `_.-~` (Python's
/// `urllib.parse.quote(name, safe="")`).
pub fn url_quote(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn arrow_err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::format(format!("{what}: {e}"))
}

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

// ------------------------------------------------------------------------------------
// Writing
// ------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------
// Reading
// ------------------------------------------------------------------------------------

/// Obs of an open dataset: the schema and what the manifest says of the shards.
#[derive(Debug)]
pub(crate) struct ObsMeta {
    root: PathBuf,
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
    pub(crate) fn load(root: &Path, m: &Manifest) -> Result<ObsMeta> {
        let path = root.join(SCHEMA_RELPATH);
        let text = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::format(format!(
                    "{}: missing, though the manifest's has_obs is true",
                    path.display()
                ))
            } else {
                Error::io(&path, &e)
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
            root: root.to_path_buf(),
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
    fn open_shard(&self, s: usize) -> Result<(File, ArrowReaderMetadata)> {
        let path = self.shard_path(s);
        let what = format!("obs shard {s} ({})", path.display());
        let file = File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::format(format!("{what}: missing, though the manifest lists it"))
            } else {
                Error::io(&path, &e)
            }
        })?;
        let len = file.metadata().map_err(|e| Error::io(&path, &e))?.len();
        if len != self.shard_bytes[s] {
            return Err(Error::format(format!(
                "{what}: file is {len} bytes, manifest obs_shard_bytes[{s}] says {}",
                self.shard_bytes[s]
            )));
        }
        let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
            .map_err(|e| arrow_err(&what, format!("not a readable parquet file ({e})")))?;
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
        Ok((file, meta))
    }

    /// Reads the stored columns `idx` of every tile from the shards: result[k][t].
    fn fetch(&self, idx: &[usize], counters: &ObsCounters) -> Result<Vec<Vec<ArrayRef>>> {
        let mut out: Vec<Vec<ArrayRef>> =
            vec![Vec::with_capacity(self.tile_cells.len()); idx.len()];
        for s in 0..self.n_shards() {
            let (file, meta) = self.open_shard(s)?;
            counters.shard_reads.fetch_add(1, Ordering::Relaxed);
            let what = format!("obs shard {s} ({})", self.shard_path(s).display());
            let mask = ProjectionMask::roots(meta.parquet_schema(), idx.iter().copied());
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta)
                .with_projection(mask)
                .with_batch_size(1 << 16)
                .build()
                .map_err(|e| arrow_err(&what, e))?;
            let batches = reader
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| arrow_err(&what, e))?;
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
        let ok = (|| {
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
        })();
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
            let mut f = File::open(&path).map_err(|e| Error::io(&path, &e))?;
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = f.read(&mut buf).map_err(|e| Error::io(&path, &e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
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
