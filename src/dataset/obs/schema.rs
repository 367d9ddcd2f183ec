//! The model of `obs/schema.json` (parsed and emitted by the same types), the names of the
//! obs files, and the fingerprint that identifies a dataset's obs. No I/O.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::dataset::manifest::FINGERPRINT_LEN;
use crate::dataset::paths;
use crate::error::{Error, ErrorKind, Result};

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

pub(crate) fn is_numeric(t: &DataType) -> bool {
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
            if name.contains('\0') {
                // A column name becomes an Arrow field name, a C string across the C Data
                // Interface: every obs stream would fail to export its schema.
                return Err(bad(format!(
                    "columns[{i}]: name {name:?} contains a NUL byte"
                )));
            }
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
