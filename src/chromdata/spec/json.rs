//! The JSON side of the model: path-aware parsing with the error kinds of the spec
//! (`Unsupported` for an unknown vocabulary value, `Format` otherwise), the writer's pretty
//! output, and the `deserialize_with` helpers of optional and lenient members.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

/// Prefix of a deserialization error that means "a value this reader does not support"
/// (an unknown type, code type, layout, ...) rather than "malformed": see [`from_json`].
pub(crate) const UNSUPPORTED_TAG: &str = "\u{1}unsupported\u{1}";

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
