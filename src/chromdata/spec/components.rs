//! The content of the §12 component groups: Zarr array nodes (cellm, binm, array results,
//! uns arrays), results members with their provenance, the tagged JSON of uns (with its
//! 64-element rule) and the path rule of contacts and links records.
//!
//! `ResultAttrs` is what a results node stores (`_type`, `_kind`, ...); the C API speaks
//! the plain form (`type`, `kind`, ...) of [`ResultAttrs::to_doc`] / [`ResultAttrs::from_doc`],
//! so that what `dc_chromdata_attrs` returns can be handed back to the writer as is.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::groups::ComponentEntry;
use super::types::{ArrayType, ResultType};
use super::{from_json, Members};
use crate::error::{Error, Result};

/// `deserialize_with` for members whose stored `null` is a value (`Some(Null)`), not absence.
fn some_value<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A Zarr v3 array's `zarr.json` (§6.1) as this library reads it: shape, data type and
/// attributes; the codecs and chunking are zarrs' business.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArrayNode<A> {
    pub(crate) zarr_format: u64,
    pub(crate) node_type: String,
    pub(crate) shape: Vec<u64>,
    pub(crate) data_type: Value,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub(crate) attributes: Option<A>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl<A: serde::de::DeserializeOwned> ArrayNode<A> {
    /// Parses an array node (`ctx` names the file in messages): Zarr format 3, node type
    /// "array", a data type of §6.1 (others are `Unsupported`).
    pub(crate) fn parse(doc: &Value, ctx: &str) -> Result<(ArrayNode<A>, ArrayType)> {
        let node: ArrayNode<A> = from_json(doc, ctx)?;
        if node.zarr_format != 3 || node.node_type != "array" {
            return Err(Error::format(format!("{ctx}: not a Zarr v3 array node")));
        }
        let ty = node
            .data_type
            .as_str()
            .and_then(ArrayType::from_name)
            .ok_or_else(|| {
                Error::unsupported(format!(
                    "{ctx}: data_type {} is not one of {}",
                    node.data_type,
                    ArrayType::ALL
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        Ok((node, ty))
    }
}

/// The attributes of a results member node (§12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResultAttrs {
    #[serde(rename = "_type")]
    pub(crate) ty: ResultType,
    #[serde(
        rename = "_kind",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) kind: Option<Value>,
    #[serde(
        rename = "_function",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) function: Option<Value>,
    #[serde(
        rename = "_params",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) params: Option<Value>,
    #[serde(
        rename = "_inputs",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) inputs: Option<Value>,
    #[serde(
        rename = "_uchrom_version",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) uchrom_version: Option<Value>,
    #[serde(
        rename = "_created_utc",
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) created_utc: Option<Value>,
    /// json entries: the tagged-JSON value.
    #[serde(
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) value: Option<Value>,
    /// mapping entries: the members, in logical order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keys: Option<Vec<ComponentEntry>>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// The provenance members: (plain name of the C API, stored name).
const PROVENANCE: [(&str, &str); 6] = [
    ("kind", "_kind"),
    ("function", "_function"),
    ("params", "_params"),
    ("inputs", "_inputs"),
    ("uchrom_version", "_uchrom_version"),
    ("created_utc", "_created_utc"),
];

impl ResultAttrs {
    fn provenance(&self) -> [&Option<Value>; 6] {
        [
            &self.kind,
            &self.function,
            &self.params,
            &self.inputs,
            &self.uchrom_version,
            &self.created_utc,
        ]
    }

    fn provenance_mut(&mut self) -> [&mut Option<Value>; 6] {
        [
            &mut self.kind,
            &mut self.function,
            &mut self.params,
            &mut self.inputs,
            &mut self.uchrom_version,
            &mut self.created_utc,
        ]
    }

    /// A results entry of type `ty` without provenance.
    pub(crate) fn new(ty: ResultType) -> ResultAttrs {
        ResultAttrs {
            ty,
            kind: None,
            function: None,
            params: None,
            inputs: None,
            uchrom_version: None,
            created_utc: None,
            value: None,
            keys: None,
            other: Members::new(),
        }
    }

