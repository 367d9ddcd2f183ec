//! Spot queries (§15): run selection, row-group reads, categorical decoding, derived-column
//! gathers and canonical ordering.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    new_empty_array, Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions,
    RecordBatchReader, UInt64Array,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use super::spec::{DerivedKey, Layout, Storage};
use super::{pq, ChromData, FileSet, Inner, OutCol, Src};
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

/// Chrom code of every bin, from the decoded `bins.chrom` values.
pub(crate) fn bin_chrom_codes(
    bins: &RecordBatch,
    chrom_cats: &ArrayRef,
    d: &str,
) -> Result<Vec<i32>> {
    let col = bins
        .column_by_name("chrom")
        .ok_or_else(|| Error::format(format!("{d}: bins.parquet has no chrom column")))?;
    let (Some(vals), Some(cats)) = (
        col.as_string_opt::<i32>(),
        chrom_cats.as_string_opt::<i32>(),
    ) else {
        return Err(Error::format(format!(
            "{d}: bins.chrom and its categories must be strings"
        )));
    };
    let map: HashMap<&str, i32> = cats
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (c, i as i32)))
        .collect();
    vals.iter()
        .enumerate()
        .map(|(i, v)| {
            v.and_then(|v| map.get(v).copied()).ok_or_else(|| {
                Error::format(format!(
                    "{d}: bins row {i}: chrom {v:?} is not in categories/bins.chrom"
                ))
            })
        })
        .collect()
}

/// traces / cells: first column is the index column, with the category values.
pub(crate) fn check_index_column(
    t: &RecordBatch,
    name: &str,
    cats: &ArrayRef,
    d: &str,
) -> Result<()> {
    if t.num_columns() == 0 || t.schema().field(0).name() != name {
        return Err(Error::format(format!(
            "{d}: the first column of the {name} table must be \"{name}\""
        )));
    }
    let col = t.column(0);
    if col.data_type() == cats.data_type() && col.to_data() != cats.to_data() {
        return Err(Error::format(format!(
            "{d}: {name} table values differ from the {name} categories"
        )));
    }
    Ok(())
}

