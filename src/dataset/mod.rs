//! deltacells datasets: a directory of tiles plus `manifest.json` (format version 2).
//! `Dataset` reads one (gathers of arbitrary cells by chunk, batches read ahead, a
//! decoded-data cache under a byte budget), `DatasetWriter`
//! streams rows into a new one and publishes it atomically.

mod batches;
mod cache;
mod gather;
mod order;
pub mod manifest;
pub mod npy;
pub mod obs;
mod reader;
mod var;
mod writer;

pub use manifest::{Manifest, DATASET_FORMAT, DATASET_VERSION};
pub use obs::{ObsColumn, ObsKind, ObsSchema, DEFAULT_MAX_CATEGORIES};
pub use batches::{Batches, DEFAULT_READ_AHEAD, MAX_READ_AHEAD};
pub use cache::DEFAULT_CACHE_BYTES;
pub use gather::GatherPlan;
pub use order::SplitMix64;
pub use reader::{Dataset, DatasetInfo, ReadCounters};
pub use writer::{
    DatasetWriter, WriterOptions, DEFAULT_OBS_TILES_PER_FILE, DEFAULT_TILE_SIZE, MAX_CHUNKS,
};

/// Names inside a dataset directory.
pub mod paths {
    use std::path::Path;

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

    /// The writer's temporary directory for target `NAME` is `.NAME.tmp-<pid>-<random>`.
    pub fn temp_dir_name(target_name: &str, pid: u32, random: u64) -> String {
        format!(".{target_name}.tmp-{pid}-{random:016x}")
    }

    /// A fresh temporary sibling name for target `target_name` in this process.
    pub(crate) fn temp_sibling_name(target_name: &str) -> String {
        temp_dir_name(target_name, std::process::id(), super::writer::random_u64())
    }

    /// Checks a write target — its last component is a UTF-8 name (not `.` or `..`), its
    /// parent (`.` when none) is a directory — and creates a fresh hidden temporary
    /// sibling directory for the write. Returns (target name, parent, temporary dir).
    ///
    /// Errors: `InvalidArgument` (name, parent not a directory), `NotFound` / `Io`.
    pub(crate) fn create_temp_sibling(
        target: &Path,
    ) -> crate::error::Result<(String, std::path::PathBuf, std::path::PathBuf)> {
        use crate::error::Error;
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty() && *n != "." && *n != "..")
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{}: the target path must end in a UTF-8 name",
                    target.display()
                ))
            })?
            .to_string();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        match std::fs::metadata(&parent) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::invalid_argument(format!(
                    "{}: the parent of the target is not a directory",
                    parent.display()
                )))
            }
            Err(e) => return Err(Error::io(&parent, &e).context("parent of the target")),
        }
        loop {
            let candidate = parent.join(temp_sibling_name(&name));
            match std::fs::create_dir(&candidate) {
                Ok(()) => return Ok((name, parent, candidate)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(&candidate, &e)),
            }
        }
    }

    /// Whether `path` names a writer's temporary directory (which never opens as a dataset,
    /// even if a write was killed after its manifest was written).
    pub fn is_temp_dir_name(path: &Path) -> bool {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let Some(rest) = name.strip_prefix('.') else {
            return false;
        };
        let Some((_, tail)) = rest.rsplit_once(".tmp-") else {
            return false;
        };
        let mut parts = tail.split('-');
        matches!(
            (parts.next(), parts.next(), parts.next()),
            (Some(pid), Some(rand), None)
                if !pid.is_empty()
                    && pid.bytes().all(|b| b.is_ascii_digit())
                    && rand.len() == 16
                    && rand.bytes().all(|b| b.is_ascii_hexdigit())
        )
    }
}
