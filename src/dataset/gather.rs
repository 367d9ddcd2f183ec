//! Gathers: any cells, in any order, repeats allowed, across tiles. Only the chunks that
//! hold requested cells are decompressed (or taken from the decoded-data cache), and each
//! requested cell is recombined from them straight into its rows of the caller's buffers:
//! no whole-tile intermediate, and nothing allocated in proportion to a tile once the
//! dataset's read buffers are warm.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind, Result};
use crate::pool;
use crate::tile::{self, ChunkData, ValuesOut};

use super::cache::{Entry, Key, Lookup};
use super::reader::{Dataset, LoadedTile};

/// Where every requested row comes from and where it goes; made by `Dataset::plan_gather`
/// from the tiles' indexes (no decompression).
#[derive(Debug, Clone)]
pub struct GatherPlan {
    /// Distinct tiles needed, in first-use order.
    tiles: Vec<u64>,
    rows: Vec<RowRef>,
    /// Output offsets (n + 1 entries): row i goes to [offsets[i], offsets[i+1]).
    offsets: Vec<i64>,
    /// Row indices grouped by (tile, chunk), cells in increasing order within a group.
    order: Vec<usize>,
    units: Vec<Unit>,
}

/// Where one requested row is: its tile (index into `tiles`), chunk, cell within the tile,
/// and the position of its first nonzero within the chunk.
#[derive(Debug, Clone, Copy)]
struct RowRef {
    slot: u32,
    chunk: u32,
    local: u64,
    at: u32,
}

/// One chunk to read and the rows it serves (`order[rows]`).
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    pub slot: usize,
    pub chunk: usize,
    rows: Range<usize>,
    /// What the decompressed chunk occupies in the cache (estimated from the index).
    pub cache_bytes: usize,
    pub chunk_nnz: u64,
}

impl GatherPlan {
    /// Nonzeros the gather produces.
    pub fn nnz(&self) -> u64 {
        *self.offsets.last().unwrap_or(&0) as u64
    }
    /// Rows requested.
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }
    /// Output offsets (n + 1 entries).
    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }
    /// Distinct tiles the rows come from, in first-use order.
    pub fn tiles(&self) -> &[u64] {
        &self.tiles
    }
    /// The (tile, chunk) pairs the gather reads, in reading order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.units.iter().map(|u| (self.tiles[u.slot], u.chunk))
    }
    pub(crate) fn units(&self) -> &[Unit] {
        &self.units
    }
}

/// A chunk for one use: shared with the cache, or decompressed for this use only.
enum ChunkRef {
    Shared(Arc<ChunkData>),
    Own(ChunkData),
}

impl Deref for ChunkRef {
    type Target = ChunkData;
    fn deref(&self) -> &ChunkData {
        match self {
            ChunkRef::Shared(c) => c,
            ChunkRef::Own(c) => c,
        }
    }
}

/// Largest buffer a thread keeps for chunks decompressed outside the cache.
const MAX_SPARE_BYTES: usize = 64 << 20;

thread_local! {
    /// The buffer of the last uncached chunk this thread decompressed, for the next one.
    static SPARE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn take_spare() -> Vec<u8> {
    SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

fn give_spare(buf: Vec<u8>) {
    if buf.capacity() <= MAX_SPARE_BYTES {
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if buf.capacity() > s.capacity() {
                *s = buf;
            }
        });
    }
}

impl ChunkRef {
    fn release(self) {
        if let ChunkRef::Own(c) = self {
            give_spare(c.into_buffer());
        }
    }
}

/// A tile read at most once per gather for the units that need its bytes, and released
/// when its last unit is done.
pub(crate) struct TileSource {
    loaded: Mutex<Option<Result<Arc<LoadedTile>>>>,
    remaining: AtomicUsize,
}

impl TileSource {
    pub(crate) fn new(units: usize) -> TileSource {
        TileSource {
            loaded: Mutex::new(None),
            remaining: AtomicUsize::new(units),
        }
    }

    fn get(&self, load: impl FnOnce() -> Result<Arc<LoadedTile>>) -> Result<Arc<LoadedTile>> {
        let mut slot = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = &*slot {
            return r.clone();
        }
        let r = load();
        *slot = Some(r.clone());
        r
    }

    pub(crate) fn finish_unit(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.loaded.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
    }
}

/// The rows of one unit, each with its part of the caller's buffers.
struct RowOut<'a> {
    row: usize,
    indices: &'a mut [i32],
    values: ValuesOut<'a>,
}

