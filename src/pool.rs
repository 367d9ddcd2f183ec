//! Thread pools owned by the library. Host applications have their own threads (and often
//! their own rayon global pool), so parallel work here never runs on rayon's global pool.

use std::sync::{Arc, Mutex, OnceLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, ErrorKind, Result};

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
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .min(MAX_THREADS)
}

/// Resolves a caller's thread count (0 = default) to the number actually used.
pub fn resolve_threads(requested: usize) -> usize {
    if requested == 0 {
        default_threads()
    } else {
        requested.min(MAX_THREADS)
    }
}

type PoolCache = Mutex<Vec<(usize, Arc<ThreadPool>)>>;

fn pools() -> &'static PoolCache {
    static POOLS: OnceLock<PoolCache> = OnceLock::new();
    POOLS.get_or_init(|| Mutex::new(Vec::new()))
}

/// A pool with exactly `threads` workers (`threads` >= 2), shared by every caller asking for
/// that size.
pub fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    let mut cached = pools().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = cached.iter().find(|(n, _)| *n == threads) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("deltacells-{i}"))
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot start {threads} worker threads: {e}"),
                )
            })?,
    );
    if cached.len() < MAX_CACHED_POOLS {
        cached.push((threads, p.clone()));
    }
    Ok(p)
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
