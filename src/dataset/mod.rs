//! deltacells datasets: a directory of tiles plus `manifest.json` (format version 2).
//! `Dataset` reads one (gathers of arbitrary cells by chunk, batches read ahead, a
//! decoded-data cache under a byte budget), `DatasetWriter`
//! streams rows into a new one and publishes it atomically.

mod batches;
mod cache;
mod gather;
pub mod manifest;
pub mod npy;
pub mod obs;
mod order;
mod params;
mod reader;
#[cfg(feature = "remote")]
mod remote_tiles;
mod var;
mod writer;

pub use batches::{Batches, DEFAULT_READ_AHEAD, MAX_READ_AHEAD};
pub use cache::DEFAULT_CACHE_BYTES;
pub use gather::GatherPlan;
pub use manifest::{Manifest, DATASET_FORMAT, DATASET_VERSION};
pub use obs::{ObsColumn, ObsKind, ObsSchema, DEFAULT_MAX_CATEGORIES};
pub use order::SplitMix64;
pub use params::{Bounds, ReaderParam, WriterParam, MAX_CHUNKS};
pub use reader::{Dataset, DatasetInfo, ReadCounters};
pub use writer::{
    spill_root, DatasetWriter, WriterOptions, DEFAULT_OBS_TILES_PER_FILE, DEFAULT_TILE_SIZE,
    SPILL_DIR_ENV,
};

/// Names inside a dataset directory.
pub mod paths {
    pub const MANIFEST: &str = "manifest.json";
    pub const TILES_DIR: &str = "tiles";
    pub const GENE_ORDER: &str = "gene_order.npy";
    pub const VAR_NAMES: &str = "var_names.txt";
    pub const VAR_TABLE: &str = "var.parquet";
    pub const OBS_DIR: &str = "obs";

    /// Every top-level name a dataset may contain: a directory holding nothing else is one
    /// the writer may replace when asked to overwrite.
    pub const LAYOUT: &[&str] = &[
        MANIFEST, TILES_DIR, GENE_ORDER, VAR_NAMES, VAR_TABLE, OBS_DIR,
    ];

    /// `tiles/tile_NNNNNN.dct` (zero-padded to 6 digits).
    pub fn tile_relpath(t: u64) -> String {
        format!("{TILES_DIR}/tile_{t:06}.dct")
    }
}
