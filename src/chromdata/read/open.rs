//! Opening a store, in steps (§14): metadata → index → small tables → file sets (footers)
//! → derived files → the result schema. Each step validates what it reads.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::DataType;

use super::files::{FileSet, RowSpace, SpotSets};
use super::index::{self, Index, LayoutIndex, Partitions};
use super::schema::output_columns;
use super::store::{ChromData, OpenStore};
use super::tables::{category_text, Loader, SmallTables};
use crate::chromdata::access::store::Store;
use crate::chromdata::access::zarr::ArrayReader;
use crate::chromdata::spec::{
    table_path, DerivedKey, Partition, Placement, Root, SpotFiles, Storage, Tables, TablesAttrs,
};
use crate::error::{Error, ErrorKind, Result};

impl ChromData {
    /// Opens and validates a store: a `*.chromdata.zarr` directory or a `.cdz` file.
    pub fn open(path: impl AsRef<Path>) -> Result<ChromData> {
        Ok(ChromData {
            inner: Arc::new(open_local(path.as_ref())?),
        })
    }

    /// Opens and validates a store at a path or URL (`s3://bucket/prefix/x.chromdata.zarr`,
    /// `https://host/x.cdz`, …) with `key=value` options (C API §7, [`Options`]). A URL
    /// whose last component ends in `.cdz` is a `.cdz` object, any other a directory
    /// store under that prefix. Local paths take [`ChromData::open`]'s path (the options
    /// are still checked).
    ///
    /// [`Options`]: crate::storage::Options
    pub fn open_url(location: &str, options: &[&str]) -> Result<ChromData> {
        let root = crate::storage::Root::parse(location, options)?;
        let opened = match &root {
            #[cfg(feature = "remote")]
            crate::storage::Root::Remote(r) => open(Arc::new(Store::open_remote(r.clone())?))?,
            local => open_local(local.local_path().ok_or_else(|| {
                Error::new(ErrorKind::Internal, format!("{location}: no local path"))
            })?)?,
        };
        Ok(ChromData {
            inner: Arc::new(opened),
        })
    }
}

/// Opens and validates the store at `path`, again when a writer replaced the directory
/// store during the open (a member the open had still to read is gone with the old tree:
/// the path holds the new store, complete; `storage::open_reopening`). Whatever the open
/// reported of a replaced directory is moot, so any error of it begins the open again.
fn open_local(path: &Path) -> Result<OpenStore> {
    crate::storage::open_reopening(path, || {
        let store = Arc::new(Store::open(path).map_err(|e| (e, false))?);
        open(store.clone()).map_err(|e| (e, store.replaced()))
    })
}

/// Opens and validates `store`.
fn open(store: Arc<Store>) -> Result<OpenStore> {
    let opened = open_steps(&store);
    // What was fetched ahead for the steps is not kept for the handle's life.
    store.end_ahead();
    opened
}

/// The steps of [`open`]. At a URL, what the steps read one after another is fetched
/// ahead in a few rounds of concurrent requests (`Store::fetch_ahead`): the three group
/// documents; then the index arrays' documents, the small tables and categories files
/// (whole) and, beside them, every spot-aligned file's footer; then the index chunks.
fn open_steps(store: &Arc<Store>) -> Result<OpenStore> {
    let d = store.display.clone();
    store.fetch_ahead(&["zarr.json", "tables/zarr.json", "index/zarr.json"].map(String::from));
    let (root, tables) = read_metadata(store)?;
    let arrays = ArrayReader::new(store.clone());
    if !store.exists("index/zarr.json")? {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("{d}/index/zarr.json: missing (the index group is required)"),
        ));
    }
    let reads = Arc::new(AtomicU64::new(0));
    let ld = Loader::new(store.clone(), reads.clone());
    // The index arrays and every Parquet footer, read at the same time (each check below
    // then runs in its order, on what is already read).
    let (paths, small) = parquet_paths(&tables, root.layout);
    let ahead = |parallel: bool| {
        let mut other: Vec<String> = small.iter().map(|p| table_path(p)).collect();
        other.push("index/source_row/zarr.json".into());
        arrays.fetch_ahead_1d(&index::array_paths(&root), &other);
        index::load(&arrays, &root, parallel)
    };
    // At a URL, footers are fetched up to `max_concurrency` at once.
    let threads = crate::pool::resolve_threads(0).max(store.request_width());
    let index = if threads > 1 {
        let pool = crate::pool::pool(threads)?;
        if store.location.is_some() {
            pool.install(|| {
                rayon::join(
                    || index::load(&arrays, &root, true),
                    || ld.prefetch(&paths, &small),
                )
            })
            .0?
        } else {
            // At a URL the small files are fetched whole beside the index (`ahead`) while
            // the spot files' footers are read; then the small ones are decoded, in
            // parallel, from what was fetched.
            let spot: Vec<String> = paths
                .iter()
                .filter(|p| small.binary_search(p).is_err())
                .cloned()
                .collect();
            let index = pool
                .install(|| rayon::join(|| ahead(true), || ld.prefetch(&spot, &[])))
                .0?;
            pool.install(|| ld.prefetch(&small, &small));
            index
        }
    } else {
        ahead(false)?
    };
    let small = SmallTables::load(&ld, &root, &tables, &d)?;
    let sets = SpotFileSets::open(&ld, &root, &tables, &index, &small, &d)?;
    let derived = derived_files(&ld, &root, &tables, &d)?;
    check_pass_through(store, &tables)?;
    let columns = output_columns(&tables, &small, &derived, &d)?;
    Ok(OpenStore {
        store: store.clone(),
        root,
        tables,
        index,
        reads,
        spots: sets.spots,
        tracks: sets.tracks,
        layers: sets.layers,
        small,
        columns,
        source_row: Mutex::new(None),
        arrays,
        arenas: Arc::new(super::arenas::Arenas::from_env()),
    })
}

