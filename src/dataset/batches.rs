//! Batches in a declared order, read ahead: the access pattern of training loops and
//! exports (C API §3.1). The cells are cut into batches of `batch_size` rows; while the
//! caller works on batch k, the dataset's pool plans batches k+1 ..= k+read_ahead and
//! decompresses the chunks they need into the decoded-data cache, where they stay pinned
//! until their batch is handed out. Handing out batch k writes its rows from those chunks
//! straight into the caller's buffers, exactly as `Dataset::gather` of the same cells does.
//!
//! Work: every part of it (read-ahead and the batch handed out) runs on the pool of the
//! dataset's `threads` setting at creation; the calling thread only waits. Memory: the plans
//! of at most `read_ahead` + 1 batches (a few words per row), and decompressed chunks within
//! the dataset's cache budget (read-ahead stops when the cache cannot take more, and with a
//! budget of 0 it only plans). Once the batch that reads a tile for the last time in the
//! order is handed out, the tile's chunks leave the cache (unless someone else holds them)
//! and their buffers serve the next tiles' chunks: an epoch keeps about its window of
//! tiles in memory, not the whole dataset, and does not fault in fresh memory for every
//! chunk. Other users of the dataset may have to decompress those chunks again.
//!
//! Errors: a batch whose plan or data cannot be read returns that error (naming the tile,
//! and the chunk and cell where one is at fault) from the call that hands it out, and is
//! then consumed: the iterator stays usable and the next call returns the batch after it.
//! `BufferTooSmall` consumes nothing. Dropping the iterator cancels what has not started
//! and waits for the read-ahead work running at that moment (at most one chunk per thread),
//! so that no work continues after the drop returns.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rayon::ThreadPool;

use crate::error::{Error, ErrorKind, Result};
use crate::pool;
use crate::tile::ValuesOut;

use super::gather::{GatherPlan, Pins, Prefetch};
use super::reader::Dataset;

/// Batches prepared ahead when the caller asks for 0.
pub const DEFAULT_READ_AHEAD: usize = 2;
/// Most batches prepared ahead (a larger request is capped: memory stays within the cache
/// budget anyway, and plans are kept per batch).
pub const MAX_READ_AHEAD: usize = 64;

/// A batch planned (and its chunks read ahead as far as the cache allowed).
struct Prepared {
    plan: GatherPlan,
    pins: Pins,
}

enum Slot {
    /// Handed to the pool, not started.
    Queued,
    Running,
    Done(Result<Prepared>),
}

#[derive(Default)]
struct State {
    cancelled: bool,
    /// Read-ahead jobs running now (not merely queued).
    running: usize,
    slots: BTreeMap<usize, Slot>,
}

struct Shared {
    ds: Arc<Dataset>,
    cells: Vec<u64>,
    batch_size: usize,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn batch_cells(&self, k: usize) -> &[u64] {
        let a = k * self.batch_size;
        &self.cells[a..(a + self.batch_size).min(self.cells.len())]
    }

    /// Plans batch `k` and reads its chunks ahead into the cache, pinning them; stops at the
    /// first chunk the cache has no room for, and when cancelled.
    fn prepare(&self, k: usize) -> Result<Prepared> {
        let plan = self.ds.plan_gather(self.batch_cells(k))?;
        let mut pins = Pins::new();
        let sources = self.ds.tile_sources(&plan);
        for unit in plan.units() {
            if self.lock().cancelled {
                break;
            }
            let t = plan.tiles()[unit.slot];
            let r = self.ds.prefetch_chunk(t, unit, &sources[unit.slot]);
            sources[unit.slot].finish_unit();
            match r {
                Ok(Prefetch::Ready(c)) => {
                    pins.insert((t, unit.chunk), c);
                }
                Ok(Prefetch::Busy) => {}
                // A chunk that fails to read fails again, with its precise error, when the
                // batch is handed out.
                Ok(Prefetch::NoRoom) | Err(_) => break,
            }
        }
        Ok(Prepared { plan, pins })
    }
}

/// The read-ahead job of batch `k` (runs on the pool).
fn read_ahead_job(shared: Arc<Shared>, k: usize) {
    {
        let mut st = shared.lock();
        if st.cancelled {
            return;
        }
        st.running += 1;
        st.slots.insert(k, Slot::Running);
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| shared.prepare(k)))
        .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a read-ahead job panicked")));
    let mut st = shared.lock();
    st.running -= 1;
    if !st.cancelled {
        st.slots.insert(k, Slot::Done(result));
    }
    drop(st);
    shared.changed.notify_all();
}

