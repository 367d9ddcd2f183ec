//! Reading a dataset: the manifest, whole tiles, and (in `gather` and `batches`) any cells.
//!
//! A `Dataset` is `Send + Sync`: calls from several threads share one decoded-data cache
//! (`cache`), a byte budget (`set_cache_bytes`, default 256 MiB) of decompressed chunks and
//! tile indexes (header, chunk table, indptr), and a few reusable read buffers. No lock is
//! held while a tile is read or decompressed.
//!
//! When the CRC is checked: every time a tile's bytes are read to decompress any of its
//! chunks (or to decode it whole), the whole tile is read and its CRC-32 checked before
//! anything in it is decompressed. A chunk served from the cache was checked when its tile
//! was read. Planning a gather (`batch_nnz`, the sizing step of `gather`) reads only the
//! header, chunk table and indptr, which are checked structurally; the CRC, which covers the
//! whole tile, is checked when the tile is read for its data.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use crate::error::{Error, ErrorKind, Result};
use crate::pool;
use crate::storage::{open_reopening, OpenDir, Root};
use crate::tile::{self, Tile, TileHeader, TileIndex, ValuesOut, HEADER_SIZE};

use arrow_array::RecordBatchReader;
use arrow_schema::SchemaRef;

use super::cache::{DecodedCache, Entry, Key, Lookup, DEFAULT_CACHE_BYTES};
use super::manifest::Manifest;
use super::obs::{ObsCounters, ObsMeta, ObsSchema};
use super::params::ReaderParam;
use super::{npy, paths, var};

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

/// Work counters (diagnostics and tests): what the reader actually read and decompressed.
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// Whole tiles read (for their data; index reads are not counted).
    pub tiles_read: AtomicU64,
    /// Chunks decompressed (by gathers and batches; whole-tile reads are not counted).
    pub chunks_decompressed: AtomicU64,
}

/// Read buffers kept for reuse (whole tiles are read into them), so that a read allocates
/// nothing proportional to a tile once the dataset is warm.
#[derive(Default)]
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// Buffers kept beyond the ones in use.
const KEPT_BUFFERS: usize = 4;

impl BufferPool {
    fn take(&self) -> Vec<u8> {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
    }
    fn give(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < KEPT_BUFFERS {
            free.push(buf);
        }
    }
}

/// A tile read whole and validated (`Tile::parse`, header agrees with the manifest). Its
/// buffer goes back to the dataset's pool when dropped.
pub(crate) struct LoadedTile {
    bytes: Vec<u8>,
    header: TileHeader,
    chunks: Vec<tile::ChunkEntry>,
    n_exceptions: u64,
    pool: Arc<BufferPool>,
}

impl LoadedTile {
    /// The validated view (no check is repeated).
    pub(crate) fn view(&self) -> Tile<'_> {
        Tile::from_parts(
            &self.bytes,
            self.header,
            self.chunks.clone(),
            self.n_exceptions,
        )
    }
}

impl Drop for LoadedTile {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.bytes));
    }
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
    verify_crc: AtomicBool,
    cache: DecodedCache,
    buffers: Arc<BufferPool>,
    /// Tiles read whole and still held by some call: another call needing the same tile
    /// meanwhile shares it instead of reading it again.
    open_tiles: Mutex<HashMap<u64, Weak<LoadedTile>>>,
    counters: ReadCounters,
    gene_order: OnceLock<Result<Vec<i32>>>,
    var_names: OnceLock<Result<Vec<String>>>,
    obs: OnceLock<Result<ObsMeta>>,
    /// Explicit obs cache directory (`None`: the environment decides).
    cache_dir: RwLock<Option<PathBuf>>,
    obs_counters: ObsCounters,
}

fn other_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::io(path, &e).context(what)
}

impl Dataset {
    /// Opens the dataset at `path` and validates its manifest.
    ///
    /// A writer replacing the dataset during the open does not fail it: the open begins
    /// again on the new dataset (`storage::open_reopening`).
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
        // Held open: every member is read relative to this directory, so a writer
        // replacing the dataset at `root` meanwhile never mixes its files into this handle
        // (storage::dir). One replacing it between the open and the manifest's read has
        // deleted that manifest: the open begins again on the new dataset.
        let (dir, text) = open_reopening(&root, || {
            let dir = Arc::new(OpenDir::open(&root).map_err(|e| (e, false))?);
            match dir.read(paths::MANIFEST) {
                Ok(text) => Ok((dir, text)),
                Err(e) if e.kind == ErrorKind::NotFound => {
                    let replaced = dir.deleted();
                    let e = if replaced {
                        e
                    } else {
                        Error::new(
                            ErrorKind::NotFound,
                            format!(
                                "{}: incomplete dataset: no manifest.json (it is written last, so the write did not finish)",
                                root.display()
                            ),
                        )
                    };
                    Err((e, replaced))
                }
                Err(e) => Err((e, false)),
            }
        })?;
        let manifest = Manifest::parse(&text).map_err(|e| e.context(root.display()))?;
        Ok(Self::from_manifest(Root::Open(dir), manifest))
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
            Root::Open(d) => Dataset::open(d.path()),
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
        let root = PathBuf::from(store.display());
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
            verify_crc: AtomicBool::new(true),
            cache: DecodedCache::new(DEFAULT_CACHE_BYTES),
            buffers: Arc::default(),
            open_tiles: Mutex::new(HashMap::new()),
            counters: ReadCounters::default(),
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

