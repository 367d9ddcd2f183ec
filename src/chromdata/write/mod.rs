//! The streaming ChromData writer (spec §16): spots arrive in any order, in batches of any
//! size; each batch is normalised (loci → provisional bin ids, ids → provisional codes,
//! columns → spill types) and buffered; when the buffer reaches its share of the memory
//! budget it is sorted into the stored order of the layout (canonical order, or
//! chromosome-major for the partitioned layout) and spilled as one *run* (an Arrow IPC
//! file in the temporary directory). `finish` fixes the bins and the categories, merges
//! the runs (k-way merge, in several passes when there are more runs than the budget
//! lets the merge hold at once) and writes the chosen layout (`finish`), then moves the
//! store into place atomically.
//!
//! Memory: everything the writer holds grows either with the buffer (bounded by the
//! budget) or with the index structures (distinct traces, cells, loci, (cell, trace,
//! chromosome) triples, detection slots); the latter are measured after every append and
//! the buffer shrinks by what they take, so the total stays within the budget as long as
//! the index structures alone fit in it (about 100 bytes per triple).
//!
//! Everything is built in a hidden temporary sibling `.<name>.tmp-<pid>-<random>` of the
//! target (the reader refuses to open such names), renamed into place by `finish`; a
//! writer dropped before `finish` removes it. A store written to an object-store URL is
//! built in a local spill directory instead and uploaded by `finish` (see `target`).

mod annotations;
mod bins;
mod categories;
mod collected;
mod columns;
mod components;
mod content;
mod derived;
mod finish;
mod ids;
mod index_arrays;
mod merge;
mod metadata;
mod options;
mod parquet_file;
mod parquet_sink;
mod queued_file;
mod row_groups;
mod runs;
mod sinks;
mod target;

pub(crate) use components::NdArray;
pub use options::{default_memory_budget, WriterOptions, WriterParam, MIN_MEMORY_BUDGET};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use crate::chromdata::values;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::Root;
use bins::{given_bins, Bins, ColFn};
use categories::CategoryList;
use collected::{Collected, PassTable};
use columns::{ColState, Group, Kind};
use components::Components;
use ids::{map_bytes, IdMap};
use runs::{run_path, spill_batch_rows, RunOrder, RunRanks, RunSource, RunWriter, SPILL_DIR};
use target::Target;

/// Share of the budget (after the index structures) the unsorted buffer may fill; sorting
/// it adds 32 bytes per row of keys and one spill batch.
const BUFFER_SHARE: f64 = 0.4;
/// A last buffer this small (share of the available budget) is merged from memory.
const IN_MEMORY_SHARE: f64 = 0.125;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Finished,
    Failed,
}

/// Streaming writer of a ChromData store; see the module documentation.
pub struct ChromDataWriter {
    target: Target,
    tmp: PathBuf,
    opts: WriterOptions,
    budget: u64,
    state: State,
    bins: Bins,
    traces: IdMap,
    cells: IdMap,
    /// None until the first batch decides.
    has_cells: Option<bool>,
    has_coords: Option<bool>,
    /// Value columns, in logical order (first batch's order).
    cols: Vec<ColState>,
    layer_keys: Vec<String>,
    /// Spots per (prov cell or u32::MAX, prov trace, chrom id) — the run structure.
    triples: HashMap<(u32, u32, u32), u64>,
    rows: u64,
    buffer: Vec<RecordBatch>,
    buffer_bytes: u64,
    buffer_rows: u64,
    runs: Vec<RunSource>,
    /// Batches appended so far, and the first batch and spot the buffer holds (a spill's
    /// error names its batches).
    batches: u64,
    buffer_first: (u64, u64),
    n_spilled: usize,
    /// Largest bytes per row seen in a buffer.
    row_bytes: u64,
    /// Intermediate merge passes `finish` needed.
    merge_passes: usize,
    bin_tracks: Option<RecordBatch>,
    pass_tables: Vec<PassTable>,
    /// Category lists given with `set_categories`, applied at the first append.
    given_lists: Vec<(String, Arc<CategoryList>)>,
    /// traces / cells tables given with `set_table` (checked, not yet in category order).
    traces_table: Option<RecordBatch>,
    cells_table: Option<RecordBatch>,
    components: Components,
    /// Whether the input rows are given with each batch (`append_with_rows`; all or none).
    explicit_rows: Option<bool>,
    /// String columns that stay strings (`keep_strings`).
    plain_strings: Vec<String>,
}

impl std::fmt::Debug for ChromDataWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromDataWriter")
            .field("target", &self.target.display())
            .field("rows", &self.rows)
            .finish()
    }
}

/// Whether `path` names a writer's temporary sibling (the reader refuses to open those).
pub fn is_temp_name(path: &Path) -> bool {
    crate::storage::fs::is_temp_name(path)
}

