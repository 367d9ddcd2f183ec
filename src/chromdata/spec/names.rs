//! Names and paths: portable stored names (§6.3), reserved spot-column names (§4.1), the
//! `tables/` prefix of table paths (§4) and the file names a writer uses (§5, §8–§10).

/// Names that MUST NOT appear among the extra spot columns (§4.1), besides any name that
/// starts with [`TRACK_PREFIX`] or [`LAYER_PREFIX`].
const RESERVED_SPOT_COLUMNS: [&str; 6] = ["bin_id", "trace_id", "cell_id", "x", "y", "z"];
/// Query-result prefix of spot-track columns (§15.1).
pub(crate) const TRACK_PREFIX: &str = "spot_tracks/";
/// Query-result prefix of layer columns: `layers/<key>/x|y|z` (§15.1).
pub(crate) const LAYER_PREFIX: &str = "layers/";
/// Axis names of coordinates and layers.
pub(crate) const AXES: [&str; 3] = ["x", "y", "z"];

/// Whether `name` may not be used for an extra spot column (§4.1).
pub(crate) fn is_reserved_spot_column(name: &str) -> bool {
    RESERVED_SPOT_COLUMNS.contains(&name)
        || name.starts_with(TRACK_PREFIX)
        || name.starts_with(LAYER_PREFIX)
}

/// Store-relative path of a path listed in `attrs["tables"]` (relative to `tables/`).
pub(crate) fn table_path(rel: &str) -> String {
    format!("tables/{rel}")
}

/// §6.3: the stored names of a collection of names, in order. A name that is not portable
/// (empty, not `[A-Za-z0-9][A-Za-z0-9._-]*`, longer than 64 bytes, ending in `.`, a
/// Windows device name, or equal to an earlier one ignoring case) is stored as `_<index>`.
pub(crate) fn portable(names: &[&str]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let lower = n.to_lowercase();
            let base = n.split('.').next().unwrap_or("").to_uppercase();
            let reserved = ["CON", "PRN", "AUX", "NUL"].contains(&base.as_str())
                || ((base.starts_with("COM") || base.starts_with("LPT"))
                    && base.len() == 4
                    && (b'1'..=b'9').contains(&base.as_bytes()[3]));
            let b = n.as_bytes();
            let ok = !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
                && n.len() <= 64
                && !n.ends_with('.')
                && !reserved
                && !seen.contains(&lower);
            seen.insert(lower);
            if ok {
                n.to_string()
            } else {
                format!("_{i}")
            }
        })
        .collect()
}

/// Directory name of a chromosome partition (§9): `chrom=<portable name>`.
pub(crate) fn chrom_dirs(chroms: &[String]) -> Vec<String> {
    portable(&chroms.iter().map(String::as_str).collect::<Vec<_>>())
        .into_iter()
        .map(|p| format!("chrom={p}"))
        .collect()
}

/// Categories file of column `column` (portable name) of `table` (§5.4).
pub(crate) fn categories_path(table: &str, column: &str) -> String {
    format!("categories/{table}.{column}.parquet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_names() {
        let got = portable(&[
            "chr1", "chr1", "CHR1", "a b", "", ".x", "x.", "con", "Com3.txt", "lpt0", "ok-1_2.3",
        ]);
        assert_eq!(
            got,
            ["chr1", "_1", "_2", "_3", "_4", "_5", "_6", "_7", "_8", "lpt0", "ok-1_2.3"]
        );
        assert_eq!(portable(&[&"a".repeat(65)]), ["_0"]);
        assert_eq!(portable(&[&"a".repeat(64)]), ["a".repeat(64)]);
    }

    #[test]
    fn reserved_names() {
        for n in ["bin_id", "x", "spot_tracks/a", "layers/k/x"] {
            assert!(is_reserved_spot_column(n), "{n}");
        }
        for n in ["spot_id", "X", "layers", "spot_tracks"] {
            assert!(!is_reserved_spot_column(n), "{n}");
        }
    }
}
