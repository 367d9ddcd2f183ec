//! Query planning (§15): which output columns a selection asks for, which runs a query
//! reads in which order, and the row ranges and columns that makes on each file set.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{Field, Schema, SchemaRef};

use super::schema::{ColumnSource, FileSetId};
use super::store::OpenStore;
use crate::chromdata::spec::Layout;
use crate::error::{Error, ErrorKind, Result};

/// Column selection of a spot query (§15.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Columns {
    /// The full schema.
    #[default]
    All,
    /// bin_id, trace_id, [cell_id], x, y, z: reads no other column.
    Coords,
    /// Keys, then these names in full-schema order; duplicates and key names ignored.
    Names(Vec<String>),
}

impl Columns {
    /// The selection a list of selectors names (the C API's and the CLI's rule): no
    /// selector = all columns; the single selector `"coords"` = keys + x, y, z; anything
    /// else = these column names.
    pub fn from_selectors<S: AsRef<str>>(selectors: &[S]) -> Columns {
        match selectors {
            [] => Columns::All,
            [one] if one.as_ref() == "coords" => Columns::Coords,
            names => Columns::Names(names.iter().map(|s| s.as_ref().to_string()).collect()),
        }
    }
}

/// Output rows of a query: aligned row ranges on the key side and on the extra side.
#[derive(Debug, Default, Clone)]
pub(crate) struct Selection {
    pub(crate) key: Vec<(u64, u64)>,
    pub(crate) extra: Vec<(u64, u64)>,
    /// Keep only rows on this chromosome (flat get_chrom over multi-chromosome runs).
    pub(crate) chrom_filter: Option<i32>,
    /// The selected runs in output order (before the chromosome filter): each run's rows
    /// have one trace and one cell code, which is how those columns are built.
    pub(crate) runs: Vec<usize>,
}

impl Selection {
    pub(crate) fn rows(&self) -> u64 {
        self.extra.iter().map(|(s, e)| e - s).sum()
    }

    /// The row ranges of the selection on file set `set`.
    pub(crate) fn ranges(&self, set: FileSetId) -> &[(u64, u64)] {
        match set {
            FileSetId::Key => &self.key,
            _ => &self.extra,
        }
    }
}

/// The stored columns a query reads from each file set, in set order; the key set comes
/// first and always starts with bin_id, trace_id [, cell_id].
#[derive(Debug)]
pub(crate) struct Requests {
    pub(crate) sets: BTreeMap<FileSetId, Vec<String>>,
}

impl OpenStore {
    /// Number of key columns (bin_id, trace_id [, cell_id]) that lead every result.
    fn n_keys(&self) -> usize {
        if self.small.cell_cats.is_some() {
            3
        } else {
            2
        }
    }

    /// Full-schema indices for a selection (§15.1).
    pub(crate) fn plan(&self, columns: &Columns) -> Result<Vec<usize>> {
        let n_keys = self.n_keys();
        let all = 0..self.columns.len();
        Ok(match columns {
            Columns::All => all.collect(),
            Columns::Coords => all
                .filter(|&i| {
                    i < n_keys || matches!(self.columns[i].source, ColumnSource::Coordinate { .. })
                })
                .collect(),
            Columns::Names(names) => {
                let mut want = vec![false; self.columns.len()];
                want[..n_keys].iter_mut().for_each(|w| *w = true);
                for n in names {
                    let i = self
                        .columns
                        .iter()
                        .position(|c| &c.name == n)
                        .ok_or_else(|| {
                            Error::new(
                                ErrorKind::NotFound,
                                format!("{}: unknown spot column \"{n}\"", self.store.display),
                            )
                        })?;
                    want[i] = true;
                }
                (0..want.len()).filter(|&i| want[i]).collect()
            }
        })
    }

    /// The Arrow schema of the output columns `plan`.
    pub(crate) fn out_schema(&self, plan: &[usize]) -> SchemaRef {
        Arc::new(Schema::new(
            plan.iter()
                .map(|&i| {
                    let c = &self.columns[i];
                    Field::new(&c.name, c.dtype.clone(), true)
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// Columns to read from each file set for the output columns of `plan`.
    pub(crate) fn requests(&self, plan: &[usize]) -> Requests {
        let s = &self.tables.spots;
        let mut key = vec![s.bin_id.name.clone(), s.trace_id.name.clone()];
        if let Some(c) = &s.cell_id {
            key.push(c.name.clone());
        }
        let mut sets = BTreeMap::new();
        sets.insert(FileSetId::Key, key);
        for &i in plan {
            if let Some((set, column)) = self.columns[i].source.stored_column() {
                sets.entry(set)
                    .or_insert_with(Vec::new)
                    .push(column.to_string());
            }
        }
        Requests { sets }
    }

    /// Selection of whole runs, in the given order; adjacent ranges are coalesced.
    pub(crate) fn select_runs(&self, runs: &[usize], chrom_filter: Option<i32>) -> Selection {
        let to = &self.index.trace_offsets;
        let mut sel = Selection {
            chrom_filter,
            runs: runs.to_vec(),
            ..Selection::default()
        };
        for &r in runs {
            let ext = (to[r], to[r + 1]);
            let key = self.index.key_rows(r);
            match (sel.key.last_mut(), sel.extra.last_mut()) {
                (Some(lk), Some(le)) if lk.1 == key.0 && le.1 == ext.0 => {
                    lk.1 = key.1;
                    le.1 = ext.1;
                }
                _ => {
                    sel.key.push(key);
                    sel.extra.push(ext);
                }
            }
        }
        sel
    }

    /// Runs inside global rows `[s, e)` (which start and end on run boundaries).
    pub(crate) fn runs_in(&self, s: u64, e: u64) -> std::ops::Range<usize> {
        let to = &self.index.trace_offsets;
        let a = to.partition_point(|&x| x < s);
        let b = to.partition_point(|&x| x < e);
        a..b
    }

    /// Partitioned stores keep runs chromosome-major: put them in canonical order.
    pub(crate) fn canonical(&self, runs: &mut [usize]) {
        if self.root.layout == Layout::Partitioned {
            let ix = &self.index;
            runs.sort_by_key(|&r| (ix.trace_cells[r], ix.trace_codes[r], ix.chrom_trace[r]));
        }
    }

    /// `index/source_row`, read on first use.
    pub(crate) fn source_row(&self) -> Result<Option<Arc<Vec<i64>>>> {
        if !self.root.uchrom().has_source_row {
            return Ok(None);
        }
        let mut slot = self.source_row.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = slot.as_ref() {
            return Ok(Some(v.clone()));
        }
        let v = Arc::new(self.arrays.read_i64("index/source_row")?);
        *slot = Some(v.clone());
        Ok(Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::Columns;

    #[test]
    fn selectors() {
        assert_eq!(Columns::from_selectors::<&str>(&[]), Columns::All);
        assert_eq!(Columns::from_selectors(&["coords"]), Columns::Coords);
        assert_eq!(
            Columns::from_selectors(&["coords", "x"]),
            Columns::Names(vec!["coords".into(), "x".into()])
        );
        assert_eq!(
            Columns::from_selectors(&["spot_id"]),
            Columns::Names(vec!["spot_id".into()])
        );
    }
}
