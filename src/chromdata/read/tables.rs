//! The small tables (§5) and categories files (§5.4), read whole at open and checked
//! against the metadata: bins (and the chromosome of every bin), bin_tracks, traces, cells,
//! and the categories of trace_id, cell_id, bins.chrom and every categorical spot column.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use super::files::type_matches;
use crate::chromdata::access::parquet::ParquetFile;
use crate::chromdata::access::store::Store;
use crate::chromdata::spec::{table_path, ColumnDesc, ColumnType, Root, SmallTable, Tables};
use crate::chromdata::values::{int_values, normalise_array};
use crate::error::{Error, Result};

/// Opens the Parquet files of a store, counting the row groups they decode.
pub(crate) struct Loader {
    pub(crate) store: Arc<Store>,
    pub(crate) reads: Arc<AtomicU64>,
    /// Files opened ahead (footers read in parallel at open), by store-relative path.
    opened: Mutex<HashMap<String, ParquetFile>>,
    /// Small files read whole ahead (in parallel at open), by store-relative path.
    read: Mutex<HashMap<String, (String, RecordBatch)>>,
}

impl Loader {
    pub(crate) fn new(store: Arc<Store>, reads: Arc<AtomicU64>) -> Loader {
        Loader {
            store,
            reads,
            opened: Mutex::new(HashMap::new()),
            read: Mutex::new(HashMap::new()),
        }
    }

    /// Opens `paths` (relative to `tables/`) ahead, in parallel on the library's pool, for
    /// the checks of open to take in their own order, and reads the `small` ones whole
    /// (small tables, categories, derived files). A file that fails to open or read is left
    /// out: the check that needs it opens it again and reports the error in its place.
    pub(crate) fn prefetch(&self, paths: &[String], small: &[String]) {
        use rayon::prelude::*;
        let opened: Vec<(String, ParquetFile, Option<RecordBatch>)> = paths
            .par_iter()
            .filter_map(|p| {
                let path = table_path(p);
                let f = ParquetFile::open(&self.store, &path, self.reads.clone()).ok()?;
                let whole = match small.binary_search(p) {
                    Ok(_) => Some(f.read_all().ok()?),
                    Err(_) => {
                        // A wide footer's walk, here on the pool beside the index load
                        // rather than alone at its check.
                        f.walk_now();
                        None
                    }
                };
                Some((path, f, whole))
            })
            .collect();
        let mut map = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        for (path, f, whole) in opened {
            match whole {
                Some(b) => {
                    read.insert(path, (f.path.clone(), b));
                }
                None => {
                    map.insert(path, f);
                }
            }
        }
    }

