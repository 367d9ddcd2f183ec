//! Obs (per-cell metadata) and var.parquet: writer, reader, on-disk layout against the
//! format text, corruption, and the local column cache.

mod dataset_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, DictionaryArray, Float32Array, Float64Array,
    Int16Array, Int64Array, RecordBatch, StringArray, UInt16Array,
};
use arrow_schema::{DataType, Field, Schema};
use dataset_support::*;
use deltacells::dataset::obs::{fingerprint, url_quote};
use deltacells::dataset::{Dataset, DatasetWriter, ObsKind};
use deltacells::ErrorKind;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

const N_CELLS: usize = 23;
const TILE: u64 = 5; // tiles of 5, 5, 5, 5, 3 cells
const TILES_PER_FILE: u64 = 2; // shards of 2, 2, 1 tiles
const N_GENES: u32 = 6;

/// The obs the tests write, one value per cell, as the test sees it.
struct Expected {
    cell_type: Vec<Option<String>>,
    batch: Vec<Option<String>>,
    n_counts: Vec<Option<i64>>,
    score: Vec<Option<f32>>,
    frac: Vec<Option<f64>>,
    flag: Vec<Option<bool>>,
    barcode: Vec<Option<String>>,
    u: Vec<Option<u16>>,
}

fn expected() -> Expected {
    let types = ["T cell", "B cell", "NK", "Monocyte", "Zeta"];
    let batches = ["b1", "b2", "é-ü", "b0"];
    let n = N_CELLS;
    Expected {
        cell_type: (0..n)
            .map(|i| (i % 7 != 3).then(|| types[(i * 3) % 5].to_string()))
            .collect(),
        batch: (0..n)
            .map(|i| (i % 5 != 4).then(|| batches[(i / 3) % 4].to_string()))
            .collect(),
        n_counts: (0..n)
            .map(|i| (i % 4 != 1).then(|| i as i64 * 1000 - 7))
            .collect(),
        score: (0..n)
            .map(|i| (i % 6 != 2).then(|| i as f32 / 8.0))
            .collect(),
        frac: (0..n).map(|i| Some(1.0 / (i as f64 + 1.0))).collect(),
        flag: (0..n).map(|i| (i % 3 != 0).then_some(i % 2 == 0)).collect(),
        barcode: (0..n).map(|i| Some(format!("AAAC{i:04}-1"))).collect(),
        u: (0..n)
            .map(|i| (i != 7).then_some(i as u16 * 2000))
            .collect(),
    }
}

/// Rows `a..b` of the expected obs as a record batch. The categorical column comes as a
/// dictionary whose (batch-local, unsorted) dictionary differs from batch to batch.
fn obs_batch(e: &Expected, a: usize, b: usize) -> RecordBatch {
    let mut dict: Vec<&str> = e.cell_type[a..b]
        .iter()
        .flatten()
        .map(|s| s.as_str())
        .collect();
    dict.sort();
    dict.dedup();
    dict.reverse(); // deliberately not sorted
    dict.push("unused"); // unused dictionary entries are not part of the vocabulary
    let keys: Int16Array = e.cell_type[a..b]
        .iter()
        .map(|v| {
            v.as_ref()
                .map(|s| dict.iter().position(|d| d == s).unwrap() as i16)
        })
        .collect();
    let cell_type =
        DictionaryArray::<Int16Type>::try_new(keys, Arc::new(StringArray::from(dict))).unwrap();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("cell_type", Arc::new(cell_type)),
        ("batch", Arc::new(categorical(&e.batch[a..b]))),
        (
            "n_counts",
            Arc::new(Int64Array::from(e.n_counts[a..b].to_vec())),
        ),
        (
            "score",
            Arc::new(Float32Array::from(e.score[a..b].to_vec())),
        ),
        ("frac", Arc::new(Float64Array::from(e.frac[a..b].to_vec()))),
        ("flag", Arc::new(BooleanArray::from(e.flag[a..b].to_vec()))),
        ("barcode", Arc::new(categorical(&e.barcode[a..b]))),
        ("u", Arc::new(UInt16Array::from(e.u[a..b].to_vec()))),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

/// A categorical (dictionary) column, as pandas hands over a `category` column.
fn categorical(v: &[Option<String>]) -> DictionaryArray<Int32Type> {
    v.iter().map(|s| s.as_deref()).collect()
}

/// Writes the test dataset: CSR in blocks of 4 rows, obs in blocks of 7, 1, 9, 6 rows (not
/// aligned with the CSR blocks nor with the tiles), barcodes above max_categories.
fn write_obs_dataset(path: &Path) -> Csr {
    let mut rng = Rng::new(7);
    let input = random_csr(&mut rng, N_CELLS, N_GENES, 0.4, false);
    let e = expected();
    let mut w = DatasetWriter::create(path, N_GENES, test_options(TILE)).unwrap();
    w.set_obs_tiles_per_file(TILES_PER_FILE).unwrap();
    w.set_max_categories(10).unwrap();
    let mut obs_at = 0;
    let obs_blocks = [7, 1, 9, 6];
    for (k, r) in (0..N_CELLS).step_by(4).enumerate() {
        let n = 4.min(N_CELLS - r);
        let a = input.indptr[r] as usize;
        w.append_csr(
            n as u64,
            &input.indptr[r..=r + n],
            &input.indices[a..],
            &input.values[a..],
        )
        .unwrap();
        if let Some(&m) = obs_blocks.get(k) {
            w.append_obs(obs_batch(&e, obs_at, obs_at + m)).unwrap();
            obs_at += m;
        }
    }
    assert_eq!(obs_at, N_CELLS);
    assert_eq!(w.obs_rows(), N_CELLS as u64);
    w.finish().unwrap();
    input
}

fn strings(a: &dyn Array) -> Vec<Option<String>> {
    match a.data_type() {
        DataType::Utf8 => a
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect(),
        DataType::Dictionary(_, _) => {
            let d = a.as_any_dictionary();
            let values = d.values().as_string::<i32>().clone();
            let keys = d.normalized_keys();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| values.value(keys[i]).to_string()))
                .collect()
        }
        t => panic!("not text: {t}"),
    }
}

