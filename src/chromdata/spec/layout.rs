//! Layouts and versions (§2): the one-to-one table of format version, layout name and
//! spot order.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::json::unsupported_value;

/// Spot-table layout (§2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Format 2.0: one spot table.
    Flat,
    /// Format 2.1: spot tables partitioned by chromosome.
    Partitioned,
    /// Format 2.2: primary tables in canonical order + coordinate partitions.
    PrimaryCoords,
}

impl Layout {
    /// Every layout, oldest format first.
    pub const ALL: [Layout; 3] = [Layout::Flat, Layout::Partitioned, Layout::PrimaryCoords];

    /// The name stored in `tables.spots.layout`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::Partitioned => "partitioned",
            Layout::PrimaryCoords => "primary+coords",
        }
    }

    /// The layout of a stored name.
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The format minor version (2.MINOR) of the layout.
    pub fn minor(self) -> u32 {
        match self {
            Layout::Flat => 0,
            Layout::Partitioned => 1,
            Layout::PrimaryCoords => 2,
        }
    }

    /// The layout of format 2.`minor` (a minor above 2 is not known).
    pub fn from_minor(minor: u32) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.minor() == minor)
    }

    /// `uchrom_format_version` of the layout.
    pub fn format_version(self) -> &'static str {
        match self {
            Layout::Flat => "2.0",
            Layout::Partitioned => "2.1",
            Layout::PrimaryCoords => "2.2",
        }
    }

    /// `uchrom.spot_order` of the layout.
    pub fn spot_order(self) -> &'static str {
        match self {
            Layout::Flat => "cell,trace,bin",
            Layout::Partitioned => "chrom,cell,trace,bin",
            Layout::PrimaryCoords => "cell,trace,chrom,bin",
        }
    }
}

impl Serialize for Layout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Layout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Layout::from_name(&name)
            .ok_or_else(|| unsupported_value(format!("unknown spot layout \"{name}\"")))
    }
}

/// Parses `uchrom_format_version`: `^([0-9]+)\.([0-9]+)$` (§2 step 1).
pub(crate) fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
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

    #[test]
    fn one_to_one_table() {
        for l in Layout::ALL {
            assert_eq!(Layout::from_name(l.name()), Some(l));
            assert_eq!(Layout::from_minor(l.minor()), Some(l));
            assert_eq!(parse_version(l.format_version()), Some((2, l.minor())));
        }
        assert_eq!(Layout::from_minor(3), None);
    }
}
