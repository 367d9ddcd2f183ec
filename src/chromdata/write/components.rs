//! The pass-through components of §12 as the writer receives them (C API §6.1): cellm /
//! binm arrays, results (tables, arrays, json values, mappings, with provenance), uns (the
//! 64-element rule), contacts and links (the relative-path rule) and the `source_result`
//! of intervals. Arrays and tables go to the temporary store directory at the call (they
//! are not held in memory); the group documents, which list the members, are written by
//! [`Components::finish`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, UInt64Array,
};
use arrow_schema::DataType;
use serde_json::{Map, Value};

use crate::chromdata::spec::{
    self, externalize_uns, portable, relative_path, ArrayType, ComponentAttrs, ComponentEntry,
    ComponentKind, GroupNode, ResultAttrs, ResultType, UnsArray,
};
use crate::error::{Error, ErrorKind, Result};
use crate::storage::{fs, RemoteUrl};

/// Elements per chunk of the N-D arrays (about; whole rows per chunk).
const ARRAY_CHUNK_ELEMENTS: u64 = 1 << 20;

/// A cellm / binm member.
#[derive(Debug)]
struct ArrayEntry {
    key: String,
    name: String,
    shape: Vec<u64>,
}

/// A results member and, for mappings, its members.
#[derive(Debug)]
struct ResultEntry {
    key: String,
    name: String,
    attrs: ResultAttrs,
    children: Vec<ResultEntry>,
}

/// What the writer has received of §12.
#[derive(Debug)]
pub(crate) struct Components {
    /// The temporary store directory.
    root: PathBuf,
    /// The directory that will contain the store (absolute), for `relative_path`.
    store_parent: Option<PathBuf>,
    /// The store's URL when it is written to one: `relative_path` of URLs beside it.
    store_url: Option<RemoteUrl>,
    cellm: Vec<ArrayEntry>,
    binm: Vec<ArrayEntry>,
    results: Vec<ResultEntry>,
    /// The uns dict (array references in place) and its array names.
    uns: Option<(Value, Vec<String>)>,
    contacts: Option<Vec<Value>>,
    links: Option<Vec<Value>>,
}

/// The stored name of a new member `key` after `earlier` (§6.3: `_<i>` when not portable).
fn next_name<'a>(earlier: impl Iterator<Item = &'a str>, key: &str) -> String {
    let mut names: Vec<&str> = earlier.collect();
    names.push(key);
    portable(&names).pop().unwrap_or_default()
}

/// An error writing the array at `path` of the store at `root`, naming its directory.
fn zarr_err(root: &Path, path: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("{}: writing the zarr array: {e}", root.join(path).display()),
    )
}

/// An N-D array decoded from the one-column batch form of `dc_chromdata_array`: element
/// type, full shape, elements row-major.
pub(crate) struct NdArray {
    pub(crate) ty: ArrayType,
    pub(crate) shape: Vec<u64>,
    pub(crate) values: ArrayRef,
}