fn collect(reader: Box<dyn arrow_array::RecordBatchReader + Send>) -> Vec<RecordBatch> {
    reader.collect::<Result<Vec<_>, _>>().unwrap()
}

fn column<'a>(batches: &'a [RecordBatch], name: &str) -> Vec<&'a ArrayRef> {
    batches
        .iter()
        .map(|b| b.column_by_name(name).unwrap())
        .collect()
}

fn concat_strings(batches: &[RecordBatch], name: &str) -> Vec<Option<String>> {
    column(batches, name)
        .into_iter()
        .flat_map(|a| strings(a.as_ref()))
        .collect()
}

fn concat_prim<T: arrow_array::ArrowPrimitiveType>(
    batches: &[RecordBatch],
    name: &str,
) -> Vec<Option<T::Native>> {
    column(batches, name)
        .into_iter()
        .flat_map(|a| a.as_primitive::<T>().iter().collect::<Vec<_>>())
        .collect()
}

fn tile_cells() -> Vec<u64> {
    vec![5, 5, 5, 5, 3]
}

fn open_with_cache(path: &Path, cache: &Path) -> Dataset {
    let ds = Dataset::open(path).unwrap();
    ds.set_cache_dir(Some(cache.to_path_buf()));
    ds
}

#[test]
fn obs_round_trip_of_every_kind() {
    let dir = TempDir::new("obs-rt");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    let e = expected();
    let ds = open_with_cache(&path, &dir.join("cache"));
    assert!(ds.info().has_obs);

    // The stored schema: kinds, types, global sorted vocabularies.
    let schema = ds.obs_columns().unwrap();
    let kinds: Vec<(&str, ObsKind, &str)> = schema
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.kind, c.arrow_type.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("cell_type", ObsKind::Category, "int8"),
            ("batch", ObsKind::Category, "int8"),
            ("n_counts", ObsKind::Numeric, "int64"),
            ("score", ObsKind::Numeric, "float"),
            ("frac", ObsKind::Numeric, "double"),
            ("flag", ObsKind::Bool, "bool"),
            ("barcode", ObsKind::String, "string"),
            ("u", ObsKind::Numeric, "uint16"),
        ]
    );
    let vocab = |v: &[Option<String>]| -> Vec<String> {
        v.iter()
            .flatten()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    assert_eq!(schema.columns[0].categories, Some(vocab(&e.cell_type)));
    assert_eq!(schema.columns[1].categories, Some(vocab(&e.batch)));
    assert!(!schema.columns[0]
        .categories
        .as_ref()
        .unwrap()
        .contains(&"unused".to_string()));

    // All columns, one batch per tile.
    let batches = collect(ds.obs(None).unwrap());
    let rows: Vec<u64> = batches.iter().map(|b| b.num_rows() as u64).collect();
    assert_eq!(rows, tile_cells());
    let s = batches[0].schema();
    assert_eq!(
        s.field(0).data_type(),
        &DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8))
    );
    assert_eq!(s.as_ref(), ds.obs_schema().unwrap().as_ref());
    assert_eq!(concat_strings(&batches, "cell_type"), e.cell_type);
    assert_eq!(concat_strings(&batches, "batch"), e.batch);
    assert_eq!(concat_strings(&batches, "barcode"), e.barcode);
    assert_eq!(concat_prim::<Int64Type>(&batches, "n_counts"), e.n_counts);
    assert_eq!(concat_prim::<Float32Type>(&batches, "score"), e.score);
    assert_eq!(concat_prim::<Float64Type>(&batches, "frac"), e.frac);
    assert_eq!(concat_prim::<UInt16Type>(&batches, "u"), e.u);
    let flags: Vec<Option<bool>> = column(&batches, "flag")
        .into_iter()
        .flat_map(|a| a.as_boolean().iter().collect::<Vec<_>>())
        .collect();
    assert_eq!(flags, e.flag);
    // The dictionary of every tile is the whole vocabulary (codes mean the same everywhere).
    for b in &batches {
        let d = b.column(0).as_any_dictionary();
        let values: Vec<&str> = d.values().as_string::<i32>().iter().flatten().collect();
        assert_eq!(values, vocab(&e.cell_type));
    }

    // A subset, in the requested order.
    let sub = collect(ds.obs(Some(&["u", "batch"])).unwrap());
    assert_eq!(sub.len(), 5);
    let names: Vec<String> = sub[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["u", "batch"]);
    assert_eq!(concat_strings(&sub, "batch"), e.batch);
    // No columns at all: row counts only.
    let none = collect(ds.obs(Some(&[])).unwrap());
    assert_eq!(
        none.iter().map(|b| b.num_rows() as u64).collect::<Vec<_>>(),
        tile_cells()
    );

    // Unknown and repeated columns.
    let err = ds.obs(Some(&["batch", "nope"])).err().unwrap();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert!(err.message.contains("\"nope\""), "{}", err.message);
    let err = ds.obs(Some(&["u", "u"])).err().unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    ds.verify_obs().unwrap();
}