    /// The decoded-data cache budget in bytes (0 disables it): decompressed chunks (4 bytes
    /// per nonzero, plus 4 per cell and their exceptions) and tile indexes (8 bytes per cell
    /// plus 96 per chunk), least recently used evicted first. Shrinking evicts at once.
    pub fn set_cache_bytes(&self, bytes: usize) {
        self.cache.set_budget(bytes);
    }

    pub fn cache_bytes(&self) -> usize {
        self.cache.budget()
    }

    /// `DC_DATASET_TILE_CACHE` since contract 1.1: a budget of `tiles` times the decoded
    /// size of this dataset's largest tile (`tile_cache_unit`).
    pub fn set_tile_cache(&self, tiles: usize) {
        self.set_cache_bytes(tiles.saturating_mul(self.tile_cache_unit()));
    }

    /// Cache bytes one tile needs: 4 bytes per nonzero of the largest tile plus 12 bytes
    /// per cell of the largest tile (chunk bounds and index).
    pub fn tile_cache_unit(&self) -> usize {
        let m = &self.manifest;
        let nnz = m.tile_nnz.iter().copied().max().unwrap_or(0);
        let cells = m.tile_cells.iter().copied().max().unwrap_or(0);
        (4 * nnz + 12 * (cells + 1) + 4096) as usize
    }