    /// The plain form of the C API (§5.1 of c-api.md): `type`, the provenance members that
    /// are stored, `value` (json) and `keys` (mapping: the members' original keys).
    pub(crate) fn to_doc(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::String(self.ty.name().into()));
        for ((plain, _), v) in PROVENANCE.iter().zip(self.provenance()) {
            if let Some(v) = v {
                m.insert((*plain).into(), v.clone());
            }
        }
        if let Some(v) = &self.value {
            m.insert("value".into(), v.clone());
        }
        if self.ty == ResultType::Mapping {
            let keys = self
                .keys
                .iter()
                .flatten()
                .map(|e| Value::String(e.key().to_string()))
                .collect();
            m.insert("keys".into(), Value::Array(keys));
        }
        Value::Object(m)
    }

    /// Parses the plain form given to the writer: `type` required (table, array, json or
    /// mapping), `value` required for json entries and refused for others, provenance
    /// members optional, `keys` accepted and ignored (a mapping's members are the entries
    /// added under it). Anything else is `InvalidArgument` naming `ctx`.
    pub(crate) fn from_doc(doc: &Value, ctx: &str) -> Result<ResultAttrs> {
        let o = doc.as_object().ok_or_else(|| {
            Error::invalid_argument(format!("{ctx}: attributes must be a JSON object"))
        })?;
        let ty = match o.get("type") {
            Some(Value::String(s)) => ResultType::from_name(s).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{ctx}: unknown result type \"{s}\" (expected table, array, json or mapping)"
                ))
            })?,
            Some(v) => {
                return Err(Error::invalid_argument(format!(
                    "{ctx}: \"type\" must be a string, got {v}"
                )))
            }
            None => {
                return Err(Error::invalid_argument(format!(
                    "{ctx}: \"type\" is required (table, array, json or mapping)"
                )))
            }
        };
        let mut a = ResultAttrs::new(ty);
        for (k, v) in o {
            if let Some(i) = PROVENANCE.iter().position(|(p, _)| p == k) {
                *a.provenance_mut()[i] = Some(v.clone());
            } else if k == "value" {
                a.value = Some(v.clone());
            } else if k != "type" && k != "keys" {
                return Err(Error::invalid_argument(format!(
                    "{ctx}: unknown member \"{k}\" (expected type, kind, function, params, \
                     inputs, uchrom_version, created_utc, value, keys)"
                )));
            }
        }
        match (ty, &a.value) {
            (ResultType::Json, None) => {
                return Err(Error::invalid_argument(format!(
                    "{ctx}: a json entry needs \"value\""
                )))
            }
            (ResultType::Json, Some(_)) => {}
            (_, Some(_)) => {
                return Err(Error::invalid_argument(format!(
                    "{ctx}: only json entries have \"value\" (this one is {})",
                    ty.name()
                )))
            }
            _ => {}
        }
        if ty == ResultType::Mapping {
            a.keys = Some(Vec::new());
        }
        Ok(a)
    }
}

/// Field-metadata key of the one-column array batches (C API §5.1): the full shape as a
/// JSON list, so that an array without rows keeps its inner dimensions.
pub const SHAPE_METADATA: &str = "shape";

/// Members of a tagged-JSON tag (§12).
const TAG: &str = "__uchrom_type__";
/// Inline `ndarray` tags of uns hold at most this many elements; larger numeric arrays are
/// Zarr arrays `uns/_<i>` (§12).
pub(crate) const UNS_INLINE_MAX: u64 = 64;

/// A numeric array of uns that the 64-element rule moves to a Zarr array.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UnsArray {
    /// Stored name: `_<i>`.
    pub(crate) name: String,
    pub(crate) ty: ArrayType,
    pub(crate) shape: Vec<u64>,
    /// The elements, row-major, as JSON numbers / booleans (from the `data` member; nested
    /// lists are flattened).
    pub(crate) data: Vec<Value>,
}

/// Applies the 64-element rule to a uns dict given as tagged JSON: every `ndarray` tag with
/// more than 64 elements becomes an `array_ref` to `uns/_<i>` (i counting these arrays in a
/// depth-first walk, members in order), returned with its data. `array_ref` tags in the
/// input are refused (the writer numbers the arrays). Errors are `InvalidArgument`.
pub(crate) fn externalize_uns(uns: &Value) -> Result<(Value, Vec<UnsArray>)> {
    if !uns.is_object() {
        return Err(Error::invalid_argument(
            "uns: the value must be a JSON object (a dict)",
        ));
    }
    let mut arrays = Vec::new();
    let v = walk_uns(uns, "uns", &mut arrays)?;
    Ok((v, arrays))
}