#[test]
fn obs_files_follow_the_format_text() {
    let dir = TempDir::new("obs-layout");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    let e = expected();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(path.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["has_obs"], Value::Bool(true));
    assert_eq!(manifest["obs_tiles_per_file"], 2);
    let tiles: Vec<u64> = serde_json::from_value(manifest["tile_cells"].clone()).unwrap();
    assert_eq!(tiles, tile_cells());
    let bytes: Vec<u64> = serde_json::from_value(manifest["obs_shard_bytes"].clone()).unwrap();
    let shas: Vec<String> = serde_json::from_value(manifest["obs_shard_sha256"].clone()).unwrap();
    assert_eq!(bytes.len(), 3);
    let mut entries: Vec<String> = std::fs::read_dir(path.join("obs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            "obs_0000.parquet",
            "obs_0001.parquet",
            "obs_0002.parquet",
            "schema.json"
        ]
    );
    // No spill or other leftovers at the top level.
    let mut top: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["manifest.json", "obs", "tiles"]);

    // schema.json, every column with all four keys.
    let schema_text = std::fs::read_to_string(path.join("obs/schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&schema_text).unwrap();
    assert_eq!(schema["format"], "deltacells-obs");
    assert_eq!(schema["version"], 1);
    let cols = schema["columns"].as_array().unwrap();
    assert_eq!(cols.len(), 8);
    for c in cols {
        let keys: BTreeSet<&str> = c.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["name", "kind", "arrow_type", "categories"])
        );
        assert_eq!(c["categories"].is_null(), c["kind"] != "category", "{c}");
    }
    assert_eq!(
        cols[1]["categories"],
        serde_json::json!(["b0", "b1", "b2", "é-ü"])
    );

    let shard_tiles = [vec![0, 1], vec![2, 3], vec![4]];
    let expected_types = [
        DataType::Int8,
        DataType::Int8,
        DataType::Int64,
        DataType::Float32,
        DataType::Float64,
        DataType::Boolean,
        DataType::Utf8,
        DataType::UInt16,
    ];
    let batch_vocab = ["b0", "b1", "b2", "é-ü"];
    let mut all_codes = Vec::new();
    for s in 0..3 {
        let p = path.join(format!("obs/obs_{s:04}.parquet"));
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw.len() as u64, bytes[s]);
        assert_eq!(sha256_hex(&raw), shas[s]);
        // The footer, read with the parquet crate directly.
        let r = SerializedFileReader::new(std::fs::File::open(&p).unwrap()).unwrap();
        let md = r.metadata();
        assert_eq!(md.num_row_groups(), shard_tiles[s].len());
        for (rg, &t) in md.row_groups().iter().zip(&shard_tiles[s]) {
            assert_eq!(rg.num_rows() as u64, tiles[t]);
            assert_eq!(rg.num_columns(), 8);
            for c in rg.columns() {
                assert!(
                    c.statistics().is_none(),
                    "no statistics: {}",
                    c.column_path()
                );
                assert!(c.column_index_offset().is_none());
                assert!(matches!(
                    c.compression(),
                    parquet::basic::Compression::ZSTD(_)
                ));
            }
        }
        // The Arrow schema and the codes.
        let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&p).unwrap(),
        )
        .unwrap();
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "cell_type",
                "batch",
                "n_counts",
                "score",
                "frac",
                "flag",
                "barcode",
                "u"
            ]
        );
        let types: Vec<DataType> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(types, expected_types);
        for batch in b.build().unwrap() {
            let batch = batch.unwrap();
            all_codes.extend(batch.column(1).as_primitive::<Int8Type>().iter());
        }
    }
    // Codes index the sorted vocabulary; -1 (not null) marks a missing value.
    let want: Vec<Option<i8>> = e
        .batch
        .iter()
        .map(|v| {
            Some(v.as_ref().map_or(-1, |s| {
                batch_vocab.iter().position(|x| x == s).unwrap() as i8
            }))
        })
        .collect();
    assert_eq!(all_codes, want);

    // The fingerprint, recomputed here, and by Python when it is available.
    let fp = manifest["obs_fingerprint"].as_str().unwrap();
    assert_eq!(fingerprint(&schema_text, &tiles, &shas), fp);
    if let Some(py) = python_fingerprint(&schema_text, &tiles, &shas) {
        assert_eq!(py, fp);
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The fingerprint as the format text defines it, computed by Python's json and hashlib
/// (None when python3 is not installed).
fn python_fingerprint(schema: &str, tiles: &[u64], shas: &[String]) -> Option<String> {
    let input = serde_json::json!({"schema": schema, "tile_cells": tiles, "shards": shas});
    let script = "import sys,json,hashlib\n\
        d=json.loads(sys.stdin.buffer.read().decode('utf-8'))\n\
        j=json.dumps(d,sort_keys=True,separators=(',',':'),ensure_ascii=False)\n\
        print(hashlib.sha256(j.encode('utf-8')).hexdigest()[:24])";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().ok()?;
    assert!(out.status.success());
    Some(String::from_utf8(out.stdout).unwrap().trim().to_string())
}

#[test]
fn fingerprint_golden_value() {
    // Computed with:
    // python3 -c 'import json,hashlib
    // s="{\"name\":\"é\"}"+chr(10)+chr(1)+chr(8)+"\\/"+chr(0x7f)+"😀"
    // d={"schema":s,"tile_cells":[5,5,3],"shards":["ab"*32,"0f"*32]}
    // j=json.dumps(d,sort_keys=True,separators=(",",":"),ensure_ascii=False)
    // print(hashlib.sha256(j.encode("utf-8")).hexdigest()[:24])'
    let schema = "{\"name\":\"é\"}\n\u{1}\u{8}\\/\u{7f}😀";
    let shas = ["ab".repeat(32), "0f".repeat(32)];
    assert_eq!(
        fingerprint(schema, &[5, 5, 3], &shas),
        "40973ddbe3e9970505dfa88c"
    );
    if let Some(py) = python_fingerprint(schema, &[5, 5, 3], &shas) {
        assert_eq!(py, "40973ddbe3e9970505dfa88c");
    }
    // Any change of content changes it.
    assert_ne!(
        fingerprint(schema, &[5, 5, 4], &shas),
        "40973ddbe3e9970505dfa88c"
    );
}

#[test]
fn url_quoting_of_cache_names() {
    assert_eq!(url_quote("cell_type-1.x~"), "cell_type-1.x~");
    assert_eq!(url_quote("a/b c%"), "a%2Fb%20c%25");
    assert_eq!(url_quote("é"), "%C3%A9");
}

fn cache_obs_dir(ds: &Dataset, cache: &Path) -> PathBuf {
    let fp = ds.manifest().obs_fingerprint.clone().unwrap();
    cache.join(fp).join("obs")
}

#[test]
fn the_cache_is_filled_once_and_then_used() {
    let dir = TempDir::new("obs-cache");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    let e = expected();
    let cache = dir.join("cache");
    let ds = open_with_cache(&path, &cache);
    let first = collect(ds.obs(Some(&["batch", "n_counts"])).unwrap());
    assert_eq!(
        ds.obs_shard_reads(),
        3,
        "each shard read once for both columns"
    );
    let cdir = cache_obs_dir(&ds, &cache);
    assert!(cdir.join("batch.arrow").is_file());
    assert!(cdir.join("n_counts.arrow").is_file());
    assert!(cdir.join(".lock").is_file());
    // The cache file: uncompressed Arrow IPC, one batch per tile, codes as stored.
    let r = arrow_ipc::reader::FileReader::try_new(
        std::fs::File::open(cdir.join("batch.arrow")).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(r.num_batches(), 5);
    assert_eq!(r.schema().field(0).data_type(), &DataType::Int8);

    // Second read, same handle and a new one: no shard is touched.
    let again = collect(ds.obs(Some(&["batch", "n_counts"])).unwrap());
    assert_eq!(again, first);
    assert_eq!(ds.obs_shard_reads(), 3);
    let ds2 = open_with_cache(&path, &cache);
    assert_eq!(collect(ds2.obs(Some(&["n_counts"])).unwrap()).len(), 5);
    assert_eq!(ds2.obs_shard_reads(), 0);

    // A cached file that disagrees with the manifest is deleted and fetched again.
    let bad = RecordBatch::try_from_iter([(
        "batch",
        Arc::new(arrow_array::Int8Array::from(vec![0i8; 5])) as ArrayRef,
    )])
    .unwrap();
    let f = std::fs::File::create(cdir.join("batch.arrow")).unwrap();
    let mut w = arrow_ipc::writer::FileWriter::try_new(f, &bad.schema()).unwrap();
    w.write(&bad).unwrap(); // one batch where the manifest has five tiles
    w.finish().unwrap();
    let ds3 = open_with_cache(&path, &cache);
    assert_eq!(
        concat_strings(&collect(ds3.obs(Some(&["batch"])).unwrap()), "batch"),
        e.batch
    );
    assert_eq!(ds3.obs_shard_reads(), 3);
    // Garbage, and wrong row counts (right batch count), too.
    std::fs::write(cdir.join("batch.arrow"), b"not arrow").unwrap();
    let ds4 = open_with_cache(&path, &cache);
    assert_eq!(
        concat_strings(&collect(ds4.obs(Some(&["batch"])).unwrap()), "batch"),
        e.batch
    );
    assert_eq!(ds4.obs_shard_reads(), 3);
    let f = std::fs::File::create(cdir.join("batch.arrow")).unwrap();
    let mut w = arrow_ipc::writer::FileWriter::try_new(f, &bad.schema()).unwrap();
    for _ in 0..5 {
        w.write(&bad).unwrap(); // 5 rows each; the last tile has 3
    }
    w.finish().unwrap();
    let ds5 = open_with_cache(&path, &cache);
    assert_eq!(
        concat_strings(&collect(ds5.obs(Some(&["batch"])).unwrap()), "batch"),
        e.batch
    );
    assert_eq!(ds5.obs_shard_reads(), 3);

    // Without the shards, cached columns still read; the others cannot.
    for s in 0..3 {
        std::fs::remove_file(path.join(format!("obs/obs_{s:04}.parquet"))).unwrap();
    }
    let ds6 = open_with_cache(&path, &cache);
    let got = collect(ds6.obs(Some(&["n_counts", "batch"])).unwrap());
    assert_eq!(concat_prim::<Int64Type>(&got, "n_counts"), e.n_counts);
    assert_eq!(concat_strings(&got, "batch"), e.batch);
    assert_eq!(ds6.obs_shard_reads(), 0);
    let err = ds6.obs(Some(&["flag"])).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Format, "{}", err.message);
    assert!(err.message.contains("obs_0000.parquet"), "{}", err.message);
}

#[test]
fn an_unwritable_cache_falls_back_to_the_shards() {
    let dir = TempDir::new("obs-nocache");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    // A cache "directory" below a regular file cannot be created, even by root.
    std::fs::write(dir.join("file"), b"x").unwrap();
    let ds = open_with_cache(&path, &dir.join("file").join("cache"));
    for round in 1..=2 {
        let got = collect(ds.obs(Some(&["barcode"])).unwrap());
        assert_eq!(concat_strings(&got, "barcode"), expected().barcode);
        assert_eq!(ds.obs_shard_reads(), 3 * round);
    }
}

#[test]
fn cache_file_names_are_url_quoted() {
    let dir = TempDir::new("obs-quote");
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(&path, 3, test_options(2)).unwrap();
    w.append_csr(3, &[0, 1, 1, 2], &[0, 2], &[1, 4]).unwrap();
    let b = RecordBatch::try_from_iter([
        (
            "a/b c",
            Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
        ),
        (
            "é",
            Arc::new(categorical(&[
                Some("x".into()),
                Some("y".into()),
                Some("x".into()),
            ])) as ArrayRef,
        ),
    ])
    .unwrap();
    w.append_obs(b).unwrap();
    w.finish().unwrap();
    let cache = dir.join("cache");
    let ds = open_with_cache(&path, &cache);
    let got = collect(ds.obs(None).unwrap());
    assert_eq!(got.len(), 2);
    let cdir = cache_obs_dir(&ds, &cache);
    assert!(cdir.join("a%2Fb%20c.arrow").is_file());
    assert!(cdir.join("%C3%A9.arrow").is_file());
}

/// Rewrites `manifest.json` through `edit`.
fn edit_manifest(path: &Path, edit: impl FnOnce(&mut Value)) {
    let p = path.join("manifest.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn corrupt_obs_is_rejected() {
    let dir = TempDir::new("obs-corrupt");
    let fresh = |tag: &str| {
        let p = dir.join(tag);
        write_obs_dataset(&p);
        p
    };

    // Shard size differs from obs_shard_bytes: Format, at read and at verify.
    let p = fresh("size");
    let shard = p.join("obs/obs_0001.parquet");
    let mut raw = std::fs::read(&shard).unwrap();
    raw.push(0);
    std::fs::write(&shard, &raw).unwrap();
    let ds = open_with_cache(&p, &dir.join("cache-size"));
    let err = ds.obs(None).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Format);
    assert!(
        err.message.contains("obs_shard_bytes[1]"),
        "{}",
        err.message
    );
    assert_eq!(ds.verify_obs().unwrap_err().kind, ErrorKind::Format);

    // Same bytes, one flipped inside: SHA-256 mismatch, found by verify_obs.
    let p = fresh("sha");
    let shard = p.join("obs/obs_0002.parquet");
    let mut raw = std::fs::read(&shard).unwrap();
    raw[6] ^= 0x55;
    std::fs::write(&shard, &raw).unwrap();
    let ds = open_with_cache(&p, &dir.join("cache-sha"));
    let err = ds.verify_obs().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Checksum, "{}", err.message);
    assert!(
        err.message.contains("obs_shard_sha256[2]"),
        "{}",
        err.message
    );

    // A fingerprint that does not match the content: Checksum by verify_obs.
    let p = fresh("fp");
    edit_manifest(&p, |v| v["obs_fingerprint"] = Value::from("0".repeat(24)));
    let err = Dataset::open(&p).unwrap().verify_obs().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Checksum, "{}", err.message);

    // Shard 0 rewritten with one row group for its two tiles (manifest sizes updated so
    // that only the structure is wrong): Format.
    let p = fresh("rg");
    let shard = p.join("obs/obs_0000.parquet");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&shard).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let whole = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(whole.num_rows(), 10);
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, whole.schema(), None).unwrap();
    w.write(&whole).unwrap();
    w.close().unwrap();
    std::fs::write(&shard, &buf).unwrap();
    edit_manifest(&p, |v| {
        v["obs_shard_bytes"][0] = Value::from(buf.len());
        v["obs_shard_sha256"][0] = Value::from(sha256_hex(&buf));
    });
    let ds = open_with_cache(&p, &dir.join("cache-rg"));
    let err = ds.obs(Some(&["flag"])).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Format);
    assert!(err.message.contains("1 row groups"), "{}", err.message);
    assert_eq!(ds.verify_obs().unwrap_err().kind, ErrorKind::Format);

    // A schema.json whose type disagrees with the parquet columns: Format.
    let p = fresh("schema");
    let sp = p.join("obs/schema.json");
    let text = std::fs::read_to_string(&sp)
        .unwrap()
        .replace("\"arrow_type\":\"int64\"", "\"arrow_type\":\"int32\"");
    std::fs::write(&sp, text).unwrap();
    let err = open_with_cache(&p, &dir.join("cache-schema"))
        .obs(None)
        .err()
        .unwrap();
    assert_eq!(err.kind, ErrorKind::Format);
    assert!(err.message.contains("n_counts"), "{}", err.message);

    // schema.json missing though has_obs: Format; no obs at all: NotFound.
    let p = fresh("noschema");
    std::fs::remove_file(p.join("obs/schema.json")).unwrap();
    let err = Dataset::open(&p).unwrap().obs(None).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Format);
    let plain = dir.join("plain");
    let mut w = DatasetWriter::create(&plain, 2, test_options(4)).unwrap();
    w.append_csr(1, &[0, 1], &[1], &[3]).unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&plain).unwrap();
    assert_eq!(ds.obs(None).err().unwrap().kind, ErrorKind::NotFound);
    assert_eq!(ds.obs_schema().unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(ds.var_table().err().unwrap().kind, ErrorKind::NotFound);
}

