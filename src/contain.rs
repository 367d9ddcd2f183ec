//! Panics never reach a caller and are never printed (docs/reliability.md).
//!
//! * Our own code turns bad input into an `Error`; a panic in it is a bug. The C ABI's guard
//!   catches it (`DC_ERR_INTERNAL`, the handle poisoned).
//! * Decoders of other crates (parquet, zarrs, zip, arrow-ipc, hdf5) are run inside
//!   [`decoding`]: a panic there means the data was malformed in a way the dependency did
//!   not check, and becomes `ErrorKind::Format` naming the object. The handle stays usable.
//! * Nothing is printed: a panic hook, installed once and chained to the hook that was there
//!   before, keeps quiet about panics raised inside a library scope (a guarded C call, a
//!   `decoding` scope, or a worker thread of a library pool) and hands every other panic to
//!   the previous hook, so the host's own panics are reported exactly as before.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use crate::error::{Error, Result};

thread_local! {
    /// Depth of library scopes on this thread (pool workers: always at least 1).
    static QUIET: Cell<usize> = const { Cell::new(0) };
    /// Where the last quiet panic on this thread happened ("file:line:col").
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the library's panic hook, once per process. It stays correct for the host:
/// panics outside library scopes go to the hook that was installed before it.
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.try_with(Cell::get).unwrap_or(0) > 0 {
                let at = info.location().map(|l| l.to_string());
                let _ = LOCATION.try_with(|s| *s.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Marks the calling thread as a worker of a library pool for good: everything it runs is
/// library work whose panics are caught by a scope on the thread that submitted it.
pub(crate) fn quiet_thread() {
    install_hook();
    let _ = QUIET.try_with(|q| q.set(q.get() + 1));
}

/// Runs `f` in a library scope and catches a panic: `Err(message)`, nothing printed.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    install_hook();
    let _ = QUIET.try_with(|q| q.set(q.get() + 1));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    let _ = QUIET.try_with(|q| q.set(q.get().saturating_sub(1)));
    r.map_err(|payload| {
        let at = LOCATION.try_with(|s| s.borrow_mut().take()).ok().flatten();
        match at {
            Some(at) => format!("{} (at {at})", payload_text(payload.as_ref())),
            None => payload_text(payload.as_ref()),
        }
    })
}

/// The text of a panic payload (`panic!` with a literal or a format string).
pub(crate) fn payload_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

static CONTAINED: AtomicU64 = AtomicU64::new(0);

/// Dependency panics turned into `Format` errors so far in this process (the fuzz targets'
/// strict mode reports them: each one is a check missing before decoding).
#[doc(hidden)]
pub fn contained_panics() -> u64 {
    CONTAINED.load(Ordering::Relaxed)
}

/// Runs a dependency's decoder on the data of `object`: a panic inside it becomes a
/// `Format` error naming `object`. Use it around calls into parquet, zarrs, zip, arrow-ipc
/// and hdf5 that read stored bytes.
pub(crate) fn decoding<T>(object: impl Display, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch(f) {
        Ok(r) => r,
        Err(what) => {
            CONTAINED.fetch_add(1, Ordering::Relaxed);
            Err(Error::format(format!(
                "{object}: malformed data (the decoder failed: {what})"
            )))
        }
    }
}
