//! ChromData stores (`<name>.chromdata.zarr` directories and `.cdz` zips), read backed:
//! opening reads metadata, the index arrays, the small tables and the Parquet footers and
//! validates them (spec §14); queries (§15) read only the row groups and columns they need.
//!
//! All three layouts (2.0 flat, 2.1 partitioned, 2.2 primary+coords) answer every query
//! identically. Internally a query is a list of *runs* (stored blocks of one cell, trace and
//! chromosome) in output order; each run is a row range on the "key side" (the files that
//! hold bin_id / trace_id / cell_id / x, y, z) and on the "extra side" (extra spot columns,
//! spot tracks, layers). In 2.0 / 2.1 both sides are the same global rows; in 2.2 the key
//! side is the coords partitions and the extra side the primary tables.

pub mod fofct;
mod index;
mod pq;
mod query;
mod spec;
mod store;
mod wcol;
mod writer;
mod wstore;

pub use writer::{default_memory_budget, is_temp_name, ChromDataWriter, WriterOptions};

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use crate::error::{Error, ErrorKind, Result};
use index::{ArrayReader, Index};
use pq::PqFile;
pub use query::{CatValue, Columns, SpotBatches};
#[doc(hidden)]
pub use query::{FileRead, PlanQuery};
pub use spec::Layout;
use spec::{
    table_path as tp, ColumnDesc, ColumnType, ComponentAttrs, ComponentKind, DerivedKey, GroupNode,
    Placement, Root, SmallTable, SpotFiles, Storage, Tables, TablesAttrs,
};
use store::Store;

/// Test hook of the metadata model (not part of the API): parses a root and a
/// `tables/zarr.json` document with the model, checks that what it emits parses back to the
/// same model, and returns the emitted documents as the writer would store them.
#[doc(hidden)]
pub fn metadata_round_trip(
    root: &serde_json::Value,
    tables: &serde_json::Value,
) -> Result<(Vec<u8>, Vec<u8>)> {
    spec::round_trip(root, tables)
}

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

/// Row-aligned Parquet files over one row space: one file, or one per partition.
#[derive(Debug)]
pub(crate) struct FileSet {
    pub(crate) files: Vec<Arc<PqFile>>,
    /// Row groups of file p: `[group_offsets[p], group_offsets[p+1])` (global numbering).
    pub(crate) group_offsets: Vec<u64>,
    /// Global row-group boundaries (starts + end).
    pub(crate) boundaries: Vec<u64>,
}

/// Where an output column comes from.
#[derive(Debug, Clone)]
pub(crate) enum Src {
    BinId,
    Trace,
    Cell,
    Coord(usize),
    Extra(usize),
    Track(usize),
    Layer(usize, usize),
}

#[derive(Debug, Clone)]
pub(crate) struct OutCol {
    pub(crate) name: String,
    pub(crate) dtype: DataType,
    pub(crate) src: Src,
}

pub(crate) struct Inner {
    pub(crate) store: Arc<Store>,
    pub(crate) root: Root,
    pub(crate) tables: Tables,
    pub(crate) index: Index,
    pub(crate) reads: Arc<AtomicU64>,
    /// Key side: flat spots.parquet, partitioned spots files, 2.2 coords files.
    pub(crate) key_set: FileSet,
    /// 2.2 primary spots file.
    pub(crate) primary_set: Option<FileSet>,
    pub(crate) tracks_set: Option<FileSet>,
    pub(crate) layer_sets: Vec<FileSet>,
    pub(crate) bins: RecordBatch,
    /// Chrom code of every bin.
    pub(crate) bin_chrom: Vec<i32>,
    pub(crate) chrom_cats: ArrayRef,
    pub(crate) bin_tracks: Option<RecordBatch>,
    pub(crate) traces: RecordBatch,
    pub(crate) cells: Option<RecordBatch>,
    pub(crate) trace_cats: ArrayRef,
    pub(crate) cell_cats: Option<ArrayRef>,
    /// Categories of each extra spot column (None when not categorical).
    pub(crate) extra_cats: Vec<Option<ArrayRef>>,
    pub(crate) track_cats: Vec<Option<ArrayRef>>,
    /// Derived files, read whole (codes kept for categoricals).
    pub(crate) derived: HashMap<&'static str, RecordBatch>,
    pub(crate) schema: Vec<OutCol>,
    pub(crate) source_row: Mutex<Option<Arc<Vec<i64>>>>,
    pub(crate) arrays: ArrayReader,
}

