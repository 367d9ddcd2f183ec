//! The C ABI. This module translates between C and the core: it checks pointers, maps
//! errors to `dc_status`, catches panics, and never computes anything itself.
#![allow(non_camel_case_types)]

mod arrow;
mod batches;
mod chromdata;
mod chromdata_writer;
mod dataset;
mod error;
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