fn walk_uns(v: &Value, at: &str, arrays: &mut Vec<UnsArray>) -> Result<Value> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| walk_uns(x, &format!("{at}[{i}]"), arrays))
            .collect::<Result<Vec<_>>>()
            .map(Value::Array),
        Value::Object(o) => match o.get(TAG) {
            Some(Value::String(t)) if t == "ndarray" => ndarray_tag(o, at, arrays),
            Some(Value::String(t)) if t == "array_ref" => Err(Error::invalid_argument(format!(
                "{at}: array_ref tags are written by the writer; give the array as an ndarray tag"
            ))),
            Some(Value::String(t)) if ["tuple", "float", "dict"].contains(&t.as_str()) => {
                let mut out = Map::new();
                for (k, x) in o {
                    out.insert(k.clone(), walk_uns(x, &format!("{at}.{k}"), arrays)?);
                }
                Ok(Value::Object(out))
            }
            Some(t) => Err(Error::invalid_argument(format!(
                "{at}: unknown tag {TAG} = {t} (expected tuple, float, ndarray or dict)"
            ))),
            None => {
                let mut out = Map::new();
                for (k, x) in o {
                    out.insert(k.clone(), walk_uns(x, &format!("{at}.{k}"), arrays)?);
                }
                Ok(Value::Object(out))
            }
        },
        other => Ok(other.clone()),
    }
}

/// An `ndarray` tag: checked (dtype numeric or bool, shape, element count and types), and
/// moved out when larger than [`UNS_INLINE_MAX`].
fn ndarray_tag(o: &Map<String, Value>, at: &str, arrays: &mut Vec<UnsArray>) -> Result<Value> {
    let bad = |m: String| Error::invalid_argument(format!("{at}: ndarray tag: {m}"));
    let dtype = o
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("\"dtype\" (a NumPy type string) is required".into()))?;
    let ty = ArrayType::of_numpy(dtype).ok_or_else(|| {
        Error::unsupported(format!(
            "{at}: ndarray dtype \"{dtype}\" cannot be stored as a Zarr array (numeric or bool, little-endian)"
        ))
    })?;
    let shape: Vec<u64> = o
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(Value::as_u64).collect())
        .ok_or_else(|| bad("\"shape\" must be a list of non-negative integers".into()))?;
    let mut data = Vec::new();
    flatten_data(o.get("data").unwrap_or(&Value::Null), &mut data)
        .map_err(|m| bad(format!("\"data\": {m}")))?;
    let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    if n != Some(data.len() as u64) {
        return Err(bad(format!(
            "shape {shape:?} does not match {} data elements",
            data.len()
        )));
    }
    for (i, x) in data.iter().enumerate() {
        let ok = match ty {
            ArrayType::Bool => x.is_boolean(),
            ArrayType::Float32 | ArrayType::Float64 => {
                x.is_number()
                    || x.as_str()
                        .is_some_and(|s| ["nan", "inf", "-inf"].contains(&s))
                    || x.get(TAG).and_then(Value::as_str) == Some("float")
            }
            ArrayType::UInt8 | ArrayType::UInt16 | ArrayType::UInt32 | ArrayType::UInt64 => {
                x.is_u64()
            }
            _ => x.is_i64(),
        };
        if !ok {
            return Err(bad(format!("element {i} ({x}) is not a {}", ty.name())));
        }
    }
    if data.len() as u64 <= UNS_INLINE_MAX {
        return Ok(Value::Object(o.clone()));
    }
    let name = format!("_{}", arrays.len());
    let mut r = Map::new();
    r.insert(TAG.into(), Value::String("array_ref".into()));
    r.insert("path".into(), Value::String(format!("uns/{name}")));
    arrays.push(UnsArray {
        name,
        ty,
        shape,
        data,
    });
    Ok(Value::Object(r))
}

/// Flattens nested lists of scalars (row-major).
fn flatten_data(v: &Value, out: &mut Vec<Value>) -> std::result::Result<(), String> {
    match v {
        Value::Array(items) => {
            for x in items {
                flatten_data(x, out)?;
            }
            Ok(())
        }
        Value::Object(o) if o.get(TAG).and_then(Value::as_str) == Some("float") => {
            out.push(v.clone());
            Ok(())
        }
        Value::Object(_) | Value::Null => Err("expected a (nested) list of numbers".into()),
        x => {
            out.push(x.clone());
            Ok(())
        }
    }
}

