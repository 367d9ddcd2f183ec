//! Reading a dataset: the manifest, whole tiles, and gathers of arbitrary cells.
//!
//! A `Dataset` is `Send + Sync`: gathers from several threads share two caches, each behind
//! its own lock that is never held while a tile is read or decoded:
//! * a small LRU of decoded tiles (`TILE_CACHE`, default 2), so that consecutive batches
//!   drawn from the same tiles decode them once;
//! * the indptr of every tile whose header has been read, so that `batch_nnz` and the
//!   planning of a gather touch the disk once per tile (8 bytes per cell at most).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::{Error, ErrorKind, Result};
use crate::pool;
use crate::storage::Root;
use crate::tile::{self, Tile, TileHeader, ValuesOut, CHUNK_ENTRY_SIZE, HEADER_SIZE};

use arrow_array::RecordBatchReader;
use arrow_schema::SchemaRef;

use super::manifest::Manifest;
use super::obs::{ObsCounters, ObsMeta, ObsSchema};
use super::params::ReaderParam;
use super::{npy, paths, var};

/// Decoded tiles kept by default.
pub const DEFAULT_TILE_CACHE: usize = 2;

/// A summary of an open dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetInfo {
    pub n_cells: u64,
    pub n_genes: u32,
    pub version: u32,
    pub n_tiles: u64,
    pub tile_size: u64,
    /// Sum of the tiles' stored nonzeros.
    pub nnz: u64,
    pub has_gene_order: bool,
    pub has_var_names: bool,
    pub has_var_table: bool,
    pub has_obs: bool,
}

/// One tile, decoded (counts as int32; converted on copy when float32 is asked for).
#[derive(Debug)]
pub struct DecodedTile {
    pub indptr: Arc<[i64]>,
    pub indices: Vec<i32>,
    pub values: Vec<i32>,
}

/// An open deltacells dataset.
pub struct Dataset {
    /// The directory, or the URL of an object-store prefix (for messages).
    root: PathBuf,
    /// Where the bytes are.
    store: Root,
    /// Tiles of a dataset on an object store.
    #[cfg(feature = "remote")]
    remote: Option<super::remote_tiles::RemoteTiles>,
    manifest: Manifest,
    /// First global cell of each tile, then n_cells (n_tiles + 1 entries).
    starts: Vec<u64>,
    threads: AtomicUsize,
    cache_capacity: AtomicUsize,
    verify_crc: AtomicBool,
    /// Decoded tiles, least recently used first.
    cache: Mutex<Vec<(u64, Arc<DecodedTile>)>>,
    indptrs: RwLock<HashMap<u64, Arc<[i64]>>>,
    gene_order: OnceLock<Result<Vec<i32>>>,
    var_names: OnceLock<Result<Vec<String>>>,
    obs: OnceLock<Result<ObsMeta>>,
    /// Explicit obs cache directory (`None`: the environment decides).
    cache_dir: RwLock<Option<PathBuf>>,
    obs_counters: ObsCounters,
}

/// Where every requested row comes from and where it goes; made by `Dataset::plan_gather`.
#[derive(Debug, Clone)]
pub struct GatherPlan {
    /// Distinct tiles needed, in first-use order.
    tiles: Vec<u64>,
    /// For each requested row: index into `tiles`, and the row within that tile.
    row_tile: Vec<usize>,
    row_local: Vec<u64>,
    /// Output offsets (n + 1 entries): row i goes to [offsets[i], offsets[i+1]).
    offsets: Vec<i64>,
}

impl GatherPlan {
    /// Nonzeros the gather produces.
    pub fn nnz(&self) -> u64 {
        *self.offsets.last().unwrap_or(&0) as u64
    }
    /// Rows requested.
    pub fn n_rows(&self) -> usize {
        self.row_tile.len()
    }
}

fn other_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::io(path, &e).context(what)
}