    /// A Parquet file (path relative to `tables/`) read whole and normalised
    /// ([`ParquetFile::read_all`]), with its path for messages.
    pub(crate) fn read_whole(&self, rel: &str) -> Result<(String, RecordBatch)> {
        let path = table_path(rel);
        let ahead = self
            .read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&path);
        match ahead {
            Some(r) => Ok(r),
            None => {
                let f = self.parquet(&path)?;
                let b = f.read_all()?;
                Ok((f.path, b))
            }
        }
    }

    /// A Parquet file by its store-relative path, footer read.
    pub(crate) fn parquet(&self, path: &str) -> Result<ParquetFile> {
        let ahead = self
            .opened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(path);
        match ahead {
            Some(f) => Ok(f),
            None => ParquetFile::open(&self.store, path, self.reads.clone()),
        }
    }

    /// A Parquet file by its path relative to `tables/`.
    pub(crate) fn table_file(&self, rel: &str) -> Result<ParquetFile> {
        self.parquet(&table_path(rel))
    }

    /// A small table read whole, normalised; checks row count and descriptor columns.
    fn small(&self, m: &SmallTable, n_rows: u64, what: &str) -> Result<RecordBatch> {
        let (fpath, b) = self.read_whole(&m.path)?;
        if b.num_rows() as u64 != n_rows || m.n_rows != n_rows {
            return Err(Error::format(format!(
                "{}: {what} has {} rows (metadata n_rows {}), expected {n_rows}",
                fpath,
                b.num_rows(),
                m.n_rows
            )));
        }
        for c in &m.columns {
            let Some(field) = b.schema().field_with_name(&c.name).ok().cloned() else {
                return Err(Error::format(format!(
                    "{}: column \"{}\" described in the metadata is missing",
                    fpath, c.name
                )));
            };
            if let ColumnType::Value(p) = &c.ty {
                if !type_matches(field.data_type(), &p.arrow()) {
                    return Err(Error::format(format!(
                        "{}: column \"{}\" has type {}, metadata says {:?}",
                        fpath,
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
        let (fpath, b) = self.read_whole(path)?;
        if b.num_columns() != 1 || b.schema().field(0).name() != "category" {
            return Err(Error::format(format!(
                "{}: a categories file has exactly one column named \"category\"",
                fpath
            )));
        }
        if b.num_rows() as u64 != n {
            return Err(Error::format(format!(
                "{}: {} categories, metadata n_categories says {n}",
                fpath,
                b.num_rows()
            )));
        }
        let a = normal_categories(b.column(0), &fpath)?;
        if a.null_count() > 0 {
            return Err(Error::format(format!(
                "{}: categories contain nulls",
                fpath
            )));
        }
        Ok(a)
    }

    /// The categories of a categorical column, None for other columns.
    pub(crate) fn categories_of(&self, d: &ColumnDesc) -> Result<Option<ArrayRef>> {
        match &d.ty {
            ColumnType::Categorical(c) => Ok(Some(self.categories(&c.categories, c.n_categories)?)),
            ColumnType::Value(_) => Ok(None),
        }
    }
}

/// Category values normalised to their query type: utf8, int64, float64 or bool.
fn normal_categories(a: &ArrayRef, ctx: &str) -> Result<ArrayRef> {
    let a = normalise_array(a)?;
    Ok(match a.data_type() {
        DataType::Utf8 | DataType::Int64 | DataType::Float64 | DataType::Boolean => a,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => Arc::new(arrow_array::Int64Array::from(int_values(a.as_ref())?)),
        DataType::Float32 => {
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

/// The small tables and the categories of a store, as read and checked at open.
#[derive(Debug)]
pub(crate) struct SmallTables {
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
    /// Categories of each spot track (None when not categorical).
    pub(crate) track_cats: Vec<Option<ArrayRef>>,
}

impl SmallTables {
    /// Reads and checks the small tables and categories (§14 rule 4: n_bins, n_traces,
    /// n_cells, n_chroms).
    pub(crate) fn load(ld: &Loader, root: &Root, tables: &Tables, d: &str) -> Result<Self> {
        let u = root.uchrom();
        let sm = &tables.spots;
        let trace_cats = key_categories(ld, &sm.trace_id, u.n_traces, "trace_id", "n_traces", d)?;
        let cell_cats = match &sm.cell_id {
            Some(c) => Some(key_categories(ld, c, u.n_cells, "cell_id", "n_cells", d)?),
            None if u.n_cells != 0 => {
                return Err(Error::format(format!(
                    "{d}: n_cells = {} but the store has no cell_id",
                    u.n_cells
                )))
            }
            None => None,
        };
        let bins = ld.small(&tables.bins, u.n_bins, "bins")?;
        let chrom_desc = tables
            .bins
            .columns
            .iter()
            .find(|c| c.name == "chrom")
            .ok_or_else(|| Error::format(format!("{d}: tables.bins.columns has no \"chrom\"")))?;
        let Some(chrom_cat) = chrom_desc.categorical_members() else {
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
        let bin_chrom = bin_chrom_codes(&bins, &chrom_cats, d)?;
        let bin_tracks = match &tables.bin_tracks {
            Some(m) => Some(ld.small(m, u.n_bins, "bin_tracks")?),
            None => None,
        };
        let traces = ld.small(&tables.traces, u.n_traces, "traces")?;
        check_index_column(&traces, "trace_id", &trace_cats, d)?;
        let cells = match (&tables.cells, &cell_cats) {
            (Some(m), Some(cc)) => {
                let c = ld.small(m, u.n_cells, "cells")?;
                check_index_column(&c, "cell_id", cc, d)?;
                Some(c)
            }
            _ => None,
        };
        let cats_of = |cols: &[ColumnDesc]| -> Result<Vec<Option<ArrayRef>>> {
            cols.iter().map(|c| ld.categories_of(c)).collect()
        };
        Ok(SmallTables {
            extra_cats: cats_of(&sm.columns)?,
            track_cats: match &tables.spot_tracks {
                Some(t) => cats_of(&t.columns)?,
                None => Vec::new(),
            },
            bins,
            bin_chrom,
            chrom_cats,
            bin_tracks,
            traces,
            cells,
            trace_cats,
            cell_cats,
        })
    }
}

/// Categories of trace_id / cell_id, whose count is `n` (`n_what` in messages).
fn key_categories(
    ld: &Loader,
    desc: &ColumnDesc,
    n: u64,
    name: &str,
    n_what: &str,
    d: &str,
) -> Result<ArrayRef> {
    let c = desc
        .categorical_members()
        .ok_or_else(|| Error::format(format!("{d}: tables.spots.{name} must be categorical")))?;
    if c.n_categories != n {
        return Err(Error::format(format!(
            "{d}: {name}.n_categories = {} but {n_what} = {n}",
            c.n_categories
        )));
    }
    ld.categories(&c.categories, n)
}

/// Chrom code of every bin, from the decoded `bins.chrom` values.
fn bin_chrom_codes(bins: &RecordBatch, chrom_cats: &ArrayRef, d: &str) -> Result<Vec<i32>> {
    let col = bins
        .column_by_name("chrom")
        .ok_or_else(|| Error::format(format!("{d}: bins.parquet has no chrom column")))?;
    let (Some(vals), Some(cats)) = (
        col.as_string_opt::<i32>(),
        chrom_cats.as_string_opt::<i32>(),
    ) else {
        return Err(Error::format(format!(
            "{d}: bins.chrom and its categories must be strings"
        )));
    };
    let map: HashMap<&str, i32> = cats
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (c, i as i32)))
        .collect();
    vals.iter()
        .enumerate()
        .map(|(i, v)| {
            v.and_then(|v| map.get(v).copied()).ok_or_else(|| {
                Error::format(format!(
                    "{d}: bins row {i}: chrom {v:?} is not in categories/bins.chrom"
                ))
            })
        })
        .collect()
}

/// traces / cells: first column is the index column, with the category values.
fn check_index_column(t: &RecordBatch, name: &str, cats: &ArrayRef, d: &str) -> Result<()> {
    if t.num_columns() == 0 || t.schema().field(0).name() != name {
        return Err(Error::format(format!(
            "{d}: the first column of the {name} table must be \"{name}\""
        )));
    }
    let col = t.column(0);
    if col.data_type() == cats.data_type() && col.to_data() != cats.to_data() {
        return Err(Error::format(format!(
            "{d}: {name} table values differ from the {name} categories"
        )));
    }
    Ok(())
}

/// Text of category `code` when categories are strings.
pub(crate) fn category_text(cats: &ArrayRef, code: i64) -> Option<String> {
    let s = cats.as_string_opt::<i32>()?;
    if code < 0 || code as usize >= s.len() {
        return None;
    }
    Some(s.value(code as usize).to_string())
}
