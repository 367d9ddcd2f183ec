//! Rewriting a store (C API `dc_chromdata_rewrite`, `deltacells chromdata rewrite`): any
//! version, layout, directory or `.cdz` into any layout, with everything it holds — bins
//! and bin tracks, category lists (unused categories and their order included), traces and
//! cells tables, spots with their tracks and layers, intervals, points, cellm, binm,
//! results, uns, contacts and links — through the streaming writer, under its memory
//! budget. The spots are read in stored order, a batch of runs at a time, and each is
//! handed to the writer with its original input row (the source's `source_row`), so the
//! original order stays recoverable and the writer stores exactly what it would have
//! stored from the original input.

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, DictionaryArray, Int32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Map, Value};

use super::{write, ChromData, ChromDataWriter, Columns, Layout, WriterOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::{self, Observer, Progress, Stage, Unit};

/// Runs per batch read from the source.
const RUNS_PER_BATCH: u64 = 1024;

/// Options of [`rewrite`].
#[derive(Debug, Clone)]
pub struct RewriteOptions {
    /// Layout of the new store.
    pub layout: Layout,
    /// Replace an existing store at the destination.
    pub overwrite: bool,
    /// Bytes of memory the writer may use (0 = its default, half of the available RAM).
    pub memory_budget: u64,
    /// Worker threads (0 = `DELTACELLS_NUM_THREADS` or all cores).
    pub threads: usize,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions {
            layout: Layout::PrimaryCoords,
            overwrite: false,
            memory_budget: 0,
            threads: 0,
        }
    }
}

/// Rewrites the store at `src` into `dst` (a directory, or a `.cdz` when `dst` ends in
/// `.cdz`) in `opts.layout`, keeping everything it holds and its original row order.
/// `observer` hears [`Stage::Read`] in spots (after every batch), then [`Stage::Finish`]
/// (the writer's merge and index) before and after; a cancel abandons the write.
///
/// Errors: those of opening `src` (NotFound, Format, Unsupported, ...), of creating `dst`
/// (Exists, ...), `InvalidArgument` when `dst` is `src`.
pub fn rewrite(
    src: &Path,
    dst: &Path,
    opts: &RewriteOptions,
    observer: &dyn Observer,
) -> Result<()> {
    if let (Ok(a), Ok(b)) = (src.canonicalize(), dst.canonicalize()) {
        if a == b {
            return Err(Error::invalid_argument(format!(
                "{}: a store cannot be rewritten onto itself",
                dst.display()
            )));
        }
    }
    let cd = ChromData::open(src)?;
    let info = cd.info();
    let wopts = WriterOptions {
        memory_budget: opts.memory_budget,
        coord_float32: info.coord_bits == 32,
        layout: opts.layout,
        overwrite: opts.overwrite,
        threads: opts.threads,
        ..WriterOptions::default()
    };
    let mut w = ChromDataWriter::create(dst, wopts)?;
    copy_tables(&cd, &mut w)?;
    copy_spots(&cd, &mut w, observer)?;
    copy_pass_through(&cd, &mut w)?;
    let n = info.n_spots;
    let finish = |done, total| {
        progress::report(
            observer,
            Progress {
                stage: Stage::Finish,
                unit: Unit::Rows,
                done,
                total,
            },
        )
    };
    finish(0, None)?;
    w.finish()?;
    finish(n, Some(n))
}