/// Every Parquet file open reads (relative to `tables/`): small tables, categories files,
/// derived files and the spot-aligned files; members missing from the metadata are left
/// out (the checks report them), widest first. Also, sorted, those open reads whole (all
/// but the spot-aligned files).
fn parquet_paths(
    tables: &Tables,
    layout: crate::chromdata::spec::Layout,
) -> (Vec<String>, Vec<String>) {
    let mut out: Vec<String> = Vec::new();
    let sm = &tables.spots;
    let mut cats = |cols: &mut dyn Iterator<Item = &crate::chromdata::spec::ColumnDesc>| {
        for c in cols {
            if let Some(m) = c.categorical_members() {
                out.push(m.categories.clone());
            }
        }
    };
    cats(
        &mut [&sm.trace_id]
            .into_iter()
            .chain(&sm.cell_id)
            .chain(&sm.columns),
    );
    cats(&mut tables.bins.columns.iter());
    if let Some(t) = &tables.spot_tracks {
        cats(&mut t.columns.iter());
    }
    for m in [
        Some(&tables.bins),
        tables.bin_tracks.as_ref(),
        Some(&tables.traces),
    ]
    .into_iter()
    .chain([tables.cells.as_ref()])
    .flatten()
    {
        out.push(m.path.clone());
    }
    out.extend(tables.derived.iter().map(|d| d.path.clone()));
    let mut small = out.clone();
    small.sort();
    small.dedup();
    let first_spot = out.len();
    if let Ok(files) = sm.files("") {
        match files {
            SpotFiles::Flat { path } => out.push(path.to_string()),
            SpotFiles::Partitioned { files, .. } => out.extend(files.iter().cloned()),
            SpotFiles::PrimaryCoords {
                primary_path,
                coords_files,
                ..
            } => {
                out.extend(primary_path.map(str::to_string));
                out.extend(coords_files.iter().cloned());
            }
        }
    }
    let mut extra = |p: Result<Placement<'_>>| match p {
        Ok(Placement::File(f)) => out.push(f.to_string()),
        Ok(Placement::Partitions(fs)) => out.extend(fs.iter().cloned()),
        Err(_) => {}
    };
    if let Some(t) = &tables.spot_tracks {
        extra(t.placement(layout, ""));
    }
    for l in &tables.layers {
        extra(l.placement(layout, ""));
    }
    // The spot-aligned files first, the extra side (spot tracks, layers: the widest
    // footers, hundreds of row groups × all their columns) leading: the pool starts on the
    // first items, so the longest footer walk overlaps everything else instead of ending
    // open alone.
    let spot: Vec<String> = out[first_spot..].iter().rev().cloned().collect();
    // A file listed both ways (a broken store) is opened, not read ahead.
    small.retain(|p| !spot.contains(p));
    let mut seen = std::collections::HashSet::new();
    let all = spot
        .into_iter()
        .chain(small.iter().cloned())
        .filter(|p| seen.insert(p.clone()))
        .collect();
    (all, small)
}