    /// Whether tiles' CRC-32 is checked when they are read (default true).
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
            ReaderParam::CacheBytes => self.set_cache_bytes(v as usize),
        }
        Ok(())
    }

    /// The chunks in the decoded-data cache, as (tile, chunk) (tests and diagnostics).
    pub fn cached_chunks(&self) -> Vec<(u64, usize)> {
        self.cache.chunks()
    }

    /// Bytes the decoded-data cache holds now.
    pub fn cached_bytes(&self) -> usize {
        self.cache.used_bytes()
    }

    /// What the reader has read and decompressed so far.
    pub fn counters(&self) -> &ReadCounters {
        &self.counters
    }

    pub(crate) fn cache(&self) -> &DecodedCache {
        &self.cache
    }

    pub(crate) fn resolved_threads(&self) -> usize {
        pool::resolve_threads(self.threads.load(Ordering::Relaxed))
    }

    /// First global cell of each tile, then n_cells.
    pub(crate) fn starts(&self) -> &[u64] {
        &self.starts
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

    /// Prefixes an error with the tile and its path.
    pub(crate) fn tile_err(&self, t: u64, e: Error) -> Error {
        e.context(format!("tile {t} ({})", self.tile_path(t).display()))
    }

    /// Opens tile `t` and checks its size against `tile_bytes[t]`.
    fn open_tile(&self, t: u64) -> Result<File> {
        let path = self.tile_path(t);
        let file = self
            .store
            .open_file(&paths::tile_relpath(t))
            .map_err(|e| e.context(format!("tile {t}")))?;
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

    /// Reads tile `t` whole into a pooled buffer.
    fn read_blob(&self, t: u64) -> Result<Vec<u8>> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            return r.take(t).map(Vec::from);
        }
        let mut file = self.open_tile(t)?;
        let expected = self.manifest.tile_bytes[t as usize];
        let mut blob = self.buffers.take();
        blob.clear();
        crate::memory::try_reserve_huge(&mut blob, expected as usize).map_err(|_| {
            self.tile_err(
                t,
                Error::limit(format!("cannot allocate {expected} bytes to read it")),
            )
        })?;
        let read = file.read_to_end(&mut blob);
        if let Err(e) = read {
            self.buffers.give(blob);
            return Err(other_err(&self.tile_path(t), &format!("tile {t}"), e));
        }
        if blob.len() as u64 != expected {
            let got = blob.len();
            self.buffers.give(blob);
            return Err(self.tile_err(
                t,
                Error::format(format!(
                    "read {got} bytes, manifest tile_bytes[{t}] says {expected} (the file changed)"
                )),
            ));
        }
        Ok(blob)
    }

    /// Reads tile `t` whole and validates it: structure, CRC (if enabled), agreement with
    /// the manifest.
    pub(crate) fn load_tile(&self, t: u64) -> Result<LoadedTile> {
        let bytes = self.read_blob(t)?;
        self.counters.tiles_read.fetch_add(1, Ordering::Relaxed);
        let verify = self.verify_crc.load(Ordering::Relaxed);
        let parsed = match Tile::parse(&bytes, verify) {
            Ok(p) => (p.header, p.chunks, p.n_exceptions),
            Err(e) => {
                self.buffers.give(bytes);
                return Err(self.tile_err(t, e));
            }
        };
        let loaded = LoadedTile {
            bytes,
            header: parsed.0,
            chunks: parsed.1,
            n_exceptions: parsed.2,
            pool: self.buffers.clone(),
        };
        self.check_header_agrees(t, &loaded.header)?;
        Ok(loaded)
    }

    /// Tile `t` read whole and validated, shared with any other call holding it now.
    pub(crate) fn shared_tile(&self, t: u64) -> Result<Arc<LoadedTile>> {
        let lock = || self.open_tiles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tile) = lock().get(&t).and_then(Weak::upgrade) {
            return Ok(tile);
        }
        let tile = Arc::new(self.load_tile(t)?);
        let mut open = lock();
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(t, Arc::downgrade(&tile));
        Ok(tile)
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

    /// The index of tile `t` (header, chunk table, indptr), from the cache or from the
    /// tile's leading bytes alone (nothing is decompressed; see the module documentation
    /// for when the CRC is checked).
    pub fn tile_index(&self, t: u64) -> Result<Arc<TileIndex>> {
        self.check_tile(t)?;
        let key = Key::Index(t);
        let cells = self.manifest.tile_cells[t as usize] as usize;
        match self.cache.lookup(key, 8 * (cells + 1) + 1024) {
            Lookup::Hit(Entry::Index(i)) => Ok(i),
            Lookup::Hit(Entry::Chunk(_)) => unreachable!("an index key holds an index"),
            Lookup::Claimed(claim) => {
                let index = Arc::new(self.read_index(t)?);
                claim.fill(Entry::Index(index.clone()));
                Ok(index)
            }
            Lookup::Uncached => Ok(Arc::new(self.read_index(t)?)),
        }
    }

    /// The indptr of tile `t` (n_cells + 1 entries); see `tile_index`.
    pub fn tile_indptr(&self, t: u64) -> Result<Arc<[i64]>> {
        Ok(self.tile_index(t)?.indptr.as_slice().into())
    }

    fn read_index(&self, t: u64) -> Result<TileIndex> {
        let read_at = self.tile_reader(t)?;
        let size = self.manifest.tile_bytes[t as usize];
        let mut head = [0u8; HEADER_SIZE];
        if size < HEADER_SIZE as u64 {
            return Err(self.tile_err(
                t,
                Error::format(format!(
                    "tile is {size} bytes, shorter than the {HEADER_SIZE}-byte header"
                )),
            ));
        }
        read_at(&mut head, 0)?;
        let end = TileIndex::prefix_len(&head, size).map_err(|e| self.tile_err(t, e))?;
        self.check_header_agrees(t, &TileHeader::parse(&head)?)?;
        let mut prefix = vec![0u8; end as usize];
        prefix[..HEADER_SIZE].copy_from_slice(&head);
        read_at(&mut prefix[HEADER_SIZE..], HEADER_SIZE as u64)?;
        TileIndex::parse(&prefix, size).map_err(|e| self.tile_err(t, e))
    }

    /// Positioned reads of tile `t`: of the file, or of the whole object (one GET, held
    /// for the decompression that follows) for a dataset on an object store.
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

    /// For a dataset on an object store, starts fetching the tiles of `tiles` for which
    /// `needed` holds, `max_concurrency` requests in flight, and returns at once: the reads
    /// of one call overlap, and each tile is read (indexed, decoded) as soon as its own
    /// bytes arrive (local datasets: nothing to do).
    pub(crate) fn prefetch_remote(
        &self,
        tiles: &[u64],
        needed: impl Fn(u64) -> bool,
    ) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            let want: Vec<u64> = tiles.iter().copied().filter(|&t| needed(t)).collect();
            return r.start(&want, None).map(|_| ());
        }
        let _ = (tiles, needed);
        Ok(())
    }

    /// For a dataset on an object store, starts fetching tiles of `tiles` (the tiles the
    /// next batches of an iterator read, in order) neither held nor on their way, until
    /// `max_concurrency` tiles are held or on their way (or half of what may be held), and
    /// returns at once. Returns how many entries of `tiles` it got through (started, or
    /// held or on their way already); a local dataset: all of them.
    pub(crate) fn fetch_ahead(&self, tiles: &[u64]) -> Result<usize> {
        #[cfg(feature = "remote")]
        if let Some(r) = &self.remote {
            return r.start(tiles, Some(r.max_concurrency()));
        }
        Ok(tiles.len())
    }

    /// Whether the dataset's tiles are on an object store.
    pub(crate) fn is_remote(&self) -> bool {
        #[cfg(feature = "remote")]
        return self.remote.is_some();
        #[cfg(not(feature = "remote"))]
        false
    }

    /// Decodes tile `t` into caller buffers: `indptr` (n_cells + 1, local to the tile),
    /// `indices` and `values` (at least the tile's nnz each). Returns nnz. The tile is read
    /// and decoded whole, with every check; the decoded-data cache is neither used nor
    /// filled (a sequential scan should not evict what random access is reusing).
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
        let loaded = self.load_tile(t)?;
        tile::decode_parsed(
            &loaded.view(),
            self.resolved_threads(),
            indptr,
            indices,
            values,
        )
        .map_err(|e| self.tile_err(t, e))
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
            if e.kind == ErrorKind::NotFound && !self.store.deleted() {
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
