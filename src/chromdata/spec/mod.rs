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
mod json;
mod layout;
mod names;
mod root;
mod tables;
mod types;

pub use layout::Layout;

pub(crate) use components::{
    externalize_uns, relative_path, ArrayNode, ResultAttrs, UnsArray, SHAPE_METADATA,
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
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
pub(crate) use json::{from_json, to_json, Members};

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
