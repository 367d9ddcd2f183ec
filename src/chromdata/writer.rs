//! The streaming ChromData writer (spec §16): spots arrive in any order, in batches of any
//! size; each batch is normalised (loci → provisional bin ids, ids → provisional codes,
//! columns → spill types) and buffered; when the buffer reaches its share of the memory
//! budget it is sorted into the stored order of the layout (canonical order, or
//! chromosome-major for the partitioned layout) and spilled as one *run* (an Arrow IPC
//! file in the temporary directory). `finish` fixes the bins and the categories, merges
//! the runs (k-way merge, in several passes when there are more runs than the budget
//! lets the merge hold at once) and writes the chosen layout (`wstore`), then moves the
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
//! writer dropped before `finish` removes it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::values;
use super::wcol::{self, ColState, FinalType, Group, Kind};
use super::wstore;
use super::Layout;
use crate::error::{Error, ErrorKind, Result};

/// Bytes per record batch in spill files (the merge holds about one such batch per run).
const SPILL_BATCH_BYTES: u64 = 256 << 10;
/// Share of the budget (after the index structures) the unsorted buffer may fill; sorting
/// it adds 32 bytes per row of keys and one spill batch.
const BUFFER_SHARE: f64 = 0.4;
/// A last buffer this small (share of the available budget) is merged from memory.
const IN_MEMORY_SHARE: f64 = 0.125;

/// Rows per spill batch for rows of `row_bytes` bytes: about `SPILL_BATCH_BYTES`, less
/// under small budgets (`available` bytes), so that the merge can hold a batch per run.
pub(crate) fn spill_batch_rows(row_bytes: u64, available: u64) -> usize {
    let bytes = SPILL_BATCH_BYTES.min(available / 64).max(16 << 10);
    (bytes / row_bytes.max(1)).clamp(64, 4096) as usize
}

/// Bytes of a hash map's table (keys, values, control bytes), not counting heap data the
/// entries own.
fn map_bytes<K, V, S>(m: &HashMap<K, V, S>) -> u64 {
    (m.capacity() * (std::mem::size_of::<(K, V)>() + 1)) as u64
}
/// Smallest accepted memory budget.
const MIN_BUDGET: u64 = 1 << 20;

/// Options of [`ChromDataWriter`].
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Bytes of memory the writer may use in all: buffering, sorting, merging and the
    /// Parquet writers share it, after the index structures (0 = half of the available
    /// RAM, read from /proc/meminfo; 1 GiB when that is unknown). When a default row
    /// group would not fit, the writer lowers the row-group targets (recorded in the
    /// store); explicit `row_group_size` / `coords_row_group_size` are kept.
    pub memory_budget: u64,
    /// Store x, y, z as float32 (default float64).
    pub coord_float32: bool,
    /// Layout to write (default 2.2 primary+coords).
    pub layout: Layout,
    /// Replace an existing store at the target path.
    pub overwrite: bool,
    /// Worker threads (0 = `DELTACELLS_NUM_THREADS` or all cores). Output does not depend on it.
    pub threads: usize,
    /// Target rows per row group `T` (0 = the layout's default: 65,536 flat and 2.2
    /// primary, 16,384 partitioned).
    pub row_group_size: u64,
    /// Target rows per coords row group of 2.2 (0 = 16,384).
    pub coords_row_group_size: u64,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            memory_budget: 0,
            coord_float32: false,
            layout: Layout::PrimaryCoords,
            overwrite: false,
            threads: 0,
            row_group_size: 0,
            coords_row_group_size: 0,
        }
    }
}

/// Half of `MemAvailable` from /proc/meminfo (1 GiB when unknown).
pub fn default_memory_budget() -> u64 {
    let avail = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    avail.map_or(1 << 30, |b| (b / 2).max(MIN_BUDGET))
}

/// Provisional ids of trace / cell / chromosome values, in order of first appearance.
#[derive(Debug, Default)]
pub(crate) struct IdMap {
    pub(crate) ints: Option<bool>,
    str_ids: HashMap<String, u32>,
    int_ids: HashMap<i64, u32>,
    pub(crate) strs: Vec<String>,
    pub(crate) int_vals: Vec<i64>,
    /// Bytes of the distinct strings (each is held twice: list and lookup).
    str_bytes: u64,
}

impl IdMap {
    /// Heap bytes held (estimate).
    fn heap_bytes(&self) -> u64 {
        map_bytes(&self.str_ids)
            + map_bytes(&self.int_ids)
            + (self.strs.capacity() * std::mem::size_of::<String>()) as u64
            + (self.int_vals.capacity() * 8) as u64
            + 2 * self.str_bytes
    }

    fn len(&self) -> usize {
        if self.ints == Some(true) {
            self.int_vals.len()
        } else {
            self.strs.len()
        }
    }