fn split_rows<'a, T>(mut rest: &'a mut [T], offsets: &[i64]) -> Vec<Option<&'a mut [T]>> {
    offsets
        .windows(2)
        .map(|w| {
            let (row, tail) = std::mem::take(&mut rest).split_at_mut((w[1] - w[0]) as usize);
            rest = tail;
            Some(row)
        })
        .collect()
}

fn split_values<'a>(values: ValuesOut<'a>, offsets: &[i64]) -> Vec<Option<ValuesOut<'a>>> {
    match values {
        ValuesOut::I32(v) => split_rows(v, offsets)
            .into_iter()
            .map(|r| r.map(ValuesOut::I32))
            .collect(),
        ValuesOut::F32(v) => split_rows(v, offsets)
            .into_iter()
            .map(|r| r.map(ValuesOut::F32))
            .collect(),
    }
}

/// Results of at least this many bytes (8 per nonzero) are written with non-temporal
/// stores: they do not fit the cache, so writing them through it reads every output line
/// first and evicts the chunk being read. Twice a core's L2 on the project's machine.
const STREAM_RESULT_MIN: u64 = 2 * tile::STREAM_STORE_MIN_BYTES as u64;
/// Rows shorter than this are written through the cache even then (a non-temporal run
/// starts with unaligned single stores).
const STREAM_ROW_MIN: usize = 64;

/// Chunks held for a gather, by (tile, chunk).
pub(crate) type Pins = HashMap<(u64, usize), Arc<ChunkData>>;

/// Below this much work (nonzeros decompressed or written) per thread, a gather uses fewer
/// threads: waking workers costs more than it saves.
const MIN_NNZ_PER_THREAD: u64 = 32 * 1024;

