//! `manifest.json`: the dataset's table of contents, written last by the writer so that a
//! directory without it is an incomplete dataset. Parsing checks every key the reader relies
//! on (type, presence, consistency) and names the key and the rule in its error; keys this
//! build does not know are kept and written back unchanged.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::tile::MAX_GENES;

/// The value of the manifest's `format` key.
pub const DATASET_FORMAT: &str = "deltacells-dataset";
/// The dataset format version this build reads and writes.
pub const DATASET_VERSION: u64 = 2;
/// Length of `obs_fingerprint` (hex characters).
pub const FINGERPRINT_LEN: usize = 24;

/// The parsed `manifest.json`. Field order is the order keys are written in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u64,
    pub n_cells: u64,
    pub n_genes: u64,
    pub tile_size: u64,
    /// Cells of each tile.
    pub tile_cells: Vec<u64>,
    /// Stored nonzeros of each tile.
    pub tile_nnz: Vec<u64>,
    /// File size of each tile in bytes.
    pub tile_bytes: Vec<u64>,
    /// Encoder settings (informational; absent in some manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_chunks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd_level: Option<i64>,
    pub has_gene_order: bool,
    pub has_var_names: bool,
    pub has_var_table: bool,
    pub has_obs: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obs_tiles_per_file: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obs_shard_bytes: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obs_shard_sha256: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obs_fingerprint: Option<String>,
    /// Free-form JSON object (`{}` when absent).
    #[serde(default = "empty_object")]
    pub metadata: Value,
    /// Keys this build does not know, preserved as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// What a key's value must be, for the type check that precedes deserialization.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    UInt,
    Int,
    Bool,
    UIntList,
    StrList,
    Object,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::UInt => "a non-negative integer",
            Kind::Int => "an integer",
            Kind::Bool => "true or false",
            Kind::UIntList => "a list of non-negative integers",
            Kind::StrList => "a list of strings",
            Kind::Object => "a JSON object",
        }
    }

    fn accepts(self, v: &Value) -> bool {
        match self {
            Kind::Str => v.is_string(),
            Kind::UInt => v.is_u64(),
            Kind::Int => v.is_i64(),
            Kind::Bool => v.is_boolean(),
            Kind::UIntList => v.as_array().is_some_and(|a| a.iter().all(Value::is_u64)),
            Kind::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::Object => v.is_object(),
        }
    }
}

/// Keys the reader needs, with their kinds.
const REQUIRED: &[(&str, Kind)] = &[
    ("n_cells", Kind::UInt),
    ("n_genes", Kind::UInt),
    ("tile_size", Kind::UInt),
    ("tile_cells", Kind::UIntList),
    ("tile_nnz", Kind::UIntList),
    ("tile_bytes", Kind::UIntList),
    ("has_gene_order", Kind::Bool),
    ("has_var_names", Kind::Bool),
    ("has_var_table", Kind::Bool),
    ("has_obs", Kind::Bool),
];

/// Keys that may be absent but must have the right kind when present.
const OPTIONAL: &[(&str, Kind)] = &[
    ("n_chunks", Kind::UInt),
    ("zstd_level", Kind::Int),
    ("obs_tiles_per_file", Kind::UInt),
    ("obs_shard_bytes", Kind::UIntList),
    ("obs_shard_sha256", Kind::StrList),
    ("obs_fingerprint", Kind::Str),
    ("metadata", Kind::Object),
];

fn bad(rule: impl std::fmt::Display) -> Error {
    Error::format(format!("manifest.json: {rule}"))
}

fn describe_value(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}...", &s[..s.floor_char_boundary_compat(40)])
    } else {
        s
    }
}

