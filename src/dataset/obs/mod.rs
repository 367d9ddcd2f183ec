//! Obs: per-cell metadata stored beside the tiles (format v2, "Obs").
//!
//! * `obs/schema.json` describes the columns: `{"format": "deltacells-obs", "version": 1,
//!   "columns": [{"name", "kind", "arrow_type", "categories"}, ...]}`. Every column object
//!   carries all four keys; `categories` is the sorted global vocabulary of a `category`
//!   column and `null` for the other kinds (a reader also accepts it absent).
//! * `obs/obs_NNNN.parquet` shards hold `obs_tiles_per_file` tiles each, one row group per
//!   tile, zstd, no statistics.
//!
//! Writing streams: batches are normalised (text columns to utf8) and spilled to an Arrow
//! IPC stream in the temporary dataset directory, while the distinct values of each
//! categorical (dictionary) column are counted (up to `max_categories`; beyond it the column
//! is stored as string, as the format says). Plain text columns are string columns. At finish the vocabularies are final, and
//! the spill is read back tile by tile into the shards.
//!
//! Reading localises columns into a per-fingerprint cache (`<cache>/<fingerprint>/obs/
//! <url-quoted name>.arrow`, uncompressed Arrow IPC, one record batch per tile), written
//! to a temporary file and renamed under `obs/.lock`; later reads never touch the shards.

//! The parts: `schema` (the `obs/schema.json` model, names, fingerprint — no I/O),
//! `write` (spill and shards, used by the dataset writer) and `read` (shard reading and the
//! column cache, used by the dataset reader). `write` and `read` never import each other.

mod read;
mod schema;
mod write;

pub(crate) use read::{ObsCounters, ObsMeta};
pub use schema::{
    code_type, fingerprint, name_of_type, shard_relpath, type_of_name, url_quote, ObsColumn,
    ObsKind, ObsSchema, DEFAULT_MAX_CATEGORIES, OBS_FORMAT, OBS_VERSION, SCHEMA_RELPATH,
};
pub(crate) use write::{ObsSpill, ObsWritten};
