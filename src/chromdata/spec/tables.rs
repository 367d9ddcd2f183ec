//! `tables/zarr.json` `attrs["tables"]` (§4, §10.3, §12): the spot table and its layout's
//! files, spot tracks, layers, derived files, small tables, pass-through tables, and the
//! column descriptors of §4.0.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::groups::{check_group, GroupNode};
use super::json::{from_json, lenient, null_as_empty, null_or_value, Members};
use super::layout::Layout;
use super::names::{is_reserved_spot_column, AXES};
use super::root::Root;
use super::types::{CodeType, FloatType, ValueType};
use crate::error::{Error, Result};

/// `attributes` of the `tables` group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TablesAttrs {
    pub(crate) tables: Tables,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// `attrs["tables"]` (§4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tables {
    pub(crate) spots: SpotsEntry,
    #[serde(default)]
    pub(crate) spot_tracks: Option<TracksEntry>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) layers: Vec<LayerEntry>,
    /// 2.2 only.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) derived: Vec<DerivedEntry>,
    pub(crate) bins: SmallTable,
    #[serde(default)]
    pub(crate) bin_tracks: Option<SmallTable>,
    pub(crate) traces: SmallTable,
    #[serde(default)]
    pub(crate) cells: Option<SmallTable>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) intervals: Vec<PassTableEntry>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) points: Vec<PassTableEntry>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// `tables.spots` (§4.1). The members of one layout come first (the writer's order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SpotsEntry {
    /// flat: the spot table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    /// 2.2: the primary spot table, null when no column has storage "primary".
    #[serde(
        default,
        deserialize_with = "null_or_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) primary_path: Option<Option<String>>,
    /// 2.2: target rows per coords row group.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) coords_row_group_size: Option<u64>,
    /// partitioned, 2.2 (coords partitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) partitions: Option<Vec<Partition>>,
    /// partitioned: the spot files, aligned with `partitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) files: Option<Vec<String>>,
    /// 2.2: the coords files, aligned with `partitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) coords_files: Option<Vec<String>>,
    pub(crate) layout: Layout,
    pub(crate) n_rows: u64,
    /// Target rows per row group used by the writer (§7.3).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) row_group_size: Option<u64>,
    pub(crate) bin_id: IdDesc,
    pub(crate) trace_id: ColumnDesc,
    #[serde(default)]
    pub(crate) cell_id: Option<ColumnDesc>,
    #[serde(default)]
    pub(crate) coords: Option<CoordsDesc>,
    pub(crate) columns: Vec<ColumnDesc>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// The spot files of a layout, as listed in `tables.spots`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SpotFiles<'a> {
    Flat {
        path: &'a str,
    },
    Partitioned {
        partitions: &'a [Partition],
        files: &'a [String],
    },
    PrimaryCoords {
        primary_path: Option<&'a str>,
        partitions: &'a [Partition],
        coords_files: &'a [String],
    },
}

impl SpotsEntry {
    /// The files of the entry's layout; a member that layout requires and that is missing
    /// is a `Format` error.
    pub(crate) fn files(&self, ctx: &str) -> Result<SpotFiles<'_>> {
        let missing = |m: &str| {
            Error::format(format!(
                "{ctx}: required member \"{m}\" is missing (layout {})",
                self.layout.name()
            ))
        };
        let partitions = || {
            self.partitions
                .as_deref()
                .ok_or_else(|| missing("partitions"))
        };
        let aligned = |files: &[String], partitions: &[Partition]| -> Result<()> {
            if files.len() != partitions.len() {
                return Err(Error::format(format!(
                    "{ctx}: {} files for {} partitions",
                    files.len(),
                    partitions.len()
                )));
            }
            Ok(())
        };
        Ok(match self.layout {
            Layout::Flat => SpotFiles::Flat {
                path: self.path.as_deref().ok_or_else(|| missing("path"))?,
            },
            Layout::Partitioned => {
                let partitions = partitions()?;
                let files = self.files.as_deref().ok_or_else(|| missing("files"))?;
                aligned(files, partitions)?;
                SpotFiles::Partitioned { partitions, files }
            }
            Layout::PrimaryCoords => {
                let partitions = partitions()?;
                let coords_files = self
                    .coords_files
                    .as_deref()
                    .ok_or_else(|| missing("coords_files"))?;
                aligned(coords_files, partitions)?;
                SpotFiles::PrimaryCoords {
                    primary_path: self.primary_path.as_ref().and_then(|p| p.as_deref()),
                    partitions,
                    coords_files,
                }
            }
        })
    }
}

