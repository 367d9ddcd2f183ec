//! Tiles of a dataset on an object store: one GET per tile, the whole object, as the format
//! intends ("one object per tile means one GET per tile").
//!
//! A fetched tile is held until the reader has taken it for decoding, so that planning a
//! gather (which needs each tile's indptr) and decoding it cost one request, not two.
//! Fetches are started without waiting ([`RemoteTiles::start`]: a gather starts all its
//! tiles, a batch iterator the tiles of the batches ahead), `max_concurrency` requests in
//! flight; whoever needs a tile waits for that tile only, so a tile is indexed and decoded
//! as soon as its bytes arrive, while the others are still on the way. A tile being fetched
//! is never requested twice. What is held is bounded ([`HELD_BYTES`]); past it the oldest
//! tiles are dropped and fetched again if needed (slower, never wrong).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::storage::remote::ObjectRoot;

use super::paths;

/// Fetched, not yet decoded tiles held at most (bytes).
pub const HELD_BYTES: usize = 256 << 20;

/// The outcome of one fetch in flight, for whoever waits for it.
#[derive(Default)]
struct Pending {
    outcome: Mutex<Option<Result<Bytes>>>,
    arrived: Condvar,
}

impl Pending {
    fn wait(&self) -> Result<Bytes> {
        let mut o = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = &*o {
                return r.clone();
            }
            o = self.arrived.wait(o).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[derive(Default)]
struct Held {
    tiles: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
    bytes: usize,
    /// Tiles being fetched.
    pending: HashMap<u64, Arc<Pending>>,
    /// Their sizes (bytes), summed.
    pending_bytes: usize,
}

struct Inner {
    root: Arc<ObjectRoot>,
    /// `tile_bytes` of the manifest: every fetched tile must be exactly this long.
    sizes: Vec<u64>,
    held: Mutex<Held>,
}

/// The tiles of a remote dataset.
pub(crate) struct RemoteTiles {
    inner: Arc<Inner>,
}

/// Where a tile is: held, on its way, or neither.
enum State {
    Held(Bytes),
    Coming(Arc<Pending>),
    Absent,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self, t: u64, b: &Bytes) -> Result<()> {
        let want = self.sizes[t as usize];
        if b.len() as u64 != want {
            return Err(Error::format(format!(
                "tile {t} ({}): object is {} bytes, manifest tile_bytes[{t}] says {want}",
                self.root.display(&paths::tile_relpath(t)),
                b.len()
            )));
        }
        Ok(())
    }

    fn hold(h: &mut Held, t: u64, b: Bytes) {
        if h.tiles.contains_key(&t) {
            return;
        }
        h.bytes += b.len();
        h.tiles.insert(t, b);
        h.order.push_back(t);
        while h.bytes > HELD_BYTES && h.order.len() > 1 {
            if let Some(old) = h.order.pop_front() {
                if let Some(b) = h.tiles.remove(&old) {
                    h.bytes -= b.len();
                }
            }
        }
    }

    /// A fetch of tile `t` has ended: hold the bytes (if they are the tile's), and hand
    /// the outcome to the waiters.
    fn arrived(&self, t: u64, r: Result<Bytes>) {
        let r = r.and_then(|b| self.check(t, &b).map(|_| b));
        let pending = {
            let mut h = self.lock();
            let p = h.pending.remove(&t);
            if p.is_some() {
                h.pending_bytes -= self.sizes[t as usize] as usize;
            }
            if let Ok(b) = &r {
                Inner::hold(&mut h, t, b.clone());
            }
            p
        };
        if let Some(p) = pending {
            *p.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            p.arrived.notify_all();
        }
    }

    fn state(&self, t: u64) -> State {
        let h = self.lock();
        if let Some(b) = h.tiles.get(&t) {
            State::Held(b.clone())
        } else if let Some(p) = h.pending.get(&t) {
            State::Coming(p.clone())
        } else {
            State::Absent
        }
    }

    fn fetch(&self, t: u64) -> Result<Bytes> {
        let b = self.root.get(&paths::tile_relpath(t))?;
        self.check(t, &b)?;
        Ok(b)
    }
}

impl RemoteTiles {
    pub(crate) fn new(root: Arc<ObjectRoot>, sizes: Vec<u64>) -> RemoteTiles {
        RemoteTiles {
            inner: Arc::new(Inner {
                root,
                sizes,
                held: Mutex::default(),
            }),
        }
    }

