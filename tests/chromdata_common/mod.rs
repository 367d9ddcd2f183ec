//! Shared helpers of the ChromData integration tests: generates the stores with the
//! independent Python writer (tests/chromdata/make_stores.py) once per test binary, reads
//! expected answers, and compares Arrow tables.
#![allow(dead_code)]

pub mod spots;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use deltacells::chromdata::{CatValue, ChromData, Columns};
use deltacells::ErrorKind;
use serde_json::Value;

/// A record batch of the named columns, every field nullable (as input batches arrive).
pub fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

/// Runs the independent reader tests/chromdata/read_store.py on `store`: returns the spots in
/// original order and, when `components` is set, its component dump (else `Value::Null`).
/// None when Python tests are skipped explicitly (see [`stores`]). Its output files go to a
/// directory of this call alone, removed afterwards: tests running in parallel read the same
/// generated stores, and output next to a store would be one file written by several
/// readers at once.
pub fn read_store_py(store: &Path, components: bool) -> Option<(RecordBatch, Value)> {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    stores()?;
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "read_store_py-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let (spots, dump) = (
        out_dir.join("spots.parquet"),
        out_dir.join("components.json"),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chromdata/read_store.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(store).arg(&spots);
    if components {
        cmd.arg(&dump);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "read_store.py {}: {}",
        store.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let batch = read_expected(&spots);
    let comps = match components {
        true => serde_json::from_slice(&std::fs::read(&dump).unwrap()).unwrap(),
        false => Value::Null,
    };
    std::fs::remove_dir_all(&out_dir).unwrap();
    Some((batch, comps))
}

/// Directory holding the generated stores and `manifest.json`, or None (test skipped) when
/// python3 lacks pyarrow / zarr>=3 / pandas / numpy. CI installs them (scripts/test.sh).
pub fn stores() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let check = Command::new("python3")
            .args(["-c", "import pyarrow, pandas, numpy, zarr; assert int(zarr.__version__.split('.')[0]) >= 3"])
            .output();
        if !matches!(&check, Ok(o) if o.status.success()) {
            // A silent skip would let CI pass without checking anything: skipping needs an
            // explicit opt-out.
            let msg = "python3 with pyarrow, pandas, numpy and zarr>=3 is needed to write the \
                       test stores (scripts/setup.sh installs them: python3 -m pip install \
                       'zarr>=3' pyarrow pandas numpy)";
            if std::env::var_os("DELTACELLS_SKIP_PYTHON_TESTS").is_some() {
                eprintln!("SKIPPED (DELTACELLS_SKIP_PYTHON_TESTS): {msg}");
                return None;
            }
            panic!("{msg}; set DELTACELLS_SKIP_PYTHON_TESTS=1 to skip these tests");
        }
        // target/tmp, one directory per test binary: regenerated on every run, never leaked.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(concat!("chromdata-", env!("CARGO_CRATE_NAME")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chromdata/make_stores.py");
        let out = Command::new("python3").arg(script).arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "make_stores.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(dir)
    })
    .as_deref()
}

pub fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// Reads an expected Parquet file (written by pyarrow) as one batch.
pub fn read_expected(path: &Path) -> RecordBatch {
    let f = std::fs::File::open(path).unwrap();
    let opts =
        parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new_with_options(
        f, opts,
    )
    .unwrap()
    .build()
    .unwrap();
    let batches: Vec<RecordBatch> = r.collect::<Result<_, _>>().unwrap();
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(|| {
        let f = std::fs::File::open(path).unwrap();
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new_with_options(
            f,
            parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_skip_arrow_metadata(true),
        )
        .unwrap()
        .schema()
        .clone()
    });
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

fn value_strings(a: &ArrayRef) -> Vec<String> {
    use arrow_array::types::*;
    let n = a.len();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if a.is_null(i) {
            out.push("<null>".into());
            continue;
        }
        let s = match a.data_type() {
            DataType::Boolean => a.as_boolean().value(i).to_string(),
            DataType::Int8 => a.as_primitive::<Int8Type>().value(i).to_string(),
            DataType::Int16 => a.as_primitive::<Int16Type>().value(i).to_string(),
            DataType::Int32 => a.as_primitive::<Int32Type>().value(i).to_string(),
            DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
            DataType::UInt8 => a.as_primitive::<UInt8Type>().value(i).to_string(),
            DataType::UInt16 => a.as_primitive::<UInt16Type>().value(i).to_string(),
            DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i).to_string(),
            DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i).to_string(),
            // Bit patterns: NaN equals NaN, -0 differs from 0.
            DataType::Float32 => format!(
                "f32:{:08x}",
                a.as_primitive::<Float32Type>().value(i).to_bits()
            ),
            DataType::Float64 => format!(
                "f64:{:016x}",
                a.as_primitive::<Float64Type>().value(i).to_bits()
            ),
            DataType::Utf8 => format!("{:?}", a.as_string::<i32>().value(i)),
            t => panic!("unexpected type {t} in a result"),
        };
        out.push(s);
    }
    out
}