/// `{"name": "bin_id", "type": "int32"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IdDesc {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) ty: String,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// `{"columns": ["x", "y", "z"], "type": "float64"}`: stored names of x, y, z.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CoordsDesc {
    pub(crate) columns: Vec<String>,
    #[serde(rename = "type")]
    pub(crate) ty: FloatType,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// A partition of `tables.spots.partitions` (§4.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Partition {
    pub(crate) chrom: String,
    pub(crate) chrom_code: i64,
    /// `chrom=<portable name>`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) dir: Option<String>,
    pub(crate) n_rows: u64,
    pub(crate) n_row_groups: u64,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// Where a row-aligned table of spot tracks or a layer is: one file (`path`: flat, 2.2
/// primary) or one per partition (`files`: partitioned).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placement<'a> {
    File(&'a str),
    Partitions(&'a [String]),
}

fn placement<'a>(
    path: &'a Option<String>,
    files: &'a Option<Vec<String>>,
    layout: Layout,
    ctx: &str,
) -> Result<Placement<'a>> {
    let missing = |m: &str| Error::format(format!("{ctx}: required member \"{m}\" is missing"));
    Ok(match layout {
        Layout::Partitioned => {
            Placement::Partitions(files.as_deref().ok_or_else(|| missing("files"))?)
        }
        _ => Placement::File(path.as_deref().ok_or_else(|| missing("path"))?),
    })
}

/// `tables.spot_tracks` (§4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TracksEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) files: Option<Vec<String>>,
    pub(crate) columns: Vec<ColumnDesc>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl TracksEntry {
    pub(crate) fn placement(&self, layout: Layout, ctx: &str) -> Result<Placement<'_>> {
        placement(&self.path, &self.files, layout, ctx)
    }
}

/// An entry of `tables.layers` (§4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LayerEntry {
    /// The original key (the stored file name is its portable form).
    pub(crate) key: String,
    #[serde(rename = "type")]
    pub(crate) ty: FloatType,
    /// Stored names of x, y, z.
    pub(crate) columns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) files: Option<Vec<String>>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl LayerEntry {
    pub(crate) fn placement(&self, layout: Layout, ctx: &str) -> Result<Placement<'_>> {
        placement(&self.path, &self.files, layout, ctx)
    }
}

/// The key of a derived file (§10.3): values per bin, cell or trace code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DerivedKey {
    Bin,
    Cell,
    Trace,
}

impl DerivedKey {
    pub(crate) const ALL: [DerivedKey; 3] = [DerivedKey::Bin, DerivedKey::Cell, DerivedKey::Trace];

    pub(crate) fn name(self) -> &'static str {
        match self {
            DerivedKey::Bin => "bin",
            DerivedKey::Cell => "cell",
            DerivedKey::Trace => "trace",
        }
    }
}

/// An entry of `tables.derived` (§10.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DerivedEntry {
    pub(crate) key: DerivedKey,
    pub(crate) path: String,
    pub(crate) n_rows: u64,
    pub(crate) columns: Vec<String>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// A small table (§5): bins, bin_tracks, traces, cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SmallTable {
    pub(crate) path: String,
    pub(crate) n_rows: u64,
    /// traces / cells: the index column.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) index: Option<String>,
    pub(crate) columns: Vec<ColumnDesc>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// An entry of `tables.intervals` or `tables.points` (§12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PassTableEntry {
    pub(crate) key: String,
    pub(crate) path: String,
    pub(crate) n_rows: u64,
    /// Intervals: domain, pair, peak, segment or another kind.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) kind: Option<String>,
    /// Intervals: the result they come from, or null.
    #[serde(
        default,
        deserialize_with = "lenient_null_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) source_result: Option<Option<String>>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

fn lenient_null_or_string<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<String>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s)),
        _ => None,
    })
}

