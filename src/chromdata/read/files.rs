//! Row-aligned Parquet file sets (one file, or one per partition, over one row space) and
//! the spot file sets of each layout: built at open with the checks of §14 rule 4, read by
//! global row ranges, decoding only the row groups the ranges touch.

use std::sync::Arc;

use arrow_schema::DataType;

use crate::chromdata::access::parquet::ParquetFile;
use crate::chromdata::values::normal_type;
use crate::error::{Error, Result};

/// Row-aligned Parquet files over one row space: one file, or one per partition.
#[derive(Debug)]
pub(crate) struct FileSet {
    pub(crate) files: Vec<Arc<ParquetFile>>,
    /// Row groups of file p: `[group_offsets[p], group_offsets[p+1])` (global numbering).
    pub(crate) group_offsets: Vec<u64>,
    /// Global row-group boundaries (starts + end).
    pub(crate) boundaries: Vec<u64>,
}

/// The spot files of a store: one variant per layout, each with the sets it has. The
/// *key side* (bin_id, trace_id, cell_id, x, y, z) is the spot files of 2.0 / 2.1 and the
/// coords partitions of 2.2, whose extra columns are in the primary file.
#[derive(Debug)]
pub(crate) enum SpotSets {
    /// 2.0: `spots.parquet`, keys and extra columns.
    Flat { spots: FileSet },
    /// 2.1: one spot file per chromosome partition, keys and extra columns.
    Partitioned { spots: FileSet },
    /// 2.2: coords partitions (keys) and the primary file in canonical order (extra
    /// columns with storage "primary"; none when no column has it).
    PrimaryCoords {
        coords: FileSet,
        primary: Option<FileSet>,
    },
}

impl SpotSets {
    /// The file set holding bin_id, trace_id, cell_id and the coordinates.
    pub(crate) fn key(&self) -> &FileSet {
        match self {
            SpotSets::Flat { spots } | SpotSets::Partitioned { spots } => spots,
            SpotSets::PrimaryCoords { coords, .. } => coords,
        }
    }

    /// The 2.2 primary file set.
    pub(crate) fn primary(&self) -> Option<&FileSet> {
        match self {
            SpotSets::PrimaryCoords { primary, .. } => primary.as_ref(),
            _ => None,
        }
    }
}

/// Whether a stored Arrow type reads as the expected (normal) type.
pub(crate) fn type_matches(stored: &DataType, expected: &DataType) -> bool {
    normal_type(stored) == *expected
}

/// Rows of each file, row groups of each file and the global row-group boundaries of a row
/// space, as the index gives them.
pub(crate) struct RowSpace<'a> {
    pub(crate) row_offsets: &'a [u64],
    pub(crate) group_offsets: &'a [u64],
    pub(crate) boundaries: &'a [u64],
}

impl RowSpace<'_> {
    /// Checks `files` against the row space (§14 rule 4: rows and row groups of each file,
    /// wide footers included, see [`ParquetFile::expect_group_rows`]) and their columns
    /// against `expected_cols` (names and types), and makes the set.
    pub(crate) fn file_set(
        &self,
        mut files: Vec<ParquetFile>,
        expected_cols: &[(String, DataType)],
    ) -> Result<FileSet> {
        for (p, f) in files.iter_mut().enumerate() {
            let rows = self.row_offsets[p + 1] - self.row_offsets[p];
            if f.num_rows() != rows {
                return Err(Error::format(format!(
                    "{}: {} rows, the index says {rows}",
                    f.path,
                    f.num_rows()
                )));
            }
            let (g0, g1) = (
                self.group_offsets[p] as usize,
                self.group_offsets[p + 1] as usize,
            );
            let expected: Vec<u64> = self.boundaries[g0..=g1]
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect();
            f.expect_group_rows(expected)?;
            for (name, t) in expected_cols {
                let i = f.column(name)?;
                let st = f.schema().field(i).data_type();
                if !type_matches(st, t) {
                    return Err(Error::format(format!(
                        "{}: column \"{name}\" is stored as {st}, the metadata says {t}",
                        f.path
                    )));
                }
            }
        }
        Ok(FileSet {
            files: files.into_iter().map(Arc::new).collect(),
            group_offsets: self.group_offsets.to_vec(),
            boundaries: self.boundaries.to_vec(),
        })
    }
}

impl FileSet {
    /// Global row group holding global row `pos`, and its (file, group in the file).
    pub(crate) fn locate(&self, pos: u64) -> (usize, usize, usize) {
        let g = self.boundaries.partition_point(|&b| b <= pos) - 1;
        let p = self.group_offsets.partition_point(|&x| x <= g as u64) - 1;
        let local = (g as u64 - self.group_offsets[p]) as usize;
        (g, p, local)
    }

    /// Row groups (file index, local group) that a read of global `ranges` decodes, each
    /// once, in first-use order: the same walk as the reads of `gather`.
    pub(crate) fn touched(&self, ranges: &[(u64, u64)]) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &(s, e) in ranges {
            let mut pos = s;
            while pos < e {
                let (g, p, local) = self.locate(pos);
                if seen.insert((p, local)) {
                    out.push((p, local));
                }
                pos = e.min(self.boundaries[g + 1]);
            }
        }
        out
    }
}