impl Dataset {
    /// Opens the dataset at `path` and validates its manifest.
    ///
    /// Errors: `NotFound` (no such directory, or no `manifest.json`: an incomplete dataset),
    /// `Format` / `Unsupported` (see `Manifest::parse`), `Io`.
    pub fn open(path: impl AsRef<Path>) -> Result<Dataset> {
        let root = path.as_ref().to_path_buf();
        let meta = std::fs::metadata(&root).map_err(|e| Error::io(&root, &e))?;
        if !meta.is_dir() {
            return Err(Error::format(format!(
                "{}: not a directory; a deltacells dataset is a directory",
                root.display()
            )));
        }
        if crate::storage::fs::is_temp_name(&root) {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: the temporary directory of an unfinished write, not a dataset",
                    root.display()
                ),
            ));
        }
        let manifest_path = root.join(paths::MANIFEST);
        let text = match std::fs::read(&manifest_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{}: incomplete dataset: no manifest.json (it is written last, so the write did not finish)",
                        root.display()
                    ),
                ))
            }
            Err(e) => return Err(Error::io(&manifest_path, &e)),
        };
        let manifest = Manifest::parse(&text).map_err(|e| e.context(root.display()))?;
        Ok(Self::from_manifest(Root::Local(root), manifest))
    }

    /// Opens the dataset at `location` — a path, `file://` URL, or an object-store URL
    /// (`s3://bucket/prefix`, `gs://…`, `az://…`, `http(s)://…`) — with `options`
    /// (`key=value`, see `storage::Options`).
    ///
    /// Errors: those of `open`; `InvalidArgument` (a bad URL or option), `Unsupported` (a
    /// URL in a build without the `remote` feature), `Io` (after the retries, naming the URL,
    /// the operation and the status or transport error).
    pub fn open_url(location: &str, options: &[&str]) -> Result<Dataset> {
        match Root::parse(location, options)? {
            Root::Local(p) => Dataset::open(p),
            #[cfg(feature = "remote")]
            root @ Root::Remote(_) => Dataset::open_remote(root),
        }
    }

    #[cfg(feature = "remote")]
    fn open_remote(root: Root) -> Result<Dataset> {
        let text = match root.read(paths::MANIFEST) {
            Ok(t) => t,
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{}: no dataset there: no manifest.json (a dataset's manifest is written last, so an unfinished write has none)",
                        root.display()
                    ),
                ))
            }
            Err(e) => return Err(e),
        };
        let manifest = Manifest::parse(&text).map_err(|e| e.context(root.display()))?;
        Ok(Self::from_manifest(root, manifest))
    }

    fn from_manifest(store: Root, manifest: Manifest) -> Dataset {
        let root = match &store {
            Root::Local(p) => p.clone(),
            #[cfg(feature = "remote")]
            Root::Remote(r) => PathBuf::from(r.url().url.clone()),
        };
        #[cfg(feature = "remote")]
        let remote = store
            .remote()
            .map(|r| super::remote_tiles::RemoteTiles::new(r.clone(), manifest.tile_bytes.clone()));
        let mut starts = Vec::with_capacity(manifest.tile_cells.len() + 1);
        let mut acc = 0u64;
        starts.push(0);
        for &c in &manifest.tile_cells {
            acc += c;
            starts.push(acc);
        }
        Dataset {
            root,
            store,
            #[cfg(feature = "remote")]
            remote,
            manifest,
            starts,
            threads: AtomicUsize::new(0),
            cache_capacity: AtomicUsize::new(DEFAULT_TILE_CACHE),
            verify_crc: AtomicBool::new(true),
            cache: Mutex::new(Vec::new()),
            indptrs: RwLock::new(HashMap::new()),
            gene_order: OnceLock::new(),
            var_names: OnceLock::new(),
            obs: OnceLock::new(),
            cache_dir: RwLock::new(None),
            obs_counters: ObsCounters::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn info(&self) -> DatasetInfo {
        let m = &self.manifest;
        DatasetInfo {
            n_cells: m.n_cells,
            n_genes: m.n_genes as u32,
            version: m.version as u32,
            n_tiles: m.n_tiles(),
            tile_size: m.tile_size,
            nnz: m.nnz(),
            has_gene_order: m.has_gene_order,
            has_var_names: m.has_var_names,
            has_var_table: m.has_var_table,
            has_obs: m.has_obs,
        }
    }

    /// Threads of one call (0 = `DELTACELLS_NUM_THREADS` or all cores).
    pub fn set_threads(&self, threads: usize) {
        self.threads.store(threads, Ordering::Relaxed);
    }

    /// Decoded tiles kept between calls (0 disables the cache). Shrinks it at once.
    pub fn set_tile_cache(&self, tiles: usize) {
        self.cache_capacity.store(tiles, Ordering::Relaxed);
        let mut cache = self.lock_cache();
        let excess = cache.len().saturating_sub(tiles);
        cache.drain(..excess);
    }

    /// Whether tiles' CRC-32 is checked before decoding (default true).
    pub fn set_verify_crc(&self, verify: bool) {
        self.verify_crc.store(verify, Ordering::Relaxed);
    }

    /// Sets `param` to `value` after checking it against `param.bounds()` (the C API's
    /// `dc_dataset_set`). Safe while other threads use the dataset; calls already running
    /// keep their settings.
    pub fn set_param(&self, param: ReaderParam, value: i64) -> Result<()> {
        let v = param.check(value)?;
        match param {
            ReaderParam::Threads => self.set_threads(v as usize),
            ReaderParam::TileCache => self.set_tile_cache(v as usize),
            ReaderParam::VerifyCrc => self.set_verify_crc(v == 1),
        }
        Ok(())
    }

    /// Tiles currently in the decoded-tile cache (for tests and diagnostics).
    pub fn cached_tiles(&self) -> Vec<u64> {
        self.lock_cache().iter().map(|(t, _)| *t).collect()
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Arc<DecodedTile>)>> {
        // The cache holds only complete entries, so a panic elsewhere cannot leave it torn.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn resolved_threads(&self) -> usize {
        pool::resolve_threads(self.threads.load(Ordering::Relaxed))
    }

    /// Tile `t`: (first global cell, cells, stored nonzeros).
    pub fn tile_bounds(&self, t: u64) -> Result<(u64, u64, u64)> {
        self.check_tile(t)?;
        let i = t as usize;
        Ok((
            self.starts[i],
            self.manifest.tile_cells[i],
            self.manifest.tile_nnz[i],
        ))
    }

    fn check_tile(&self, t: u64) -> Result<()> {
        if t >= self.manifest.n_tiles() {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "tile {t} is out of range: the dataset has {} tiles",
                    self.manifest.n_tiles()
                ),
            ));
        }
        Ok(())
    }

    fn tile_path(&self, t: u64) -> PathBuf {
        self.root.join(paths::tile_relpath(t))
    }

    fn tile_err(&self, t: u64, e: Error) -> Error {
        e.context(format!("tile {t} ({})", self.tile_path(t).display()))
    }

    /// Opens tile `t` and checks its size against `tile_bytes[t]`.
    fn open_tile(&self, t: u64) -> Result<File> {
        let path = self.tile_path(t);
        let file =
            File::open(&path).map_err(|e| Error::io(&path, &e).context(format!("tile {t}")))?;
        let len = file
            .metadata()
            .map_err(|e| other_err(&path, &format!("tile {t}"), e))?
            .len();
        let expected = self.manifest.tile_bytes[t as usize];
        if len != expected {
            return Err(self.tile_err(
                t,
                Error::format(format!(
                    "file is {len} bytes, manifest tile_bytes[{t}] says {expected}"
                )),
            ));
        }
        Ok(file)
    }

    fn read_blob(&self, t: u64) -> Result<Vec<u8>> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            return r.take(t).map(Vec::from);
        }
        let mut file = self.open_tile(t)?;
        let expected = self.manifest.tile_bytes[t as usize];
        let mut blob = Vec::with_capacity(expected as usize);
        file.read_to_end(&mut blob)
            .map_err(|e| other_err(&self.tile_path(t), &format!("tile {t}"), e))?;
        if blob.len() as u64 != expected {
            return Err(self.tile_err(
                t,
                Error::format(format!(
                    "read {} bytes, manifest tile_bytes[{t}] says {expected} (the file changed)",
                    blob.len()
                )),
            ));
        }
        Ok(blob)
    }

    /// The header must describe the tile the manifest lists.
    fn check_header_agrees(&self, t: u64, h: &TileHeader) -> Result<()> {
        let i = t as usize;
        let m = &self.manifest;
        for (field, got, key, want) in [
            ("n_cells", h.n_cells, "tile_cells", m.tile_cells[i]),
            ("nnz", h.nnz, "tile_nnz", m.tile_nnz[i]),
            ("n_genes", h.n_genes as u64, "n_genes", m.n_genes),
            ("total_size", h.total_size, "tile_bytes", m.tile_bytes[i]),
        ] {
            if got != want {
                let key = if key == "n_genes" {
                    key.to_string()
                } else {
                    format!("{key}[{t}]")
                };
                return Err(self.tile_err(
                    t,
                    Error::format(format!(
                        "header {field} is {got}, the manifest's {key} is {want}"
                    )),
                ));
            }
        }
        Ok(())
    }

    /// Reads, validates and decodes tile `t` into new buffers.
    fn decode_owned(&self, t: u64, threads: usize) -> Result<DecodedTile> {
        let blob = self.read_blob(t)?;
        let verify = self.verify_crc.load(Ordering::Relaxed);
        let parsed = Tile::parse(&blob, verify).map_err(|e| self.tile_err(t, e))?;
        self.check_header_agrees(t, &parsed.header)?;
        let nnz = parsed.header.nnz as usize;
        let mut indptr = zeroed::<i64>(parsed.header.n_cells as usize + 1, t)?;
        let mut indices = zeroed::<i32>(nnz, t)?;
        let mut values = zeroed::<i32>(nnz, t)?;
        tile::decode_parsed(
            &parsed,
            threads,
            &mut indptr,
            &mut indices,
            ValuesOut::I32(&mut values),
        )
        .map_err(|e| self.tile_err(t, e))?;
        Ok(DecodedTile {
            indptr: indptr.into(),
            indices,
            values,
        })
    }

    fn cached(&self, t: u64) -> Option<Arc<DecodedTile>> {
        let mut cache = self.lock_cache();
        let at = cache.iter().position(|(k, _)| *k == t)?;
        let entry = cache.remove(at);
        let tile = entry.1.clone();
        cache.push(entry);
        Some(tile)
    }

    fn insert_cached(&self, t: u64, tile: Arc<DecodedTile>) {
        let cap = self.cache_capacity.load(Ordering::Relaxed);
        if cap == 0 {
            return;
        }
        let mut cache = self.lock_cache();
        cache.retain(|(k, _)| *k != t);
        cache.push((t, tile));
        let excess = cache.len().saturating_sub(cap);
        cache.drain(..excess);
    }

    /// Decodes tile `t` through the cache. Only tiles that decoded cleanly are cached.
    pub fn decoded_tile(&self, t: u64) -> Result<Arc<DecodedTile>> {
        self.check_tile(t)?;
        self.decoded_tiles(&[t], self.resolved_threads())
            .map(|mut v| v.pop().unwrap())
    }

    /// Tiles through the cache; the missing ones are decoded in parallel (no lock held).
    fn decoded_tiles(&self, tiles: &[u64], threads: usize) -> Result<Vec<Arc<DecodedTile>>> {
        let mut out: Vec<Option<Arc<DecodedTile>>> =
            tiles.iter().map(|&t| self.cached(t)).collect();
        let missing: Vec<(usize, u64)> = out
            .iter()
            .enumerate()
            .filter(|(_, d)| d.is_none())
            .map(|(i, _)| (i, tiles[i]))
            .collect();
        if !missing.is_empty() {
            // One tile: parallel over its chunks. Several: parallel over tiles.
            let per_tile = if missing.len() == 1 { threads } else { 1 };
            let decoded = pool::map(threads.min(missing.len()), missing, |(i, t)| {
                Ok((i, t, Arc::new(self.decode_owned(t, per_tile)?)))
            })?;
            for (i, t, d) in decoded {
                self.remember_indptr(t, d.indptr.clone());
                self.insert_cached(t, d.clone());
                out[i] = Some(d);
            }
        }
        Ok(out.into_iter().map(Option::unwrap).collect())
    }

    fn knows_indptr(&self, t: u64) -> bool {
        self.indptrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&t)
            || self.lock_cache().iter().any(|(k, _)| *k == t)
    }

    fn remember_indptr(&self, t: u64, indptr: Arc<[i64]>) {
        self.indptrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(t)
            .or_insert(indptr);
    }

    /// The indptr of tile `t` (n_cells + 1 entries), from the caches or from the tile's
    /// header and indptr alone (nothing is decompressed; the CRC, which covers the whole
    /// tile, is checked when the tile is decoded).
    pub fn tile_indptr(&self, t: u64) -> Result<Arc<[i64]>> {
        self.check_tile(t)?;
        if let Some(p) = self
            .indptrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&t)
        {
            return Ok(p.clone());
        }
        if let Some(d) = self.lock_cache().iter().find(|(k, _)| *k == t) {
            return Ok(d.1.indptr.clone());
        }
        let indptr: Arc<[i64]> = self.read_indptr(t)?.into();
        self.remember_indptr(t, indptr.clone());
        Ok(indptr)
    }

    fn read_indptr(&self, t: u64) -> Result<Vec<i64>> {
        if cfg!(target_endian = "big") {
            return Err(Error::unsupported(
                "deltacells tiles are little-endian; this build runs on a big-endian host",
            ));
        }
        let read_at = self.tile_reader(t)?;
        let size = self.manifest.tile_bytes[t as usize];
        let mut head = [0u8; HEADER_SIZE];
        read_at(&mut head, 0)?;
        let h = TileHeader::parse(&head).map_err(|e| self.tile_err(t, e))?;
        let fail = |rule: String| self.tile_err(t, Error::format(rule));
        if h.version != tile::FORMAT_VERSION {
            return Err(self.tile_err(
                t,
                Error::unsupported(format!(
                    "tile format version {} (byte 8); this build reads version {}",
                    h.version,
                    tile::FORMAT_VERSION
                )),
            ));
        }
        if h.flags != 0 {
            return Err(self.tile_err(
                t,
                Error::unsupported(format!(
                    "unknown tile flags 0x{:08x} (byte 12); version 2 defines none",
                    h.flags
                )),
            ));
        }
        self.check_header_agrees(t, &h)?;
        let table_end = HEADER_SIZE as u64 + CHUNK_ENTRY_SIZE as u64 * h.n_chunks as u64;
        if !h.indptr_off.is_multiple_of(8) || h.indptr_off < table_end {
            return Err(fail(format!(
                "indptr_off (byte 40) is {}, must be a multiple of 8 at or after the chunk table's end {table_end}",
                h.indptr_off
            )));
        }
        let n = h.n_cells as usize + 1;
        let end = h.indptr_off as u128 + 8 * n as u128;
        if end > size as u128 {
            return Err(fail(format!(
                "indptr of {} cells at byte {} runs past the end of the {size}-byte tile",
                h.n_cells, h.indptr_off
            )));
        }
        let mut raw = vec![0u8; 8 * n];
        read_at(&mut raw, h.indptr_off)?;
        let indptr: Vec<i64> = raw
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        if indptr[0] != 0 {
            return Err(fail(format!("indptr[0] is {}, must be 0", indptr[0])));
        }
        if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(fail(format!(
                "indptr decreases at cell {i} ({} -> {})",
                indptr[i],
                indptr[i + 1]
            )));
        }
        if indptr[n - 1] as u64 != h.nnz {
            return Err(fail(format!(
                "indptr[n_cells] is {}, the header says nnz = {}",
                indptr[n - 1],
                h.nnz
            )));
        }
        Ok(indptr)
    }

    /// Positioned reads of tile `t`: of the file, or of the whole object (one GET, held
    /// for the decode that follows) for a dataset on an object store.
    #[allow(clippy::type_complexity)]
    fn tile_reader(&self, t: u64) -> Result<Box<dyn Fn(&mut [u8], u64) -> Result<()> + '_>> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            let blob = r.peek(t)?;
            return Ok(Box::new(move |buf: &mut [u8], at: u64| {
                let at = at as usize;
                match blob.get(at..at + buf.len()) {
                    Some(src) => {
                        buf.copy_from_slice(src);
                        Ok(())
                    }
                    None => Err(self.tile_err(
                        t,
                        Error::format(format!(
                            "read of {} bytes at {at} past the end of the {}-byte tile",
                            buf.len(),
                            blob.len()
                        )),
                    )),
                }
            }));
        }
        let file = self.open_tile(t)?;
        let path = self.tile_path(t);
        Ok(Box::new(move |buf: &mut [u8], at: u64| {
            file.read_exact_at(buf, at)
                .map_err(|e| other_err(&path, &format!("tile {t}"), e))
        }))
    }

    /// Fetches the tiles of `tiles` that a call will read, concurrently (object stores;
    /// nothing for local datasets, whose reads are cheap to start).
    fn prefetch_remote(&self, tiles: &[u64], needed: impl Fn(u64) -> bool) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            let want: Vec<u64> = tiles.iter().copied().filter(|&t| needed(t)).collect();
            return r.prefetch(&want);
        }
        let _ = (tiles, needed);
        Ok(())
    }

    /// Decodes tile `t` into caller buffers: `indptr` (n_cells + 1, local to the tile),
    /// `indices` and `values` (at least the tile's nnz each). Returns nnz.
    ///
    /// Errors: `OutOfRange` (tile), `BufferTooSmall { needed: nnz }`, `InvalidArgument`
    /// (indptr too short), and any error of reading/validating/decoding the tile (its header
    /// must agree with the manifest).
    pub fn read_tile(
        &self,
        t: u64,
        indptr: &mut [i64],
        indices: &mut [i32],
        values: ValuesOut<'_>,
    ) -> Result<u64> {
        let (_, cells, nnz) = self.tile_bounds(t)?;
        let have = indices.len().min(values.len()) as u64;
        if have < nnz {
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: nnz },
                format!("tile {t}: output holds {have} nonzeros, the tile has {nnz}"),
            ));
        }
        if (indptr.len() as u64) < cells + 1 {
            return Err(Error::invalid_argument(format!(
                "tile {t}: indptr holds {} entries, the tile needs n_cells + 1 = {}",
                indptr.len(),
                cells + 1
            )));
        }
        if let Some(d) = self.cached(t) {
            indptr[..d.indptr.len()].copy_from_slice(&d.indptr);
            let n = d.indices.len();
            indices[..n].copy_from_slice(&d.indices);
            copy_values(values, 0, &d.values);
            return Ok(n as u64);
        }
        // Not cached: decode straight into the caller's buffers (a sequential scan should
        // not pay for a copy, nor evict the tiles a random-access workload is reusing).
        let blob = self.read_blob(t)?;
        let verify = self.verify_crc.load(Ordering::Relaxed);
        let parsed = Tile::parse(&blob, verify).map_err(|e| self.tile_err(t, e))?;
        self.check_header_agrees(t, &parsed.header)?;
        tile::decode_parsed(&parsed, self.resolved_threads(), indptr, indices, values)
            .map_err(|e| self.tile_err(t, e))
    }

    /// Locates every requested cell and sizes the result (reads tile headers and indptrs
    /// only). Errors: `OutOfRange` naming the first bad cell.
    pub fn plan_gather(&self, cells: &[u64]) -> Result<GatherPlan> {
        let n_cells = self.manifest.n_cells;
        let mut slot_of: HashMap<u64, usize> = HashMap::new();
        let mut tiles = Vec::new();
        let mut row_tile = Vec::with_capacity(cells.len());
        let mut row_local = Vec::with_capacity(cells.len());
        for (i, &c) in cells.iter().enumerate() {
            if c >= n_cells {
                return Err(Error::new(
                    ErrorKind::OutOfRange,
                    format!(
                        "cells[{i}] = {c} is out of range: the dataset has n_cells = {n_cells}"
                    ),
                ));
            }
            let t = (self.starts.partition_point(|&s| s <= c) - 1) as u64;
            let slot = *slot_of.entry(t).or_insert_with(|| {
                tiles.push(t);
                tiles.len() - 1
            });
            row_tile.push(slot);
            row_local.push(c - self.starts[t as usize]);
        }
        self.prefetch_remote(&tiles, |t| !self.knows_indptr(t))?;
        let threads = self.resolved_threads().min(tiles.len().max(1));
        let indptrs = pool::map(threads, tiles.clone(), |t| self.tile_indptr(t))?;
        let mut offsets = Vec::with_capacity(cells.len() + 1);
        let mut acc = 0i64;
        offsets.push(0);
        for (&slot, &local) in row_tile.iter().zip(&row_local) {
            let p = &indptrs[slot];
            acc += p[local as usize + 1] - p[local as usize];
            offsets.push(acc);
        }
        Ok(GatherPlan {
            tiles,
            row_tile,
            row_local,
            offsets,
        })
    }

    /// Nonzeros of the given cells (repeats count again), from headers and indptrs only.
    pub fn batch_nnz(&self, cells: &[u64]) -> Result<u64> {
        Ok(self.plan_gather(cells)?.nnz())
    }

    /// Gathers rows `cells` (any order, repeats allowed) into CSR: `indptr` (n + 1),
    /// `indices` and `values` (at least the result's nnz each). Returns nnz.
    pub fn gather(
        &self,
        cells: &[u64],
        indptr: &mut [i64],
        indices: &mut [i32],
        values: ValuesOut<'_>,
    ) -> Result<u64> {
        let plan = self.plan_gather(cells)?;
        self.gather_planned(&plan, indptr, indices, values)
    }

    /// Executes a plan of `plan_gather`. Needed tiles are decoded a few at a time (as many
    /// as there are threads), in parallel, so memory stays bounded whatever the request.
    pub fn gather_planned(
        &self,
        plan: &GatherPlan,
        indptr: &mut [i64],
        indices: &mut [i32],
        mut values: ValuesOut<'_>,
    ) -> Result<u64> {
        let nnz = plan.nnz();
        let have = indices.len().min(values.len()) as u64;
        if have < nnz {
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: nnz },
                format!(
                    "output holds {have} nonzeros, the {} requested cells have {nnz}",
                    plan.n_rows()
                ),
            ));
        }
        if indptr.len() < plan.n_rows() + 1 {
            return Err(Error::invalid_argument(format!(
                "indptr holds {} entries, {} cells need n + 1 = {}",
                indptr.len(),
                plan.n_rows(),
                plan.n_rows() + 1
            )));
        }
        indptr[..plan.offsets.len()].copy_from_slice(&plan.offsets);
        self.prefetch_remote(&plan.tiles, |t| {
            !self.lock_cache().iter().any(|(k, _)| *k == t)
        })?;

        // Rows of each needed tile.
        let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); plan.tiles.len()];
        for (i, &slot) in plan.row_tile.iter().enumerate() {
            rows_of[slot].push(i);
        }
        let threads = self.resolved_threads();
        let group = threads.max(1);
        for first in (0..plan.tiles.len()).step_by(group) {
            let last = (first + group).min(plan.tiles.len());
            let decoded = self.decoded_tiles(&plan.tiles[first..last], threads)?;
            for (k, d) in decoded.iter().enumerate() {
                let slot = first + k;
                let t = plan.tiles[slot];
                for &i in &rows_of[slot] {
                    let local = plan.row_local[i] as usize;
                    let (a, b) = (d.indptr[local] as usize, d.indptr[local + 1] as usize);
                    let (o, e) = (plan.offsets[i] as usize, plan.offsets[i + 1] as usize);
                    if b - a != e - o {
                        return Err(self.tile_err(
                            t,
                            Error::format(format!(
                                "cell {local} has {} nonzeros, its indptr read earlier said {} (the tile changed while being read)",
                                b - a,
                                e - o
                            )),
                        ));
                    }
                    indices[o..e].copy_from_slice(&d.indices[a..b]);
                    copy_values_at(&mut values, o, &d.values[a..b]);
                }
            }
        }
        Ok(nnz)
    }

    /// `gene_order.npy`: output column j was input column order[j]. `NotFound` when the
    /// dataset has none; `Format` if the file is missing or invalid though the manifest
    /// lists it.
    pub fn gene_order(&self) -> Result<&[i32]> {
        if !self.manifest.has_gene_order {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: the dataset has no gene order (has_gene_order is false)",
                    self.root.display()
                ),
            ));
        }
        self.gene_order
            .get_or_init(|| self.load_gene_order())
            .as_deref()
            .map_err(Clone::clone)
    }

    fn load_gene_order(&self) -> Result<Vec<i32>> {
        let bytes = self.read_listed(paths::GENE_ORDER, "has_gene_order")?;
        let name = self.root.join(paths::GENE_ORDER).display().to_string();
        let n = self.manifest.n_genes;
        let order = npy::read_i32(&bytes, n, &name)?;
        let mut seen = vec![false; n as usize];
        for (j, &g) in order.iter().enumerate() {
            if g < 0 || g as u64 >= n || seen[g as usize] {
                return Err(Error::format(format!(
                    "{name}: entry {j} is {g}; gene_order must be a permutation of 0..{n} (n_genes)"
                )));
            }
            seen[g as usize] = true;
        }
        Ok(order)
    }

    /// Gene names in output (column) order, from `var_names.txt`. `NotFound` when absent.
    pub fn var_names(&self) -> Result<&[String]> {
        if !self.manifest.has_var_names {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: the dataset has no gene names (has_var_names is false)",
                    self.root.display()
                ),
            ));
        }
        self.var_names
            .get_or_init(|| self.load_var_names())
            .as_deref()
            .map_err(Clone::clone)
    }

    fn load_var_names(&self) -> Result<Vec<String>> {
        let bytes = self.read_listed(paths::VAR_NAMES, "has_var_names")?;
        let name = self.root.join(paths::VAR_NAMES).display().to_string();
        let text = String::from_utf8(bytes)
            .map_err(|e| Error::format(format!("{name}: not valid UTF-8 ({e})")))?;
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let names: Vec<String> = if body.is_empty() && text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').map(str::to_string).collect()
        };
        if names.len() as u64 != self.manifest.n_genes {
            return Err(Error::format(format!(
                "{name}: {} lines, must be exactly n_genes = {} (one name per line)",
                names.len(),
                self.manifest.n_genes
            )));
        }
        Ok(names)
    }

    /// The gene table (`var.parquet`, one row per output column, in output order) as a
    /// stream of record batches. `NotFound` when the dataset has none; `Format` when the
    /// file is missing, unreadable or has a row count other than n_genes. The stream owns
    /// its file and outlives the dataset.
    pub fn var_table(&self) -> Result<Box<dyn RecordBatchReader + Send>> {
        if !self.manifest.has_var_table {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: the dataset has no gene table (has_var_table is false)",
                    self.root.display()
                ),
            ));
        }
        var::read_table(&self.store, paths::VAR_TABLE, self.manifest.n_genes)
    }

    fn obs_meta(&self) -> Result<&ObsMeta> {
        if !self.manifest.has_obs {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: the dataset has no obs (has_obs is false)",
                    self.root.display()
                ),
            ));
        }
        self.obs
            .get_or_init(|| ObsMeta::load(&self.store, &self.manifest))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The stored obs schema (`obs/schema.json`). `NotFound` without obs.
    pub fn obs_columns(&self) -> Result<&ObsSchema> {
        Ok(&self.obs_meta()?.schema)
    }

    /// The Arrow schema of `obs(None)`: category columns as dictionaries (their stored code
    /// type as keys, utf8 values), the others as stored. `NotFound` without obs.
    pub fn obs_schema(&self) -> Result<SchemaRef> {
        let meta = self.obs_meta()?;
        let all: Vec<usize> = (0..meta.schema.columns.len()).collect();
        Ok(meta.schema.output_schema(&all))
    }

    /// Obs columns (`None`: all of them, in schema order), one record batch per tile in tile
    /// order. Category columns arrive as `DictionaryArray`s over the global vocabulary
    /// (code -1 is null). Columns are localised into the cache (see `obs_cache_dir`) the
    /// first time and read from there afterwards; without a writable cache the shards are
    /// read directly. The requested columns are held in memory by the returned stream,
    /// which outlives the dataset.
    ///
    /// Errors: `NotFound` (no obs, or an unknown column, named), `InvalidArgument` (a column
    /// requested twice), `Format` (schema.json, shard size, row groups, schema or codes
    /// disagree with the manifest), `Io`.
    pub fn obs(&self, columns: Option<&[&str]>) -> Result<Box<dyn RecordBatchReader + Send>> {
        let meta = self.obs_meta()?;
        let idx = meta.resolve(columns)?;
        let data = meta.read(&idx, self.obs_cache_dir(), &self.obs_counters)?;
        meta.stream(&idx, data)
    }

    /// Checks every obs shard against the manifest: size, row groups and schema (`Format`),
    /// SHA-256 and the fingerprint (`Checksum`). Not done by `obs`, which checks only the
    /// structure of the shards it reads.
    pub fn verify_obs(&self) -> Result<()> {
        self.obs_meta()?.verify()
    }

    /// Sets the obs cache directory (`None`: `$DELTACELLS_CACHE`, else
    /// `$XDG_CACHE_HOME/deltacells`, else `~/.cache/deltacells`).
    pub fn set_cache_dir(&self, dir: Option<PathBuf>) {
        *self.cache_dir.write().unwrap_or_else(|p| p.into_inner()) = dir;
    }

    /// The obs cache root in effect (columns go to `<root>/<fingerprint>/obs/`), if any.
    pub fn obs_cache_dir(&self) -> Option<PathBuf> {
        if let Some(d) = self
            .cache_dir
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Some(d);
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        env("DELTACELLS_CACHE")
            .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("deltacells")))
            .or_else(|| env("HOME").map(|p| p.join(".cache").join("deltacells")))
    }

    /// How many times obs shards were opened to read column data (diagnostics; the cache
    /// makes this stay put on a second read).
    pub fn obs_shard_reads(&self) -> u64 {
        self.obs_counters.shard_reads.load(Ordering::Relaxed)
    }

    /// Reads an optional file the manifest says exists.
    fn read_listed(&self, rel: &str, flag: &str) -> Result<Vec<u8>> {
        self.store.read(rel).map_err(|e| {
            if e.kind == ErrorKind::NotFound {
                Error::format(format!(
                    "{}: missing, though the manifest's {flag} is true",
                    self.store.display_rel(rel)
                ))
            } else {
                e
            }
        })
    }

    /// Where the dataset's bytes are (a directory or an object-store prefix).
    pub fn store(&self) -> &Root {
        &self.store
    }
}

/// A zeroed buffer for decoding tile `t`; running out of memory is an error, not an abort
/// (a tile's header may claim far more nonzeros than the machine holds).
fn zeroed<T: Copy + Default>(n: usize, t: u64) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::limit(format!(
            "tile {t}: cannot allocate {n} elements to decode it (out of memory)"
        ))
    })?;
    v.resize(n, T::default());
    Ok(v)
}

fn copy_values(values: ValuesOut<'_>, at: usize, src: &[i32]) {
    let mut values = values;
    copy_values_at(&mut values, at, src);
}

fn copy_values_at(values: &mut ValuesOut<'_>, at: usize, src: &[i32]) {
    match values {
        ValuesOut::I32(v) => v[at..at + src.len()].copy_from_slice(src),
        ValuesOut::F32(v) => {
            for (o, &s) in v[at..at + src.len()].iter_mut().zip(src) {
                *o = s as f32;
            }
        }
    }
}