impl ChromDataWriter {
    /// Starts a store at `path`: a `*.chromdata.zarr` directory, or a `.cdz` zip when the
    /// path ends in `.cdz`. Its parent must exist. The target is checked again at `finish`.
    ///
    /// Errors: `InvalidArgument` (path), `Exists` (the target exists and is not a store, or
    /// is a store and `overwrite` is off), `NotFound` (parent), `Io`.
    pub fn create(path: impl AsRef<Path>, options: WriterOptions) -> Result<ChromDataWriter> {
        let w = Self::create_deferred(path, options)?;
        w.check_target()?;
        Ok(w)
    }

    /// Like `create` without checking the target now (the C API sets `overwrite` after
    /// creating the handle); `finish` checks it.
    pub fn create_deferred(
        path: impl AsRef<Path>,
        options: WriterOptions,
    ) -> Result<ChromDataWriter> {
        Self::create_in(Target::Local(path.as_ref().to_path_buf()), options)
    }

    /// Like `create`, at a local path or an object-store URL (`root`; see
    /// [`ChromDataWriter::create_deferred_at`]). The target is checked now and again at
    /// `finish`.
    pub fn create_at(root: Root, options: WriterOptions) -> Result<ChromDataWriter> {
        let w = Self::create_deferred_at(root, options)?;
        w.check_target()?;
        Ok(w)
    }

    /// Like `create_deferred`, at a local path or an object-store URL (`root`): to a URL the
    /// store is built in a local spill directory (`$DELTACELLS_SPILL_DIR`, else the system's
    /// temporary directory) and uploaded by `finish` — a `.cdz` as one multipart upload, a
    /// directory store with its root `zarr.json` last.
    ///
    /// Errors: those of `create_deferred`; `Unsupported` (an http(s):// URL, read only).
    pub fn create_deferred_at(root: Root, options: WriterOptions) -> Result<ChromDataWriter> {
        Self::create_in(Target::of(root)?, options)
    }