impl NdArray {
    /// Decodes a batch with one column: primitive (1-D) or nested fixed-size lists, no nulls
    /// at any level; the field metadata "shape", when present, must agree (and gives the
    /// inner dimensions of an array without rows). `what` names it in messages.
    pub(crate) fn of_batch(b: &RecordBatch, what: &str) -> Result<NdArray> {
        if b.num_columns() != 1 {
            return Err(Error::invalid_argument(format!(
                "{what}: an array is a batch of one column (\"value\"), got {} columns",
                b.num_columns()
            )));
        }
        let field = b.schema().field(0).clone();
        let mut a = b.column(0).clone();
        let mut shape = vec![a.len() as u64];
        loop {
            if a.null_count() > 0 {
                return Err(Error::invalid_argument(format!(
                    "{what}: arrays have no nulls ({} at dimension {})",
                    a.null_count(),
                    shape.len() - 1
                )));
            }
            let DataType::FixedSizeList(_, k) = a.data_type() else {
                break;
            };
            let k = *k as usize;
            let l = a.as_fixed_size_list();
            let off = l.offset();
            let child = l.values().slice(off * k, l.len() * k);
            shape.push(k as u64);
            a = child;
        }
        let ty = ArrayType::of_arrow(a.data_type()).ok_or_else(|| {
            Error::unsupported(format!(
                "{what}: elements of type {} cannot be stored in a Zarr array (bool, integers, \
                 float32, float64)",
                a.data_type()
            ))
        })?;
        if let Some(s) = field.metadata().get(spec::SHAPE_METADATA) {
            let given: Vec<u64> = serde_json::from_str(s).map_err(|_| {
                Error::invalid_argument(format!(
                    "{what}: field metadata \"shape\" = {s} is not a JSON list of dimensions"
                ))
            })?;
            let agrees = given.len() == shape.len()
                && given[0] == shape[0]
                && given[1..].iter().zip(&shape[1..]).all(|(g, s)| g == s);
            if !agrees {
                return Err(Error::invalid_argument(format!(
                    "{what}: field metadata \"shape\" {given:?} disagrees with the data ({shape:?})"
                )));
            }
        }
        let values = a.slice(0, a.len());
        Ok(NdArray { ty, shape, values })
    }

