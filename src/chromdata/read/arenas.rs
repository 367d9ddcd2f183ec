//! Result memory a handle keeps for its next read.
//!
//! A large read's fixed-width columns live in one allocation (the arena of
//! [`super::gather`]). Fresh memory costs the kernel a page fault and a page clear per page
//! on first touch: in a full read of 10 M spots × 60 tracks (a 2.8 GB result) that was
//! 42 % of the samples (`clear_page_erms`), more than the decoding. pyarrow's memory pool
//! (mimalloc in the wheels measured here, `pyarrow.default_memory_pool().backend_name`;
//! jemalloc in some builds) keeps freed memory and hands it out again, so its repeated
//! reads do not pay this. This pool does the same for result arenas, bounded:
//!
//! * an arena comes back when the consumer releases the last array of the result (the
//!   Arrow release callback drops the buffer's owner), and is kept if the kept bytes stay
//!   within the handle's cap (`DELTACELLS_CHROMDATA_RETAIN_BYTES`, default a quarter of
//!   physical memory; 0 keeps nothing); only arenas of at least 2 MiB are kept;
//! * a read takes the smallest kept arena that fits (at most twice its size);
//! * an arena unused for [`IDLE`] is freed at the next read or release on the handle (no
//!   background thread), and all are freed when the handle is closed;
//! * kept memory is handed back to the kernel as lazily freeable (`MADV_FREE`): under
//!   memory pressure the kernel may reclaim it without swapping, and a reuse then faults
//!   in fresh pages as a new arena would (every byte of an arena is written before it is
//!   read, so contents never matter).
//!
//! Fork safety (a host may fork after reads): the pool is only ever `try_lock`ed, so a
//! lock held by a parent thread at the fork cannot block the child; the pool records the
//! process id that filled it, and a child frees the parent's arenas (its own copies of
//! them) instead of reusing them.

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, TryLockError, Weak};
use std::time::{Duration, Instant};

use arrow_buffer::{ArrowNativeType, Buffer, ScalarBuffer};

use crate::memory::HUGE;

/// Environment variable with a handle's cap on kept result memory, in bytes.
pub(crate) const RETAIN_ENV: &str = "DELTACELLS_CHROMDATA_RETAIN_BYTES";

/// A kept arena unused for this long is freed (at the next read or release).
pub(crate) const IDLE: Duration = Duration::from_secs(1);

/// Arena memory.
pub(crate) type Mem = Vec<MaybeUninit<u8>>;

/// Released result arenas of one handle.
pub(crate) struct Arenas {
    cap: usize,
    kept: Mutex<Kept>,
}

struct Kept {
    /// The process that filled `free` (a forked child frees them).
    pid: u32,
    /// Kept arenas and when each was released.
    free: Vec<(Mem, Instant)>,
    /// Sum of their capacities.
    bytes: usize,
}

impl Arenas {
    /// A pool keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Arenas {
        Arenas {
            cap,
            kept: Mutex::new(Kept {
                pid: std::process::id(),
                free: Vec::new(),
                bytes: 0,
            }),
        }
    }

    /// A pool with the cap of `DELTACELLS_CHROMDATA_RETAIN_BYTES`, else [`default_cap`]
    /// (a value that is not a number of bytes is ignored).
    pub(crate) fn from_env() -> Arenas {
        let cap = std::env::var(RETAIN_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or_else(default_cap);
        Arenas::new(cap)
    }

    /// Runs `f` on the kept arenas after dropping those of another process and those idle
    /// too long (returned, to be freed outside the lock). None when the lock is taken.
    fn with<T>(&self, f: impl FnOnce(&mut Kept) -> T) -> Option<(T, Vec<Mem>)> {
        let mut k = match self.kept.try_lock() {
            Ok(k) => k,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let mut gone = Vec::new();
        let pid = std::process::id();
        let now = Instant::now();
        let fresh = k.pid == pid;
        k.pid = pid;
        let mut i = 0;
        while i < k.free.len() {
            if !fresh || now.duration_since(k.free[i].1) >= IDLE {
                let (m, _) = k.free.swap_remove(i);
                k.bytes -= m.capacity();
                gone.push(m);
            } else {
                i += 1;
            }
        }
        Some((f(&mut k), gone))
    }

    /// A kept arena with room for `n` bytes (and at most `2 n`), if there is one.
    pub(crate) fn take(&self, n: usize) -> Option<Mem> {
        if n < HUGE || self.cap == 0 {
            return None;
        }
        let (mem, gone) = self.with(|k| {
            let best = k
                .free
                .iter()
                .enumerate()
                .filter(|(_, (m, _))| m.capacity() >= n && m.capacity() / 2 <= n)
                .min_by_key(|(_, (m, _))| m.capacity())
                .map(|(i, _)| i)?;
            let (m, _) = k.free.swap_remove(best);
            k.bytes -= m.capacity();
            Some(m)
        })?;
        drop(gone);
        let mut mem = mem?;
        if cfg!(debug_assertions) {
            // Tests: a reused arena holds garbage, so that a byte a read forgets to write
            // shows in its answer (release builds skip this: the memory is never read
            // before it is written).
            mem.clear();
            mem.resize(mem.capacity(), MaybeUninit::new(0xA5));
        }
        Some(mem)
    }

    /// Keeps a released arena for a later read if it fits under the cap, else frees it.
    pub(crate) fn give(&self, mem: Mem) {
        let size = mem.capacity();
        if size < HUGE || size > self.cap {
            return;
        }
        lazy_free(&mem);
        let mut mem = Some(mem);
        let gone = self.with(|k| {
            if k.bytes + size <= self.cap {
                k.bytes += size;
                k.free
                    .push((mem.take().expect("given once"), Instant::now()));
            }
        });
        drop(gone);
        drop(mem);
    }

    /// Bytes kept now (after dropping idle arenas).
    pub(crate) fn kept_bytes(&self) -> usize {
        self.with(|k| k.bytes).map_or(0, |(b, _)| b)
    }
}

/// The owner of a result buffer's memory taken from (or made for) a handle's pool: when
/// the last array using it is released, the memory goes back to the pool (freed if the
/// handle is gone or the pool full).
struct PooledMemory {
    mem: Mem,
    pool: Weak<Arenas>,
}

impl Drop for PooledMemory {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.mem));
        }
    }
}

