//! Status codes, the thread-local last error, and the panic barrier every exported
//! function goes through.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use crate::error::{ErrorKind, Result};

/// Result of every fallible call (a C `int32_t`; the `DC_OK` / `DC_ERR_*` constants).
pub type dc_status = i32;

/// Success.
pub const DC_OK: dc_status = 0;
/// NULL where not allowed, bad enum value, bad UTF-8, inconsistent arguments.
pub const DC_ERR_INVALID_ARGUMENT: dc_status = 1;
/// The OS refused a read/write/rename (the message names the path).
pub const DC_ERR_IO: dc_status = 2;
/// Missing file, unknown id / column / table, optional part absent.
pub const DC_ERR_NOT_FOUND: dc_status = 3;
/// Malformed or inconsistent data (bad magic, bad structure, bad counts).
pub const DC_ERR_FORMAT: dc_status = 4;
/// CRC-32 / SHA-256 mismatch.
pub const DC_ERR_CHECKSUM: dc_status = 5;
/// A version, flag, layout or type this build does not read.
pub const DC_ERR_UNSUPPORTED: dc_status = 6;
/// Index past the end (cell, tile, gene).
pub const DC_ERR_OUT_OF_RANGE: dc_status = 7;
/// Caller buffer shorter than needed (the needed size is reported).
pub const DC_ERR_BUFFER_TOO_SMALL: dc_status = 8;
/// Call not valid now (e.g. append after finish, or a poisoned handle).
pub const DC_ERR_STATE: dc_status = 9;
/// A policy limit was hit (e.g. too many exceptions in a tile, memory budget).
pub const DC_ERR_LIMIT: dc_status = 10;
/// Output path exists and overwriting was not allowed.
pub const DC_ERR_EXISTS: dc_status = 11;
/// A bug: a Rust panic caught at the boundary; the handle involved is poisoned.
pub const DC_ERR_INTERNAL: dc_status = 12;

pub(crate) fn status_of(kind: ErrorKind) -> dc_status {
    match kind {
        ErrorKind::InvalidArgument => DC_ERR_INVALID_ARGUMENT,
        ErrorKind::Io => DC_ERR_IO,
        ErrorKind::NotFound => DC_ERR_NOT_FOUND,
        ErrorKind::Format => DC_ERR_FORMAT,
        ErrorKind::Checksum => DC_ERR_CHECKSUM,
        ErrorKind::Unsupported => DC_ERR_UNSUPPORTED,
        ErrorKind::OutOfRange => DC_ERR_OUT_OF_RANGE,
        ErrorKind::BufferTooSmall { .. } => DC_ERR_BUFFER_TOO_SMALL,
        ErrorKind::State => DC_ERR_STATE,
        ErrorKind::Limit => DC_ERR_LIMIT,
        ErrorKind::Exists => DC_ERR_EXISTS,
        ErrorKind::Internal => DC_ERR_INTERNAL,
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: &str) {
    // One line, no interior NULs.
    let line: String = message
        .chars()
        .map(|c| {
            if c == '\n' || c == '\r' || c == '\0' {
                ' '
            } else {
                c
            }
        })
        .collect();
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(line).unwrap_or_default());
}

/// The message `dc_last_error` returns now, as a `String`.
pub(crate) fn last_error_message() -> String {
    LAST_ERROR
        .try_with(|e| e.borrow().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs the body of an exported function: converts its error to a status and message, and
/// a panic to `DC_ERR_INTERNAL`. The panic is not printed (`crate::contain`: a library scope).
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> dc_status {
    // Counted as library work: a fork on another thread waits for this call (crate::fork).
    let _work = crate::fork::enter();
    match crate::contain::catch(body) {
        Ok(Ok(())) => DC_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            status_of(e.kind)
        }
        Err(what) => {
            set_last_error(&format!("internal error (please report): {what}"));
            DC_ERR_INTERNAL
        }
    }
}

/// Like `guard` for functions that cannot fail and return a value: a panic yields `fallback`.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    let mut out = None;
    let status = guard(|| {
        out = Some(body());
        Ok(())
    });
    match (status, out) {
        (DC_OK, Some(v)) => v,
        _ => fallback,
    }
}

/// Name of a status code, e.g. `"DC_ERR_FORMAT"`; `"DC_UNKNOWN_STATUS"` for a value that
/// is not a status. The string is static.
#[no_mangle]
pub extern "C" fn dc_status_name(s: dc_status) -> *const c_char {
    guard_value(c"DC_UNKNOWN_STATUS".as_ptr(), || status_name(s).as_ptr())
}

fn status_name(s: dc_status) -> &'static std::ffi::CStr {
    match s {
        DC_OK => c"DC_OK",
        DC_ERR_INVALID_ARGUMENT => c"DC_ERR_INVALID_ARGUMENT",
        DC_ERR_IO => c"DC_ERR_IO",
        DC_ERR_NOT_FOUND => c"DC_ERR_NOT_FOUND",
        DC_ERR_FORMAT => c"DC_ERR_FORMAT",
        DC_ERR_CHECKSUM => c"DC_ERR_CHECKSUM",
        DC_ERR_UNSUPPORTED => c"DC_ERR_UNSUPPORTED",
        DC_ERR_OUT_OF_RANGE => c"DC_ERR_OUT_OF_RANGE",
        DC_ERR_BUFFER_TOO_SMALL => c"DC_ERR_BUFFER_TOO_SMALL",
        DC_ERR_STATE => c"DC_ERR_STATE",
        DC_ERR_LIMIT => c"DC_ERR_LIMIT",
        DC_ERR_EXISTS => c"DC_ERR_EXISTS",
        DC_ERR_INTERNAL => c"DC_ERR_INTERNAL",
        _ => c"DC_UNKNOWN_STATUS",
    }
}

/// The message of the most recent failing call on the calling thread: one line naming the
/// object and the rule broken. Never NULL (empty if no call has failed on this thread).
/// Valid until the next `dc_` call on this thread.
#[no_mangle]
pub extern "C" fn dc_last_error() -> *const c_char {
    guard_value(c"".as_ptr(), || {
        LAST_ERROR
            .try_with(|e| e.borrow().as_ptr())
            .unwrap_or(c"".as_ptr())
    })
}
