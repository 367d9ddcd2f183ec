//! Tiles of a dataset on an object store: one GET per tile, the whole object, as the format
//! intends ("one object per tile means one GET per tile").
//!
//! A fetched tile is held until the reader has taken it for decoding, so that planning a
//! gather (which needs each tile's indptr) and decoding it cost one request, not two. The
//! tiles of one gather are fetched together, `max_concurrency` requests in flight. What is
//! held is bounded ([`HELD_BYTES`]); past it the oldest tiles are dropped and fetched again
//! if needed (slower, never wrong).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::storage::remote::ObjectRoot;

use super::paths;

/// Fetched, not yet decoded tiles held at most (bytes).
pub const HELD_BYTES: usize = 256 << 20;

#[derive(Default)]
struct Held {
    tiles: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
    bytes: usize,
}

/// The tiles of a remote dataset.
pub(crate) struct RemoteTiles {
    root: Arc<ObjectRoot>,
    /// `tile_bytes` of the manifest: every fetched tile must be exactly this long.
    sizes: Vec<u64>,
    held: Mutex<Held>,
}

impl RemoteTiles {
    pub(crate) fn new(root: Arc<ObjectRoot>, sizes: Vec<u64>) -> RemoteTiles {
        RemoteTiles {
            root,
            sizes,
            held: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
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

    fn hold(&self, t: u64, b: Bytes) {
        let mut h = self.lock();
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

    fn fetch(&self, t: u64) -> Result<Bytes> {
        let b = self.root.get(&paths::tile_relpath(t))?;
        self.check(t, &b)?;
        Ok(b)
    }

    /// Tile `t`, held for a later `take` (fetched if not held).
    pub(crate) fn peek(&self, t: u64) -> Result<Bytes> {
        if let Some(b) = self.lock().tiles.get(&t) {
            return Ok(b.clone());
        }
        let b = self.fetch(t)?;
        self.hold(t, b.clone());
        Ok(b)
    }

    /// Tile `t`, no longer held (fetched if not held).
    pub(crate) fn take(&self, t: u64) -> Result<Bytes> {
        let taken = {
            let mut h = self.lock();
            let b = h.tiles.remove(&t);
            if let Some(b) = &b {
                h.bytes -= b.len();
                h.order.retain(|&x| x != t);
            }
            b
        };
        match taken {
            Some(b) => Ok(b),
            None => self.fetch(t),
        }
    }

    /// Fetches the tiles of `tiles` not held, concurrently, and holds them.
    pub(crate) fn prefetch(&self, tiles: &[u64]) -> Result<()> {
        let missing: Vec<u64> = {
            let h = self.lock();
            let mut m: Vec<u64> = tiles
                .iter()
                .copied()
                .filter(|t| !h.tiles.contains_key(t))
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        if missing.len() <= 1 {
            return Ok(());
        }
        let rels = missing.iter().map(|&t| paths::tile_relpath(t)).collect();
        let got = self.root.get_many(rels)?;
        for (t, b) in missing.into_iter().zip(got) {
            self.check(t, &b)?;
            self.hold(t, b);
        }
        Ok(())
    }
}