/// `len` bytes of `mem` from `start` on as an Arrow buffer whose memory goes back to
/// `pool` when the buffer is released.
///
/// # Safety
/// `[start, start + len)` lies inside `mem` (`start + len <= mem.len()`) and every byte of
/// it has been written.
pub(crate) unsafe fn pooled_buffer(
    mem: Mem,
    start: usize,
    len: usize,
    pool: &Arc<Arenas>,
) -> Buffer {
    let ptr = mem.as_ptr().wrapping_add(start).cast::<u8>().cast_mut();
    let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
    let owner = PooledMemory {
        mem,
        pool: Arc::downgrade(pool),
    };
    // SAFETY: by the caller's contract the bytes lie inside `mem` and are initialised; the
    // heap memory of `mem` does not move when the Vec moves into the owner, which keeps
    // it alive as long as the buffer.
    unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(owner)) }
}

/// `n` values written by `fill` (handed the `n` slots, it must write each of them) as a
/// result buffer in memory from `pool` when a kept arena fits, else fresh (advised for
/// huge pages when large); the memory goes back to `pool` on release. A repeated read on
/// one handle then writes into memory already backed instead of faulting in fresh pages
/// (trace_id / cell_id expanded from runs: 11 % of get_chrom(coords) x5 at 10 M x 60 was
/// their page faults).
pub(crate) fn pooled_values<T: ArrowNativeType>(
    pool: &Arc<Arenas>,
    n: usize,
    fill: impl FnOnce(&mut [MaybeUninit<T>]),
) -> ScalarBuffer<T> {
    let bytes = n * std::mem::size_of::<T>();
    let mut mem = pool.take(bytes).unwrap_or_else(|| {
        let v: Mem = Vec::with_capacity(bytes);
        crate::memory::advise_huge(v.as_ptr().cast(), v.capacity());
        v
    });
    // SAFETY: MaybeUninit<u8> needs no initialisation and `bytes <= capacity`.
    unsafe { mem.set_len(bytes) };
    // SAFETY: any bytes are valid MaybeUninit<T>; align_to_mut puts only whole,
    // aligned values in the middle part.
    let (head, values, _) = unsafe { mem.align_to_mut::<MaybeUninit<T>>() };
    if !head.is_empty() || values.len() < n {
        // Not aligned for T (never with malloc's 16-byte alignment): a Vec of T instead.
        let mut v = vec![MaybeUninit::<T>::uninit(); n];
        fill(&mut v);
        // SAFETY: `fill` wrote every one of the n values.
        let v: Vec<T> = v.into_iter().map(|x| unsafe { x.assume_init() }).collect();
        return ScalarBuffer::from(v);
    }
    fill(&mut values[..n]);
    // SAFETY: the first `bytes` bytes are the n values `fill` wrote.
    let buf = unsafe { pooled_buffer(mem, 0, bytes, pool) };
    ScalarBuffer::new(buf, 0, n)
}

