//! Manifest validation: one test per rule, each expecting the exact error kind.

mod dataset_support;

use dataset_support::*;
use deltacells::dataset::{Dataset, Manifest};
use deltacells::ErrorKind;
use serde_json::{json, Value};

/// A valid manifest: 3 tiles of tile_size 4 (4, 4, 2 cells).
fn valid() -> Value {
    json!({
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": 10,
        "n_genes": 20,
        "tile_size": 4,
        "tile_cells": [4, 4, 2],
        "tile_nnz": [7, 0, 3],
        "tile_bytes": [500, 200, 300],
        "n_chunks": 8,
        "zstd_level": 19,
        "has_gene_order": false,
        "has_var_names": false,
        "has_var_table": false,
        "has_obs": false,
        "metadata": {}
    })
}

fn with_obs() -> Value {
    let mut v = valid();
    v["has_obs"] = json!(true);
    v["obs_tiles_per_file"] = json!(2);
    v["obs_shard_bytes"] = json!([100, 50]);
    v["obs_shard_sha256"] = json!(["ab".repeat(32), "0f".repeat(32)]);
    v["obs_fingerprint"] = json!("0123456789abcdef01234567");
    v
}

fn parse(v: &Value) -> deltacells::Result<Manifest> {
    Manifest::parse(v.to_string().as_bytes())
}

/// Expects `kind` and a message mentioning `needle`.
fn expect(v: Value, kind: ErrorKind, needle: &str) {
    let e = parse(&v).expect_err("manifest should be rejected");
    assert_eq!(e.kind, kind, "{}", e.message);
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {needle:?}",
        e.message
    );
}

fn edit(f: impl FnOnce(&mut Value)) -> Value {
    let mut v = valid();
    f(&mut v);
    v
}

fn edit_obs(f: impl FnOnce(&mut Value)) -> Value {
    let mut v = with_obs();
    f(&mut v);
    v
}

#[test]
fn valid_manifests_parse() {
    let m = parse(&valid()).unwrap();
    assert_eq!(m.n_tiles(), 3);
    assert_eq!(m.nnz(), 10);
    let m = parse(&with_obs()).unwrap();
    assert_eq!(m.obs_tiles_per_file, Some(2));
    // Informational keys may be absent.
    let mut v = valid();
    let o = v.as_object_mut().unwrap();
    o.remove("n_chunks");
    o.remove("zstd_level");
    o.remove("metadata");
    let m = parse(&v).unwrap();
    assert_eq!(m.metadata, json!({}));
}

#[test]
fn unknown_keys_are_kept() {
    let v = edit(|v| {
        v["converter"] = json!({"name": "x", "args": [1, 2]});
        v["metadata"] = json!({"source": "pbmc"});
    });
    let m = parse(&v).unwrap();
    assert_eq!(m.extra["converter"], json!({"name": "x", "args": [1, 2]}));
    let back: Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
    assert_eq!(back, v);
}

#[test]
fn not_json() {
    let e = Manifest::parse(b"{\"format\": ").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    let e = Manifest::parse(b"[1, 2]").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
}

#[test]
fn other_format_is_unsupported() {
    expect(
        edit(|v| v["format"] = json!("anndata")),
        ErrorKind::Unsupported,
        "format",
    );
}

#[test]
fn other_version_is_unsupported() {
    expect(
        edit(|v| v["version"] = json!(3)),
        ErrorKind::Unsupported,
        "version",
    );
    expect(
        edit(|v| v["version"] = json!(1)),
        ErrorKind::Unsupported,
        "version",
    );
}

#[test]
fn version_of_wrong_type() {
    expect(
        edit(|v| v["version"] = json!("2")),
        ErrorKind::Format,
        "\"version\"",
    );
}

#[test]
fn missing_required_key() {
    for key in [
        "format",
        "version",
        "n_cells",
        "n_genes",
        "tile_size",
        "tile_cells",
        "tile_nnz",
        "tile_bytes",
        "has_gene_order",
        "has_var_names",
        "has_var_table",
        "has_obs",
    ] {
        let v = edit(|v| {
            v.as_object_mut().unwrap().remove(key);
        });
        expect(v, ErrorKind::Format, key);
    }
}

#[test]
fn wrong_types_name_the_key() {
    expect(
        edit(|v| v["n_cells"] = json!(-1)),
        ErrorKind::Format,
        "\"n_cells\"",
    );
    expect(
        edit(|v| v["tile_nnz"] = json!([1, "2", 3])),
        ErrorKind::Format,
        "\"tile_nnz\"",
    );
    expect(
        edit(|v| v["has_obs"] = json!(0)),
        ErrorKind::Format,
        "\"has_obs\"",
    );
    expect(
        edit(|v| v["metadata"] = json!([])),
        ErrorKind::Format,
        "\"metadata\"",
    );
    expect(
        edit(|v| v["zstd_level"] = json!(1.5)),
        ErrorKind::Format,
        "\"zstd_level\"",
    );
}

#[test]
fn n_cells_must_be_the_sum_of_tile_cells() {
    expect(
        edit(|v| v["n_cells"] = json!(11)),
        ErrorKind::Format,
        "n_cells",
    );
}

#[test]
fn per_tile_lists_have_equal_lengths() {
    expect(
        edit(|v| v["tile_nnz"] = json!([7, 0])),
        ErrorKind::Format,
        "tile_nnz",
    );
    expect(
        edit(|v| v["tile_bytes"] = json!([500, 200, 300, 1])),
        ErrorKind::Format,
        "tile_bytes",
    );
}