/// `batch` with each column that has categories in `cd` (table `table`) as a dictionary
/// array over its category list, so that the writer keeps the list (order and unused
/// categories included).
fn with_dictionaries(cd: &ChromData, table: &str, batch: RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut cols = Vec::with_capacity(batch.num_columns());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let col = match cd.categories(table, f.name()) {
            Ok(cats) => dictionary_of(c, &cats, &format!("{table}.{}", f.name()))?,
            Err(e) if e.kind == ErrorKind::NotFound => c.clone(),
            Err(e) => return Err(e),
        };
        fields.push(Field::new(f.name(), col.data_type().clone(), true));
        cols.push(col);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

/// The values `c` as a dictionary array over `cats` (codes = positions in `cats`).
fn dictionary_of(c: &ArrayRef, cats: &ArrayRef, what: &str) -> Result<ArrayRef> {
    use arrow_array::types::Int32Type;
    let keys = arrow_select_index(c, cats, what)?;
    let d = DictionaryArray::<Int32Type>::try_new(keys, cats.clone())
        .map_err(|e| Error::new(ErrorKind::Internal, format!("{what}: {e}")))?;
    Ok(Arc::new(d))
}

/// Position of each value of `c` in `cats` (null stays null); a value that is not a
/// category is a `Format` error of the source store.
fn arrow_select_index(c: &ArrayRef, cats: &ArrayRef, what: &str) -> Result<Int32Array> {
    use std::collections::HashMap;
    let text = |a: &ArrayRef, i: usize| -> Option<String> {
        if a.is_null(i) {
            return None;
        }
        Some(match a.data_type() {
            DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
            _ => arrow_value_text(a, i),
        })
    };
    let lookup: HashMap<String, i32> = (0..cats.len())
        .filter_map(|i| text(cats, i).map(|t| (t, i as i32)))
        .collect();
    (0..c.len())
        .map(|i| match text(c, i) {
            None => Ok(None),
            Some(t) => lookup.get(&t).copied().map(Some).ok_or_else(|| {
                Error::format(format!("{what}: value {t} is not among its categories"))
            }),
        })
        .collect::<Result<Vec<_>>>()
        .map(Int32Array::from)
}

/// Text of a non-string scalar (integers, floats, bools), for category lookups.
fn arrow_value_text(a: &ArrayRef, i: usize) -> String {
    use arrow_array::types::*;
    match a.data_type() {
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .value(i)
            .to_bits()
            .to_string(),
        DataType::Boolean => a.as_boolean().value(i).to_string(),
        t => format!("<{t}>"),
    }
}

/// Bins (chromosome list kept), bin tracks, category lists, traces and cells tables.
fn copy_tables(cd: &ChromData, w: &mut ChromDataWriter) -> Result<()> {
    w.set_bins(with_dictionaries(cd, "bins", cd.table("bins")?)?)?;
    match cd.table("bin_tracks") {
        Ok(t) => w.set_bin_tracks(t)?,
        Err(e) if e.kind == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let info = cd.info();
    w.set_categories("trace_id", cd.categories("spots", "trace_id")?)?;
    if info.has_cell_id {
        w.set_categories("cell_id", cd.categories("spots", "cell_id")?)?;
    }
    let mut strings = Vec::new();
    for name in cd.extra_columns() {
        match cd.categories("spots", &name) {
            Ok(cats) => w.set_categories(&name, cats)?,
            Err(e) if e.kind == ErrorKind::NotFound => strings.push(name),
            Err(e) => return Err(e),
        }
    }
    // Columns that are not categorical stay as they are (strings are not made categorical).
    w.keep_strings(&strings)?;
    w.set_table(
        "traces",
        with_dictionaries(cd, "traces", cd.table("traces")?)?,
    )?;
    if info.has_cell_id {
        w.set_table("cells", with_dictionaries(cd, "cells", cd.table("cells")?)?)?;
    }
    Ok(())
}

/// The spots, in stored order, each with its original input row.
fn copy_spots(cd: &ChromData, w: &mut ChromDataWriter, observer: &dyn Observer) -> Result<()> {
    let total = cd.info().n_spots;
    let mut done = 0u64;
    let read = |done| {
        progress::report(
            observer,
            Progress {
                stage: Stage::Read,
                unit: Unit::Rows,
                done,
                total: Some(total),
            },
        )
    };
    read(0)?;
    for batch in cd.iter_traces(RUNS_PER_BATCH, &Columns::All)? {
        let batch = batch.map_err(|e| Error::format(e.to_string()))?;
        let n = batch.num_rows() as u64;
        let rows = cd.source_rows(done, n)?;
        w.append_with_rows(batch, rows)?;
        done += n;
        read(done)?;
    }
    if done == 0 {
        // No spots: an empty batch still says which columns the store has.
        w.append_with_rows(cd.read_spots(false, &Columns::All)?, Vec::new())?;
    }
    if done != total {
        return Err(Error::format(format!(
            "{}: read {done} spots, the store says {total}",
            cd.display()
        )));
    }
    Ok(())
}

/// Intervals, points, cellm, binm, results, uns, contacts and links.
fn copy_pass_through(cd: &ChromData, w: &mut ChromDataWriter) -> Result<()> {
    for coll in ["intervals", "points"] {
        for key in cd.keys(coll)? {
            let t = cd.table(&format!("{coll}/{key}"))?;
            let a = cd.attrs(coll, &[&key])?;
            let kind = a.get("kind").and_then(Value::as_str).map(str::to_string);
            w.add_table(coll, &key, kind.as_deref(), t)?;
            if coll == "intervals" {
                let mut m = Map::new();
                m.insert(
                    "source_result".into(),
                    a.get("source_result").cloned().unwrap_or(Value::Null),
                );
                w.set_json("intervals", Some(&key), &Value::Object(m).to_string())?;
            }
        }
    }
    for kind in ["cellm", "binm"] {
        for key in cd.keys(kind)? {
            w.add_array(kind, &key, cd.array(kind, &[&key])?)?;
        }
    }
    for key in cd.keys("results")? {
        copy_result(cd, w, &mut vec![key])?;
    }
    let uns = cd.attrs("uns", &[])?;
    if uns.as_object().is_some_and(|o| !o.is_empty()) || !cd.keys("uns")?.is_empty() {
        let inlined = inline_uns_arrays(cd, uns)?;
        w.set_json("uns", None, &inlined.to_string())?;
    }
    for kind in ["contacts", "links"] {
        let Value::Array(records) = cd.attrs(kind, &[])? else {
            continue;
        };
        if records.is_empty() {
            continue;
        }
        let records: Vec<Value> = records
            .into_iter()
            .map(|mut r| {
                if let Some(o) = r.as_object_mut() {
                    o.remove("resolved_path");
                }
                r
            })
            .collect();
        w.set_json(kind, None, &Value::Array(records).to_string())?;
    }
    Ok(())
}

/// A results entry and, for a mapping, its members (parents before members).
fn copy_result(cd: &ChromData, w: &mut ChromDataWriter, path: &mut Vec<String>) -> Result<()> {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let attrs = cd.attrs("results", &p)?;
    let ty = attrs.get("type").and_then(Value::as_str).unwrap_or("");
    let data = match ty {
        "table" => Some(cd.result_table(&p)?),
        "array" => Some(cd.array("results", &p)?),
        _ => None,
    };
    w.add_result(&p, &attrs, data)?;
    if ty == "mapping" {
        let members: Vec<String> = attrs
            .get("keys")
            .and_then(Value::as_array)
            .map(|k| {
                k.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        for m in members {
            path.push(m);
            copy_result(cd, w, path)?;
            path.pop();
        }
    }
    Ok(())
}

/// The uns dict with every `array_ref` replaced by an `ndarray` tag holding the array
/// (the writer applies the 64-element rule again and numbers the arrays).
fn inline_uns_arrays(cd: &ChromData, v: Value) -> Result<Value> {
    Ok(match v {
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|x| inline_uns_arrays(cd, x))
                .collect::<Result<_>>()?,
        ),
        Value::Object(o) => {
            if o.get("__uchrom_type__").and_then(Value::as_str) == Some("array_ref") {
                let path = o.get("path").and_then(Value::as_str).unwrap_or("");
                let name = path.strip_prefix("uns/").unwrap_or(path);
                return ndarray_tag(&cd.array("uns", &[name])?);
            }
            let mut out = Map::new();
            for (k, x) in o {
                out.insert(k, inline_uns_arrays(cd, x)?);
            }
            Value::Object(out)
        }
        other => other,
    })
}

/// An `ndarray` tag of uns from the array batch form (dtype, shape, data row-major).
fn ndarray_tag(b: &RecordBatch) -> Result<Value> {
    let nd = write::NdArray::of_batch(b, "uns array")?;
    let a = &nd.values;
    use arrow_array::types::*;
    macro_rules! nums {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|v| serde_json::json!(v))
                .collect::<Vec<_>>()
        };
    }
    let float = |x: f64| -> Value {
        if x.is_finite() {
            serde_json::json!(x)
        } else {
            let s = if x.is_nan() {
                "nan"
            } else if x > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            serde_json::json!({"__uchrom_type__": "float", "value": s})
        }
    };
    let data: Vec<Value> = match a.data_type() {
        DataType::Boolean => a
            .as_boolean()
            .iter()
            .map(|v| Value::from(v.unwrap_or(false)))
            .collect(),
        DataType::Int8 => nums!(Int8Type),
        DataType::Int16 => nums!(Int16Type),
        DataType::Int32 => nums!(Int32Type),
        DataType::Int64 => nums!(Int64Type),
        DataType::UInt8 => nums!(UInt8Type),
        DataType::UInt16 => nums!(UInt16Type),
        DataType::UInt32 => nums!(UInt32Type),
        DataType::UInt64 => nums!(UInt64Type),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .map(|&v| float(f64::from(v)))
            .collect(),
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .values()
            .iter()
            .map(|&v| float(v))
            .collect(),
        t => return Err(Error::new(ErrorKind::Internal, format!("uns array of {t}"))),
    };
    Ok(serde_json::json!({
        "__uchrom_type__": "ndarray",
        "dtype": nd.ty.numpy(),
        "shape": nd.shape,
        "data": data,
    }))
}
