//! Root `zarr.json` (§3): the group node, `uchrom_format_version` and `uchrom`.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::groups::{check_group, GroupNode};
use super::json::{from_json, lenient, unsupported_value, Members};
use super::layout::{parse_version, Layout};
use super::types::FloatType;
use crate::error::{Error, Result};

/// `attributes` of the root group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RootAttrs {
    /// `"2.0"`, `"2.1"` or `"2.2"`; checked before anything else is read (§2 steps 1–3).
    pub(crate) uchrom_format_version: String,
    /// The writing software, free-form.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) uchrom_version: Option<String>,
    pub(crate) uchrom: Uchrom,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// `attributes.uchrom` (§3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Uchrom {
    pub(crate) format: String,
    pub(crate) format_version: String,
    pub(crate) spot_order: String,
    pub(crate) n_spots: u64,
    pub(crate) n_bins: u64,
    pub(crate) n_traces: u64,
    pub(crate) n_cells: u64,
    pub(crate) n_chroms: u64,
    pub(crate) n_runs: u64,
    pub(crate) n_row_groups: u64,
    pub(crate) has_source_row: bool,
    pub(crate) has_cell_id: bool,
    pub(crate) has_coords: bool,
    #[serde(default, deserialize_with = "coord_dtype")]
    pub(crate) coord_dtype: Option<FloatType>,
    /// 2.2 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) n_coord_row_groups: Option<u64>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

/// `coord_dtype`: null, "float32" or "float64"; any other value is a type this reader does
/// not support.
fn coord_dtype<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<FloatType>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => FloatType::from_name(&s).map(Some).ok_or_else(|| {
            unsupported_value(format!("\"{s}\" is not \"float32\", \"float64\" or null"))
        }),
        v => Err(unsupported_value(format!(
            "{v} is not \"float32\", \"float64\" or null"
        ))),
    }
}

/// The root group of a store, validated: its model and what the version says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Root {
    pub(crate) node: GroupNode<RootAttrs>,
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) layout: Layout,
}

impl Root {
    /// A root for a store about to be written in `layout` with these `uchrom` counts.
    pub(crate) fn new(layout: Layout, uchrom: Uchrom) -> Root {
        let attrs = RootAttrs {
            uchrom_format_version: layout.format_version().to_string(),
            uchrom_version: Some(concat!("libdeltacells ", env!("CARGO_PKG_VERSION")).into()),
            uchrom,
            other: Members::new(),
        };
        Root {
            node: GroupNode::new(attrs),
            major: 2,
            minor: layout.minor(),
            layout,
        }
    }

    pub(crate) fn attrs(&self) -> &RootAttrs {
        &self.node.attributes
    }

    pub(crate) fn uchrom(&self) -> &Uchrom {
        &self.node.attributes.uchrom
    }

    /// Parses and validates the root `zarr.json` (§2 steps 1–3, §3; §14 rules 1–2). `ctx`
    /// names the file in messages. The layout named in `tables` is checked against the
    /// version by [`super::TablesAttrs::parse`].
    pub(crate) fn parse(doc: &Value, ctx: &str) -> Result<Root> {
        check_group(doc, ctx, "root node", true)?;
        let (major, minor) = check_version(doc, ctx)?;
        let node: GroupNode<RootAttrs> = from_json(doc, ctx)?;
        let layout = Layout::from_minor(minor).ok_or_else(|| {
            Error::unsupported(format!("{ctx}: no layout for minor version {minor}"))
        })?;
        let root = Root {
            node,
            major,
            minor,
            layout,
        };
        root.validate(ctx)?;
        Ok(root)
    }

    /// §3 rules on `uchrom` once the version is known.
    fn validate(&self, ctx: &str) -> Result<()> {
        let version = &self.attrs().uchrom_format_version;
        let u = self.uchrom();
        let uctx = format!("{ctx}: attributes.uchrom");
        if u.format != "chromdata.zarr" {
            return Err(Error::format(format!(
                "{uctx}.format: \"{}\" is not \"chromdata.zarr\"",
                u.format
            )));
        }
        if &u.format_version != version {
            return Err(Error::format(format!(
                "{uctx}.format_version \"{}\" differs from uchrom_format_version \"{version}\"",
                u.format_version
            )));
        }
        if u.spot_order != self.layout.spot_order() {
            return Err(Error::unsupported(format!(
                "{uctx}.spot_order \"{}\" does not match format {version} (expected \"{}\")",
                u.spot_order,
                self.layout.spot_order()
            )));
        }
        if u.has_coords != u.coord_dtype.is_some() {
            return Err(Error::format(format!(
                "{uctx}: coord_dtype must be null iff has_coords is false"
            )));
        }
        if self.layout == Layout::PrimaryCoords && u.n_coord_row_groups.is_none() {
            return Err(Error::format(format!(
                "{uctx}: required member \"n_coord_row_groups\" is missing (format 2.2)"
            )));
        }
        Ok(())
    }
}

/// §2 steps 1–3 on the raw document, before the rest is read: a store of an unknown major
/// or a newer minor version is `Unsupported` whatever else its metadata holds.
fn check_version(doc: &Value, ctx: &str) -> Result<(u32, u32)> {
    let actx = format!("{ctx}: attributes");
    let attrs = doc
        .get("attributes")
        .and_then(Value::as_object)
        .ok_or_else(|| Error::format(format!("{actx}: expected a JSON object")))?;
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
    Ok((major, minor))
}