/// Each tile the order reads, once, with the batch that reads it first, in order of first
/// use (what a remote dataset's iterator fetches ahead).
fn first_use(ds: &Dataset, cells: &[u64], batch_size: usize) -> (Vec<usize>, Vec<u64>) {
    let starts = ds.starts();
    let mut seen = vec![false; starts.len().saturating_sub(1)];
    let mut out = (Vec::new(), Vec::new());
    let (mut tile, mut range) = (0usize, 0..0);
    for (i, &c) in cells.iter().enumerate() {
        if !range.contains(&c) {
            tile = starts.partition_point(|&s| s <= c) - 1;
            range = starts[tile]..starts[tile + 1];
        }
        if !seen[tile] {
            seen[tile] = true;
            out.0.push(i / batch_size);
            out.1.push(tile as u64);
        }
    }
    out
}

/// For each batch, the tiles it reads for the last time in the order.
fn last_use(ds: &Dataset, cells: &[u64], batch_size: usize) -> BTreeMap<usize, Vec<u64>> {
    // starts: the first cell of each tile, then n_cells.
    let starts = ds.starts();
    let mut last: Vec<Option<usize>> = vec![None; starts.len().saturating_sub(1)];
    // The previous cell's tile and its cells, to skip the search while the order stays.
    let (mut tile, mut range) = (0usize, 0..0);
    for (i, &c) in cells.iter().enumerate() {
        if !range.contains(&c) {
            tile = starts.partition_point(|&s| s <= c) - 1;
            range = starts[tile]..starts[tile + 1];
        }
        last[tile] = Some(i / batch_size);
    }
    let mut by_batch: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (t, k) in last.into_iter().enumerate() {
        if let Some(k) = k {
            by_batch.entry(k).or_default().push(t as u64);
        }
    }
    by_batch
}

/// An iterator over batches of a dataset's cells; see the module documentation.
pub struct Batches {
    shared: Arc<Shared>,
    pool: Arc<ThreadPool>,
    threads: usize,
    read_ahead: usize,
    n_batches: usize,
    /// Tiles whose last batch in the order is the key (their chunks are released after it).
    last_use: BTreeMap<usize, Vec<u64>>,
    /// Remote datasets: each tile with the batch that reads it first, in order; and how
    /// many of them are fetched or being fetched (see `schedule`).
    ahead: (Vec<usize>, Vec<u64>),
    ahead_done: usize,
    /// The batch handed out next.
    next: usize,
    /// Batch `next`, taken from its slot by `peek` (or kept after `BufferTooSmall`).
    held: Option<Result<Prepared>>,
}

