//! Zarr v3 group nodes (§6.1) and the attributes of the §12 component groups (`cellm`,
//! `binm`, `results`, `uns`, `contacts`, `links`).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::json::{lenient, Members};
use crate::error::{Error, Result};

/// A group's `zarr.json`: `{"zarr_format": 3, "node_type": "group", "attributes": A}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GroupNode<A> {
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) zarr_format: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) node_type: Option<String>,
    pub(crate) attributes: A,
    /// Other members (`consolidated_metadata`, ...), ignored.
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl<A> GroupNode<A> {
    /// A Zarr v3 group with these attributes.
    pub(crate) fn new(attributes: A) -> Self {
        GroupNode {
            zarr_format: Some(3),
            node_type: Some("group".into()),
            attributes,
            other: Members::new(),
        }
    }
}

/// Checks that `doc` is a group node (and, with `zarr_v3`, of Zarr format 3) before its
/// attributes are read; `what` names it in messages.
pub(crate) fn check_group(doc: &Value, ctx: &str, what: &str, zarr_v3: bool) -> Result<()> {
    let o = doc
        .as_object()
        .ok_or_else(|| Error::format(format!("{ctx}: expected a JSON object")))?;
    if zarr_v3 && o.get("zarr_format").and_then(Value::as_u64) != Some(3) {
        return Err(Error::format(format!(
            "{ctx}: not a Zarr v3 node (zarr_format is not 3)"
        )));
    }
    if o.get("node_type").and_then(Value::as_str) != Some("group") {
        return Err(Error::format(format!(
            "{ctx}: {what} is not a Zarr group (node_type is not \"group\")"
        )));
    }
    Ok(())
}

/// The §12 component groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ComponentKind {
    CellM,
    BinM,
    Results,
    Uns,
    Contacts,
    Links,
}

impl ComponentKind {
    pub(crate) const ALL: [ComponentKind; 6] = [
        ComponentKind::CellM,
        ComponentKind::BinM,
        ComponentKind::Results,
        ComponentKind::Uns,
        ComponentKind::Contacts,
        ComponentKind::Links,
    ];

    /// The group's directory under the store root.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ComponentKind::CellM => "cellm",
            ComponentKind::BinM => "binm",
            ComponentKind::Results => "results",
            ComponentKind::Uns => "uns",
            ComponentKind::Contacts => "contacts",
            ComponentKind::Links => "links",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ComponentKind> {
        ComponentKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The attributes of the group when it has no members (what the writer stores).
    pub(crate) fn empty_attrs(self) -> ComponentAttrs {
        let mut a = ComponentAttrs::default();
        match self {
            ComponentKind::Uns => {
                a.uns = Some(Value::Object(Members::new()));
                a.arrays = Some(Vec::new());
            }
            ComponentKind::Contacts => a.contacts = Some(Vec::new()),
            ComponentKind::Links => a.links = Some(Vec::new()),
            _ => a.keys = Some(Vec::new()),
        }
        a
    }
}

/// Attributes of a §12 group: the member list of its kind (`keys`, `arrays`, `contacts` or
/// `links`; absent or null = none) and, for `uns`, the tagged-JSON dict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ComponentAttrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keys: Option<Vec<ComponentEntry>>,
    /// The whole `uns` dict as tagged JSON (kept as it is).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) uns: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) arrays: Option<Vec<ComponentEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) contacts: Option<Vec<ComponentEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) links: Option<Vec<ComponentEntry>>,
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl ComponentAttrs {
    /// Original keys of the members of a group of `kind`, in logical order.
    pub(crate) fn keys(&self, kind: ComponentKind) -> Vec<String> {
        self.entries(kind)
            .iter()
            .map(|e| e.key().to_string())
            .collect()
    }

    /// The member list of a group of `kind` (empty when absent).
    pub(crate) fn entries(&self, kind: ComponentKind) -> &[ComponentEntry] {
        let list = match kind {
            ComponentKind::Uns => &self.arrays,
            ComponentKind::Contacts => &self.contacts,
            ComponentKind::Links => &self.links,
            _ => &self.keys,
        };
        list.as_deref().unwrap_or(&[])
    }
}

/// A member of a component list: a stored name, or a record with its original `key`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum ComponentEntry {
    Name(String),
    Record(KeyRecord),
}

/// `{"key": ..., ...}` (the other members kept verbatim).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    pub(crate) key: String,
    #[serde(flatten)]
    pub(crate) other: Members,
}

impl ComponentEntry {
    /// A member of a `keys` list: `{"key": <original key>, "name": <stored name>}`.
    pub(crate) fn member(key: &str, name: &str) -> ComponentEntry {
        let mut other = Members::new();
        other.insert("name".into(), Value::String(name.into()));
        ComponentEntry::Record(KeyRecord {
            key: key.into(),
            other,
        })
    }

    /// The original key.
    pub(crate) fn key(&self) -> &str {
        match self {
            ComponentEntry::Name(s) => s,
            ComponentEntry::Record(r) => &r.key,
        }
    }

    /// The stored name of a `keys` member (its `name`; the key itself when there is none).
    pub(crate) fn stored_name(&self) -> &str {
        match self {
            ComponentEntry::Name(s) => s,
            ComponentEntry::Record(r) => r
                .other
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or(&r.key),
        }
    }
}

impl<'de> Deserialize<'de> for ComponentEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let bad = || serde::de::Error::custom("expected a string or an object with \"key\"");
        match Value::deserialize(d)? {
            Value::String(s) => Ok(ComponentEntry::Name(s)),
            v @ Value::Object(_) => KeyRecord::deserialize(v)
                .map(ComponentEntry::Record)
                .map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}