/// A quarter of physical memory (1 GiB where it cannot be known).
pub(crate) fn default_cap() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads system configuration.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && size > 0 {
            return (pages as usize).saturating_mul(size as usize) / 4;
        }
    }
    1 << 30
}

/// Tells the kernel it may reclaim the pages of `mem` without writing them out; a later
/// write to a page not reclaimed keeps it (no fault).
fn lazy_free(mem: &Mem) {
    #[cfg(target_os = "linux")]
    {
        let base = mem.as_ptr() as usize;
        let start = base.next_multiple_of(4096);
        let end = (base + mem.capacity()) / 4096 * 4096;
        if end > start {
            // SAFETY: [start, end) lies inside `mem`'s allocation, which this pool owns and
            // nothing reads before writing again; MADV_FREE only lets the kernel replace
            // those pages by zero pages under pressure. A failure is harmless and ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_FREE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = mem;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(n: usize) -> Mem {
        let mut v: Mem = Vec::with_capacity(n);
        v.resize(n, MaybeUninit::new(7));
        v
    }

    #[test]
    fn keeps_within_the_cap_and_hands_back_a_fitting_arena() {
        let a = Arenas::new(3 * HUGE);
        a.give(mem(2 * HUGE));
        assert_eq!(a.kept_bytes(), 2 * HUGE);
        // Over the cap: not kept.
        a.give(mem(2 * HUGE));
        assert_eq!(a.kept_bytes(), 2 * HUGE);
        // Too small for a request, and too large for a much smaller one.
        assert!(a.take(2 * HUGE + 1).is_none());
        assert!(a.take(HUGE - 1).is_none());
        let m = a.take(HUGE + 1).expect("a kept arena of 2x at most");
        assert_eq!(m.capacity(), 2 * HUGE);
        assert_eq!(a.kept_bytes(), 0);
        // Small arenas and a zero cap keep nothing.
        a.give(mem(HUGE - 1));
        assert_eq!(a.kept_bytes(), 0);
        let none = Arenas::new(0);
        none.give(mem(HUGE));
        assert_eq!(none.kept_bytes(), 0);
    }

    #[test]
    fn idle_arenas_are_freed_and_a_child_process_drops_the_parents() {
        let a = Arenas::new(4 * HUGE);
        a.give(mem(HUGE));
        {
            let mut k = a.kept.lock().unwrap();
            let t = k.free[0].1;
            k.free[0].1 = t.checked_sub(IDLE).expect("a clock past IDLE");
        }
        assert_eq!(a.kept_bytes(), 0, "idle for IDLE: freed");
        a.give(mem(HUGE));
        a.kept.lock().unwrap().pid ^= 1; // as if filled by another process
        assert!(a.take(HUGE).is_none());
        assert_eq!(a.kept_bytes(), 0);
        // A held lock never blocks: the arena is freed instead of kept.
        let held = a.kept.lock().unwrap();
        a.give(mem(HUGE));
        assert!(a.take(HUGE).is_none());
        drop(held);
        assert_eq!(a.kept_bytes(), 0);
    }

    /// Pooled values hold what `fill` wrote; released, their memory is kept by the pool
    /// and handed to the next column of a fitting size, which again holds its own values.
    #[test]
    fn pooled_values_are_written_kept_and_reused() {
        let pool = Arc::new(Arenas::new(64 << 20));
        let n = (3 << 20) / 8; // 3 MiB of i64: large enough to be kept
        let fill = |base: i64| {
            move |s: &mut [MaybeUninit<i64>]| {
                for (i, v) in s.iter_mut().enumerate() {
                    v.write(base + i as i64);
                }
            }
        };
        let a = pooled_values(&pool, n, fill(7));
        assert_eq!(a.len(), n);
        assert!(a.iter().enumerate().all(|(i, &v)| v == 7 + i as i64));
        let ptr = a.as_ptr();
        assert_eq!(pool.kept_bytes(), 0);
        drop(a);
        assert!(pool.kept_bytes() >= n * 8, "released memory kept");
        let b = pooled_values(&pool, n - 1000, fill(-5));
        assert_eq!(b.as_ptr(), ptr, "the kept memory reused");
        assert_eq!(pool.kept_bytes(), 0);
        assert!(b.iter().enumerate().all(|(i, &v)| v == -5 + i as i64));
        // Small columns are not pooled but hold their values all the same.
        let c = pooled_values(&pool, 10, fill(1));
        assert_eq!(&c[..], &(1..11).collect::<Vec<i64>>()[..]);
    }
}
