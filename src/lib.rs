//! libdeltacells: the native reader and writer of deltacells datasets, with a stable C ABI.
//!
//! Core modules (`tile`, `dataset`, ...) know nothing of the C ABI; `ffi` translates between the two.

/// cbindgen:ignore
pub mod chromdata;
/// cbindgen:ignore
#[doc(hidden)]
pub mod contain;
/// cbindgen:ignore
#[cfg(feature = "cli")]
pub mod convert;
/// cbindgen:ignore
pub mod dataset;
/// cbindgen:ignore
pub mod error;
pub mod ffi;
/// cbindgen:ignore
pub mod fork;
/// cbindgen:ignore
pub(crate) mod memory;
/// cbindgen:ignore
pub(crate) mod parquet_meta;
/// cbindgen:ignore
pub mod pool;
/// cbindgen:ignore
pub mod progress;
/// cbindgen:ignore
pub mod storage;
/// cbindgen:ignore
pub mod tile;

pub use error::{Error, ErrorKind, Result};
