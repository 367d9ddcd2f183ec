//! An opened store ([`OpenStore`]: metadata, index, small tables, file sets, result
//! schema) and its public handle [`ChromData`] with the queries that need no spot reads:
//! counts, summary, keys, small tables and categories (§15.4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch};

use super::arenas::Arenas;
use super::files::{FileSet, SpotSets};
use super::index::Index;
use super::schema::{FileSetId, OutputColumn};
use super::tables::{Loader, SmallTables};
use crate::chromdata::access::store::Store;
use crate::chromdata::access::zarr::ArrayReader;
use crate::chromdata::spec::{
    self, ColumnDesc, ComponentAttrs, ComponentKind, GroupNode, Layout, Root, Tables,
};
use crate::error::{Error, ErrorKind, Result};

/// Summary counts of a store (the C `dc_chromdata_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub format_major: u32,
    pub format_minor: u32,
    pub layout: Layout,
    pub n_spots: u64,
    pub n_bins: u64,
    pub n_traces: u64,
    pub n_cells: u64,
    pub n_chroms: u64,
    pub has_coords: bool,
    pub has_cell_id: bool,
    pub n_runs: u64,
    pub n_row_groups: u64,
    pub has_source_row: bool,
    /// 32 or 64; 0 without coordinates.
    pub coord_bits: u32,
}

/// An opened, validated store: its metadata, index, small tables, file sets and the full
/// result schema.
pub(crate) struct OpenStore {
    pub(crate) store: Arc<Store>,
    pub(crate) root: Root,
    pub(crate) tables: Tables,
    pub(crate) index: Index,
    /// Row groups decoded so far (see [`ChromData::row_group_reads`]).
    pub(crate) reads: Arc<AtomicU64>,
    pub(crate) spots: SpotSets,
    pub(crate) tracks: Option<FileSet>,
    pub(crate) layers: Vec<FileSet>,
    pub(crate) small: SmallTables,
    /// The full result schema (§15.1).
    pub(crate) columns: Vec<OutputColumn>,
    /// `index/source_row`, read when original order is first asked for.
    pub(crate) source_row: Mutex<Option<Arc<Vec<i64>>>>,
    pub(crate) arrays: ArrayReader,
    /// Released result arenas kept for the next read ([`super::arenas`]).
    pub(crate) arenas: Arc<Arenas>,
}

impl OpenStore {
    pub(crate) fn loader(&self) -> Loader {
        Loader::new(self.store.clone(), self.reads.clone())
    }

    /// The file set `id` (None when the store has no such set).
    pub(crate) fn file_set(&self, id: FileSetId) -> Option<&FileSet> {
        match id {
            FileSetId::Key => Some(self.spots.key()),
            FileSetId::Primary => self.spots.primary(),
            FileSetId::Tracks => self.tracks.as_ref(),
            FileSetId::Layer(k) => self.layers.get(k),
        }
    }
}

/// An open store. Cheap to clone; `Send + Sync`: queries from several threads are fine.
#[derive(Clone)]
pub struct ChromData {
    pub(crate) inner: Arc<OpenStore>,
}

impl std::fmt::Debug for ChromData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromData")
            .field("store", &self.inner.store.display)
            .field("layout", &self.inner.root.layout)
            .finish()
    }
}

impl ChromData {
    /// Format version, layout and counts.
    pub fn info(&self) -> Info {
        let root = &self.inner.root;
        let r = root.uchrom();
        Info {
            format_major: root.major,
            format_minor: root.minor,
            layout: root.layout,
            n_spots: r.n_spots,
            n_bins: r.n_bins,
            n_traces: r.n_traces,
            n_cells: r.n_cells,
            n_chroms: r.n_chroms,
            has_coords: r.has_coords,
            has_cell_id: r.has_cell_id,
            n_runs: r.n_runs,
            n_row_groups: r.n_row_groups,
            has_source_row: r.has_source_row,
            coord_bits: r.coord_dtype.map_or(0, |t| t.bits()),
        }
    }

    /// `summary()` of §15.4: the `uchrom` attributes plus `layout`.
    pub fn summary(&self) -> serde_json::Value {
        let mut u = serde_json::to_value(self.inner.root.uchrom()).unwrap_or_default();
        if let Some(o) = u.as_object_mut() {
            o.insert(
                "layout".into(),
                serde_json::Value::String(self.inner.root.layout.name().into()),
            );
        }
        u
    }

