//! Fork safety. Hosts fork processes that have already used the library: R's
//! `parallel::mclapply`, Python's `multiprocessing`, PyTorch `DataLoader` workers. A child
//! starts with a copy of the parent's memory and one thread, the one that called `fork`:
//!
//! * the library's thread pools exist in the child only as data — their worker threads do
//!   not, so work handed to them would wait forever;
//! * a lock that another parent thread held at the moment of the fork stays locked in the
//!   child forever.
//!
//! So the library registers `pthread_atfork` handlers (once, on first use):
//!
//! * **prepare** (in the parent, before the fork): the forking thread closes a gate. It
//!   waits until no library work is in progress on any other thread — no exported call, no
//!   background job queued on a pool — and holds new work back until the fork is done.
//!   Library locks (pool cache, tile and row-group caches, the gate's own mutex) are held
//!   only while such work is in progress, so none is held across the fork by a thread that
//!   will not exist in the child.
//! * **parent** (after the fork): the gate opens again.
//! * **child**: the gate opens. The thread pools are the parent's, whose threads do not
//!   exist here: the pool cache records the process id that filled it, and the child's
//!   first parallel call, seeing another pid, drops the pools without joining or freeing
//!   them (a few kilobytes per pool are leaked) and starts new ones (`crate::pool`; this
//!   module does not know the pools, so that the two do not import each other).
//!
//! Why handlers and not only the process-id check: a pid check finds dead pools but cannot
//! release a lock that was held at the fork. The pid check covers a child made without the
//! handlers (raw `clone(2)`) as well.
//!
//! The cost: a `fork` waits for library calls in progress on other threads to return (a
//! gather, a query). Everything else — decoded-tile and row-group caches, open files — is
//! process memory copied into the child, and every file read is positional (`pread`), so
//! parent and child never share a file offset.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, MutexGuard, Once};

struct Gate {
    /// Library work in progress: threads inside an outermost scope, plus queued jobs.
    active: usize,
    /// A thread is forking: new work waits until the fork is done.
    forking: bool,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    active: 0,
    forking: false,
});
/// Signalled when work ends during a fork, and when a fork is done.
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// Nesting depth of `enter` scopes on this thread (only the outermost one counts).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The gate's lock, held by the forking thread from prepare to parent / child.
    static HELD: RefCell<Option<MutexGuard<'static, Gate>>> = const { RefCell::new(None) };
}

fn lock() -> MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn depth() -> usize {
    DEPTH.try_with(Cell::get).unwrap_or(0)
}

/// Counts one piece of work; waits while a fork is in preparation, unless this thread is
/// already inside library work (the forking thread waits for it, so it must go on).
fn begin(may_wait: bool) {
    register();
    let mut g = lock();
    while may_wait && g.forking {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    g.active += 1;
}

fn end() {
    let mut g = lock();
    g.active = g.active.saturating_sub(1);
    if g.forking {
        CHANGED.notify_all();
    }
}

/// Library work on the calling thread, from `enter` until dropped. Scopes nest; only the
/// outermost one counts (and may wait for a fork in preparation to finish).
#[must_use]
pub struct Scope {
    /// Tied to the thread that entered it.
    _not_send: PhantomData<*const ()>,
}

/// Marks the calling thread as doing library work (every exported call does).
pub fn enter() -> Scope {
    let d = depth();
    if d == 0 {
        begin(true);
    }
    let _ = DEPTH.try_with(|c| c.set(d + 1));
    Scope {
        _not_send: PhantomData,
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let d = depth().saturating_sub(1);
        let _ = DEPTH.try_with(|c| c.set(d));
        if d == 0 {
            end();
        }
    }
}

/// A background job (e.g. a tile being encoded on a pool) counted as library work from its
/// submission until dropped, so that a fork waits for it and the child never inherits a
/// half-run job.
#[must_use]
pub struct Job(());

/// Counts a job about to be queued; move the token into the job.
pub fn job() -> Job {
    begin(depth() == 0);
    Job(())
}

impl Drop for Job {
    fn drop(&mut self) {
        end();
    }
}

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(unix)]
        // SAFETY: the three handlers are `extern "C"` functions that never unwind. glibc
        // ties them to this object (through `__dso_handle`) and drops them if it is unloaded.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}

extern "C" fn prepare() {
    // The forking thread's own work (if it forks from inside a call) goes on in both
    // processes; wait for everyone else's.
    let own = usize::from(depth() > 0);
    let mut g = lock();
    g.forking = true;
    while g.active > own {
        g = CHANGED.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(g));
}

fn reopen(after: impl FnOnce(&mut Gate)) {
    if let Ok(Some(mut g)) = HELD.try_with(|h| h.borrow_mut().take()) {
        g.forking = false;
        after(&mut g);
        drop(g);
        CHANGED.notify_all();
    }
}

extern "C" fn parent() {
    reopen(|_| {});
}

extern "C" fn child() {
    let own = usize::from(depth() > 0);
    reopen(|g| g.active = own);
}

/// Marks the calling thread as a worker of a library pool: it only runs work of scopes and
/// jobs that are already counted, so its own scopes are nested ones and never wait.
pub(crate) fn worker_thread() {
    let _ = DEPTH.try_with(|c| c.set(c.get() + 1));
}
