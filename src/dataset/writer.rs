//! Streaming dataset writer. Rows arrive in any number of calls; every `tile_size` rows make
//! a tile, encoded and written on the library pool while appending continues (at most a few
//! tiles in flight, so memory stays bounded). Everything goes into a hidden temporary sibling
//! directory `.<name>.tmp-<pid>-<random>`; `finish` writes `manifest.json` last, syncs, and
//! renames the directory into place, so an interrupted write never leaves anything that opens
//! as a dataset.
//!
//! To an object-store prefix (`s3://…`, `gs://…`, `az://…`): each tile is uploaded as soon as
//! it is encoded (one PUT, from memory); obs shards, the gene table and the small files are
//! built in a local spill directory (see [`spill_root`]) and uploaded at `finish`, and
//! `manifest.json` is uploaded last — the commit point: a prefix without it is not a dataset,
//! so a write that dies leaves nothing that opens. Overwriting deletes the old manifest before
//! the first tile is uploaded.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};

use crate::error::{Error, ErrorKind, Result};
use crate::pool;
use crate::storage::{fs, Root};
use crate::tile::{self, CsrRef, EncodeOptions, MAX_GENES};

use arrow_array::RecordBatch;

use super::manifest::Manifest;
use super::obs::{ObsSpill, ObsWritten, DEFAULT_MAX_CATEGORIES};
use super::params::WriterParam;
use super::{npy, paths, var};

/// The writer's spill of obs rows, inside its temporary directory (removed at finish).
const OBS_SPILL: &str = ".obs-spill.arrows";

/// Cells per tile unless set otherwise.
pub const DEFAULT_TILE_SIZE: u64 = 10_000;
/// Tiles per obs shard unless set otherwise.
pub const DEFAULT_OBS_TILES_PER_FILE: u64 = 1000;

/// Settings of a `DatasetWriter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Cells per tile (>= 1).
    pub tile_size: u64,
    /// Chunks per tile (1 ..= `MAX_CHUNKS`; a tile gets at most one per cell).
    pub n_chunks: u32,
    /// zstd level (0 = zstd's default).
    pub zstd_level: i32,
    /// Encoding threads (0 = `DELTACELLS_NUM_THREADS` or all cores).
    pub threads: usize,
    /// Replace an existing dataset at the target when finishing.
    pub overwrite: bool,
    /// Tiles per obs shard (>= 1).
    pub obs_tiles_per_file: u64,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            tile_size: DEFAULT_TILE_SIZE,
            n_chunks: tile::DEFAULT_CHUNKS,
            zstd_level: tile::DEFAULT_ZSTD_LEVEL,
            threads: 0,
            overwrite: false,
            obs_tiles_per_file: DEFAULT_OBS_TILES_PER_FILE,
        }
    }
}

impl WriterOptions {
    /// Checks every setting against its range (`WriterParam::bounds`).
    pub fn validate(&self) -> Result<()> {
        WriterParam::TileSize.check(self.tile_size)?;
        WriterParam::NChunks.check(self.n_chunks)?;
        WriterParam::ZstdLevel.check(self.zstd_level)?;
        WriterParam::Threads.check(self.threads as u64)?;
        WriterParam::ObsTilesPerFile.check(self.obs_tiles_per_file)?;
        Ok(())
    }
}

/// What a written tile contributes to the manifest.
#[derive(Debug, Clone, Copy)]
struct TileStat {
    cells: u64,
    nnz: u64,
    bytes: u64,
}

/// Rows collected for the next tile (already in output column order).
#[derive(Debug)]
struct Pending {
    indptr: Vec<i64>,
    indices: Vec<i32>,
    values: Vec<i32>,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        }
    }
    fn rows(&self) -> u64 {
        self.indptr.len() as u64 - 1
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Open,
    Finished,
    /// A tile failed to encode or write; nothing more can be done with this writer.
    Failed(String),
}

type JobResult = (u64, Result<TileStat>);

pub use crate::storage::fs::{spill_root, SPILL_DIR_ENV};

