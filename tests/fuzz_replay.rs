//! Replays every committed input of the fuzz targets (fuzz/corpus/<target>/ and the findings
//! kept as regression inputs in fuzz/regressions/<target>/) through the same harness the
//! fuzz targets run (fuzz/src/lib.rs): every C call ends in a status with a message, never
//! DC_ERR_INTERNAL, a panic or a crash. `scripts/fuzz.sh` runs the coverage-guided search;
//! this keeps its findings fixed in every `cargo test` (docs/reliability.md §2).
#![cfg(feature = "cli")]

mod chromdata_common;
#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

use deltacells::ffi::*;

/// The committed inputs of `target`, sorted. Only fuzz/corpus and fuzz/regressions: the
/// .h5ad files that crash libhdf5 (a segfault in C code, which would kill this test binary:
/// no containment in-process is possible) are kept apart, as patches in
/// tests/data/hdf5-crashes/, and run through the CLI's child process by tests/hdf5_crash.rs.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir).join(target)) {
            out.extend(rd.flatten().map(|e| e.path()));
        }
    }
    out.sort();
    out
}

/// Points the harness at this test's directories (target/tmp), once.
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-replay");
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        harness::use_dirs(&scratch, chromdata_common::stores());
    });
}

fn replay(target: &str, run: impl Fn(&[u8])) {
    setup();
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "{target}: no committed inputs (scripts/fuzz.sh --seed)"
    );
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&bytes)));
        assert!(
            r.is_ok(),
            "{target}: {} fails (a fuzz finding)",
            f.display()
        );
    }
}

#[test]
fn tiles() {
    replay("tile", |d| harness::fuzz_tile(d, true));
    replay("tile_nocrc", |d| harness::fuzz_tile(d, false));
}

/// The dataset fuzz targets: the member each one replaces, and its name.
const DATASET_TARGETS: [(harness::DatasetMember, &str); 7] = {
    use harness::DatasetMember::*;
    [
        (Manifest, "dataset_manifest"),
        (GeneOrder, "dataset_gene_order"),
        (VarNames, "dataset_var_names"),
        (VarTable, "dataset_var_table"),
        (ObsShard, "dataset_obs_shard"),
        (ObsSchema, "dataset_obs_schema"),
        (Tile, "dataset_tile"),
    ]
};

#[test]
fn dataset_members() {
    for (m, target) in DATASET_TARGETS {
        replay(target, |d| harness::fuzz_dataset_member(m, d));
    }
}

#[test]
fn documents() {
    replay("manifest", harness::fuzz_manifest);
    replay("npy", harness::fuzz_npy);
    replay("mtx", harness::fuzz_mtx);
    replay("fofct", harness::fuzz_fofct);
    replay("h5ad", harness::fuzz_h5ad);
}

/// The member targets rewrite files of one shared copy of the base stores: one test at a time.
static STORES: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn chromdata_stores() {
    if chromdata_common::stores().is_none() {
        return;
    }
    let _one = STORES.lock().unwrap_or_else(|p| p.into_inner());
    replay("chromdata_member", harness::fuzz_store_member);
    replay("chromdata_cdz", |d| {
        harness::read_chromdata(&harness::scratch_file("input.cdz", d))
    });
}