    /// Provisional ids of a non-null string or integer column.
    fn ids(&mut self, name: &str, a: &ArrayRef) -> Result<Vec<u32>> {
        let a = values::normalise_array(a)?;
        if a.null_count() > 0 {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\" has {} null values; it must have none",
                a.null_count()
            )));
        }
        let ints = match a.data_type() {
            DataType::Utf8 => false,
            t if t.is_integer() => true,
            t => {
                return Err(Error::unsupported(format!(
                    "column \"{name}\": type {t} is not supported (strings or integers)"
                )))
            }
        };
        match self.ints {
            None => self.ints = Some(ints),
            Some(i) if i != ints => {
                return Err(Error::invalid_argument(format!(
                    "column \"{name}\": values are {} here but were {} in earlier batches",
                    if ints { "integers" } else { "strings" },
                    if i { "integers" } else { "strings" }
                )))
            }
            _ => {}
        }
        let mut out = Vec::with_capacity(a.len());
        if ints {
            for v in values::int_values(a.as_ref())? {
                let v = v.unwrap_or_default();
                let next = self.int_vals.len() as u32;
                let id = *self.int_ids.entry(v).or_insert_with(|| next);
                if id == next {
                    self.int_vals.push(v);
                }
                out.push(id);
            }
        } else {
            for v in a.as_string::<i32>().iter() {
                let v = v.unwrap_or_default();
                let id = match self.str_ids.get(v) {
                    Some(&id) => id,
                    None => {
                        let id = self.strs.len() as u32;
                        self.str_ids.insert(v.to_string(), id);
                        self.strs.push(v.to_string());
                        self.str_bytes += v.len() as u64;
                        id
                    }
                };
                out.push(id);
            }
        }
        Ok(out)
    }

    /// rank[prov id] = position of its value in sorted order (= final code once all are seen).
    pub(crate) fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        if self.ints == Some(true) {
            order.sort_unstable_by_key(|&i| self.int_vals[i as usize]);
        } else {
            order.sort_unstable_by(|&a, &b| self.strs[a as usize].cmp(&self.strs[b as usize]));
        }
        let mut rank = vec![0u32; order.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        rank
    }

    /// The sorted category values (utf8 or int64).
    pub(crate) fn sorted_values(&self) -> ArrayRef {
        if self.ints == Some(true) {
            let mut v = self.int_vals.clone();
            v.sort_unstable();
            Arc::new(Int64Array::from(v))
        } else {
            let mut v: Vec<&str> = self.strs.iter().map(String::as_str).collect();
            v.sort_unstable();
            Arc::new(StringArray::from(v))
        }
    }
}

/// Bins given with `set_bins`.
#[derive(Debug)]
pub(crate) struct GivenBins {
    /// The bins table as stored (chrom as dictionary, start / end int64, extras).
    pub(crate) table: RecordBatch,
    pub(crate) chrom_names: Vec<String>,
    pub(crate) chrom_of_bin: Vec<i32>,
    /// rank[bin] in (chrom code, bin id) order.
    rank: Vec<u32>,
    lookup: Option<HashMap<(i32, i64, i64), u32>>,
    chrom_lookup: HashMap<String, i32>,
}

/// Bins derived from the loci seen.
#[derive(Debug, Default)]
struct DerivedBins {
    chroms: IdMap,
    loci: HashMap<(u32, i64, i64), u32>,
    list: Vec<(u32, i64, i64)>,
}

/// A pass-through table (§12) staged in the spill directory until `finish`.
#[derive(Debug)]
pub(crate) struct PassTable {
    /// "intervals" or "points".
    pub(crate) collection: &'static str,
    pub(crate) key: String,
    /// Intervals only: domain, pair, peak, segment or another kind.
    pub(crate) kind: Option<String>,
    pub(crate) staged: PathBuf,
    pub(crate) n_rows: u64,
}

/// Row order of a spill run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOrder {
    /// (cell, trace, chrom, bin, input row): flat and primary+coords.
    Canonical,
    /// (chrom, cell, trace, bin, input row): partitioned, partition after partition.
    ChromMajor,
}

impl RunOrder {
    pub(crate) fn of(layout: Layout) -> RunOrder {
        if layout == Layout::Partitioned {
            RunOrder::ChromMajor
        } else {
            RunOrder::Canonical
        }
    }
}

/// Where a spill run lives.
pub(crate) enum RunData {
    Mem(Vec<RecordBatch>),
    File(PathBuf),
}

/// One sorted run.
pub(crate) struct RunSource {
    pub(crate) data: RunData,
    pub(crate) order: RunOrder,
    /// Batches are already in final form (written by an intermediate merge pass).
    pub(crate) finalized: bool,
    /// Largest batch of the run, bytes.
    pub(crate) batch_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Finished,
    Failed,
}

/// Streaming writer of a ChromData store; see the module documentation.
pub struct ChromDataWriter {
    target: PathBuf,
    tmp: PathBuf,
    opts: WriterOptions,
    budget: u64,
    state: State,
    given_bins: Option<GivenBins>,
    derived_bins: DerivedBins,
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
    n_spilled: usize,
    /// Largest bytes per row seen in a buffer.
    row_bytes: u64,
    /// Intermediate merge passes `finish` needed.
    merge_passes: usize,
    bin_tracks: Option<RecordBatch>,
    pass_tables: Vec<PassTable>,
}

impl std::fmt::Debug for ChromDataWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromDataWriter")
            .field("target", &self.target)
            .field("rows", &self.rows)
            .finish()
    }
}

/// Whether `path` names a writer's temporary sibling (the reader refuses to open those).
pub fn is_temp_name(path: &Path) -> bool {
    crate::storage::fs::is_temp_name(path)
}

fn is_cdz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("cdz"))
}