/// Writes a new dataset; see the module documentation.
pub struct DatasetWriter {
    target: PathBuf,
    /// The object-store prefix written to (then `target` is its URL, for messages, and
    /// `tmp` a local spill directory).
    #[cfg(feature = "remote")]
    remote: Option<std::sync::Arc<crate::storage::remote::ObjectRoot>>,
    tmp: PathBuf,
    n_genes: u32,
    opts: WriterOptions,
    /// Whether the target's existence has been checked against `overwrite` (the C API sets
    /// options after creation, so it checks at the first append or at finish).
    target_checked: bool,
    gene_order: Option<Vec<i32>>,
    /// inverse[input column] = output column.
    inverse: Option<Vec<i32>>,
    var_names: Option<Vec<String>>,
    /// The gene table, in input order.
    var_table: Option<RecordBatch>,
    obs: Option<ObsSpill>,
    obs_written: Option<ObsWritten>,
    max_categories: usize,
    pending: Pending,
    rows_appended: u64,
    next_tile: u64,
    stats: Vec<Option<TileStat>>,
    in_flight: usize,
    tx: Sender<JobResult>,
    rx: Receiver<JobResult>,
    state: State,
}

/// Whether an existing `target` may be replaced: an empty directory, or one that holds
/// nothing but the names of a dataset's layout. Anything else (a file, a symlink, a
/// directory of other things) is refused, so a mistyped path never deletes unrelated data.
fn check_replaceable(target: &Path) -> Result<()> {
    let refuse = |why: &str| {
        Error::new(
            ErrorKind::Exists,
            format!(
                "{}: exists and is {why}; refusing to replace it",
                target.display()
            ),
        )
    };
    let meta = std::fs::symlink_metadata(target).map_err(|e| Error::io(target, &e))?;
    if !meta.is_dir() {
        return Err(refuse("not a directory"));
    }
    let entries = std::fs::read_dir(target).map_err(|e| Error::io(target, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(target, &e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !paths::LAYOUT.contains(&name.as_ref()) {
            return Err(refuse(&format!(
                "not a deltacells dataset (it contains \"{name}\")"
            )));
        }
    }
    Ok(())
}

impl DatasetWriter {
    /// Starts a dataset of `n_genes` columns at `path` (a directory that must not exist
    /// unless `options.overwrite`; its parent must exist).
    ///
    /// Errors: `InvalidArgument` (n_genes, options, path), `Exists`, `NotFound` (parent),
    /// `Io`.
    pub fn create(
        path: impl AsRef<Path>,
        n_genes: u32,
        options: WriterOptions,
    ) -> Result<DatasetWriter> {
        let mut w = Self::create_deferred(path, n_genes, options)?;
        w.check_target()?;
        Ok(w)
    }

    /// Like `create`, but the target's existence is checked only at the first append or at
    /// `finish`, so that `overwrite` can still be set (the C API's order of calls).
    pub fn create_deferred(
        path: impl AsRef<Path>,
        n_genes: u32,
        options: WriterOptions,
    ) -> Result<DatasetWriter> {
        options.validate()?;
        if n_genes == 0 || n_genes as u64 > MAX_GENES {
            return Err(Error::invalid_argument(format!(
                "n_genes is {n_genes}, must be in 1..2^31"
            )));
        }
        let target = path.as_ref().to_path_buf();
        let tmp = fs::create_temp_sibling(&target)?.dir;
        Self::with_temp_dir(target, tmp, n_genes, options)
    }

    /// Like `create_deferred`, at a directory or an object-store prefix.
    pub fn create_deferred_at(
        root: Root,
        n_genes: u32,
        options: WriterOptions,
    ) -> Result<DatasetWriter> {
        match root {
            Root::Local(path) => Self::create_deferred(path, n_genes, options),
            Root::Open(dir) => Self::create_deferred(dir.path(), n_genes, options),
            #[cfg(feature = "remote")]
            Root::Remote(remote) => {
                options.validate()?;
                if !remote.url().scheme.writable() {
                    return Err(Error::unsupported(format!(
                        "{}: HTTP(S) URLs are read only; write to s3://, gs:// or az://",
                        remote.url()
                    )));
                }
                let tmp = fs::create_spill_dir("deltacells-upload", "an upload")?;
                let target = PathBuf::from(remote.url().url.clone());
                let mut w = Self::with_temp_dir(target, tmp, n_genes, options)?;
                w.remote = Some(remote);
                Ok(w)
            }
        }
    }

    fn with_temp_dir(
        target: PathBuf,
        tmp: PathBuf,
        n_genes: u32,
        options: WriterOptions,
    ) -> Result<DatasetWriter> {
        options.validate()?;
        if n_genes == 0 || n_genes as u64 > MAX_GENES {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::invalid_argument(format!(
                "n_genes is {n_genes}, must be in 1..2^31"
            )));
        }
        let tiles = tmp.join(paths::TILES_DIR);
        if let Err(e) = std::fs::create_dir(&tiles) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::io(&tiles, &e));
        }
        let (tx, rx) = channel();
        Ok(DatasetWriter {
            target,
            #[cfg(feature = "remote")]
            remote: None,
            tmp,
            n_genes,
            opts: options,
            target_checked: false,
            gene_order: None,
            inverse: None,
            var_names: None,
            var_table: None,
            obs: None,
            obs_written: None,
            max_categories: DEFAULT_MAX_CATEGORIES,
            pending: Pending::new(),
            rows_appended: 0,
            next_tile: 0,
            stats: Vec::new(),
            in_flight: 0,
            tx,
            rx,
            state: State::Open,
        })
    }

    /// The temporary directory the dataset is written into until `finish`.
    pub fn temp_dir(&self) -> &Path {
        &self.tmp
    }

    pub fn options(&self) -> WriterOptions {
        self.opts
    }

    pub fn rows_appended(&self) -> u64 {
        self.rows_appended
    }

    fn check_target(&mut self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            if remote.exists(paths::MANIFEST)? {
                if !self.opts.overwrite {
                    return Err(Error::new(
                        ErrorKind::Exists,
                        format!(
                            "{}: a dataset exists there (set overwrite to replace it)",
                            remote.url()
                        ),
                    ));
                }
                // The commit point goes first: from now on the prefix is not a dataset
                // until the new manifest is uploaded.
                remote.delete(paths::MANIFEST)?;
            }
            self.target_checked = true;
            return Ok(());
        }
        if fs::exists(&self.target) {
            if !self.opts.overwrite {
                return Err(Error::new(
                    ErrorKind::Exists,
                    format!(
                        "{}: exists (set overwrite to replace it)",
                        self.target.display()
                    ),
                ));
            }
            check_replaceable(&self.target)?;
        }
        self.target_checked = true;
        Ok(())
    }

    fn check_open(&self, what: &str) -> Result<()> {
        match &self.state {
            State::Open => Ok(()),
            State::Finished => Err(Error::new(
                ErrorKind::State,
                format!("{what}: the writer has finished"),
            )),
            State::Failed(m) => Err(Error::new(
                ErrorKind::State,
                format!("{what}: the writer failed earlier ({m})"),
            )),
        }
    }

    fn check_before_append(&self, what: &str) -> Result<()> {
        self.check_open(what)?;
        if self.rows_appended > 0 {
            return Err(Error::new(
                ErrorKind::State,
                format!("{what}: must be set before the first append"),
            ));
        }
        Ok(())
    }

    pub fn set_tile_size(&mut self, v: u64) -> Result<()> {
        self.check_before_append("tile_size")?;
        WriterParam::TileSize.check(v)?;
        self.opts.tile_size = v;
        Ok(())
    }

    pub fn set_n_chunks(&mut self, v: u32) -> Result<()> {
        self.check_before_append("n_chunks")?;
        WriterParam::NChunks.check(v)?;
        self.opts.n_chunks = v;
        Ok(())
    }

    pub fn set_zstd_level(&mut self, v: i32) -> Result<()> {
        self.check_before_append("zstd_level")?;
        WriterParam::ZstdLevel.check(v)?;
        self.opts.zstd_level = v;
        Ok(())
    }

    pub fn set_threads(&mut self, v: usize) -> Result<()> {
        self.check_open("threads")?;
        WriterParam::Threads.check(v as u64)?;
        self.opts.threads = v;
        Ok(())
    }

    pub fn set_overwrite(&mut self, v: bool) -> Result<()> {
        self.check_open("overwrite")?;
        self.opts.overwrite = v;
        // Re-checked at finish whatever happens; a fresh check makes a refusal early.
        self.target_checked = false;
        Ok(())
    }

    pub fn set_obs_tiles_per_file(&mut self, v: u64) -> Result<()> {
        self.check_before_append("obs_tiles_per_file")?;
        WriterParam::ObsTilesPerFile.check(v)?;
        self.opts.obs_tiles_per_file = v;
        Ok(())
    }

    /// Sets `param` to `value`, after checking it against `param.bounds()`: the C API's
    /// `dc_writer_set`. Each setting may be set until the moment its typed setter says.
    ///
    /// Errors: `InvalidArgument` (out of range), `State` (too late).
    pub fn set_param(&mut self, param: WriterParam, value: i64) -> Result<()> {
        let v = param.check(value)?;
        match param {
            WriterParam::TileSize => self.set_tile_size(v as u64),
            WriterParam::NChunks => self.set_n_chunks(v as u32),
            WriterParam::ZstdLevel => self.set_zstd_level(v as i32),
            WriterParam::Threads => self.set_threads(v as usize),
            WriterParam::Overwrite => self.set_overwrite(v == 1),
            WriterParam::ObsTilesPerFile => self.set_obs_tiles_per_file(v as u64),
            WriterParam::ObsMaxCategories => self.set_max_categories(v as usize),
        }
    }

    /// Sets the gene order before the first append: output column j is input column
    /// `order[j]`. `order` must be a permutation of 0..n_genes.
    pub fn set_gene_order(&mut self, order: &[i32]) -> Result<()> {
        self.check_before_append("gene order")?;
        let n = self.n_genes as usize;
        if order.len() != n {
            return Err(Error::invalid_argument(format!(
                "gene order has {} entries, must have n_genes = {n}",
                order.len()
            )));
        }
        let mut inverse = vec![-1i32; n];
        for (j, &g) in order.iter().enumerate() {
            if g < 0 || g as usize >= n {
                return Err(Error::invalid_argument(format!(
                    "gene order: entry {j} is {g}, outside 0..{n} (n_genes)"
                )));
            }
            if inverse[g as usize] >= 0 {
                return Err(Error::invalid_argument(format!(
                    "gene order: {g} appears at entries {} and {j}; it must be a permutation of 0..{n}",
                    inverse[g as usize]
                )));
            }
            inverse[g as usize] = j as i32;
        }
        self.gene_order = Some(order.to_vec());
        self.inverse = Some(inverse);
        Ok(())
    }

    /// Sets the gene names, in input column order (written in output order). Names must not
    /// contain line breaks.
    pub fn set_var_names<S: AsRef<str>>(&mut self, names: &[S]) -> Result<()> {
        self.check_open("var names")?;
        let n = self.n_genes as usize;
        if names.len() != n {
            return Err(Error::invalid_argument(format!(
                "{} var names given, must be n_genes = {n}",
                names.len()
            )));
        }
        for (i, s) in names.iter().enumerate() {
            if s.as_ref().contains(['\n', '\r']) {
                return Err(Error::invalid_argument(format!(
                    "var name {i} ({:?}) contains a line break; var_names.txt holds one name per line",
                    s.as_ref()
                )));
            }
        }
        self.var_names = Some(names.iter().map(|s| s.as_ref().to_string()).collect());
        Ok(())
    }

    /// Sets the gene table (`var.parquet`): `n_genes` rows in input column order, written in
    /// output order (permuted by the gene order). Keep the pandas index as a column; a
    /// schema metadata entry `"pandas"` is written unchanged.
    pub fn set_var_table(&mut self, table: RecordBatch) -> Result<()> {
        self.check_open("var table")?;
        var::check_table(&table, self.n_genes)?;
        self.var_table = Some(table);
        Ok(())
    }

    /// Text obs columns with more distinct values than this are stored as strings rather
    /// than categories (default 20,000). Before the first `append_obs`.
    pub fn set_max_categories(&mut self, n: usize) -> Result<()> {
        self.check_open("max_categories")?;
        WriterParam::ObsMaxCategories.check(n as u64)?;
        if self.obs.is_some() {
            return Err(Error::new(
                ErrorKind::State,
                "max_categories: must be set before the first append_obs",
            ));
        }
        self.max_categories = n;
        Ok(())
    }

    /// Appends obs rows: row i of the first batch describes cell 0, and so on across
    /// batches (batch boundaries need not match `append_csr` calls, but in total there must
    /// be one obs row per cell at `finish`). Every batch has the first one's columns, in
    /// the same order and of the same types (text may come as utf8 or dictionaries).
    /// Columns: dictionaries of text and utf8 become categories (codes over the global,
    /// sorted vocabulary) unless they have more than `max_categories` distinct values
    /// (then strings); integers and floats are numeric; bool is bool. Anything else is
    /// `InvalidArgument` naming the column. The call is all or nothing.
    pub fn append_obs(&mut self, batch: RecordBatch) -> Result<()> {
        self.check_open("append_obs")?;
        let spill = self
            .obs
            .get_or_insert_with(|| ObsSpill::new(self.tmp.join(OBS_SPILL), self.max_categories));
        let r = spill.append(&batch);
        match &r {
            Err(e) if e.kind == ErrorKind::Io => {
                // The spill may hold part of the batch: nothing more can be trusted.
                self.state = State::Failed(e.message.clone());
            }
            Err(_) if spill.rows() == 0 => {
                // Nothing was taken: the next batch may define the columns afresh.
                self.obs = None;
            }
            _ => {}
        }
        r
    }

    /// Obs rows appended so far.
    pub fn obs_rows(&self) -> u64 {
        self.obs.as_ref().map_or(0, ObsSpill::rows)
    }

    /// Appends `n_rows` cells in input column space. Row r holds the entries
    /// `indptr[r] - indptr[0] .. indptr[r + 1] - indptr[0]` of `indices` / `values` (so a
    /// slice of a larger CSR can be passed as is). Within a row, columns may come in any
    /// order but not twice; counts are >= 0 and explicit zeros are dropped (the format never
    /// stores them). The call is all or nothing: invalid input appends nothing.
    pub fn append_csr(
        &mut self,
        n_rows: u64,
        indptr: &[i64],
        indices: &[i32],
        values: &[i32],
    ) -> Result<()> {
        self.check_open("append")?;
        if !self.target_checked {
            self.check_target()?;
        }
        self.validate_rows(n_rows, indptr, indices, values)?;
        let base = indptr[0];
        let mut row: Vec<(i32, i32)> = Vec::new();
        for r in 0..n_rows as usize {
            let (a, b) = ((indptr[r] - base) as usize, (indptr[r + 1] - base) as usize);
            let (cols, vals) = (&indices[a..b], &values[a..b]);
            let p = &mut self.pending;
            let sorted = cols.windows(2).all(|w| w[0] < w[1]);
            match (&self.inverse, sorted) {
                (None, true) => {
                    for (&c, &v) in cols.iter().zip(vals) {
                        if v != 0 {
                            p.indices.push(c);
                            p.values.push(v);
                        }
                    }
                }
                (inverse, _) => {
                    row.clear();
                    row.extend(
                        cols.iter()
                            .zip(vals)
                            .filter(|(_, &v)| v != 0)
                            .map(|(&c, &v)| (inverse.as_ref().map_or(c, |inv| inv[c as usize]), v)),
                    );
                    row.sort_unstable_by_key(|&(c, _)| c);
                    p.indices.extend(row.iter().map(|&(c, _)| c));
                    p.values.extend(row.iter().map(|&(_, v)| v));
                }
            }
            p.indptr.push(p.indices.len() as i64);
            self.rows_appended += 1;
            if self.pending.rows() == self.opts.tile_size {
                self.submit_pending()?;
            }
        }
        Ok(())
    }

    /// Checks a whole append before any of it is taken.
    fn validate_rows(
        &self,
        n_rows: u64,
        indptr: &[i64],
        indices: &[i32],
        values: &[i32],
    ) -> Result<()> {
        let bad = |m: String| Error::invalid_argument(format!("append_csr: {m}"));
        if n_rows.checked_add(1) != Some(indptr.len() as u64) {
            return Err(bad(format!(
                "indptr has {} entries, n_rows + 1 = {} expected",
                indptr.len(),
                n_rows as u128 + 1
            )));
        }
        let base = indptr[0];
        if base < 0 {
            return Err(bad(format!("indptr[0] is {base}, negative")));
        }
        if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(bad(format!(
                "indptr decreases at row {i} ({} -> {})",
                indptr[i],
                indptr[i + 1]
            )));
        }
        let total = (indptr[n_rows as usize] - base) as u64;
        if (indices.len() as u64) < total || (values.len() as u64) < total {
            return Err(bad(format!(
                "indptr spans {total} entries but {} indices / {} values were given",
                indices.len(),
                values.len()
            )));
        }
        let n = self.n_genes as i64;
        let mut scratch: Vec<i32> = Vec::new();
        for r in 0..n_rows as usize {
            let (a, b) = ((indptr[r] - base) as usize, (indptr[r + 1] - base) as usize);
            let cell = self.rows_appended + r as u64;
            for j in a..b {
                let (c, v) = (indices[j], values[j]);
                if c < 0 || c as i64 >= n {
                    return Err(bad(format!(
                        "row {r} (cell {cell}): column index {c} at entry {j} is outside 0..{n} (n_genes)"
                    )));
                }
                if v < 0 {
                    return Err(bad(format!(
                        "row {r} (cell {cell}): count {v} at entry {j} is negative"
                    )));
                }
            }
            let cols = &indices[a..b];
            if !cols.windows(2).all(|w| w[0] < w[1]) {
                scratch.clear();
                scratch.extend_from_slice(cols);
                scratch.sort_unstable();
                if let Some(w) = scratch.windows(2).find(|w| w[0] == w[1]) {
                    return Err(bad(format!(
                        "row {r} (cell {cell}): column index {} appears twice",
                        w[0]
                    )));
                }
            }
        }
        Ok(())
    }

    fn encode_options(&self) -> EncodeOptions {
        EncodeOptions {
            zstd_level: self.opts.zstd_level,
            n_chunks: self.opts.n_chunks,
            threads: self.opts.threads,
        }
    }

    /// Hands the pending rows to the encoder (inline with one thread, else on the pool,
    /// waiting first if too many tiles are in flight).
    fn submit_pending(&mut self) -> Result<()> {
        let rows = std::mem::replace(&mut self.pending, Pending::new());
        let t = self.next_tile;
        self.next_tile += 1;
        self.stats.push(None);
        let path = self.tmp.join(paths::tile_relpath(t));
        let sink = TileSink {
            path,
            #[cfg(feature = "remote")]
            remote: self.remote.clone(),
            rel: paths::tile_relpath(t),
        };
        let (n_genes, opts) = (self.n_genes, self.encode_options());
        let threads = pool::resolve_threads(self.opts.threads);
        if threads <= 1 {
            let r = encode_and_write(&rows, n_genes, opts, &sink);
            return self.record(t, r);
        }
        let max_in_flight = threads.min(4) + 1;
        while self.in_flight >= max_in_flight {
            self.collect_one()?;
        }
        let pool = pool::pool(threads)?;
        let tx = self.tx.clone();
        self.in_flight += 1;
        pool::spawn(&pool, move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                encode_and_write(&rows, n_genes, opts, &sink)
            }))
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Internal,
                    format!("tile {t}: the encoder panicked"),
                ))
            });
            // The writer may be gone (dropped); then nobody needs the result.
            let _ = tx.send((t, r));
        });
        Ok(())
    }

    fn record(&mut self, t: u64, r: Result<TileStat>) -> Result<()> {
        match r {
            Ok(s) => {
                self.stats[t as usize] = Some(s);
                Ok(())
            }
            Err(e) => {
                let e = e.context(format!("tile {t}"));
                self.state = State::Failed(e.message.clone());
                Err(e)
            }
        }
    }

    fn collect_one(&mut self) -> Result<()> {
        let (t, r) = self.rx.recv().map_err(|_| {
            Error::new(
                ErrorKind::Internal,
                "tile encoder channel closed unexpectedly",
            )
        })?;
        self.in_flight -= 1;
        self.record(t, r)
    }

    fn wait_all(&mut self) -> Result<()> {
        let mut first_err = None;
        while self.in_flight > 0 {
            if let Err(e) = self.collect_one() {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Writes the remaining rows, the optional files and `manifest.json`, syncs, and moves
    /// the dataset into place. With `overwrite`, an existing dataset at the target is
    /// replaced only now, after the new one is complete.
    ///
    /// Errors: `State` (already finished or failed), `Exists`, `Io`, and any encoding error.
    /// If only the final move fails (e.g. `Exists`), nothing is lost: `finish` may be
    /// called again (after setting overwrite, say).
    pub fn finish(&mut self) -> Result<()> {
        self.check_open("finish")?;
        if let Some(obs) = &self.obs {
            if obs.rows() != self.rows_appended {
                return Err(Error::invalid_argument(format!(
                    "finish: {} obs rows were appended for {} cells; there must be one per cell",
                    obs.rows(),
                    self.rows_appended
                )));
            }
        }
        if self.pending.rows() > 0 {
            self.submit_pending()?;
        }
        self.wait_all()?;
        if !self.target_checked {
            self.check_target()?;
        }
        let mut manifest = self.build_manifest()?;
        if let Some(table) = &self.var_table {
            var::write_table(
                &self.tmp.join(paths::VAR_TABLE),
                table,
                self.gene_order.as_deref(),
            )?;
            manifest.has_var_table = true;
        }
        if let (Some(obs), None) = (&mut self.obs, &self.obs_written) {
            let r = obs.write_shards(
                &self.tmp,
                &manifest.tile_cells,
                self.opts.obs_tiles_per_file,
            );
            match r {
                // Kept: a finish retried after a failed publish reuses the shards.
                Ok(w) => self.obs_written = Some(w),
                Err(e) => {
                    self.state = State::Failed(e.message.clone());
                    return Err(e);
                }
            }
        }
        if let Some(w) = &self.obs_written {
            manifest.has_obs = true;
            manifest.obs_tiles_per_file = Some(self.opts.obs_tiles_per_file);
            manifest.obs_shard_bytes = Some(w.shard_bytes.clone());
            manifest.obs_shard_sha256 = Some(w.shard_sha256.clone());
            manifest.obs_fingerprint = Some(w.fingerprint.clone());
            manifest
                .validate()
                .map_err(|e| Error::new(ErrorKind::Internal, e.message))?;
        }
        if let Some(order) = &self.gene_order {
            fs::write_synced(&self.tmp.join(paths::GENE_ORDER), &npy::write_i32(order))?;
        }
        if let Some(names) = &self.var_names {
            let mut text = String::new();
            for j in 0..names.len() {
                let i = self.gene_order.as_ref().map_or(j, |o| o[j] as usize);
                text.push_str(&names[i]);
                text.push('\n');
            }
            fs::write_synced(&self.tmp.join(paths::VAR_NAMES), text.as_bytes())?;
        }
        let manifest_path = self.tmp.join(paths::MANIFEST);
        fs::write_synced(&manifest_path, &manifest.to_json()?)?;
        if let Err(e) = self.publish() {
            // Leave no manifest in the temporary directory while it is not published.
            let _ = std::fs::remove_file(&manifest_path);
            self.target_checked = false;
            return Err(e);
        }
        self.state = State::Finished;
        Ok(())
    }

    fn build_manifest(&self) -> Result<Manifest> {
        let mut m = Manifest::new(self.n_genes as u64, self.opts.tile_size);
        for (t, s) in self.stats.iter().enumerate() {
            let s = s.ok_or_else(|| {
                Error::new(ErrorKind::Internal, format!("tile {t} was never written"))
            })?;
            m.tile_cells.push(s.cells);
            m.tile_nnz.push(s.nnz);
            m.tile_bytes.push(s.bytes);
        }
        m.n_cells = m.tile_cells.iter().sum();
        m.n_chunks = Some(self.opts.n_chunks as u64);
        m.zstd_level = Some(self.opts.zstd_level as i64);
        m.has_gene_order = self.gene_order.is_some();
        m.has_var_names = self.var_names.is_some();
        m.validate()
            .map_err(|e| Error::new(ErrorKind::Internal, e.message))?;
        Ok(m)
    }

    /// Renames the temporary directory to the target (replacing a dataset there only when
    /// overwriting, and only once the new one is complete).
    fn publish(&mut self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            return upload_finished(remote, &self.tmp);
        }
        if fs::exists(&self.target) {
            if !self.opts.overwrite {
                return Err(Error::new(
                    ErrorKind::Exists,
                    format!(
                        "{}: exists (set overwrite to replace it)",
                        self.target.display()
                    ),
                ));
            }
            check_replaceable(&self.target)?;
            fs::publish_dir(
                &self.tmp,
                &self.target,
                fs::Existing::Replace,
                fs::Flush::Directories,
            )
        } else {
            fs::publish_dir(
                &self.tmp,
                &self.target,
                fs::Existing::Keep,
                fs::Flush::Directories,
            )
        }
    }
}

impl Drop for DatasetWriter {
    /// Without `finish`, the write is abandoned: in-flight tiles are waited for and the
    /// temporary directory is removed.
    fn drop(&mut self) {
        while self.in_flight > 0 {
            if self.rx.recv().is_err() {
                break;
            }
            self.in_flight -= 1;
        }
        #[cfg(feature = "remote")]
        let spill = self.remote.is_some();
        #[cfg(not(feature = "remote"))]
        let spill = false;
        if self.state != State::Finished || spill {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Where an encoded tile goes: a file of the temporary directory, or an object.
struct TileSink {
    path: PathBuf,
    #[cfg(feature = "remote")]
    remote: Option<std::sync::Arc<crate::storage::remote::ObjectRoot>>,
    rel: String,
}

impl TileSink {
    fn write(&self, blob: Vec<u8>) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            return remote.put(&self.rel, bytes::Bytes::from(blob));
        }
        let _ = &self.rel;
        fs::write_synced(&self.path, &blob)
    }
}

/// Uploads what `finish` left in the spill directory — every file but the tiles (already
/// uploaded) and the spill — then `manifest.json`, last.
#[cfg(feature = "remote")]
fn upload_finished(
    remote: &std::sync::Arc<crate::storage::remote::ObjectRoot>,
    tmp: &Path,
) -> Result<()> {
    remote.put_dir(tmp, |rel, is_dir| {
        let hidden = rel.rsplit('/').next().is_some_and(|n| n.starts_with('.'));
        if is_dir {
            rel != paths::TILES_DIR
        } else {
            rel != paths::MANIFEST && !hidden
        }
    })?;
    remote.put_file(paths::MANIFEST, &tmp.join(paths::MANIFEST))
}

fn encode_and_write(
    rows: &Pending,
    n_genes: u32,
    opts: EncodeOptions,
    sink: &TileSink,
) -> Result<TileStat> {
    let csr = CsrRef {
        n_genes,
        indptr: &rows.indptr,
        indices: &rows.indices,
        values: &rows.values,
    };
    let blob = tile::encode_tile(&csr, opts)?;
    let bytes = blob.len() as u64;
    sink.write(blob)?;
    Ok(TileStat {
        cells: rows.rows(),
        nnz: rows.indices.len() as u64,
        bytes,
    })
}
