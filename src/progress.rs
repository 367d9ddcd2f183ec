//! Progress of long operations (conversion, verification, ChromData import), reported to an
//! observer the caller passes in.
//!
//! The library prints nothing: an operation that can take long calls
//! [`Observer::progress`] with a [`Progress`] record — which stage it is in, how much of it
//! is done, out of how much when known — and the caller shows it (the `deltacells` tool
//! draws a progress bar on a terminal). The observer answers whether to go on: `false`
//! cancels the operation, which then stops with [`ErrorKind::State`] ("cancelled") and,
//! like any failed write, leaves nothing behind at its target.
//!
//! The shape is chosen so that the C ABI can expose it as it stands, e.g.
//!
//! ```c
//! /* Returns 0 to go on, anything else to cancel. total = UINT64_MAX: unknown. */
//! typedef int32_t (*dc_progress_fn)(void *user, int32_t stage, int32_t unit,
//!                                   uint64_t done, uint64_t total);
//! ```
//!
//! with [`Stage`] and [`Unit`] as `DC_STAGE_*` / `DC_UNIT_*` codes (their discriminants).
//! Observers are `Sync` because parallel work reports from pool threads; calls for one
//! operation never overlap in time with a `done` going backwards within a stage.

use crate::error::{Error, ErrorKind, Result};

/// What a long operation is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Stage {
    /// Reading the input and writing the output as it goes (convert: cells; import: bytes
    /// of the table).
    Read = 0,
    /// Checking stored data (verify: tiles decoded and checked).
    Verify = 1,
    /// Comparing with a source (verify --against: cells).
    Compare = 2,
    /// Finishing a write: sorting, merging, indexing and writing the final files (ChromData
    /// writer; no count: `total` is `None`).
    Finish = 3,
}

impl Stage {
    /// A lower-case word for display ("reading", "verifying", ...).
    pub fn verb(self) -> &'static str {
        match self {
            Stage::Read => "reading",
            Stage::Verify => "verifying",
            Stage::Compare => "comparing",
            Stage::Finish => "finishing",
        }
    }
}

/// What `done` and `total` count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Unit {
    Cells = 0,
    Tiles = 1,
    Rows = 2,
    Bytes = 3,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Cells => "cells",
            Unit::Tiles => "tiles",
            Unit::Rows => "rows",
            Unit::Bytes => "bytes",
        }
    }
}

/// One progress report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    pub unit: Unit,
    /// Units done so far in this stage.
    pub done: u64,
    /// Units in this stage, when known.
    pub total: Option<u64>,
}

/// Receives progress reports; returns `false` to cancel the operation.
pub trait Observer: Sync {
    fn progress(&self, p: Progress) -> bool;
}

impl<F: Fn(Progress) -> bool + Sync> Observer for F {
    fn progress(&self, p: Progress) -> bool {
        self(p)
    }
}

/// The observer that wants nothing (never cancels).
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Observer for Silent {
    fn progress(&self, _: Progress) -> bool {
        true
    }
}

/// Reports `p`; a cancel becomes the operation's error.
pub fn report(observer: &dyn Observer, p: Progress) -> Result<()> {
    if observer.progress(p) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!(
                "cancelled by the progress observer while {} ({} of {} {})",
                p.stage.verb(),
                p.done,
                p.total.map_or("?".to_string(), |t| t.to_string()),
                p.unit.name()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn closures_observe_and_cancel() {
        let seen = Mutex::new(Vec::new());
        let obs = |p: Progress| {
            seen.lock().unwrap().push(p.done);
            p.done < 2
        };
        let p = |done| Progress {
            stage: Stage::Read,
            unit: Unit::Cells,
            done,
            total: Some(3),
        };
        assert!(report(&obs, p(1)).is_ok());
        let e = report(&obs, p(2)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::State);
        assert!(e.message.contains("cancelled") && e.message.contains("2 of 3 cells"));
        assert_eq!(*seen.lock().unwrap(), vec![1, 2]);
        assert!(report(&Silent, p(7)).is_ok());
    }
}
