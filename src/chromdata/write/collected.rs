//! What the writer hands to `finish`, and the tables it staged on the way.

use std::path::PathBuf;

use arrow_array::{ArrayRef, RecordBatch};

use super::columns::{ColState, FinalType};
use super::components::Components;
use super::runs::RunSource;
use super::target::Target;
use crate::chromdata::spec::Layout;

/// What the writer collected, handed to `finish`: the data (in sorted runs), the final
/// categories and bins, the column states and the run structure.
pub(crate) struct Collected {
    pub(crate) tmp: PathBuf,
    pub(crate) target: Target,
    pub(crate) layout: Layout,
    pub(crate) coord_f32: bool,
    pub(crate) row_group_size: u64,
    pub(crate) coords_row_group_size: u64,
    pub(crate) threads: usize,
    pub(crate) n_spots: u64,
    pub(crate) has_cells: bool,
    pub(crate) has_coords: bool,
    pub(crate) bins: RecordBatch,
    pub(crate) chrom_names: Vec<String>,
    pub(crate) chrom_of_bin: Vec<i32>,
    /// Provisional → final bin id (None: bins were given, ids are final).
    pub(crate) bin_final: Option<Vec<u32>>,
    pub(crate) cell_final: Vec<u32>,
    pub(crate) trace_final: Vec<u32>,
    pub(crate) trace_cats: ArrayRef,
    pub(crate) cell_cats: Option<ArrayRef>,
    pub(crate) cols: Vec<ColState>,
    pub(crate) final_types: Vec<FinalType>,
    pub(crate) layer_keys: Vec<String>,
    /// (cell code or -1, trace code, chrom code, spots), sorted.
    pub(crate) triples: Vec<(i32, i32, i32, u64)>,
    pub(crate) runs: Vec<RunSource>,
    pub(crate) overwrite: bool,
    /// Bytes of the memory budget left for the merge and the Parquet writers.
    pub(crate) available: u64,
    /// Bytes per row of the spilled batches (largest seen; 1 when unknown).
    pub(crate) row_bytes: u64,
    /// Bin tracks (n_bins rows), if set.
    pub(crate) bin_tracks: Option<RecordBatch>,
    /// Pass-through tables, staged in the spill directory.
    pub(crate) pass_tables: Vec<PassTable>,
    /// traces / cells annotation tables, in category order.
    pub(crate) traces_table: Option<RecordBatch>,
    pub(crate) cells_table: Option<RecordBatch>,
    /// The §12 components received (arrays and tables already in the store directory).
    pub(crate) components: Components,
}

/// A pass-through table (§12) staged in the spill directory until `finish`.
#[derive(Debug)]
pub(crate) struct PassTable {
    /// "intervals" or "points".
    pub(crate) collection: &'static str,
    pub(crate) key: String,
    /// Intervals only: domain, pair, peak, segment or another kind.
    pub(crate) kind: Option<String>,
    pub(crate) staged: PathBuf,
    pub(crate) n_rows: u64,
    /// Intervals only: the result they come from (`set_json("intervals", key, ...)`).
    pub(crate) source_result: Option<String>,
}
