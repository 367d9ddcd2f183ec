//! The reader's decoded-data cache: decompressed chunks and tile indexes (header, chunk
//! table, indptr) under one byte budget, least recently used evicted first, shared by all
//! threads of a dataset.
//!
//! Entries are handed out as `Arc`s; an entry someone still holds is never evicted (it is
//! "pinned": the batch iterator pins what it read ahead until it is handed out). Loading an
//! entry is claimed first, so that two threads needing the same chunk decompress it once:
//! the second waits for the first. A loader never waits for another claim while holding
//! one, so waits cannot form a cycle.
//!
//! Buffers are recycled: a fresh multi-megabyte buffer costs a page fault per page when it
//! is first written, so a chunk evicted to make room hands its buffer to the chunk that
//! takes its place, and the buffers of chunks released on purpose (`release_tile`: a batch
//! iterator past a tile's last batch) are kept as spares for the next chunks, within the
//! budget (spares are the first thing dropped when room is needed).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::tile::{ChunkData, TileIndex};

/// Default budget: 256 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Chunk { tile: u64, chunk: usize },
    Index(u64),
}

#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Chunk(Arc<ChunkData>),
    Index(Arc<TileIndex>),
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Chunk(c) => c.memory_bytes(),
            Entry::Index(i) => i.memory_bytes(),
        }
    }
    /// Held outside the cache too.
    fn pinned(&self) -> bool {
        match self {
            Entry::Chunk(c) => Arc::strong_count(c) > 1,
            Entry::Index(i) => Arc::strong_count(i) > 1,
        }
    }
}

struct Slot {
    /// `None` while its loader works on it.
    entry: Option<Entry>,
    bytes: usize,
    stamp: u64,
}

#[derive(Default)]
struct State {
    map: HashMap<Key, Slot>,
    /// Loaded entries by last use (oldest first).
    lru: BTreeMap<u64, Key>,
    used: usize,
    clock: u64,
    /// Buffers of released chunks, for the next chunks to decompress into.
    spares: Vec<Vec<u8>>,
    /// Their capacities; `used + spare_bytes` stays within the budget.
    spare_bytes: usize,
}

/// Most spare buffers kept.
const MAX_SPARES: usize = 64;

/// The buffer of an evicted or released entry, if it is a chunk nobody else holds.
fn chunk_buffer(entry: Option<Entry>) -> Option<Vec<u8>> {
    match entry? {
        Entry::Chunk(c) => Arc::try_unwrap(c).ok().map(ChunkData::into_buffer),
        Entry::Index(_) => None,
    }
}

impl State {
    fn touch(&mut self, key: Key) {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(slot) = self.map.get_mut(&key) {
            self.lru.remove(&slot.stamp);
            slot.stamp = stamp;
            self.lru.insert(stamp, key);
        }
    }

    /// The smallest spare buffer that holds an entry of `bytes` without growing (and is
    /// not more than twice as large), taken out of the spares. A buffer too small would be
    /// reallocated, which copies it and faults in fresh pages: the spares are left to
    /// chunks they fit.
    fn take_spare(&mut self, bytes: usize) -> Option<Vec<u8>> {
        let fits = |b: &Vec<u8>| b.capacity() >= bytes && b.capacity() <= bytes * 2;
        let (i, _) = self
            .spares
            .iter()
            .enumerate()
            .filter(|(_, b)| fits(b))
            .min_by_key(|(_, b)| b.capacity())?;
        let buf = self.spares.swap_remove(i);
        self.spare_bytes -= buf.capacity();
        Some(buf)
    }

    /// Keeps `buf` as a spare if the budget has room for it.
    fn keep_spare(&mut self, buf: Vec<u8>, budget: usize) {
        let cap = buf.capacity();
        if self.spares.len() < MAX_SPARES && self.used + self.spare_bytes + cap <= budget {
            self.spare_bytes += cap;
            self.spares.push(buf);
        }
    }

    /// Drops spares, then evicts unpinned entries, oldest first, until `used +
    /// spare_bytes <= limit`. Returns whether that was reached, and the buffer of an
    /// evicted chunk (for the caller's next chunk) when `want_buffer`.
    fn make_room(&mut self, limit: usize, want_buffer: bool) -> (bool, Option<Vec<u8>>) {
        while self.used + self.spare_bytes > limit {
            match self.spares.pop() {
                Some(b) => self.spare_bytes -= b.capacity(),
                None => break,
            }
        }
        if self.used <= limit {
            return (true, None);
        }
        let mut victims = Vec::new();
        let mut freed = 0;
        for (&stamp, key) in &self.lru {
            if self.used - freed <= limit {
                break;
            }
            let slot = &self.map[key];
            if slot.entry.as_ref().is_some_and(|e| !e.pinned()) {
                victims.push((stamp, *key));
                freed += slot.bytes;
            }
        }
        let mut buffer = None;
        for (stamp, key) in victims {
            self.lru.remove(&stamp);
            if let Some(slot) = self.map.remove(&key) {
                self.used -= slot.bytes;
                if want_buffer && buffer.is_none() {
                    buffer = chunk_buffer(slot.entry);
                }
            }
        }
        (self.used <= limit, buffer)
    }
}

/// See the module documentation.
pub(crate) struct DecodedCache {
    budget: AtomicUsize,
    state: Mutex<State>,
    loaded: Condvar,
}

/// The outcome of `DecodedCache::lookup`.
pub(crate) enum Lookup<'a> {
    Hit(Entry),
    /// The caller loads the entry and hands it to `Claim::fill`; others wait meanwhile.
    /// The claim may carry a recycled buffer to load a chunk into (`Claim::take_buffer`).
    Claimed(Claim<'a>),
    /// Not cached, and no room to cache it (or the budget is 0): load it for this use only.
    Uncached,
}