    fn create_in(target: Target, options: WriterOptions) -> Result<ChromDataWriter> {
        let tmp = target.create_build_dir()?;
        let spill = tmp.join(SPILL_DIR);
        if let Err(e) = std::fs::create_dir(&spill) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::io(&spill, &e));
        }
        let mut w = ChromDataWriter {
            target: target.clone(),
            tmp: tmp.clone(),
            opts: WriterOptions::default(),
            budget: 0,
            state: State::Open,
            bins: Bins::default(),
            traces: IdMap::default(),
            cells: IdMap::default(),
            has_cells: None,
            has_coords: None,
            cols: Vec::new(),
            layer_keys: Vec::new(),
            triples: HashMap::new(),
            rows: 0,
            buffer: Vec::new(),
            buffer_bytes: 0,
            buffer_rows: 0,
            runs: Vec::new(),
            batches: 0,
            buffer_first: (0, 0),
            n_spilled: 0,
            row_bytes: 1,
            merge_passes: 0,
            bin_tracks: None,
            pass_tables: Vec::new(),
            given_lists: Vec::new(),
            traces_table: None,
            cells_table: None,
            components: Components::new(&tmp, target.local(), target.url()),
            explicit_rows: None,
            plain_strings: Vec::new(),
        };
        w.set_options(options)?;
        Ok(w)
    }

    /// Replaces the options (before the first append for layout-independent ones too;
    /// the memory budget applies from the next append).
    pub fn set_options(&mut self, options: WriterOptions) -> Result<()> {
        self.check_open("set options")?;
        options.validate()?;
        self.budget = if options.memory_budget == 0 {
            default_memory_budget()
        } else {
            options.memory_budget
        };
        self.opts = options;
        Ok(())
    }

    /// Sets one option to `value` after checking it against [`WriterParam::bounds`] (the
    /// C API's `dc_chromdata_writer_set`). Errors: `InvalidArgument` (out of range),
    /// `State` (after finish).
    pub fn set_param(&mut self, param: WriterParam, value: i64) -> Result<()> {
        let mut o = self.opts.clone();
        o.set(param, value)?;
        self.set_options(o)
    }

    pub fn options(&self) -> &WriterOptions {
        &self.opts
    }

    /// The temporary directory the store is built in until `finish`.
    pub fn temp_dir(&self) -> &Path {
        &self.tmp
    }

    /// Spots appended so far.
    pub fn rows_appended(&self) -> u64 {
        self.rows
    }

    /// Sorted runs spilled to disk so far (a run still in memory is not counted).
    pub fn runs_spilled(&self) -> usize {
        self.n_spilled
    }

    /// Intermediate merge passes the last `finish` made (0 when the merge could hold a
    /// batch of every run at once).
    pub fn merge_passes(&self) -> usize {
        self.merge_passes
    }

    fn check_open(&self, what: &str) -> Result<()> {
        match self.state {
            State::Open => Ok(()),
            State::Finished => Err(Error::new(
                ErrorKind::State,
                format!("cannot {what}: the writer is finished"),
            )),
            State::Failed => Err(Error::new(
                ErrorKind::State,
                format!("cannot {what}: an earlier call failed and left the writer unusable"),
            )),
        }
    }

    fn check_target(&self) -> Result<()> {
        self.target.check(self.opts.overwrite)
    }

    /// Sets the bins table: columns `chrom` (strings or a dictionary of strings; a plain
    /// string column gets sorted categories, a dictionary keeps its order), `start`, `end`
    /// (integers), then optional extra columns (bool, integers, floats, strings). Spots
    /// then give `bin_id` (row of this table) or chrom / start / end matching a bin.
    /// Before the first append.
    pub fn set_bins(&mut self, bins: RecordBatch) -> Result<()> {
        self.check_open("set bins")?;
        if self.rows > 0 || self.has_cells.is_some() {
            return Err(Error::new(
                ErrorKind::State,
                "set_bins must come before the first append",
            ));
        }
        self.bins = Bins::Given(given_bins(bins)?);
        Ok(())
    }

    /// Sets the bin tracks (§5.2): one row per bin of the bins table given with
    /// `set_bins` (row i = bin i), columns bool, integers, floats or strings. Any time
    /// before `finish`; a second call replaces the first.
    pub fn set_bin_tracks(&mut self, tracks: RecordBatch) -> Result<()> {
        self.check_open("set bin tracks")?;
        let Some(n_bins) = self.bins.n_given() else {
            return Err(Error::new(
                ErrorKind::State,
                "bin tracks need the bins table: call set_bins first (bins derived from \
                 the loci are numbered only at finish)",
            ));
        };
        if tracks.num_rows() != n_bins {
            return Err(Error::invalid_argument(format!(
                "bin tracks have {} rows; the bins table has {n_bins}",
                tracks.num_rows()
            )));
        }
        if tracks.num_columns() == 0 {
            return Err(Error::invalid_argument("bin tracks without columns"));
        }
        let mut seen = std::collections::HashSet::new();
        let mut fields = Vec::new();
        let mut cols = Vec::new();
        for (f, a) in tracks.schema().fields().iter().zip(tracks.columns()) {
            if f.name().is_empty() || !seen.insert(f.name().clone()) {
                return Err(Error::invalid_argument(format!(
                    "bin tracks: column name \"{}\" is empty or repeated",
                    f.name()
                )));
            }
            let a = values::normalise_array(a)?;
            match a.data_type() {
                DataType::Boolean | DataType::Float32 | DataType::Float64 | DataType::Utf8 => {}
                t if t.is_integer() => {}
                t => {
                    return Err(Error::unsupported(format!(
                        "bin tracks column \"{}\": type {t} is not supported (bool, integers, \
                         floats, strings)",
                        f.name()
                    )))
                }
            }
            fields.push(Field::new(f.name(), a.data_type().clone(), true));
            cols.push(a);
        }
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
            .map_err(|e| Error::invalid_argument(format!("bin tracks: {e}")))?;
        self.bin_tracks = Some(b);
        Ok(())
    }

    /// Adds a pass-through table (§12): `collection` "intervals" (with `kind`: domain,
    /// pair, peak, segment — whose required columns are checked — or any other kind) or
    /// "points" (`kind` None). Stored as given, under a portable name of `key`; keys are
    /// unique per collection. The table is written to the temporary directory at once
    /// (it does not stay in memory). Any time before `finish`.
    pub fn add_table(
        &mut self,
        collection: &str,
        key: &str,
        kind: Option<&str>,
        table: RecordBatch,
    ) -> Result<()> {
        self.check_open("add a table")?;
        let collection: &'static str = match collection {
            "intervals" => "intervals",
            "points" => "points",
            c => {
                return Err(Error::invalid_argument(format!(
                    "table collection \"{c}\": expected intervals or points"
                )))
            }
        };
        if key.is_empty() {
            return Err(Error::invalid_argument("a table key must not be empty"));
        }
        if self
            .pass_tables
            .iter()
            .any(|t| t.collection == collection && t.key == key)
        {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{collection} \"{key}\" was added already"),
            ));
        }
        let kind = match (collection, kind) {
            ("points", None) => None,
            ("points", Some(_)) => {
                return Err(Error::invalid_argument("points tables have no kind"))
            }
            (_, None) | (_, Some("")) => {
                return Err(Error::invalid_argument(
                    "intervals need a kind (domain, pair, peak, segment or another name)",
                ))
            }
            (_, Some(k)) => {
                let need: &[&str] = match k {
                    "domain" | "peak" => &["chrom", "start", "end"],
                    "pair" => &["chrom1", "start1", "end1", "chrom2", "start2", "end2"],
                    "segment" => &["chrom", "start", "end", "label"],
                    _ => &[],
                };
                let schema = table.schema();
                if let Some(m) = need.iter().find(|c| schema.index_of(c).is_err()) {
                    return Err(Error::invalid_argument(format!(
                        "intervals \"{key}\" of kind {k} lack the column \"{m}\" (needs {})",
                        need.join(", ")
                    )));
                }
                Some(k.to_string())
            }
        };
        let staged = self
            .tmp
            .join(SPILL_DIR)
            .join(format!("table-{:04}.parquet", self.pass_tables.len()));
        parquet_file::write_parquet(&staged, &table)?;
        self.pass_tables.push(PassTable {
            collection,
            key: key.to_string(),
            kind,
            staged,
            n_rows: table.num_rows() as u64,
            source_result: None,
        });
        Ok(())
    }

    /// Appends spots (any order, any number of rows). Columns: `chrom`, `start`, `end`
    /// (or `bin_id` when bins were set), `trace_id` (strings or integers, no nulls),
    /// optional `cell_id` (same), optional `x`, `y`, `z` (floats; null is stored as NaN),
    /// then extra spot columns; `spot_tracks/<name>` columns are spot tracks (numeric or
    /// bool) and `layers/<key>/x|y|z` columns are coordinate layers. Every batch has the
    /// same column names; types are unified over batches (§16).
    pub fn append(&mut self, batch: RecordBatch) -> Result<()> {
        self.append_rows(batch, None)
    }

    /// `append` with the input row of every spot given (for `rewrite`, which reads a store
    /// in stored order and hands each spot its original row, so that the original order
    /// stays recoverable): rows are distinct and, once all are appended, exactly
    /// 0..n_spots. Either every batch gives its rows or none does.
    #[doc(hidden)]
    pub fn append_with_rows(&mut self, batch: RecordBatch, rows: Vec<u64>) -> Result<()> {
        if rows.len() != batch.num_rows() {
            return Err(Error::invalid_argument(format!(
                "{} input rows for a batch of {} spots",
                rows.len(),
                batch.num_rows()
            )));
        }
        self.append_rows(batch, Some(rows))
    }

    fn append_rows(&mut self, batch: RecordBatch, rows: Option<Vec<u64>>) -> Result<()> {
        self.check_open("append")?;
        if self.explicit_rows.is_some_and(|e| e != rows.is_some()) {
            return Err(Error::invalid_argument(
                "input rows are given with every batch or with none",
            ));
        }
        let explicit = rows.is_some();
        let r = self.append_inner(&batch, rows);
        if r.is_ok() {
            self.explicit_rows = Some(explicit);
        }
        if let Err(e) = &r {
            // Errors found before anything was recorded leave the writer usable; those
            // after (ids were assigned) poison it: keep it simple and poison on I/O only.
            if matches!(e.kind, ErrorKind::Io | ErrorKind::Internal) {
                self.state = State::Failed;
            }
        }
        r
    }

    fn append_inner(&mut self, batch: &RecordBatch, input_rows: Option<Vec<u64>>) -> Result<()> {
        let n = batch.num_rows();
        let schema = batch.schema();
        let col = |name: &str| schema.index_of(name).ok().map(|i| batch.column(i).clone());
        // Validate the batch first, without changing any state.
        let keys = self.batch_keys(&col)?;
        let first = self.has_cells.is_none();
        if first {
            self.apply_given_lists(batch, keys.has_cells)?;
        }
        self.traces.check("trace_id", &keys.trace)?;
        if let Some(c) = col("cell_id") {
            self.cells.check("cell_id", &c)?;
        }
        let value_fields: Vec<(usize, String)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| !KEY_COLUMNS.contains(&f.name().as_str()))
            .map(|(i, f)| (i, f.name().clone()))
            .collect();
        let lists = self.value_lists(batch, &value_fields, first)?;
        let spilled = self.value_columns(batch, &value_fields, first)?;
        let bins = self.bins.ids(&col, n)?;
        // Ids (state changes from here on).
        let trace_ids = self.traces.ids("trace_id", &keys.trace)?;
        let cell_ids = match col("cell_id") {
            Some(c) => Some(self.cells.ids("cell_id", &c)?),
            None => None,
        };
        if first {
            self.register_columns(&value_fields, &spilled, lists)?;
            self.has_cells = Some(keys.has_cells);
            self.has_coords = Some(keys.xyz.is_some());
        }
        // The run structure: spots per (cell, trace, chromosome).
        for r in 0..n {
            let c = cell_ids.as_ref().map_or(u32::MAX, |v| v[r]);
            *self
                .triples
                .entry((c, trace_ids[r], self.bins.chrom_id(bins[r])))
                .or_insert(0) += 1;
        }
        let rows = SpillRows {
            n,
            input_rows,
            bins,
            trace_ids,
            cell_ids,
            xyz: keys.xyz,
            values: spilled,
        };
        let b = self.spill_batch(rows)?;
        if self.buffer.is_empty() {
            self.buffer_first = (self.batches, self.rows);
        }
        self.rows += n as u64;
        self.batches += 1;
        self.buffer_bytes += b.get_array_memory_size() as u64;
        self.buffer_rows += n as u64;
        self.buffer.push(b);
        // Sorting adds 32 bytes of keys per row.
        if self.buffer_bytes + 32 * self.buffer_rows >= self.buffer_limit() {
            self.spill_buffer(true)?;
        }
        Ok(())
    }

    /// Checks the key columns of a batch against the spec and the earlier batches.
    fn batch_keys(&self, col: &ColFn<'_>) -> Result<BatchKeys> {
        let has_cells = col("cell_id").is_some();
        let xyz = [col("x"), col("y"), col("z")];
        let n_xyz = xyz.iter().filter(|c| c.is_some()).count();
        if n_xyz != 0 && n_xyz != 3 {
            return Err(Error::invalid_argument(
                "coordinates need all three columns x, y, z (or none)",
            ));
        }
        let has_coords = n_xyz == 3;
        if self.has_cells.is_some_and(|h| h != has_cells) {
            return Err(Error::invalid_argument(
                "cell_id must be present in every batch or in none",
            ));
        }
        if self.has_coords.is_some_and(|h| h != has_coords) {
            return Err(Error::invalid_argument(
                "x, y, z must be present in every batch or in none",
            ));
        }
        for (a, name) in xyz.iter().zip(["x", "y", "z"]) {
            if let Some(a) = a {
                if !matches!(a.data_type(), DataType::Float32 | DataType::Float64) {
                    return Err(Error::invalid_argument(format!(
                        "coordinate {name} must be float32 or float64, got {}",
                        a.data_type()
                    )));
                }
            }
        }
        let trace = col("trace_id").ok_or_else(|| {
            Error::invalid_argument("the batch has no trace_id column (required)")
        })?;
        let [x, y, z] = xyz;
        let xyz = match (x, y, z) {
            (Some(x), Some(y), Some(z)) => Some([x, y, z]),
            _ => None,
        };
        Ok(BatchKeys {
            has_cells,
            xyz,
            trace,
        })
    }

    /// Kinds and spill arrays of the value columns of a batch, with the index of each in
    /// the writer's column list (no state change).
    fn value_columns(
        &self,
        batch: &RecordBatch,
        value_fields: &[(usize, String)],
        first: bool,
    ) -> Result<Vec<(usize, ArrayRef, Kind)>> {
        if first {
            let names: Vec<&str> = value_fields.iter().map(|(_, s)| s.as_str()).collect();
            columns::check_value_names(&names)?;
        } else {
            let mut got: Vec<&str> = value_fields.iter().map(|(_, s)| s.as_str()).collect();
            let mut want: Vec<&str> = self.cols.iter().map(|c| c.name.as_str()).collect();
            got.sort_unstable();
            want.sort_unstable();
            if got != want {
                return Err(Error::invalid_argument(format!(
                    "the batch's value columns {got:?} differ from the first batch's {want:?}"
                )));
            }
        }
        let mut spilled: Vec<(usize, ArrayRef, Kind)> = Vec::with_capacity(value_fields.len());
        for (i, name) in value_fields {
            let a = batch.column(*i);
            let kind = columns::kind_of(name, a.data_type())?;
            let arr = columns::to_spill(name, a)?;
            let ci = if first {
                spilled.len()
            } else {
                self.cols.iter().position(|c| &c.name == name).unwrap_or(0)
            };
            let group = if first {
                columns::group_of(name, &mut Vec::new())
            } else {
                self.cols[ci].group.clone()
            };
            match &group {
                Group::Track(_) if matches!(kind, Kind::Str | Kind::DictStr | Kind::DictInt) => {
                    return Err(Error::invalid_argument(format!(
                        "spot track \"{name}\" must be numeric or bool, got {}",
                        a.data_type()
                    )))
                }
                Group::Layer(..) if !matches!(kind, Kind::F32 | Kind::F64) => {
                    return Err(Error::invalid_argument(format!(
                        "layer column \"{name}\" must be float32 or float64, got {}",
                        a.data_type()
                    )))
                }
                _ => {}
            }
            if !first {
                columns::unify(name, &self.cols[ci].kind, &kind)?;
            }
            spilled.push((ci, arr, kind));
        }
        Ok(spilled)
    }

    /// The value columns of the first batch, in its order, with their fixed category
    /// lists; every layer has x, y and z.
    fn register_columns(
        &mut self,
        value_fields: &[(usize, String)],
        spilled: &[(usize, ArrayRef, Kind)],
        lists: Vec<Option<Arc<CategoryList>>>,
    ) -> Result<()> {
        let mut layer_keys = Vec::new();
        for (((_, name), (_, _, kind)), list) in value_fields.iter().zip(spilled).zip(lists) {
            let group = columns::group_of(name, &mut layer_keys);
            let mut c = ColState::new(name, group, kind.clone());
            c.list = list;
            c.plain = self.plain_strings.contains(name);
            self.cols.push(c);
        }
        self.layer_keys = layer_keys;
        for (k, key) in self.layer_keys.iter().enumerate() {
            for axis in 0..3 {
                if !self.cols.iter().any(|c| c.group == Group::Layer(k, axis)) {
                    return Err(Error::invalid_argument(format!(
                        "layer \"{key}\" lacks its {} column",
                        ["x", "y", "z"][axis]
                    )));
                }
            }
        }
        Ok(())
    }

    /// The buffered (spill) form of a batch: provisional cell, trace and bin ids, input row,
    /// [x, y, z], then the value columns in the writer's order, their kinds unified and
    /// observed (distinct values, derived-column detection).
    fn spill_batch(&mut self, rows: SpillRows) -> Result<RecordBatch> {
        let n = rows.n;
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut push = |name: &str, a: ArrayRef| {
            fields.push(Field::new(name, a.data_type().clone(), true));
            columns.push(a);
        };
        push(
            "__cell",
            Arc::new(UInt32Array::from(
                rows.cell_ids.clone().unwrap_or_else(|| vec![0; n]),
            )),
        );
        push(
            "__trace",
            Arc::new(UInt32Array::from(rows.trace_ids.clone())),
        );
        push("__bin", Arc::new(UInt32Array::from(rows.bins.clone())));
        let start = self.rows;
        let input_rows: ArrayRef = match rows.input_rows {
            Some(r) => Arc::new(UInt64Array::from(r)),
            None => Arc::new(UInt64Array::from_iter_values(start..start + n as u64)),
        };
        push("__row", input_rows);
        if let Some(xyz) = &rows.xyz {
            for (a, name) in xyz.iter().zip(["x", "y", "z"]) {
                let f32_in = a.data_type() == &DataType::Float32;
                push(name, columns::coord_array(a, f32_in));
            }
        }
        // Value columns in registry order, kinds unified and observed.
        let mut by_col: Vec<Option<(ArrayRef, Kind)>> = vec![None; self.cols.len()];
        for (ci, arr, kind) in rows.values {
            by_col[ci] = Some((arr, kind));
        }
        for (ci, slot) in by_col.into_iter().enumerate() {
            let (arr, kind) = slot.ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    "a value column of the batch is missing",
                )
            })?;
            let c = &mut self.cols[ci];
            c.kind = columns::unify(&c.name, &c.kind, &kind)?;
            c.observe(arr.as_ref(), &kind);
            if c.group == Group::Extra {
                c.detect[0].feed(arr.as_ref(), &rows.bins);
                if let Some(cids) = &rows.cell_ids {
                    c.detect[1].feed(arr.as_ref(), cids);
                } else {
                    c.detect[1].slots = None;
                }
                c.detect[2].feed(arr.as_ref(), &rows.trace_ids);
            }
            push(&format!("v{ci}"), arr);
        }
        // Columns that share larger buffers (slices of the caller's batch, e.g. an IPC
        // block) are copied: holding them would keep all of it alive, outside the count.
        let columns = columns.into_iter().map(columns::compact).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
    }

    /// Heap bytes of everything that grows with the distinct traces, cells, loci and
    /// (cell, trace, chrom) triples (estimate; the triples count twice because `finish`
    /// turns them into the run plan).
    pub fn index_bytes(&self) -> u64 {
        let cols: u64 = self.cols.iter().map(|c| c.heap_bytes()).sum();
        self.bins.heap_bytes()
            + self.traces.heap_bytes()
            + self.cells.heap_bytes()
            + 2 * map_bytes(&self.triples)
            + cols
    }

    /// Bytes available to buffers, merge and Parquet writers: the budget less the index
    /// structures (never below an eighth of the budget; past that the budget cannot be
    /// kept, see the module documentation).
    fn available(&self) -> u64 {
        self.budget
            .saturating_sub(self.index_bytes())
            .max(self.budget / 8)
    }

    fn buffer_limit(&self) -> u64 {
        (self.available() as f64 * BUFFER_SHARE) as u64
    }

    /// The value ranks that order run rows (they agree with the final categories and bins).
    fn run_ranks(&self) -> RunRanks {
        let (bin, chrom_of_bin) = self.bins.ranks();
        RunRanks {
            has_cells: self.has_cells == Some(true),
            cell: self.cells.ranks(),
            trace: self.traces.ranks(),
            bin,
            chrom_of_bin,
        }
    }

    /// Where the next run goes: a new spill file when `to_disk`, else memory.
    fn run_writer(&mut self, to_disk: bool) -> RunWriter {
        let path = to_disk.then(|| {
            let p = run_path(&self.tmp, self.n_spilled);
            self.n_spilled += 1;
            p
        });
        RunWriter {
            rows_per_batch: spill_batch_rows(self.row_bytes, self.available()),
            threads: self.opts.threads,
            path,
            write_buffer: runs::spill_write_buffer(self.available()),
        }
    }

    /// Sorts the buffered batches and spills them as one run (to a file when `to_disk`,
    /// else kept in memory for the merge). Its error fails the writer whatever its kind
    /// (the buffered spots are gone) and names the batches they came from.
    fn spill_buffer(&mut self, to_disk: bool) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let (b0, r0) = self.buffer_first;
        let what = format!(
            "spilling the run of appended batches {}-{} (spots {}-{})",
            b0 + 1,
            self.batches,
            r0 + 1,
            self.rows
        );
        let batches = std::mem::take(&mut self.buffer);
        if let Some(per_row) = self.buffer_bytes.checked_div(self.buffer_rows) {
            self.row_bytes = self.row_bytes.max(per_row);
        }
        self.buffer_bytes = 0;
        self.buffer_rows = 0;
        let order = RunOrder::of(self.opts.layout);
        let ranks = self.run_ranks();
        let out = self.run_writer(to_disk);
        match runs::sort_into_run(batches, order, &ranks, out) {
            Ok(run) => {
                self.runs.push(run);
                // No trim here: the next buffer is allocated by this thread again and reuses
                // the freed pages, and trimming them made every spill fault them back in
                // (~2 s of system time at 10 M x 60, the same peak RSS). The trim before the
                // merge stays (the merge allocates in other threads' arenas).
                Ok(())
            }
            Err(e) => {
                self.state = State::Failed;
                Err(e.context(what))
            }
        }
    }

    /// Writes the store and moves it into place. After success the writer is finished; after
    /// another error nothing is left at the target (an existing store there is kept).
    ///
    /// A target that exists (`Exists`) is refused before anything is merged, and the writer
    /// stays usable: set `overwrite` or move the old store away, then call `finish` again.
    pub fn finish(&mut self) -> Result<()> {
        self.check_open("finish")?;
        self.check_target()?;
        let r = self.finish_inner();
        self.state = if r.is_ok() {
            State::Finished
        } else {
            State::Failed
        };
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
        r
    }

    fn finish_inner(&mut self) -> Result<()> {
        // A small last buffer stays in memory when nothing was spilled: no disk round trip.
        let to_disk = !self.runs.is_empty()
            || (self.buffer_bytes as f64) > self.available() as f64 * IN_MEMORY_SHARE;
        self.spill_buffer(to_disk)?;
        // Runs spilled before the layout changed are re-sorted into its order, one at a
        // time (no more memory than spilling them took).
        let order = RunOrder::of(self.opts.layout);
        for run in std::mem::take(&mut self.runs) {
            let run = if run.order == order {
                run
            } else {
                let on_disk = matches!(run.data, runs::RunData::File(_));
                let ranks = self.run_ranks();
                let out = self.run_writer(on_disk);
                runs::resort_run(run, order, &ranks, out)?
            };
            self.runs.push(run);
        }
        // The buffer's pages, freed by this thread, would stay resident in its allocator
        // arena while the merge allocates in the encoder's and workers' (see the function).
        crate::memory::release_free_memory();
        let collected = self.collect()?;
        self.merge_passes = finish::write_store(collected)?;
        Ok(())
    }

    /// Fixes bins and categories and hands everything to `finish`.
    fn collect(&mut self) -> Result<Collected> {
        let has_cells = self.has_cells == Some(true);
        let bins = self.bins.finalize()?;
        let cell_final = self.cells.ranks();
        let trace_final = self.traces.ranks();
        let mut triples: Vec<(i32, i32, i32, u64)> = self
            .triples
            .iter()
            .map(|(&(c, t, ch), &n)| {
                (
                    if has_cells {
                        cell_final[c as usize] as i32
                    } else {
                        -1
                    },
                    trace_final[t as usize] as i32,
                    bins.chrom_code_of_id[ch as usize],
                    n,
                )
            })
            .collect();
        triples.sort_unstable();
        let trace_cats = if self.traces.len() == 0 {
            Arc::new(StringArray::from(Vec::<&str>::new())) as ArrayRef
        } else {
            self.traces.sorted_values()
        };
        let cell_cats = has_cells.then(|| self.cells.sorted_values());
        let order = |name: &str, t: Option<RecordBatch>, cats: Option<&ArrayRef>| match (t, cats) {
            (Some(t), Some(c)) => annotations::in_category_order(name, &t, c).map(Some),
            (Some(_), None) => Err(Error::invalid_argument(format!(
                "{name}: a cells table was given but the spots have no cell_id"
            ))),
            (None, _) => Ok(None),
        };
        let traces_table = order("traces", self.traces_table.take(), Some(&trace_cats))?;
        let cells_table = order("cells", self.cells_table.take(), cell_cats.as_ref())?;
        let mut final_types = Vec::with_capacity(self.cols.len());
        for c in &self.cols {
            final_types.push(c.final_type()?);
        }
        // The column states leave before `available` is measured (what finish holds).
        let cols = std::mem::take(&mut self.cols);
        Ok(Collected {
            tmp: self.tmp.clone(),
            target: self.target.clone(),
            layout: self.opts.layout,
            coord_f32: self.opts.coord_float32,
            row_group_size: self.opts.row_group_size,
            coords_row_group_size: self.opts.coords_row_group_size,
            threads: self.opts.threads,
            n_spots: self.rows,
            has_cells,
            has_coords: self.has_coords == Some(true),
            bins: bins.table,
            chrom_names: bins.chrom_names,
            chrom_of_bin: bins.chrom_of_bin,
            bin_final: bins.bin_final,
            cell_final,
            trace_final,
            trace_cats,
            cell_cats,
            cols,
            final_types,
            layer_keys: self.layer_keys.clone(),
            triples,
            runs: std::mem::take(&mut self.runs),
            overwrite: self.opts.overwrite,
            available: self.available(),
            row_bytes: self.row_bytes,
            bin_tracks: self.bin_tracks.take(),
            pass_tables: std::mem::take(&mut self.pass_tables),
            traces_table,
            cells_table,
            components: std::mem::replace(
                &mut self.components,
                Components::new(&self.tmp, self.target.local(), self.target.url()),
            ),
        })
    }
}