/// Text of category `code` when categories are strings.
pub(crate) fn category_text(cats: &ArrayRef, code: i64) -> Option<String> {
    let s = cats.as_string_opt::<i32>()?;
    if code < 0 || code as usize >= s.len() {
        return None;
    }
    Some(s.value(code as usize).to_string())
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

/// Column names requested from each file set by a query.
struct Requests {
    key: Vec<String>,
    primary: Vec<String>,
    tracks: Vec<String>,
    layers: Vec<Vec<String>>,
}

/// Output rows of a query: aligned row ranges on the key side and on the extra side.
#[derive(Debug, Default, Clone)]
pub(crate) struct Selection {
    pub(crate) key: Vec<(u64, u64)>,
    pub(crate) extra: Vec<(u64, u64)>,
    /// Keep only rows on this chromosome (flat get_chrom over multi-chromosome runs).
    pub(crate) chrom_filter: Option<i32>,
}

impl Selection {
    fn rows(&self) -> u64 {
        self.extra.iter().map(|(s, e)| e - s).sum()
    }
}

fn pq_arrow(e: impl std::fmt::Display) -> Error {
    Error::format(e.to_string())
}

impl FileSet {
    /// Row groups (file index, local group) that a read of global `ranges` decodes, each
    /// once, in first-use order: the same walk as [`FileSet::read`].
    fn touched(&self, ranges: &[(u64, u64)]) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &(s, e) in ranges {
            let mut pos = s;
            while pos < e {
                let g = self.boundaries.partition_point(|&b| b <= pos) - 1;
                let p = self.group_offsets.partition_point(|&x| x <= g as u64) - 1;
                let local = (g as u64 - self.group_offsets[p]) as usize;
                if seen.insert((p, local)) {
                    out.push((p, local));
                }
                pos = e.min(self.boundaries[g + 1]);
            }
        }
        out
    }

    /// Reads `names` over global `ranges` (concatenated in order), decoding only the row
    /// groups that intersect them — those not in the per-file caches in parallel, on the
    /// library's pool (`DELTACELLS_NUM_THREADS`, else all cores). Returns one array per
    /// name.
    fn read(&self, names: &[String], ranges: &[(u64, u64)]) -> Result<Vec<ArrayRef>> {
        let touched = self.touched(ranges);
        let mut cols_of: HashMap<usize, Vec<usize>> = HashMap::new();
        for &(p, _) in &touched {
            if let std::collections::hash_map::Entry::Vacant(v) = cols_of.entry(p) {
                let file = &self.files[p];
                v.insert(
                    names
                        .iter()
                        .map(|n| file.column(n))
                        .collect::<Result<Vec<_>>>()?,
                );
            }
        }
        let mut groups: Vec<Option<RecordBatch>> = touched
            .iter()
            .map(|&(p, l)| self.files[p].cached(l, &cols_of[&p]))
            .collect();
        let missing: Vec<usize> = (0..touched.len())
            .filter(|&i| groups[i].is_none())
            .collect();
        let decode = |&i: &usize| {
            let (p, l) = touched[i];
            self.files[p].decode_group(l, &cols_of[&p])
        };
        let threads = crate::pool::resolve_threads(0);
        let decoded: Vec<Result<RecordBatch>> = if threads > 1 && missing.len() > 1 {
            let pool = crate::pool::pool(threads)?;
            pool.install(|| {
                use rayon::prelude::*;
                missing.par_iter().map(decode).collect()
            })
        } else {
            missing.iter().map(decode).collect()
        };
        // Into the caches in first-use order, as a sequential read would leave them; the
        // first error in that order is the one reported.
        for (&i, r) in missing.iter().zip(decoded) {
            let b = r?;
            let (p, l) = touched[i];
            self.files[p].remember(l, &cols_of[&p], b.clone());
            groups[i] = Some(b);
        }
        let slot: HashMap<(usize, usize), usize> =
            touched.iter().enumerate().map(|(i, &t)| (t, i)).collect();
        let mut pieces: Vec<Vec<ArrayRef>> = vec![Vec::new(); names.len()];
        for &(s, e) in ranges {
            let mut pos = s;
            while pos < e {
                let g = self.boundaries.partition_point(|&b| b <= pos) - 1;
                let (gs, ge) = (self.boundaries[g], self.boundaries[g + 1]);
                let p = self.group_offsets.partition_point(|&x| x <= g as u64) - 1;
                let local = (g as u64 - self.group_offsets[p]) as usize;
                let batch = groups[slot[&(p, local)]].as_ref().expect("decoded above");
                let take = e.min(ge) - pos;
                let off = pos - gs;
                for (c, piece) in pieces.iter_mut().enumerate() {
                    piece.push(batch.column(c).slice(off as usize, take as usize));
                }
                pos += take;
            }
        }
        drop(groups);
        pieces
            .into_iter()
            .map(|p| {
                let refs: Vec<&dyn Array> = p.iter().map(|a| a.as_ref()).collect();
                if refs.is_empty() {
                    return Err(Error::new(ErrorKind::Internal, "read of zero rows"));
                }
                // Copies the selection out of the decoded groups, so they can be freed.
                arrow_select::concat::concat(&refs).map_err(pq_arrow)
            })
            .collect()
    }
}

/// Indices for a gather, checking every non-null code is `< n`.
fn gather_indices(codes: &dyn Array, n: usize, what: &str, nullable: bool) -> Result<UInt64Array> {
    let v = pq::int_values(codes)?;
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
    arrow_select::take::take(values.as_ref(), idx, None).map_err(pq_arrow)
}

impl Inner {
    fn key_names(&self) -> (String, String, Option<String>) {
        let s = &self.tables.spots;
        (
            s.bin_id.name.clone(),
            s.trace_id.name.clone(),
            s.cell_id.as_ref().map(|c| c.name.clone()),
        )
    }