/// Whether `path` (which exists) is a store that may be replaced.
fn is_store(path: &Path) -> bool {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if md.is_dir() {
        let Ok(bytes) = std::fs::read(path.join("zarr.json")) else {
            return false;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            return false;
        };
        v.get("attributes")
            .and_then(|a| a.get("uchrom_format_version"))
            .is_some()
    } else if md.is_file() {
        let mut magic = [0u8; 4];
        use std::io::Read;
        is_cdz(path)
            && File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
            && &magic == b"PK\x03\x04"
    } else {
        false
    }
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
        let target = path.as_ref().to_path_buf();
        let tmp = crate::storage::fs::create_temp_sibling(&target)?.dir;
        let spill = tmp.join(wstore::SPILL_DIR);
        if let Err(e) = std::fs::create_dir(&spill) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::io(&spill, &e));
        }
        let mut w = ChromDataWriter {
            target,
            tmp,
            opts: WriterOptions::default(),
            budget: 0,
            state: State::Open,
            given_bins: None,
            derived_bins: DerivedBins::default(),
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
            n_spilled: 0,
            row_bytes: 1,
            merge_passes: 0,
            bin_tracks: None,
            pass_tables: Vec::new(),
        };
        w.set_options(options)?;
        Ok(w)
    }

    /// Replaces the options (before the first append for layout-independent ones too;
    /// the memory budget applies from the next append).
    pub fn set_options(&mut self, options: WriterOptions) -> Result<()> {
        self.check_open("set options")?;
        if options.memory_budget != 0 && options.memory_budget < MIN_BUDGET {
            return Err(Error::invalid_argument(format!(
                "memory budget {} bytes is below the minimum of {MIN_BUDGET}",
                options.memory_budget
            )));
        }
        self.budget = if options.memory_budget == 0 {
            default_memory_budget()
        } else {
            options.memory_budget
        };
        self.opts = options;
        Ok(())
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
        if std::fs::symlink_metadata(&self.target).is_err() {
            return Ok(());
        }
        let t = self.target.display();
        if !is_store(&self.target) {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{t}: exists and is not a ChromData store; refusing to replace it"),
            ));
        }
        if !self.opts.overwrite {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{t}: a store exists there and overwrite is off"),
            ));
        }
        Ok(())
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
        self.given_bins = Some(given_bins(bins)?);
        Ok(())
    }

    /// Sets the bin tracks (§5.2): one row per bin of the bins table given with
    /// `set_bins` (row i = bin i), columns bool, integers, floats or strings. Any time
    /// before `finish`; a second call replaces the first.
    pub fn set_bin_tracks(&mut self, tracks: RecordBatch) -> Result<()> {
        self.check_open("set bin tracks")?;
        let Some(g) = &self.given_bins else {
            return Err(Error::new(
                ErrorKind::State,
                "bin tracks need the bins table: call set_bins first (bins derived from \
                 the loci are numbered only at finish)",
            ));
        };
        let n_bins = g.chrom_of_bin.len();
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
            .join(wstore::SPILL_DIR)
            .join(format!("table-{:04}.parquet", self.pass_tables.len()));
        wstore::write_parquet(&staged, &table)?;
        self.pass_tables.push(PassTable {
            collection,
            key: key.to_string(),
            kind,
            staged,
            n_rows: table.num_rows() as u64,
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
        self.check_open("append")?;
        let r = self.append_inner(&batch);
        if let Err(e) = &r {
            // Errors found before anything was recorded leave the writer usable; those
            // after (ids were assigned) poison it: keep it simple and poison on I/O only.
            if matches!(e.kind, ErrorKind::Io | ErrorKind::Internal) {
                self.state = State::Failed;
            }
        }
        r
    }

    fn append_inner(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = batch.num_rows();
        let schema = batch.schema();
        let col = |name: &str| schema.index_of(name).ok().map(|i| batch.column(i).clone());
        // Validate the column set first, without changing any state.
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
        const KEYS: [&str; 9] = [
            "chrom", "start", "end", "bin_id", "trace_id", "cell_id", "x", "y", "z",
        ];
        let value_fields: Vec<(usize, String)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| !KEYS.contains(&f.name().as_str()))
            .map(|(i, f)| (i, f.name().clone()))
            .collect();
        let first = self.has_cells.is_none();
        if first {
            self.check_value_names(&value_fields)?;
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
        // Kinds and spill arrays of the value columns (no state change yet).
        let mut spilled: Vec<(usize, ArrayRef, Kind)> = Vec::with_capacity(value_fields.len());
        for (i, name) in &value_fields {
            let a = batch.column(*i);
            let kind = wcol::kind_of(name, a.data_type())?;
            let arr = wcol::to_spill(name, a)?;
            let ci = if first {
                spilled.len()
            } else {
                self.cols.iter().position(|c| &c.name == name).unwrap_or(0)
            };
            let group = if first {
                group_of(name, &mut Vec::new())
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
                wcol::unify(name, &self.cols[ci].kind, &kind)?;
            }
            spilled.push((ci, arr, kind));
        }
        // Loci.
        let bins: Vec<u32> = match &mut self.given_bins {
            Some(g) => {
                if let Some(b) = col("bin_id") {
                    let v = values::int_values(b.as_ref())
                        .map_err(|e| Error::invalid_argument(format!("bin_id: {}", e.message)))?;
                    let nb = g.chrom_of_bin.len() as i64;
                    v.iter()
                        .enumerate()
                        .map(|(r, x)| match x {
                            Some(x) if (0..nb).contains(x) => Ok(*x as u32),
                            Some(x) => Err(Error::invalid_argument(format!(
                                "row {r}: bin_id {x} is not a bin (there are {nb})"
                            ))),
                            None => {
                                Err(Error::invalid_argument(format!("row {r}: bin_id is null")))
                            }
                        })
                        .collect::<Result<_>>()?
                } else {
                    let (c, s, e) = loci(&col)?;
                    g.lookup_loci(&c, &s, &e)?
                }
            }
            None => {
                if col("bin_id").is_some() {
                    return Err(Error::invalid_argument(
                        "bin_id given but no bins were set (set_bins), give chrom / start / end",
                    ));
                }
                let (c, s, e) = loci(&col)?;
                let d = &mut self.derived_bins;
                let cids = d.chroms.ids("chrom", &c)?;
                let mut out = Vec::with_capacity(n);
                for r in 0..n {
                    let key = (cids[r], s[r], e[r]);
                    let next = d.list.len() as u32;
                    let id = *d.loci.entry(key).or_insert(next);
                    if id == next {
                        d.list.push(key);
                    }
                    out.push(id);
                }
                out
            }
        };
        // Ids (state changes from here on).
        let trace_ids = self.traces.ids("trace_id", &trace)?;
        let cell_ids = match col("cell_id") {
            Some(c) => Some(self.cells.ids("cell_id", &c)?),
            None => None,
        };
        if first {
            let mut layer_keys = Vec::new();
            for (i, name) in &value_fields {
                let _ = i;
                let group = group_of(name, &mut layer_keys);
                let kind = spilled[self.cols.len()].2.clone();
                self.cols.push(ColState::new(name, group, kind));
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
            self.has_cells = Some(has_cells);
            self.has_coords = Some(has_coords);
        }
        // Chrom id of each row's bin, for the run structure.
        let chrom_id = |b: u32| -> u32 {
            match &self.given_bins {
                Some(g) => g.chrom_of_bin[b as usize] as u32,
                None => self.derived_bins.list[b as usize].0,
            }
        };
        for r in 0..n {
            let c = cell_ids.as_ref().map_or(u32::MAX, |v| v[r]);
            *self
                .triples
                .entry((c, trace_ids[r], chrom_id(bins[r])))
                .or_insert(0) += 1;
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut push = |name: &str, a: ArrayRef| {
            fields.push(Field::new(name, a.data_type().clone(), true));
            columns.push(a);
        };
        push(
            "__cell",
            Arc::new(UInt32Array::from(
                cell_ids.clone().unwrap_or_else(|| vec![0; n]),
            )),
        );
        push("__trace", Arc::new(UInt32Array::from(trace_ids.clone())));
        push("__bin", Arc::new(UInt32Array::from(bins.clone())));
        let start = self.rows;
        push(
            "__row",
            Arc::new(UInt64Array::from_iter_values(start..start + n as u64)),
        );
        if has_coords {
            for (a, name) in xyz.iter().zip(["x", "y", "z"]) {
                let a = a.as_ref().unwrap_or_else(|| unreachable!());
                let f32_in = a.data_type() == &DataType::Float32;
                push(name, wcol::coord_array(a, f32_in));
            }
        }
        // Value columns in registry order, kinds unified and observed.
        let mut by_col: Vec<Option<(ArrayRef, Kind)>> = vec![None; self.cols.len()];
        for (ci, arr, kind) in spilled {
            by_col[ci] = Some((arr, kind));
        }
        for (ci, slot) in by_col.into_iter().enumerate() {
            let (arr, kind) = slot.unwrap_or_else(|| unreachable!());
            let c = &mut self.cols[ci];
            c.kind = wcol::unify(&c.name, &c.kind, &kind)?;
            c.observe(arr.as_ref(), &kind);
            if c.group == Group::Extra {
                c.detect[0].feed(arr.as_ref(), &bins);
                if let Some(cids) = &cell_ids {
                    c.detect[1].feed(arr.as_ref(), cids);
                } else {
                    c.detect[1].slots = None;
                }
                c.detect[2].feed(arr.as_ref(), &trace_ids);
            }
            push(&format!("v{ci}"), arr);
        }
        // Columns that share larger buffers (slices of the caller's batch, e.g. an IPC
        // block) are copied: holding them would keep all of it alive, outside the count.
        let columns = columns.into_iter().map(compact).collect();
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        self.rows += n as u64;
        self.buffer_bytes += b.get_array_memory_size() as u64;
        self.buffer_rows += n as u64;
        self.buffer.push(b);
        // Sorting adds 32 bytes of keys per row.
        if self.buffer_bytes + 32 * self.buffer_rows >= self.buffer_limit() {
            self.spill_buffer(true)?;
        }
        Ok(())
    }

    /// Heap bytes of everything that grows with the distinct traces, cells, loci and
    /// (cell, trace, chrom) triples (estimate; the triples count twice because `finish`
    /// turns them into the run plan).
    pub fn index_bytes(&self) -> u64 {
        let given = self.given_bins.as_ref().map_or(0, |g| {
            g.table.get_array_memory_size() as u64
                + g.lookup.as_ref().map_or(0, map_bytes)
                + map_bytes(&g.chrom_lookup)
                + 8 * g.rank.capacity() as u64
        });
        let d = &self.derived_bins;
        let derived = d.chroms.heap_bytes()
            + map_bytes(&d.loci)
            + (d.list.capacity() * std::mem::size_of::<(u32, i64, i64)>()) as u64
            // bin_final, ranks and the bins table at finish
            + 40 * d.list.len() as u64;
        let cols: u64 = self.cols.iter().map(|c| c.heap_bytes()).sum();
        given
            + derived
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

    fn check_value_names(&self, fields: &[(usize, String)]) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for (_, name) in fields {
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid_argument(format!(
                    "column \"{name}\" appears twice"
                )));
            }
            if let Some(rest) = name.strip_prefix("layers/") {
                let ok = rest
                    .rsplit_once('/')
                    .is_some_and(|(k, a)| !k.is_empty() && ["x", "y", "z"].contains(&a));
                if !ok {
                    return Err(Error::invalid_argument(format!(
                        "column \"{name}\": layer columns are named layers/<key>/x, y or z"
                    )));
                }
            }
            if name.strip_prefix("spot_tracks/") == Some("") || name.is_empty() {
                return Err(Error::invalid_argument(format!(
                    "column \"{name}\": empty name"
                )));
            }
        }
        Ok(())
    }

    /// Sorts the buffered batches and spills them as one run (to a file when `to_disk`,
    /// else kept in memory for the merge).
    fn spill_buffer(&mut self, to_disk: bool) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.buffer);
        if let Some(per_row) = self.buffer_bytes.checked_div(self.buffer_rows) {
            self.row_bytes = self.row_bytes.max(per_row);
        }
        self.buffer_bytes = 0;
        self.buffer_rows = 0;
        let order = RunOrder::of(self.opts.layout);
        let run = self.sort_into_run(batches, order, to_disk)?;
        self.runs.push(run);
        Ok(())
    }

    /// Sorts `batches` (spill form) into `order` and writes them as a run of batches of
    /// about `SPILL_BATCH_BYTES`, gathered straight from the inputs (no sorted copy of the
    /// whole run is ever held).
    fn sort_into_run(
        &mut self,
        batches: Vec<RecordBatch>,
        order: RunOrder,
        to_disk: bool,
    ) -> Result<RunSource> {
        let batches = unify_spill_types(batches)?;
        let keys = self.run_keys(&batches, order)?;
        let schema = batches[0].schema();
        let rows_per = spill_batch_rows(self.row_bytes, self.available());
        let columns: Vec<Vec<&dyn Array>> = (0..schema.fields().len())
            .map(|c| batches.iter().map(|b| b.column(c).as_ref()).collect())
            .collect();
        let piece = |ks: &[RunKey]| -> Result<RecordBatch> {
            let idx: Vec<(usize, usize)> =
                ks.iter().map(|k| (k.3 as usize, k.4 as usize)).collect();
            let cols = columns
                .iter()
                .map(|arrays| arrow_select::interleave::interleave(arrays, &idx))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
            RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))
        };
        let mut batch_bytes = 0u64;
        if !to_disk {
            let mut pieces = Vec::with_capacity(keys.len() / rows_per + 1);
            for ks in keys.chunks(rows_per) {
                let p = piece(ks)?;
                batch_bytes = batch_bytes.max(p.get_array_memory_size() as u64);
                pieces.push(p);
            }
            return Ok(RunSource {
                data: RunData::Mem(pieces),
                order,
                finalized: false,
                batch_bytes,
            });
        }
        let path = self
            .tmp
            .join(wstore::SPILL_DIR)
            .join(format!("run-{:06}.arrow", self.n_spilled));
        let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
        let ioerr = |e: arrow_schema::ArrowError| {
            Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
        };
        let mut w =
            arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &schema).map_err(ioerr)?;
        for ks in keys.chunks(rows_per) {
            let p = piece(ks)?;
            batch_bytes = batch_bytes.max(p.get_array_memory_size() as u64);
            w.write(&p).map_err(ioerr)?;
        }
        w.finish().map_err(ioerr)?;
        self.n_spilled += 1;
        Ok(RunSource {
            data: RunData::File(path),
            order,
            finalized: false,
            batch_bytes,
        })
    }

    /// Sort keys of the rows of `batches`: the order's key, then the input row. Compared by value (ranks), so the order agrees with the final sorted
    /// categories and bins.
    fn run_keys(&self, batches: &[RecordBatch], order: RunOrder) -> Result<Vec<RunKey>> {
        let cell_rank = self.cells.ranks();
        let trace_rank = self.traces.ranks();
        // Rank of each provisional bin in (chrom, bin) order, and its chromosome's rank.
        let (bin_rank, chrom_rank): (Vec<u32>, Vec<u32>) = match &self.given_bins {
            Some(g) => (
                g.rank.clone(),
                g.chrom_of_bin.iter().map(|&c| c as u32).collect(),
            ),
            None => {
                let d = &self.derived_bins;
                let cr = d.chroms.ranks();
                let mut order: Vec<u32> = (0..d.list.len() as u32).collect();
                order.sort_unstable_by_key(|&i| {
                    let (c, s, e) = d.list[i as usize];
                    (cr[c as usize], s, e)
                });
                let mut rank = vec![0u32; order.len()];
                for (r, &i) in order.iter().enumerate() {
                    rank[i as usize] = r as u32;
                }
                let chrom = d.list.iter().map(|&(c, _, _)| cr[c as usize]).collect();
                (rank, chrom)
            }
        };
        let has_cells = self.has_cells == Some(true);
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        if n as u64 > u32::MAX as u64 {
            return Err(Error::limit("a run holds at most 2^32 rows"));
        }
        let mut keys: Vec<RunKey> = Vec::with_capacity(n);
        for (bi, b) in batches.iter().enumerate() {
            let cells = b.column(0).as_primitive::<arrow_array::types::UInt32Type>();
            let traces = b.column(1).as_primitive::<arrow_array::types::UInt32Type>();
            let bins = b.column(2).as_primitive::<arrow_array::types::UInt32Type>();
            let input_rows = b.column(3).as_primitive::<arrow_array::types::UInt64Type>();
            for i in 0..b.num_rows() {
                let c = if has_cells {
                    cell_rank[cells.value(i) as usize]
                } else {
                    0
                };
                let t = trace_rank[traces.value(i) as usize];
                let bin = bins.value(i) as usize;
                let k = match order {
                    RunOrder::Canonical => (c as u64) << 32 | t as u64,
                    RunOrder::ChromMajor => (chrom_rank[bin] as u64) << 32 | c as u64,
                };
                let k2 = match order {
                    RunOrder::Canonical => (bin_rank[bin] as u64) << 32,
                    RunOrder::ChromMajor => (t as u64) << 32 | bin_rank[bin] as u64,
                };
                keys.push(RunKey(k, k2, input_rows.value(i), bi as u32, i as u32));
            }
        }
        let cmp = |a: &RunKey, b: &RunKey| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2));
        let threads = crate::pool::resolve_threads(self.opts.threads);
        if threads > 1 && n > 1 << 16 {
            let pool = crate::pool::pool(threads)?;
            pool.install(|| {
                use rayon::slice::ParallelSliceMut;
                keys.par_sort_unstable_by(cmp)
            });
        } else {
            keys.sort_unstable_by(cmp);
        }
        Ok(keys)
    }

    /// Re-sorts a run spilled in another order (the layout changed after it was spilled);
    /// one run at a time, so this needs no more memory than spilling it did.
    fn resort_run(&mut self, run: RunSource, order: RunOrder) -> Result<RunSource> {
        let to_disk = matches!(run.data, RunData::File(_));
        let old = match &run.data {
            RunData::File(p) => Some(p.clone()),
            RunData::Mem(_) => None,
        };
        let mut reader = RunReader::open(run.data)?;
        let mut batches = Vec::new();
        while let Some(b) = reader.next_batch()? {
            batches.push(b);
        }
        drop(reader);
        if batches.is_empty() {
            return Ok(RunSource {
                data: RunData::Mem(batches),
                order,
                finalized: false,
                batch_bytes: 0,
            });
        }
        let r = self.sort_into_run(batches, order, to_disk)?;
        if let Some(p) = old {
            let _ = std::fs::remove_file(p);
        }
        Ok(r)
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
        self.check_target()?;
        // A small last buffer stays in memory when nothing was spilled: no disk round trip.
        let to_disk = !self.runs.is_empty()
            || (self.buffer_bytes as f64) > self.available() as f64 * IN_MEMORY_SHARE;
        self.spill_buffer(to_disk)?;
        // Runs spilled before the layout changed are re-sorted into its order.
        let order = RunOrder::of(self.opts.layout);
        let runs = std::mem::take(&mut self.runs);
        for run in runs {
            let run = if run.order == order {
                run
            } else {
                self.resort_run(run, order)?
            };
            self.runs.push(run);
        }
        let has_cells = self.has_cells == Some(true);
        let has_coords = self.has_coords == Some(true);
        // Bins.
        let (bins_table, chrom_names, chrom_of_bin, bin_final): (
            RecordBatch,
            Vec<String>,
            Vec<i32>,
            Option<Vec<u32>>,
        ) = match self.given_bins.take() {
            Some(g) => (g.table, g.chrom_names, g.chrom_of_bin, None),
            None => {
                let d = &self.derived_bins;
                let cr = d.chroms.ranks();
                let mut order: Vec<u32> = (0..d.list.len() as u32).collect();
                order.sort_unstable_by_key(|&i| {
                    let (c, s, e) = d.list[i as usize];
                    (cr[c as usize], s, e)
                });
                let mut fin = vec![0u32; order.len()];
                for (r, &i) in order.iter().enumerate() {
                    fin[i as usize] = r as u32;
                }
                let mut names: Vec<String> = d.chroms.strs.clone();
                names.sort_unstable();
                let chrom_of: Vec<i32> = order
                    .iter()
                    .map(|&i| cr[d.list[i as usize].0 as usize] as i32)
                    .collect();
                let starts: Vec<i64> = order.iter().map(|&i| d.list[i as usize].1).collect();
                let ends: Vec<i64> = order.iter().map(|&i| d.list[i as usize].2).collect();
                let table = bins_batch(&names, &chrom_of, starts, ends, vec![])?;
                (table, names, chrom_of, Some(fin))
            }
        };
        let given = bin_final.is_none();
        // Chrom code of each triple's chrom id.
        let chrom_code_of_id: Vec<i32> = if given {
            (0..chrom_names.len() as i32).collect()
        } else {
            self.derived_bins
                .chroms
                .ranks()
                .into_iter()
                .map(|r| r as i32)
                .collect()
        };
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
                    chrom_code_of_id[ch as usize],
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
        let mut final_types = Vec::with_capacity(self.cols.len());
        for c in &self.cols {
            final_types.push(c.final_type()?);
        }
        let input = wstore::Input {
            tmp: self.tmp.clone(),
            target: self.target.clone(),
            layout: self.opts.layout,
            coord_f32: self.opts.coord_float32,
            row_group_size: self.opts.row_group_size,
            coords_row_group_size: self.opts.coords_row_group_size,
            threads: self.opts.threads,
            n_spots: self.rows,
            has_cells,
            has_coords,
            bins: bins_table,
            chrom_names,
            chrom_of_bin,
            bin_final,
            cell_final,
            trace_final,
            trace_cats,
            cell_cats,
            cols: std::mem::take(&mut self.cols),
            final_types,
            layer_keys: self.layer_keys.clone(),
            triples,
            runs: std::mem::take(&mut self.runs),
            overwrite: self.opts.overwrite,
            available: self.available(),
            row_bytes: self.row_bytes,
            bin_tracks: self.bin_tracks.take(),
            pass_tables: std::mem::take(&mut self.pass_tables),
        };
        self.merge_passes = wstore::write_store(input)?;
        Ok(())
    }
}

