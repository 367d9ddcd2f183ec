//! Assembly of a query's result (§15.1–§15.3): read the planned row ranges of every file
//! set at once (only the row groups they touch, straight into the result's columns, see
//! [`super::gather`]), check the keys, apply the chromosome filter, then build each output
//! column — stored columns as read, categorical codes decoded, trace / cell ids and
//! columns derived by trace or cell repeated run by run (a run has one trace and one cell
//! code, which the stored codes are checked against), columns derived by bin and
//! bins-referenced columns gathered by bin_id.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    new_empty_array, Array, ArrayRef, ArrowPrimitiveType, BooleanArray, PrimitiveArray,
    RecordBatch, RecordBatchOptions, StringArray, UInt32Array,
};
use arrow_buffer::{ArrowNativeType, OffsetBuffer, ScalarBuffer};
use arrow_schema::DataType;

use super::arenas::{pooled_values, Arenas};
use super::codes::RunCodes;
use super::gather::{read_sets, SetRead};
use super::plan::{Requests, Selection};
use super::schema::{ColumnSource, FileSetId};
use super::store::OpenStore;
use crate::chromdata::spec::DerivedKey;
use crate::chromdata::values::normalise_array;
use crate::error::{Error, ErrorKind, Result};
use crate::memory::result_vec;

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

/// The output runs: (trace code, cell code, rows), in output order, before the filter.
struct Runs {
    runs: Vec<(u32, Option<u32>, usize)>,
}

/// The key columns of the selected rows, checked: bin ids as gather indices, the runs'
/// codes, and the chromosome filter's mask.
struct Keys {
    /// Rows kept by the chromosome filter (None: all rows).
    mask: Option<BooleanArray>,
    /// bin_id as stored (unfiltered), checked to be in `[0, n_bins)`.
    bin_ids: ArrayRef,
    /// bin_id as gather indices (unfiltered), made when a column needs them.
    bin_idx: OnceLock<UInt32Array>,
    rows: usize,
    runs: Runs,
}

impl Keys {
    /// `a` (a column over all selected rows) with the rows the chromosome filter drops
    /// removed.
    fn filter(&self, a: ArrayRef) -> Result<ArrayRef> {
        match &self.mask {
            Some(m) => arrow_select::filter::filter(a.as_ref(), m).map_err(arrow_error),
            None => Ok(a),
        }
    }

    fn rows(&self) -> usize {
        match &self.mask {
            Some(m) => m.true_count(),
            None => self.rows,
        }
    }

    /// bin_id as gather indices (all selected rows).
    fn bin_idx(&self) -> &UInt32Array {
        self.bin_idx.get_or_init(|| {
            let b = self.bin_ids.as_primitive::<Int32Type>();
            let mut v = result_vec(b.len());
            // Checked at construction: every value is in [0, n_bins).
            v.extend(b.values().iter().map(|&x| x as u32));
            UInt32Array::from(v)
        })
    }

    /// (code, rows) of each run: its cell code (`cell`) or trace code.
    fn run_codes(&self, cell: bool) -> Result<Vec<(usize, usize)>> {
        self.runs
            .runs
            .iter()
            .map(|&(t, c, len)| {
                let code = if cell { c } else { Some(t) };
                code.map(|c| (c as usize, len)).ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "cell codes of runs without cells")
                })
            })
            .collect()
    }

    /// `values` repeated run by run (`cell`: by cell code, else by trace code).
    fn repeat(&self, values: &ArrayRef, cell: bool, pool: &Arc<Arenas>) -> Result<ArrayRef> {
        let runs = self.run_codes(cell)?;
        if values.null_count() == 0 {
            if let DataType::Utf8 = values.data_type() {
                return repeat_strings(values.as_string::<i32>(), &runs);
            }
            macro_rules! fill {
                ($t:ty) => {
                    return Ok(repeat_values(values.as_primitive::<$t>(), &runs, pool))
                };
            }
            match values.data_type() {
                DataType::Int64 => fill!(Int64Type),
                DataType::Int32 => fill!(Int32Type),
                DataType::Int16 => fill!(Int16Type),
                DataType::Int8 => fill!(Int8Type),
                DataType::UInt64 => fill!(UInt64Type),
                DataType::UInt32 => fill!(UInt32Type),
                DataType::UInt16 => fill!(UInt16Type),
                DataType::UInt8 => fill!(UInt8Type),
                DataType::Float64 => fill!(Float64Type),
                DataType::Float32 => fill!(Float32Type),
                _ => {}
            }
        }
        let mut idx = result_vec(self.bin_ids.len());
        for &(c, len) in &runs {
            idx.extend(std::iter::repeat_n(c as u32, len));
        }
        take(values, &UInt32Array::from(idx))
    }
}