/// Equal names, types and values (row order significant); chunking is not significant.
pub fn assert_same(got: &RecordBatch, want: &RecordBatch, what: &str) {
    let gn: Vec<_> = got
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let wn: Vec<_> = want
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(gn, wn, "{what}: column names");
    assert!(
        got.schema().metadata().is_empty(),
        "{what}: result carries schema metadata"
    );
    for (i, name) in gn.iter().enumerate() {
        let (g, w) = (got.column(i), want.column(i));
        assert_eq!(g.data_type(), w.data_type(), "{what}: type of {name}");
        assert!(
            got.schema().field(i).is_nullable(),
            "{what}: {name} not nullable"
        );
        assert_eq!(g.len(), w.len(), "{what}: rows of {name}");
        let (gs, ws) = (value_strings(g), value_strings(w));
        if let Some(r) = (0..gs.len()).find(|&r| gs[r] != ws[r]) {
            panic!(
                "{what}: column {name} row {r}: got {} want {}",
                gs[r], ws[r]
            );
        }
    }
}

/// Sorts a batch by an int64 column.
pub fn sort_by(b: &RecordBatch, col: &str) -> RecordBatch {
    use arrow_array::types::Int64Type;
    let c = b.column_by_name(col).unwrap().as_primitive::<Int64Type>();
    let mut idx: Vec<u64> = (0..b.num_rows() as u64).collect();
    idx.sort_by_key(|&i| c.value(i as usize));
    arrow_select::take::take_record_batch(b, &arrow_array::UInt64Array::from(idx)).unwrap()
}

/// The column selection of a manifest query.
pub fn columns_of(v: &Value) -> Columns {
    match v {
        Value::String(s) if s == "all" => Columns::All,
        Value::String(s) if s == "coords" => Columns::Coords,
        Value::Array(a) => {
            Columns::Names(a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        }
        other => panic!("bad columns {other}"),
    }
}

/// The trace / cell id of a manifest query.
pub fn id_of(v: &Value) -> CatValue {
    match v {
        Value::String(s) => CatValue::Str(s.clone()),
        Value::Number(n) => CatValue::Int(n.as_i64().unwrap()),
        other => panic!("bad id {other}"),
    }
}

/// The error kind named by a manifest query.
pub fn kind_of(s: &str) -> ErrorKind {
    match s {
        "NotFound" => ErrorKind::NotFound,
        "Format" => ErrorKind::Format,
        "Unsupported" => ErrorKind::Unsupported,
        other => panic!("unknown kind {other}"),
    }
}

/// Runs a query of make_stores.py's manifest on `cd`.
pub fn run(cd: &ChromData, q: &Value) -> deltacells::Result<arrow_array::RecordBatch> {
    let cols = || columns_of(&q["columns"]);
    match q["kind"].as_str().unwrap() {
        "get_trace" => cd.get_trace(&id_of(&q["id"]), &cols()),
        "get_cell" => cd.get_cell(&id_of(&q["id"]), &cols()),
        "get_chrom" => cd.get_chrom(q["id"].as_str().unwrap(), &cols()),
        "read_spots" => cd.read_spots(q["original_order"].as_bool().unwrap(), &cols()),
        "by_spot_id" => cd
            .read_spots(false, &Columns::All)
            .map(|b| sort_by(&b, "spot_id")),
        "table" => cd.table(q["name"].as_str().unwrap()),
        "categories" => cd
            .categories(q["table"].as_str().unwrap(), q["column"].as_str().unwrap())
            .map(|a| {
                arrow_array::RecordBatch::try_from_iter_with_nullable([("category", a, true)])
                    .unwrap()
            }),
        "keys" => cd.keys(q["what"].as_str().unwrap()).map(|k| {
            let a: arrow_array::ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from(k));
            arrow_array::RecordBatch::try_from_iter_with_nullable([("key", a, true)]).unwrap()
        }),
        k => panic!("unknown query kind {k}"),
    }
}

/// Every file under `root` (a directory tree), by its path relative to `root` with `/`
/// separators, sorted.
pub fn tree_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy();
                out.push(rel.replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// Every file of a store (a `.cdz` file: one entry named ""; or a tree) with its bytes,
/// sorted by path.
pub fn tree_bytes(root: &Path) -> Vec<(String, Vec<u8>)> {
    if root.is_file() {
        return vec![(String::new(), std::fs::read(root).unwrap())];
    }
    tree_files(root)
        .into_iter()
        .map(|rel| {
            let bytes = std::fs::read(root.join(&rel)).unwrap();
            (rel, bytes)
        })
        .collect()
}