/// The root and `tables` documents (§2–§4).
fn read_metadata(store: &Store) -> Result<(Root, Tables)> {
    let d = &store.display;
    let Some(root_doc) = store.read_json_opt("zarr.json")? else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("{d}: no root zarr.json; not a ChromData store"),
        ));
    };
    let root = Root::parse(&root_doc, &format!("{d}/zarr.json"))?;
    let Some(tables_doc) = store.read_json_opt("tables/zarr.json")? else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("{d}/tables/zarr.json: missing (the tables group is required)"),
        ));
    };
    let tables = TablesAttrs::parse(&tables_doc, &root, &format!("{d}/tables/zarr.json"))?
        .attributes
        .tables;
    if tables.spots.n_rows != root.uchrom().n_spots {
        return Err(Error::format(format!(
            "{d}: tables.spots.n_rows = {} but n_spots = {}",
            tables.spots.n_rows,
            root.uchrom().n_spots
        )));
    }
    Ok((root, tables))
}

/// The spot-aligned file sets of a store.
struct SpotFileSets {
    spots: SpotSets,
    tracks: Option<FileSet>,
    layers: Vec<FileSet>,
}

/// (name, expected type) of stored columns.
type ExpectedColumns = Vec<(String, DataType)>;

impl SpotFileSets {
    /// Opens every spot-aligned file (footers only) and checks rows, row groups and column
    /// types against the index and the metadata (§14 rules 3–4).
    fn open(
        ld: &Loader,
        root: &Root,
        tables: &Tables,
        index: &Index,
        small: &SmallTables,
        d: &str,
    ) -> Result<SpotFileSets> {
        let sm = &tables.spots;
        let mut key_cols: ExpectedColumns = vec![
            (sm.bin_id.name.clone(), DataType::Int32),
            (sm.trace_id.name.clone(), sm.trace_id.stored_type()),
        ];
        if let Some(c) = &sm.cell_id {
            key_cols.push((c.name.clone(), c.stored_type()));
        }
        if let Some(c) = &sm.coords {
            key_cols.extend(c.columns.iter().map(|n| (n.clone(), c.ty.arrow())));
        }
        let extra_cols: ExpectedColumns = sm
            .columns
            .iter()
            .filter(|c| matches!(c.storage, Some(Storage::Spots) | Some(Storage::Primary)))
            .map(|c| (c.name.clone(), c.stored_type()))
            .collect();
        let files = sm.files(&format!("{d}/tables/zarr.json: attributes.tables.spots"))?;
        let opener = SetOpener {
            ld,
            root,
            index,
            small,
            d,
        };
        let spots = opener.spot_sets(files, key_cols, extra_cols)?;
        let tracks = match &tables.spot_tracks {
            Some(t) => {
                let cols = t
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), c.stored_type()))
                    .collect::<ExpectedColumns>();
                Some(opener.extra_side_set(t.placement(root.layout, d)?, &cols)?)
            }
            None => None,
        };
        let layers = tables
            .layers
            .iter()
            .map(|l| {
                let cols = l
                    .columns
                    .iter()
                    .map(|c| (c.clone(), l.ty.arrow()))
                    .collect::<ExpectedColumns>();
                opener.extra_side_set(l.placement(root.layout, d)?, &cols)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SpotFileSets {
            spots,
            tracks,
            layers,
        })
    }
}

/// What opening the file sets needs.
struct SetOpener<'a> {
    ld: &'a Loader,
    root: &'a Root,
    index: &'a Index,
    small: &'a SmallTables,
    d: &'a str,
}

