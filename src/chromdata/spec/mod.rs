//! The ChromData metadata model (spec §2–§4, §6.3, §12): one set of serde types that the
//! reader parses and the writer emits — the root attributes, `attrs["tables"]` with its
//! column descriptors, the component groups — with the validation rules of §2–§4 (and the
//! metadata-only rules of §14), the layouts and the type vocabulary, and the portable
//! names. No I/O: callers hand in parsed JSON and get typed, validated documents back.
//!
//! Unknown members are kept (`other` maps), so that a document parsed and emitted again
//! is the same JSON value. Members the reader never relies on (`uchrom_version`,
//! `ordered`, `dir`, `row_group_size`, `index`, `kind`, `source_result`, ...) are read
//! leniently: a value of another type is dropped, not rejected.

mod components;
mod groups;
mod layout;
mod names;
mod root;
mod tables;
mod types;

pub use layout::Layout;

#[allow(unused_imports)] // the writer side: see components.rs
pub(crate) use components::{
    externalize_uns, relative_path, ArrayNode, ResultAttrs, UnsArray, UNS_INLINE_MAX,
};
pub(crate) use groups::{ComponentAttrs, ComponentEntry, ComponentKind, GroupNode};
pub(crate) use names::{
    categories_path, chrom_dirs, portable, table_path, AXES, LAYER_PREFIX, TRACK_PREFIX,
};
pub(crate) use root::{Root, Uchrom};
pub(crate) use tables::{
    ColumnDesc, ColumnType, CoordsDesc, DerivedEntry, DerivedKey, IdDesc, LayerEntry, Partition,
    PassTableEntry, Placement, SmallTable, SpotFiles, SpotsEntry, Storage, Tables, TablesAttrs,
    TracksEntry,
};
pub(crate) use types::{ArrayType, CodeType, FloatType, ResultType, ValueType};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

/// Prefix of a deserialization error that means "a value this reader does not support"
/// (an unknown type, code type, layout, ...) rather than "malformed": see [`from_json`].
const UNSUPPORTED_TAG: &str = "\u{1}unsupported\u{1}";

/// A deserialization error reported as `Unsupported` by [`from_json`].
pub(crate) fn unsupported_value<E: serde::de::Error>(msg: impl std::fmt::Display) -> E {
    E::custom(format_args!("{UNSUPPORTED_TAG}{msg}"))
}

/// Deserializes `T` from a parsed JSON document `doc` (messages name `ctx`, the file, and
/// the path of the failing member, e.g. `attributes.tables.spots.columns[2]`). Values of an
/// unknown vocabulary are `Unsupported`, everything else `Format`.
pub(crate) fn from_json<T: DeserializeOwned>(doc: &Value, ctx: &str) -> Result<T> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().to_string();
        let (kind, msg) = match msg.strip_prefix(UNSUPPORTED_TAG) {
            Some(m) => (ErrorKind::Unsupported, m.to_string()),
            None => (ErrorKind::Format, msg),
        };
        if path == "." {
            Error::new(kind, format!("{ctx}: {msg}"))
        } else {
            Error::new(kind, format!("{ctx}: {path}: {msg}"))
        }
    })
}

/// The bytes of a metadata document as the writer stores it (pretty JSON, members in the
/// order of the model's fields).
pub(crate) fn to_json(doc: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(doc).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

/// `deserialize_with` for members the reader never relied on: a value of another type is
/// dropped (read as absent), as the hand-written parser ignored it.
pub(crate) fn lenient<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    Ok(T::deserialize(v).ok())
}

/// `deserialize_with` for arrays that may be absent or `null` (= empty).
pub(crate) fn null_as_empty<'de, D, T>(d: D) -> std::result::Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// `deserialize_with` for members whose `null` differs from their absence (`Some(None)`).
pub(crate) fn null_or_value<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A JSON object of members the model does not know (kept for the round trip).
pub(crate) type Members = serde_json::Map<String, Value>;

/// Parses a root and a `tables` document, emits them and parses the emitted bytes again:
/// the same model must come back. Returns the emitted documents (for the round-trip
/// tests: they must equal the parsed JSON, and a store of this writer byte for byte).
pub(crate) fn round_trip(root_doc: &Value, tables_doc: &Value) -> Result<(Vec<u8>, Vec<u8>)> {
    let root = Root::parse(root_doc, "zarr.json")?;
    let tables = TablesAttrs::parse(tables_doc, &root, "tables/zarr.json")?;
    let root_bytes = to_json(&root.node)?;
    let tables_bytes = to_json(&tables)?;
    let reparse = |b: &[u8]| -> Result<Value> {
        serde_json::from_slice(b).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
    };
    let root2 = Root::parse(&reparse(&root_bytes)?, "emitted zarr.json")?;
    let tables2 = TablesAttrs::parse(&reparse(&tables_bytes)?, &root2, "emitted tables/zarr.json")?;
    if root2 != root || tables2 != tables {
        return Err(Error::new(
            ErrorKind::Internal,
            "the metadata model parsed from its own output differs",
        ));
    }
    Ok((root_bytes, tables_bytes))
}

/// Parses a §12 node document with the model and emits it again: a component group
/// (`group`: cellm, binm, results, uns, contacts, links) or a results member (`result`: a
/// group or an array node carrying `_type`). The emitted bytes must parse back to the same
/// model; for the round-trip tests they must also equal the parsed JSON value.
pub(crate) fn component_round_trip(what: &str, doc: &Value) -> Result<Vec<u8>> {
    fn again<T: Serialize + DeserializeOwned + PartialEq>(v: T) -> Result<Vec<u8>> {
        let bytes = to_json(&v)?;
        let back: T = serde_json::from_slice(&bytes)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        if back != v {
            return Err(Error::new(
                ErrorKind::Internal,
                "the component model parsed from its own output differs",
            ));
        }
        Ok(bytes)
    }
    match (what, doc.get("node_type").and_then(Value::as_str)) {
        ("group", _) => again(from_json::<GroupNode<ComponentAttrs>>(
            doc,
            "component group",
        )?),
        ("result", Some("array")) => {
            again(ArrayNode::<ResultAttrs>::parse(doc, "results member")?.0)
        }
        ("result", _) => again(from_json::<GroupNode<ResultAttrs>>(doc, "results member")?),
        _ => Err(Error::invalid_argument(format!("unknown node kind {what}"))),
    }
}
