//! The pass-through content of §12 handed back as stored (C API §5.1): the attributes of an
//! entry as JSON, N-D arrays as Arrow (nested fixed-size lists, the shape in the field
//! metadata) and results tables.
//!
//! An entry is named by a kind and a path of original keys (results mappings nest); stored
//! names come from the groups' `keys` lists, never from listing directories (§0).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, FixedSizeListArray, RecordBatch};
use arrow_schema::{Field, Schema};
use serde_json::{Map, Value};

use super::ChromData;
use crate::chromdata::spec::{
    self, ArrayNode, ArrayType, ComponentAttrs, ComponentEntry, ComponentKind, GroupNode,
    ResultAttrs, ResultType,
};
use crate::error::{Error, ErrorKind, Result};

/// Field-metadata key holding an array's full shape as a JSON list.
pub const SHAPE_METADATA: &str = spec::SHAPE_METADATA;

/// A results member, resolved: its store-relative node path, attributes, and for arrays
/// the element type and shape.
struct ResultNode {
    dir: String,
    attrs: ResultAttrs,
    array: Option<(ArrayType, Vec<u64>)>,
}

fn not_found(msg: String) -> Error {
    Error::new(ErrorKind::NotFound, msg)
}

/// Checks that a stored member name stays inside its group.
fn check_stored_name(name: &str, ctx: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        return Err(Error::format(format!(
            "{ctx}: stored name \"{name}\" is not a name inside the group"
        )));
    }
    Ok(())
}

impl ChromData {
    /// The raw `zarr.json` document of a §12 group and its model; None when the group is
    /// absent (a missing optional group is empty, §6.1).
    fn component_group(&self, kind: ComponentKind) -> Result<Option<(Value, ComponentAttrs)>> {
        let store = &self.inner.store;
        let path = format!("{}/zarr.json", kind.name());
        let Some(doc) = store.read_json_opt(&path)? else {
            return Ok(None);
        };
        let node: GroupNode<Option<ComponentAttrs>> =
            spec::from_json(&doc, &format!("{}/{path}", store.display))?;
        Ok(Some((doc, node.attributes.unwrap_or_default())))
    }

    /// The entries of a §12 group (empty when the group is absent).
    fn component_entries(&self, kind: ComponentKind) -> Result<Vec<ComponentEntry>> {
        Ok(self
            .component_group(kind)?
            .map(|(_, a)| a.entries(kind).to_vec())
            .unwrap_or_default())
    }

    /// Store path of the member `key` of group `kind` (cellm, binm, results).
    fn member_path(
        &self,
        kind: ComponentKind,
        entries: &[ComponentEntry],
        dir: &str,
        key: &str,
    ) -> Result<String> {
        let d = &self.inner.store.display;
        let e = entries.iter().find(|e| e.key() == key).ok_or_else(|| {
            not_found(format!("{d}: no {} entry \"{key}\" in {dir}", kind.name()))
        })?;
        check_stored_name(e.stored_name(), &format!("{d}/{dir}/zarr.json"))?;
        Ok(format!("{dir}/{}", e.stored_name()))
    }

    /// The array node at `path` (store-relative): its model and element type.
    fn array_node<A: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(ArrayNode<A>, ArrayType)> {
        let store = &self.inner.store;
        let meta = format!("{path}/zarr.json");
        if !store.exists(&meta)? {
            return Err(Error::format(format!(
                "{}/{meta}: listed in its group's keys but missing",
                store.display
            )));
        }
        ArrayNode::parse(
            &store.read_json(&meta)?,
            &format!("{}/{meta}", store.display),
        )
    }