/// Each (code, n) of `runs` as n copies of `values[code]` (no nulls in `values`), in
/// memory of the handle's `pool`.
fn repeat_values<T: ArrowPrimitiveType>(
    values: &PrimitiveArray<T>,
    runs: &[(usize, usize)],
    pool: &Arc<Arenas>,
) -> ArrayRef {
    let n = runs.iter().map(|r| r.1).sum();
    let buf = pooled_values(pool, n, |slots| {
        let mut at = 0usize;
        for &(c, len) in runs {
            let v = values.value(c);
            for s in &mut slots[at..at + len] {
                s.write(v);
            }
            at += len;
        }
    });
    Arc::new(PrimitiveArray::<T>::new(buf, None).with_data_type(values.data_type().clone()))
}

/// Each (code, n) of `runs` as n copies of `values[code]`, as one utf8 array.
fn repeat_strings(values: &StringArray, runs: &[(usize, usize)]) -> Result<ArrayRef> {
    let offs = values.value_offsets();
    let total: usize = runs
        .iter()
        .map(|&(c, n)| (offs[c + 1] - offs[c]) as usize * n)
        .sum();
    if total > i32::MAX as usize {
        return Err(Error::format(
            "result string column exceeds 2 GiB (utf8 offsets are 32-bit)",
        ));
    }
    let rows: usize = runs.iter().map(|r| r.1).sum();
    let mut offsets = result_vec(rows + 1);
    let mut bytes = result_vec(total);
    offsets.push(0i32);
    let data = values.value_data();
    for &(c, n) in runs {
        let s = &data[offs[c] as usize..offs[c + 1] as usize];
        for _ in 0..n {
            bytes.extend_from_slice(s);
            offsets.push(bytes.len() as i32);
        }
    }
    let arr = StringArray::try_new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        bytes.into(),
        None,
    )
    .map_err(arrow_error)?;
    Ok(Arc::new(arr))
}

fn take(values: &ArrayRef, idx: &UInt32Array) -> Result<ArrayRef> {
    arrow_select::take::take(values.as_ref(), idx, None).map_err(arrow_error)
}

/// Codes of an integer array as gather indices into `n` values: null stays null (when
/// `nullable`), any other value must be in `[0, n)`.
fn code_indices(a: &dyn Array, n: usize, what: &str, nullable: bool) -> Result<UInt32Array> {
    fn typed<T: ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        n: usize,
        what: &str,
        nullable: bool,
    ) -> Result<UInt32Array> {
        if !nullable && a.null_count() > 0 {
            let i = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
            return Err(Error::format(format!(
                "{what}: null at selected row {i} (never null)"
            )));
        }
        let nulls = a.nulls();
        let mut out = Vec::with_capacity(a.len());
        let mut bad = None;
        for (i, &v) in a.values().iter().enumerate() {
            let c = v.to_i64().unwrap_or(i64::MAX);
            if c >= 0 && (c as u64) < n as u64 {
                out.push(c as u32);
            } else if nulls.is_some_and(|nb| nb.is_null(i)) {
                out.push(0);
            } else {
                bad.get_or_insert((i, c));
                out.push(0);
            }
        }
        if let Some((i, c)) = bad {
            return Err(Error::format(format!(
                "{what}: value {c} at selected row {i} is out of range [0, {n})"
            )));
        }
        Ok(UInt32Array::new(ScalarBuffer::from(out), nulls.cloned()))
    }
    macro_rules! dispatch {
        ($($dt:ident => $t:ty),*) => {
            match a.data_type() {
                $(DataType::$dt => typed(a.as_primitive::<$t>(), n, what, nullable),)*
                t => Err(Error::format(format!("{what}: expected an integer column, found {t}"))),
            }
        };
    }
    dispatch!(Int8 => Int8Type, Int16 => Int16Type, Int32 => Int32Type, Int64 => Int64Type,
              UInt8 => UInt8Type, UInt16 => UInt16Type, UInt32 => UInt32Type, UInt64 => UInt64Type)
}

