//! The writer's options and the range of each setting (the one place that says which
//! values are accepted; the C API passes values through and queries the bounds).

use crate::chromdata::spec::Layout;
use crate::dataset::Bounds;
use crate::error::{Error, Result};

/// Smallest accepted memory budget (other than 0, the default).
pub const MIN_MEMORY_BUDGET: u64 = 1 << 20;

/// Options of [`ChromDataWriter`].
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Bytes of memory the writer may use in all: buffering, sorting, merging and the
    /// Parquet writers share it, after the index structures (0 = half of the available
    /// RAM, read from /proc/meminfo; 1 GiB when that is unknown). When a default row
    /// group would not fit, the writer lowers the row-group targets (recorded in the
    /// store), and when even the smallest do not fit beside the column writers'
    /// dictionaries (~96 KiB each), it encodes no column with a dictionary. Explicit
    /// `row_group_size` and `coords_row_group_size` are kept and keep the bytes the same
    /// for any budget (which the fixed costs may then exceed).
    pub memory_budget: u64,
    /// Store x, y, z as float32 (default float64).
    pub coord_float32: bool,
    /// Layout to write (default 2.2 primary+coords).
    pub layout: Layout,
    /// Replace an existing store at the target path.
    pub overwrite: bool,
    /// Worker threads (0 = `DELTACELLS_NUM_THREADS` or all cores). Output does not depend on it.
    /// With more than one, `finish` also runs up to three helper threads for its duration
    /// (the merge's block encoder, the writer of the store's files, the removal of spilled
    /// runs), which mostly wait on the workers; with one, all work runs on the calling
    /// thread.
    pub threads: usize,
    /// Target rows per row group `T` (0 = the layout's default: 65,536 flat and 2.2
    /// primary, 16,384 partitioned).
    pub row_group_size: u64,
    /// Target rows per coords row group of 2.2 (0 = 16,384).
    pub coords_row_group_size: u64,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            memory_budget: 0,
            coord_float32: false,
            layout: Layout::PrimaryCoords,
            overwrite: false,
            threads: 0,
            row_group_size: 0,
            coords_row_group_size: 0,
        }
    }
}

/// Half of `MemAvailable` from /proc/meminfo (1 GiB when unknown).
pub fn default_memory_budget() -> u64 {
    let avail = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    avail.map_or(1 << 30, |b| (b / 2).max(MIN_MEMORY_BUDGET))
}

/// A setting of a [`ChromDataWriter`](super::ChromDataWriter), for `set_param`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterParam {
    /// [`WriterOptions::memory_budget`]: 0 (default) or at least [`MIN_MEMORY_BUDGET`].
    MemoryBudget,
    /// [`WriterOptions::coord_float32`]: 0 or 1.
    CoordFloat32,
    /// [`WriterOptions::layout`]: the format minor version (0 flat, 1 partitioned, 2
    /// primary+coords).
    Layout,
    /// [`WriterOptions::overwrite`]: 0 or 1.
    Overwrite,
    /// [`WriterOptions::threads`]: 0 (`DELTACELLS_NUM_THREADS`, else all cores) or more.
    Threads,
}

/// Largest thread count accepted (what `usize` holds, within `i64`).
const MAX_THREADS: i64 = if (usize::MAX as u128) < i64::MAX as u128 {
    usize::MAX as i64
} else {
    i64::MAX
};

impl WriterParam {
    /// Every writer setting.
    pub const ALL: [WriterParam; 5] = [
        Self::MemoryBudget,
        Self::CoordFloat32,
        Self::Layout,
        Self::Overwrite,
        Self::Threads,
    ];

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::MemoryBudget => "memory_budget",
            Self::CoordFloat32 => "coord_float32",
            Self::Layout => "layout",
            Self::Overwrite => "overwrite",
            Self::Threads => "threads",
        }
    }

    /// The values the setting accepts (the memory budget: 0, or from
    /// [`MIN_MEMORY_BUDGET`] on).
    pub fn bounds(self) -> Bounds {
        let (min, max) = match self {
            Self::MemoryBudget => (0, i64::MAX),
            Self::CoordFloat32 | Self::Overwrite => (0, 1),
            Self::Layout => (0, 2),
            Self::Threads => (0, MAX_THREADS),
        };
        Bounds { min, max }
    }

    /// `value` if accepted, else `InvalidArgument` naming the setting and its range.
    pub fn check(self, value: impl Into<i128>) -> Result<i64> {
        let v = self.bounds().check(self.name(), value)?;
        if self == Self::MemoryBudget && v != 0 && (v as u64) < MIN_MEMORY_BUDGET {
            return Err(Error::invalid_argument(format!(
                "memory budget {v} bytes is below the minimum of {MIN_MEMORY_BUDGET}"
            )));
        }
        Ok(v)
    }
}

impl WriterOptions {
    /// Checks every setting (the ranges of [`WriterParam::bounds`]).
    pub fn validate(&self) -> Result<()> {
        if self.memory_budget != 0 && self.memory_budget < MIN_MEMORY_BUDGET {
            return Err(Error::invalid_argument(format!(
                "memory budget {} bytes is below the minimum of {MIN_MEMORY_BUDGET}",
                self.memory_budget
            )));
        }
        Ok(())
    }

    /// Sets `param` to `value` after checking it (`WriterParam::check`).
    pub fn set(&mut self, param: WriterParam, value: i64) -> Result<()> {
        let v = param.check(value)?;
        match param {
            WriterParam::MemoryBudget => self.memory_budget = v as u64,
            WriterParam::CoordFloat32 => self.coord_float32 = v == 1,
            WriterParam::Layout => {
                self.layout = Layout::from_minor(v as u32).unwrap_or(Layout::PrimaryCoords)
            }
            WriterParam::Overwrite => self.overwrite = v == 1,
            WriterParam::Threads => self.threads = v as usize,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_checks_its_range() {
        let mut o = WriterOptions::default();
        for p in WriterParam::ALL {
            let b = p.bounds();
            assert!(p.check(b.min as i128 - 1).is_err(), "{}", p.name());
            assert!(p.check(b.max as i128 + 1).is_err(), "{}", p.name());
            assert!(o.set(p, b.min).is_ok(), "{}", p.name());
        }
        assert!(WriterParam::MemoryBudget.check(1000).is_err());
        assert!(WriterParam::MemoryBudget.check(MIN_MEMORY_BUDGET).is_ok());
        o.set(WriterParam::Layout, 1).unwrap();
        assert_eq!(o.layout, Layout::Partitioned);
        o.memory_budget = 5;
        assert!(o.validate().is_err());
    }
}
