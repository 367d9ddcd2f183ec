//! The writer calls for everything a store holds besides the spots (C API §6.1): category
//! lists, traces / cells tables, cellm / binm arrays, results, uns, contacts, links and the
//! `source_result` of intervals; and how given category lists meet the first batch.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use serde_json::Value;

use super::categories::{dictionary_values, CategoryList, ListSource};
use super::{annotations, ChromDataWriter};
use crate::chromdata::spec::ResultAttrs;
use crate::error::{Error, ErrorKind, Result};

impl ChromDataWriter {
    /// Fixes the category list of a coded column: "trace_id", "cell_id" or an extra
    /// categorical spot column; before the first append. The list keeps its order and its
    /// unused categories; an appended value outside it is `InvalidArgument`. Values:
    /// strings or integers, distinct, no nulls.
    ///
    /// Errors: `State` (after the first append), `Exists` (given twice), `InvalidArgument`,
    /// `Unsupported` (another value type).
    pub fn set_categories(&mut self, column: &str, values: ArrayRef) -> Result<()> {
        self.check_open("set categories")?;
        if self.has_cells.is_some() {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "categories of \"{column}\": a category list is given before the first append"
                ),
            ));
        }
        if column.is_empty() {
            return Err(Error::invalid_argument("set_categories: empty column name"));
        }
        if self.given_lists.iter().any(|(c, _)| c == column) {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("the categories of \"{column}\" were given already"),
            ));
        }
        let list = CategoryList::new(column, &values, ListSource::Given)?;
        if let Some(t) = self.annotation(column_table(column)) {
            annotations::check(column_table(column), t, Some(&list))?;
        }
        self.given_lists.push((column.to_string(), Arc::new(list)));
        Ok(())
    }

    fn annotation(&self, table: &str) -> Option<&RecordBatch> {
        match table {
            "traces" => self.traces_table.as_ref(),
            "cells" => self.cells_table.as_ref(),
            _ => None,
        }
    }

    /// The fixed list of trace_id ("traces") or cell_id ("cells"), if any yet.
    fn id_list(&self, table: &str) -> Option<&CategoryList> {
        let (map, col) = if table == "traces" {
            (&self.traces, "trace_id")
        } else {
            (&self.cells, "cell_id")
        };
        map.list.as_ref().or_else(|| {
            self.given_lists
                .iter()
                .find(|(c, _)| c == col)
                .map(|(_, l)| l.as_ref())
        })
    }

    /// Sets the "traces" or "cells" annotation table (§5.3): first column `trace_id` /
    /// `cell_id` holding each category once (any order; rows are put in category order at
    /// `finish`), then annotation columns (bool, integers, floats, strings; dictionary
    /// columns are categorical and keep their dictionary). Any time before `finish`.
    ///
    /// Errors: `InvalidArgument` (unknown name, first column, repeated or unknown ids),
    /// `Exists` (set twice), `Unsupported` (a column type).
    pub fn set_table(&mut self, name: &str, table: RecordBatch) -> Result<()> {
        self.check_open("set a table")?;
        annotations::index_column(name)?;
        if self.annotation(name).is_some() {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("the {name} table was set already"),
            ));
        }
        if name == "cells" && self.has_cells == Some(false) {
            return Err(Error::invalid_argument(
                "cells: the spots have no cell_id, so the store has no cells table",
            ));
        }
        let checked = annotations::check(name, &table, self.id_list(name))?;
        if name == "traces" {
            self.traces_table = Some(checked);
        } else {
            self.cells_table = Some(checked);
        }
        Ok(())
    }

    /// Adds a "cellm" or "binm" array (§12) in the one-column form of `ChromData::array`:
    /// first dimension n_cells / n_bins (checked now when known, else at `finish`). The
    /// array is written at once.
    pub fn add_array(&mut self, kind: &str, key: &str, array: RecordBatch) -> Result<()> {
        self.check_open("add an array")?;
        let rows = match kind {
            "cellm" => self.id_list("cells").map(|l| l.len() as u64),
            "binm" => self.bins.n_given().map(|n| n as u64),
            _ => None,
        };
        self.components.add_array(kind, key, &array, rows)
    }

    /// Adds a results entry (§12): `attrs` as `ChromData::attrs` returns it for results
    /// (`type` required; `value` for json entries; provenance optional); `data` the table
    /// ("table") or the one-column array batch ("array"), None for "json" and "mapping". A
    /// mapping's members come after it, with longer paths.
    ///
    /// Errors: `InvalidArgument` (attributes, data that does not match the type, a member
    /// of something that is not a mapping), `NotFound` (a member before its mapping),
    /// `Exists` (a key twice), `Unsupported` (a type Parquet or Zarr cannot store).
    pub fn add_result(
        &mut self,
        path: &[&str],
        attrs: &Value,
        data: Option<RecordBatch>,
    ) -> Result<()> {
        self.check_open("add a result")?;
        let a = ResultAttrs::from_doc(attrs, &format!("results {path:?}"))?;
        self.components.add_result(path, a, data)
    }

    /// JSON parts (§12): ("uns", None, a tagged-JSON dict; the 64-element rule applied),
    /// ("contacts" | "links", None, an array of records with `key` and `path`; the
    /// relative-path rule applied), ("intervals", key, `{"source_result": string | null}`)
    /// for a table added with `add_table`.
    ///
    /// Errors: `InvalidArgument` (unknown kind, bad JSON, a key where none belongs),
    /// `NotFound` (unknown intervals key), `Exists` (set twice, repeated record keys),
    /// `Unsupported` (an ndarray type Zarr cannot store).
    pub fn set_json(&mut self, kind: &str, key: Option<&str>, json: &str) -> Result<()> {
        self.check_open("set JSON")?;
        if !["uns", "contacts", "links", "intervals"].contains(&kind) {
            return Err(Error::invalid_argument(format!(
                "unknown JSON kind \"{kind}\" (expected uns, contacts, links or intervals)"
            )));
        }
        let v: Value = serde_json::from_str(json).map_err(|e| {
            Error::invalid_argument(format!("{kind}: the JSON does not parse: {e}"))
        })?;
        if kind != "intervals" {
            if key.is_some() {
                return Err(Error::invalid_argument(format!(
                    "{kind}: no key belongs to this kind (pass NULL)"
                )));
            }
            return self.components.set_json(kind, v);
        }
        let key = key.ok_or_else(|| {
            Error::invalid_argument("intervals: the key of the intervals table is required")
        })?;
        let src = interval_source(key, &v)?;
        let t = self
            .pass_tables
            .iter_mut()
            .find(|t| t.collection == "intervals" && t.key == key)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("intervals \"{key}\": no such table (add it with add_table first)"),
                )
            })?;
        t.source_result = src;
        Ok(())
    }

    /// Keeps these plain string columns as strings (they are otherwise stored as
    /// categoricals when they have few distinct values): `rewrite` keeps the source's
    /// column types. Before the first append.
    #[doc(hidden)]
    pub fn keep_strings(&mut self, columns: &[String]) -> Result<()> {
        self.check_open("keep strings")?;
        if self.has_cells.is_some() {
            return Err(Error::new(
                ErrorKind::State,
                "keep_strings comes before the first append",
            ));
        }
        self.plain_strings.extend(columns.iter().cloned());
        Ok(())
    }

    /// At the first append: given lists move to trace_id / cell_id; a list for a column
    /// the batch lacks is an error.
    pub(super) fn apply_given_lists(&mut self, batch: &RecordBatch, has_cells: bool) -> Result<()> {
        let schema = batch.schema();
        for (col, _) in &self.given_lists {
            let present = schema.index_of(col).is_ok();
            if !present || (col == "cell_id" && !has_cells) {
                return Err(Error::invalid_argument(format!(
                    "categories were given for \"{col}\", which the first batch lacks"
                )));
            }
            if ["x", "y", "z", "chrom", "start", "end", "bin_id"].contains(&col.as_str())
                || col.starts_with("spot_tracks/")
                || col.starts_with("layers/")
            {
                return Err(Error::invalid_argument(format!(
                    "categories were given for \"{col}\", which is not a categorical column"
                )));
            }
        }
        let take = |name: &str, lists: &[(String, Arc<CategoryList>)]| {
            lists
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, l)| l.clone())
        };
        if self.traces.list.is_none() && self.traces.len() == 0 {
            if let Some(l) = take("trace_id", &self.given_lists) {
                self.traces.set_list(clone_list("trace_id", &l)?);
            }
        }
        if self.cells.list.is_none() && self.cells.len() == 0 {
            if let Some(l) = take("cell_id", &self.given_lists) {
                self.cells.set_list(clone_list("cell_id", &l)?);
            }
        }
        if let Some(t) = &self.traces_table {
            annotations::check("traces", t, self.traces.list.as_ref())?;
        }
        Ok(())
    }

    /// The fixed list of each value column of a batch, checking the values against it (no
    /// state change): the column's list (later batches); for the first batch the given
    /// list, or the column's dictionary (extra columns only).
    pub(super) fn value_lists(
        &self,
        batch: &RecordBatch,
        value_fields: &[(usize, String)],
        first: bool,
    ) -> Result<Vec<Option<Arc<CategoryList>>>> {
        let mut out = Vec::with_capacity(value_fields.len());
        for (i, name) in value_fields {
            let a = batch.column(*i);
            let list = if first {
                let given = self
                    .given_lists
                    .iter()
                    .find(|(c, _)| c == name)
                    .map(|(_, l)| l.clone());
                let extra = !name.starts_with("spot_tracks/") && !name.starts_with("layers/");
                match (given, dictionary_values(a)) {
                    (Some(l), _) => Some(l),
                    (None, Some(d)) if extra => Some(Arc::new(CategoryList::new(
                        name,
                        &d,
                        ListSource::Dictionary,
                    )?)),
                    _ => None,
                }
            } else {
                self.cols
                    .iter()
                    .find(|c| &c.name == name)
                    .and_then(|c| c.list.clone())
            };
            if let Some(l) = &list {
                l.check(name, a)?;
            }
            out.push(list);
        }
        Ok(out)
    }
}

/// The table whose index column is `column` ("" for other columns).
fn column_table(column: &str) -> &'static str {
    match column {
        "trace_id" => "traces",
        "cell_id" => "cells",
        _ => "",
    }
}

/// A copy of a given list for an id map.
fn clone_list(column: &str, l: &CategoryList) -> Result<CategoryList> {
    CategoryList::new(column, &l.values, ListSource::Given)
}

/// `{"source_result": string | null}` of `set_json("intervals", key, ...)`.
fn interval_source(key: &str, v: &Value) -> Result<Option<String>> {
    let o = v.as_object().ok_or_else(|| {
        Error::invalid_argument(format!(
            "intervals \"{key}\": expected {{\"source_result\": string or null}}"
        ))
    })?;
    if let Some(k) = o.keys().find(|k| *k != "source_result") {
        return Err(Error::invalid_argument(format!(
            "intervals \"{key}\": unknown member \"{k}\" (only source_result)"
        )));
    }
    match o.get("source_result") {
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Null) | None => Ok(None),
        Some(x) => Err(Error::invalid_argument(format!(
            "intervals \"{key}\": source_result must be a string or null, got {x}"
        ))),
    }
}