#[test]
fn out_of_range_codes_are_rejected() {
    let dir = TempDir::new("obs-codes");
    let p = dir.join("ds");
    write_obs_dataset(&p);
    // Shrink the vocabulary of "batch" to one category: stored codes 1..3 now point past it.
    let sp = p.join("obs/schema.json");
    let text = std::fs::read_to_string(&sp)
        .unwrap()
        .replace("[\"b0\",\"b1\",\"b2\",\"é-ü\"]", "[\"b0\"]");
    std::fs::write(&sp, text).unwrap();
    let err = open_with_cache(&p, &dir.join("cache"))
        .obs(Some(&["batch"]))
        .err()
        .unwrap();
    assert_eq!(err.kind, ErrorKind::Format);
    assert!(err.message.contains("code"), "{}", err.message);
}

#[test]
fn writer_rejects_bad_obs() {
    let dir = TempDir::new("obs-bad");
    let mut w = DatasetWriter::create(dir.join("ds"), 3, test_options(2)).unwrap();
    w.append_csr(3, &[0, 1, 1, 2], &[0, 2], &[1, 4]).unwrap();
    // An unsupported type, named.
    let b = RecordBatch::try_from_iter([
        ("ok", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
        ("when", Arc::new(Date32Array::from(vec![1, 2])) as ArrayRef),
    ])
    .unwrap();
    let err = w.append_obs(b).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    assert!(err.message.contains("\"when\""), "{}", err.message);
    // Nothing was taken: a different first batch is fine.
    let b = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef)])
        .unwrap();
    w.append_obs(b).unwrap();
    // Later batches must match the first.
    let b =
        RecordBatch::try_from_iter([("x", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef)])
            .unwrap();
    assert_eq!(
        w.append_obs(b).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    let b = RecordBatch::try_from_iter([("y", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
        .unwrap();
    assert_eq!(
        w.append_obs(b).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(w.obs_rows(), 2);
    assert_eq!(
        w.set_max_categories(5).unwrap_err().kind,
        ErrorKind::State,
        "after the first append_obs"
    );
    // 2 obs rows for 3 cells: finish refuses, nothing is lost, one more row fixes it.
    let err = w.finish().unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    assert!(err.message.contains("2 obs rows"), "{}", err.message);
    let b = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![3])) as ArrayRef)])
        .unwrap();
    w.append_obs(b).unwrap();
    w.finish().unwrap();
    let ds = open_with_cache(&dir.join("ds"), &dir.join("cache"));
    let got = collect(ds.obs(None).unwrap());
    assert_eq!(
        concat_prim::<Int64Type>(&got, "x"),
        vec![Some(1), Some(2), Some(3)]
    );
}