    /// Resolves a results path: key, then member keys of nested mappings.
    fn result_node(&self, path: &[&str]) -> Result<ResultNode> {
        let store = &self.inner.store;
        let d = &store.display;
        if path.is_empty() {
            return Err(Error::invalid_argument(
                "a results entry is named by its key (and member keys inside mappings); the path is empty",
            ));
        }
        let mut entries = self.component_entries(ComponentKind::Results)?;
        let mut dir = "results".to_string();
        for (depth, key) in path.iter().enumerate() {
            dir = self.member_path(ComponentKind::Results, &entries, &dir, key)?;
            let meta = format!("{dir}/zarr.json");
            let ctx = format!("{d}/{meta}");
            if !store.exists(&meta)? {
                return Err(Error::format(format!("{ctx}: listed in keys but missing")));
            }
            let doc = store.read_json(&meta)?;
            let node = match doc.get("node_type").and_then(Value::as_str) {
                Some("group") => {
                    let g: GroupNode<Option<ResultAttrs>> = spec::from_json(&doc, &ctx)?;
                    ResultNode {
                        dir: dir.clone(),
                        attrs: g.attributes.ok_or_else(|| {
                            Error::format(format!("{ctx}: a results member has no _type"))
                        })?,
                        array: None,
                    }
                }
                Some("array") => {
                    let (a, ty) = ArrayNode::<ResultAttrs>::parse(&doc, &ctx)?;
                    ResultNode {
                        dir: dir.clone(),
                        attrs: a.attributes.ok_or_else(|| {
                            Error::format(format!("{ctx}: a results member has no _type"))
                        })?,
                        array: Some((ty, a.shape)),
                    }
                }
                _ => return Err(Error::format(format!("{ctx}: not a Zarr group or array"))),
            };
            if (node.attrs.ty == ResultType::Array) != node.array.is_some() {
                return Err(Error::format(format!(
                    "{ctx}: _type \"{}\" on a Zarr {} (arrays are exactly the \"array\" entries)",
                    node.attrs.ty.name(),
                    if node.array.is_some() {
                        "array"
                    } else {
                        "group"
                    }
                )));
            }
            if depth + 1 == path.len() {
                return Ok(node);
            }
            if node.attrs.ty != ResultType::Mapping {
                return Err(not_found(format!(
                    "{d}: results entry {:?} is a {}, not a mapping; it has no member \"{}\"",
                    &path[..=depth],
                    node.attrs.ty.name(),
                    path[depth + 1]
                )));
            }
            entries = node.attrs.keys.unwrap_or_default();
        }
        unreachable!("the loop returns at the last path element")
    }

