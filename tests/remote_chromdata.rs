//! ChromData stores at URLs (issue 15, c-api.md §7 `dc_chromdata_open_opts`) against real
//! servers on 127.0.0.1 (scripts/remote_servers.py: moto's S3 server, a Range HTTP server,
//! proxies that add latency or drop requests, a server that never answers). The stores are
//! the ones the independent Python writer makes (tests/chromdata/make_stores.py: every
//! layout, directory and `.cdz`); every query of its manifest, the component queries
//! included, is answered at the URL exactly as the local read of the same store answers it.

#![cfg(feature = "remote")]

mod chromdata_common;
mod remote_support;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use chromdata_common::*;
use deltacells::chromdata::{ChromData, Columns};
use deltacells::ffi::*;
use deltacells::ErrorKind;
use remote_support::*;
use serde_json::Value;

/// The directory served by the HTTP server (one per test process): under target/tmp, emptied
/// when the first test starts the servers, so that no run leaves it in the system's temporary
/// directory (the server process and its directory outlive every test of the binary).
fn serve_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("remote-chromdata-serve");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn servers() -> Option<&'static Servers> {
    remote_support::shared(serve_dir)
}

/// Prefix of the uploaded stores in the bucket.
const PREFIX: &str = "chromdata";

/// The test stores, written locally and uploaded once (same names under
/// `s3://dc-test/chromdata/`): (local directory, servers). None when skipped.
fn uploaded() -> Option<(&'static Path, &'static Servers)> {
    let s = servers()?;
    let dir = stores()?;
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let root = s.root(PREFIX);
        for st in manifest(dir)["stores"].as_array().unwrap() {
            let name = st["path"].as_str().unwrap();
            let local = dir.join(name);
            if local.is_dir() {
                upload_dir(&root.child(name).unwrap(), &local);
            } else {
                root.put_file(name, &local).unwrap();
            }
        }
    });
    Some((dir, s))
}

fn url_of(name: &str) -> String {
    format!("s3://{BUCKET}/{PREFIX}/{name}")
}