/// A column descriptor `<coldesc>` (§4.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ColumnDescJson", into = "ColumnDescJson")]
pub(crate) struct ColumnDesc {
    pub(crate) name: String,
    pub(crate) ty: ColumnType,
    /// Extra spot columns only (§4.1).
    pub(crate) storage: Option<Storage>,
    pub(crate) other: Members,
}

/// The `type` of a column descriptor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ColumnType {
    Value(ValueType),
    Categorical(Categorical),
}

/// The members of a categorical descriptor (§4.4).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Categorical {
    /// Code type in spot-aligned and derived files; absent for small tables.
    pub(crate) codes: Option<CodeType>,
    /// Categories file, relative to `tables/`.
    pub(crate) categories: String,
    pub(crate) n_categories: u64,
    pub(crate) ordered: Option<bool>,
}

/// Where the values of an extra spot column live (§4.1, §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Storage {
    /// flat / partitioned: the spot files.
    Spots,
    /// 2.2: the primary spot table.
    Primary,
    /// 2.2: a derived file, one value per bin, cell or trace.
    Derived(DerivedKey),
    /// 2.2: a column of the bins table, by bin_id.
    Bins(String),
}

impl Storage {
    fn name(&self) -> &'static str {
        match self {
            Storage::Spots => "spots",
            Storage::Primary => "primary",
            Storage::Derived(_) => "derived",
            Storage::Bins(_) => "bins",
        }
    }
}

impl ColumnDesc {
    /// A column of a value type.
    pub(crate) fn value(name: &str, ty: ValueType) -> ColumnDesc {
        ColumnDesc {
            name: name.to_string(),
            ty: ColumnType::Value(ty),
            storage: None,
            other: Members::new(),
        }
    }

    /// A categorical column (`codes` for spot-aligned tables).
    pub(crate) fn categorical(
        name: &str,
        codes: Option<CodeType>,
        categories: &str,
        n_categories: u64,
    ) -> ColumnDesc {
        ColumnDesc {
            name: name.to_string(),
            ty: ColumnType::Categorical(Categorical {
                codes,
                categories: categories.to_string(),
                n_categories,
                ordered: Some(false),
            }),
            storage: None,
            other: Members::new(),
        }
    }

    pub(crate) fn with_storage(mut self, storage: Storage) -> ColumnDesc {
        self.storage = Some(storage);
        self
    }

    pub(crate) fn categorical_members(&self) -> Option<&Categorical> {
        match &self.ty {
            ColumnType::Categorical(c) => Some(c),
            ColumnType::Value(_) => None,
        }
    }

    /// Arrow type of the stored column in a spot-aligned or derived file: the value type,
    /// or the code type of a categorical (int32 when not given).
    pub(crate) fn stored_type(&self) -> arrow_schema::DataType {
        match &self.ty {
            ColumnType::Value(t) => t.arrow(),
            ColumnType::Categorical(c) => c.codes.unwrap_or(CodeType::Int32).arrow(),
        }
    }

    /// Checks the members a spot-aligned descriptor needs: `codes` when categorical, and
    /// `storage` for extra spot columns (`extra`).
    fn check_spot_aligned(&self, ctx: &str, extra: bool) -> Result<()> {
        let ctx = format!("{ctx} (column \"{}\")", self.name);
        if let ColumnType::Categorical(c) = &self.ty {
            if c.codes.is_none() {
                return Err(Error::format(format!(
                    "{ctx}: required member \"codes\" is missing"
                )));
            }
        }
        if extra && self.storage.is_none() {
            return Err(Error::format(format!(
                "{ctx}: required member \"storage\" is missing"
            )));
        }
        Ok(())
    }
}

/// The JSON members of a column descriptor, in the order the writer emits them.
#[derive(Serialize, Deserialize)]
struct ColumnDescJson {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    codes: Option<CodeType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    categories: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n_categories: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    ordered: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<DerivedKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(flatten)]
    other: Members,
}

/// An error of a descriptor's members; `Unsupported` for an unknown type name.
struct DescError(String, bool);

impl std::fmt::Display for DescError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.1 {
            f.write_str(super::json::UNSUPPORTED_TAG)?;
        }
        f.write_str(&self.0)
    }
}