/// An open store. Cheap to clone; `Send + Sync`: queries from several threads are fine.
#[derive(Clone)]
pub struct ChromData {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for ChromData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromData")
            .field("store", &self.inner.store.display)
            .field("layout", &self.inner.root.layout)
            .finish()
    }
}

/// Category values normalised to their query type: utf8, int64, float64 or bool.
fn normal_categories(a: &ArrayRef, ctx: &str) -> Result<ArrayRef> {
    let a = pq::normalise_array(a)?;
    Ok(match a.data_type() {
        DataType::Utf8 | DataType::Int64 | DataType::Float64 | DataType::Boolean => a,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => {
            let v = pq::int_values(a.as_ref())?;
            Arc::new(arrow_array::Int64Array::from(v))
        }
        DataType::Float32 => {
            use arrow_array::cast::AsArray;
            let v = a.as_primitive::<arrow_array::types::Float32Type>();
            Arc::new(
                v.iter()
                    .map(|x| x.map(f64::from))
                    .collect::<arrow_array::Float64Array>(),
            )
        }
        t => {
            return Err(Error::unsupported(format!(
                "{ctx}: category type {t} is not string, integer, float or bool"
            )))
        }
    })
}

fn type_matches(stored: &DataType, expected: &DataType) -> bool {
    pq::normal_type(stored) == *expected
}

impl Inner {
    fn open_pq(&self, path: &str) -> Result<PqFile> {
        PqFile::open(&self.store, path, self.reads.clone())
    }
}

struct Loader {
    store: Arc<Store>,
    reads: Arc<AtomicU64>,
}

impl Loader {
    fn pq(&self, path: &str) -> Result<PqFile> {
        PqFile::open(&self.store, path, self.reads.clone())
    }

    /// A small table read whole, normalised; checks row count and descriptor columns.
    fn small(&self, m: &SmallTable, n_rows: u64, what: &str) -> Result<RecordBatch> {
        let f = self.pq(&tp(&m.path))?;
        let b = f.read_all()?;
        if b.num_rows() as u64 != n_rows || m.n_rows != n_rows {
            return Err(Error::format(format!(
                "{}: {what} has {} rows (metadata n_rows {}), expected {n_rows}",
                f.path,
                b.num_rows(),
                m.n_rows
            )));
        }
        for c in &m.columns {
            let Some((_, field)) = b
                .schema()
                .column_with_name(&c.name)
                .map(|(i, f)| (i, f.clone()))
            else {
                return Err(Error::format(format!(
                    "{}: column \"{}\" described in the metadata is missing",
                    f.path, c.name
                )));
            };
            if let ColumnType::Value(p) = &c.ty {
                if !type_matches(field.data_type(), &p.arrow()) {
                    return Err(Error::format(format!(
                        "{}: column \"{}\" has type {}, metadata says {:?}",
                        f.path,
                        c.name,
                        field.data_type(),
                        p
                    )));
                }
            }
        }
        Ok(b)
    }