#[test]
fn var_table_round_trip_in_output_order() {
    let dir = TempDir::new("var");
    let path = dir.join("ds");
    let mut rng = Rng::new(3);
    let input = random_csr(&mut rng, 9, N_GENES, 0.5, false);
    let order = rng.permutation(N_GENES as usize);
    let ids: Vec<String> = (0..N_GENES).map(|g| format!("ENSG{g:05}")).collect();
    let counts: Vec<Option<i64>> = (0..N_GENES as i64)
        .map(|g| (g != 2).then_some(g * 10))
        .collect();
    let pandas = r#"{"index_columns": ["gene_ids"], "columns": []}"#;
    let schema = Schema::new(vec![
        Field::new("gene_ids", DataType::Utf8, false),
        Field::new("n_cells", DataType::Int64, true),
    ])
    .with_metadata(std::collections::HashMap::from([(
        "pandas".to_string(),
        pandas.to_string(),
    )]));
    let table = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from(ids.clone())),
            Arc::new(Int64Array::from(counts.clone())),
        ],
    )
    .unwrap();
    let mut w = DatasetWriter::create(&path, N_GENES, test_options(4)).unwrap();
    w.set_gene_order(&order).unwrap();
    let short = table.slice(0, 3);
    assert_eq!(
        w.set_var_table(short).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    w.set_var_table(table).unwrap();
    append_in_pieces(&mut w, &input, &mut rng);
    w.finish().unwrap();

    let ds = Dataset::open(&path).unwrap();
    assert!(ds.info().has_var_table);
    let batches = collect(ds.var_table().unwrap());
    let s = batches[0].schema();
    assert_eq!(s.metadata().get("pandas").map(String::as_str), Some(pandas));
    let got_ids = concat_strings(&batches, "gene_ids");
    let got_counts = concat_prim::<Int64Type>(&batches, "n_cells");
    let want_ids: Vec<Option<String>> = order
        .iter()
        .map(|&g| Some(ids[g as usize].clone()))
        .collect();
    let want_counts: Vec<Option<i64>> = order.iter().map(|&g| counts[g as usize]).collect();
    assert_eq!(got_ids, want_ids);
    assert_eq!(got_counts, want_counts);

    // A var.parquet with the wrong row count is Format.
    let bad = RecordBatch::try_from_iter([(
        "gene_ids",
        Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
    )])
    .unwrap();
    let f = std::fs::File::create(path.join("var.parquet")).unwrap();
    let mut pw = parquet::arrow::ArrowWriter::try_new(f, bad.schema(), None).unwrap();
    pw.write(&bad).unwrap();
    pw.close().unwrap();
    let err = Dataset::open(&path).unwrap().var_table().err().unwrap();
    assert_eq!(err.kind, ErrorKind::Format, "{}", err.message);
}

