//! The full result schema of spot queries (§15.1) and where each column comes from.

use std::collections::HashMap;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use super::files::type_matches;
use super::tables::SmallTables;
use crate::chromdata::spec::{
    ColumnDesc, ColumnType, DerivedKey, Storage, Tables, AXES, LAYER_PREFIX, TRACK_PREFIX,
};
use crate::error::{Error, Result};

/// A file set of a store that spot columns are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FileSetId {
    /// bin_id, trace_id, cell_id, x, y, z (and the extra columns of 2.0 / 2.1).
    Key,
    /// 2.2: extra columns with storage "primary".
    Primary,
    /// Spot tracks.
    Tracks,
    /// Layer k.
    Layer(usize),
}

/// Where an output column's values come from.
#[derive(Debug, Clone)]
pub(crate) enum ColumnSource {
    BinId,
    TraceId,
    CellId,
    /// x, y or z: a column of the key set (its stored name).
    Coordinate {
        column: String,
    },
    /// A stored column of a file set; categorical codes are decoded with `categories`.
    Stored {
        set: FileSetId,
        column: String,
        categories: Option<ArrayRef>,
    },
    /// 2.2: values per bin / cell / trace code, from a derived file (codes decoded with
    /// `categories`).
    Derived {
        key: DerivedKey,
        values: ArrayRef,
        categories: Option<ArrayRef>,
    },
    /// 2.2: a column of the bins table, by bin_id.
    Bins {
        values: ArrayRef,
    },
}

/// A column of the full result schema.
#[derive(Debug, Clone)]
pub(crate) struct OutputColumn {
    pub(crate) name: String,
    pub(crate) dtype: DataType,
    pub(crate) source: ColumnSource,
}

/// Output type of a column given its categories.
fn out_type(d: &ColumnDesc, cats: &Option<ArrayRef>) -> DataType {
    match (&d.ty, cats) {
        (ColumnType::Categorical(_), Some(c)) => c.data_type().clone(),
        _ => d.stored_type(),
    }
}

/// The full schema (§15.1): bin_id, trace_id, [cell_id], [x, y, z], extra spot columns,
/// `spot_tracks/<name>`, `layers/<key>/x|y|z`. Derived and bins-referenced columns are
/// resolved to their values and checked against their descriptors (§14 rule 4).
pub(crate) fn output_columns(
    tables: &Tables,
    small: &SmallTables,
    derived: &HashMap<DerivedKey, RecordBatch>,
    d: &str,
) -> Result<Vec<OutputColumn>> {
    let sm = &tables.spots;
    let col = |name: &str, dtype: DataType, source: ColumnSource| OutputColumn {
        name: name.to_string(),
        dtype,
        source,
    };
    let mut schema = vec![
        col("bin_id", DataType::Int32, ColumnSource::BinId),
        col(
            "trace_id",
            small.trace_cats.data_type().clone(),
            ColumnSource::TraceId,
        ),
    ];
    if let Some(cc) = &small.cell_cats {
        schema.push(col("cell_id", cc.data_type().clone(), ColumnSource::CellId));
    }
    let stored =
        |set: FileSetId, column: &str, categories: Option<ArrayRef>| ColumnSource::Stored {
            set,
            column: column.to_string(),
            categories,
        };
    if let Some(c) = &sm.coords {
        for (axis, stored_name) in AXES.iter().zip(&c.columns) {
            let source = ColumnSource::Coordinate {
                column: stored_name.clone(),
            };
            schema.push(col(axis, c.ty.arrow(), source));
        }
    }
    for (c, cats) in sm.columns.iter().zip(&small.extra_cats) {
        let source = match c.storage.as_ref().unwrap_or(&Storage::Spots) {
            Storage::Spots => stored(FileSetId::Key, &c.name, cats.clone()),
            Storage::Primary => stored(FileSetId::Primary, &c.name, cats.clone()),
            Storage::Derived(key) => derived_source(c, *key, cats, tables, derived, d)?,
            Storage::Bins(src) => bins_source(c, src, small, d)?,
        };
        schema.push(col(&c.name, out_type(c, cats), source));
    }
    if let Some(t) = &tables.spot_tracks {
        for (c, cats) in t.columns.iter().zip(&small.track_cats) {
            schema.push(col(
                &format!("{TRACK_PREFIX}{}", c.name),
                out_type(c, cats),
                stored(FileSetId::Tracks, &c.name, cats.clone()),
            ));
        }
    }
    for (k, l) in tables.layers.iter().enumerate() {
        for (axis, stored_name) in AXES.iter().zip(&l.columns) {
            schema.push(col(
                &format!("{LAYER_PREFIX}{}/{axis}", l.key),
                l.ty.arrow(),
                stored(FileSetId::Layer(k), stored_name, None),
            ));
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
    Ok(schema)
}

/// A derived column: it must be listed in `tables.derived` for its key and stored in the
/// derived file with its descriptor's type.
fn derived_source(
    c: &ColumnDesc,
    key: DerivedKey,
    cats: &Option<ArrayRef>,
    tables: &Tables,
    derived: &HashMap<DerivedKey, RecordBatch>,
    d: &str,
) -> Result<ColumnSource> {
    let listed = tables
        .derived
        .iter()
        .any(|dm| dm.key == key && dm.columns.contains(&c.name));
    let values = derived
        .get(&key)
        .and_then(|b| b.column_by_name(&c.name))
        .filter(|_| listed)
        .ok_or_else(|| {
            Error::format(format!(
                "{d}: derived column \"{}\" (key {}) is not in tables.derived / its file",
                c.name,
                key.name()
            ))
        })?;
    if !type_matches(values.data_type(), &c.stored_type()) {
        return Err(Error::format(format!(
            "{d}: derived column \"{}\" is stored as {}, the metadata says {}",
            c.name,
            values.data_type(),
            c.stored_type()
        )));
    }
    Ok(ColumnSource::Derived {
        key,
        values: values.clone(),
        categories: cats.clone(),
    })
}

/// A column referencing a bins column, which must exist with the descriptor's type.
fn bins_source(c: &ColumnDesc, src: &str, small: &SmallTables, d: &str) -> Result<ColumnSource> {
    match small.bins.column_by_name(src) {
        Some(values) if *values.data_type() == c.stored_type() => Ok(ColumnSource::Bins {
            values: values.clone(),
        }),
        _ => Err(Error::format(format!(
            "{d}: column \"{}\" references bins column \"{src}\", which is missing or of another type",
            c.name
        ))),
    }
}

impl ColumnSource {
    /// The file set and stored column this source reads, if it reads one.
    pub(crate) fn stored_column(&self) -> Option<(FileSetId, &str)> {
        match self {
            ColumnSource::Coordinate { column } => Some((FileSetId::Key, column)),
            ColumnSource::Stored { set, column, .. } => Some((*set, column)),
            _ => None,
        }
    }
}