    /// Names of the extra spot columns (§4.1), in logical order.
    pub fn extra_columns(&self) -> Vec<String> {
        let t = &self.inner.tables.spots;
        t.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// The path the store was opened with.
    pub fn display(&self) -> &str {
        &self.inner.store.display
    }

    /// The input rows (§7.4) of global stored rows `[start, start + n)`: from
    /// `index/source_row`, read for this range only, or the rows themselves when the store
    /// was written in stored order. Used by `rewrite` to keep the original order.
    #[doc(hidden)]
    pub fn source_rows(&self, start: u64, n: u64) -> Result<Vec<u64>> {
        let total = self.inner.root.uchrom().n_spots;
        if start.checked_add(n).is_none_or(|e| e > total) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("rows {start}..{start}+{n} of {total}"),
            ));
        }
        if !self.inner.root.uchrom().has_source_row {
            return Ok((start..start + n).collect());
        }
        let v = self
            .inner
            .arrays
            .read_i64_range("index/source_row", start, n)?;
        v.into_iter()
            .map(|x| {
                u64::try_from(x).ok().filter(|&r| r < total).ok_or_else(|| {
                    Error::format(format!(
                        "{}/index/source_row: {x} is not a row number below {total}",
                        self.inner.store.display
                    ))
                })
            })
            .collect()
    }

    /// Metadata of a §12 entry as JSON (C API §5.1 `dc_chromdata_attrs`): results (type,
    /// provenance, json value, mapping keys), cellm / binm (shape, dtype), intervals (kind,
    /// source_result), points (no attributes: `{}`), uns (the stored tagged JSON dict),
    /// contacts / links (the records, each with `resolved_path`).
    pub fn attrs(&self, kind: &str, path: &[&str]) -> Result<Value> {
        let d = &self.inner.store.display;
        let depth = |want: usize| -> Result<()> {
            if path.len() != want {
                return Err(Error::invalid_argument(format!(
                    "{kind} entries are named by {want} path element(s), got {}",
                    path.len()
                )));
            }
            Ok(())
        };
        match kind {
            "results" => Ok(self.result_node(path)?.attrs.to_doc()),
            "cellm" | "binm" => {
                depth(1)?;
                let ck = ComponentKind::from_name(kind).unwrap_or(ComponentKind::CellM);
                let entries = self.component_entries(ck)?;
                let p = self.member_path(ck, &entries, kind, path[0])?;
                let (node, ty) = self.array_node::<Value>(&p)?;
                Ok(serde_json::json!({"shape": node.shape, "dtype": ty.name()}))
            }
            "intervals" | "points" => {
                depth(1)?;
                let list = if kind == "intervals" {
                    &self.inner.tables.intervals
                } else {
                    &self.inner.tables.points
                };
                let e = list
                    .iter()
                    .find(|e| e.key == path[0])
                    .ok_or_else(|| not_found(format!("{d}: no {kind} table \"{}\"", path[0])))?;
                if kind == "points" {
                    return Ok(Value::Object(Map::new()));
                }
                Ok(serde_json::json!({
                    "kind": e.kind,
                    "source_result": e.source_result.clone().flatten(),
                }))
            }
            "uns" => {
                depth(0)?;
                Ok(self
                    .component_group(ComponentKind::Uns)?
                    .and_then(|(_, a)| a.uns)
                    .unwrap_or_else(|| Value::Object(Map::new())))
            }
            "contacts" | "links" => {
                depth(0)?;
                let ck = ComponentKind::from_name(kind).unwrap_or(ComponentKind::Links);
                let Some((doc, _)) = self.component_group(ck)? else {
                    return Ok(Value::Array(Vec::new()));
                };
                let records = doc
                    .get("attributes")
                    .and_then(|a| a.get(kind))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let store = &self.inner.store;
                let parent = store.location.as_deref().and_then(store_parent);
                // A relative path resolves against the store's directory: the local one, or
                // at a URL the prefix holding the store.
                let relative = |r: &str| -> Option<(String, bool)> {
                    match (&parent, store.remote_url()) {
                        (Some(p), _) => {
                            let full = p.join(r);
                            let exists = full.exists();
                            Some((full.to_string_lossy().into_owned(), exists))
                        }
                        // At a URL its existence is not asked (a request per record).
                        (None, Some(u)) => u.resolve_sibling(r).map(|url| (url, true)),
                        (None, None) => None,
                    }
                };
                Ok(Value::Array(
                    records
                        .into_iter()
                        .map(|r| with_resolved_path(r, &relative))
                        .collect(),
                ))
            }
            _ => Err(not_found(format!(
                "unknown kind \"{kind}\" (expected results, cellm, binm, intervals, points, uns, contacts or links)"
            ))),
        }
    }

    /// An array entry as one record batch with one column `value` (C API §5.1
    /// `dc_chromdata_array`): "cellm" / "binm" {key}, "results" {key, members...} of type
    /// array, "uns" {stored array name}.
    pub fn array(&self, kind: &str, path: &[&str]) -> Result<RecordBatch> {
        let d = &self.inner.store.display;
        let one = || -> Result<&str> {
            match path {
                [k] => Ok(k),
                _ => Err(Error::invalid_argument(format!(
                    "{kind} arrays are named by 1 path element, got {}",
                    path.len()
                ))),
            }
        };
        let (store_path, ty, shape) = match kind {
            "cellm" | "binm" => {
                let ck = ComponentKind::from_name(kind).unwrap_or(ComponentKind::CellM);
                let entries = self.component_entries(ck)?;
                let p = self.member_path(ck, &entries, kind, one()?)?;
                let (node, ty) = self.array_node::<Value>(&p)?;
                (p, ty, node.shape)
            }
            "results" => {
                let node = self.result_node(path)?;
                let Some((ty, shape)) = node.array else {
                    return Err(Error::invalid_argument(format!(
                        "{d}: results entry {path:?} is a {}, not an array",
                        node.attrs.ty.name()
                    )));
                };
                (node.dir, ty, shape)
            }
            "uns" => {
                let name = one()?;
                let name = name.strip_prefix("uns/").unwrap_or(name);
                let listed = self.component_entries(ComponentKind::Uns)?.iter().any(|e| {
                    e.stored_name()
                        .strip_prefix("uns/")
                        .unwrap_or(e.stored_name())
                        == name
                });
                if !listed {
                    return Err(not_found(format!("{d}: no uns array \"{name}\"")));
                }
                check_stored_name(name, &format!("{d}/uns/zarr.json"))?;
                let p = format!("uns/{name}");
                let (node, ty) = self.array_node::<Value>(&p)?;
                (p, ty, node.shape)
            }
            _ => {
                return Err(not_found(format!(
                    "unknown array kind \"{kind}\" (expected cellm, binm, results or uns)"
                )))
            }
        };
        let values = self.inner.arrays.read_values(&store_path, ty, &shape)?;
        array_batch(values, &shape).map_err(|e| e.context(format!("{d}/{store_path}")))
    }

    /// A results entry of type table, normalised as [`ChromData::table`] normalises tables.
    pub fn result_table(&self, path: &[&str]) -> Result<RecordBatch> {
        let node = self.result_node(path)?;
        if node.attrs.ty != ResultType::Table {
            return Err(Error::invalid_argument(format!(
                "{}: results entry {path:?} is a {}, not a table",
                self.inner.store.display,
                node.attrs.ty.name()
            )));
        }
        let f = self
            .inner
            .loader()
            .parquet(&format!("{}/table.parquet", node.dir))?;
        f.read_all()
    }
}