impl Drop for ChromDataWriter {
    fn drop(&mut self) {
        if self.state != State::Finished {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// `a`, copied into buffers of its own when it holds more memory than its values need.
fn compact(a: ArrayRef) -> ArrayRef {
    let held = a.get_array_memory_size();
    let data = a.to_data();
    let needed = data.get_slice_memory_size().unwrap_or(held);
    if held <= 2 * needed + 4096 {
        return a;
    }
    let mut m = arrow_data::transform::MutableArrayData::new(vec![&data], false, a.len());
    // A copy that cannot fit the offsets keeps the original (it only pins more memory).
    if m.try_extend(0, 0, a.len()).is_err() {
        return a;
    }
    arrow_array::make_array(m.freeze())
}

/// Group of a value column by its name; registers new layer keys.
fn group_of(name: &str, layer_keys: &mut Vec<String>) -> Group {
    if let Some(t) = name.strip_prefix("spot_tracks/") {
        return Group::Track(t.to_string());
    }
    if let Some((key, axis)) = name
        .strip_prefix("layers/")
        .and_then(|r| r.rsplit_once('/'))
    {
        let a = ["x", "y", "z"].iter().position(|x| *x == axis).unwrap_or(0);
        let k = match layer_keys.iter().position(|k| k == key) {
            Some(k) => k,
            None => {
                layer_keys.push(key.to_string());
                layer_keys.len() - 1
            }
        };
        return Group::Layer(k, a);
    }
    Group::Extra
}

type ColFn<'a> = dyn Fn(&str) -> Option<ArrayRef> + 'a;

/// chrom (utf8), start, end (int64) of the loci columns.
fn loci(col: &ColFn<'_>) -> Result<(ArrayRef, Vec<i64>, Vec<i64>)> {
    let get = |n: &str| {
        col(n).ok_or_else(|| {
            Error::invalid_argument(format!(
                "the batch has no {n} column (loci are chrom, start, end, or bin_id with set_bins)"
            ))
        })
    };
    let c = values::normalise_array(&get("chrom")?)?;
    if c.data_type() != &DataType::Utf8 {
        return Err(Error::invalid_argument(format!(
            "chrom must be strings, got {}",
            c.data_type()
        )));
    }
    let ints = |n: &str| -> Result<Vec<i64>> {
        let a = get(n)?;
        let v = values::int_values(a.as_ref())
            .map_err(|_| Error::invalid_argument(format!("{n} must be integers")))?;
        v.into_iter()
            .enumerate()
            .map(|(r, x)| x.ok_or_else(|| Error::invalid_argument(format!("row {r}: {n} is null"))))
            .collect()
    };
    if c.null_count() > 0 {
        return Err(Error::invalid_argument("chrom has null values"));
    }
    Ok((c, ints("start")?, ints("end")?))
}

impl GivenBins {
    fn lookup_loci(&mut self, c: &ArrayRef, s: &[i64], e: &[i64]) -> Result<Vec<u32>> {
        if self.lookup.is_none() {
            let st = self.table.column(1).as_primitive::<Int64Type>();
            let en = self.table.column(2).as_primitive::<Int64Type>();
            let mut m = HashMap::with_capacity(st.len());
            for b in 0..st.len() {
                m.entry((self.chrom_of_bin[b], st.value(b), en.value(b)))
                    .or_insert(b as u32);
            }
            self.lookup = Some(m);
        }
        let m = self.lookup.as_ref().unwrap_or_else(|| unreachable!());
        let names = c.as_string::<i32>();
        (0..s.len())
            .map(|r| {
                let name = names.value(r);
                self.chrom_lookup
                    .get(name)
                    .and_then(|&ch| m.get(&(ch, s[r], e[r])))
                    .copied()
                    .ok_or_else(|| {
                        Error::invalid_argument(format!(
                            "row {r}: locus {name}:{}-{} is not a bin of the bins table",
                            s[r], e[r]
                        ))
                    })
            })
            .collect()
    }
}

/// The stored bins table: chrom as a dictionary column over the chromosome names.
pub(crate) fn bins_batch(
    names: &[String],
    chrom_of: &[i32],
    starts: Vec<i64>,
    ends: Vec<i64>,
    extras: Vec<(Field, ArrayRef)>,
) -> Result<RecordBatch> {
    let values = Arc::new(StringArray::from_iter_values(names.iter()));
    let keys = Int32Array::from(chrom_of.to_vec());
    let dict = arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(keys, values)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    let mut fields = vec![
        Field::new("chrom", dict.data_type().clone(), true),
        Field::new("start", DataType::Int64, true),
        Field::new("end", DataType::Int64, true),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(dict),
        Arc::new(Int64Array::from(starts)),
        Arc::new(Int64Array::from(ends)),
    ];
    for (f, a) in extras {
        fields.push(f);
        cols.push(a);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::invalid_argument(format!("bins: {e}")))
}

fn given_bins(b: RecordBatch) -> Result<GivenBins> {
    let s = b.schema();
    let get = |n: &str, i: usize| -> Result<ArrayRef> {
        match s.fields().get(i) {
            Some(f) if f.name() == n => Ok(b.column(i).clone()),
            _ => Err(Error::invalid_argument(format!(
                "bins: column {i} must be \"{n}\" (bins are chrom, start, end, ...)"
            ))),
        }
    };
    let chrom = get("chrom", 0)?;
    let nb = b.num_rows();
    if nb as u64 > i32::MAX as u64 {
        return Err(Error::limit("bins: more than 2^31-1 bins"));
    }
    let (names, codes): (Vec<String>, Vec<i32>) = match chrom.data_type() {
        DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8) => {
            let d = chrom.as_any_dictionary();
            let vals = values::normalise_array(d.values())?;
            let vals = vals.as_string::<i32>();
            if vals.null_count() > 0 {
                return Err(Error::invalid_argument("bins: chrom dictionary has nulls"));
            }
            let names: Vec<String> = vals.iter().map(|v| v.unwrap_or("").to_string()).collect();
            let uniq: std::collections::HashSet<&String> = names.iter().collect();
            if uniq.len() != names.len() {
                return Err(Error::invalid_argument(
                    "bins: chrom dictionary has duplicate values",
                ));
            }
            let keys = values::int_values(d.keys())?;
            let codes = keys
                .into_iter()
                .enumerate()
                .map(|(r, k)| {
                    k.map(|k| k as i32).ok_or_else(|| {
                        Error::invalid_argument(format!("bins row {r}: chrom is null"))
                    })
                })
                .collect::<Result<_>>()?;
            (names, codes)
        }
        _ => {
            let c = values::normalise_array(&chrom)?;
            if c.data_type() != &DataType::Utf8 {
                return Err(Error::invalid_argument(format!(
                    "bins: chrom must be strings, got {}",
                    c.data_type()
                )));
            }
            if c.null_count() > 0 {
                return Err(Error::invalid_argument("bins: chrom has nulls"));
            }
            let c = c.as_string::<i32>();
            let mut names: Vec<String> = c.iter().map(|v| v.unwrap_or("").to_string()).collect();
            names.sort_unstable();
            names.dedup();
            let lookup: HashMap<&str, i32> = names
                .iter()
                .enumerate()
                .map(|(i, s)| (s.as_str(), i as i32))
                .collect();
            let codes = c.iter().map(|v| lookup[v.unwrap_or("")]).collect();
            (names, codes)
        }
    };
    let ints = |n: &str, i: usize| -> Result<Vec<i64>> {
        let a = get(n, i)?;
        let v = values::int_values(a.as_ref())
            .map_err(|_| Error::invalid_argument(format!("bins: {n} must be integers")))?;
        v.into_iter()
            .enumerate()
            .map(|(r, x)| {
                x.ok_or_else(|| Error::invalid_argument(format!("bins row {r}: {n} is null")))
            })
            .collect()
    };
    let starts = ints("start", 1)?;
    let ends = ints("end", 2)?;
    let mut extras = Vec::new();
    for i in 3..s.fields().len() {
        let f = s.field(i);
        let a = values::normalise_array(b.column(i))?;
        match a.data_type() {
            DataType::Boolean | DataType::Float32 | DataType::Float64 | DataType::Utf8 => {}
            t if t.is_integer() => {}
            t => {
                return Err(Error::unsupported(format!(
                "bins column \"{}\": type {t} is not supported (bool, integers, floats, strings)",
                f.name()
            )))
            }
        }
        if ["chrom", "start", "end"].contains(&f.name().as_str()) {
            return Err(Error::invalid_argument(format!(
                "bins: column \"{}\" appears twice",
                f.name()
            )));
        }
        extras.push((Field::new(f.name(), a.data_type().clone(), true), a));
    }
    let chrom_lookup = names
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i32))
        .collect();
    let mut order: Vec<u32> = (0..nb as u32).collect();
    order.sort_unstable_by_key(|&i| (codes[i as usize], i));
    let mut rank = vec![0u32; nb];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    let table = bins_batch(&names, &codes, starts, ends, extras)?;
    Ok(GivenBins {
        table,
        chrom_names: names,
        chrom_of_bin: codes,
        rank,
        lookup: None,
        chrom_lookup,
    })
}