impl Dataset {
    /// Locates every requested cell and sizes the result (reads tile indexes only: header,
    /// chunk table, indptr). Errors: `OutOfRange` naming the first bad cell (checked before
    /// anything is read), and the errors of reading a tile's index.
    pub fn plan_gather(&self, cells: &[u64]) -> Result<GatherPlan> {
        let n_cells = self.manifest().n_cells;
        let starts = self.starts();
        let mut slot_of: HashMap<u64, u32> = HashMap::new();
        let mut tiles = Vec::new();
        let mut located = Vec::with_capacity(cells.len());
        for (i, &c) in cells.iter().enumerate() {
            if c >= n_cells {
                return Err(Error::new(
                    ErrorKind::OutOfRange,
                    format!(
                        "cells[{i}] = {c} is out of range: the dataset has n_cells = {n_cells}"
                    ),
                ));
            }
            let t = (starts.partition_point(|&s| s <= c) - 1) as u64;
            let slot = *slot_of.entry(t).or_insert_with(|| {
                tiles.push(t);
                (tiles.len() - 1) as u32
            });
            located.push((slot, c - starts[t as usize]));
        }
        // Remote: the tiles whose index is not cached, one GET each, concurrently (each is
        // held for the chunks read from it next).
        self.prefetch_remote(&tiles, |t| !self.cache().holds(Key::Index(t)))?;
        let threads = self.resolved_threads().min(tiles.len().max(1));
        let indexes = pool::map(threads, tiles.clone(), |t| self.tile_index(t))?;
        let mut rows = Vec::with_capacity(cells.len());
        let mut offsets = Vec::with_capacity(cells.len() + 1);
        let mut acc = 0i64;
        offsets.push(0);
        for &(slot, local) in &located {
            let index = &indexes[slot as usize];
            let chunk = index.chunk_of(local);
            let (a, b) = (
                index.indptr[local as usize],
                index.indptr[local as usize + 1],
            );
            rows.push(RowRef {
                slot,
                chunk: chunk as u32,
                local,
                at: (a as u64 - index.chunks[chunk].nnz_lo) as u32,
            });
            acc += b - a;
            offsets.push(acc);
        }
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by_key(|&i| (rows[i].slot, rows[i].chunk, rows[i].local));
        let mut units: Vec<Unit> = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            let r = rows[i];
            match units.last_mut() {
                Some(u) if u.slot == r.slot as usize && u.chunk == r.chunk as usize => {
                    u.rows.end = k + 1
                }
                _ => {
                    let e = &indexes[r.slot as usize].chunks[r.chunk as usize];
                    units.push(Unit {
                        slot: r.slot as usize,
                        chunk: r.chunk as usize,
                        rows: k..k + 1,
                        cache_bytes: (4 * e.nnz() + 4 * (e.cell_hi - e.cell_lo + 1)) as usize + 256,
                        chunk_nnz: e.nnz(),
                    })
                }
            }
        }
        Ok(GatherPlan {
            tiles,
            rows,
            offsets,
            order,
            units,
        })
    }

    /// Nonzeros of the given cells (repeats count again), from tile indexes only.
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

    /// Executes a plan of `plan_gather`: the chunks it names are read (from the cache, or
    /// decompressed from their tile, each tile read once) in parallel on the dataset's
    /// threads, and every row is written straight into its place in the outputs. Memory
    /// beyond the outputs: the cache's budget, one read tile per thread, and per thread one
    /// decompressed chunk when the cache cannot hold it.
    ///
    /// Errors: `BufferTooSmall` (outputs shorter than the result), `InvalidArgument`
    /// (indptr shorter than n + 1), the errors of reading a tile (they name it and, for
    /// what concerns one chunk, the chunk and cell). With several errors, the one of the
    /// first chunk in (tile, chunk) order is reported. On error the outputs hold no meaning.
    pub fn gather_planned(
        &self,
        plan: &GatherPlan,
        indptr: &mut [i64],
        indices: &mut [i32],
        values: ValuesOut<'_>,
    ) -> Result<u64> {
        let threads = self.resolved_threads();
        self.gather_pinned(plan, &Pins::new(), threads, indptr, indices, values)
    }

    /// `gather_planned` on `threads` threads, taking the chunks in `pins` from there (read
    /// ahead by a batch iterator).
    pub(crate) fn gather_pinned(
        &self,
        plan: &GatherPlan,
        pins: &Pins,
        threads: usize,
        indptr: &mut [i64],
        indices: &mut [i32],
        values: ValuesOut<'_>,
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
        let mut row_indices = split_rows(&mut indices[..nnz as usize], &plan.offsets);
        let mut row_values = split_values(values, &plan.offsets);
        let work: Vec<(usize, Vec<RowOut<'_>>)> = plan
            .units
            .iter()
            .enumerate()
            .map(|(u, unit)| {
                let outs = plan.order[unit.rows.clone()]
                    .iter()
                    .map(|&row| RowOut {
                        row,
                        indices: row_indices[row].take().expect("each row once"),
                        values: row_values[row].take().expect("each row once"),
                    })
                    .collect();
                (u, outs)
            })
            .collect();
        let sources = self.tile_sources(plan);
        // Remote: the tiles some chunk of which must be decompressed, concurrently.
        let mut to_read: Vec<u64> = plan
            .units
            .iter()
            .filter(|u| {
                let key = Key::Chunk {
                    tile: plan.tiles[u.slot],
                    chunk: u.chunk,
                };
                !pins.contains_key(&(plan.tiles[u.slot], u.chunk)) && !self.cache().holds(key)
            })
            .map(|u| plan.tiles[u.slot])
            .collect();
        to_read.dedup();
        self.prefetch_remote(&to_read, |_| true)?;
        let work_nnz: u64 = nnz + plan.units.iter().map(|u| u.chunk_nnz).sum::<u64>();
        let threads = threads
            .min(plan.units.len().max(1))
            .min((work_nnz / MIN_NNZ_PER_THREAD).max(1) as usize);
        pool::map(threads, work, |(u, outs)| {
            let unit = &plan.units[u];
            let source = &sources[unit.slot];
            let pinned = pins.get(&(plan.tiles[unit.slot], unit.chunk));
            let r = self.write_unit(plan, unit, outs, source, pinned);
            source.finish_unit();
            r
        })?;
        Ok(nnz)
    }

    /// One source per tile of the plan, counting the units that read it.
    pub(crate) fn tile_sources(&self, plan: &GatherPlan) -> Vec<TileSource> {
        let mut counts = vec![0usize; plan.tiles.len()];
        for u in &plan.units {
            counts[u.slot] += 1;
        }
        counts.into_iter().map(TileSource::new).collect()
    }

    fn write_unit(
        &self,
        plan: &GatherPlan,
        unit: &Unit,
        outs: Vec<RowOut<'_>>,
        source: &TileSource,
        pinned: Option<&Arc<ChunkData>>,
    ) -> Result<()> {
        let t = plan.tiles[unit.slot];
        let chunk = self.chunk_for(t, unit, source, pinned)?;
        let stream = 8 * plan.nnz() >= STREAM_RESULT_MIN;
        let r = outs.into_iter().try_for_each(|o| {
            let row = plan.rows[o.row];
            let (at, len) = chunk.cell_range(row.local);
            if at != row.at as usize || len != o.indices.len() {
                return Err(self.tile_err(
                    t,
                    Error::format(format!(
                        "chunk {}: cell {} holds nonzeros {at}..{} of the chunk, its index read earlier said {}..{} (the tile changed while being read)",
                        unit.chunk,
                        row.local,
                        at + len,
                        row.at,
                        row.at as usize + o.indices.len()
                    )),
                ));
            }
            // Long rows of a large result bypass the cache (see `STREAM_ROW_MIN`).
            let stream = stream && len >= STREAM_ROW_MIN;
            chunk
                .cell_into(row.local, o.indices, o.values, stream)
                .map_err(|e| self.tile_err(t, e))
        });
        if stream {
            tile::store_fence();
        }
        chunk.release();
        r
    }

    /// Chunk `unit.chunk` of tile `t`: from `pinned` or the cache, else decompressed from
    /// the tile (read through `source`) into the cache, or for this use only when the
    /// cache cannot hold it.
    fn chunk_for(
        &self,
        t: u64,
        unit: &Unit,
        source: &TileSource,
        pinned: Option<&Arc<ChunkData>>,
    ) -> Result<ChunkRef> {
        if let Some(c) = pinned {
            return Ok(ChunkRef::Shared(c.clone()));
        }
        let key = Key::Chunk {
            tile: t,
            chunk: unit.chunk,
        };
        match self.cache().lookup(key, unit.cache_bytes) {
            Lookup::Hit(Entry::Chunk(c)) => Ok(ChunkRef::Shared(c)),
            Lookup::Hit(Entry::Index(_)) => unreachable!("a chunk key holds a chunk"),
            Lookup::Claimed(mut claim) => {
                let buf = claim.take_buffer();
                let data = self.decompress_chunk(t, unit.chunk, source, buf)?;
                match claim.fill(Entry::Chunk(Arc::new(data))) {
                    Entry::Chunk(c) => Ok(ChunkRef::Shared(c)),
                    Entry::Index(_) => unreachable!("filled with a chunk"),
                }
            }
            Lookup::Uncached => Ok(ChunkRef::Own(self.decompress_chunk(
                t,
                unit.chunk,
                source,
                take_spare(),
            )?)),
        }
    }

    /// Decompresses chunk `c` of tile `t` into `buf`, reading the tile through `source`.
    pub(crate) fn decompress_chunk(
        &self,
        t: u64,
        c: usize,
        source: &TileSource,
        buf: Vec<u8>,
    ) -> Result<ChunkData> {
        let loaded = source.get(|| self.shared_tile(t))?;
        let data =
            ChunkData::decompress(&loaded.view(), c, buf).map_err(|e| self.tile_err(t, e))?;
        self.counters()
            .chunks_decompressed
            .fetch_add(1, Ordering::Relaxed);
        Ok(data)
    }

    /// Read-ahead of chunk `unit.chunk` of tile `t` into the cache: returns it (pinned
    /// while held) if it is there or once decompressed here; `Busy` if another thread is
    /// loading it (the read-ahead moves on rather than wait); `NoRoom` when the cache cannot
    /// take it.
    pub(crate) fn prefetch_chunk(
        &self,
        t: u64,
        unit: &Unit,
        source: &TileSource,
    ) -> Result<Prefetch> {
        let key = Key::Chunk {
            tile: t,
            chunk: unit.chunk,
        };
        match self.cache().try_lookup(key, unit.cache_bytes) {
            Some(Lookup::Hit(Entry::Chunk(c))) => Ok(Prefetch::Ready(c)),
            Some(Lookup::Hit(Entry::Index(_))) => unreachable!("a chunk key holds a chunk"),
            Some(Lookup::Claimed(mut claim)) => {
                let buf = claim.take_buffer();
                let data = self.decompress_chunk(t, unit.chunk, source, buf)?;
                match claim.fill(Entry::Chunk(Arc::new(data))) {
                    Entry::Chunk(c) => Ok(Prefetch::Ready(c)),
                    Entry::Index(_) => unreachable!("filled with a chunk"),
                }
            }
            Some(Lookup::Uncached) => Ok(Prefetch::NoRoom),
            None => Ok(Prefetch::Busy),
        }
    }
}

/// The outcome of `Dataset::prefetch_chunk`.
pub(crate) enum Prefetch {
    Ready(Arc<ChunkData>),
    Busy,
    NoRoom,
}