/// `str::floor_char_boundary` is not stable on our MSRV.
trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        i = i.min(self.len());
        while !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Manifest {
    /// A manifest for a new dataset (no tiles yet, no optional parts).
    pub fn new(n_genes: u64, tile_size: u64) -> Manifest {
        Manifest {
            format: DATASET_FORMAT.to_string(),
            version: DATASET_VERSION,
            n_cells: 0,
            n_genes,
            tile_size,
            tile_cells: Vec::new(),
            tile_nnz: Vec::new(),
            tile_bytes: Vec::new(),
            n_chunks: None,
            zstd_level: None,
            has_gene_order: false,
            has_var_names: false,
            has_var_table: false,
            has_obs: false,
            obs_tiles_per_file: None,
            obs_shard_bytes: None,
            obs_shard_sha256: None,
            obs_fingerprint: None,
            metadata: empty_object(),
            extra: Map::new(),
        }
    }

    /// Parses and validates `manifest.json` text.
    ///
    /// Errors: `Unsupported` for another format or version, `Format` for anything else
    /// (bad JSON, missing key, wrong type, inconsistent counts), naming the key and rule.
    pub fn parse(text: &[u8]) -> Result<Manifest> {
        let value: Value =
            serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let obj = value.as_object().ok_or_else(|| {
            bad(format!(
                "must be a JSON object, got {}",
                describe_value(&value)
            ))
        })?;

        // Format and version first: a manifest of another format or version is not ours to
        // judge further.
        match obj.get("format") {
            None => return Err(bad("missing key \"format\"")),
            Some(Value::String(s)) if s == DATASET_FORMAT => {}
            Some(Value::String(s)) => {
                return Err(Error::unsupported(format!(
                    "manifest.json: \"format\" is \"{s}\", this build reads \"{DATASET_FORMAT}\""
                )))
            }
            Some(v) => {
                return Err(bad(format!(
                    "\"format\" must be a string, got {}",
                    describe_value(v)
                )))
            }
        }
        match obj.get("version") {
            None => return Err(bad("missing key \"version\"")),
            Some(v) if v.as_u64() == Some(DATASET_VERSION) => {}
            Some(v) if v.is_number() => {
                return Err(Error::unsupported(format!(
                    "manifest.json: \"version\" is {v}, this build reads version {DATASET_VERSION}"
                )))
            }
            Some(v) => {
                return Err(bad(format!(
                    "\"version\" must be an integer, got {}",
                    describe_value(v)
                )))
            }
        }
        for &(key, kind) in REQUIRED {
            match obj.get(key) {
                None => return Err(bad(format!("missing key \"{key}\""))),
                Some(v) if !kind.accepts(v) => {
                    return Err(bad(format!(
                        "\"{key}\" must be {}, got {}",
                        kind.describe(),
                        describe_value(v)
                    )))
                }
                Some(_) => {}
            }
        }
        for &(key, kind) in OPTIONAL {
            if let Some(v) = obj.get(key) {
                if !kind.accepts(v) {
                    return Err(bad(format!(
                        "\"{key}\" must be {}, got {}",
                        kind.describe(),
                        describe_value(v)
                    )));
                }
            }
        }
        let m: Manifest =
            serde_json::from_value(value).map_err(|e| bad(format!("cannot be read: {e}")))?;
        m.validate()?;
        Ok(m)
    }

    /// Checks the counts and the obs keys for consistency (the rules of format version 2).
    pub fn validate(&self) -> Result<()> {
        if self.format != DATASET_FORMAT {
            return Err(Error::unsupported(format!(
                "manifest.json: \"format\" is \"{}\", this build reads \"{DATASET_FORMAT}\"",
                self.format
            )));
        }
        if self.version != DATASET_VERSION {
            return Err(Error::unsupported(format!(
                "manifest.json: \"version\" is {}, this build reads version {DATASET_VERSION}",
                self.version
            )));
        }
        if self.n_genes == 0 || self.n_genes > MAX_GENES {
            return Err(bad(format!(
                "\"n_genes\" is {}, must be in 1..2^31",
                self.n_genes
            )));
        }
        if self.tile_size == 0 {
            return Err(bad("\"tile_size\" is 0, must be at least 1"));
        }
        let n_tiles = self.tile_cells.len();
        for (key, len) in [
            ("tile_nnz", self.tile_nnz.len()),
            ("tile_bytes", self.tile_bytes.len()),
        ] {
            if len != n_tiles {
                return Err(bad(format!(
                    "\"{key}\" has {len} entries, \"tile_cells\" has {n_tiles}; the per-tile lists must have equal lengths"
                )));
            }
        }
        for (t, &c) in self.tile_cells.iter().enumerate() {
            let last = t + 1 == n_tiles;
            if !last && c != self.tile_size {
                return Err(bad(format!(
                    "\"tile_cells\"[{t}] is {c}; every tile but the last holds exactly tile_size = {} cells",
                    self.tile_size
                )));
            }
            if last && (c == 0 || c > self.tile_size) {
                return Err(bad(format!(
                    "\"tile_cells\"[{t}] (the last tile) is {c}, must be in 1..={} (tile_size)",
                    self.tile_size
                )));
            }
        }
        let sum = self
            .tile_cells
            .iter()
            .try_fold(0u64, |a, &c| a.checked_add(c))
            .ok_or_else(|| bad("the sum of \"tile_cells\" overflows 64 bits"))?;
        if sum != self.n_cells {
            return Err(bad(format!(
                "\"n_cells\" is {} but \"tile_cells\" sum to {sum}",
                self.n_cells
            )));
        }
        self.tile_nnz
            .iter()
            .try_fold(0u64, |a, &c| a.checked_add(c))
            .ok_or_else(|| bad("the sum of \"tile_nnz\" overflows 64 bits"))?;
        for (t, &b) in self.tile_bytes.iter().enumerate() {
            let min = crate::tile::HEADER_SIZE as u64 + 16;
            if b < min {
                return Err(bad(format!(
                    "\"tile_bytes\"[{t}] is {b}; a tile is at least {min} bytes (header and indptr)"
                )));
            }
        }
        if self.has_obs {
            self.validate_obs(n_tiles as u64)?;
        }
        if !self.metadata.is_object() {
            return Err(bad("\"metadata\" must be a JSON object"));
        }
        Ok(())
    }

    fn validate_obs(&self, n_tiles: u64) -> Result<()> {
        let need = |key: &str| bad(format!("\"has_obs\" is true but key \"{key}\" is missing"));
        let k = self
            .obs_tiles_per_file
            .ok_or_else(|| need("obs_tiles_per_file"))?;
        if k == 0 {
            return Err(bad("\"obs_tiles_per_file\" is 0, must be at least 1"));
        }
        let shards = n_tiles.div_ceil(k);
        let bytes = self
            .obs_shard_bytes
            .as_ref()
            .ok_or_else(|| need("obs_shard_bytes"))?;
        let sha = self
            .obs_shard_sha256
            .as_ref()
            .ok_or_else(|| need("obs_shard_sha256"))?;
        let fingerprint = self
            .obs_fingerprint
            .as_ref()
            .ok_or_else(|| need("obs_fingerprint"))?;
        for (key, len) in [
            ("obs_shard_bytes", bytes.len()),
            ("obs_shard_sha256", sha.len()),
        ] {
            if len as u64 != shards {
                return Err(bad(format!(
                    "\"{key}\" has {len} entries; {n_tiles} tiles at obs_tiles_per_file = {k} make ceil({n_tiles} / {k}) = {shards} shards"
                )));
            }
        }
        for (s, h) in sha.iter().enumerate() {
            if h.len() != 64 || !is_hex(h) {
                return Err(bad(format!(
                    "\"obs_shard_sha256\"[{s}] is \"{h}\", not 64 hex characters"
                )));
            }
        }
        if fingerprint.len() != FINGERPRINT_LEN || !is_hex(fingerprint) {
            return Err(bad(format!(
                "\"obs_fingerprint\" is \"{fingerprint}\", not {FINGERPRINT_LEN} hex characters"
            )));
        }
        Ok(())
    }

    pub fn n_tiles(&self) -> u64 {
        self.tile_cells.len() as u64
    }

    /// Sum of `tile_nnz` (checked not to overflow by `validate`).
    pub fn nnz(&self) -> u64 {
        self.tile_nnz.iter().sum()
    }

    /// Pretty-printed JSON with a final newline.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut out = serde_json::to_vec_pretty(self).map_err(|e| {
            Error::new(
                crate::error::ErrorKind::Internal,
                format!("cannot serialize the manifest: {e}"),
            )
        })?;
        out.push(b'\n');
        Ok(out)
    }
}