/// Names that are not value columns in an appended batch.
const KEY_COLUMNS: [&str; 9] = [
    "chrom", "start", "end", "bin_id", "trace_id", "cell_id", "x", "y", "z",
];

/// The key columns of a batch, checked.
struct BatchKeys {
    has_cells: bool,
    xyz: Option<[ArrayRef; 3]>,
    trace: ArrayRef,
}

/// A batch's rows in their provisional ids, ready to buffer.
struct SpillRows {
    n: usize,
    /// Input rows given with the batch (`append_with_rows`), else the running count.
    input_rows: Option<Vec<u64>>,
    bins: Vec<u32>,
    trace_ids: Vec<u32>,
    cell_ids: Option<Vec<u32>>,
    xyz: Option<[ArrayRef; 3]>,
    /// (column index, spill array, kind) of each value column.
    values: Vec<(usize, ArrayRef, Kind)>,
}

impl Drop for ChromDataWriter {
    fn drop(&mut self) {
        if self.state != State::Finished || self.target.local().is_none() {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chromdata::Layout;
    use arrow_array::{Float32Array, Float64Array, Int64Array};

    /// `n` spots in a scrambled order: 3 chromosomes, 40 traces of 8 cells, a track.
    fn spots(n: usize) -> RecordBatch {
        let r: Vec<u64> = (0..n as u64).map(|i| (i * 7919 + 13) % n as u64).collect();
        let col = |f: &dyn Fn(u64) -> f64| -> ArrayRef {
            Arc::new(Float64Array::from_iter_values(r.iter().map(|&i| f(i))))
        };
        let cols: Vec<(&str, ArrayRef)> = vec![
            (
                "chrom",
                Arc::new(StringArray::from_iter_values(
                    r.iter().map(|i| format!("chr{}", i % 3 + 1)),
                )),
            ),
            (
                "start",
                Arc::new(Int64Array::from_iter_values(
                    r.iter().map(|i| (i / 3 % 25) as i64 * 1000),
                )),
            ),
            (
                "end",
                Arc::new(Int64Array::from_iter_values(
                    r.iter().map(|i| (i / 3 % 25) as i64 * 1000 + 1000),
                )),
            ),
            (
                "trace_id",
                Arc::new(StringArray::from_iter_values(
                    r.iter().map(|i| format!("t{}", i % 40)),
                )),
            ),
            (
                "cell_id",
                Arc::new(Int64Array::from_iter_values(
                    r.iter().map(|i| (i % 40 / 5) as i64),
                )),
            ),
            ("x", col(&|i| i as f64 * 0.5)),
            ("y", col(&|i| (i % 97) as f64)),
            ("z", col(&|i| (i % 13) as f64 - 6.0)),
            (
                "spot_tracks/a",
                Arc::new(Float32Array::from_iter_values(
                    r.iter().map(|&i| (i % 17) as f32),
                )),
            ),
        ];
        RecordBatch::try_from_iter(cols).unwrap()
    }

    /// Writes `b` in batches of 250 spots under a 1 MiB budget (several spilled runs);
    /// `reverse` hands the runs to the merge in the opposite order (as a writer spilling
    /// several runs at once could record them in any order).
    fn write(path: &Path, b: &RecordBatch, threads: usize, reverse: bool) -> usize {
        let o = WriterOptions {
            layout: Layout::PrimaryCoords,
            threads,
            memory_budget: 1 << 20,
            row_group_size: 500,
            coords_row_group_size: 100,
            ..WriterOptions::default()
        };
        let mut w = ChromDataWriter::create(path, o).unwrap();
        for lo in (0..b.num_rows()).step_by(250) {
            w.append(b.slice(lo, 250.min(b.num_rows() - lo))).unwrap();
        }
        if reverse {
            w.runs.reverse();
        }
        let runs = w.runs.len();
        w.finish().unwrap();
        runs
    }

    fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let bytes = std::fs::read(&p).unwrap();
                    out.push((p.strip_prefix(root).unwrap().to_path_buf(), bytes));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn runs_recorded_in_any_order_give_the_same_bytes() {
        let d = std::env::temp_dir().join(format!("dc-run-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let b = spots(30000);
        // In order, with 2 threads and with 1.
        let a = d.join("a.chromdata.zarr");
        let runs = write(&a, &b, 2, false);
        assert!(runs >= 3, "{runs} runs");
        let c = d.join("c.chromdata.zarr");
        write(&c, &b, 1, false);
        assert!(files(&a) == files(&c), "2 threads vs 1");
        let r = d.join("r.chromdata.zarr");
        write(&r, &b, 2, true);
        assert!(files(&a) == files(&r), "runs in reverse order");
        let _ = std::fs::remove_dir_all(&d);
    }
}
