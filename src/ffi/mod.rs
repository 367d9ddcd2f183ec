//! The C ABI. This module translates between C and the core: it checks pointers, maps
//! errors to `dc_status`, catches panics, and never computes anything itself.
//!
//! One file per handle type (`dataset`, `writer`, `chromdata`, `chromdata_writer`) or group
//! of free functions (`tile`, `version`), and one idiom shared by all of them:
//!
//! * `error` — status codes, `dc_last_error`, and `guard`, the panic barrier every exported
//!   function runs its body in;
//! * `handle` — handle types: `castable!` ties an opaque C struct to its Rust value;
//!   `new_handle`, `with_ref`, `with_mut` and `free_handle` do the NULL check, the cast, the
//!   poison check and the panic barrier once for every handle type;
//! * `args` — strings, arrays and out-parameters from C (`str_in`, `slice_in`, `Out`, ...);
//! * `arrow` — Arrow record batches in (`BatchIn`), streams out (`export_stream`).
#![allow(non_camel_case_types)]

mod args;
mod arrow;
mod batches;
mod chromdata;
mod chromdata_writer;
mod dataset;
mod error;
mod handle;
mod tile;
mod version;
mod writer;

pub use batches::*;
pub use chromdata::*;
pub use chromdata_writer::*;
pub use dataset::*;
pub use error::*;
pub use tile::*;
pub use version::*;
pub use writer::*;