impl Batches {
    /// Iterates `cells` (any order, repeats allowed) in batches of `batch_size` rows, the
    /// last possibly shorter, preparing up to `read_ahead` batches ahead (0 = 2, at most
    /// 64).
    ///
    /// Errors: `InvalidArgument` (batch_size 0), `OutOfRange` (a cell >= n_cells, named by
    /// its index; all are checked here), `Io` (the pool's threads cannot start).
    pub fn new(
        ds: Arc<Dataset>,
        cells: &[u64],
        batch_size: usize,
        read_ahead: usize,
    ) -> Result<Batches> {
        if batch_size == 0 {
            return Err(Error::invalid_argument(
                "batch_size is 0, must be at least 1",
            ));
        }
        let n_cells = ds.info().n_cells;
        if let Some(i) = cells.iter().position(|&c| c >= n_cells) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "cells[{i}] = {} is out of range: the dataset has n_cells = {n_cells}",
                    cells[i]
                ),
            ));
        }
        let threads = ds.resolved_threads();
        let pool = pool::pool(threads)?;
        let read_ahead = match read_ahead {
            0 => DEFAULT_READ_AHEAD,
            r => r.min(MAX_READ_AHEAD),
        };
        let n_batches = cells.len().div_ceil(batch_size);
        let last_use = last_use(&ds, cells, batch_size);
        let ahead = if ds.is_remote() {
            first_use(&ds, cells, batch_size)
        } else {
            Default::default()
        };
        let shared = Arc::new(Shared {
            ds,
            cells: cells.to_vec(),
            batch_size,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let mut b = Batches {
            shared,
            pool,
            threads,
            read_ahead,
            n_batches,
            last_use,
            ahead,
            ahead_done: 0,
            next: 0,
            held: None,
        };
        b.schedule();
        Ok(b)
    }

    /// Batches in all.
    pub fn n_batches(&self) -> usize {
        self.n_batches
    }

    /// Hands batches next ..= next + read_ahead that are not yet scheduled to the pool.
    /// Remote datasets: first starts the fetches of the tiles those batches read first,
    /// then of the tiles later batches read first, as long as fewer than `max_concurrency`
    /// tiles are held or on their way: the network works ahead of the read-ahead jobs,
    /// which block only on their own tiles, and decode each as soon as it arrives. (A tile
    /// read again later in the order is not fetched ahead again: the cache has its chunks,
    /// or the batch's own job fetches it.)
    fn schedule(&mut self) {
        let last = (self.next + self.read_ahead).min(self.n_batches.saturating_sub(1));
        if self.ahead_done < self.ahead.1.len() {
            self.fetch_ahead(last);
        }
        let mut st = self.shared.lock();
        for k in self.next..=last {
            if k >= self.n_batches || st.slots.contains_key(&k) {
                continue;
            }
            st.slots.insert(k, Slot::Queued);
            let shared = self.shared.clone();
            self.pool.spawn(move || read_ahead_job(shared, k));
        }
    }

    /// Takes batch `next` from its slot, waiting for its read-ahead job.
    fn take_next(&mut self) -> Result<Prepared> {
        if let Some(p) = self.held.take() {
            return p;
        }
        let mut st = self.shared.lock();
        loop {
            match st.slots.remove(&self.next) {
                Some(Slot::Done(r)) => return r,
                Some(s @ (Slot::Queued | Slot::Running)) => {
                    st.slots.insert(self.next, s);
                    st = self
                        .shared
                        .changed
                        .wait(st)
                        .unwrap_or_else(|p| p.into_inner());
                }
                None => {
                    // Never scheduled (cannot happen while `schedule` runs after every
                    // step); plan it here rather than hang.
                    drop(st);
                    let k = self.next;
                    let shared = self.shared.clone();
                    return self.pool.install(move || shared.prepare(k));
                }
            }
        }
    }

    /// Rows and nonzeros of the next batch, (0, 0) at the end. Reads the plan of the batch
    /// (waiting for its read-ahead); an error is returned again, and consumed, by `next_into`.
    pub fn peek(&mut self) -> Result<(u64, u64)> {
        if self.next >= self.n_batches {
            return Ok((0, 0));
        }
        let p = self.take_next();
        let r = match &p {
            Ok(p) => Ok((p.plan.n_rows() as u64, p.plan.nnz())),
            Err(e) => Err(e.clone()),
        };
        self.held = Some(p);
        r
    }

    /// The next batch into caller buffers, as `Dataset::gather` writes it: returns (rows,
    /// nnz), (0, 0) at the end. `BufferTooSmall { needed }` leaves the batch the next one;
    /// any other error consumes it (see the module documentation).
    pub fn next_into(
        &mut self,
        indptr: &mut [i64],
        indices: &mut [i32],
        values: ValuesOut<'_>,
    ) -> Result<(u64, u64)> {
        if self.next >= self.n_batches {
            return Ok((0, 0));
        }
        let prepared = match self.take_next() {
            Ok(p) => p,
            Err(e) => {
                self.advance();
                return Err(e);
            }
        };
        let (rows, nnz) = (prepared.plan.n_rows(), prepared.plan.nnz());
        let have = indices.len().min(values.len()) as u64;
        if have < nnz || indptr.len() < rows + 1 {
            let e = if have < nnz {
                Error::new(
                    ErrorKind::BufferTooSmall { needed: nnz },
                    format!(
                        "batch {}: output holds {have} nonzeros, its {rows} rows have {nnz}",
                        self.next
                    ),
                )
            } else {
                Error::invalid_argument(format!(
                    "batch {}: indptr holds {} entries, {rows} rows need {}",
                    self.next,
                    indptr.len(),
                    rows + 1
                ))
            };
            self.held = Some(Ok(prepared));
            return Err(e);
        }
        let (ds, threads) = (&self.shared.ds, self.threads);
        let r = self.pool.install(|| {
            ds.gather_pinned(
                &prepared.plan,
                &prepared.pins,
                threads,
                indptr,
                indices,
                values,
            )
        });
        drop(prepared);
        self.advance();
        r.map(|nnz| (rows as u64, nnz))
    }

    /// See `schedule`. A fetch that cannot start is left to the batch's own job (which
    /// then reports the error).
    fn fetch_ahead(&mut self, last: usize) {
        let ds = &self.shared.ds;
        let (batches, tiles) = (&self.ahead.0, &self.ahead.1);
        let from = self.ahead_done;
        let due = from + batches[from..].partition_point(|&k| k <= last);
        let _ = ds.prefetch_remote(&tiles[from..due], |_| true);
        self.ahead_done = due + ds.fetch_ahead(&tiles[due..]).unwrap_or(0);
    }

    fn advance(&mut self) {
        if let Some(tiles) = self.last_use.remove(&self.next) {
            for t in tiles {
                self.shared.ds.cache().release_tile(t);
            }
        }
        self.next += 1;
        self.schedule();
    }

    /// Threads the iterator's work runs on.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.cancelled = true;
        while st.running > 0 {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        // Release what was read ahead (pins) now, not when queued jobs get to run.
        let slots = std::mem::take(&mut st.slots);
        drop(st);
        drop(slots);
    }
}
