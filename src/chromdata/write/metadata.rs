//! The metadata of a finished store through the spec model (§3, §4, §12): categories files
//! and small tables (§5), derived files (§10.3), pass-through tables, `tables/zarr.json`,
//! the component groups and, last, the root `zarr.json`.

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::collected::{Collected, PassTable};
use super::columns::{FinalType, Group};
use super::derived::DerivedCols;
use super::row_groups::Plan;
use super::sinks::{one_col, write_small, Sinks, StoredColumns};
use crate::chromdata::spec::{
    self, categories_path, portable, CodeType, ColumnDesc, DerivedKey, FloatType, Root, SmallTable,
    ValueType, AXES,
};
use crate::error::{Error, ErrorKind, Result};

/// Writes a metadata document (pretty JSON), creating the parent directory. A plain write:
/// publishing syncs the whole temporary tree (`Flush::Tree`), or zips it into a `.cdz`
/// that is synced, so an fsync here would flush each document twice.
fn write_json(path: &Path, doc: &impl serde::Serialize) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
    }
    std::fs::write(path, spec::to_json(doc)?).map_err(|e| Error::io(path, &e))
}

/// Writes `<dir>/zarr.json` of a group with these attributes.
pub(crate) fn write_group(dir: &Path, attrs: &impl serde::Serialize) -> Result<()> {
    write_json(&dir.join("zarr.json"), &spec::GroupNode::new(attrs))
}

/// What the metadata records besides the collected data.
pub(crate) struct StoreFacts<'a> {
    pub(crate) types: &'a [FinalType],
    pub(crate) cols: &'a StoredColumns,
    pub(crate) derived: DerivedCols,
    pub(crate) plan: &'a Plan,
    pub(crate) sinks: Sinks,
    pub(crate) row_group_size: u64,
    pub(crate) has_source_row: bool,
    pub(crate) n_coord_groups: usize,
}

/// Writes the categories, small tables, derived and pass-through tables and every metadata
/// document of the store in `root`; removes the spill directory `spill` just before the
/// root `zarr.json`, which comes last.
pub(crate) fn write_metadata(
    inp: &Collected,
    facts: StoreFacts<'_>,
    root: &Path,
    spill: &Path,
) -> Result<()> {
    let w = MetadataWriter { inp, root };
    let spots = w.spots_entry(&facts)?;
    let derived = w.derived_entries(&facts.derived)?;
    let (intervals, points) = w.pass_through()?;
    let sinks = facts.sinks;
    let spot_tracks = sinks.tracks_meta.map(|mut m| {
        m.columns = inp
            .cols
            .iter()
            .zip(facts.types)
            .filter_map(|(c, t)| match &c.group {
                Group::Track(n) => Some(ColumnDesc::value(n, t.value_type())),
                _ => None,
            })
            .collect();
        m
    });
    let tables = spec::Tables {
        spots,
        spot_tracks,
        layers: sinks.layers_meta,
        derived,
        bins: w.bins()?,
        bin_tracks: w.bin_tracks()?,
        traces: w.index_table("traces", &inp.trace_cats, inp.traces_table.as_ref())?,
        cells: match &inp.cell_cats {
            Some(c) => Some(w.index_table("cells", c, inp.cells_table.as_ref())?),
            None => None,
        },
        intervals,
        points,
        other: spec::Members::new(),
    };
    let tables_attrs = spec::TablesAttrs {
        tables,
        other: spec::Members::new(),
    };
    write_group(&root.join("tables"), &tables_attrs)?;
    write_group(&root.join("index"), &spec::Members::new())?;
    inp.components.finish(
        inp.cell_cats.as_ref().map_or(0, |c| c.len()) as u64,
        inp.chrom_of_bin.len() as u64,
    )?;
    let uchrom = uchrom(inp, facts.plan, facts.has_source_row, facts.n_coord_groups);
    // The spill goes before the root metadata is written: the root zarr.json comes last.
    std::fs::remove_dir_all(spill).map_err(|e| Error::io(spill, &e))?;
    write_json(&root.join("zarr.json"), &Root::new(inp.layout, uchrom).node)
}

/// `attributes.uchrom` (§3).
fn uchrom(
    inp: &Collected,
    plan: &Plan,
    has_source_row: bool,
    n_coord_groups: usize,
) -> spec::Uchrom {
    let layout = inp.layout;
    spec::Uchrom {
        format: "chromdata.zarr".into(),
        format_version: layout.format_version().into(),
        spot_order: layout.spot_order().into(),
        n_spots: inp.n_spots,
        n_bins: inp.chrom_of_bin.len() as u64,
        n_traces: inp.trace_cats.len() as u64,
        n_cells: inp.cell_cats.as_ref().map_or(0, |c| c.len()) as u64,
        n_chroms: inp.chrom_names.len() as u64,
        n_runs: plan.runs.len() as u64,
        n_row_groups: plan.groups.len() as u64,
        has_source_row,
        has_cell_id: inp.has_cells,
        has_coords: inp.has_coords,
        coord_dtype: inp.has_coords.then_some(FloatType::of(inp.coord_f32)),
        n_coord_row_groups: (layout == spec::Layout::PrimaryCoords)
            .then_some(n_coord_groups as u64),
        other: spec::Members::new(),
    }
}