    /// An uns array from the elements of its `ndarray` tag.
    fn of_uns(u: &UnsArray) -> Result<NdArray> {
        let bad = |i: usize| {
            Error::invalid_argument(format!(
                "uns array {}: element {i} is not a {}",
                u.name,
                u.ty.name()
            ))
        };
        let float = |i: usize, v: &Value| -> Result<f64> {
            if let Some(f) = v.as_f64() {
                return Ok(f);
            }
            let s = v
                .as_str()
                .or_else(|| v.get("value").and_then(Value::as_str))
                .ok_or_else(|| bad(i))?;
            match s {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(bad(i)),
            }
        };
        let d = &u.data;
        let values: ArrayRef = match u.ty {
            ArrayType::Bool => Arc::new(BooleanArray::from(
                d.iter()
                    .enumerate()
                    .map(|(i, v)| v.as_bool().ok_or_else(|| bad(i)))
                    .collect::<Result<Vec<_>>>()?,
            )),
            ArrayType::Float32 | ArrayType::Float64 => {
                let v = d
                    .iter()
                    .enumerate()
                    .map(|(i, v)| float(i, v))
                    .collect::<Result<Vec<_>>>()?;
                let a: ArrayRef = Arc::new(Float64Array::from(v));
                arrow_cast_to(&a, &u.ty.arrow())?
            }
            ArrayType::UInt64 => Arc::new(UInt64Array::from(
                d.iter()
                    .enumerate()
                    .map(|(i, v)| v.as_u64().ok_or_else(|| bad(i)))
                    .collect::<Result<Vec<_>>>()?,
            )),
            t => {
                let v = d
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v.as_i64().ok_or_else(|| bad(i)))
                    .collect::<Result<Vec<_>>>()?;
                let a: ArrayRef = Arc::new(Int64Array::from(v));
                arrow_cast_to(&a, &t.arrow())?
            }
        };
        Ok(NdArray {
            ty: u.ty,
            shape: u.shape.clone(),
            values,
        })
    }

    /// Writes the array at `path` (store-relative) of the store at `root`, with `attrs`.
    fn write(&self, root: &Path, path: &str, attrs: Map<String, Value>) -> Result<()> {
        use zarrs::array::codec::{BytesCodec, ZstdCodec};
        use zarrs::array::{data_type as dt, FillValue};
        let store = zarrs::filesystem::FilesystemStore::new(root)
            .map(Arc::new)
            .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", root.display())))?;
        let inner: u64 = self.shape.iter().skip(1).map(|&d| d.max(1)).product();
        let rows = self.shape.first().copied().unwrap_or(1).max(1);
        let mut chunk: Vec<u64> = self.shape.iter().map(|&d| d.max(1)).collect();
        if let Some(c) = chunk.first_mut() {
            *c = (ARRAY_CHUNK_ELEMENTS / inner.max(1)).clamp(1, rows);
        }
        let (data_type, fill) = match self.ty {
            ArrayType::Bool => (dt::bool(), FillValue::from(false)),
            ArrayType::Int8 => (dt::int8(), FillValue::from(0i8)),
            ArrayType::Int16 => (dt::int16(), FillValue::from(0i16)),
            ArrayType::Int32 => (dt::int32(), FillValue::from(0i32)),
            ArrayType::Int64 => (dt::int64(), FillValue::from(0i64)),
            ArrayType::UInt8 => (dt::uint8(), FillValue::from(0u8)),
            ArrayType::UInt16 => (dt::uint16(), FillValue::from(0u16)),
            ArrayType::UInt32 => (dt::uint32(), FillValue::from(0u32)),
            ArrayType::UInt64 => (dt::uint64(), FillValue::from(0u64)),
            ArrayType::Float32 => (dt::float32(), FillValue::from(0f32)),
            ArrayType::Float64 => (dt::float64(), FillValue::from(0f64)),
        };
        let array = zarrs::array::ArrayBuilder::new(self.shape.clone(), chunk, data_type, fill)
            .array_to_bytes_codec(Arc::new(BytesCodec::little()))
            .bytes_to_bytes_codecs(vec![Arc::new(ZstdCodec::new(3, false))])
            .attributes(attrs)
            .build(store, &format!("/{path}"))
            .map_err(|e| zarr_err(root, path, e))?;
        array
            .store_metadata()
            .map_err(|e| zarr_err(root, path, e))?;
        if self.values.is_empty() {
            return Ok(());
        }
        let subset = array.subset_all();
        let pool = crate::pool::pool(2)?;
        let v = &self.values;
        macro_rules! store {
            ($t:ty) => {
                pool.install(|| {
                    array.store_array_subset(&subset, v.as_primitive::<$t>().values().as_ref())
                })
            };
        }
        match self.ty {
            ArrayType::Bool => {
                let b: Vec<bool> = v.as_boolean().values().iter().collect();
                pool.install(|| array.store_array_subset(&subset, b.as_slice()))
            }
            ArrayType::Int8 => store!(Int8Type),
            ArrayType::Int16 => store!(Int16Type),
            ArrayType::Int32 => store!(Int32Type),
            ArrayType::Int64 => store!(Int64Type),
            ArrayType::UInt8 => store!(UInt8Type),
            ArrayType::UInt16 => store!(UInt16Type),
            ArrayType::UInt32 => store!(UInt32Type),
            ArrayType::UInt64 => store!(UInt64Type),
            ArrayType::Float32 => store!(Float32Type),
            ArrayType::Float64 => store!(Float64Type),
        }
        .map_err(|e| zarr_err(root, path, e))
    }
}

/// Numeric cast of a freshly built Int64 / Float64 array to the element type (values are
/// checked to fit: no silent wrap).
fn arrow_cast_to(a: &ArrayRef, t: &DataType) -> Result<ArrayRef> {
    macro_rules! narrow {
        ($src:ty, $dst:ty, $arr:ty) => {{
            let s = a.as_primitive::<$src>();
            let mut out = Vec::with_capacity(s.len());
            for (i, x) in s.values().iter().enumerate() {
                let y = <$dst>::try_from(*x).map_err(|_| {
                    Error::invalid_argument(format!("element {i} ({x}) does not fit {t}"))
                })?;
                out.push(y);
            }
            Arc::new(<$arr>::from(out)) as ArrayRef
        }};
    }
    Ok(match t {
        DataType::Int64 | DataType::Float64 => a.clone(),
        DataType::Int8 => narrow!(Int64Type, i8, arrow_array::Int8Array),
        DataType::Int16 => narrow!(Int64Type, i16, arrow_array::Int16Array),
        DataType::Int32 => narrow!(Int64Type, i32, arrow_array::Int32Array),
        DataType::UInt8 => narrow!(Int64Type, u8, arrow_array::UInt8Array),
        DataType::UInt16 => narrow!(Int64Type, u16, arrow_array::UInt16Array),
        DataType::UInt32 => narrow!(Int64Type, u32, arrow_array::UInt32Array),
        DataType::Float32 => Arc::new(
            a.as_primitive::<Float64Type>()
                .values()
                .iter()
                .map(|&x| x as f32)
                .collect::<arrow_array::Float32Array>(),
        ),
        t => return Err(Error::new(ErrorKind::Internal, format!("no cast to {t}"))),
    })
}

