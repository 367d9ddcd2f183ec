//! The converter on bad input (one-line errors naming the file and line, exit 1 for bad data,
//! 2 for bad usage, 3 for a missing input), killed
//! midway (nothing that opens as a dataset is left; a rerun succeeds), and `verify` on a
//! corrupted dataset.
#![cfg(feature = "cli")]

mod convert_support;

use std::path::Path;
use std::time::{Duration, Instant};

use convert_support::*;
use deltacells::dataset::Dataset;

fn write_gz(path: &Path, text: &str) {
    use std::io::Write;
    let f = std::fs::File::create(path).unwrap();
    let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap();
}

const HEAD: &str = "%%MatrixMarket matrix coordinate integer general\n%\n3 2 3\n";

#[test]
fn malformed_matrix_market_names_file_and_line() {
    let dir = TempDir::new("bad");
    let out = dir.join("ds");
    let cases = [
        (
            format!("{HEAD}1 1 1\n4 1 2\n2 2 3\n"),
            ":5: row index is not in 1..=3",
        ),
        (
            format!("{HEAD}1 1 1\n1 x 2\n2 2 3\n"),
            ":5: column index is not in 1..=2",
        ),
        (
            format!("{HEAD}1 1 1\n1 2 -4\n2 2 3\n"),
            ":5: value '-4' is not a count",
        ),
        (format!("{HEAD}1 1 1\n1 2\n"), ":5: missing value"),
        (
            format!("{HEAD}1 1 1\n"),
            "1 entries, the size line announced 3",
        ),
        (
            format!("{HEAD}1 1 1\n1 1 2\n2 2 3\n"),
            "duplicate entry for cell 1 / gene 1",
        ),
        (
            "%%MatrixMarket matrix coordinate integer general\n3 2\n".into(),
            ":2: size line has 2 numbers",
        ),
        ("hello\n".into(), ":1: not a Matrix Market file"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = dir.join(&format!("m{i}.mtx"));
        std::fs::write(&p, text).unwrap();
        let e = fails(&["convert", p.to_str().unwrap(), out.to_str().unwrap()]);
        assert!(e.contains(p.to_str().unwrap()), "case {i}: {e}");
        assert!(e.contains(want), "case {i}: want {want:?} in {e}");
        assert!(Dataset::open(&out).is_err());
        assert!(
            std::fs::read_dir(&dir.0)
                .unwrap()
                .flatten()
                .all(|e| !deltacells::storage::fs::is_temp_name(&e.path())),
            "a failed conversion left its temporary directory"
        );
    }
}

#[test]
fn malformed_10x_folder_names_the_file() {
    let dir = TempDir::new("bad10x");
    let tenx = dir.join("tenx");
    std::fs::create_dir(&tenx).unwrap();
    write_gz(
        &tenx.join("matrix.mtx.gz"),
        &format!("{HEAD}1 1 1\n2 1 2\n2 2 3\n"),
    );
    write_gz(
        &tenx.join("features.tsv.gz"),
        "G1\tA\tGene Expression\nG2\tB\tGene Expression\n",
    );
    write_gz(&tenx.join("barcodes.tsv.gz"), "AAA-1\nCCC-1\n");
    let out = dir.join("ds");
    let e = fails(&["convert", tenx.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(
        e.contains("features.tsv.gz: 2 lines, the matrix has 3 genes"),
        "{e}"
    );
    write_gz(
        &tenx.join("features.tsv.gz"),
        "G1\tA\tGene Expression\nG2\tB\nG3\tC\tGene Expression\n",
    );
    let e = fails(&["convert", tenx.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(
        e.contains("features.tsv.gz:2: 2 tab-separated fields"),
        "{e}"
    );
    write_gz(
        &tenx.join("features.tsv.gz"),
        "G1\tA\tGene Expression\nG2\tA\tGene Expression\nG3\tC\tGene Expression\n",
    );
    std::fs::remove_file(tenx.join("barcodes.tsv.gz")).unwrap();
    let e = fails_with(
        3,
        &["convert", tenx.to_str().unwrap(), out.to_str().unwrap()],
    );
    assert!(e.contains("no barcodes.tsv.gz or barcodes.tsv"), "{e}");
    write_gz(&tenx.join("barcodes.tsv.gz"), "AAA-1\nCCC-1\n");
    let msg = ok(&["convert", tenx.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(msg.contains("gene ids"), "{msg}");
    let ds = Dataset::open(&out).unwrap();
    // totals: G1 = 1, G2 = 2 + 3 = 5, G3 = 0 -> order [1, 0, 2]
    assert_eq!(ds.gene_order().unwrap(), &[1, 0, 2]);
    assert_eq!(ds.var_names().unwrap(), &["G2", "G1", "G3"]);
}

#[test]
fn bad_arguments_and_inputs() {
    let dir = TempDir::new("args");
    let src = scrna("10x-v3-1107-cells-chr21");
    let (s, o) = (src.to_str().unwrap(), dir.join("o"));
    let o = o.to_str().unwrap();
    assert!(fails_with(2, &["convert", s]).contains("convert needs INPUT and OUTPUT"));
    assert!(fails_with(2, &["convert", s, o, "--bogus", "1"]).contains("unknown option --bogus"));
    assert!(fails_with(2, &["convert", s, o, "--level", "x"])
        .contains("--level: 'x' is not a valid number"));
    assert!(fails_with(2, &["convert", s, o, "--tile-size", "0"]).contains("tile_size is 0"));
    assert!(fails_with(3, &["convert", "/nonexistent/x", o]).contains("/nonexistent/x"));
    assert!(fails_with(2, &["frobnicate"]).contains("unknown command"));
    assert!(fails_with(3, &["info", o]).contains(o));
    let notcounts = dir.join("real.mtx");
    std::fs::write(
        &notcounts,
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 0.5\n",
    )
    .unwrap();
    assert!(fails(&["convert", notcounts.to_str().unwrap(), o]).contains(":3: value '0.5'"));
}

#[test]
fn h5ad_with_non_count_values_is_refused() {
    if !have_anndata() {
        eprintln!("skipped: python3 with anndata is not available");
        return;
    }
    let dir = TempDir::new("h5bad");
    let p = dir.join("bad.h5ad");
    let code = format!(
        "import anndata as ad, numpy as np, scipy.sparse as sp\n\
         x = sp.csr_matrix(np.array([[1, 0, 2], [0, 3.5, 0]], dtype=np.float32))\n\
         ad.AnnData(X=x).write_h5ad({:?})\n",
        p.to_str().unwrap()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &code])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e = fails(&[
        "convert",
        p.to_str().unwrap(),
        dir.join("ds").to_str().unwrap(),
    ]);
    assert!(
        e.contains("bad.h5ad: X: data[2] is 3.5, not a count"),
        "{e}"
    );
}

#[test]
fn killed_conversion_leaves_no_dataset_and_a_rerun_succeeds() {
    let dir = TempDir::new("kill");
    let src = scrna("mouse-10k-cells-1k-genes");
    let out = dir.join("ds");
    let args = [
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--level",
        "19",
        "--tile-size",
        "5",
        "--threads",
        "1",
    ];
    let mut child = std::process::Command::new(BIN)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the temporary directory and a few tiles in it, then SIGKILL.
    let t0 = Instant::now();
    let tmp = loop {
        let found = std::fs::read_dir(&dir.0)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| deltacells::storage::fs::is_temp_name(p));
        if let Some(t) = found {
            let tiles = std::fs::read_dir(t.join("tiles")).map_or(0, |r| r.count());
            if tiles >= 3 {
                break t;
            }
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the conversion finished before it could be killed"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no temporary directory appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!out.exists(), "the target exists after a killed conversion");
    assert!(Dataset::open(&out).is_err());
    assert!(
        Dataset::open(&tmp).is_err(),
        "the temporary directory opens as a dataset"
    );
    // A rerun (quicker settings) succeeds and the stale temporary directory does not matter.
    ok(&[
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--level",
        "1",
    ]);
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.info().n_cells, 10_000);
}

#[test]
fn verify_detects_a_corrupted_tile() {
    let dir = TempDir::new("corrupt");
    let src = scrna("10x-v3-1107-cells-chr21");
    let out = dir.join("ds");
    ok(&[
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--tile-size",
        "300",
        "--level",
        "3",
    ]);
    let ds = out.to_str().unwrap();
    assert!(ok(&["verify", ds]).contains("OK: 4 tiles"));
    let v = ok(&["verify", ds, "--against", src.to_str().unwrap()]);
    assert!(v.contains("gathered all cells: identical to"), "{v}");
    let other = scrna("mouse-10k-cells-1k-genes");
    let e = fails(&["verify", ds, "--against", other.to_str().unwrap()]);
    assert!(
        e.contains("the dataset is 1107 cells x 507 genes, the input 10000 x 1000"),
        "{e}"
    );
    // Flip one byte in the streams of tile 2 (past header, chunk table and indptr).
    let t2 = out.join("tiles/tile_000002.dct");
    let mut blob = std::fs::read(&t2).unwrap();
    let at = blob.len() - 10;
    blob[at] ^= 0x40;
    std::fs::write(&t2, &blob).unwrap();
    // A stray file in tiles/ is a problem too.
    std::fs::write(out.join("tiles/tile_000009.dct"), b"x").unwrap();
    let o = run(&["verify", ds]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[0].contains("tile 2") && lines[0].contains("tile_000002.dct"),
        "{err}"
    );
    assert!(lines[0].to_lowercase().contains("crc"), "{err}");
    assert!(
        lines[1].contains("'tile_000009.dct' is not one of the 4 tiles"),
        "{err}"
    );
    assert!(
        lines[2].contains("2 problem(s) found; 3 of 4 tiles verified"),
        "{err}"
    );
    // A truncated tile: the size disagrees with the manifest.
    std::fs::remove_file(out.join("tiles/tile_000009.dct")).unwrap();
    std::fs::write(&t2, &blob[..100]).unwrap();
    let e = fails(&["verify", ds]);
    assert!(e.contains("1 problem(s)"), "{e}");
    // No manifest: not a dataset.
    std::fs::remove_file(out.join("manifest.json")).unwrap();
    let e = fails(&["verify", ds]);
    assert!(e.contains("1 problem(s)"), "{e}");
}