fn open_remote(s: &Servers, name: &str, extra: &[&str]) -> ChromData {
    let url = url_of(name);
    let mut opts = s.opts();
    opts.extend(extra.iter().map(|e| e.to_string()));
    ChromData::open_url(&url, &as_strs(&opts)).unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// Both answers equal: the same batch, or errors of the same kind.
fn assert_same_result(
    local: deltacells::Result<RecordBatch>,
    remote: deltacells::Result<RecordBatch>,
    what: &str,
) {
    match (local, remote) {
        (Ok(l), Ok(r)) => same_batch(&l, &r, what),
        (Err(l), Err(r)) => assert_eq!(l.kind, r.kind, "{what}: {} vs {}", l.message, r.message),
        (l, r) => panic!(
            "{what}: local {:?}, remote {:?}",
            l.map(|b| b.num_rows()),
            r.map(|b| b.num_rows())
        ),
    }
}

/// The same schema (metadata included) and the same values, bit for bit (NaNs included).
fn same_batch(l: &RecordBatch, r: &RecordBatch, what: &str) {
    assert_eq!(l.schema(), r.schema(), "{what}: schema");
    assert_eq!(l.num_rows(), r.num_rows(), "{what}: rows");
    for (i, f) in l.schema().fields().iter().enumerate() {
        assert!(
            l.column(i).to_data() == r.column(i).to_data(),
            "{what}: column {} differs",
            f.name()
        );
    }
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

/// The `resolved_path` a store at `url` gives a contacts / links record: `path` if it
/// exists locally, else `relative_path` beside the store's URL, else `path`.
fn resolved_at_url(record: &Value, url: &str) -> Value {
    let path = record["path"].as_str();
    if let Some(p) = path.filter(|p| Path::new(p).exists()) {
        return Value::from(p);
    }
    match (record["relative_path"].as_str(), url.rsplit_once('/')) {
        (Some(r), Some((parent, _))) => Value::from(format!("{parent}/{r}")),
        _ => path.map_or(Value::Null, Value::from),
    }
}

/// A contacts / links record without `resolved_path` (it differs between a local store and
/// the same store at a URL), after checking the URL's against [`resolved_at_url`].
fn without_resolved_checked(v: Value, url: &str) -> Value {
    if let Value::Array(a) = &v {
        for r in a {
            assert_eq!(r["resolved_path"], resolved_at_url(r, url), "{url}: {r}");
        }
    }
    without_resolved(v)
}

/// A contacts / links record without `resolved_path`.
fn without_resolved(v: Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(
            a.into_iter()
                .map(|mut r| {
                    if let Some(o) = r.as_object_mut() {
                        o.remove("resolved_path");
                    }
                    r
                })
                .collect(),
        ),
        other => other,
    }
}

/// Runs one component query (attrs, array, result_table) of the manifest on `local` and
/// `remote`, and compares.
fn same_component(local: &ChromData, remote: (&ChromData, &str), q: &Value, what: &str) {
    let (remote, url) = remote;
    let kind = q["kind"].as_str().unwrap();
    let path = strs(&q["path"]);
    match kind {
        "attrs" => {
            let w = q["what"].as_str().unwrap();
            match (local.attrs(w, &path), remote.attrs(w, &path)) {
                (Ok(l), Ok(r)) if w == "contacts" || w == "links" => {
                    assert_eq!(
                        without_resolved(l),
                        without_resolved_checked(r, url),
                        "{what}"
                    )
                }
                (Ok(l), Ok(r)) => assert_eq!(l, r, "{what}"),
                (Err(l), Err(r)) => assert_eq!(l.kind, r.kind, "{what}"),
                (l, r) => panic!("{what}: local {l:?}, remote {r:?}"),
            }
        }
        "array" => {
            let w = q["what"].as_str().unwrap();
            assert_same_result(local.array(w, &path), remote.array(w, &path), what)
        }
        "result_table" => {
            assert_same_result(local.result_table(&path), remote.result_table(&path), what)
        }
        other => panic!("unknown component query {other}"),
    }
}

/// Every query of one store (spot queries, small tables, categories, keys, components,
/// whole reads, iterators): equal at the URL and locally. Returns the number compared.
fn compare_store(dir: &Path, s: &Servers, st: &Value, extra: &[&str]) -> usize {
    let name = st["path"].as_str().unwrap();
    let local = ChromData::open(dir.join(name)).unwrap();
    let remote = open_remote(s, name, extra);
    assert_eq!(local.info(), remote.info(), "{name}: info");
    assert_eq!(local.extra_columns(), remote.extra_columns(), "{name}");
    let mut n = 0;
    for q in st["queries"].as_array().unwrap() {
        let what = format!("{name} {q}");
        assert_same_result(run(&local, q), run(&remote, q), &what);
        n += 1;
    }
    for q in st["components"].as_array().unwrap() {
        same_component(&local, (&remote, &url_of(name)), q, &format!("{name} {q}"));
        n += 1;
    }
    for original in [false, true] {
        assert_same_result(
            local.read_spots(original, &Columns::All),
            remote.read_spots(original, &Columns::All),
            &format!("{name} read_spots({original})"),
        );
        n += 1;
    }
    let batches = |cd: &ChromData, cells: bool| -> Vec<RecordBatch> {
        let it = if cells {
            cd.iter_cells(2, &Columns::All).unwrap()
        } else {
            cd.iter_traces(3, &Columns::All).unwrap()
        };
        it.collect::<Result<_, _>>().unwrap()
    };
    let mut kinds = vec![false];
    if local.info().has_cell_id {
        kinds.push(true);
    }
    for cells in kinds {
        let (l, r) = (batches(&local, cells), batches(&remote, cells));
        assert_eq!(l.len(), r.len(), "{name}: batches (cells: {cells})");
        for (k, (a, b)) in l.iter().zip(&r).enumerate() {
            same_batch(a, b, &format!("{name} batch {k} (cells: {cells})"));
        }
        n += 1;
    }
    n
}

/// Whether to compare every store (`DELTACELLS_REMOTE_FULL=1`) or, by default (CI), every
/// layout as a directory and as a `.cdz` for the main data set and one store of each
/// other data set.
fn selected(st: &Value) -> bool {
    if std::env::var("DELTACELLS_REMOTE_FULL").is_ok_and(|v| v == "1") {
        return true;
    }
    let name = st["path"].as_str().unwrap();
    name.starts_with("main_") || name.ends_with("_22.cdz") || name.ends_with("_21.chromdata.zarr")
}

#[test]
fn every_layout_and_cdz_reads_at_s3_as_locally() {
    let Some((dir, s)) = uploaded() else { return };
    let m = manifest(dir);
    let mut n = 0;
    let mut layouts = std::collections::BTreeSet::new();
    for st in m["stores"].as_array().unwrap() {
        if !selected(st) {
            continue;
        }
        layouts.insert((
            st["layout"].as_str().unwrap().to_string(),
            st["path"].as_str().unwrap().ends_with(".cdz"),
        ));
        n += compare_store(dir, s, st, &[]);
    }
    assert_eq!(
        layouts.len(),
        6,
        "every layout, directory and .cdz: {layouts:?}"
    );
    assert!(n > 500, "only {n} queries compared");
}

#[test]
fn reads_at_one_request_at_a_time_and_through_faults_are_the_same() {
    let Some((dir, s)) = uploaded() else { return };
    let m = manifest(dir);
    let stores: Vec<&Value> = m["stores"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| {
            matches!(
                st["path"].as_str(),
                Some("main_21.cdz" | "main_22.chromdata.zarr")
            )
        })
        .collect();
    assert_eq!(stores.len(), 2);
    for st in &stores {
        compare_store(dir, s, st, &["max_concurrency=1"]);
    }
    // Through the proxy that drops every third connection (retries succeed).
    let flaky = Servers::s3_options(&s.flaky);
    for st in &stores {
        let name = st["path"].as_str().unwrap();
        let local = ChromData::open(dir.join(name)).unwrap();
        let remote = ChromData::open_url(&url_of(name), &as_strs(&flaky))
            .unwrap_or_else(|e| panic!("{name} through the flaky proxy: {e}"));
        for q in st["queries"].as_array().unwrap().iter().take(40) {
            assert_same_result(run(&local, q), run(&remote, q), &format!("{name} {q}"));
        }
    }
}

#[test]
fn http_urls_read_directories_and_cdz() {
    let Some((dir, s)) = uploaded() else { return };
    let m = manifest(dir);
    for name in ["main_20.cdz", "main_21.chromdata.zarr"] {
        let src = dir.join(name);
        let dst = s.serve_dir.join(name);
        copy_tree(&src, &dst);
        let st = m["stores"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["path"] == name)
            .unwrap();
        let local = ChromData::open(&src).unwrap();
        let url = format!("{}/{name}", s.http);
        let remote = ChromData::open_url(&url, &[]).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(local.info(), remote.info());
        for q in st["queries"].as_array().unwrap() {
            assert_same_result(run(&local, q), run(&remote, q), &format!("{url} {q}"));
        }
    }
}

fn copy_tree(src: &Path, dst: &Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &dst.join(e.file_name()));
        }
    } else {
        std::fs::copy(src, dst).unwrap();
    }
}