/// The Parquet members that made parquet 56.2.1 panic (issue 19: page type 8, levels and
/// values past the end of a page, a dictionary with fewer values than declared), written by
/// scripts/make-parquet-regressions.py: each store is refused with DC_ERR_FORMAT naming the
/// mutated member, by a call that returns normally (the replay above checks that nothing
/// panics). `DC_SHOW_REGRESSIONS=1` prints each input's first error and how many dependency
/// panics the library contained while it ran (run with `--test-threads=1` for exact counts).
#[test]
fn parquet_panics_are_format_errors() {
    let Some(stores) = chromdata_common::stores() else {
        return;
    };
    setup();
    let _one = STORES.lock().unwrap_or_else(|p| p.into_inner());
    let files: Vec<PathBuf> = inputs("chromdata_member")
        .into_iter()
        .filter(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("parquet-")
        })
        .collect();
    assert!(
        files.len() >= 6,
        "the parquet-* regression inputs are missing"
    );
    let mut failed = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let base = harness::BASE_STORES[bytes[0] as usize % harness::BASE_STORES.len()];
        let members = harness::store_members(&stores.join(base));
        let member = &members[bytes[1] as usize % members.len()];
        assert!(
            member.ends_with(".parquet"),
            "{}: mutates {member}",
            f.display()
        );
        harness::take_errors();
        let before = deltacells::contain::contained_panics();
        harness::fuzz_store_member(&bytes);
        let contained = deltacells::contain::contained_panics() - before;
        let errors = harness::take_errors();
        let named = errors
            .iter()
            .find(|(s, m)| *s == DC_ERR_FORMAT && m.contains(member.as_str()));
        if std::env::var_os("DC_SHOW_REGRESSIONS").is_some() {
            eprintln!(
                "{}: {} errors, {contained} contained panics; {named:?}",
                f.display(),
                errors.len(),
            );
        }
        if named.is_none() {
            failed.push(format!(
                "{}: no DC_ERR_FORMAT naming {member}: {errors:?}",
                f.display()
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The fofct target's finding: a column name with NUL bytes was imported, and every Arrow
/// stream of the store then failed to export its schema. The importer now refuses it.
#[test]
fn fofct_column_names_with_control_characters_are_refused() {
    use deltacells::chromdata::{fofct, WriterOptions};
    setup();
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/fofct/nul-in-a-column-name");
    let out = harness::scratch().join("nul-name.chromdata.zarr");
    let e = fofct::import(&input, &out, WriterOptions::default()).unwrap_err();
    assert_eq!(e.kind, deltacells::ErrorKind::Format, "{e}");
    assert!(
        e.message.contains("nul-in-a-column-name:") && e.message.contains("control character"),
        "{e}"
    );
    assert!(!out.exists());
}

/// A copy of the base dataset, named `name`, with `member` replaced by the committed
/// regression input `input` (relative to fuzz/regressions).
fn dataset_with(name: &str, member: harness::DatasetMember, input: &str) -> PathBuf {
    setup();
    let root = harness::scratch().join(name);
    let _ = std::fs::remove_dir_all(&root);
    harness::write_dataset(&root).unwrap();
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(input);
    std::fs::copy(input, harness::member_path(&root, member)).unwrap();
    root
}

/// Opens the dataset at `root` through the C ABI, which must succeed.
fn open_dataset(root: &Path) -> *mut dc_dataset {
    let p = std::ffi::CString::new(root.to_str().unwrap()).unwrap();
    let mut ds: *mut dc_dataset = std::ptr::null_mut();
    // SAFETY: a valid path and out-parameter.
    let status = unsafe { dc_dataset_open(p.as_ptr(), &mut ds) };
    assert_eq!(status, DC_OK, "{}", harness::last_error());
    ds
}

/// Checks that `ds` still answers (after refused queries), then frees it.
fn still_usable_then_free(ds: *mut dc_dataset) {
    let mut info = dc_dataset_info::default();
    // SAFETY: `ds` is an open handle, freed once here.
    unsafe {
        assert_eq!(dc_dataset_info_get(ds, &mut info), DC_OK);
        dc_dataset_free(ds);
    }
}

/// The dataset_var_table target's finding: a var.parquet whose column name holds a NUL byte
/// was handed out as a stream whose `get_schema` failed (the C Data Interface carries names
/// as C strings). The reader now refuses such a file with DC_ERR_FORMAT naming it, and
/// obs/schema.json names are held to the same rule.
#[test]
fn dataset_column_names_with_nul_are_refused() {
    let root = dataset_with(
        "nul-names.dc",
        harness::DatasetMember::VarTable,
        "dataset_var_table/nul-in-a-column-name",
    );
    let schema_path = harness::member_path(&root, harness::DatasetMember::ObsSchema);
    let schema = std::fs::read_to_string(&schema_path).unwrap();
    let first = "\"name\":\"";
    let at = schema
        .find(first)
        .expect("a column name in obs/schema.json")
        + first.len();
    std::fs::write(
        &schema_path,
        format!("{}nul\\u0000{}", &schema[..at], &schema[at..]),
    )
    .unwrap();
    let ds = open_dataset(&root);
    let mut s = arrow_array::ffi_stream::FFI_ArrowArrayStream::empty();
    // SAFETY: an open handle; the stream out-parameter is written only on DC_OK.
    unsafe {
        assert_eq!(dc_dataset_var_table(ds, &mut s), DC_ERR_FORMAT);
        let m = harness::last_error();
        assert!(m.contains("var.parquet") && m.contains("NUL byte"), "{m}");
        assert_eq!(
            dc_dataset_obs(ds, std::ptr::null(), 0, &mut s),
            DC_ERR_FORMAT
        );
    }
    let m = harness::last_error();
    assert!(m.contains("schema.json") && m.contains("NUL byte"), "{m}");
    still_usable_then_free(ds);
}

/// The dataset_obs_shard target's finding (a hang, not a crash): a shard whose footer holds
/// unknown fields announcing 2^31 booleans each took minutes to refuse (the parquet crate
/// skips such a list element by element, taking booleans as 0 bytes). Footers and page
/// headers are now walked, every size checked against the bytes left, before the crate
/// decodes them: DC_ERR_FORMAT naming the shard and the fault, at once (the input is built
/// by scripts/make-parquet-regressions.py).
#[test]
fn an_obs_shard_footer_announcing_billions_of_booleans_is_refused() {
    let root = dataset_with(
        "billions-of-booleans.dc",
        harness::DatasetMember::ObsShard,
        "dataset_obs_shard/footer-with-billions-of-booleans",
    );
    let ds = open_dataset(&root);
    let mut s = arrow_array::ffi_stream::FFI_ArrowArrayStream::empty();
    // SAFETY: an open handle; the stream out-parameter is written only on DC_OK.
    let status = unsafe { dc_dataset_obs(ds, std::ptr::null(), 0, &mut s) };
    assert_eq!(status, DC_ERR_FORMAT);
    let m = harness::last_error();
    assert!(
        m.contains("obs shard 0")
            && m.contains("invalid Parquet footer")
            && m.contains("collection size past the end"),
        "{m}"
    );
    still_usable_then_free(ds);
}

// ---------------------------------------------------------------------------------------
// The seed corpus (scripts/fuzz.sh --seed runs this; not part of a normal test run)
// ---------------------------------------------------------------------------------------

/// Writes the seed corpora of the fuzz targets into `$DC_FUZZ_SEED_OUT/<target>/` from the
/// inputs the tests use: the base dataset of the member targets (tiles, manifest, gene
/// order, var names and table, obs schema and shard), tiles encoded with exceptions, the
/// ChromData stores of tests/chromdata/make_stores.py (every member of the 2.0 / 2.1 / 2.2
/// stores, and .cdz files), a FOF-CT table and Matrix Market files shaped like the tests',
/// and the bundled .h5ad file.
#[test]
#[ignore = "writes the seed corpus: scripts/fuzz.sh --seed"]
fn write_seed_corpus() {
    let out = PathBuf::from(std::env::var_os("DC_FUZZ_SEED_OUT").expect("DC_FUZZ_SEED_OUT"));
    setup();
    let stores = chromdata_common::stores().expect("the test stores (python3 with zarr)");
    dataset_seeds(&out, &harness::scratch().join("seed.dc"));
    store_seeds(&out, stores);
    text_seeds(&out);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scrna");
    for e in std::fs::read_dir(data).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".h5ad") {
            put(&out, "h5ad", &name, &std::fs::read(e.path()).unwrap());
        }
    }
}

fn put(corpus: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus.join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// A tile of `n_cells` rows over `n_genes` genes, cell c holding genes c, c + step, ...
fn encode(n_cells: u64, n_genes: u32, step: usize, big: i32, chunks: u32) -> Vec<u8> {
    let (mut indptr, mut indices, mut values) = (vec![0i64], Vec::new(), Vec::new());
    for c in 0..n_cells as usize {
        for (k, g) in (c % 5..n_genes as usize).step_by(step).enumerate() {
            indices.push(g as i32);
            values.push(if k % 11 == 3 { big } else { 1 + (k % 7) as i32 });
        }
        indptr.push(indices.len() as i64);
    }
    let (mut blob, mut len): (*mut u8, usize) = (std::ptr::null_mut(), 0);
    // SAFETY: a valid CSR matrix; the blob is copied, then freed with dc_bytes_free.
    unsafe {
        let s = dc_tile_encode(
            n_cells,
            n_genes,
            indptr.as_ptr(),
            indices.as_ptr(),
            values.as_ptr(),
            3,
            chunks,
            1,
            &mut blob,
            &mut len,
        );
        assert_eq!(s, DC_OK, "{}", harness::last_error());
        let v = std::slice::from_raw_parts(blob, len).to_vec();
        dc_bytes_free(blob, len);
        v
    }
}

fn dataset_seeds(corpus: &Path, root: &Path) {
    harness::write_dataset(root).unwrap();
    use harness::DatasetMember::*;
    for (m, target) in DATASET_TARGETS {
        put(
            corpus,
            target,
            "base",
            &std::fs::read(harness::member_path(root, m)).unwrap(),
        );
    }
    put(
        corpus,
        "manifest",
        "base",
        &std::fs::read(harness::member_path(root, Manifest)).unwrap(),
    );
    let npy = std::fs::read(harness::member_path(root, GeneOrder)).unwrap();
    put(corpus, "npy", "base", &[[40u8].as_slice(), &npy].concat());
    let mut tiles: Vec<(String, Vec<u8>)> = Vec::new();
    for e in std::fs::read_dir(root.join("tiles")).unwrap().flatten() {
        tiles.push((
            e.file_name().to_string_lossy().into(),
            std::fs::read(e.path()).unwrap(),
        ));
    }
    tiles.push(("empty_rows".into(), encode(6, 10, 100, 1, 1)));
    tiles.push(("big_counts".into(), encode(30, 300, 3, 70_000, 4)));
    tiles.push(("big_gaps".into(), encode(12, 300_000, 70_001, 5, 3)));
    tiles.push(("one_cell".into(), encode(1, 5, 1, 2, 1)));
    for (name, blob) in &tiles {
        put(corpus, "tile", name, blob);
        put(corpus, "tile_nocrc", name, blob);
    }
}

fn store_seeds(corpus: &Path, stores: &Path) {
    for (s, name) in harness::BASE_STORES.iter().enumerate() {
        for (m, member) in harness::store_members(&stores.join(name))
            .iter()
            .enumerate()
        {
            let bytes = std::fs::read(stores.join(name).join(member)).unwrap();
            let seed = [[s as u8, m as u8].as_slice(), &bytes].concat();
            put(
                corpus,
                "chromdata_member",
                &format!("{s}-{}", member.replace('/', "_")),
                &seed,
            );
        }
    }
    for cdz in [
        "main_20.cdz",
        "main_21.cdz",
        "main_22.cdz",
        "nocell_22.cdz",
        "empty_22.cdz",
    ] {
        put(
            corpus,
            "chromdata_cdz",
            cdz,
            &std::fs::read(stores.join(cdz)).unwrap(),
        );
    }
}

/// A FOF-CT table shaped like tests/chromdata_writer.rs's (header lines, optional columns,
/// NaN, empty cells).
fn text_seeds(corpus: &Path) {
    let mut csv = String::from(
        "##FOF-CT_version=v0.1\n##Table_namespace=4dn_FOF-CT_core\n\
         ##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, Cell_ID, Extra_Cell_ROI_ID)\n\
         # a comment\n",
    );
    for i in 0..24u32 {
        let t = i * 7 % 5;
        let x = if i % 9 == 0 {
            "NaN".to_string()
        } else {
            format!("{:.3}", i as f64 / 3.0)
        };
        let ch = ["chr1", "chr2"][(i % 2) as usize];
        let b = (i % 4) * 30000;
        let roi = if i % 5 == 0 {
            String::new()
        } else {
            format!("roi{}", t % 3)
        };
        csv.push_str(&format!(
            "{},{t},{x},1.5,0.25,{ch},{b},{},{},{roi}\n",
            i + 1,
            b + 30000,
            t % 3
        ));
    }
    put(corpus, "fofct", "core.csv", csv.as_bytes());
    let mut mtx =
        String::from("%%MatrixMarket matrix coordinate integer general\n% genes x cells\n6 4 9\n");
    for (g, c, v) in [
        (1, 1, 3),
        (2, 1, 1),
        (6, 1, 70000),
        (3, 2, 2),
        (1, 3, 9),
        (4, 3, 1),
        (5, 3, 2),
        (6, 4, 4),
        (2, 4, 1),
    ] {
        mtx.push_str(&format!("{g} {c} {v}\n"));
    }
    put(corpus, "mtx", "integer.mtx", mtx.as_bytes());
    let real = mtx.replace("integer", "real").replace("70000", "2.0");
    put(corpus, "mtx", "real.mtx", real.as_bytes());
    let pattern = "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 1\n2 3\n3 2\n";
    put(corpus, "mtx", "pattern.mtx", pattern.as_bytes());
}