/// Writes the tables the metadata describes, in the temporary store `root`.
struct MetadataWriter<'a> {
    inp: &'a Collected,
    root: &'a Path,
}

impl MetadataWriter<'_> {
    /// A categories file (§5.4).
    fn categories_file(&self, rel: &str, values: &ArrayRef) -> Result<()> {
        write_small(self.root, rel, &one_col("category", values.clone())?)
    }

    /// A categorical spot-aligned descriptor (int16 / int32 codes), its categories written.
    fn spot_categorical(&self, name: &str, rel: &str, cats: &ArrayRef) -> Result<ColumnDesc> {
        self.categories_file(rel, cats)?;
        Ok(ColumnDesc::categorical(
            name,
            Some(CodeType::for_categories(cats.len())),
            rel,
            cats.len() as u64,
        ))
    }

    /// `tables.spots` (§4.1): the layout's files, keys, coordinates and extra columns.
    fn spots_entry(&self, facts: &StoreFacts<'_>) -> Result<spec::SpotsEntry> {
        let inp = self.inp;
        let cols = facts.cols;
        let trace_id = self.spot_categorical(
            "trace_id",
            &categories_path("spots", "trace_id"),
            &inp.trace_cats,
        )?;
        let cell_id = match &inp.cell_cats {
            Some(c) => {
                Some(self.spot_categorical("cell_id", &categories_path("spots", "cell_id"), c)?)
            }
            None => None,
        };
        let names: Vec<&str> = cols
            .extras
            .iter()
            .map(|&i| inp.cols[i].name.as_str())
            .collect();
        let stored = portable(&names);
        let mut columns = Vec::with_capacity(cols.extras.len());
        for (j, &i) in cols.extras.iter().enumerate() {
            let name = &inp.cols[i].name;
            let d = match &facts.types[i] {
                FinalType::Cat(cats) => {
                    let rel = categories_path("spots", &stored[j]);
                    self.spot_categorical(name, &rel, &cats.values)?
                }
                t => ColumnDesc::value(name, t.value_type()),
            };
            columns.push(d.with_storage(cols.storage[j].clone()));
        }
        let f = &facts.sinks.spot_files;
        Ok(spec::SpotsEntry {
            path: f.path.clone(),
            primary_path: f.primary_path.clone(),
            coords_row_group_size: f.coords_row_group_size,
            partitions: f.partitions.clone(),
            files: f.files.clone(),
            coords_files: f.coords_files.clone(),
            layout: inp.layout,
            n_rows: inp.n_spots,
            row_group_size: Some(facts.row_group_size),
            bin_id: spec::IdDesc {
                name: "bin_id".into(),
                ty: "int32".into(),
                other: spec::Members::new(),
            },
            trace_id,
            cell_id,
            coords: inp.has_coords.then(|| spec::CoordsDesc {
                columns: AXES.iter().map(|a| a.to_string()).collect(),
                ty: FloatType::of(inp.coord_f32),
                other: spec::Members::new(),
            }),
            columns,
            other: spec::Members::new(),
        })
    }

    /// The derived files (§10.3), one per key with derived columns.
    fn derived_entries(&self, derived: &DerivedCols) -> Result<Vec<spec::DerivedEntry>> {
        let inp = self.inp;
        let mut out = Vec::new();
        for (k, cols) in derived.iter().enumerate() {
            if cols.is_empty() {
                continue;
            }
            let fields: Vec<Field> = cols
                .iter()
                .map(|(i, a)| Field::new(&inp.cols[*i].name, a.data_type().clone(), true))
                .collect();
            let b = RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                cols.iter().map(|(_, a)| a.clone()).collect(),
            )
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            let key = DerivedKey::ALL[k];
            let rel = format!("derived/{}.parquet", key.name());
            write_small(self.root, &rel, &b)?;
            out.push(spec::DerivedEntry {
                key,
                path: rel,
                n_rows: b.num_rows() as u64,
                columns: cols
                    .iter()
                    .map(|(i, _)| inp.cols[*i].name.clone())
                    .collect(),
                other: spec::Members::new(),
            });
        }
        Ok(out)
    }

    /// A small table entry.
    fn small(
        path: &str,
        n_rows: usize,
        index: Option<&str>,
        columns: Vec<ColumnDesc>,
    ) -> SmallTable {
        SmallTable {
            path: path.into(),
            n_rows: n_rows as u64,
            index: index.map(str::to_string),
            columns,
            other: spec::Members::new(),
        }
    }

    /// Descriptors of the columns of `b` from `skip` on, by their stored types.
    fn value_columns(b: &RecordBatch, skip: usize) -> Vec<ColumnDesc> {
        b.schema()
            .fields()
            .iter()
            .skip(skip)
            .map(|f| ColumnDesc::value(f.name(), ValueType::of_stored(f.data_type())))
            .collect()
    }

    /// `bins.parquet` and the chromosome categories (§5.1).
    fn bins(&self) -> Result<SmallTable> {
        let inp = self.inp;
        let chrom_cats: ArrayRef = Arc::new(arrow_array::StringArray::from_iter_values(
            inp.chrom_names.iter(),
        ));
        let chrom_rel = categories_path("bins", "chrom");
        self.categories_file(&chrom_rel, &chrom_cats)?;
        write_small(self.root, "bins.parquet", &inp.bins)?;
        let mut columns = vec![ColumnDesc::categorical(
            "chrom",
            None,
            &chrom_rel,
            chrom_cats.len() as u64,
        )];
        columns.extend(Self::value_columns(&inp.bins, 1));
        Ok(Self::small(
            "bins.parquet",
            inp.chrom_of_bin.len(),
            None,
            columns,
        ))
    }

    /// `bin_tracks.parquet` (§5.2), if set.
    fn bin_tracks(&self) -> Result<Option<SmallTable>> {
        let Some(b) = &self.inp.bin_tracks else {
            return Ok(None);
        };
        write_small(self.root, "bin_tracks.parquet", b)?;
        let columns = Self::value_columns(b, 0);
        Ok(Some(Self::small(
            "bin_tracks.parquet",
            b.num_rows(),
            None,
            columns,
        )))
    }

    /// `traces.parquet` / `cells.parquet` (§5.3): the index column of the category values,
    /// then the annotation columns given with `set_table` (already in category order;
    /// dictionary columns are categorical, with a categories file).
    fn index_table(
        &self,
        table: &str,
        values: &ArrayRef,
        annotations: Option<&RecordBatch>,
    ) -> Result<SmallTable> {
        let name = if table == "traces" {
            "trace_id"
        } else {
            "cell_id"
        };
        let path = format!("{table}.parquet");
        let b = match annotations {
            Some(b) => b.clone(),
            None => one_col(name, values.clone())?,
        };
        write_small(self.root, &path, &b)?;
        let t = if values.data_type() == &DataType::Int64 {
            ValueType::Int64
        } else {
            ValueType::String
        };
        let mut columns = vec![ColumnDesc::value(name, t)];
        let schema = b.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let stored = portable(&names);
        for (i, f) in b.schema().fields().iter().enumerate().skip(1) {
            columns.push(match f.data_type() {
                DataType::Dictionary(_, _) => {
                    let cats = b.column(i).as_any_dictionary().values().clone();
                    let rel = categories_path(table, &stored[i]);
                    self.categories_file(&rel, &cats)?;
                    ColumnDesc::categorical(f.name(), None, &rel, cats.len() as u64)
                }
                t => ColumnDesc::value(f.name(), ValueType::of_stored(t)),
            });
        }
        Ok(Self::small(&path, values.len(), Some(name), columns))
    }

    /// Pass-through tables (§12): staged files moved to their portable names.
    fn pass_through(&self) -> Result<(Vec<spec::PassTableEntry>, Vec<spec::PassTableEntry>)> {
        let mut out = [Vec::new(), Vec::new()];
        for (slot, collection) in ["intervals", "points"].into_iter().enumerate() {
            let list: Vec<&PassTable> = self
                .inp
                .pass_tables
                .iter()
                .filter(|t| t.collection == collection)
                .collect();
            let names = portable(&list.iter().map(|t| t.key.as_str()).collect::<Vec<_>>());
            for (t, name) in list.into_iter().zip(names) {
                let rel = format!("{collection}/{name}.parquet");
                let dest = self.root.join("tables").join(&rel);
                if let Some(d) = dest.parent() {
                    std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
                }
                std::fs::rename(&t.staged, &dest).map_err(|e| Error::io(&dest, &e))?;
                out[slot].push(spec::PassTableEntry {
                    key: t.key.clone(),
                    path: rel,
                    n_rows: t.n_rows,
                    kind: t.kind.clone(),
                    source_result: t.kind.as_ref().map(|_| t.source_result.clone()),
                    other: spec::Members::new(),
                });
            }
        }
        let [intervals, points] = out;
        Ok((intervals, points))
    }
}