    /// Number of Parquet row groups decoded so far by this handle (cache hits excluded;
    /// small tables count their row groups). For tests and diagnostics.
    pub fn row_group_reads(&self) -> u64 {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// Bytes of released result memory this handle keeps for its next reads (see
    /// `DELTACELLS_CHROMDATA_RETAIN_BYTES`; arenas idle for a second are dropped first). For
    /// tests and diagnostics.
    #[doc(hidden)]
    pub fn kept_result_bytes(&self) -> usize {
        self.inner.arenas.kept_bytes()
    }

    /// Requests (GET and HEAD, a coalesced ranged read counting once) this handle has sent
    /// to its object store so far; 0 for a local store. For tests and diagnostics.
    pub fn requests_sent(&self) -> u64 {
        self.inner.store.requests_sent()
    }

    /// Original keys of a collection (§15.4 `keys`).
    pub fn keys(&self, kind: &str) -> Result<Vec<String>> {
        let t = &self.inner.tables;
        match kind {
            "layers" => Ok(t.layers.iter().map(|l| l.key.clone()).collect()),
            "intervals" => Ok(t.intervals.iter().map(|e| e.key.clone()).collect()),
            "points" => Ok(t.points.iter().map(|e| e.key.clone()).collect()),
            _ => match ComponentKind::from_name(kind) {
                Some(component) => self.component_keys(component),
                None => Err(Error::invalid_argument(format!(
                    "unknown key kind \"{kind}\" (expected layers, intervals, points, cellm, binm, results, uns, contacts or links)"
                ))),
            },
        }
    }

    /// Keys of a §12 component group (a missing group has none).
    fn component_keys(&self, component: ComponentKind) -> Result<Vec<String>> {
        let store = &self.inner.store;
        let path = format!("{}/zarr.json", component.name());
        let Some(doc) = store.read_json_opt(&path)? else {
            return Ok(Vec::new());
        };
        let ctx = format!("{}/{path}", store.display);
        let node: GroupNode<Option<ComponentAttrs>> = spec::from_json(&doc, &ctx)?;
        Ok(node.attributes.map_or_else(Vec::new, |a| a.keys(component)))
    }

    /// `table(name)`: "bins", "bin_tracks", "traces", "cells", "intervals/<key>",
    /// "points/<key>" (§15.4).
    pub fn table(&self, name: &str) -> Result<RecordBatch> {
        let i = &self.inner;
        let d = &i.store.display;
        let absent = |what: &str| {
            Error::new(
                ErrorKind::NotFound,
                format!("{d}: the store has no {what} table"),
            )
        };
        match name {
            "bins" => Ok(i.small.bins.clone()),
            "traces" => Ok(i.small.traces.clone()),
            "bin_tracks" => i
                .small
                .bin_tracks
                .clone()
                .ok_or_else(|| absent("bin_tracks")),
            "cells" => i.small.cells.clone().ok_or_else(|| absent("cells")),
            _ => {
                let (kind, key) = name.split_once('/').ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        format!("{d}: unknown table \"{name}\""),
                    )
                })?;
                let list = match kind {
                    "intervals" => &i.tables.intervals,
                    "points" => &i.tables.points,
                    _ => {
                        return Err(Error::new(
                            ErrorKind::NotFound,
                            format!("{d}: unknown table \"{name}\""),
                        ))
                    }
                };
                let e = list.iter().find(|e| e.key == key).ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        format!("{d}: no {kind} table \"{key}\""),
                    )
                })?;
                let f = i.loader().table_file(&e.path)?;
                let b = f.read_all()?;
                if b.num_rows() as u64 != e.n_rows {
                    return Err(Error::format(format!(
                        "{}: {} rows, metadata n_rows says {}",
                        f.path,
                        b.num_rows(),
                        e.n_rows
                    )));
                }
                Ok(b)
            }
        }
    }

    /// The category list of a categorical column (`categories(table, column)`, §15.4), as
    /// its normalised value type.
    pub fn categories(&self, table: &str, column: &str) -> Result<ArrayRef> {
        let i = &self.inner;
        let t = &i.tables;
        let d = &i.store.display;
        let not_cat = || {
            Error::new(
                ErrorKind::NotFound,
                format!("{d}: {table}.{column} is not a categorical column of the store"),
            )
        };
        let desc: &ColumnDesc = match table {
            "spots" => {
                if column == "trace_id" {
                    return Ok(i.small.trace_cats.clone());
                }
                if column == "cell_id" {
                    return i.small.cell_cats.clone().ok_or_else(not_cat);
                }
                let k = t
                    .spots
                    .columns
                    .iter()
                    .position(|c| c.name == column)
                    .ok_or_else(not_cat)?;
                return i.small.extra_cats[k].clone().ok_or_else(not_cat);
            }
            "spot_tracks" => {
                let st = t.spot_tracks.as_ref().ok_or_else(not_cat)?;
                let k = st
                    .columns
                    .iter()
                    .position(|c| c.name == column)
                    .ok_or_else(not_cat)?;
                return i.small.track_cats[k].clone().ok_or_else(not_cat);
            }
            "bins" => {
                if column == "chrom" {
                    return Ok(i.small.chrom_cats.clone());
                }
                t.bins
                    .columns
                    .iter()
                    .find(|c| c.name == column)
                    .ok_or_else(not_cat)?
            }
            "bin_tracks" => t
                .bin_tracks
                .as_ref()
                .and_then(|m| m.columns.iter().find(|c| c.name == column))
                .ok_or_else(not_cat)?,
            "traces" => t
                .traces
                .columns
                .iter()
                .find(|c| c.name == column)
                .ok_or_else(not_cat)?,
            "cells" => t
                .cells
                .as_ref()
                .and_then(|m| m.columns.iter().find(|c| c.name == column))
                .ok_or_else(not_cat)?,
            _ => return Err(not_cat()),
        };
        i.loader().categories_of(desc)?.ok_or_else(not_cat)
    }
}
