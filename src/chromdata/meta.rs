//! Parsing of the root `zarr.json` (§2, §3) and of `tables/zarr.json` `attrs["tables"]`
//! (§4). Every rule broken gives a message naming the JSON member.

use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};

/// Spot-table layout (§2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Format 2.0.
    Flat,
    /// Format 2.1.
    Partitioned,
    /// Format 2.2.
    PrimaryCoords,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::Partitioned => "partitioned",
            Layout::PrimaryCoords => "primary+coords",
        }
    }
    fn minor(self) -> u32 {
        match self {
            Layout::Flat => 0,
            Layout::Partitioned => 1,
            Layout::PrimaryCoords => 2,
        }
    }
    fn spot_order(self) -> &'static str {
        match self {
            Layout::Flat => "cell,trace,bin",
            Layout::Partitioned => "chrom,cell,trace,bin",
            Layout::PrimaryCoords => "cell,trace,chrom,bin",
        }
    }
}

pub(crate) type Obj = Map<String, Value>;

pub(crate) fn obj<'a>(v: &'a Value, ctx: &str) -> Result<&'a Obj> {
    v.as_object()
        .ok_or_else(|| Error::format(format!("{ctx}: expected a JSON object")))
}

fn member<'a>(o: &'a Obj, key: &str, ctx: &str) -> Result<&'a Value> {
    o.get(key)
        .ok_or_else(|| Error::format(format!("{ctx}: required member \"{key}\" is missing")))
}

pub(crate) fn get_str<'a>(o: &'a Obj, key: &str, ctx: &str) -> Result<&'a str> {
    member(o, key, ctx)?
        .as_str()
        .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected a string")))
}

pub(crate) fn get_u64(o: &Obj, key: &str, ctx: &str) -> Result<u64> {
    member(o, key, ctx)?
        .as_u64()
        .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected a non-negative integer")))
}

fn get_i64(o: &Obj, key: &str, ctx: &str) -> Result<i64> {
    member(o, key, ctx)?
        .as_i64()
        .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected an integer")))
}

fn get_bool(o: &Obj, key: &str, ctx: &str) -> Result<bool> {
    member(o, key, ctx)?
        .as_bool()
        .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected true or false")))
}

/// An object member that may be `null` (or absent).
fn get_opt_obj<'a>(o: &'a Obj, key: &str, ctx: &str) -> Result<Option<&'a Obj>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => obj(v, &format!("{ctx}.{key}")).map(Some),
    }
}

fn get_arr<'a>(o: &'a Obj, key: &str, ctx: &str) -> Result<&'a Vec<Value>> {
    member(o, key, ctx)?
        .as_array()
        .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected a JSON array")))
}

/// An array member that may be absent or null (= empty).
fn get_opt_arr<'a>(o: &'a Obj, key: &str, ctx: &str) -> Result<&'a [Value]> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(v) => v
            .as_array()
            .map(|a| a.as_slice())
            .ok_or_else(|| Error::format(format!("{ctx}.{key}: expected a JSON array"))),
    }
}

fn str_list(v: &[Value], ctx: &str) -> Result<Vec<String>> {
    v.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| Error::format(format!("{ctx}[{i}]: expected a string")))
        })
        .collect()
}

/// Value types of the vocabulary of §4.0 (categorical carried separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prim {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    String,
}

impl Prim {
    pub(crate) fn parse(s: &str) -> Option<Prim> {
        Some(match s {
            "bool" => Prim::Bool,
            "int8" => Prim::Int8,
            "int16" => Prim::Int16,
            "int32" => Prim::Int32,
            "int64" => Prim::Int64,
            "uint8" => Prim::UInt8,
            "uint16" => Prim::UInt16,
            "uint32" => Prim::UInt32,
            "uint64" => Prim::UInt64,
            "float32" => Prim::Float32,
            "float64" => Prim::Float64,
            "string" => Prim::String,
            _ => return None,
        })
    }
    pub(crate) fn arrow(self) -> arrow_schema::DataType {
        use arrow_schema::DataType as D;
        match self {
            Prim::Bool => D::Boolean,
            Prim::Int8 => D::Int8,
            Prim::Int16 => D::Int16,
            Prim::Int32 => D::Int32,
            Prim::Int64 => D::Int64,
            Prim::UInt8 => D::UInt8,
            Prim::UInt16 => D::UInt16,
            Prim::UInt32 => D::UInt32,
            Prim::UInt64 => D::UInt64,
            Prim::Float32 => D::Float32,
            Prim::Float64 => D::Float64,
            Prim::String => D::Utf8,
        }
    }
}

