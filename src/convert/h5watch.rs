//! The libhdf5 call in progress, for the CLI's watchdog (docs/reliability.md §1).
//!
//! On some malformed files libhdf5 never returns: it loops in `H5C_protect` under
//! `H5HG_read` (the `h5ad` fuzz target's `timeout-*` artifacts). Running it in a child
//! process contains its crashes, not a hang, and a limit on the whole command would be
//! wrong (a conversion may take hours). So the limit is per libhdf5 call: every read of
//! `convert::h5ad` through the hdf5 binding runs inside [`small`] (metadata, attributes,
//! opening an object: a fixed budget, the *base*) or [`bulk`] (a dataset read of a known
//! size: the base plus one second per MiB requested, [`budget`]), which record what is being
//! read and its budget. The CLI's isolated child runs a watchdog thread that reads
//! [`current`] and ends the child when one call has outlived its budget.
//!
//! Scopes nest: a scope around a whole step (opening X, a block of cells) covers the
//! libhdf5 calls made outside a finer scope, such as closing handles; when an inner scope
//! ends, the outer one starts again with a fresh record (its time counts from there), so
//! no scope ever accumulates the time of many calls. Our own computing inside a scope that
//! can take long (transposing a CSC matrix) runs in [`unwatched`].
//!
//! Nothing is recorded until [`watch`] is called: library users and the fuzz targets pay
//! one relaxed atomic load per scope.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The base budget when [`watch`] is not given another: one call that reads metadata, an
/// attribute or opens an object (libhdf5 takes micro- to milliseconds for those).
pub const DEFAULT_BASE: Duration = Duration::from_secs(60);

/// A bulk read is allowed the base plus one second per this many bytes requested (a floor
/// of 1 MiB/s: far below a disk, a network file system or libhdf5's deflate).
pub const BULK_BYTES_PER_SECOND: u64 = 1 << 20;

/// Bytes assumed per element of a variable-length string array (the strings' lengths are
/// not known before the read): generous for cell barcodes and gene names.
pub const STRING_BYTES: u64 = 256;

/// The call in progress, as the watchdog sees it.
#[derive(Clone, Debug)]
pub struct Call {
    /// Changes with every call (and when an outer scope starts again).
    pub seq: u64,
    /// What is being read ("var attribute '_index'").
    pub what: String,
    /// How long it may take.
    pub budget: Duration,
}

/// A call that ran, for measuring the budgets' margin: the time it was the call in progress
/// (what the watchdog counts; an outer scope's time excludes its inner scopes').
#[derive(Clone, Debug)]
pub struct Timed {
    pub what: String,
    pub elapsed: Duration,
    pub budget: Duration,
}

impl Timed {
    /// How many times its duration the budget is.
    pub fn margin(&self) -> f64 {
        self.budget.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9)
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static BASE_MS: AtomicU64 = AtomicU64::new(60_000);
static SEQ: AtomicU64 = AtomicU64::new(0);
static CURRENT: Mutex<Option<(Call, Instant)>> = Mutex::new(None);
/// The slowest call, and the one with the smallest margin.
static SEEN: Mutex<(Option<Timed>, Option<Timed>)> = Mutex::new((None, None));

/// Starts recording calls, with `base` as the budget of a small call.
pub fn watch(base: Duration) {
    BASE_MS.store(base.as_millis().max(1) as u64, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
}

/// The budget of a call that requests `bytes` (0: a small call).
pub fn budget(bytes: u64) -> Duration {
    Duration::from_millis(BASE_MS.load(Ordering::Relaxed))
        + Duration::from_secs_f64(bytes as f64 / BULK_BYTES_PER_SECOND as f64)
}

/// The call in progress (None: no libhdf5 call, or not watching).
pub fn current() -> Option<Call> {
    CURRENT
        .lock()
        .map(|c| c.as_ref().map(|(c, _)| c.clone()))
        .unwrap_or(None)
}

/// The slowest call so far and the call with the smallest margin (None until a call ended).
pub fn slowest() -> (Option<Timed>, Option<Timed>) {
    SEEN.lock().map(|s| s.clone()).unwrap_or((None, None))
}

/// Runs `f`, one libhdf5 call or a few on one small object, with the base budget.
pub(crate) fn small<T>(what: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    bulk(what, 0, f)
}

/// Runs `f`, a libhdf5 read of `bytes` bytes, with the budget [`budget`]`(bytes)`.
pub(crate) fn bulk<T>(what: impl FnOnce() -> String, bytes: u64, f: impl FnOnce() -> T) -> T {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let call = Call {
        seq: 0,
        what: what(),
        budget: budget(bytes),
    };
    let _scope = Scope::enter(Some(call));
    f()
}

/// Runs `f`, our own computing inside a scope: no libhdf5 call, no budget.
pub(crate) fn unwatched<T>(f: impl FnOnce() -> T) -> T {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let _scope = Scope::enter(None);
    f()
}

/// A recorded scope: puts back the outer record (with a new `seq`) when dropped, also on
/// a panic unwinding through it (`contain::decoding` catches those).
struct Scope {
    outer: Option<Call>,
}

impl Scope {
    fn enter(call: Option<Call>) -> Scope {
        Scope {
            outer: replace(call),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        replace(self.outer.take());
    }
}

/// Installs `call` (with a new sequence number) as the current one; returns the previous,
/// after noting how long it was current.
fn replace(call: Option<Call>) -> Option<Call> {
    let now = Instant::now();
    let call = call.map(|c| {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
        (Call { seq, ..c }, now)
    });
    let old = match CURRENT.lock() {
        Ok(mut c) => std::mem::replace(&mut *c, call),
        Err(p) => std::mem::replace(&mut *p.into_inner(), call),
    };
    old.map(|(c, since)| {
        note(&c, now - since);
        c
    })
}

/// Keeps the slowest call and the one with the smallest margin.
fn note(c: &Call, elapsed: Duration) {
    let t = Timed {
        what: c.what.clone(),
        elapsed,
        budget: c.budget,
    };
    if let Ok(mut s) = SEEN.lock() {
        if s.0.as_ref().is_none_or(|x| elapsed > x.elapsed) {
            s.0 = Some(t.clone());
        }
        if s.1.as_ref().is_none_or(|x| t.margin() < x.margin()) {
            s.1 = Some(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nested scopes: the inner call is current while it runs; the outer comes back with a
    /// new sequence number (its time starts again); `unwatched` clears the record.
    #[test]
    fn scopes_nest_and_restore_the_outer_call() {
        watch(Duration::from_secs(7));
        assert_eq!(budget(0), Duration::from_secs(7));
        assert_eq!(budget(3 << 20), Duration::from_secs(10));
        small(
            || "outer".to_string(),
            || {
                let first = current().unwrap();
                assert_eq!(first.what, "outer");
                bulk(
                    || "inner".to_string(),
                    1 << 20,
                    || {
                        let c = current().unwrap();
                        assert_eq!((c.what.as_str(), c.budget.as_secs()), ("inner", 8));
                    },
                );
                let again = current().unwrap();
                assert_eq!(again.what, "outer");
                assert!(again.seq > first.seq);
                unwatched(|| assert!(current().is_none()));
                assert_eq!(current().unwrap().what, "outer");
            },
        );
        assert!(current().is_none());
        let (slow, tight) = slowest();
        assert!(slow.is_some() && tight.is_some());
    }
}