impl TryFrom<ColumnDescJson> for ColumnDesc {
    type Error = DescError;

    fn try_from(j: ColumnDescJson) -> std::result::Result<Self, DescError> {
        let ctx = format!("column \"{}\"", j.name);
        let missing =
            |m: &str| DescError(format!("{ctx}: required member \"{m}\" is missing"), false);
        let ty = if j.ty == "categorical" {
            ColumnType::Categorical(Categorical {
                codes: j.codes,
                categories: j.categories.ok_or_else(|| missing("categories"))?,
                n_categories: j.n_categories.ok_or_else(|| missing("n_categories"))?,
                ordered: j.ordered,
            })
        } else {
            ColumnType::Value(ValueType::from_name(&j.ty).ok_or_else(|| {
                DescError(format!("{ctx}: unknown column type \"{}\"", j.ty), true)
            })?)
        };
        let storage = match j.storage.as_deref() {
            None => None,
            Some("spots") => Some(Storage::Spots),
            Some("primary") => Some(Storage::Primary),
            Some("derived") => Some(Storage::Derived(j.key.ok_or_else(|| missing("key"))?)),
            Some("bins") => Some(Storage::Bins(j.source.ok_or_else(|| missing("source"))?)),
            Some(s) => return Err(DescError(format!("{ctx}: unknown storage \"{s}\""), false)),
        };
        Ok(ColumnDesc {
            name: j.name,
            ty,
            storage,
            other: j.other,
        })
    }
}

impl From<ColumnDesc> for ColumnDescJson {
    fn from(d: ColumnDesc) -> Self {
        let mut j = ColumnDescJson {
            name: d.name,
            ty: String::new(),
            codes: None,
            categories: None,
            n_categories: None,
            ordered: None,
            storage: d.storage.as_ref().map(|s| s.name().to_string()),
            key: None,
            source: None,
            other: d.other,
        };
        match d.ty {
            ColumnType::Value(t) => j.ty = t.name().to_string(),
            ColumnType::Categorical(c) => {
                j.ty = "categorical".into();
                j.codes = c.codes;
                j.categories = Some(c.categories);
                j.n_categories = Some(c.n_categories);
                j.ordered = c.ordered;
            }
        }
        match d.storage {
            Some(Storage::Derived(k)) => j.key = Some(k),
            Some(Storage::Bins(s)) => j.source = Some(s),
            _ => {}
        }
        j
    }
}

impl TablesAttrs {
    /// Parses and validates `tables/zarr.json` against the root (§2 step 4, §4; the rules
    /// of §14 that need no data). `ctx` names the file in messages.
    pub(crate) fn parse(doc: &Value, root: &Root, ctx: &str) -> Result<GroupNode<TablesAttrs>> {
        check_group(doc, ctx, "tables", false)?;
        let node: GroupNode<TablesAttrs> = from_json(doc, ctx)?;
        node.attributes
            .tables
            .validate(root, &format!("{ctx}: attributes.tables"))?;
        Ok(node)
    }
}

impl Tables {
    fn validate(&self, root: &Root, ctx: &str) -> Result<()> {
        self.spots.validate(root, &format!("{ctx}.spots"))?;
        let layout = root.layout;
        if let Some(t) = &self.spot_tracks {
            let tctx = format!("{ctx}.spot_tracks");
            for (i, c) in t.columns.iter().enumerate() {
                c.check_spot_aligned(&format!("{tctx}.columns[{i}]"), false)?;
            }
            t.placement(layout, &tctx)?;
        }
        for (i, l) in self.layers.iter().enumerate() {
            let lctx = format!("{ctx}.layers[{i}]");
            if l.columns.len() != AXES.len() {
                return Err(Error::format(format!("{lctx}.columns: expected 3 names")));
            }
            l.placement(layout, &lctx)?;
        }
        if layout != Layout::PrimaryCoords && !self.derived.is_empty() {
            return Err(Error::format(format!(
                "{ctx}.derived: derived files exist only in layout primary+coords"
            )));
        }
        if self.cells.is_some() != root.uchrom().has_cell_id {
            return Err(Error::format(format!(
                "{ctx}.cells: present = {} but has_cell_id = {}",
                self.cells.is_some(),
                root.uchrom().has_cell_id
            )));
        }
        Ok(())
    }
}