/// A categorical column's descriptor fields.
#[derive(Debug, Clone)]
pub(crate) struct CatDesc {
    /// Code type in spot-aligned / derived files (int16 or int32); None for small tables.
    pub(crate) codes: Option<Prim>,
    /// Path relative to `tables/`.
    pub(crate) categories: String,
    pub(crate) n_categories: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum ColType {
    Prim(Prim),
    Cat(CatDesc),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DerivedKey {
    Bin,
    Cell,
    Trace,
}

impl DerivedKey {
    pub(crate) fn name(self) -> &'static str {
        match self {
            DerivedKey::Bin => "bin",
            DerivedKey::Cell => "cell",
            DerivedKey::Trace => "trace",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Storage {
    Spots,
    Primary,
    Derived(DerivedKey),
    Bins(String),
}

/// `<coldesc>` of §4.0.
#[derive(Debug, Clone)]
pub(crate) struct ColDesc {
    pub(crate) name: String,
    pub(crate) ty: ColType,
    pub(crate) storage: Option<Storage>,
}

/// Parses a column descriptor; `spot_aligned` requires `codes` for categoricals, `extra`
/// requires `storage`.
fn coldesc(v: &Value, ctx: &str, spot_aligned: bool, extra: bool) -> Result<ColDesc> {
    let o = obj(v, ctx)?;
    let name = get_str(o, "name", ctx)?.to_string();
    let ctx = format!("{ctx} (column \"{name}\")");
    let t = get_str(o, "type", &ctx)?;
    let ty = if t == "categorical" {
        let codes = if spot_aligned {
            let c = get_str(o, "codes", &ctx)?;
            match c {
                "int16" => Some(Prim::Int16),
                "int32" => Some(Prim::Int32),
                _ => {
                    return Err(Error::unsupported(format!(
                        "{ctx}.codes: code type \"{c}\" is neither int16 nor int32"
                    )))
                }
            }
        } else {
            None
        };
        ColType::Cat(CatDesc {
            codes,
            categories: get_str(o, "categories", &ctx)?.to_string(),
            n_categories: get_u64(o, "n_categories", &ctx)?,
        })
    } else {
        ColType::Prim(Prim::parse(t).ok_or_else(|| {
            Error::unsupported(format!("{ctx}.type: unknown column type \"{t}\""))
        })?)
    };
    let storage = if extra {
        let s = get_str(o, "storage", &ctx)?;
        Some(match s {
            "spots" => Storage::Spots,
            "primary" => Storage::Primary,
            "derived" => Storage::Derived(match get_str(o, "key", &ctx)? {
                "bin" => DerivedKey::Bin,
                "cell" => DerivedKey::Cell,
                "trace" => DerivedKey::Trace,
                k => {
                    return Err(Error::format(format!(
                        "{ctx}.key: derived key \"{k}\" is not bin, cell or trace"
                    )))
                }
            }),
            "bins" => Storage::Bins(get_str(o, "source", &ctx)?.to_string()),
            _ => {
                return Err(Error::format(format!(
                    "{ctx}.storage: unknown storage \"{s}\""
                )))
            }
        })
    } else {
        None
    };
    Ok(ColDesc { name, ty, storage })
}

fn coldescs(v: &[Value], ctx: &str, spot_aligned: bool, extra: bool) -> Result<Vec<ColDesc>> {
    v.iter()
        .enumerate()
        .map(|(i, c)| coldesc(c, &format!("{ctx}[{i}]"), spot_aligned, extra))
        .collect()
}

/// Root attributes (§3).
#[derive(Debug, Clone)]
pub(crate) struct RootMeta {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) layout: Layout,
    pub(crate) n_spots: u64,
    pub(crate) n_bins: u64,
    pub(crate) n_traces: u64,
    pub(crate) n_cells: u64,
    pub(crate) n_chroms: u64,
    pub(crate) n_runs: u64,
    pub(crate) n_row_groups: u64,
    pub(crate) n_coord_row_groups: u64,
    pub(crate) has_source_row: bool,
    pub(crate) has_cell_id: bool,
    pub(crate) has_coords: bool,
    pub(crate) coord_dtype: Option<Prim>,
    /// The `uchrom` object as stored (for `summary`).
    pub(crate) uchrom: Obj,
}

/// Parses `^([0-9]+)\.([0-9]+)$`.
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Checks the root group and version rules (§2 steps 1–3, §14 rules 1–2); the layout is
/// checked against the version by [`check_layout`] once `tables` is read.
pub(crate) fn parse_root(root: &Value, store: &str) -> Result<RootMeta> {
    let ctx = format!("{store}/zarr.json");
    let o = obj(root, &ctx)?;
    if o.get("zarr_format").and_then(Value::as_u64) != Some(3) {
        return Err(Error::format(format!(
            "{ctx}: not a Zarr v3 node (zarr_format is not 3)"
        )));
    }
    if o.get("node_type").and_then(Value::as_str) != Some("group") {
        return Err(Error::format(format!(
            "{ctx}: root node is not a Zarr group (node_type is not \"group\")"
        )));
    }
    let attrs = obj(
        o.get("attributes").unwrap_or(&Value::Null),
        &format!("{ctx}.attributes"),
    )?;
    let actx = format!("{ctx}.attributes");
    let version = match attrs.get("uchrom_format_version") {
        None => {
            return Err(Error::format(format!(
                "{actx}: no uchrom_format_version; not a ChromData store"
            )))
        }
        Some(v) => v.as_str().ok_or_else(|| {
            Error::unsupported(format!(
                "{actx}.uchrom_format_version: bad version {v} (not a string)"
            ))
        })?,
    };
    let (major, minor) = parse_version(version).ok_or_else(|| {
        Error::unsupported(format!(
            "{actx}.uchrom_format_version: bad version \"{version}\" (expected MAJOR.MINOR)"
        ))
    })?;
    if major != 2 {
        return Err(Error::unsupported(format!(
            "{ctx}: unknown major version {major} (format \"{version}\"); this reader reads 2.0 to 2.2"
        )));
    }
    if minor > 2 {
        return Err(Error::unsupported(format!(
            "{ctx}: newer minor version {version}; this reader reads 2.0 to 2.2"
        )));
    }
    let uctx = format!("{actx}.uchrom");
    let u = obj(member(attrs, "uchrom", &actx)?, &uctx)?;
    let format = get_str(u, "format", &uctx)?;
    if format != "chromdata.zarr" {
        return Err(Error::format(format!(
            "{uctx}.format: \"{format}\" is not \"chromdata.zarr\""
        )));
    }
    let fv = get_str(u, "format_version", &uctx)?;
    if fv != version {
        return Err(Error::format(format!(
            "{uctx}.format_version \"{fv}\" differs from uchrom_format_version \"{version}\""
        )));
    }
    let layout = match minor {
        0 => Layout::Flat,
        1 => Layout::Partitioned,
        _ => Layout::PrimaryCoords,
    };
    let spot_order = get_str(u, "spot_order", &uctx)?;
    if spot_order != layout.spot_order() {
        return Err(Error::unsupported(format!(
            "{uctx}.spot_order \"{spot_order}\" does not match format {version} (expected \"{}\")",
            layout.spot_order()
        )));
    }
    let has_coords = get_bool(u, "has_coords", &uctx)?;
    let coord_dtype = match u.get("coord_dtype") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "float64" => Some(Prim::Float64),
        Some(Value::String(s)) if s == "float32" => Some(Prim::Float32),
        Some(v) => {
            return Err(Error::unsupported(format!(
                "{uctx}.coord_dtype: {v} is not \"float32\", \"float64\" or null"
            )))
        }
    };
    if has_coords != coord_dtype.is_some() {
        return Err(Error::format(format!(
            "{uctx}: coord_dtype must be null iff has_coords is false"
        )));
    }
    let n_coord_row_groups = if layout == Layout::PrimaryCoords {
        get_u64(u, "n_coord_row_groups", &uctx)?
    } else {
        0
    };
    Ok(RootMeta {
        major,
        minor,
        layout,
        n_spots: get_u64(u, "n_spots", &uctx)?,
        n_bins: get_u64(u, "n_bins", &uctx)?,
        n_traces: get_u64(u, "n_traces", &uctx)?,
        n_cells: get_u64(u, "n_cells", &uctx)?,
        n_chroms: get_u64(u, "n_chroms", &uctx)?,
        n_runs: get_u64(u, "n_runs", &uctx)?,
        n_row_groups: get_u64(u, "n_row_groups", &uctx)?,
        n_coord_row_groups,
        has_source_row: get_bool(u, "has_source_row", &uctx)?,
        has_cell_id: get_bool(u, "has_cell_id", &uctx)?,
        has_coords,
        coord_dtype,
        uchrom: u.clone(),
    })
}

/// §2 step 4: the layout named in `tables` must be known and match the version.
pub(crate) fn check_layout(name: &str, root: &RootMeta, ctx: &str) -> Result<()> {
    let layout = match name {
        "flat" => Layout::Flat,
        "partitioned" => Layout::Partitioned,
        "primary+coords" => Layout::PrimaryCoords,
        _ => {
            return Err(Error::unsupported(format!(
                "{ctx}: unknown spot layout \"{name}\""
            )))
        }
    };
    if layout != root.layout {
        return Err(Error::unsupported(format!(
            "{ctx}: layout \"{name}\" does not match format {}.{} (expected \"{}\", format {}.{})",
            root.major,
            root.minor,
            root.layout.name(),
            2,
            layout.minor()
        )));
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub(crate) struct Partition {
    pub(crate) chrom: String,
    pub(crate) chrom_code: i64,
    pub(crate) n_rows: u64,
    pub(crate) n_row_groups: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct SpotsMeta {
    pub(crate) n_rows: u64,
    pub(crate) trace_id: ColDesc,
    pub(crate) cell_id: Option<ColDesc>,
    pub(crate) bin_id_name: String,
    /// Stored names of x, y, z and their type.
    pub(crate) coords: Option<(Vec<String>, Prim)>,
    pub(crate) columns: Vec<ColDesc>,
    /// flat: the spots file; 2.2: the primary spots file (may be None).
    pub(crate) path: Option<String>,
    pub(crate) partitions: Vec<Partition>,
    /// partitioned: spots files; 2.2: coords files.
    pub(crate) files: Vec<String>,
}

/// A row-aligned table stored as one file (flat, 2.2 primary) or one file per partition.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pub(crate) path: Option<String>,
    pub(crate) files: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct TracksMeta {
    pub(crate) columns: Vec<ColDesc>,
    pub(crate) place: Placement,
}

#[derive(Debug, Clone)]
pub(crate) struct LayerMeta {
    pub(crate) key: String,
    pub(crate) ty: Prim,
    pub(crate) columns: Vec<String>,
    pub(crate) place: Placement,
}

#[derive(Debug, Clone)]
pub(crate) struct DerivedMeta {
    pub(crate) key: DerivedKey,
    pub(crate) path: String,
    pub(crate) n_rows: u64,
    pub(crate) columns: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct SmallMeta {
    pub(crate) path: String,
    pub(crate) n_rows: u64,
    pub(crate) columns: Vec<ColDesc>,
}

#[derive(Debug, Clone)]
pub(crate) struct PassMeta {
    pub(crate) key: String,
    pub(crate) path: String,
    pub(crate) n_rows: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct TablesMeta {
    pub(crate) spots: SpotsMeta,
    pub(crate) spot_tracks: Option<TracksMeta>,
    pub(crate) layers: Vec<LayerMeta>,
    pub(crate) derived: Vec<DerivedMeta>,
    pub(crate) bins: SmallMeta,
    pub(crate) bin_tracks: Option<SmallMeta>,
    pub(crate) traces: SmallMeta,
    pub(crate) cells: Option<SmallMeta>,
    pub(crate) intervals: Vec<PassMeta>,
    pub(crate) points: Vec<PassMeta>,
}

fn placement(o: &Obj, layout: Layout, ctx: &str) -> Result<Placement> {
    Ok(match layout {
        Layout::Partitioned => Placement {
            path: None,
            files: str_list(get_arr(o, "files", ctx)?, &format!("{ctx}.files"))?,
        },
        _ => Placement {
            path: Some(get_str(o, "path", ctx)?.to_string()),
            files: Vec::new(),
        },
    })
}

fn small(o: &Obj, ctx: &str) -> Result<SmallMeta> {
    Ok(SmallMeta {
        path: get_str(o, "path", ctx)?.to_string(),
        n_rows: get_u64(o, "n_rows", ctx)?,
        columns: coldescs(
            get_arr(o, "columns", ctx)?,
            &format!("{ctx}.columns"),
            false,
            false,
        )?,
    })
}

fn pass(v: &[Value], ctx: &str) -> Result<Vec<PassMeta>> {
    v.iter()
        .enumerate()
        .map(|(i, e)| {
            let c = format!("{ctx}[{i}]");
            let o = obj(e, &c)?;
            Ok(PassMeta {
                key: get_str(o, "key", &c)?.to_string(),
                path: get_str(o, "path", &c)?.to_string(),
                n_rows: get_u64(o, "n_rows", &c)?,
            })
        })
        .collect()
}

const RESERVED: [&str; 6] = ["bin_id", "trace_id", "cell_id", "x", "y", "z"];

/// Parses `attrs["tables"]` of `tables/zarr.json` (§4).
pub(crate) fn parse_tables(
    tables_json: &Value,
    root: &RootMeta,
    store: &str,
) -> Result<TablesMeta> {
    let gctx = format!("{store}/tables/zarr.json");
    let g = obj(tables_json, &gctx)?;
    if g.get("node_type").and_then(Value::as_str) != Some("group") {
        return Err(Error::format(format!("{gctx}: tables is not a Zarr group")));
    }
    let attrs = obj(
        g.get("attributes").unwrap_or(&Value::Null),
        &format!("{gctx}.attributes"),
    )?;
    let ctx = format!("{gctx}.attributes.tables");
    let t = obj(
        member(attrs, "tables", &format!("{gctx}.attributes"))?,
        &ctx,
    )?;
    let layout = root.layout;

    let sctx = format!("{ctx}.spots");
    let s = obj(member(t, "spots", &ctx)?, &sctx)?;
    check_layout(
        get_str(s, "layout", &sctx)?,
        root,
        &format!("{sctx}.layout"),
    )?;
    let bin = obj(member(s, "bin_id", &sctx)?, &format!("{sctx}.bin_id"))?;
    let bin_id_name = get_str(bin, "name", &format!("{sctx}.bin_id"))?.to_string();
    if get_str(bin, "type", &format!("{sctx}.bin_id"))? != "int32" {
        return Err(Error::format(format!("{sctx}.bin_id.type: must be int32")));
    }
    let trace_id = coldesc(
        member(s, "trace_id", &sctx)?,
        &format!("{sctx}.trace_id"),
        true,
        false,
    )?;
    if !matches!(trace_id.ty, ColType::Cat(_)) {
        return Err(Error::format(format!(
            "{sctx}.trace_id: must be categorical"
        )));
    }
    let cell_id = match s.get("cell_id") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let d = coldesc(v, &format!("{sctx}.cell_id"), true, false)?;
            if !matches!(d.ty, ColType::Cat(_)) {
                return Err(Error::format(format!(
                    "{sctx}.cell_id: must be categorical"
                )));
            }
            Some(d)
        }
    };
    if cell_id.is_some() != root.has_cell_id {
        return Err(Error::format(format!(
            "{sctx}.cell_id: present = {} but has_cell_id = {}",
            cell_id.is_some(),
            root.has_cell_id
        )));
    }
    let coords = match get_opt_obj(s, "coords", &sctx)? {
        None => None,
        Some(c) => {
            let cctx = format!("{sctx}.coords");
            let cols = str_list(get_arr(c, "columns", &cctx)?, &format!("{cctx}.columns"))?;
            if cols.len() != 3 {
                return Err(Error::format(format!("{cctx}.columns: expected 3 names")));
            }
            let ty = match get_str(c, "type", &cctx)? {
                "float64" => Prim::Float64,
                "float32" => Prim::Float32,
                other => {
                    return Err(Error::unsupported(format!(
                        "{cctx}.type: coordinate type \"{other}\" is not float32 or float64"
                    )))
                }
            };
            Some((cols, ty))
        }
    };
    if coords.is_some() != root.has_coords {
        return Err(Error::format(format!(
            "{sctx}.coords: present = {} but has_coords = {}",
            coords.is_some(),
            root.has_coords
        )));
    }
    if let Some((_, ty)) = &coords {
        if Some(*ty) != root.coord_dtype {
            return Err(Error::format(format!(
                "{sctx}.coords.type differs from uchrom.coord_dtype"
            )));
        }
    }
    let columns = coldescs(
        get_arr(s, "columns", &sctx)?,
        &format!("{sctx}.columns"),
        true,
        true,
    )?;
    for c in &columns {
        if RESERVED.contains(&c.name.as_str())
            || c.name.starts_with("spot_tracks/")
            || c.name.starts_with("layers/")
        {
            return Err(Error::format(format!(
                "{sctx}.columns: reserved name \"{}\" used for an extra spot column",
                c.name
            )));
        }
        let st = c.storage.as_ref().expect("extra columns carry storage");
        let ok = match layout {
            Layout::Flat | Layout::Partitioned => *st == Storage::Spots,
            Layout::PrimaryCoords => *st != Storage::Spots,
        };
        if !ok {
            return Err(Error::format(format!(
                "{sctx}.columns: column \"{}\" has storage {:?}, not allowed in layout {}",
                c.name,
                st,
                layout.name()
            )));
        }
        if matches!(st, Storage::Bins(_)) && matches!(c.ty, ColType::Cat(_)) {
            return Err(Error::format(format!(
                "{sctx}.columns: categorical column \"{}\" cannot reference bins",
                c.name
            )));
        }
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].iter().any(|d| d.name == c.name) {
            return Err(Error::format(format!(
                "{sctx}.columns: duplicate column \"{}\"",
                c.name
            )));
        }
    }
    let mut partitions = Vec::new();
    if layout != Layout::Flat {
        for (i, p) in get_arr(s, "partitions", &sctx)?.iter().enumerate() {
            let pctx = format!("{sctx}.partitions[{i}]");
            let o = obj(p, &pctx)?;
            partitions.push(Partition {
                chrom: get_str(o, "chrom", &pctx)?.to_string(),
                chrom_code: get_i64(o, "chrom_code", &pctx)?,
                n_rows: get_u64(o, "n_rows", &pctx)?,
                n_row_groups: get_u64(o, "n_row_groups", &pctx)?,
            });
        }
    }
    let (path, files) = match layout {
        Layout::Flat => (Some(get_str(s, "path", &sctx)?.to_string()), Vec::new()),
        Layout::Partitioned => (
            None,
            str_list(get_arr(s, "files", &sctx)?, &format!("{sctx}.files"))?,
        ),
        Layout::PrimaryCoords => (
            match s.get("primary_path") {
                None | Some(Value::Null) => None,
                Some(Value::String(p)) => Some(p.clone()),
                Some(_) => {
                    return Err(Error::format(format!(
                        "{sctx}.primary_path: expected a string or null"
                    )))
                }
            },
            str_list(
                get_arr(s, "coords_files", &sctx)?,
                &format!("{sctx}.coords_files"),
            )?,
        ),
    };
    if files.len() != partitions.len() {
        return Err(Error::format(format!(
            "{sctx}: {} files for {} partitions",
            files.len(),
            partitions.len()
        )));
    }
    let has_primary_cols = columns.iter().any(|c| c.storage == Some(Storage::Primary));
    if layout == Layout::PrimaryCoords && has_primary_cols != path.is_some() {
        return Err(Error::format(format!(
            "{sctx}.primary_path: must be set iff some column has storage \"primary\""
        )));
    }
    let spots = SpotsMeta {
        n_rows: get_u64(s, "n_rows", &sctx)?,
        trace_id,
        cell_id,
        bin_id_name,
        coords,
        columns,
        path,
        partitions,
        files,
    };

    let spot_tracks = match get_opt_obj(t, "spot_tracks", &ctx)? {
        None => None,
        Some(o) => {
            let tctx = format!("{ctx}.spot_tracks");
            Some(TracksMeta {
                columns: coldescs(
                    get_arr(o, "columns", &tctx)?,
                    &format!("{tctx}.columns"),
                    true,
                    false,
                )?,
                place: placement(o, layout, &tctx)?,
            })
        }
    };
    let mut layers = Vec::new();
    for (i, l) in get_opt_arr(t, "layers", &ctx)?.iter().enumerate() {
        let lctx = format!("{ctx}.layers[{i}]");
        let o = obj(l, &lctx)?;
        let ty = match get_str(o, "type", &lctx)? {
            "float64" => Prim::Float64,
            "float32" => Prim::Float32,
            other => {
                return Err(Error::unsupported(format!(
                    "{lctx}.type: layer type \"{other}\" is not float32 or float64"
                )))
            }
        };
        let cols = str_list(get_arr(o, "columns", &lctx)?, &format!("{lctx}.columns"))?;
        if cols.len() != 3 {
            return Err(Error::format(format!("{lctx}.columns: expected 3 names")));
        }
        layers.push(LayerMeta {
            key: get_str(o, "key", &lctx)?.to_string(),
            ty,
            columns: cols,
            place: placement(o, layout, &lctx)?,
        });
    }
    let mut derived = Vec::new();
    for (i, d) in get_opt_arr(t, "derived", &ctx)?.iter().enumerate() {
        let dctx = format!("{ctx}.derived[{i}]");
        let o = obj(d, &dctx)?;
        let key = match get_str(o, "key", &dctx)? {
            "bin" => DerivedKey::Bin,
            "cell" => DerivedKey::Cell,
            "trace" => DerivedKey::Trace,
            k => {
                return Err(Error::format(format!(
                    "{dctx}.key: \"{k}\" is not bin, cell or trace"
                )))
            }
        };
        derived.push(DerivedMeta {
            key,
            path: get_str(o, "path", &dctx)?.to_string(),
            n_rows: get_u64(o, "n_rows", &dctx)?,
            columns: str_list(get_arr(o, "columns", &dctx)?, &format!("{dctx}.columns"))?,
        });
    }
    if layout != Layout::PrimaryCoords && !derived.is_empty() {
        return Err(Error::format(format!(
            "{ctx}.derived: derived files exist only in layout primary+coords"
        )));
    }
    let bins = small(
        obj(member(t, "bins", &ctx)?, &format!("{ctx}.bins"))?,
        &format!("{ctx}.bins"),
    )?;
    let bin_tracks = get_opt_obj(t, "bin_tracks", &ctx)?
        .map(|o| small(o, &format!("{ctx}.bin_tracks")))
        .transpose()?;
    let traces = small(
        obj(member(t, "traces", &ctx)?, &format!("{ctx}.traces"))?,
        &format!("{ctx}.traces"),
    )?;
    let cells = get_opt_obj(t, "cells", &ctx)?
        .map(|o| small(o, &format!("{ctx}.cells")))
        .transpose()?;
    if cells.is_some() != root.has_cell_id {
        return Err(Error::format(format!(
            "{ctx}.cells: present = {} but has_cell_id = {}",
            cells.is_some(),
            root.has_cell_id
        )));
    }
    Ok(TablesMeta {
        spots,
        spot_tracks,
        layers,
        derived,
        bins,
        bin_tracks,
        traces,
        cells,
        intervals: pass(
            get_opt_arr(t, "intervals", &ctx)?,
            &format!("{ctx}.intervals"),
        )?,
        points: pass(get_opt_arr(t, "points", &ctx)?, &format!("{ctx}.points"))?,
    })
}

/// `keys` attribute of a §12 Zarr group: original keys in logical order. A missing group
/// is empty.
pub(crate) fn group_keys(group: Option<&Value>, kind: &str, ctx: &str) -> Result<Vec<String>> {
    let Some(g) = group else {
        return Ok(Vec::new());
    };
    let o = obj(g, ctx)?;
    let Some(attrs) = o.get("attributes") else {
        return Ok(Vec::new());
    };
    let attrs = obj(attrs, &format!("{ctx}.attributes"))?;
    let list_key = match kind {
        "uns" => "arrays",
        "contacts" => "contacts",
        "links" => "links",
        _ => "keys",
    };
    let list = get_opt_arr(attrs, list_key, &format!("{ctx}.attributes"))?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let ectx = format!("{ctx}.attributes.{list_key}[{i}]");
            match e {
                Value::String(s) => Ok(s.clone()),
                Value::Object(o) => Ok(get_str(o, "key", &ectx)?.to_string()),
                _ => Err(Error::new(
                    ErrorKind::Format,
                    format!("{ectx}: expected a string or an object with \"key\""),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_strings() {
        assert_eq!(parse_version("2.0"), Some((2, 0)));
        assert_eq!(parse_version("10.22"), Some((10, 22)));
        for bad in ["2", "2.", ".2", "2.0.1", "v2.0", "2.x", " 2.0", "2.-1", ""] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }
}