/// pyarrow (when installed) reads the shards as the format text describes them.
#[test]
fn pyarrow_reads_the_shards() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import pyarrow.parquet"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("python3 with pyarrow not available; skipped");
        return;
    }
    let dir = TempDir::new("obs-pyarrow");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    let script = r#"
import sys, json, pyarrow.parquet as pq
root = sys.argv[1]
m = json.load(open(root + "/manifest.json"))
schema = json.load(open(root + "/obs/schema.json"))
k, tiles = m["obs_tiles_per_file"], m["tile_cells"]
out = []
for s in range((len(tiles) + k - 1) // k):
    f = pq.ParquetFile("%s/obs/obs_%04d.parquet" % (root, s))
    md = f.metadata
    assert md.num_row_groups == len(tiles[s * k:(s + 1) * k]), md.num_row_groups
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        assert rg.num_rows == tiles[s * k + i]
        for j in range(rg.num_columns):
            c = rg.column(j)
            assert c.compression == "ZSTD", c.compression
            assert not c.is_stats_set
    t = f.read()
    assert [str(x) for x in t.schema.types] == [c["arrow_type"] for c in schema["columns"]], t.schema
    out += t.column("batch").to_pylist()
cats = schema["columns"][1]["categories"]
print(json.dumps([None if c == -1 else cats[c] for c in out]))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<Option<String>> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(got, expected().batch);
}

