//! The spot queries of §15 on an open store: by trace, cell, chromosome, all spots (in
//! canonical or input order), and the list of Parquet reads a query makes.

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, SchemaRef};

use super::plan::{Columns, Selection};
use super::store::ChromData;
use crate::error::{Error, ErrorKind, Result};

/// A query whose Parquet reads [`ChromData::read_plan`] lists (benchmarks only).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum PlanQuery {
    Trace(CatValue),
    Cell(CatValue),
    Chrom(String),
    /// `read_spots`.
    All,
}

/// Reads of one Parquet file by a query (benchmarks only): store-relative path, row
/// groups (numbered within the file, in first-use order), projected columns.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    pub path: String,
    pub row_groups: Vec<usize>,
    pub columns: Vec<String>,
}

/// A category value used as an id: text or integer (no conversion between the two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatValue {
    Str(String),
    Int(i64),
}

fn find_code(cats: &ArrayRef, id: &CatValue) -> Option<i32> {
    match (id, cats.data_type()) {
        (CatValue::Str(s), DataType::Utf8) => cats
            .as_string::<i32>()
            .iter()
            .position(|v| v == Some(s.as_str()))
            .map(|i| i as i32),
        (CatValue::Int(x), DataType::Int64) => cats
            .as_primitive::<arrow_array::types::Int64Type>()
            .iter()
            .position(|v| v == Some(*x))
            .map(|i| i as i32),
        _ => None,
    }
}

impl ChromData {
    /// The result schema of a spot query with this column selection.
    pub fn spot_schema(&self, columns: &Columns) -> Result<SchemaRef> {
        Ok(self.inner.out_schema(&self.inner.plan(columns)?))
    }