/// `ObjectRoot::get_suffix` (a store's Parquet footers at open): the object's tail and its
/// size from one request, on the S3 server and on the Range HTTP server; all of it when the
/// suffix is longer; a missing object is `NotFound`; an empty object is (0, nothing).
#[test]
fn suffix_reads_return_the_tail_and_the_size() {
    let Some(s) = servers() else { return };
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = s.serve_dir.join("suffix.bin");
    std::fs::write(&file, &bytes).unwrap();
    s.root("suffix").put_file("suffix.bin", &file).unwrap();
    let empty = s.serve_dir.join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    s.root("suffix").put_file("empty.bin", &empty).unwrap();
    for (url, opts) in [
        (format!("s3://{BUCKET}/suffix"), s.opts()),
        (s.http.clone(), Vec::new()),
    ] {
        let root = root_at(&url, &opts);
        for n in [1u64, 8, 65_536, 100_000, 1 << 20] {
            let (size, tail) = root.get_suffix("suffix.bin", n).unwrap();
            assert_eq!(size, bytes.len() as u64, "{url} n={n}");
            let k = (n as usize).min(bytes.len());
            assert_eq!(&tail[..], &bytes[bytes.len() - k..], "{url} n={n}");
        }
        let e = root.get_suffix("no-such-object", 8).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{url}: {}", e.message);
        // An empty object has no suffix range: its size 0 and no bytes.
        let (size, tail) = root.get_suffix("empty.bin", 8).unwrap();
        assert_eq!((size, tail.len()), (0, 0), "{url}");
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&empty);
}

