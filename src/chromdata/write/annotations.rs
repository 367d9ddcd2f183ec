//! The traces and cells annotation tables of §5.3, given with `set_table`: checked when
//! given (first column the ids, each once; annotation columns of the type vocabulary,
//! dictionary columns categorical), held in memory (one row per trace or cell) and put in
//! category order at `finish`, their first column then holding the category values.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, Int32Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use super::categories::CategoryList;
use crate::chromdata::values;
use crate::error::{Error, ErrorKind, Result};

/// The index column of an annotation table: `trace_id` for "traces", `cell_id` for "cells".
pub(crate) fn index_column(name: &str) -> Result<&'static str> {
    match name {
        "traces" => Ok("trace_id"),
        "cells" => Ok("cell_id"),
        n => Err(Error::invalid_argument(format!(
            "unknown table \"{n}\" (expected traces or cells)"
        ))),
    }
}

/// Text of id `i` of a normalised utf8 / integer column, for lookups.
fn id_text(a: &ArrayRef, i: usize) -> Result<String> {
    Ok(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
        t if t.is_integer() => values::int_values(&a.slice(i, 1))?[0]
            .unwrap_or_default()
            .to_string(),
        t => {
            return Err(Error::unsupported(format!(
                "ids of type {t} (strings or integers)"
            )))
        }
    })
}

/// Checks a table given for `name` and returns it with its columns in stored form: the ids
/// normalised (utf8 or int64), value columns normalised, dictionary columns as
/// `Dictionary(Int32, utf8 | int64)`. `list`: the category list when already fixed.
pub(crate) fn check(
    name: &str,
    t: &RecordBatch,
    list: Option<&CategoryList>,
) -> Result<RecordBatch> {
    let index = index_column(name)?;
    let schema = t.schema();
    if t.num_columns() == 0 || schema.field(0).name() != index {
        return Err(Error::invalid_argument(format!(
            "{name}: the first column must be \"{index}\" (one row per {})",
            &name[..name.len() - 1]
        )));
    }
    let ids = values::normalise_array(t.column(0))?;
    if ids.null_count() > 0 {
        return Err(Error::invalid_argument(format!(
            "{name}: {index} has null values"
        )));
    }
    let ids: ArrayRef = match ids.data_type() {
        DataType::Utf8 => ids,
        d if d.is_integer() => Arc::new(arrow_array::Int64Array::from(values::int_values(
            ids.as_ref(),
        )?)),
        d => {
            return Err(Error::unsupported(format!(
                "{name}: {index} of type {d} (strings or integers)"
            )))
        }
    };
    let mut seen = HashSet::with_capacity(ids.len());
    for i in 0..ids.len() {
        let v = id_text(&ids, i)?;
        if !seen.insert(v.clone()) {
            return Err(Error::invalid_argument(format!(
                "{name}: {index} {v} appears twice (one row per {})",
                &name[..name.len() - 1]
            )));
        }
    }
    if let Some(l) = list {
        l.codes(index, &ids)?;
    }
    let mut fields = vec![Field::new(index, ids.data_type().clone(), true)];
    let mut cols = vec![ids];
    let mut names = HashSet::from([index.to_string()]);
    for (f, c) in schema.fields().iter().zip(t.columns()).skip(1) {
        if f.name().is_empty() || !names.insert(f.name().clone()) {
            return Err(Error::invalid_argument(format!(
                "{name}: column name \"{}\" is empty or repeated",
                f.name()
            )));
        }
        let c = stored_column(name, f.name(), c)?;
        fields.push(Field::new(f.name(), c.data_type().clone(), true));
        cols.push(c);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::invalid_argument(format!("{name}: {e}")))
}

/// An annotation column in stored form; a type outside the vocabulary is `Unsupported`.
fn stored_column(table: &str, col: &str, c: &ArrayRef) -> Result<ArrayRef> {
    if let DataType::Dictionary(_, _) = c.data_type() {
        let d = c.as_any_dictionary();
        let list = CategoryList::new(
            &format!("{table}.{col}"),
            d.values(),
            super::categories::ListSource::Given,
        )?;
        let keys: Int32Array = values::int_values(d.keys())?
            .into_iter()
            .map(|k| k.map(|k| k as i32))
            .collect();
        let dict = DictionaryArray::<Int32Type>::try_new(keys, list.values.clone())
            .map_err(|e| Error::invalid_argument(format!("{table}.{col}: {e}")))?;
        return Ok(Arc::new(dict));
    }
    let c = values::normalise_array(c)?;
    match c.data_type() {
        DataType::Boolean | DataType::Float32 | DataType::Float64 | DataType::Utf8 => Ok(c),
        t if t.is_integer() => Ok(c),
        t => Err(Error::unsupported(format!(
            "{table}: column \"{col}\" of type {t} cannot be stored (bool, integers, floats, \
             strings, dictionaries of strings or integers)"
        ))),
    }
}

/// The table in category order: one row per category of `cats` (every category exactly
/// once), its first column replaced by `cats`.
pub(crate) fn in_category_order(
    name: &str,
    t: &RecordBatch,
    cats: &ArrayRef,
) -> Result<RecordBatch> {
    let index = index_column(name)?;
    let ids = t.column(0);
    if (ids.data_type() == &DataType::Utf8) != (cats.data_type() == &DataType::Utf8) {
        return Err(Error::invalid_argument(format!(
            "{name}: {index} values are {} but the categories are {}",
            ids.data_type(),
            cats.data_type()
        )));
    }
    let mut row_of = HashMap::with_capacity(ids.len());
    for i in 0..ids.len() {
        row_of.insert(id_text(ids, i)?, i as u32);
    }
    let mut take = Vec::with_capacity(cats.len());
    for c in 0..cats.len() {
        let v = id_text(cats, c)?;
        let r = row_of.remove(&v).ok_or_else(|| {
            Error::invalid_argument(format!(
                "{name}: no row for {index} {v} (the table has one row per category)"
            ))
        })?;
        take.push(r);
    }
    if let Some(extra) = row_of.keys().next() {
        return Err(Error::invalid_argument(format!(
            "{name}: {index} {extra} is not among the {} categories",
            cats.len()
        )));
    }
    let idx = UInt32Array::from(take);
    let mut cols = vec![cats.clone()];
    for c in t.columns().iter().skip(1) {
        cols.push(
            arrow_select::take::take(c.as_ref(), &idx, None)
                .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?,
        );
    }
    let mut fields: Vec<Field> = t
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[0] = Field::new(index, cats.data_type().clone(), true);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}