/// The right (and duty) to load one entry. Dropping it unfilled (an error) lets the next
/// caller try.
pub(crate) struct Claim<'a> {
    cache: &'a DecodedCache,
    key: Key,
    reserved: usize,
    filled: bool,
    buffer: Vec<u8>,
}

impl DecodedCache {
    pub fn new(budget: usize) -> DecodedCache {
        DecodedCache {
            budget: AtomicUsize::new(budget),
            state: Mutex::new(State::default()),
            loaded: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state whole before anything that can panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// Sets the budget in bytes; shrinking evicts at once (pinned entries stay until
    /// released, and are evicted by the next insertion after that).
    pub fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        self.lock().make_room(bytes, false);
    }

    /// Bytes held now (loaded entries, reservations of loads in progress, spare buffers).
    pub fn used_bytes(&self) -> usize {
        let st = self.lock();
        st.used + st.spare_bytes
    }

    /// Drops the chunks of tile `tile` that nobody else holds, keeping their buffers as
    /// spares (within the budget) for the next chunks to decompress.
    pub fn release_tile(&self, tile: u64) {
        let budget = self.budget();
        let mut st = self.lock();
        let keys: Vec<Key> = st
            .map
            .iter()
            .filter(|(k, s)| {
                matches!(k, Key::Chunk { tile: t, .. } if *t == tile)
                    && s.entry.as_ref().is_some_and(|e| !e.pinned())
            })
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(slot) = st.map.remove(&key) {
                st.lru.remove(&slot.stamp);
                st.used -= slot.bytes;
                if let Some(buf) = chunk_buffer(slot.entry) {
                    st.keep_spare(buf, budget);
                }
            }
        }
    }

    /// Whether `key` is loaded now (a load in progress does not count).
    pub fn holds(&self, key: Key) -> bool {
        self.lock().map.get(&key).is_some_and(|s| s.entry.is_some())
    }

    /// The chunks held now, as (tile, chunk), sorted.
    pub fn chunks(&self) -> Vec<(u64, usize)> {
        let st = self.lock();
        let mut v: Vec<(u64, usize)> = st
            .map
            .iter()
            .filter(|(_, s)| s.entry.is_some())
            .filter_map(|(k, _)| match k {
                Key::Chunk { tile, chunk } => Some((*tile, *chunk)),
                Key::Index(_) => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Returns the entry, waiting while another thread loads it; or claims it for the caller
    /// to load (reserving `estimate` bytes); or, when it cannot be cached, says so.
    pub fn lookup(&self, key: Key, estimate: usize) -> Lookup<'_> {
        self.find(key, estimate, true)
            .expect("a waiting lookup always decides")
    }

    /// Like `lookup`, but `None` instead of waiting when another thread is loading it.
    pub fn try_lookup(&self, key: Key, estimate: usize) -> Option<Lookup<'_>> {
        self.find(key, estimate, false)
    }

    fn find(&self, key: Key, estimate: usize, wait: bool) -> Option<Lookup<'_>> {
        let budget = self.budget();
        if budget == 0 {
            return Some(Lookup::Uncached);
        }
        let mut st = self.lock();
        loop {
            match st.map.get(&key).map(|s| s.entry.clone()) {
                Some(Some(entry)) => {
                    st.touch(key);
                    return Some(Lookup::Hit(entry));
                }
                Some(None) if !wait => return None,
                Some(None) => {
                    st = self.loaded.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                None => {
                    if estimate > budget {
                        return Some(Lookup::Uncached);
                    }
                    let spare = match key {
                        Key::Chunk { .. } => st.take_spare(estimate),
                        Key::Index(_) => None,
                    };
                    let want = spare.is_none() && matches!(key, Key::Chunk { .. });
                    let (room, evicted) = st.make_room(budget - estimate, want);
                    if !room {
                        return Some(Lookup::Uncached);
                    }
                    st.used += estimate;
                    st.map.insert(
                        key,
                        Slot {
                            entry: None,
                            bytes: estimate,
                            stamp: 0,
                        },
                    );
                    return Some(Lookup::Claimed(Claim {
                        cache: self,
                        key,
                        reserved: estimate,
                        filled: false,
                        buffer: spare.or(evicted).unwrap_or_default(),
                    }));
                }
            }
        }
    }
}

impl Claim<'_> {
    /// A recycled buffer to load a chunk into (empty if there is none).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buffer)
    }

    /// Stores the loaded entry and wakes the waiters. The entry's real size replaces the
    /// estimate; older entries are evicted to make room, and if that is not enough the new
    /// entry is handed back without being kept.
    pub fn fill(mut self, entry: Entry) -> Entry {
        let cache = self.cache;
        let budget = cache.budget();
        let mut st = cache.lock();
        let bytes = entry.bytes();
        st.used -= self.reserved;
        self.filled = true;
        if bytes <= budget && st.make_room(budget - bytes, false).0 {
            st.used += bytes;
            if let Some(slot) = st.map.get_mut(&self.key) {
                slot.entry = Some(entry.clone());
                slot.bytes = bytes;
            }
            st.touch(self.key);
        } else {
            st.map.remove(&self.key);
        }
        drop(st);
        cache.loaded.notify_all();
        entry
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.filled {
            return;
        }
        let mut st = self.cache.lock();
        if st.map.remove(&self.key).is_some() {
            st.used -= self.reserved;
        }
        drop(st);
        self.cache.loaded.notify_all();
    }
}