    /// A categories file: one column `category`, `n` rows, no nulls.
    fn categories(&self, path: &str, n: u64) -> Result<ArrayRef> {
        let f = self.pq(&tp(path))?;
        let b = f.read_all()?;
        if b.num_columns() != 1 || b.schema().field(0).name() != "category" {
            return Err(Error::format(format!(
                "{}: a categories file has exactly one column named \"category\"",
                f.path
            )));
        }
        if b.num_rows() as u64 != n {
            return Err(Error::format(format!(
                "{}: {} categories, metadata n_categories says {n}",
                f.path,
                b.num_rows()
            )));
        }
        let a = normal_categories(b.column(0), &f.path)?;
        if a.null_count() > 0 {
            return Err(Error::format(format!(
                "{}: categories contain nulls",
                f.path
            )));
        }
        Ok(a)
    }

    fn cat_of(&self, d: &ColumnDesc) -> Result<Option<ArrayRef>> {
        match &d.ty {
            ColumnType::Categorical(c) => Ok(Some(self.categories(&c.categories, c.n_categories)?)),
            ColumnType::Value(_) => Ok(None),
        }
    }
}

/// Expected stored Arrow type of a spot-aligned column.
fn stored_type(d: &ColumnDesc) -> DataType {
    d.stored_type()
}

/// Output type of a column given its categories.
fn out_type(d: &ColumnDesc, cats: &Option<ArrayRef>) -> DataType {
    match (&d.ty, cats) {
        (ColumnType::Categorical(_), Some(c)) => c.data_type().clone(),
        _ => stored_type(d),
    }
}

/// Builds a file set and checks it against the row-group boundaries (§14 rule 4).
fn file_set(
    files: Vec<PqFile>,
    row_offsets: Vec<u64>,
    group_offsets: Vec<u64>,
    boundaries: &[u64],
    expected_cols: &[(String, DataType)],
) -> Result<FileSet> {
    for (p, f) in files.iter().enumerate() {
        let rows = row_offsets[p + 1] - row_offsets[p];
        if f.num_rows() != rows {
            return Err(Error::format(format!(
                "{}: {} rows, the index says {rows}",
                f.path,
                f.num_rows()
            )));
        }
        let (g0, g1) = (group_offsets[p] as usize, group_offsets[p + 1] as usize);
        let expected: Vec<u64> = boundaries[g0..=g1]
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect();
        let got = f.row_group_rows();
        if got != expected {
            return Err(Error::format(format!(
                "{}: row groups of {:?} rows, the index says {:?} (row groups must match index/row_groups)",
                f.path,
                if got.len() > 8 { &got[..8] } else { &got[..] },
                if expected.len() > 8 { &expected[..8] } else { &expected[..] },
            )));
        }
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
        group_offsets,
        boundaries: boundaries.to_vec(),
    })
}