#[test]
fn every_tile_but_the_last_is_full() {
    let v = edit(|v| {
        v["tile_cells"] = json!([4, 3, 3]);
    });
    expect(v, ErrorKind::Format, "tile_cells\"[1]");
}

#[test]
fn last_tile_holds_1_to_tile_size() {
    let v = edit(|v| {
        v["tile_cells"] = json!([4, 4, 0]);
        v["n_cells"] = json!(8);
    });
    expect(v, ErrorKind::Format, "last tile");
    let v = edit(|v| {
        v["tile_cells"] = json!([4, 4, 5]);
        v["n_cells"] = json!(13);
    });
    expect(v, ErrorKind::Format, "last tile");
}

#[test]
fn tile_size_at_least_one() {
    let v = edit(|v| {
        v["tile_size"] = json!(0);
        v["tile_cells"] = json!([]);
        v["tile_nnz"] = json!([]);
        v["tile_bytes"] = json!([]);
        v["n_cells"] = json!(0);
    });
    expect(v, ErrorKind::Format, "tile_size");
}

#[test]
fn n_genes_in_range() {
    expect(
        edit(|v| v["n_genes"] = json!(0)),
        ErrorKind::Format,
        "n_genes",
    );
}

#[test]
fn n_genes_upper_bound_inclusive() {
    // 2^31 itself is the format's limit; above it is rejected.
    assert!(parse(&edit(|v| v["n_genes"] = json!(1u64 << 31))).is_ok());
    expect(
        edit(|v| v["n_genes"] = json!((1u64 << 31) + 1)),
        ErrorKind::Format,
        "n_genes",
    );
}

#[test]
fn tile_bytes_too_small_for_a_tile() {
    expect(
        edit(|v| v["tile_bytes"] = json!([500, 12, 300])),
        ErrorKind::Format,
        "tile_bytes\"[1]",
    );
}

#[test]
fn zero_tiles_means_zero_cells() {
    let v = edit(|v| {
        v["tile_cells"] = json!([]);
        v["tile_nnz"] = json!([]);
        v["tile_bytes"] = json!([]);
        v["n_cells"] = json!(0);
    });
    assert_eq!(parse(&v).unwrap().n_tiles(), 0);
    let v = edit(|v| {
        v["tile_cells"] = json!([]);
        v["tile_nnz"] = json!([]);
        v["tile_bytes"] = json!([]);
    });
    expect(v, ErrorKind::Format, "n_cells");
}

#[test]
fn obs_keys_required_when_has_obs() {
    for key in [
        "obs_tiles_per_file",
        "obs_shard_bytes",
        "obs_shard_sha256",
        "obs_fingerprint",
    ] {
        let v = edit_obs(|v| {
            v.as_object_mut().unwrap().remove(key);
        });
        expect(v, ErrorKind::Format, key);
    }
}

#[test]
fn obs_shard_lists_match_the_shard_count() {
    // 3 tiles at 2 per file = 2 shards.
    expect(
        edit_obs(|v| v["obs_shard_bytes"] = json!([100])),
        ErrorKind::Format,
        "obs_shard_bytes",
    );
    expect(
        edit_obs(|v| v["obs_shard_sha256"] = json!(["ab".repeat(32)])),
        ErrorKind::Format,
        "obs_shard_sha256",
    );
    let v = edit_obs(|v| {
        v["obs_tiles_per_file"] = json!(3);
    });
    expect(v, ErrorKind::Format, "ceil(3 / 3) = 1");
    expect(
        edit_obs(|v| v["obs_tiles_per_file"] = json!(0)),
        ErrorKind::Format,
        "obs_tiles_per_file",
    );
}

#[test]
fn obs_fingerprint_is_24_hex() {
    expect(
        edit_obs(|v| v["obs_fingerprint"] = json!("0123456789abcdef0123456")),
        ErrorKind::Format,
        "obs_fingerprint",
    );
    expect(
        edit_obs(|v| v["obs_fingerprint"] = json!("0123456789abcdef0123456z")),
        ErrorKind::Format,
        "obs_fingerprint",
    );
    expect(
        edit_obs(|v| v["obs_shard_sha256"][1] = json!("zz".repeat(32))),
        ErrorKind::Format,
        "obs_shard_sha256\"[1]",
    );
}

#[test]
fn obs_keys_ignored_without_has_obs() {
    let v = edit(|v| v["obs_fingerprint"] = json!("short"));
    // Without has_obs the obs keys are not checked for consistency, only for type.
    assert!(parse(&v).is_ok());
}

#[test]
fn open_reports_manifest_errors_with_the_same_kind() {
    let dir = TempDir::new("man");
    let path = dir.join("ds");
    std::fs::create_dir_all(path.join("tiles")).unwrap();
    std::fs::write(
        path.join("manifest.json"),
        edit(|v| v["version"] = json!(9)).to_string(),
    )
    .unwrap();
    let e = Dataset::open(&path).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    std::fs::write(
        path.join("manifest.json"),
        edit(|v| v["n_cells"] = json!(1)).to_string(),
    )
    .unwrap();
    let e = Dataset::open(&path).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(
        e.message.contains(&path.display().to_string()),
        "{}",
        e.message
    );
}

#[test]
fn missing_manifest_is_not_found() {
    let dir = TempDir::new("noman");
    let path = dir.join("ds");
    std::fs::create_dir_all(path.join("tiles")).unwrap();
    let e = Dataset::open(&path).err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.message.contains("incomplete dataset"), "{}", e.message);
    assert!(e.message.contains("no manifest.json"), "{}", e.message);
    let e = Dataset::open(dir.join("nothing-here")).err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound);
}
