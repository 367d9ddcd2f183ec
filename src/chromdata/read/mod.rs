//! Reading a store backed: [`ChromData::open`] reads and validates the metadata, the index
//! arrays, the small tables and the Parquet footers (spec §14); queries (§15) read only the
//! row groups and columns they need.
//!
//! All three layouts (2.0 flat, 2.1 partitioned, 2.2 primary+coords) answer every query
//! identically. Internally a query is a list of *runs* (stored blocks of one cell, trace and
//! chromosome) in output order ([`plan`]); each run is a row range on the "key side" (the
//! files that hold bin_id / trace_id / cell_id / x, y, z) and on the "extra side" (extra
//! spot columns, spot tracks, layers). In 2.0 / 2.1 both sides are the same global rows; in
//! 2.2 the key side is the coords partitions and the extra side the primary tables.
//! [`assemble`] reads the planned rows of each file set and builds the result columns.

mod arenas;
mod assemble;
mod codes;
mod components;
mod files;
mod gather;
mod index;
mod iter;
mod open;
mod plan;
mod query;
mod schema;
mod store;
mod tables;

pub use components::SHAPE_METADATA;
pub use iter::SpotBatches;
pub use plan::Columns;
pub use query::CatValue;
#[doc(hidden)]
pub use query::{FileRead, PlanQuery};
pub use store::{ChromData, Info};