/// Writes a group node `<root>/<dir>/zarr.json`.
fn write_group(root: &Path, dir: &str, attrs: &impl serde::Serialize) -> Result<()> {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, &e))?;
    fs::write_synced(
        &d.join("zarr.json"),
        &spec::to_json(&GroupNode::new(attrs))?,
    )
}

impl Components {
    /// Components of the store being built at `root` for `target` (a local path), or for
    /// the URL `url`.
    pub(crate) fn new(root: &Path, target: Option<&Path>, url: Option<&RemoteUrl>) -> Components {
        let store_parent = target
            .and_then(|t| std::path::absolute(t).ok())
            .and_then(|t| t.parent().map(Path::to_path_buf));
        Components {
            root: root.to_path_buf(),
            store_parent,
            store_url: url.cloned(),
            cellm: Vec::new(),
            binm: Vec::new(),
            results: Vec::new(),
            uns: None,
            contacts: None,
            links: None,
        }
    }

    /// Adds a cellm / binm array (`kind`), written at once. `rows`: the first dimension it
    /// must have when already known (else checked by `finish`).
    pub(crate) fn add_array(
        &mut self,
        kind: &str,
        key: &str,
        batch: &RecordBatch,
        rows: Option<u64>,
    ) -> Result<()> {
        let (list, ck) = match kind {
            "cellm" => (&mut self.cellm, ComponentKind::CellM),
            "binm" => (&mut self.binm, ComponentKind::BinM),
            k => {
                return Err(Error::invalid_argument(format!(
                    "unknown array kind \"{k}\" (expected cellm or binm)"
                )))
            }
        };
        if key.is_empty() {
            return Err(Error::invalid_argument(format!(
                "{kind}: a key must not be empty"
            )));
        }
        if list.iter().any(|e| e.key == key) {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{kind} \"{key}\" was added already"),
            ));
        }
        let what = format!("{kind} \"{key}\"");
        let a = NdArray::of_batch(batch, &what)?;
        if let Some(n) = rows {
            check_rows(&what, &a.shape, n, kind)?;
        }
        let name = next_name(list.iter().map(|e| e.key.as_str()), key);
        a.write(&self.root, &format!("{}/{name}", ck.name()), Map::new())?;
        list.push(ArrayEntry {
            key: key.to_string(),
            name,
            shape: a.shape,
        });
        Ok(())
    }

    /// Adds a results entry at `path` (key, then member keys of mappings added before).
    /// Tables and arrays are written at once.
    pub(crate) fn add_result(
        &mut self,
        path: &[&str],
        attrs: ResultAttrs,
        data: Option<RecordBatch>,
    ) -> Result<()> {
        let Some((key, parents)) = path.split_last() else {
            return Err(Error::invalid_argument(
                "a results entry needs a path (its key, then member keys inside mappings)",
            ));
        };
        if key.is_empty() {
            return Err(Error::invalid_argument("results: a key must not be empty"));
        }
        let what = format!("results {path:?}");
        let mut siblings = &mut self.results;
        let mut dir = "results".to_string();
        for (d, p) in parents.iter().enumerate() {
            let i = siblings.iter().position(|e| e.key == *p).ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{what}: no mapping {:?} (a mapping member comes after its mapping)",
                        &path[..=d]
                    ),
                )
            })?;
            let e = &mut siblings[i];
            if e.attrs.ty != ResultType::Mapping {
                return Err(Error::invalid_argument(format!(
                    "{what}: {:?} is a {}, not a mapping",
                    &path[..=d],
                    e.attrs.ty.name()
                )));
            }
            dir = format!("{dir}/{}", e.name);
            siblings = &mut e.children;
        }
        if siblings.iter().any(|e| e.key == *key) {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{what} was added already"),
            ));
        }
        let name = next_name(siblings.iter().map(|e| e.key.as_str()), key);
        let node = format!("{dir}/{name}");
        match (attrs.ty, &data) {
            (ResultType::Table | ResultType::Array, None) => {
                return Err(Error::invalid_argument(format!(
                    "{what}: a {} entry needs its data",
                    attrs.ty.name()
                )))
            }
            (ResultType::Json | ResultType::Mapping, Some(_)) => {
                return Err(Error::invalid_argument(format!(
                    "{what}: a {} entry has no data (pass NULL)",
                    attrs.ty.name()
                )))
            }
            (ResultType::Table, Some(t)) => {
                write_result_table(&self.root.join(&node).join("table.parquet"), t, &what)?
            }
            (ResultType::Array, Some(b)) => {
                let a = NdArray::of_batch(b, &what)?;
                let attrs_json = match serde_json::to_value(&attrs) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                a.write(&self.root, &node, attrs_json)?;
            }
            _ => {}
        }
        siblings.push(ResultEntry {
            key: key.to_string(),
            name,
            attrs,
            children: Vec::new(),
        });
        Ok(())
    }

    /// `set_json` of "uns" (a tagged-JSON dict; the 64-element rule applied, its arrays
    /// written at once) and "contacts" / "links" (arrays of records; the relative-path rule
    /// applied). Each may be set once.
    pub(crate) fn set_json(&mut self, kind: &str, v: Value) -> Result<()> {
        match kind {
            "uns" => {
                if self.uns.is_some() {
                    return Err(Error::new(ErrorKind::Exists, "uns was set already"));
                }
                let (tagged, arrays) = externalize_uns(&v)?;
                let mut names = Vec::with_capacity(arrays.len());
                for u in &arrays {
                    NdArray::of_uns(u)?.write(
                        &self.root,
                        &format!("uns/{}", u.name),
                        Map::new(),
                    )?;
                    names.push(u.name.clone());
                }
                self.uns = Some((tagged, names));
            }
            "contacts" | "links" => {
                let records = self.records(kind, v)?;
                let slot = if kind == "contacts" {
                    &mut self.contacts
                } else {
                    &mut self.links
                };
                if slot.is_some() {
                    return Err(Error::new(
                        ErrorKind::Exists,
                        format!("{kind} were set already"),
                    ));
                }
                *slot = Some(records);
            }
            k => {
                return Err(Error::invalid_argument(format!(
                    "unknown JSON kind \"{k}\" (expected uns, contacts, links or intervals)"
                )))
            }
        }
        Ok(())
    }

    /// Checks contacts / links records (objects with a unique string `key` and a string
    /// `path`) and adds `relative_path` where the rule of §12 asks for it.
    fn records(&self, kind: &str, v: Value) -> Result<Vec<Value>> {
        let Value::Array(items) = v else {
            return Err(Error::invalid_argument(format!(
                "{kind}: expected a JSON array of records"
            )));
        };
        let mut keys = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(items.len());
        for (i, mut r) in items.into_iter().enumerate() {
            let o = r.as_object_mut().ok_or_else(|| {
                Error::invalid_argument(format!("{kind}[{i}]: a record is a JSON object"))
            })?;
            let key = o.get("key").and_then(Value::as_str).ok_or_else(|| {
                Error::invalid_argument(format!("{kind}[{i}]: \"key\" (a string) is required"))
            })?;
            if !keys.insert(key.to_string()) {
                return Err(Error::new(
                    ErrorKind::Exists,
                    format!("{kind}[{i}]: key \"{key}\" appears twice"),
                ));
            }
            let path = o
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    Error::invalid_argument(format!("{kind}[{i}]: \"path\" (a string) is required"))
                })?
                .to_string();
            o.remove("resolved_path");
            if !o.contains_key("relative_path") {
                let local = self.store_parent.as_deref();
                // At a URL: a `path` that is a URL under the prefix holding the store.
                let beside_url = || self.store_url.as_ref()?.relative_sibling(&path);
                if let Some(rel) = local
                    .and_then(|p| relative_path(&path, p))
                    .or_else(beside_url)
                {
                    o.insert("relative_path".into(), Value::String(rel));
                }
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Checks the first dimensions (cellm: `n_cells`, binm: `n_bins`) and writes the group
    /// documents of §12.
    pub(crate) fn finish(&self, n_cells: u64, n_bins: u64) -> Result<()> {
        for e in &self.cellm {
            check_rows(&format!("cellm \"{}\"", e.key), &e.shape, n_cells, "cellm")?;
        }
        for e in &self.binm {
            check_rows(&format!("binm \"{}\"", e.key), &e.shape, n_bins, "binm")?;
        }
        let keyed = |list: &[ArrayEntry]| ComponentAttrs {
            keys: Some(
                list.iter()
                    .map(|e| ComponentEntry::member(&e.key, &e.name))
                    .collect(),
            ),
            ..ComponentAttrs::default()
        };
        write_group(&self.root, "cellm", &keyed(&self.cellm))?;
        write_group(&self.root, "binm", &keyed(&self.binm))?;
        let results = ComponentAttrs {
            keys: Some(entries(&self.results)),
            ..ComponentAttrs::default()
        };
        write_group(&self.root, "results", &results)?;
        write_results(&self.root, "results", &self.results)?;
        let mut uns = ComponentKind::Uns.empty_attrs();
        if let Some((v, names)) = &self.uns {
            uns.uns = Some(v.clone());
            uns.arrays = Some(
                names
                    .iter()
                    .map(|n| ComponentEntry::Name(n.clone()))
                    .collect(),
            );
        }
        write_group(&self.root, "uns", &uns)?;
        for (kind, recs) in [("contacts", &self.contacts), ("links", &self.links)] {
            let mut m = Map::new();
            m.insert(kind.into(), Value::Array(recs.clone().unwrap_or_default()));
            write_group(&self.root, kind, &m)?;
        }
        Ok(())
    }
}

