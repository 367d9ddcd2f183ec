//! Iteration over a store in stored order, a batch of whole runs or cell segments at a
//! time (`iter_traces`, `iter_cells`), each batch read when asked for.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use super::plan::Columns;
use super::store::{ChromData, OpenStore};
use crate::error::{Error, ErrorKind, Result};

/// What a batch of an iterator covers.
#[derive(Debug, Clone)]
enum Unit {
    Runs(std::ops::Range<usize>),
    Segments(std::ops::Range<usize>),
}

/// Batches of whole runs or cells in stored order (`iter_traces` / `iter_cells`), each read
/// when asked for. Holds the store open; independent of the [`ChromData`] it came from.
pub struct SpotBatches {
    inner: Arc<OpenStore>,
    plan: Vec<usize>,
    schema: SchemaRef,
    units: std::vec::IntoIter<Unit>,
}

impl SpotBatches {
    fn next_batch(&mut self, u: Unit) -> Result<RecordBatch> {
        let runs = match u {
            Unit::Runs(r) => r,
            Unit::Segments(s) => {
                let co = &self.inner.index.cell_offsets;
                self.inner.runs_in(co[s.start], co[s.end])
            }
        };
        let runs: Vec<usize> = runs.collect();
        let sel = self.inner.select_runs(&runs, None);
        self.inner.assemble(&sel, &self.plan)
    }
}

impl Iterator for SpotBatches {
    type Item = std::result::Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let u = self.units.next()?;
        Some(
            self.next_batch(u)
                .map_err(|e| ArrowError::ExternalError(Box::new(e))),
        )
    }
}

impl RecordBatchReader for SpotBatches {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl ChromData {
    /// Batches of `batch` runs (a trace in one cell [and chromosome]) in stored order.
    pub fn iter_traces(&self, batch: u64, columns: &Columns) -> Result<SpotBatches> {
        let n = self.inner.index.trace_codes.len();
        self.batches(batch, n, columns, Unit::Runs)
    }

    /// Batches of `batch` cell segments in stored order. NotFound without cell_id.
    pub fn iter_cells(&self, batch: u64, columns: &Columns) -> Result<SpotBatches> {
        if self.inner.small.cell_cats.is_none() {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{}: the store has no cell_id", self.inner.store.display),
            ));
        }
        let n = self.inner.index.cell_codes.len();
        self.batches(batch, n, columns, Unit::Segments)
    }

    fn batches(
        &self,
        batch: u64,
        n: usize,
        columns: &Columns,
        unit: fn(std::ops::Range<usize>) -> Unit,
    ) -> Result<SpotBatches> {
        if batch == 0 {
            return Err(Error::invalid_argument("batch must be at least 1"));
        }
        let plan = self.inner.plan(columns)?;
        let b = batch.min(n.max(1) as u64) as usize;
        let units: Vec<Unit> = (0..n).step_by(b).map(|s| unit(s..(s + b).min(n))).collect();
        Ok(SpotBatches {
            inner: self.inner.clone(),
            schema: self.inner.out_schema(&plan),
            plan,
            units: units.into_iter(),
        })
    }
}