/// Sort key of a run row: (primary key, secondary key, input row) and where the row is
/// (batch, row in batch).
#[derive(Debug, Clone, Copy)]
struct RunKey(u64, u64, u64, u32, u32);

/// Gives every column of `batches` one type: columns whose spill types differ between
/// batches (integers / float32 mixed with floats) become float64.
fn unify_spill_types(mut batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let first = batches[0].schema();
    let ncol = first.fields().len();
    let mut differ = Vec::new();
    for c in 0..ncol {
        let t0 = batches[0].column(c).data_type();
        if !batches.iter().all(|b| b.column(c).data_type() == t0) {
            differ.push(c);
        }
    }
    if differ.is_empty() {
        return Ok(batches);
    }
    let mut fields: Vec<Field> = first.fields().iter().map(|f| f.as_ref().clone()).collect();
    for &c in &differ {
        fields[c] = Field::new(first.field(c).name(), DataType::Float64, true);
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    for b in batches.iter_mut() {
        let mut cols: Vec<ArrayRef> = b.columns().to_vec();
        for &c in &differ {
            let a = &cols[c];
            cols[c] = match a.data_type() {
                DataType::Float64 => a.clone(),
                DataType::Float32 | DataType::Int64 => wcol::finalize("", a, &FinalType::F64)?,
                t => {
                    return Err(Error::invalid_argument(format!(
                        "column {}: mixed spill types ({t})",
                        first.field(c).name()
                    )))
                }
            };
        }
        *b = RecordBatch::try_new(schema.clone(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    }
    Ok(batches)
}

/// Reads a spill run batch by batch.
pub(crate) enum RunReader {
    Mem(std::vec::IntoIter<RecordBatch>),
    File(Box<arrow_ipc::reader::FileReader<BufReader<File>>>, PathBuf),
}

impl RunReader {
    pub(crate) fn open(src: RunData) -> Result<RunReader> {
        Ok(match src {
            RunData::Mem(v) => RunReader::Mem(v.into_iter()),
            RunData::File(p) => {
                let f = File::open(&p).map_err(|e| Error::io(&p, &e))?;
                let r = arrow_ipc::reader::FileReader::try_new(BufReader::new(f), None)
                    .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", p.display())))?;
                RunReader::File(Box::new(r), p)
            }
        })
    }

    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        match self {
            RunReader::Mem(it) => Ok(it.next()),
            RunReader::File(r, p) => match r.next() {
                None => Ok(None),
                Some(Ok(b)) => Ok(Some(b)),
                Some(Err(e)) => Err(Error::new(
                    ErrorKind::Io,
                    format!("{}: spill run unreadable: {e}", p.display()),
                )),
            },
        }
    }
}