fn entries(list: &[ResultEntry]) -> Vec<ComponentEntry> {
    list.iter()
        .map(|e| ComponentEntry::member(&e.key, &e.name))
        .collect()
}

/// Group nodes of the results tree (array nodes were written with their data).
fn write_results(root: &Path, dir: &str, list: &[ResultEntry]) -> Result<()> {
    for e in list {
        let node = format!("{dir}/{}", e.name);
        if e.attrs.ty == ResultType::Array {
            continue;
        }
        let mut attrs = e.attrs.clone();
        if attrs.ty == ResultType::Mapping {
            attrs.keys = Some(entries(&e.children));
        }
        write_group(root, &node, &attrs)?;
        write_results(root, &node, &e.children)?;
    }
    Ok(())
}

fn check_rows(what: &str, shape: &[u64], n: u64, kind: &str) -> Result<()> {
    let axis = if kind == "cellm" { "n_cells" } else { "n_bins" };
    if shape.first() != Some(&n) {
        return Err(Error::invalid_argument(format!(
            "{what}: first dimension {} but {axis} = {n} ({kind} arrays have one row per {})",
            shape.first().map_or("none".to_string(), |d| d.to_string()),
            if kind == "cellm" { "cell" } else { "bin" }
        )));
    }
    Ok(())
}

/// A results table as one Parquet file; a column type Parquet cannot store is
/// `Unsupported`.
fn write_result_table(path: &Path, t: &RecordBatch, what: &str) -> Result<()> {
    super::parquet_file::write_parquet(path, t).map_err(|e| match e.kind {
        ErrorKind::Unsupported => Error::unsupported(format!("{what}: {}", e.message)),
        _ => e,
    })
}