/// Threads localising the same column at once fetch it once (the lock file serialises
/// them; the later ones find it cached).
#[test]
fn concurrent_readers_fetch_a_column_once() {
    let dir = TempDir::new("obs-concurrent");
    let path = dir.join("ds");
    write_obs_dataset(&path);
    let ds = open_with_cache(&path, &dir.join("cache"));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let got = collect(ds.obs(Some(&["flag", "cell_type"])).unwrap());
                assert_eq!(concat_strings(&got, "cell_type"), expected().cell_type);
            });
        }
    });
    assert_eq!(ds.obs_shard_reads(), 3);
}

/// pandas semantics: only categorical (dictionary) columns become category columns; plain
/// text stays string however few distinct values it has.
#[test]
fn plain_text_is_string_and_dictionaries_are_categories() {
    let dir = TempDir::new("obs-kinds");
    let path = dir.join("ds");
    let mut w = DatasetWriter::create(&path, 3, test_options(2)).unwrap();
    w.append_csr(3, &[0, 1, 1, 2], &[0, 2], &[1, 4]).unwrap();
    let cats = [Some("x".to_string()), None, Some("x".to_string())];
    let b = RecordBatch::try_from_iter([
        (
            "text",
            Arc::new(StringArray::from(vec!["x", "x", "x"])) as ArrayRef,
        ),
        ("cat", Arc::new(categorical(&cats)) as ArrayRef),
    ])
    .unwrap();
    w.append_obs(b).unwrap();
    w.finish().unwrap();
    let ds = open_with_cache(&path, &dir.join("cache"));
    let cols = &ds.obs_columns().unwrap().columns;
    assert_eq!(
        (cols[0].kind, cols[0].arrow_type.as_str()),
        (ObsKind::String, "string")
    );
    assert_eq!(
        (cols[1].kind, cols[1].arrow_type.as_str()),
        (ObsKind::Category, "int8")
    );
    assert_eq!(cols[1].categories.as_deref(), Some(&["x".to_string()][..]));
    let got = collect(ds.obs(None).unwrap());
    assert_eq!(concat_strings(&got, "text"), vec![Some("x".to_string()); 3]);
    assert_eq!(concat_strings(&got, "cat"), cats.to_vec());
}
