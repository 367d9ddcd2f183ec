//! The settings of dataset readers and writers and the range of each: the one place that
//! says which values are accepted. The C API maps its `DC_DATASET_*` / `DC_WRITER_*`
//! constants onto these and passes values through unchanged; bindings query the ranges
//! (`dc_dataset_param_bounds`, `dc_writer_param_bounds`) instead of repeating them.

use crate::error::{Error, Result};

/// The inclusive range of values a setting accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: i64,
    pub max: i64,
}

impl Bounds {
    /// `value` if `min <= value <= max`, else `InvalidArgument` naming the setting.
    pub fn check(self, name: &str, value: impl Into<i128>) -> Result<i64> {
        let v: i128 = value.into();
        if (self.min as i128..=self.max as i128).contains(&v) {
            Ok(v as i64)
        } else {
            Err(Error::invalid_argument(format!(
                "{name} is {v}, must be in {}..={}",
                self.min, self.max
            )))
        }
    }
}

/// Largest thread count or cache size accepted (what `usize` holds, within `i64`).
const MAX_USIZE: i64 = if (usize::MAX as u128) < i64::MAX as u128 {
    usize::MAX as i64
} else {
    i64::MAX
};

/// A setting of a `Dataset` (reader), for `Dataset::set_param`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderParam {
    /// Decode threads per call (0 = `DELTACELLS_NUM_THREADS`, else all cores). Default 0.
    Threads,
    /// Shorthand for `CacheBytes`: a budget of this many times the decoded size of the
    /// dataset's largest tile (`Dataset::tile_cache_unit`).
    TileCache,
    /// 1 (default): check each tile's CRC-32 when it is read, before anything in it is
    /// decompressed; 0: skip the check.
    VerifyCrc,
    /// The decoded-data cache budget in bytes (default 256 MiB; 0 disables it).
    CacheBytes,
}

impl ReaderParam {
    /// Every reader setting.
    pub const ALL: [ReaderParam; 4] = [
        Self::Threads,
        Self::TileCache,
        Self::VerifyCrc,
        Self::CacheBytes,
    ];

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Threads => "threads",
            Self::TileCache => "tile_cache",
            Self::VerifyCrc => "verify_crc",
            Self::CacheBytes => "cache_bytes",
        }
    }

    /// The values the setting accepts.
    pub fn bounds(self) -> Bounds {
        let (min, max) = match self {
            Self::Threads | Self::TileCache | Self::CacheBytes => (0, MAX_USIZE),
            Self::VerifyCrc => (0, 1),
        };
        Bounds { min, max }
    }

    /// `value` if in range, else `InvalidArgument` naming the setting and its range.
    pub fn check(self, value: impl Into<i128>) -> Result<i64> {
        self.bounds().check(self.name(), value)
    }
}

/// A setting of a `DatasetWriter`, for `DatasetWriter::set_param` (or its typed setters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterParam {
    /// Cells per tile (>= 1), default 10000. Before the first append.
    TileSize,
    /// Chunks per tile (1 ..= `MAX_CHUNKS`), default 8. Before the first append.
    NChunks,
    /// zstd level (the range of the linked zstd; 0 = zstd's default), default 19. Before
    /// the first append.
    ZstdLevel,
    /// Encode threads (0 = `DELTACELLS_NUM_THREADS`, else all cores). Any time.
    Threads,
    /// 1: replace an existing dataset at the target when finishing; 0 (default): refuse.
    Overwrite,
    /// Tiles (row groups) per obs shard (>= 1), default 1000. Before the first append.
    ObsTilesPerFile,
    /// Categorical obs columns with more distinct values than this are stored as strings;
    /// default 20000. Before the first obs append.
    ObsMaxCategories,
}

/// Largest accepted `n_chunks` (a chunk table entry costs 96 bytes per tile).
pub const MAX_CHUNKS: u32 = 1 << 16;

impl WriterParam {
    /// Every writer setting.
    pub const ALL: [WriterParam; 7] = [
        Self::TileSize,
        Self::NChunks,
        Self::ZstdLevel,
        Self::Threads,
        Self::Overwrite,
        Self::ObsTilesPerFile,
        Self::ObsMaxCategories,
    ];

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::TileSize => "tile_size",
            Self::NChunks => "n_chunks",
            Self::ZstdLevel => "zstd_level",
            Self::Threads => "threads",
            Self::Overwrite => "overwrite",
            Self::ObsTilesPerFile => "obs_tiles_per_file",
            Self::ObsMaxCategories => "obs_max_categories",
        }
    }

    /// The values the setting accepts.
    pub fn bounds(self) -> Bounds {
        let (min, max) = match self {
            Self::TileSize | Self::ObsTilesPerFile => (1, i64::MAX),
            Self::NChunks => (1, MAX_CHUNKS as i64),
            Self::ZstdLevel => (
                zstd::zstd_safe::min_c_level() as i64,
                zstd::zstd_safe::max_c_level() as i64,
            ),
            Self::Threads => (0, MAX_USIZE),
            Self::Overwrite => (0, 1),
            Self::ObsMaxCategories => (0, i32::MAX as i64),
        };
        Bounds { min, max }
    }

    /// `value` if in range, else `InvalidArgument` naming the setting and its range.
    pub fn check(self, value: impl Into<i128>) -> Result<i64> {
        self.bounds().check(self.name(), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_checked_at_both_ends() {
        for b in ReaderParam::ALL
            .iter()
            .map(|p| (p.name(), p.bounds()))
            .chain(WriterParam::ALL.iter().map(|p| (p.name(), p.bounds())))
        {
            let (name, Bounds { min, max }) = b;
            assert!(min <= max, "{name}");
            assert_eq!(b.1.check(name, min).unwrap(), min);
            assert_eq!(b.1.check(name, max).unwrap(), max);
            let below = b.1.check(name, min as i128 - 1).unwrap_err();
            assert!(below.message.starts_with(name), "{below}");
            assert!(b.1.check(name, max as i128 + 1).is_err(), "{name}");
        }
        // The zstd range is the linked library's: it includes the format's default and 0.
        let z = WriterParam::ZstdLevel.bounds();
        assert!(z.min < 0 && z.max >= 19);
    }
}