    /// The root's `max_concurrency`.
    pub(crate) fn max_concurrency(&self) -> usize {
        self.inner.root.options().max_concurrency
    }

    /// Tile `t`, held for a later `take` (waited for if on its way, else fetched now).
    pub(crate) fn peek(&self, t: u64) -> Result<Bytes> {
        match self.inner.state(t) {
            State::Held(b) => Ok(b),
            State::Coming(p) => p.wait(),
            State::Absent => {
                let b = self.inner.fetch(t)?;
                Inner::hold(&mut self.inner.lock(), t, b.clone());
                Ok(b)
            }
        }
    }

    /// Tile `t`, no longer held (waited for if on its way, else fetched now).
    pub(crate) fn take(&self, t: u64) -> Result<Bytes> {
        let state = {
            let mut h = self.inner.lock();
            match h.tiles.remove(&t) {
                Some(b) => {
                    h.bytes -= b.len();
                    h.order.retain(|&x| x != t);
                    State::Held(b)
                }
                None => match h.pending.get(&t) {
                    Some(p) => State::Coming(p.clone()),
                    None => State::Absent,
                },
            }
        };
        match state {
            State::Held(b) => Ok(b),
            State::Coming(p) => {
                let b = p.wait()?;
                // Arrived and held meanwhile: no longer held.
                let mut h = self.inner.lock();
                if let Some(b) = h.tiles.remove(&t) {
                    h.bytes -= b.len();
                    h.order.retain(|&x| x != t);
                }
                Ok(b)
            }
            State::Absent => self.inner.fetch(t),
        }
    }

    /// Starts fetching the tiles of `tiles` neither held nor on their way, in that order,
    /// and returns at once (their bytes are held as they arrive; errors reach whoever then
    /// needs the tile). `limit`: stop once this many tiles are held or on their way, or
    /// [`HELD_BYTES`] / 2 of them (`None`: start them all, as a gather that needs them does).
    /// Returns how many entries of `tiles` it got through (started, or held or on their
    /// way already) before the limit stopped it.
    pub(crate) fn start(&self, tiles: &[u64], limit: Option<usize>) -> Result<usize> {
        let mut started = Vec::new();
        let mut through = 0;
        {
            let mut h = self.inner.lock();
            for &t in tiles {
                if h.tiles.contains_key(&t) || h.pending.contains_key(&t) {
                    through += 1;
                    continue;
                }
                let size = self.inner.sizes[t as usize] as usize;
                if let Some(n) = limit {
                    let outstanding = h.tiles.len() + h.pending.len();
                    let bytes = h.bytes + h.pending_bytes;
                    if outstanding >= n || (outstanding > 0 && bytes + size > HELD_BYTES / 2) {
                        break;
                    }
                }
                h.pending.insert(t, Arc::default());
                h.pending_bytes += size;
                started.push(t);
                through += 1;
            }
        }
        for (i, &t) in started.iter().enumerate() {
            let inner = self.inner.clone();
            let r = self
                .inner
                .root
                .get_detached(paths::tile_relpath(t), move |r| inner.arrived(t, r));
            if let Err(e) = r {
                // The runtime cannot start: nothing of the rest is on its way.
                for &u in &started[i..] {
                    self.inner.arrived(u, Err(e.clone()));
                }
                return Err(e);
            }
        }
        Ok(through)
    }
}
