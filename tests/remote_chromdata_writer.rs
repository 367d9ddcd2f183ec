//! The ChromData writer to object stores (issue 15, c-api.md §7) against moto's S3 server on
//! 127.0.0.1 (scripts/remote_servers.py). Every layout and `.cdz` is written to s3://, its
//! objects downloaded, and the download checked: byte for byte the same files as a local
//! write of the same spots, read back by our reader and by the independent Python reader
//! (tests/chromdata/read_store.py). Then the overwrite rules, a server that stops in the
//! middle of the upload (nothing that opens is left), bad options, and the C ABI.

#![cfg(feature = "remote")]

mod chromdata_common;
mod remote_support;

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use chromdata_common::spots::{batch_of, expected, make_spots, Spots};
use chromdata_common::{assert_same, tree_bytes};
use deltacells::chromdata::{ChromData, ChromDataWriter, Columns, Layout, WriterOptions};
use deltacells::ffi::*;
use deltacells::storage::Root;
use deltacells::ErrorKind;
use remote_support::*;

fn servers() -> Option<&'static Servers> {
    remote_support::shared(|| tmpdir("serve"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("remote-chromdata-writer")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(layout: Layout) -> WriterOptions {
    WriterOptions {
        layout,
        row_group_size: 40,
        coords_row_group_size: 16,
        ..WriterOptions::default()
    }
}

const LAYOUTS: [(Layout, &str); 3] = [
    (Layout::Flat, "20"),
    (Layout::Partitioned, "21"),
    (Layout::PrimaryCoords, "22"),
];

/// Appends `s` in the batches that `splits` delimit.
fn fill(w: &mut ChromDataWriter, s: &Spots, splits: &[usize]) {
    let mut lo = 0;
    for &hi in splits.iter().chain([s.chrom.len()].iter()) {
        w.append(batch_of(s, lo, hi)).unwrap();
        lo = hi;
    }
}

/// A writer to `url` (deferred target check, as the C API does).
fn create(url: &str, server_opts: &[String], o: WriterOptions) -> ChromDataWriter {
    let root = Root::parse(url, &as_strs(server_opts)).unwrap();
    ChromDataWriter::create_deferred_at(root, o).unwrap()
}

/// What a store at `url` (on the server of `s3_opts`) holds, downloaded to `local`: the
/// `.cdz` object as a file, a directory store's objects as a tree.
fn download(url: &str, s3_opts: &[String], local: &Path) {
    let root = root_at(url, s3_opts);
    if url.ends_with(".cdz") {
        std::fs::write(local, root.get("").unwrap()).unwrap();
    } else {
        std::fs::create_dir_all(local).unwrap();
        download_dir(&root, local);
    }
}

/// The independent Python reader's spots of a local store (None: Python tests skipped).
fn python_read(store: &Path) -> Option<arrow_array::RecordBatch> {
    Some(chromdata_common::read_store_py(store, false)?.0)
}

/// Spill directories this process left for targets named `name` (none after any write).
fn leftover_spills(name: &str) -> Vec<String> {
    let prefix = format!("{name}.tmp-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn every_layout_and_cdz_uploaded_equal_the_local_store() {
    let Some(s) = servers() else { return };
    let d = tmpdir("round_trip");
    let spots = make_spots(700, 7);
    let want = expected(&spots, false);
    for (layout, short) in LAYOUTS {
        for ext in ["chromdata.zarr", "cdz"] {
            let name = format!("rt{short}.{ext}");
            let url = format!("s3://{BUCKET}/round_trip/{name}");
            let mut w = create(&url, &s.opts(), opts(layout));
            fill(&mut w, &spots, &[100, 101, 450]);
            let spill = w.temp_dir().to_path_buf();
            assert!(
                spill.starts_with(std::env::temp_dir()),
                "{}",
                spill.display()
            );
            w.finish().unwrap();
            assert!(!spill.exists(), "the spill directory is removed");
            assert_eq!(leftover_spills(&name), Vec::<String>::new());

            let local = d.join(format!("local-{name}"));
            let mut lw = ChromDataWriter::create(&local, opts(layout)).unwrap();
            fill(&mut lw, &spots, &[100, 101, 450]);
            lw.finish().unwrap();
            let got = d.join(&name);
            download(&url, &s.opts(), &got);
            assert!(
                tree_bytes(&got) == tree_bytes(&local),
                "{url}: the uploaded objects differ from the local store's files"
            );

            let cd = ChromData::open(&got).unwrap();
            assert_eq!(cd.info().layout, layout);
            assert_eq!(cd.info().n_spots, 700);
            assert_same(&cd.read_spots(true, &Columns::All).unwrap(), &want, &url);
            if let Some(py) = python_read(&got) {
                assert_same(&py, &want, &format!("python reader, {url}"));
            }
        }
    }
    // A .cdz is one object: nothing else appears beside or under it.
    let listed = s.root("round_trip").list("").unwrap();
    for (_, short) in LAYOUTS {
        let name = format!("rt{short}.cdz");
        assert_eq!(
            listed.iter().filter(|k| k.starts_with(&name)).count(),
            1,
            "{listed:?}"
        );
    }
}

/// §12 path rule at a URL: a link or contacts record whose `path` is a URL under the prefix
/// holding the store gets the `relative_path` a reader resolves beside the store's URL; a
/// URL elsewhere (another bucket, above the prefix) gets none, and a given one is kept.
#[test]
fn links_beside_a_url_store_get_their_relative_path() {
    let Some(s) = servers() else { return };
    let spots = make_spots(50, 3);
    for name in ["rel.cdz", "rel.chromdata.zarr"] {
        let url = format!("s3://{BUCKET}/relative/{name}");
        let mut w = create(&url, &s.opts(), opts(Layout::Flat));
        fill(&mut w, &spots, &[]);
        let links = serde_json::json!([
            {"key": "near", "path": format!("s3://{BUCKET}/relative/linked/a.mcool"), "format": "mcool"},
            {"key": "other", "path": "s3://another-bucket/relative/b.hic", "format": "hic"},
            {"key": "above", "path": format!("s3://{BUCKET}/c.hic"), "format": "hic"},
            {"key": "given", "path": format!("s3://{BUCKET}/relative/d.hic"), "format": "hic",
             "relative_path": "e.hic"}
        ]);
        w.set_json("links", None, &links.to_string()).unwrap();
        w.finish().unwrap();
        let cd = ChromData::open_url(&url, &as_strs(&s.opts())).unwrap();
        let got = cd.attrs("links", &[]).unwrap();
        assert_eq!(got[0]["relative_path"], "linked/a.mcool", "{name}: {got}");
        assert_eq!(
            got[0]["resolved_path"],
            format!("s3://{BUCKET}/relative/linked/a.mcool"),
            "{name}"
        );
        assert!(got[1].get("relative_path").is_none(), "{name}: {got}");
        assert!(got[2].get("relative_path").is_none(), "{name}: {got}");
        assert_eq!(got[3]["relative_path"], "e.hic", "{name}: {got}");
    }
}

#[test]
fn overwrite_rules_at_a_url() {
    let Some(s) = servers() else { return };
    let d = tmpdir("overwrite");
    let small = make_spots(50, 2);
    let other = make_spots(80, 3);
    for ext in ["chromdata.zarr", "cdz"] {
        let url = format!("s3://{BUCKET}/overwrite/a.{ext}");
        let mut w = create(&url, &s.opts(), opts(Layout::Partitioned));
        fill(&mut w, &small, &[]);
        w.finish().unwrap();

        // Without overwrite: Exists at finish, the writer stays usable, the store intact.
        let mut w = create(&url, &s.opts(), opts(Layout::Flat));
        fill(&mut w, &other, &[]);
        let e = w.finish().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Exists, "{}", e.message);
        assert!(e.message.contains(&url), "{}", e.message);
        let got = d.join(format!("kept.{ext}"));
        download(&url, &s.opts(), &got);
        assert_eq!(ChromData::open(&got).unwrap().info().n_spots, 50);

        // With overwrite: replaced, and nothing of the old store is left (a directory
        // store's objects are exactly those of a local store of the new spots).
        w.set_options(WriterOptions {
            overwrite: true,
            ..opts(Layout::Flat)
        })
        .unwrap();
        w.finish().unwrap();
        let got = d.join(format!("new.{ext}"));
        download(&url, &s.opts(), &got);
        let cd = ChromData::open(&got).unwrap();
        assert_eq!(cd.info().n_spots, 80);
        assert_eq!(cd.info().layout, Layout::Flat);
        let local = d.join(format!("local.{ext}"));
        let mut lw = ChromDataWriter::create(&local, opts(Layout::Flat)).unwrap();
        fill(&mut lw, &other, &[]);
        lw.finish().unwrap();
        assert!(
            tree_bytes(&got) == tree_bytes(&local),
            "{url}: replaced store"
        );
    }

    // Not a store: refused even with overwrite, and left alone.
    let root = s.root("overwrite/not-a-store");
    root.put("notes.txt", bytes::Bytes::from_static(b"precious"))
        .unwrap();
    root.put("x.cdz", bytes::Bytes::from_static(b"not a zip"))
        .unwrap();
    root.put("other/zarr.json", bytes::Bytes::from_static(b"{}"))
        .unwrap();
    for (rel, why) in [
        ("", "no store's root"),
        ("x.cdz", "not a .cdz store"),
        ("other", "not a ChromData store's root"),
    ] {
        let url = format!("s3://{BUCKET}/overwrite/not-a-store/{rel}");
        let mut w = create(
            url.trim_end_matches('/'),
            &s.opts(),
            WriterOptions {
                overwrite: true,
                ..opts(Layout::Flat)
            },
        );
        fill(&mut w, &small, &[]);
        let e = w.finish().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Exists, "{url}: {}", e.message);
        assert!(e.message.contains(why), "{url}: {}", e.message);
    }
    assert_eq!(
        root.list("").unwrap(),
        vec!["notes.txt", "other/zarr.json", "x.cdz"]
    );
    assert_eq!(root.get("notes.txt").unwrap().as_ref(), b"precious");
}

/// Options through the dying proxy of `own`: one request at a time (so that exactly the
/// first `n` requests complete), short timeouts, one retry.
fn dying_opts(own: &Servers) -> Vec<String> {
    let mut o = Servers::s3_options(own.dying.as_deref().unwrap());
    o.extend([
        "max_concurrency=1".to_string(),
        "timeout_ms=2000".to_string(),
        "retries=1".to_string(),
    ]);
    o
}

#[test]
fn a_server_stopped_mid_upload_leaves_nothing_that_opens() {
    if skip() {
        return;
    }
    let d = tmpdir("stopped");
    let spots = make_spots(300, 5);
    // A directory store: finish checks the target twice (GET zarr.json, LIST), then
    // uploads; the server stops after the 2nd PUT.
    let own = Servers::start_stopping_after(&d, 6);
    let url = format!("s3://{BUCKET}/stopped/a.chromdata.zarr");
    let mut w = create(&url, &dying_opts(&own), opts(Layout::PrimaryCoords));
    fill(&mut w, &spots, &[]);
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    assert!(e.message.contains(&url), "{}", e.message);
    assert_eq!(leftover_spills("a.chromdata.zarr"), Vec::<String>::new());
    // Straight to the S3 server: the upload had begun, and the commit point is absent.
    let root = own.root("stopped/a.chromdata.zarr");
    let left = root.list("").unwrap();
    assert!(!left.is_empty(), "the upload had begun");
    assert!(!left.iter().any(|k| k == "zarr.json"), "{left:?}");
    drop(own);

    // A .cdz: HEAD twice, then the multipart upload (create, one part, complete); the
    // server stops at the completion: no object.
    let own = Servers::start_stopping_after(&d, 4);
    let url = format!("s3://{BUCKET}/stopped/a.cdz");
    let mut w = create(&url, &dying_opts(&own), opts(Layout::Flat));
    fill(&mut w, &spots, &[]);
    let e = w.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    assert!(e.message.contains(&url), "{}", e.message);
    assert!(!own.root("stopped/a.cdz").exists("").unwrap());
    assert_eq!(own.root("stopped").list("").unwrap(), Vec::<String>::new());
    assert_eq!(leftover_spills("a.cdz"), Vec::<String>::new());
}

#[test]
fn a_dropped_writer_uploads_nothing() {
    let Some(s) = servers() else { return };
    let spots = make_spots(40, 9);
    let url = format!("s3://{BUCKET}/dropped/a.chromdata.zarr");
    let mut w = create(&url, &s.opts(), opts(Layout::Flat));
    fill(&mut w, &spots, &[]);
    let spill = w.temp_dir().to_path_buf();
    assert!(spill.exists());
    drop(w);
    assert!(!spill.exists());
    assert_eq!(s.root("dropped").list("").unwrap(), Vec::<String>::new());
}

#[test]
fn bad_urls_and_options() {
    for (url, o, kind) in [
        (
            "s3://b/x.cdz",
            vec!["no_such_option=1"],
            ErrorKind::InvalidArgument,
        ),
        (
            "s3://b/x.cdz",
            vec!["retries=x"],
            ErrorKind::InvalidArgument,
        ),
        (
            "s3://b/x.cdz",
            vec!["google_service_account=x"],
            ErrorKind::InvalidArgument,
        ),
        ("s3://b/../x.cdz", vec![], ErrorKind::InvalidArgument),
        ("ftp://h/x.cdz", vec![], ErrorKind::InvalidArgument),
        ("http://127.0.0.1:9/x.cdz", vec![], ErrorKind::Unsupported),
    ] {
        let e = Root::parse(url, &o)
            .and_then(|r| ChromDataWriter::create_deferred_at(r, WriterOptions::default()))
            .unwrap_err();
        assert_eq!(e.kind, kind, "{url} {o:?}: {}", e.message);
    }
}

fn last_error() -> String {
    // SAFETY: dc_last_error never returns NULL.
    unsafe { CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// `dc_chromdata_writer_create_opts`; the status and the handle.
fn c_create(url: &str, o: &[String]) -> (dc_status, *mut dc_chromdata_writer) {
    let url = CString::new(url).unwrap();
    let owned: Vec<CString> = o
        .iter()
        .map(|x| CString::new(x.as_str()).unwrap())
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = owned.iter().map(|x| x.as_ptr()).collect();
    let mut w: *mut dc_chromdata_writer = std::ptr::null_mut();
    // SAFETY: valid strings and out-pointer.
    let st =
        unsafe { dc_chromdata_writer_create_opts(url.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut w) };
    (st, w)
}

/// Appends `b` through the C ABI (Arrow C data exported here).
fn c_append(w: *mut dc_chromdata_writer, b: arrow_array::RecordBatch) -> dc_status {
    let sa = arrow_array::StructArray::from(b);
    let (mut array, mut schema) = arrow_array::ffi::to_ffi(&sa.into()).unwrap();
    // SAFETY: a live writer, valid Arrow C structs (moved into the library).
    unsafe { dc_chromdata_writer_append(w, &mut array, &mut schema) }
}

#[test]
fn c_abi_writes_to_a_url() {
    let Some(s) = servers() else { return };
    let d = tmpdir("ffi");
    let spots = make_spots(120, 4);
    let url = format!("s3://{BUCKET}/ffi/c.cdz");
    let (st, w) = c_create(&url, &s.opts());
    assert_eq!(st, DC_OK, "{}", last_error());
    assert_eq!(
        c_append(w, batch_of(&spots, 0, 120)),
        DC_OK,
        "{}",
        last_error()
    );
    // SAFETY: a live handle.
    assert_eq!(
        unsafe { dc_chromdata_writer_finish(w) },
        DC_OK,
        "{}",
        last_error()
    );
    // SAFETY: a live handle, freed once.
    unsafe { dc_chromdata_writer_free(w) };
    let got = d.join("c.cdz");
    download(&url, &s.opts(), &got);
    assert_same(
        &ChromData::open(&got)
            .unwrap()
            .read_spots(true, &Columns::All)
            .unwrap(),
        &expected(&spots, false),
        "C ABI",
    );

    // Again without overwrite: DC_ERR_EXISTS naming the URL; with it: DC_OK.
    let (st, w) = c_create(&url, &s.opts());
    assert_eq!(st, DC_OK);
    assert_eq!(c_append(w, batch_of(&spots, 0, 10)), DC_OK);
    // SAFETY: a live handle.
    assert_eq!(unsafe { dc_chromdata_writer_finish(w) }, DC_ERR_EXISTS);
    assert!(last_error().contains(&url), "{}", last_error());
    // SAFETY: a live handle.
    assert_eq!(
        unsafe { dc_chromdata_writer_set(w, DC_CDW_OVERWRITE, 1) },
        DC_OK
    );
    // SAFETY: a live handle.
    assert_eq!(
        unsafe { dc_chromdata_writer_finish(w) },
        DC_OK,
        "{}",
        last_error()
    );
    // SAFETY: a live handle, freed once.
    unsafe { dc_chromdata_writer_free(w) };
    download(&url, &s.opts(), &got);
    assert_eq!(ChromData::open(&got).unwrap().info().n_spots, 10);

    let (st, w) = c_create(&url, &["bogus=1".to_string()]);
    assert_eq!((st, w.is_null()), (DC_ERR_INVALID_ARGUMENT, true));
    assert!(last_error().contains("bogus"), "{}", last_error());
    let (st, w) = c_create("https://127.0.0.1:9/x.cdz", &[]);
    assert_eq!((st, w.is_null()), (DC_ERR_UNSUPPORTED, true));
    let u = CString::new(url.as_str()).unwrap();
    let mut w: *mut dc_chromdata_writer = std::ptr::null_mut();
    // SAFETY: NULL options with a count are checked by the function.
    let st = unsafe { dc_chromdata_writer_create_opts(u.as_ptr(), std::ptr::null(), 1, &mut w) };
    assert_eq!((st, w.is_null()), (DC_ERR_INVALID_ARGUMENT, true));
    // The plain function takes URLs too (here one the library may not write: read only).
    let u = CString::new("http://127.0.0.1:9/x.chromdata.zarr").unwrap();
    // SAFETY: valid string and out-pointer.
    let st = unsafe { dc_chromdata_writer_create(u.as_ptr(), &mut w) };
    assert_eq!((st, w.is_null()), (DC_ERR_UNSUPPORTED, true));
}

/// `deltacells chromdata import-fofct TABLE s3://...` with `--option`: the uploaded store is
/// the one a local import writes; an unknown option is a usage error naming it.
#[cfg(feature = "cli")]
#[test]
fn cli_import_fofct_to_a_url() {
    let Some(s) = servers() else { return };
    let d = tmpdir("cli");
    let table = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/chromatin/synthetic_traces.fofct.csv");
    let run = |out: &str, extra: &[String]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_deltacells"))
            .args(["chromdata", "import-fofct", table.to_str().unwrap(), out])
            .args(["--layout", "partitioned", "--quiet"])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let mut options = Vec::new();
    for o in s.opts() {
        options.extend(["--option".to_string(), o]);
    }
    for name in ["t.cdz", "t.chromdata.zarr"] {
        let url = format!("s3://{BUCKET}/cli/{name}");
        let (code, err) = run(&url, &options);
        assert_eq!(code, Some(0), "{err}");
        let local = d.join(format!("local-{name}"));
        let (code, err) = run(local.to_str().unwrap(), &[]);
        assert_eq!(code, Some(0), "{err}");
        let got = d.join(name);
        download(&url, &s.opts(), &got);
        assert!(tree_bytes(&got) == tree_bytes(&local), "{url}");
        // Again: the store exists (exit 4, the URL named); --overwrite replaces it.
        let (code, err) = run(&url, &options);
        assert_eq!(code, Some(4), "{err}");
        assert!(err.contains(&url), "{err}");
        let mut again = options.clone();
        again.push("--overwrite".into());
        let (code, err) = run(&url, &again);
        assert_eq!(code, Some(0), "{err}");
    }
    let (code, err) = run(
        &format!("s3://{BUCKET}/cli/x.cdz"),
        &["--option".into(), "no_such_key=1".into()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no_such_key"), "{err}");
    assert!(!s.root("cli/x.cdz").exists("").unwrap());
}

/// Not a test of its own: the writer that `a_killed_writers_spill_is_removed_by_the_next`
/// starts in a child process (this test binary again) and kills. Without its environment
/// variables it does nothing.
#[test]
fn killed_writer_child() {
    use std::io::Write;
    let (Ok(url), Ok(o)) = (
        std::env::var("DC_KILLED_WRITER_URL"),
        std::env::var("DC_KILLED_WRITER_OPTS"),
    ) else {
        return;
    };
    let server_opts: Vec<String> = o.lines().map(str::to_string).collect();
    let mut w = create(&url, &server_opts, opts(Layout::Flat));
    fill(&mut w, &make_spots(60, 3), &[]);
    // Straight to the process's stdout (the test harness captures println!).
    let mut out = std::io::stdout().lock();
    writeln!(out, "SPILL {}", w.temp_dir().display()).unwrap();
    out.flush().unwrap();
    drop(out);
    // Wait to be killed (at most a minute, then leave without cleaning up, as a kill would).
    std::thread::sleep(std::time::Duration::from_secs(60));
    std::process::exit(0);
}

#[test]
fn a_killed_writers_spill_is_removed_by_the_next() {
    use std::io::BufRead;
    let Some(s) = servers() else { return };
    let url = format!("s3://{BUCKET}/killed/k.cdz");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DC_KILLED_WRITER_URL", &url)
        .env("DC_KILLED_WRITER_OPTS", s.opts().join("\n"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let spill = out
        .lines()
        .map_while(|l| l.ok())
        // The harness's "test killed_writer_child ... " precedes it on the line.
        .find_map(|l| l.split_once("SPILL ").map(|(_, p)| PathBuf::from(p)))
        .expect("the child writer reports its spill directory");
    assert!(spill.is_dir(), "{}", spill.display());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(spill.is_dir(), "a killed writer leaves its spill directory");
    // The next writer to a target of that name removes it (its process is gone); its own
    // spill is removed when it is dropped.
    let w = create(&url, &s.opts(), opts(Layout::Flat));
    assert!(
        !spill.exists(),
        "{} left after the next writer",
        spill.display()
    );
    let own = w.temp_dir().to_path_buf();
    assert!(own.is_dir());
    drop(w);
    assert!(!own.exists());
    assert!(
        !s.root("killed").exists("k.cdz").unwrap(),
        "nothing was uploaded"
    );
}