impl SetOpener<'_> {
    fn open_all(
        &self,
        paths: &[String],
    ) -> Result<Vec<crate::chromdata::access::parquet::ParquetFile>> {
        paths.iter().map(|p| self.ld.table_file(p)).collect()
    }

    /// The one-row-space of flat files and of 2.2 primary files.
    fn whole(&self) -> (Vec<u64>, Vec<u64>) {
        let u = self.root.uchrom();
        (vec![0, u.n_spots], vec![0, u.n_row_groups])
    }

    /// The spot sets of the layout (§8–§10).
    fn spot_sets(
        &self,
        files: SpotFiles<'_>,
        key_cols: ExpectedColumns,
        extra_cols: ExpectedColumns,
    ) -> Result<SpotSets> {
        let ix = self.index;
        let (rows, groups) = self.whole();
        let whole = RowSpace {
            row_offsets: &rows,
            group_offsets: &groups,
            boundaries: &ix.row_groups,
        };
        let mut all_cols = key_cols.clone();
        all_cols.extend(extra_cols.iter().cloned());
        Ok(match (files, &ix.layout) {
            (SpotFiles::Flat { path }, LayoutIndex::Flat) => SpotSets::Flat {
                spots: whole.file_set(vec![self.ld.table_file(path)?], &all_cols)?,
            },
            (
                SpotFiles::Partitioned { partitions, files },
                LayoutIndex::Partitioned { partitions: p },
            ) => {
                self.check_partitions(partitions, p)?;
                let space = RowSpace {
                    row_offsets: &p.offsets,
                    group_offsets: &p.groups,
                    boundaries: &ix.row_groups,
                };
                SpotSets::Partitioned {
                    spots: space.file_set(self.open_all(files)?, &all_cols)?,
                }
            }
            (
                SpotFiles::PrimaryCoords {
                    primary_path,
                    partitions,
                    coords_files,
                },
                LayoutIndex::PrimaryCoords(ci),
            ) => {
                self.check_partitions(partitions, &ci.partitions)?;
                let space = RowSpace {
                    row_offsets: &ci.partitions.offsets,
                    group_offsets: &ci.partitions.groups,
                    boundaries: &ci.row_groups,
                };
                let coords = space.file_set(self.open_all(coords_files)?, &key_cols)?;
                let primary = match primary_path {
                    Some(p) => Some(whole.file_set(vec![self.ld.table_file(p)?], &extra_cols)?),
                    None => None,
                };
                SpotSets::PrimaryCoords { coords, primary }
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "the spot files and the index are of different layouts",
                ))
            }
        })
    }

    /// A row-aligned table of the extra side (spot tracks, a layer): per partition in 2.1,
    /// one file over all rows otherwise.
    fn extra_side_set(&self, place: Placement<'_>, cols: &[(String, DataType)]) -> Result<FileSet> {
        let ix = self.index;
        let (rows, groups) = self.whole();
        match (place, &ix.layout) {
            (Placement::Partitions(files), LayoutIndex::Partitioned { partitions }) => {
                if files.len() + 1 != partitions.offsets.len() {
                    return Err(Error::format(format!(
                        "{}: {} files listed for {} partitions",
                        self.d,
                        files.len(),
                        partitions.offsets.len() - 1
                    )));
                }
                let space = RowSpace {
                    row_offsets: &partitions.offsets,
                    group_offsets: &partitions.groups,
                    boundaries: &ix.row_groups,
                };
                space.file_set(self.open_all(files)?, cols)
            }
            (Placement::File(path), _) => {
                let space = RowSpace {
                    row_offsets: &rows,
                    group_offsets: &groups,
                    boundaries: &ix.row_groups,
                };
                space.file_set(vec![self.ld.table_file(path)?], cols)
            }
            (Placement::Partitions(_), _) => Err(Error::new(
                ErrorKind::Internal,
                "partition files outside the partitioned layout",
            )),
        }
    }

    /// `tables.spots.partitions` agree with the index partitions (§14 rule 4).
    fn check_partitions(&self, parts: &[Partition], index: &Partitions) -> Result<()> {
        let d = self.d;
        let (rows, groups, chroms) = (&index.offsets, &index.groups, &index.chrom);
        if parts.len() + 1 != rows.len() {
            return Err(Error::format(format!(
                "{d}: tables.spots.partitions lists {} partitions, the index has {}",
                parts.len(),
                rows.len() - 1
            )));
        }
        for (p, m) in parts.iter().enumerate() {
            let chrom_name = category_text(&self.small.chrom_cats, m.chrom_code);
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
    }
}

/// The derived files of 2.2 (§10.3), read whole: n_bins / n_cells / n_traces rows.
fn derived_files(
    ld: &Loader,
    root: &Root,
    tables: &Tables,
    d: &str,
) -> Result<HashMap<DerivedKey, RecordBatch>> {
    let u = root.uchrom();
    let mut derived = HashMap::new();
    for dm in &tables.derived {
        let (rows, what) = match dm.key {
            DerivedKey::Bin => (u.n_bins, "n_bins"),
            DerivedKey::Cell => (u.n_cells, "n_cells"),
            DerivedKey::Trace => (u.n_traces, "n_traces"),
        };
        let (fpath, b) = ld.read_whole(&dm.path)?;
        if b.num_rows() as u64 != rows || dm.n_rows != rows {
            return Err(Error::format(format!(
                "{}: derived file for key {} has {} rows (metadata {}), expected {what} = {rows}",
                fpath,
                dm.key.name(),
                b.num_rows(),
                dm.n_rows
            )));
        }
        if derived.insert(dm.key, b).is_some() {
            return Err(Error::format(format!(
                "{d}: tables.derived lists key {} twice",
                dm.key.name()
            )));
        }
    }
    Ok(derived)
}

/// Pass-through tables must exist (their footers are read when asked for).
fn check_pass_through(store: &Store, tables: &Tables) -> Result<()> {
    for (kind, list) in [("intervals", &tables.intervals), ("points", &tables.points)] {
        for e in list {
            if !store.exists(&table_path(&e.path))? {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{}/tables/{}: {kind} table \"{}\" is missing",
                        store.display, e.path, e.key
                    ),
                ));
            }
        }
    }
    Ok(())
}