#[test]
fn missing_stores_are_not_found() {
    let Some((_, s)) = uploaded() else { return };
    for url in [
        url_of("no-such.chromdata.zarr"),
        url_of("no-such.cdz"),
        format!("{}/no-such.cdz", s.http),
        format!("{}/no-such.chromdata.zarr", s.http),
    ] {
        let e = ChromData::open_url(&url, &as_strs(&s.opts_for(&url)))
            .err()
            .unwrap_or_else(|| panic!("{url} opened"));
        assert_eq!(e.kind, ErrorKind::NotFound, "{url}: {}", e.message);
        assert!(e.message.contains(&url), "{}", e.message);
    }
}

#[test]
fn a_server_that_never_answers_is_an_io_error_within_the_timeouts() {
    let Some(s) = servers() else { return };
    let mut opts = Servers::s3_options(&s.blackhole);
    opts.extend(["timeout_ms=300".to_string(), "retries=1".to_string()]);
    for name in ["x.chromdata.zarr", "x.cdz"] {
        let url = url_of(name);
        let start = Instant::now();
        let e = ChromData::open_url(&url, &as_strs(&opts)).err().unwrap();
        let took = start.elapsed();
        assert_eq!(e.kind, ErrorKind::Io, "{url}: {}", e.message);
        assert!(e.message.contains(&url), "{}", e.message);
        assert!(!e.message.contains(SECRET), "{}", e.message);
        // Not a performance threshold: a hang guard, far above the 2 x 300 ms + backoff.
        assert!(took < Duration::from_secs(60), "took {took:?}");
    }
}

#[test]
fn a_server_stopped_after_open_is_an_io_error_naming_the_url() {
    let Some((dir, _)) = uploaded() else { return };
    // Its own servers: this test stops them.
    let serve = Path::new(env!("CARGO_TARGET_TMPDIR")).join("remote-chromdata-stopped");
    std::fs::create_dir_all(&serve).unwrap();
    let own = Servers::start(&serve);
    let mut opts = own.opts();
    opts.extend(["timeout_ms=500".to_string(), "retries=1".to_string()]);
    let root = own.root("stopped");
    for name in ["main_20.cdz", "main_22.chromdata.zarr"] {
        let local = dir.join(name);
        if local.is_dir() {
            upload_dir(&root.child(name).unwrap(), &local);
        } else {
            root.put_file(name, &local).unwrap();
        }
    }
    let handles: Vec<(String, ChromData)> = ["main_20.cdz", "main_22.chromdata.zarr"]
        .iter()
        .map(|name| {
            let url = format!("s3://{BUCKET}/stopped/{name}");
            let cd = ChromData::open_url(&url, &as_strs(&opts)).unwrap();
            (url, cd)
        })
        .collect();
    drop(own);
    for (url, cd) in &handles {
        let e = cd.read_spots(false, &Columns::All).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{url}: {}", e.message);
        assert!(e.message.contains(url.as_str()), "{}", e.message);
    }
}

#[test]
fn bad_urls_and_options_are_invalid_arguments() {
    for (url, opts) in [
        ("ftp://host/x.cdz", vec![]),
        ("s3://", vec![]),
        ("s3://b/a/../c.cdz", vec![]),
        ("s3://b/p.cdz", vec!["no_such_option=1"]),
        ("s3://b/p.chromdata.zarr", vec!["google_service_account=x"]),
        ("s3://b/p.cdz", vec!["max_concurrency=0"]),
        ("s3://b/p.cdz", vec!["timeout_ms"]),
    ] {
        let e = ChromData::open_url(url, &opts).err().unwrap();
        assert_eq!(
            e.kind,
            ErrorKind::InvalidArgument,
            "{url} {opts:?}: {}",
            e.message
        );
    }
    // Options are checked for local paths too.
    let e = ChromData::open_url("anything.cdz", &["retries=x"])
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
}

