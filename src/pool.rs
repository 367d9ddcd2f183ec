//! Thread pools owned by the library. Host applications have their own threads (and often
//! their own rayon global pool), so parallel work here never runs on rayon's global pool.

use std::sync::{Arc, Mutex, MutexGuard};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, ErrorKind, Result};
use crate::fork;

/// Upper bound on the threads of one pool: a caller asking for more gets this many.
pub const MAX_THREADS: usize = 256;
/// Distinct pool sizes kept alive; a request for yet another size builds a pool for that call.
const MAX_CACHED_POOLS: usize = 8;

/// Threads meant by "0": `DELTACELLS_NUM_THREADS` if it is a positive integer, else all cores.
pub fn default_threads() -> usize {
    std::env::var("DELTACELLS_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(cores)
        .min(MAX_THREADS)
}

/// The cores this process may use, asked once: `available_parallelism` reads the cgroup's
/// CPU quota files on every call (open, stat, read: 2.6 % of a ChromData open, which asks
/// for its thread count several times).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Resolves a caller's thread count (0 = default) to the number actually used.
pub fn resolve_threads(requested: usize) -> usize {
    if requested == 0 {
        default_threads()
    } else {
        requested.min(MAX_THREADS)
    }
}

/// The pools kept alive, and the process that started them.
struct PoolCache {
    pid: u32,
    pools: Vec<(usize, Arc<ThreadPool>)>,
    /// Pools inherited through a fork: kept, never dropped (see `forget_pools`).
    dead: Vec<Arc<ThreadPool>>,
}

impl PoolCache {
    /// Retires every pool without dropping it: in a forked child its threads do not exist,
    /// and dropping a pool would signal them and wait. Kept reachable (a few KB each), so
    /// leak checkers do not report them.
    fn forget_pools(&mut self) {
        let pools = std::mem::take(&mut self.pools);
        self.dead.extend(pools.into_iter().map(|(_, p)| p));
        self.pid = std::process::id();
    }
}

static POOLS: Mutex<PoolCache> = Mutex::new(PoolCache {
    pid: 0,
    pools: Vec::new(),
    dead: Vec::new(),
});

fn lock_pools() -> MutexGuard<'static, PoolCache> {
    POOLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pool with exactly `threads` workers (`threads` >= 2), shared by every caller asking for
/// that size.
pub fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    // Counted as library work, so that a fork never copies this lock held.
    let _work = fork::enter();
    let mut cached = lock_pools();
    if cached.pid != std::process::id() {
        // A forked child (crate::fork): the pools' threads do not exist here.
        cached.forget_pools();
    }
    if let Some((_, p)) = cached.pools.iter().find(|(n, _)| *n == threads) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("deltacells-{i}"))
            // Workers run only work of library calls and jobs already counted by the fork
            // gate; they must never wait at it.
            .start_handler(|_| {
                fork::worker_thread();
                // Their panics travel to the submitting thread's scope: never printed.
                crate::contain::quiet_thread();
            })
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot start {threads} worker threads: {e}"),
                )
            })?,
    );
    if cached.pools.len() < MAX_CACHED_POOLS {
        cached.pools.push((threads, p.clone()));
    }
    Ok(p)
}

/// Queues `job` on `pool` to run in the background. It counts as library work from now until
/// it has run, so that a fork waits for it (see `crate::fork`).
pub fn spawn(pool: &ThreadPool, job: impl FnOnce() + Send + 'static) {
    let token = fork::job();
    pool.spawn(move || {
        let _token = token;
        job()
    });
}

/// Applies `f` to every item with parallelism `threads` (already resolved) and returns the
/// results in item order, or the error of the first failing item (in item order, so the
/// error does not depend on scheduling). One thread runs inline on the caller's thread.
pub fn map<T, R, F>(threads: usize, items: Vec<T>, f: F) -> Result<Vec<R>>
where
    T: Send,
    R: Send,
    F: Fn(T) -> Result<R> + Sync + Send,
{
    use rayon::prelude::*;
    let results: Vec<Result<R>> = if threads <= 1 || items.len() <= 1 {
        items.into_iter().map(&f).collect()
    } else {
        pool(threads)?.install(|| items.into_par_iter().map(&f).collect())
    };
    results.into_iter().collect()
}
