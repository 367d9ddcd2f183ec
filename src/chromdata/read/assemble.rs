//! Assembly of a query's result (§15.1–§15.3): read the planned row ranges of each file set
//! (only the row groups they touch), check and decode the keys, apply the chromosome
//! filter, then build each output column — stored columns as read, categorical codes
//! decoded, derived and bins-referenced columns gathered by bin / cell / trace code.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{
    new_empty_array, Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array,
};

use super::plan::{Requests, Selection};
use super::schema::{ColumnSource, FileSetId};
use super::store::OpenStore;
use crate::chromdata::spec::DerivedKey;
use crate::chromdata::values::{int_values, normalise_array};
use crate::error::{Error, ErrorKind, Result};

fn arrow_error(e: impl std::fmt::Display) -> Error {
    Error::format(e.to_string())
}

/// The arrays read for a query, by file set and stored column name.
struct ReadColumns {
    arrays: HashMap<(FileSetId, String), ArrayRef>,
}

impl ReadColumns {
    fn get(&self, set: FileSetId, column: &str) -> Result<&ArrayRef> {
        self.arrays.get(&(set, column.to_string())).ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                format!("column \"{column}\" was not read"),
            )
        })
    }
}

/// The key columns of the selected rows, checked: bin, trace and cell codes as gather
/// indices, and the chromosome filter's mask.
struct Keys {
    /// Rows kept by the chromosome filter (None: all rows).
    mask: Option<BooleanArray>,
    /// bin_id as stored, filtered.
    bin_ids: ArrayRef,
    bin_idx: UInt64Array,
    trace_idx: UInt64Array,
    cell_idx: Option<UInt64Array>,
}

impl Keys {
    /// `a` with the rows the chromosome filter drops removed.
    fn filter(&self, a: &ArrayRef) -> Result<ArrayRef> {
        match &self.mask {
            Some(m) => arrow_select::filter::filter(a.as_ref(), m).map_err(arrow_error),
            None => Ok(a.clone()),
        }
    }
}

/// Indices for a gather, checking every non-null code is `< n`.
fn gather_indices(codes: &dyn Array, n: usize, what: &str, nullable: bool) -> Result<UInt64Array> {
    let v = int_values(codes)?;
    let mut out = Vec::with_capacity(v.len());
    for (i, c) in v.into_iter().enumerate() {
        match c {
            Some(c) if c >= 0 && (c as u64) < n as u64 => out.push(Some(c as u64)),
            Some(c) => {
                return Err(Error::format(format!(
                    "{what}: value {c} at selected row {i} is out of range [0, {n})"
                )))
            }
            None if nullable => out.push(None),
            None => {
                return Err(Error::format(format!(
                    "{what}: null at selected row {i} (never null)"
                )))
            }
        }
    }
    Ok(UInt64Array::from(out))
}

fn take(values: &ArrayRef, idx: &UInt64Array) -> Result<ArrayRef> {
    arrow_select::take::take(values.as_ref(), idx, None).map_err(arrow_error)
}

/// Categorical codes to values (null code → null); other columns pass through.
fn decode(a: &ArrayRef, cats: &Option<ArrayRef>, what: &str) -> Result<ArrayRef> {
    match cats {
        Some(c) => {
            let idx = gather_indices(a.as_ref(), c.len(), &format!("{what} codes"), true)?;
            take(c, &idx)
        }
        None => Ok(a.clone()),
    }
}

impl OpenStore {
    /// Reads the selected rows and builds the output columns of `plan`.
    pub(crate) fn assemble(&self, sel: &Selection, plan: &[usize]) -> Result<RecordBatch> {
        if sel.rows() == 0 {
            return self.empty(plan);
        }
        let requests = self.requests(plan);
        let read = self.read_columns(&requests, sel)?;
        let keys = self.keys(&requests, &read, sel)?;
        let out = plan
            .iter()
            .map(|&i| self.output_column(i, &read, &keys))
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new_with_options(
            self.out_schema(plan),
            out,
            &RecordBatchOptions::new().with_row_count(Some(keys.bin_idx.len())),
        )
        .map_err(arrow_error)
    }

    /// A result of no rows.
    pub(crate) fn empty(&self, plan: &[usize]) -> Result<RecordBatch> {
        let schema = self.out_schema(plan);
        let cols = schema
            .fields()
            .iter()
            .map(|f| new_empty_array(f.data_type()))
            .collect();
        RecordBatch::try_new(schema, cols).map_err(arrow_error)
    }