    /// Full-schema indices for a selection (§15.1).
    pub(crate) fn plan(&self, columns: &Columns) -> Result<Vec<usize>> {
        let n_keys = if self.root.uchrom().has_cell_id { 3 } else { 2 };
        Ok(match columns {
            Columns::All => (0..self.schema.len()).collect(),
            Columns::Coords => (0..self.schema.len())
                .filter(|&i| i < n_keys || matches!(self.schema[i].src, Src::Coord(_)))
                .collect(),
            Columns::Names(names) => {
                let mut want = vec![false; self.schema.len()];
                want[..n_keys].iter_mut().for_each(|w| *w = true);
                for n in names {
                    let i = self
                        .schema
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

    pub(crate) fn out_schema(&self, plan: &[usize]) -> SchemaRef {
        Arc::new(Schema::new(
            plan.iter()
                .map(|&i| {
                    let c: &OutCol = &self.schema[i];
                    Field::new(&c.name, c.dtype.clone(), true)
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// Selection of whole runs, in the given order; adjacent ranges are coalesced.
    pub(crate) fn select_runs(&self, runs: &[usize], chrom_filter: Option<i32>) -> Selection {
        let to = &self.index.trace_offsets;
        let mut sel = Selection {
            chrom_filter,
            ..Selection::default()
        };
        for &r in runs {
            let ext = (to[r], to[r + 1]);
            let key = match &self.index.coords {
                Some(c) => {
                    let k = c.inv[r] as usize;
                    (c.run_offsets[k], c.run_offsets[k + 1])
                }
                None => ext,
            };
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
    fn runs_in(&self, s: u64, e: u64) -> std::ops::Range<usize> {
        let to = &self.index.trace_offsets;
        let a = to.partition_point(|&x| x < s);
        let b = to.partition_point(|&x| x < e);
        a..b
    }

    /// Partitioned stores keep runs chromosome-major: put them in canonical order.
    fn canonical(&self, runs: &mut [usize]) {
        if self.root.layout == Layout::Partitioned {
            let ix = &self.index;
            runs.sort_by_key(|&r| (ix.trace_cells[r], ix.trace_codes[r], ix.chrom_trace[r]));
        }
    }

    fn source_row(&self) -> Result<Option<Arc<Vec<i64>>>> {
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

    fn empty(&self, plan: &[usize]) -> Result<RecordBatch> {
        let schema = self.out_schema(plan);
        let cols = schema
            .fields()
            .iter()
            .map(|f| new_empty_array(f.data_type()))
            .collect();
        RecordBatch::try_new(schema, cols).map_err(pq_arrow)
    }

    /// Columns to read from each file set for the output columns of `plan`: the key side
    /// always gives bin_id / trace_id / cell_id.
    fn requests(&self, plan: &[usize]) -> Requests {
        let sm = &self.tables.spots;
        let (bin_name, trace_name, cell_name) = self.key_names();
        let mut key_req: Vec<String> = vec![bin_name, trace_name];
        if let Some(c) = cell_name {
            key_req.push(c);
        }
        let mut primary_req: Vec<String> = Vec::new();
        let mut track_req: Vec<String> = Vec::new();
        let mut layer_req: Vec<Vec<String>> = vec![Vec::new(); self.layer_sets.len()];
        for &i in plan {
            match &self.schema[i].src {
                Src::Coord(a) => {
                    let names = &sm.coords.as_ref().expect("coords present").columns;
                    key_req.push(names[*a].clone());
                }
                Src::Extra(k) => {
                    let c = &sm.columns[*k];
                    match &c.storage {
                        Some(Storage::Spots) => key_req.push(c.name.clone()),
                        Some(Storage::Primary) => primary_req.push(c.name.clone()),
                        _ => {}
                    }
                }
                Src::Track(k) => {
                    let c = &self.tables.spot_tracks.as_ref().expect("tracks").columns[*k];
                    track_req.push(c.name.clone());
                }
                Src::Layer(k, a) => layer_req[*k].push(self.tables.layers[*k].columns[*a].clone()),
                _ => {}
            }
        }
        Requests {
            key: key_req,
            primary: primary_req,
            tracks: track_req,
            layers: layer_req,
        }
    }

    /// Reads the selected rows and builds the output columns of `plan`.
    pub(crate) fn assemble(&self, sel: &Selection, plan: &[usize]) -> Result<RecordBatch> {
        if sel.rows() == 0 {
            return self.empty(plan);
        }
        let d = &self.store.display;
        let sm = &self.tables.spots;
        let flat_like = self.root.layout != Layout::PrimaryCoords;

        let Requests {
            key: key_req,
            primary: primary_req,
            tracks: track_req,
            layers: layer_req,
        } = self.requests(plan);
        let key_cols = self.key_set.read(&key_req, &sel.key)?;
        let mut by_name: HashMap<(u8, usize, String), ArrayRef> = HashMap::new();
        for (n, a) in key_req.iter().zip(&key_cols) {
            by_name.insert((0, 0, n.clone()), a.clone());
        }
        if !primary_req.is_empty() {
            let ps = self.primary_set.as_ref().ok_or_else(|| {
                Error::format(format!("{d}: primary columns listed but no primary file"))
            })?;
            for (n, a) in primary_req.iter().zip(ps.read(&primary_req, &sel.extra)?) {
                by_name.insert((1, 0, n.clone()), a);
            }
        }
        if !track_req.is_empty() {
            let ts = self.tracks_set.as_ref().expect("tracks set");
            for (n, a) in track_req.iter().zip(ts.read(&track_req, &sel.extra)?) {
                by_name.insert((2, 0, n.clone()), a);
            }
        }
        for (k, req) in layer_req.iter().enumerate() {
            if !req.is_empty() {
                for (n, a) in req.iter().zip(self.layer_sets[k].read(req, &sel.extra)?) {
                    by_name.insert((3, k, n.clone()), a);
                }
            }
        }
        debug_assert!(flat_like || sel.chrom_filter.is_none());

        // bin_id checks and the chromosome filter.
        let n_bins = self.root.uchrom().n_bins as usize;
        let bin_arr = key_cols[0].clone();
        let bin_idx = gather_indices(
            bin_arr.as_ref(),
            n_bins,
            &format!("{d}: spots bin_id"),
            false,
        )?;
        let mask = sel.chrom_filter.map(|ch| {
            BooleanArray::from(
                bin_idx
                    .values()
                    .iter()
                    .map(|&b| self.bin_chrom[b as usize] == ch)
                    .collect::<Vec<bool>>(),
            )
        });
        let filt = |a: &ArrayRef| -> Result<ArrayRef> {
            match &mask {
                Some(m) => arrow_select::filter::filter(a.as_ref(), m).map_err(pq_arrow),
                None => Ok(a.clone()),
            }
        };
        let bin_idx = match &mask {
            Some(m) => arrow_select::filter::filter(&bin_idx, m)
                .map_err(pq_arrow)?
                .as_primitive::<arrow_array::types::UInt64Type>()
                .clone(),
            None => bin_idx,
        };
        let trace_idx = gather_indices(
            filt(&key_cols[1])?.as_ref(),
            self.trace_cats.len(),
            &format!("{d}: spots trace_id codes"),
            false,
        )?;
        let cell_idx = match &self.cell_cats {
            Some(cc) => Some(gather_indices(
                filt(&key_cols[2])?.as_ref(),
                cc.len(),
                &format!("{d}: spots cell_id codes"),
                false,
            )?),
            None => None,
        };

        let mut out: Vec<ArrayRef> = Vec::with_capacity(plan.len());
        for &i in plan {
            let col = &self.schema[i];
            let a: ArrayRef = match &col.src {
                Src::BinId => filt(&bin_arr)?,
                Src::Trace => take(&self.trace_cats, &trace_idx)?,
                Src::Cell => take(
                    self.cell_cats.as_ref().expect("cells"),
                    cell_idx.as_ref().expect("cells"),
                )?,
                Src::Coord(a) => {
                    let names = &sm.coords.as_ref().expect("coords").columns;
                    filt(&by_name[&(0, 0, names[*a].clone())])?
                }
                Src::Extra(k) => {
                    let c = &sm.columns[*k];
                    let cats = &self.extra_cats[*k];
                    let what = format!("{d}: spot column \"{}\"", c.name);
                    match c.storage.as_ref().expect("storage") {
                        Storage::Spots => {
                            decode(&filt(&by_name[&(0, 0, c.name.clone())])?, cats, &what)?
                        }
                        Storage::Primary => {
                            decode(&filt(&by_name[&(1, 0, c.name.clone())])?, cats, &what)?
                        }
                        Storage::Derived(key) => {
                            let file = self.derived.get(key.name()).expect("validated at open");
                            let vals = file.column_by_name(&c.name).expect("validated at open");
                            let idx = match key {
                                DerivedKey::Bin => &bin_idx,
                                DerivedKey::Trace => &trace_idx,
                                DerivedKey::Cell => cell_idx.as_ref().ok_or_else(|| {
                                    Error::format(format!(
                                        "{what}: derived by cell, but the store has no cell_id"
                                    ))
                                })?,
                            };
                            decode(&take(vals, idx)?, cats, &what)?
                        }
                        Storage::Bins(src) => {
                            let vals = self.bins.column_by_name(src).expect("validated at open");
                            take(vals, &bin_idx)?
                        }
                    }
                }
                Src::Track(k) => {
                    let c = &self.tables.spot_tracks.as_ref().expect("tracks").columns[*k];
                    let what = format!("{d}: spot track \"{}\"", c.name);
                    decode(
                        &filt(&by_name[&(2, 0, c.name.clone())])?,
                        &self.track_cats[*k],
                        &what,
                    )?
                }
                Src::Layer(k, a) => {
                    let n = &self.tables.layers[*k].columns[*a];
                    filt(&by_name[&(3, *k, n.clone())])?
                }
            };
            let a = pq::normalise_array(&a)?;
            if a.data_type() != &col.dtype {
                return Err(Error::format(format!(
                    "{d}: column \"{}\" decoded as {}, expected {}",
                    col.name,
                    a.data_type(),
                    col.dtype
                )));
            }
            out.push(a);
        }
        let n_rows = bin_idx.len();
        RecordBatch::try_new_with_options(
            self.out_schema(plan),
            out,
            &RecordBatchOptions::new().with_row_count(Some(n_rows)),
        )
        .map_err(pq_arrow)
    }
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

/// What a batch of an iterator covers.
#[derive(Debug, Clone)]
enum Unit {
    Runs(std::ops::Range<usize>),
    Segments(std::ops::Range<usize>),
}

/// Batches of whole runs or cells in stored order (`iter_traces` / `iter_cells`), each read
/// when asked for. Holds the store open; independent of the [`ChromData`] it came from.
pub struct SpotBatches {
    inner: Arc<Inner>,
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
    /// The result schema of a spot query with this column selection.
    pub fn spot_schema(&self, columns: &Columns) -> Result<SchemaRef> {
        Ok(self.inner.out_schema(&self.inner.plan(columns)?))
    }

    /// Code of a trace id, or NotFound.
    fn trace_code(&self, id: &CatValue) -> Result<i32> {
        find_code(&self.inner.trace_cats, id).ok_or_else(|| {
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
            self.inner.cell_cats.as_ref()
        } else {
            Some(&self.inner.trace_cats)
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
        let cats = i.cell_cats.as_ref().ok_or_else(|| {
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
        let ch = find_code(&i.chrom_cats, &CatValue::Str(name.to_string())).ok_or_else(|| {
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
        arrow_select::take::take_record_batch(&batch, &UInt64Array::from(perm)).map_err(pq_arrow)
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
        let req = i.requests(&plan);
        // (file set, columns, on the key side?)
        let mut sets: Vec<(&FileSet, &[String], bool)> = vec![(&i.key_set, &req.key, true)];
        if let Some(ps) = &i.primary_set {
            sets.push((ps, &req.primary, false));
        }
        if let Some(ts) = &i.tracks_set {
            sets.push((ts, &req.tracks, false));
        }
        for (k, ls) in i.layer_sets.iter().enumerate() {
            sets.push((ls, &req.layers[k], false));
        }
        for (set, names, key_side) in sets {
            let ranges = if key_side { &sel.key } else { &sel.extra };
            if names.is_empty() {
                continue;
            }
            let start = out.len();
            for (p, g) in set.touched(ranges) {
                let path = &set.files[p].rel;
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

    /// Batches of `batch` runs (a trace in one cell [and chromosome]) in stored order.
    pub fn iter_traces(&self, batch: u64, columns: &Columns) -> Result<SpotBatches> {
        let n = self.inner.index.trace_codes.len();
        self.batches(batch, n, columns, Unit::Runs)
    }

    /// Batches of `batch` cell segments in stored order. NotFound without cell_id.
    pub fn iter_cells(&self, batch: u64, columns: &Columns) -> Result<SpotBatches> {
        if self.inner.cell_cats.is_none() {
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
    is::<SpotBatches>();
}
