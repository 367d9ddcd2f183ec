//! `deltacells chromdata info|get` on stores written by the independent Python writer:
//! the command's output must be what the library's queries return.
#![cfg(feature = "cli")]

mod chromdata_common;

use std::process::Command;

use arrow_array::cast::AsArray;
use chromdata_common::*;
use deltacells::chromdata::{ChromData, Columns};

fn deltacells(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deltacells"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn info_and_get_agree_with_the_library() {
    let Some(dir) = stores() else { return };
    for name in [
        "main_20.chromdata.zarr",
        "main_21.cdz",
        "main_22.chromdata.zarr",
    ] {
        let store = dir.join(name);
        let s = store.to_str().unwrap();
        let cd = ChromData::open(&store).unwrap();
        let i = cd.info();

        let (ok, out, err) = deltacells(&["chromdata", "info", s]);
        assert!(ok, "{err}");
        let counts = format!(
            "{} spots, {} bins on {} chromosomes, {} traces, {} cells",
            i.n_spots, i.n_bins, i.n_chroms, i.n_traces, i.n_cells
        );
        assert!(out.contains(&counts), "{out}");
        assert!(out.contains(i.layout.name()), "{out}");

        // Every trace through the CLI: the CSV rows are the library's rows, in order.
        let traces = cd.categories("spots", "trace_id").unwrap();
        let mut total = 0;
        for t in 0..traces.len() {
            let id = traces.as_string::<i32>().value(t).to_string();
            let want = cd
                .get_trace(&cd.parse_id(&id, false), &Columns::Coords)
                .unwrap();
            let (ok, out, err) =
                deltacells(&["chromdata", "get", s, "--trace", &id, "--columns", "coords"]);
            assert!(ok, "{err}");
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines[0], "bin_id,trace_id,cell_id,x,y,z");
            assert_eq!(lines.len() - 1, want.num_rows(), "trace {id} in {name}");
            for (r, line) in lines[1..].iter().enumerate() {
                let fields: Vec<&str> = line.split(',').collect();
                assert_eq!(fields[1], id);
                let bin = want
                    .column(0)
                    .as_primitive::<arrow_array::types::Int32Type>();
                assert_eq!(fields[0], bin.value(r).to_string());
            }
            total += want.num_rows();
        }
        assert_eq!(total as u64, i.n_spots);

        // Parquet output holds exactly the library's answer.
        let out_file = dir.join(format!("{name}.chr.parquet"));
        let chrom = cd.table("bins").unwrap();
        let chrom = arrow_cast::display::ArrayFormatter::try_new(
            chrom.column_by_name("chrom").unwrap().as_ref(),
            &Default::default(),
        )
        .unwrap()
        .value(0)
        .to_string();
        let (ok, _, err) = deltacells(&[
            "chromdata",
            "get",
            s,
            "--chrom",
            &chrom,
            "--format",
            "parquet",
            "--output",
            out_file.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        let got = read_expected(&out_file);
        let want = cd.get_chrom(&chrom, &Columns::All).unwrap();
        assert_same(&got, &want, &format!("{name} --chrom {chrom}"));

        // CSV to a file: the bytes of stdout, published atomically (no temporary left).
        let out_dir = dir.join(format!("{name}.csv-out-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).unwrap();
        let csv = out_dir.join("chr.csv");
        let get = ["chromdata", "get", s, "--chrom", &chrom];
        let (ok, stdout, err) = deltacells(&get);
        assert!(ok, "{err}");
        let (ok, _, err) = deltacells(&[&get[..], &["--output", csv.to_str().unwrap()]].concat());
        assert!(ok, "{err}");
        assert_eq!(std::fs::read_to_string(&csv).unwrap(), stdout, "{name}");
        let left: Vec<_> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["chr.csv"], "{name}: only the output");
        std::fs::remove_dir_all(&out_dir).unwrap();
    }
}

/// Errors are one line on stderr, with the exit status of their kind (2 usage, 3 not found).
#[test]
fn errors_are_one_line_with_the_exit_status_of_their_kind() {
    let Some(dir) = stores() else { return };
    let store = dir.join("main_22.cdz");
    let s = store.to_str().unwrap();
    for (args, code, msg) in [
        (
            vec!["chromdata", "get", s, "--trace", "no such trace"],
            3,
            "not found",
        ),
        (vec!["chromdata", "get", s], 2, "exactly one of"),
        (
            vec!["chromdata", "get", s, "--chrom", "x", "--format", "parquet"],
            2,
            "--output",
        ),
        (
            vec!["chromdata", "info", "/no/such/store.cdz"],
            3,
            "No such file",
        ),
        (vec!["chromdata", "frobnicate", s], 2, "unknown command"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_deltacells"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

/// `import-fofct` writes a store the reader opens, in every layout; a malformed line fails
/// with its line number and leaves no store.
#[test]
fn import_fofct_writes_every_layout() {
    let dir = std::env::temp_dir().join(format!("dc-cli-fofct-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::from(
        "##FOF-CT_version=v0.1\n##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, Intensity)\n",
    );
    let mut n = 0;
    for t in 0..6 {
        for (k, chrom) in ["chr2", "chr1"].iter().enumerate() {
            for b in 0..4 {
                n += 1;
                let start = b * 10_000 + k * 5;
                text.push_str(&format!(
                    "{n},trace{t},{}.5,{}.25,{},{chrom},{start},{},{}\n",
                    n,
                    t,
                    b,
                    start + 10_000,
                    n * 3
                ));
            }
        }
    }
    let table = dir.join("t.csv");
    std::fs::write(&table, &text).unwrap();
    for (layout, out) in [
        ("flat", "a.chromdata.zarr"),
        ("partitioned", "b.chromdata.zarr"),
        ("primary+coords", "c.cdz"),
    ] {
        let out = dir.join(out);
        let (ok, stdout, err) = deltacells(&[
            "chromdata",
            "import-fofct",
            table.to_str().unwrap(),
            out.to_str().unwrap(),
            "--layout",
            layout,
            "--memory-budget",
            "1048576",
        ]);
        assert!(ok, "{err}");
        assert!(stdout.contains(&format!("{n} spots")), "{stdout}");
        let cd = ChromData::open(&out).unwrap();
        let i = cd.info();
        assert_eq!((i.n_spots, i.n_traces, i.n_chroms), (n as u64, 6, 2));
        assert_eq!(i.layout.name(), layout);
        let spots = cd.read_spots(true, &Columns::All).unwrap();
        assert_eq!(spots.num_rows(), n);
    }
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, text.replacen("3.5,", "abc,", 1)).unwrap();
    let out = dir.join("bad.chromdata.zarr");
    let (ok, _, err) = deltacells(&[
        "chromdata",
        "import-fofct",
        bad.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("bad.csv:5:"), "{err}");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FOF-CT table of `n` spots in scrambled order (500 traces over 3 chromosomes).
fn scrambled_fofct(n: usize) -> String {
    let mut text = String::from(
        "##FOF-CT_version=v0.1\n##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, Intensity)\n",
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for id in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let r = x >> 33;
        let chrom = ["chr1", "chr2", "chrX"][(r % 3) as usize];
        let start = (r / 3 % 400) * 5_000;
        text.push_str(&format!(
            "{id},t{},{}.5,{}.25,{}.125,{chrom},{start},{},{}\n",
            r / 1200 % 500,
            r % 1000,
            r % 777,
            r % 555,
            start + 5_000,
            r % 97
        ));
    }
    text
}

/// The writer's hidden temporary sibling in `dir`, if there is one.
fn temp_sibling(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| deltacells::chromdata::is_temp_name(p))
}

#[test]
fn killed_import_leaves_no_store_and_a_rerun_succeeds() {
    let dir = std::env::temp_dir().join(format!("dc-cli-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = 150_000;
    let table = dir.join("t.csv");
    std::fs::write(&table, scrambled_fofct(n)).unwrap();
    let out = dir.join("s.chromdata.zarr");
    let args = |layout: &str| {
        vec![
            "chromdata".to_string(),
            "import-fofct".to_string(),
            table.to_str().unwrap().to_string(),
            out.to_str().unwrap().to_string(),
            "--layout".to_string(),
            layout.to_string(),
            "--memory-budget".to_string(),
            "1048576".to_string(),
        ]
    };
    // Kill once while runs are being spilled, once while finish writes the tables.
    type Ready = fn(&std::path::Path) -> bool;
    let stages: [(&str, &str, Ready); 2] = [
        ("spilling", "flat", |t| {
            std::fs::read_dir(t.join("_spill")).map_or(0, |r| r.count()) >= 2
        }),
        ("writing tables", "partitioned", |t| {
            t.join("tables").exists()
        }),
    ];
    for (stage, layout, ready) in stages {
        let mut child = Command::new(env!("CARGO_BIN_EXE_deltacells"))
            .args(args(layout))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        let tmp = loop {
            if let Some(t) = temp_sibling(&dir) {
                if ready(&t) {
                    break t;
                }
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "{stage}: the import finished before it could be killed"
            );
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(300),
                "{stage}: never reached"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        child.kill().unwrap(); // SIGKILL: no destructor runs
        child.wait().unwrap();
        assert!(!out.exists(), "{stage}: a store exists after the kill");
        assert!(ChromData::open(&out).is_err());
        assert!(
            ChromData::open(&tmp).is_err(),
            "{stage}: the temporary sibling opens as a store"
        );
        // The stale sibling is left behind (nothing runs at a SIGKILL); remove it as a
        // user would, so the next stage finds its own.
        std::fs::remove_dir_all(&tmp).unwrap();
    }
    // A rerun writes the store.
    let (ok, _, err) = deltacells(
        &args("primary+coords")
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    );
    assert!(ok, "{err}");
    let cd = ChromData::open(&out).unwrap();
    assert_eq!(cd.info().n_spots, n as u64);
    assert!(temp_sibling(&dir).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `chromdata rewrite`: a 2.0 directory store of the independent writer upgraded to a 2.2
/// .cdz and back to 2.1, with the same spots in original order and the same components.
#[test]
fn rewrite_upgrades_a_store() {
    let Some(dir) = chromdata_common::stores() else {
        return;
    };
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-rewrite");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let src = dir.join("main_20.chromdata.zarr");
    let up = out.join("main.cdz");
    let back = out.join("main21.chromdata.zarr");
    let (ok, stdout, err) = deltacells(&[
        "chromdata",
        "rewrite",
        src.to_str().unwrap(),
        up.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("layout primary+coords"), "{stdout}");
    let (ok, _, err) = deltacells(&[
        "chromdata",
        "rewrite",
        up.to_str().unwrap(),
        back.to_str().unwrap(),
        "--layout",
        "partitioned",
        "-q",
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = deltacells(&[
        "chromdata",
        "rewrite",
        src.to_str().unwrap(),
        up.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("exists"), "{err}");
    let a = deltacells::chromdata::ChromData::open(&src).unwrap();
    for p in [&up, &back] {
        let b = deltacells::chromdata::ChromData::open(p).unwrap();
        let cols = deltacells::chromdata::Columns::All;
        chromdata_common::assert_same(
            &b.read_spots(true, &cols).unwrap(),
            &a.read_spots(true, &cols).unwrap(),
            &p.display().to_string(),
        );
        assert_eq!(b.keys("results").unwrap(), a.keys("results").unwrap());
        assert_eq!(b.attrs("uns", &[]).unwrap(), a.attrs("uns", &[]).unwrap());
    }
    assert_eq!(
        deltacells::chromdata::ChromData::open(&back)
            .unwrap()
            .info()
            .layout,
        deltacells::chromdata::Layout::Partitioned
    );
    let _ = std::fs::remove_dir_all(&out);
}