/// One record batch with one non-null column `value`: the elements of an array of `shape`
/// (row-major) as nested fixed-size lists, rows = the first dimension, the shape in the
/// field metadata.
pub(crate) fn array_batch(values: ArrayRef, shape: &[u64]) -> Result<RecordBatch> {
    let mut arr = values;
    for i in (1..shape.len()).rev() {
        let dim = shape[i];
        let size = i32::try_from(dim)
            .map_err(|_| Error::limit(format!("dimension {dim} exceeds a fixed-size list")))?;
        // Lists after wrapping dimension i: the product of the dimensions before it.
        let rows = usize::try_from(shape[..i].iter().product::<u64>())
            .map_err(|_| Error::limit(format!("shape {shape:?} is too large")))?;
        let item = Arc::new(Field::new("item", arr.data_type().clone(), false));
        arr = Arc::new(
            FixedSizeListArray::try_new_with_length(item, size, arr, None, rows)
                .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?,
        );
    }
    let shape_json = serde_json::to_string(shape).unwrap_or_default();
    let field = Field::new("value", arr.data_type().clone(), false)
        .with_metadata(HashMap::from([(SHAPE_METADATA.to_string(), shape_json)]));
    RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![arr])
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

/// The directory containing the store (absolute), where `relative_path` is resolved.
fn store_parent(location: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(location).ok()?;
    abs.parent().map(Path::to_path_buf)
}

/// A contacts / links record with `resolved_path` (§12): `path` if it exists (on the local
/// file system), else `relative_path` resolved by `relative` (its location, and whether
/// it is to be taken) if that is taken, else `path`. A store at a URL takes the URL beside
/// it without asking whether it exists.
fn with_resolved_path(
    mut record: Value,
    relative: &dyn Fn(&str) -> Option<(String, bool)>,
) -> Value {
    let Some(o) = record.as_object_mut() else {
        return record;
    };
    let path = o.get("path").and_then(Value::as_str).map(str::to_string);
    let rel = o
        .get("relative_path")
        .and_then(Value::as_str)
        .and_then(relative);
    let resolved = match (&path, rel) {
        (Some(p), _) if Path::new(p).exists() => Value::String(p.clone()),
        (_, Some((r, true))) => Value::String(r),
        (Some(p), _) => Value::String(p.clone()),
        (None, _) => Value::Null,
    };
    o.insert("resolved_path".into(), resolved);
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;

    #[test]
    fn array_shapes() {
        let v: ArrayRef = Arc::new(arrow_array::Int32Array::from((0..24).collect::<Vec<_>>()));
        let b = array_batch(v, &[2, 3, 4]).unwrap();
        assert_eq!(b.num_rows(), 2);
        let f = b.schema().field(0).clone();
        assert_eq!(f.metadata()["shape"], "[2,3,4]");
        let outer = b.column(0).as_fixed_size_list();
        assert_eq!(outer.value_length(), 3);
        assert_eq!(outer.values().as_fixed_size_list().value_length(), 4);
        let empty: ArrayRef = Arc::new(arrow_array::Float64Array::from(Vec::<f64>::new()));
        let b = array_batch(empty.clone(), &[0, 5]).unwrap();
        assert_eq!(b.num_rows(), 0);
        assert_eq!(b.schema().field(0).metadata()["shape"], "[0,5]");
        let b = array_batch(empty, &[4, 0]).unwrap();
        assert_eq!(b.num_rows(), 4);
        assert_eq!(b.column(0).as_fixed_size_list().value_length(), 0);
    }
}