impl ChromData {
    /// Opens and validates a store: a `*.chromdata.zarr` directory or a `.cdz` file.
    pub fn open(path: impl AsRef<Path>) -> Result<ChromData> {
        let path = path.as_ref();
        let store = Arc::new(Store::open(path)?);
        let d = store.display.clone();
        if !store.exists("zarr.json") {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{d}: no root zarr.json; not a ChromData store"),
            ));
        }
        let root = Root::parse(&store.read_json("zarr.json")?, &format!("{d}/zarr.json"))?;
        let u = root.uchrom();
        if !store.exists("tables/zarr.json") {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{d}/tables/zarr.json: missing (the tables group is required)"),
            ));
        }
        let tables = TablesAttrs::parse(
            &store.read_json("tables/zarr.json")?,
            &root,
            &format!("{d}/tables/zarr.json"),
        )?
        .attributes
        .tables;
        let sm = &tables.spots;
        if sm.n_rows != u.n_spots {
            return Err(Error::format(format!(
                "{d}: tables.spots.n_rows = {} but n_spots = {}",
                sm.n_rows, u.n_spots
            )));
        }
        let arrays = ArrayReader::new(store.clone());
        if !store.exists("index/zarr.json") {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("{d}/index/zarr.json: missing (the index group is required)"),
            ));
        }
        let index = index::load(&arrays, &root)?;
        let reads = Arc::new(AtomicU64::new(0));
        let ld = Loader {
            store: store.clone(),
            reads: reads.clone(),
        };

        // Categories and small tables.
        let trace_cat = sm.trace_id.categorical_members().ok_or_else(|| {
            Error::format(format!("{d}: tables.spots.trace_id must be categorical"))
        })?;
        if trace_cat.n_categories != u.n_traces {
            return Err(Error::format(format!(
                "{d}: trace_id.n_categories = {} but n_traces = {}",
                trace_cat.n_categories, u.n_traces
            )));
        }
        let trace_cats = ld.categories(&trace_cat.categories, u.n_traces)?;
        let cell_cats = match &sm.cell_id {
            Some(ColumnDesc {
                ty: ColumnType::Categorical(c),
                ..
            }) => {
                if c.n_categories != u.n_cells {
                    return Err(Error::format(format!(
                        "{d}: cell_id.n_categories = {} but n_cells = {}",
                        c.n_categories, u.n_cells
                    )));
                }
                Some(ld.categories(&c.categories, u.n_cells)?)
            }
            _ => {
                if u.n_cells != 0 {
                    return Err(Error::format(format!(
                        "{d}: n_cells = {} but the store has no cell_id",
                        u.n_cells
                    )));
                }
                None
            }
        };
        let bins = ld.small(&tables.bins, u.n_bins, "bins")?;
        let chrom_desc = tables
            .bins
            .columns
            .iter()
            .find(|c| c.name == "chrom")
            .ok_or_else(|| Error::format(format!("{d}: tables.bins.columns has no \"chrom\"")))?;
        let ColumnType::Categorical(chrom_cat) = &chrom_desc.ty else {
            return Err(Error::format(format!(
                "{d}: tables.bins column \"chrom\" must be categorical"
            )));
        };
        if chrom_cat.n_categories != u.n_chroms {
            return Err(Error::format(format!(
                "{d}: bins.chrom.n_categories = {} but n_chroms = {}",
                chrom_cat.n_categories, u.n_chroms
            )));
        }
        let chrom_cats = ld.categories(&chrom_cat.categories, u.n_chroms)?;
        let bin_chrom = query::bin_chrom_codes(&bins, &chrom_cats, &d)?;
        let bin_tracks = match &tables.bin_tracks {
            Some(m) => Some(ld.small(m, u.n_bins, "bin_tracks")?),
            None => None,
        };
        let traces = ld.small(&tables.traces, u.n_traces, "traces")?;
        query::check_index_column(&traces, "trace_id", &trace_cats, &d)?;
        let cells = match (&tables.cells, &cell_cats) {
            (Some(m), Some(cc)) => {
                let c = ld.small(m, u.n_cells, "cells")?;
                query::check_index_column(&c, "cell_id", cc, &d)?;
                Some(c)
            }
            _ => None,
        };
        let extra_cats = sm
            .columns
            .iter()
            .map(|c| ld.cat_of(c))
            .collect::<Result<Vec<_>>>()?;
        let track_cats = match &tables.spot_tracks {
            Some(t) => t
                .columns
                .iter()
                .map(|c| ld.cat_of(c))
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };

        // Spot-aligned file sets.
        let layout = root.layout;
        let n = u.n_spots;
        let g = u.n_row_groups;
        let spot_files = sm.files(&format!("{d}/tables/zarr.json: attributes.tables.spots"))?;
        let mut key_cols: Vec<(String, DataType)> = vec![
            (sm.bin_id.name.clone(), DataType::Int32),
            (sm.trace_id.name.clone(), stored_type(&sm.trace_id)),
        ];
        if let Some(c) = &sm.cell_id {
            key_cols.push((c.name.clone(), stored_type(c)));
        }
        if let Some(c) = &sm.coords {
            for nm in &c.columns {
                key_cols.push((nm.clone(), c.ty.arrow()));
            }
        }
        let extra_cols: Vec<(String, DataType)> = sm
            .columns
            .iter()
            .filter(|c| matches!(c.storage, Some(Storage::Spots) | Some(Storage::Primary)))
            .map(|c| (c.name.clone(), stored_type(c)))
            .collect();
        // (row offsets, group offsets, boundaries) of the extra side.
        let (ext_rows, ext_groups, ext_bounds): (Vec<u64>, Vec<u64>, Vec<u64>) = match layout {
            Layout::Partitioned => (
                index.partition_offsets.clone(),
                index.partition_groups.clone(),
                index.row_groups.clone(),
            ),
            _ => (vec![0, n], vec![0, g], index.row_groups.clone()),
        };
        let open_all = |paths: &[String]| -> Result<Vec<PqFile>> {
            paths.iter().map(|p| ld.pq(&tp(p))).collect()
        };
        let check_partitions = |parts: &[spec::Partition],
                                rows: &[u64],
                                groups: &[u64],
                                chroms: &[i32]|
         -> Result<()> {
            if parts.len() + 1 != rows.len() {
                return Err(Error::format(format!(
                    "{d}: tables.spots.partitions lists {} partitions, the index has {}",
                    parts.len(),
                    rows.len() - 1
                )));
            }
            for (p, m) in parts.iter().enumerate() {
                let chrom_name = query::category_text(&chrom_cats, m.chrom_code);
                if m.n_rows != rows[p + 1] - rows[p]
                    || m.n_row_groups != groups[p + 1] - groups[p]
                    || m.chrom_code != chroms[p] as i64
                    || chrom_name.as_deref() != Some(m.chrom.as_str())
                {
                    return Err(Error::format(format!(
                        "{d}: tables.spots.partitions[{p}] (chrom {}, code {}, {} rows, {} row groups) disagrees with the index",
                        m.chrom, m.chrom_code, m.n_rows, m.n_row_groups
                    )));
                }
            }
            Ok(())
        };
        let (key_set, primary_set) = match spot_files {
            SpotFiles::Flat { path } => {
                let mut cols = key_cols.clone();
                cols.extend(extra_cols.iter().cloned());
                let f = ld.pq(&tp(path))?;
                (
                    file_set(vec![f], vec![0, n], vec![0, g], &index.row_groups, &cols)?,
                    None,
                )
            }
            SpotFiles::Partitioned { partitions, files } => {
                check_partitions(
                    partitions,
                    &index.partition_offsets,
                    &index.partition_groups,
                    &index.partition_chrom,
                )?;
                let mut cols = key_cols.clone();
                cols.extend(extra_cols.iter().cloned());
                (
                    file_set(
                        open_all(files)?,
                        index.partition_offsets.clone(),
                        index.partition_groups.clone(),
                        &index.row_groups,
                        &cols,
                    )?,
                    None,
                )
            }
            SpotFiles::PrimaryCoords {
                primary_path,
                partitions,
                coords_files,
            } => {
                let ci = index.coords.as_ref().ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "a 2.2 index without index/coords")
                })?;
                check_partitions(
                    partitions,
                    &ci.partition_offsets,
                    &ci.partition_groups,
                    &ci.partition_chrom,
                )?;
                let ks = file_set(
                    open_all(coords_files)?,
                    ci.partition_offsets.clone(),
                    ci.partition_groups.clone(),
                    &ci.row_groups,
                    &key_cols,
                )?;
                let ps = match primary_path {
                    Some(p) => Some(file_set(
                        vec![ld.pq(&tp(p))?],
                        vec![0, n],
                        vec![0, g],
                        &index.row_groups,
                        &extra_cols,
                    )?),
                    None => None,
                };
                (ks, ps)
            }
        };
        let placement_set =
            |place: Placement<'_>, cols: &[(String, DataType)]| -> Result<FileSet> {
                let files = match place {
                    Placement::Partitions(files) => {
                        if files.len() + 1 != ext_rows.len() {
                            return Err(Error::format(format!(
                                "{d}: {} files listed for {} partitions",
                                files.len(),
                                ext_rows.len() - 1
                            )));
                        }
                        open_all(files)?
                    }
                    Placement::File(path) => vec![ld.pq(&tp(path))?],
                };
                file_set(
                    files,
                    ext_rows.clone(),
                    ext_groups.clone(),
                    &ext_bounds,
                    cols,
                )
            };
        let tracks_set = match &tables.spot_tracks {
            Some(t) => {
                let cols: Vec<_> = t
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), stored_type(c)))
                    .collect();
                Some(placement_set(t.placement(layout, &d)?, &cols)?)
            }
            None => None,
        };
        let layer_sets = tables
            .layers
            .iter()
            .map(|l| {
                let cols: Vec<_> = l
                    .columns
                    .iter()
                    .map(|c| (c.clone(), l.ty.arrow()))
                    .collect();
                placement_set(l.placement(layout, &d)?, &cols)
            })
            .collect::<Result<Vec<_>>>()?;

        // Derived files (2.2).
        let mut derived = HashMap::new();
        for dm in &tables.derived {
            let (rows, what) = match dm.key {
                DerivedKey::Bin => (u.n_bins, "n_bins"),
                DerivedKey::Cell => (u.n_cells, "n_cells"),
                DerivedKey::Trace => (u.n_traces, "n_traces"),
            };
            let f = ld.pq(&tp(&dm.path))?;
            let b = f.read_all()?;
            if b.num_rows() as u64 != rows || dm.n_rows != rows {
                return Err(Error::format(format!(
                    "{}: derived file for key {} has {} rows (metadata {}), expected {what} = {rows}",
                    f.path,
                    dm.key.name(),
                    b.num_rows(),
                    dm.n_rows
                )));
            }
            if derived.insert(dm.key.name(), b).is_some() {
                return Err(Error::format(format!(
                    "{d}: tables.derived lists key {} twice",
                    dm.key.name()
                )));
            }
        }
        for c in &sm.columns {
            match &c.storage {
                Some(Storage::Derived(k)) => {
                    let listed = tables
                        .derived
                        .iter()
                        .any(|dm| dm.key == *k && dm.columns.contains(&c.name));
                    let b = derived.get(k.name());
                    let field = b.and_then(|b| b.schema().field_with_name(&c.name).ok().cloned());
                    match field {
                        Some(f) if listed && type_matches(f.data_type(), &stored_type(c)) => {}
                        Some(f) if listed => {
                            return Err(Error::format(format!(
                                "{d}: derived column \"{}\" is stored as {}, the metadata says {}",
                                c.name,
                                f.data_type(),
                                stored_type(c)
                            )))
                        }
                        _ => {
                            return Err(Error::format(format!(
                                "{d}: derived column \"{}\" (key {}) is not in tables.derived / its file",
                                c.name,
                                k.name()
                            )))
                        }
                    }
                }
                Some(Storage::Bins(src)) => {
                    let f = bins.schema().field_with_name(src).ok().cloned();
                    match f {
                        Some(f) if *f.data_type() == stored_type(c) => {}
                        _ => {
                            return Err(Error::format(format!(
                                "{d}: column \"{}\" references bins column \"{src}\", which is missing or of another type",
                                c.name
                            )))
                        }
                    }
                }
                _ => {}
            }
        }
        // Pass-through tables must exist (their footers are read when asked for).
        for (kind, list) in [("intervals", &tables.intervals), ("points", &tables.points)] {
            for e in list {
                if !store.exists(&tp(&e.path)) {
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!(
                            "{d}/tables/{}: {kind} table \"{}\" is missing",
                            e.path, e.key
                        ),
                    ));
                }
            }
        }

        // The full schema (§15.1).
        let mut schema = vec![
            OutCol {
                name: "bin_id".into(),
                dtype: DataType::Int32,
                src: Src::BinId,
            },
            OutCol {
                name: "trace_id".into(),
                dtype: trace_cats.data_type().clone(),
                src: Src::Trace,
            },
        ];
        if let Some(cc) = &cell_cats {
            schema.push(OutCol {
                name: "cell_id".into(),
                dtype: cc.data_type().clone(),
                src: Src::Cell,
            });
        }
        if let Some(c) = &sm.coords {
            for (i, nm) in ["x", "y", "z"].iter().enumerate() {
                schema.push(OutCol {
                    name: (*nm).into(),
                    dtype: c.ty.arrow(),
                    src: Src::Coord(i),
                });
            }
        }
        for (i, c) in sm.columns.iter().enumerate() {
            schema.push(OutCol {
                name: c.name.clone(),
                dtype: out_type(c, &extra_cats[i]),
                src: Src::Extra(i),
            });
        }
        if let Some(t) = &tables.spot_tracks {
            for (i, c) in t.columns.iter().enumerate() {
                schema.push(OutCol {
                    name: format!("spot_tracks/{}", c.name),
                    dtype: out_type(c, &track_cats[i]),
                    src: Src::Track(i),
                });
            }
        }
        for (k, l) in tables.layers.iter().enumerate() {
            for (a, nm) in ["x", "y", "z"].iter().enumerate() {
                schema.push(OutCol {
                    name: format!("layers/{}/{nm}", l.key),
                    dtype: l.ty.arrow(),
                    src: Src::Layer(k, a),
                });
            }
        }
        for (i, c) in schema.iter().enumerate() {
            if schema[..i].iter().any(|o| o.name == c.name) {
                return Err(Error::format(format!(
                    "{d}: two spot columns are both named \"{}\"",
                    c.name
                )));
            }
        }

        Ok(ChromData {
            inner: Arc::new(Inner {
                store,
                root,
                tables,
                index,
                reads,
                key_set,
                primary_set,
                tracks_set,
                layer_sets,
                bins,
                bin_chrom,
                chrom_cats,
                bin_tracks,
                traces,
                cells,
                trace_cats,
                cell_cats,
                extra_cats,
                track_cats,
                derived,
                schema,
                source_row: Mutex::new(None),
                arrays,
            }),
        })
    }

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
        if !store.exists(&path) {
            return Ok(Vec::new());
        }
        let ctx = format!("{}/{path}", store.display);
        let node: GroupNode<Option<ComponentAttrs>> =
            spec::from_json(&store.read_json(&path)?, &ctx)?;
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
            "bins" => Ok(i.bins.clone()),
            "traces" => Ok(i.traces.clone()),
            "bin_tracks" => i.bin_tracks.clone().ok_or_else(|| absent("bin_tracks")),
            "cells" => i.cells.clone().ok_or_else(|| absent("cells")),
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
                let f = i.open_pq(&tp(&e.path))?;
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
                    return Ok(i.trace_cats.clone());
                }
                if column == "cell_id" {
                    return i.cell_cats.clone().ok_or_else(not_cat);
                }
                let k = t
                    .spots
                    .columns
                    .iter()
                    .position(|c| c.name == column)
                    .ok_or_else(not_cat)?;
                return i.extra_cats[k].clone().ok_or_else(not_cat);
            }
            "spot_tracks" => {
                let st = t.spot_tracks.as_ref().ok_or_else(not_cat)?;
                let k = st
                    .columns
                    .iter()
                    .position(|c| c.name == column)
                    .ok_or_else(not_cat)?;
                return i.track_cats[k].clone().ok_or_else(not_cat);
            }
            "bins" => {
                if column == "chrom" {
                    return Ok(i.chrom_cats.clone());
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
        let ld = Loader {
            store: i.store.clone(),
            reads: i.reads.clone(),
        };
        ld.cat_of(desc)?.ok_or_else(not_cat)
    }
}