    /// Code of a trace id, or NotFound.
    fn trace_code(&self, id: &CatValue) -> Result<i32> {
        find_code(&self.inner.small.trace_cats, id).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: trace_id {} not found",
                    self.inner.store.display,
                    show(id)
                ),
            )
        })
    }

    /// Parses a C id text for a trace (`cell = false`) or cell: integer categories take the
    /// decimal value; text that is no integer cannot match and is reported not found.
    pub fn parse_id(&self, text: &str, cell: bool) -> CatValue {
        let cats = if cell {
            self.inner.small.cell_cats.as_ref()
        } else {
            Some(&self.inner.small.trace_cats)
        };
        match cats.map(|c| c.data_type()) {
            Some(DataType::Int64) => match text.parse::<i64>() {
                Ok(v) => CatValue::Int(v),
                Err(_) => CatValue::Str(text.to_string()),
            },
            _ => CatValue::Str(text.to_string()),
        }
    }

    /// All spots of a trace, across cells and chromosomes, in canonical order.
    pub fn get_trace(&self, id: &CatValue, columns: &Columns) -> Result<RecordBatch> {
        let plan = self.inner.plan(columns)?;
        let sel = self.trace_selection(id)?;
        self.inner.assemble(&sel, &plan)
    }

    fn trace_selection(&self, id: &CatValue) -> Result<Selection> {
        let i = &self.inner;
        let t = self.trace_code(id)?;
        let mut runs: Vec<usize> = (0..i.index.trace_codes.len())
            .filter(|&r| i.index.trace_codes[r] == t)
            .collect();
        i.canonical(&mut runs);
        Ok(i.select_runs(&runs, None))
    }

    /// All spots of a cell, in canonical order. NotFound if the store has no cell_id.
    pub fn get_cell(&self, id: &CatValue, columns: &Columns) -> Result<RecordBatch> {
        let plan = self.inner.plan(columns)?;
        let sel = self.cell_selection(id)?;
        self.inner.assemble(&sel, &plan)
    }

    fn cell_selection(&self, id: &CatValue) -> Result<Selection> {
        let i = &self.inner;
        let cats = i.small.cell_cats.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("{}: the store has no cell_id", i.store.display),
            )
        })?;
        let c = find_code(cats, id).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("{}: cell_id {} not found", i.store.display, show(id)),
            )
        })?;
        let ix = &i.index;
        let mut runs = Vec::new();
        for (j, &code) in ix.cell_codes.iter().enumerate() {
            if code == c {
                runs.extend(i.runs_in(ix.cell_offsets[j], ix.cell_offsets[j + 1]));
            }
        }
        i.canonical(&mut runs);
        Ok(i.select_runs(&runs, None))
    }

    /// All spots on a chromosome, in canonical order.
    pub fn get_chrom(&self, name: &str, columns: &Columns) -> Result<RecordBatch> {
        let plan = self.inner.plan(columns)?;
        let sel = self.chrom_selection(name)?;
        self.inner.assemble(&sel, &plan)
    }

    fn chrom_selection(&self, name: &str) -> Result<Selection> {
        let i = &self.inner;
        let ch =
            find_code(&i.small.chrom_cats, &CatValue::Str(name.to_string())).ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("{}: chromosome \"{name}\" not found", i.store.display),
                )
            })?;
        let ct = &i.index.chrom_trace;
        let runs: Vec<usize> = (0..ct.len())
            .filter(|&r| ct[r] == ch || ct[r] == -1)
            .collect();
        let mixed = runs.iter().any(|&r| ct[r] == -1);
        Ok(i.select_runs(&runs, mixed.then_some(ch)))
    }

    fn all_selection(&self) -> Selection {
        let i = &self.inner;
        let mut runs: Vec<usize> = (0..i.index.trace_codes.len()).collect();
        i.canonical(&mut runs);
        i.select_runs(&runs, None)
    }

    /// Every spot: canonical order, or input order with `original_order` (§7.4).
    pub fn read_spots(&self, original_order: bool, columns: &Columns) -> Result<RecordBatch> {
        let i = &self.inner;
        let plan = i.plan(columns)?;
        let sel = self.all_selection();
        let batch = i.assemble(&sel, &plan)?;
        if !original_order {
            return Ok(batch);
        }
        // Stored row of each output row, then order by source_row (or stored row).
        let stored: Vec<u64> = sel.extra.iter().flat_map(|&(s, e)| s..e).collect();
        let src = i.source_row()?;
        let mut perm: Vec<u64> = (0..stored.len() as u64).collect();
        match &src {
            Some(sr) => perm.sort_by_key(|&k| sr[stored[k as usize] as usize]),
            None => perm.sort_by_key(|&k| stored[k as usize]),
        }
        arrow_select::take::take_record_batch(&batch, &UInt64Array::from(perm))
            .map_err(|e| Error::format(e.to_string()))
    }

    /// The Parquet reads a query makes: per spot-aligned file (store-relative path), the
    /// row groups it decodes and the columns it projects. Lets benchmarks replay exactly
    /// the same reads with another Parquet reader; not part of the stable API.
    #[doc(hidden)]
    pub fn read_plan(&self, query: &PlanQuery, columns: &Columns) -> Result<Vec<FileRead>> {
        let i = &self.inner;
        let plan = i.plan(columns)?;
        let sel = match query {
            PlanQuery::Trace(id) => self.trace_selection(id)?,
            PlanQuery::Cell(id) => self.cell_selection(id)?,
            PlanQuery::Chrom(name) => self.chrom_selection(name)?,
            PlanQuery::All => self.all_selection(),
        };
        let mut out: Vec<FileRead> = Vec::new();
        if sel.rows() == 0 {
            return Ok(out);
        }
        for (&set, names) in &i.requests(&plan).sets {
            let Some(fs) = i.file_set(set) else { continue };
            let start = out.len();
            for (p, g) in fs.touched(sel.ranges(set)) {
                let path = &fs.files[p].rel;
                match out[start..].iter_mut().find(|f| &f.path == path) {
                    Some(f) => f.row_groups.push(g),
                    None => out.push(FileRead {
                        path: path.clone(),
                        row_groups: vec![g],
                        columns: names.to_vec(),
                    }),
                }
            }
        }
        Ok(out)
    }
}

fn show(id: &CatValue) -> String {
    match id {
        CatValue::Str(s) => format!("\"{s}\""),
        CatValue::Int(v) => v.to_string(),
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<ChromData>();
    is::<super::iter::SpotBatches>();
}