    /// Reads the requested columns of every file set over the selection's ranges.
    fn read_columns(&self, requests: &Requests, sel: &Selection) -> Result<ReadColumns> {
        let d = &self.store.display;
        let mut arrays = HashMap::new();
        for (&set, names) in &requests.sets {
            let fs = self.file_set(set).ok_or_else(|| match set {
                FileSetId::Primary => {
                    Error::format(format!("{d}: primary columns listed but no primary file"))
                }
                _ => Error::new(ErrorKind::Internal, format!("{d}: no file set {set:?}")),
            })?;
            for (n, a) in names.iter().zip(fs.read(names, sel.ranges(set))?) {
                arrays.insert((set, n.clone()), a);
            }
        }
        Ok(ReadColumns { arrays })
    }

    /// Checks the key codes and applies the chromosome filter (§15.2).
    fn keys(&self, requests: &Requests, read: &ReadColumns, sel: &Selection) -> Result<Keys> {
        let d = &self.store.display;
        let key_names = requests
            .sets
            .get(&FileSetId::Key)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let key = |k: usize| -> Result<&ArrayRef> {
            let name = key_names
                .get(k)
                .ok_or_else(|| Error::new(ErrorKind::Internal, "key column not requested"))?;
            read.get(FileSetId::Key, name)
        };
        let n_bins = self.root.uchrom().n_bins as usize;
        let bin_ids = key(0)?.clone();
        let bin_idx = gather_indices(
            bin_ids.as_ref(),
            n_bins,
            &format!("{d}: spots bin_id"),
            false,
        )?;
        let mask = sel.chrom_filter.map(|ch| {
            BooleanArray::from(
                bin_idx
                    .values()
                    .iter()
                    .map(|&b| self.small.bin_chrom[b as usize] == ch)
                    .collect::<Vec<bool>>(),
            )
        });
        let mut keys = Keys {
            mask,
            bin_ids,
            bin_idx,
            trace_idx: UInt64Array::from(Vec::<u64>::new()),
            cell_idx: None,
        };
        keys.bin_ids = keys.filter(&keys.bin_ids)?;
        if let Some(m) = &keys.mask {
            keys.bin_idx = arrow_select::filter::filter(&keys.bin_idx, m)
                .map_err(arrow_error)?
                .as_primitive::<arrow_array::types::UInt64Type>()
                .clone();
        }
        keys.trace_idx = gather_indices(
            keys.filter(key(1)?)?.as_ref(),
            self.small.trace_cats.len(),
            &format!("{d}: spots trace_id codes"),
            false,
        )?;
        if let Some(cc) = &self.small.cell_cats {
            keys.cell_idx = Some(gather_indices(
                keys.filter(key(2)?)?.as_ref(),
                cc.len(),
                &format!("{d}: spots cell_id codes"),
                false,
            )?);
        }
        Ok(keys)
    }

    /// Output column `i` of the full schema for the selected rows.
    fn output_column(&self, i: usize, read: &ReadColumns, keys: &Keys) -> Result<ArrayRef> {
        let d = &self.store.display;
        let col = &self.columns[i];
        let no_cells = || {
            Error::format(format!(
                "{d}: \"{}\" needs cell_id, which the store has not",
                col.name
            ))
        };
        let a: ArrayRef = match &col.source {
            ColumnSource::BinId => keys.bin_ids.clone(),
            ColumnSource::TraceId => take(&self.small.trace_cats, &keys.trace_idx)?,
            ColumnSource::CellId => {
                let cats = self.small.cell_cats.as_ref().ok_or_else(no_cells)?;
                take(cats, keys.cell_idx.as_ref().ok_or_else(no_cells)?)?
            }
            ColumnSource::Coordinate { column } => {
                keys.filter(read.get(FileSetId::Key, column)?)?
            }
            ColumnSource::Stored {
                set,
                column,
                categories,
            } => {
                let what = match set {
                    FileSetId::Tracks => format!("{d}: spot track \"{column}\""),
                    _ => format!("{d}: spot column \"{column}\""),
                };
                decode(&keys.filter(read.get(*set, column)?)?, categories, &what)?
            }
            ColumnSource::Derived {
                key,
                values,
                categories,
            } => {
                let what = format!("{d}: spot column \"{}\"", col.name);
                let idx = match key {
                    DerivedKey::Bin => &keys.bin_idx,
                    DerivedKey::Trace => &keys.trace_idx,
                    DerivedKey::Cell => keys.cell_idx.as_ref().ok_or_else(|| {
                        Error::format(format!(
                            "{what}: derived by cell, but the store has no cell_id"
                        ))
                    })?,
                };
                decode(&take(values, idx)?, categories, &what)?
            }
            ColumnSource::Bins { values } => take(values, &keys.bin_idx)?,
        };
        let a = normalise_array(&a)?;
        if a.data_type() != &col.dtype {
            return Err(Error::format(format!(
                "{d}: column \"{}\" decoded as {}, expected {}",
                col.name,
                a.data_type(),
                col.dtype
            )));
        }
        Ok(a)
    }
}