fn last_error() -> String {
    // SAFETY: dc_last_error returns a NUL-terminated string owned by the library.
    unsafe { std::ffi::CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn c_abi_opens_by_url() {
    let Some((dir, s)) = uploaded() else { return };
    let url = CString::new(url_of("main_22.cdz")).unwrap();
    let opts: Vec<CString> = s
        .opts()
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap())
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut h: *mut dc_chromdata = ptr::null_mut();
    // SAFETY: valid strings, writable out.
    let st = unsafe { dc_chromdata_open_opts(url.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut h) };
    assert_eq!(st, DC_OK, "{}", last_error());
    let mut info = std::mem::MaybeUninit::<dc_chromdata_info>::zeroed();
    // SAFETY: a live handle, writable out.
    assert_eq!(
        unsafe { dc_chromdata_info_get(h, info.as_mut_ptr()) },
        DC_OK
    );
    // SAFETY: written on DC_OK.
    let info = unsafe { info.assume_init() };
    let local = ChromData::open(dir.join("main_22.cdz")).unwrap().info();
    assert_eq!(info.n_spots, local.n_spots);
    assert_eq!(info.n_row_groups, local.n_row_groups);
    // SAFETY: a live handle, freed once.
    unsafe { dc_chromdata_free(h) };

    // Errors: unknown option, NULL options with a count, missing store; out untouched.
    let bad = CString::new("no_such_option=1").unwrap();
    let bad_ptrs = [bad.as_ptr()];
    let mut h: *mut dc_chromdata = ptr::null_mut();
    // SAFETY: valid strings, writable out.
    let st = unsafe { dc_chromdata_open_opts(url.as_ptr(), bad_ptrs.as_ptr(), 1, &mut h) };
    assert_eq!(st, DC_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("no_such_option"), "{}", last_error());
    assert!(h.is_null());
    // SAFETY: NULL options are checked by the function.
    let st = unsafe { dc_chromdata_open_opts(url.as_ptr(), ptr::null(), 2, &mut h) };
    assert_eq!(st, DC_ERR_INVALID_ARGUMENT);
    let missing = CString::new(url_of("no-such.cdz")).unwrap();
    // SAFETY: valid strings, writable out.
    let st = unsafe { dc_chromdata_open_opts(missing.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut h) };
    assert_eq!(st, DC_ERR_NOT_FOUND, "{}", last_error());
    assert!(h.is_null());
    assert!(!last_error().contains(SECRET));
}

/// `deltacells chromdata info|get` at a URL with `--option`: the same output as for the
/// local store (the store's name aside), and the library's errors for bad options and
/// missing stores.
#[cfg(feature = "cli")]
#[test]
fn cli_info_and_get_read_urls() {
    use std::process::Command;
    let Some((dir, s)) = uploaded() else { return };
    let run_cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_deltacells"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let opts = s.opts();
    let with_opts = |args: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        for o in &opts {
            v.extend(["--option", o.as_str()]);
        }
        run_cli(&v)
    };
    for name in ["main_21.cdz", "main_22.chromdata.zarr"] {
        let local = dir.join(name);
        let local = local.to_str().unwrap();
        let url = url_of(name);
        let (ok, want, err) = run_cli(&["chromdata", "info", local]);
        assert!(ok, "{err}");
        let (ok, got, err) = with_opts(&["chromdata", "info", &url]);
        assert!(ok, "{url}: {err}");
        assert_eq!(got.replace(&url, "STORE"), want.replace(local, "STORE"));
        let cd = ChromData::open(dir.join(name)).unwrap();
        let first = |b: &RecordBatch, col: &str| {
            arrow_cast::display::ArrayFormatter::try_new(
                b.column_by_name(col).unwrap().as_ref(),
                &Default::default(),
            )
            .unwrap()
            .value(0)
            .to_string()
        };
        let chrom = first(&cd.table("bins").unwrap(), "chrom");
        let traces = cd.categories("spots", "trace_id").unwrap();
        let trace =
            arrow_cast::display::ArrayFormatter::try_new(traces.as_ref(), &Default::default())
                .unwrap()
                .value(0)
                .to_string();
        let queries = [
            vec!["--trace", trace.as_str()],
            vec!["--chrom", chrom.as_str(), "--columns", "coords"],
            vec!["--trace", "no-such-trace"],
        ];
        for q in queries {
            let mut args = vec!["chromdata", "get", local];
            args.extend(&q);
            let want = run_cli(&args);
            args[2] = &url;
            let got = with_opts(&args);
            assert_eq!(got.0, want.0, "{q:?}: {} / {}", got.2, want.2);
            assert_eq!(got.1, want.1, "{url} {q:?}");
        }
    }
    let (ok, _, err) = with_opts(&[
        "chromdata",
        "info",
        &url_of("main_21.cdz"),
        "--option",
        "nope=1",
    ]);
    assert!(!ok && err.contains("nope"), "{err}");
    let (ok, _, err) = with_opts(&["chromdata", "info", &url_of("no-such.cdz")]);
    assert!(!ok && err.contains("no-such.cdz"), "{err}");
    assert!(!err.contains(SECRET), "{err}");
}