/// Checks bin ids: Int32, never null, in `[0, n_bins)`.
fn check_bin_ids(a: &dyn Array, n_bins: usize, what: &str) -> Result<()> {
    let b = a
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| Error::format(format!("{what}: stored as {}, not int32", a.data_type())))?;
    if b.null_count() > 0 {
        let i = (0..b.len()).find(|&i| b.is_null(i)).unwrap_or(0);
        return Err(Error::format(format!(
            "{what}: null at selected row {i} (never null)"
        )));
    }
    // One branch-free pass; the offending row is looked for only on failure.
    let bad = b
        .values()
        .iter()
        .fold(false, |acc, &x| acc | (x as u32 as usize >= n_bins));
    if bad {
        let (i, v) = b
            .values()
            .iter()
            .enumerate()
            .find(|&(_, &x)| x < 0 || x as usize >= n_bins)
            .map(|(i, &x)| (i, x))
            .unwrap_or((0, -1));
        return Err(Error::format(format!(
            "{what}: value {v} at selected row {i} is out of range [0, {n_bins})"
        )));
    }
    Ok(())
}

/// Categorical codes to values (null code → null); other columns pass through.
fn decode(a: &ArrayRef, cats: &Option<ArrayRef>, what: &str) -> Result<ArrayRef> {
    match cats {
        Some(c) => {
            let idx = code_indices(a.as_ref(), c.len(), &format!("{what} codes"), true)?;
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
        let runs = self.runs(sel);
        let read = self.read_columns(&requests, sel, &runs)?;
        let keys = self.keys(&requests, &read, sel, runs)?;
        let out = plan
            .iter()
            .map(|&i| self.output_column(i, &read, &keys))
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new_with_options(
            self.out_schema(plan),
            out,
            &RecordBatchOptions::new().with_row_count(Some(keys.rows())),
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

    /// Reads the requested columns of every file set over the selection's ranges, all
    /// sets' row groups decoded together.
    fn read_columns(
        &self,
        requests: &Requests,
        sel: &Selection,
        runs: &Runs,
    ) -> Result<ReadColumns> {
        let d = &self.store.display;
        let mut reads = Vec::with_capacity(requests.sets.len());
        let checks: Vec<Vec<Option<RunCodes>>> = requests
            .sets
            .keys()
            .map(|&set| match set {
                FileSetId::Key => self.key_checks(runs),
                _ => Ok(Vec::new()),
            })
            .collect::<Result<_>>()?;
        for ((&set, names), checks) in requests.sets.iter().zip(&checks) {
            let fs = self.file_set(set).ok_or_else(|| match set {
                FileSetId::Primary => {
                    Error::format(format!("{d}: primary columns listed but no primary file"))
                }
                _ => Error::new(ErrorKind::Internal, format!("{d}: no file set {set:?}")),
            })?;
            reads.push(SetRead {
                set: fs,
                names,
                ranges: sel.ranges(set),
                checks,
            });
        }
        let mut arrays = HashMap::new();
        for ((&set, names), cols) in requests.sets.iter().zip(read_sets(&reads, &self.arenas)?) {
            for (n, a) in names.iter().zip(cols) {
                if let Some(a) = a {
                    arrays.insert((set, n.clone()), a);
                }
            }
        }
        Ok(ReadColumns { arrays })
    }

    /// The output runs of the selection: (trace code, cell code, rows) from the index.
    fn runs(&self, sel: &Selection) -> Runs {
        let ix = &self.index;
        let runs = sel
            .runs
            .iter()
            .map(|&r| {
                let cell = (ix.trace_cells[r] >= 0).then_some(ix.trace_cells[r] as u32);
                let len = (ix.trace_offsets[r + 1] - ix.trace_offsets[r]) as usize;
                (ix.trace_codes[r] as u32, cell, len)
            })
            .collect();
        Runs { runs }
    }

    /// The checks of the key-set names (bin_id, trace_id [, cell_id], then coordinates and
    /// other spot columns, as `requests` lists them): the stored trace and cell codes are
    /// only checked against the runs (the output's trace_id / cell_id come from the runs
    /// and categories), by the tasks that decode them.
    fn key_checks(&self, runs: &Runs) -> Result<Vec<Option<RunCodes>>> {
        let d = &self.store.display;
        let trace = runs.runs.iter().map(|r| (r.0, r.2));
        let mut checks = vec![
            None,
            Some(RunCodes::new(trace, format!("{d}: spots trace_id"))),
        ];
        if self.small.cell_cats.is_some() {
            let cell = runs
                .runs
                .iter()
                .map(|r| r.1.map(|c| (c, r.2)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::format(format!("{d}: a run without a cell code")))?;
            checks.push(Some(RunCodes::new(cell, format!("{d}: spots cell_id"))));
        }
        Ok(checks)
    }

    /// Checks the bin ids and applies the chromosome filter (§15.2); the stored trace / cell
    /// codes were checked against `runs` as they were read.
    fn keys(
        &self,
        requests: &Requests,
        read: &ReadColumns,
        sel: &Selection,
        runs: Runs,
    ) -> Result<Keys> {
        let d = &self.store.display;
        let key_names = requests
            .sets
            .get(&FileSetId::Key)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let bin_name = key_names
            .first()
            .ok_or_else(|| Error::new(ErrorKind::Internal, "key column not requested"))?;
        let n_bins = self.root.uchrom().n_bins as usize;
        let bin_ids = read.get(FileSetId::Key, bin_name)?.clone();
        check_bin_ids(bin_ids.as_ref(), n_bins, &format!("{d}: spots bin_id"))?;
        let mask = sel.chrom_filter.map(|ch| {
            BooleanArray::from(
                bin_ids
                    .as_primitive::<Int32Type>()
                    .values()
                    .iter()
                    .map(|&b| self.small.bin_chrom[b as usize] == ch)
                    .collect::<Vec<bool>>(),
            )
        });
        Ok(Keys {
            mask,
            rows: bin_ids.len(),
            bin_ids,
            bin_idx: OnceLock::new(),
            runs,
        })
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
            ColumnSource::TraceId => keys.repeat(&self.small.trace_cats, false, &self.arenas)?,
            ColumnSource::CellId => keys.repeat(
                self.small.cell_cats.as_ref().ok_or_else(no_cells)?,
                true,
                &self.arenas,
            )?,
            ColumnSource::Coordinate { column } => read.get(FileSetId::Key, column)?.clone(),
            ColumnSource::Stored {
                set,
                column,
                categories,
            } => {
                let what = match set {
                    FileSetId::Tracks => format!("{d}: spot track \"{column}\""),
                    _ => format!("{d}: spot column \"{column}\""),
                };
                decode(read.get(*set, column)?, categories, &what)?
            }
            ColumnSource::Derived {
                key,
                values,
                categories,
            } => {
                let what = format!("{d}: spot column \"{}\"", col.name);
                let spread = match key {
                    DerivedKey::Bin => take(values, keys.bin_idx())?,
                    DerivedKey::Trace => keys.repeat(values, false, &self.arenas)?,
                    DerivedKey::Cell => {
                        if self.small.cell_cats.is_none() {
                            return Err(Error::format(format!(
                                "{what}: derived by cell, but the store has no cell_id"
                            )));
                        }
                        keys.repeat(values, true, &self.arenas)?
                    }
                };
                // Codes of the selected rows only are decoded (and checked).
                decode(&spread, categories, &what)?
            }
            ColumnSource::Bins { values } => take(values, keys.bin_idx())?,
        };
        let a = normalise_array(&keys.filter(a)?)?;
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
