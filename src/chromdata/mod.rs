//! ChromData stores (`<name>.chromdata.zarr` directories and `.cdz` zips): spec 2.0–2.2,
//! read backed and written by a streaming writer.
//!
//! The code is split by direction around one metadata model:
//! - [`spec`]: the metadata documents (layouts, type vocabulary, root and tables
//!   attributes, column descriptors, portable names) as serde types both parsed and
//!   emitted, with their validation rules; no I/O.
//! - `access`: the bytes of a store (directory or `.cdz` members), its Parquet files and
//!   Zarr arrays.
//! - `read`: open in steps, the index, query planning, assembly, iteration.
//! - `write`: ids, bins, columns, derived columns, runs, merge, row groups, sinks,
//!   metadata, finish; and the FOF-CT import ([`fofct`]) on top of it.
//!
//! `read` and `write` never import each other; both use `spec`, `access` and
//! `values` (the Arrow value normalisation both directions share).

mod access;
pub mod fofct;
mod read;
pub mod rewrite;
mod spec;
mod values;
mod write;

pub use read::{CatValue, ChromData, Columns, Info, SpotBatches, SHAPE_METADATA};
#[doc(hidden)]
pub use read::{FileRead, PlanQuery};
pub use rewrite::{rewrite, RewriteOptions};
pub use spec::Layout;
pub use write::{
    default_memory_budget, is_temp_name, ChromDataWriter, WriterOptions, WriterParam,
    MIN_MEMORY_BUDGET,
};

/// Test hook of the metadata model (not part of the API): parses a root and a
/// `tables/zarr.json` document with the model, checks that what it emits parses back to the
/// same model, and returns the emitted documents as the writer would store them.
#[doc(hidden)]
pub fn metadata_round_trip(
    root: &serde_json::Value,
    tables: &serde_json::Value,
) -> crate::error::Result<(Vec<u8>, Vec<u8>)> {
    spec::round_trip(root, tables)
}

/// Test hook of the metadata model (not part of the API): parses a §12 node document
/// (`what` = "group" for a component group, "result" for a results member), emits it and
/// checks that the emitted bytes parse back to the same model; returns them.
#[doc(hidden)]
pub fn component_metadata_round_trip(
    what: &str,
    doc: &serde_json::Value,
) -> crate::error::Result<Vec<u8>> {
    spec::component_round_trip(what, doc)
}