impl SpotsEntry {
    fn validate(&self, root: &Root, ctx: &str) -> Result<()> {
        if self.layout != root.layout {
            return Err(Error::unsupported(format!(
                "{ctx}.layout: layout \"{}\" does not match format {}.{} (expected \"{}\", format 2.{})",
                self.layout.name(),
                root.major,
                root.minor,
                root.layout.name(),
                self.layout.minor()
            )));
        }
        if self.bin_id.ty != "int32" {
            return Err(Error::format(format!("{ctx}.bin_id.type: must be int32")));
        }
        self.validate_keys(root, ctx)?;
        self.validate_columns(ctx)?;
        let files = self.files(ctx)?;
        if let SpotFiles::PrimaryCoords { primary_path, .. } = files {
            let has_primary = self
                .columns
                .iter()
                .any(|c| c.storage == Some(Storage::Primary));
            if has_primary != primary_path.is_some() {
                return Err(Error::format(format!(
                    "{ctx}.primary_path: must be set iff some column has storage \"primary\""
                )));
            }
        }
        Ok(())
    }

    /// trace_id, cell_id and coords against the root.
    fn validate_keys(&self, root: &Root, ctx: &str) -> Result<()> {
        let u = root.uchrom();
        let categorical = |d: &ColumnDesc, what: &str| -> Result<()> {
            if d.categorical_members().is_none() {
                return Err(Error::format(format!("{ctx}.{what}: must be categorical")));
            }
            d.check_spot_aligned(&format!("{ctx}.{what}"), false)
        };
        categorical(&self.trace_id, "trace_id")?;
        if let Some(c) = &self.cell_id {
            categorical(c, "cell_id")?;
        }
        if self.cell_id.is_some() != u.has_cell_id {
            return Err(Error::format(format!(
                "{ctx}.cell_id: present = {} but has_cell_id = {}",
                self.cell_id.is_some(),
                u.has_cell_id
            )));
        }
        if let Some(c) = &self.coords {
            if c.columns.len() != AXES.len() {
                return Err(Error::format(format!(
                    "{ctx}.coords.columns: expected 3 names"
                )));
            }
        }
        if self.coords.is_some() != u.has_coords {
            return Err(Error::format(format!(
                "{ctx}.coords: present = {} but has_coords = {}",
                self.coords.is_some(),
                u.has_coords
            )));
        }
        if let Some(c) = &self.coords {
            if Some(c.ty) != u.coord_dtype {
                return Err(Error::format(format!(
                    "{ctx}.coords.type differs from uchrom.coord_dtype"
                )));
            }
        }
        Ok(())
    }

    /// The extra spot columns (§4.1): storage allowed by the layout, reserved and
    /// repeated names.
    fn validate_columns(&self, ctx: &str) -> Result<()> {
        let cctx = format!("{ctx}.columns");
        for (i, c) in self.columns.iter().enumerate() {
            c.check_spot_aligned(&format!("{cctx}[{i}]"), true)?;
            if is_reserved_spot_column(&c.name) {
                return Err(Error::format(format!(
                    "{cctx}: reserved name \"{}\" used for an extra spot column",
                    c.name
                )));
            }
            let st = c.storage.as_ref().unwrap_or(&Storage::Spots);
            let allowed = match self.layout {
                Layout::Flat | Layout::Partitioned => *st == Storage::Spots,
                Layout::PrimaryCoords => *st != Storage::Spots,
            };
            if !allowed {
                return Err(Error::format(format!(
                    "{cctx}: column \"{}\" has storage \"{}\", not allowed in layout {}",
                    c.name,
                    st.name(),
                    self.layout.name()
                )));
            }
            if matches!(st, Storage::Bins(_)) && c.categorical_members().is_some() {
                return Err(Error::format(format!(
                    "{cctx}: categorical column \"{}\" cannot reference bins",
                    c.name
                )));
            }
            if self.columns[..i].iter().any(|d| d.name == c.name) {
                return Err(Error::format(format!(
                    "{cctx}: duplicate column \"{}\"",
                    c.name
                )));
            }
        }
        Ok(())
    }
}