/// The `relative_path` of a contacts / links record (§12): when `path` is absolute and in
/// the directory that contains the store (`store_parent`, absolute) or below it, the path
/// relative to that directory, `/`-separated.
pub(crate) fn relative_path(path: &str, store_parent: &std::path::Path) -> Option<String> {
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return None;
    }
    let rel = p.strip_prefix(store_parent).ok()?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            std::path::Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn result_attrs_both_forms() {
        let stored = json!({"_type": "json", "_kind": "tads", "_params": {"w": 3},
                            "_created_utc": null, "value": null, "extra": 1});
        let a: ResultAttrs = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(a.value, Some(Value::Null));
        assert_eq!(a.created_utc, Some(Value::Null));
        assert_eq!(serde_json::to_value(&a).unwrap(), stored);
        let doc = a.to_doc();
        assert_eq!(
            doc,
            json!({"type": "json", "kind": "tads", "params": {"w": 3}, "created_utc": null,
                   "value": null})
        );
        let back = ResultAttrs::from_doc(&doc, "t").unwrap();
        assert_eq!(back.params, a.params);
        assert_eq!(back.value, a.value);
        for bad in [
            json!({"kind": "x"}),
            json!({"type": "frame"}),
            json!({"type": "json"}),
            json!({"type": "table", "value": 1}),
            json!({"type": "table", "colour": 1}),
            json!([1]),
        ] {
            let e = ResultAttrs::from_doc(&bad, "t").unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument, "{bad}");
        }
        let m = ResultAttrs::from_doc(&json!({"type": "mapping", "keys": ["a"]}), "t").unwrap();
        assert_eq!(m.to_doc(), json!({"type": "mapping", "keys": []}));
    }

    #[test]
    fn uns_rule() {
        let big: Vec<f64> = (0..65).map(f64::from).collect();
        let small: Vec<i64> = (0..64).collect();
        let uns = json!({
            "a": {"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [5, 13], "data": big},
            "b": [{"__uchrom_type__": "ndarray", "dtype": "<i8", "shape": [64], "data": small},
                  {"__uchrom_type__": "ndarray", "dtype": "bool", "shape": [65],
                   "data": vec![true; 65]}],
            "c": {"__uchrom_type__": "float", "value": "nan"}
        });
        let (v, arrays) = externalize_uns(&uns).unwrap();
        assert_eq!(arrays.len(), 2);
        assert_eq!(arrays[0].name, "_0");
        assert_eq!(arrays[0].shape, vec![5, 13]);
        assert_eq!(arrays[1].ty, ArrayType::Bool);
        assert_eq!(
            v["a"],
            json!({"__uchrom_type__": "array_ref", "path": "uns/_0"})
        );
        assert_eq!(v["b"][0], uns["b"][0]);
        assert_eq!(v["b"][1]["path"], "uns/_1");
        assert_eq!(v["c"], uns["c"]);
        for bad in [
            json!([1]),
            json!({"x": {"__uchrom_type__": "ndarray", "dtype": "<f8", "shape": [3], "data": [1]}}),
            json!({"x": {"__uchrom_type__": "array_ref", "path": "uns/_0"}}),
            json!({"x": {"__uchrom_type__": "frame"}}),
            json!({"x": {"__uchrom_type__": "ndarray", "dtype": "<i8", "shape": [1], "data": [1.5]}}),
        ] {
            assert!(externalize_uns(&bad).is_err(), "{bad}");
        }
        let e = externalize_uns(&json!({"x": {"__uchrom_type__": "ndarray", "dtype": "<U3",
                                              "shape": [1], "data": ["a"]}}))
        .unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Unsupported);
    }

    #[test]
    fn relative_paths() {
        let parent = std::path::Path::new("/data/project");
        assert_eq!(
            relative_path("/data/project/hic/x.mcool", parent).as_deref(),
            Some("hic/x.mcool")
        );
        assert_eq!(relative_path("/data/other/x.mcool", parent), None);
        assert_eq!(relative_path("x.mcool", parent), None);
        assert_eq!(relative_path("/data/project", parent), None);
    }

    #[test]
    fn numpy_types() {
        assert_eq!(ArrayType::of_numpy("<f8"), Some(ArrayType::Float64));
        assert_eq!(ArrayType::of_numpy("|b1"), Some(ArrayType::Bool));
        assert_eq!(ArrayType::of_numpy("int16"), Some(ArrayType::Int16));
        assert_eq!(ArrayType::of_numpy(">f8"), None);
        assert_eq!(ArrayType::of_numpy("<U5"), None);
    }
}
