//! Datasets on object stores (issue 15, c-api.md §7) against real servers on 127.0.0.1
//! (scripts/remote_servers.py: moto's S3 server, a Range HTTP server, proxies that add
//! latency or drop requests, a server that never answers, one that refuses credentials).
//! Every remote read is compared with the local read of the same files.

#![cfg(feature = "remote")]

mod dataset_support;
mod remote_support;

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use dataset_support::*;
use deltacells::dataset::paths::tile_relpath;
use deltacells::dataset::{Batches, Dataset, DatasetWriter};
use deltacells::ffi::*;
use deltacells::storage::Root;
use deltacells::tile::ValuesOut;
use deltacells::ErrorKind;
use remote_support::*;

const N_GENES: u32 = 40;
const N_CELLS: usize = 230;
const TILE: u64 = 25; // 10 tiles

/// The directory served by the HTTP server (one per test process): under target/tmp, emptied
/// when the first test starts the servers, so that no run leaves it in the system's temporary
/// directory (the server process and its directory outlive every test of the binary).
fn serve_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("remote-serve");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn servers() -> Option<&'static Servers> {
    remote_support::shared(serve_dir)
}

fn obs_batch(a: usize, b: usize) -> RecordBatch {
    let kinds = ["T cell", "B cell", "NK"];
    let cols: Vec<(&str, ArrayRef)> = vec![
        (
            "cell_type",
            Arc::new(StringArray::from_iter(
                (a..b).map(|i| (i % 11 != 4).then(|| kinds[i % 3])),
            )),
        ),
        (
            "n_counts",
            Arc::new(Int64Array::from_iter_values((a..b).map(|i| i as i64 * 37))),
        ),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

/// Writes the test dataset (CSR, gene order, var names, obs in 3 shards) with `w`.
fn fill(w: &mut DatasetWriter, input: &Csr) {
    let order: Vec<i32> = (0..N_GENES as i32).rev().collect();
    let names: Vec<String> = (0..N_GENES).map(|g| format!("gene-{g}")).collect();
    w.set_gene_order(&order).unwrap();
    w.set_var_names(&names).unwrap();
    let lengths: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..N_GENES as i64).map(|g| g * 100),
    ));
    let ids: ArrayRef = Arc::new(StringArray::from_iter_values(names.iter()));
    w.set_var_table(RecordBatch::try_from_iter([("_index", ids), ("length", lengths)]).unwrap())
        .unwrap();
    w.set_obs_tiles_per_file(4).unwrap();
    for r in (0..N_CELLS).step_by(50) {
        let n = 50.min(N_CELLS - r);
        let a = input.indptr[r] as usize;
        w.append_csr(
            n as u64,
            &input.indptr[r..=r + n],
            &input.indices[a..],
            &input.values[a..],
        )
        .unwrap();
        w.append_obs(obs_batch(r, r + n)).unwrap();
    }
    w.finish().unwrap();
}

fn input() -> Csr {
    random_csr(&mut Rng::new(15), N_CELLS, N_GENES, 0.3, true)
}

fn write_local(path: &Path, input: &Csr) {
    let mut w = DatasetWriter::create(path, N_GENES, test_options(TILE)).unwrap();
    fill(&mut w, input);
}

fn collect(r: Box<dyn arrow_array::RecordBatchReader + Send>) -> Vec<RecordBatch> {
    r.collect::<Result<Vec<_>, _>>().unwrap()
}

/// Every read of `remote` equals the same read of `local`: info, gene order, var names, var
/// table, obs (all and some columns), gathers, decoded tiles.
fn assert_same(local: &Dataset, remote: &Dataset, input: &Csr, cache: &Path) {
    assert_eq!(local.info(), remote.info());
    assert_eq!(local.gene_order().unwrap(), remote.gene_order().unwrap());
    assert_eq!(local.var_names().unwrap(), remote.var_names().unwrap());
    assert_eq!(
        collect(local.var_table().unwrap()),
        collect(remote.var_table().unwrap())
    );
    local.set_cache_dir(Some(cache.join("local")));
    remote.set_cache_dir(Some(cache.join("remote")));
    assert_eq!(
        collect(local.obs(None).unwrap()),
        collect(remote.obs(None).unwrap())
    );
    assert_eq!(
        collect(local.obs(Some(&["n_counts"])).unwrap()),
        collect(remote.obs(Some(&["n_counts"])).unwrap())
    );
    remote.verify_obs().unwrap();
    let order = local.gene_order().unwrap().to_vec();
    let mut rng = Rng::new(3);
    for _ in 0..4 {
        let cells: Vec<u64> = (0..60).map(|_| rng.below(N_CELLS as u64)).collect();
        check_gather(remote, input, Some(&order), &cells);
    }
    for t in [0, 9] {
        let (_, cells, nnz) = local.tile_bounds(t).unwrap();
        let read = |ds: &Dataset| {
            let mut indptr = vec![0i64; cells as usize + 1];
            let mut indices = vec![0i32; nnz as usize];
            let mut values = vec![0i32; nnz as usize];
            ds.read_tile(t, &mut indptr, &mut indices, ValuesOut::I32(&mut values))
                .unwrap();
            (indptr, indices, values)
        };
        assert_eq!(read(local), read(remote), "tile {t}");
    }
}

#[test]
fn s3_dataset_reads_equal_local_reads() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-s3-read");
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&s.root("read/ds"), &dir.join("ds"));
    let local = Dataset::open(dir.join("ds")).unwrap();
    let remote = Dataset::open_url("s3://dc-test/read/ds", &as_strs(&s.opts())).unwrap();
    assert!(remote.store().is_remote());
    assert_same(&local, &remote, &input, &dir.join("cache"));
    // The obs columns now come from the local cache: no shard is read again.
    let reads = remote.obs_shard_reads();
    collect(remote.obs(None).unwrap());
    assert_eq!(remote.obs_shard_reads(), reads);
}

#[test]
fn gather_is_one_get_per_tile_and_decoded_tiles_are_cached() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-gets");
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&s.root("gets/ds"), &dir.join("ds"));
    let ds = Dataset::open_url("s3://dc-test/gets/ds/", &as_strs(&s.opts())).unwrap();
    ds.set_tile_cache(4);
    let counts = ds.store().remote().unwrap().clone();
    let gets = || counts.counts().gets.load(Ordering::Relaxed);
    let before = gets();
    // Cells of tiles 1, 4 and 7, in an order that revisits them.
    let cells = [30, 101, 180, 26, 104, 175, 49];
    let order = ds.gene_order().unwrap().to_vec();
    let after_order = gets();
    check_gather(&ds, &input, Some(&order), &cells);
    let one = gets() - after_order;
    assert_eq!(one, 3, "one GET per tile");
    check_gather(&ds, &input, Some(&order), &cells);
    assert_eq!(
        gets() - after_order,
        3,
        "a second gather uses the decoded tiles"
    );
    assert!(after_order >= before);
}

/// Every batch of `cells` (batches of `batch_size`, `read_ahead` ahead) from `ds`, as
/// (indptr, indices, values).
fn all_batches(
    ds: &Arc<Dataset>,
    cells: &[u64],
    batch_size: usize,
    read_ahead: usize,
) -> Vec<(Vec<i64>, Vec<i32>, Vec<i32>)> {
    let mut it = Batches::new(ds.clone(), cells, batch_size, read_ahead).unwrap();
    let mut out = Vec::new();
    loop {
        let (_, nnz) = it.peek().unwrap();
        let mut indptr = vec![0i64; batch_size + 1];
        let mut indices = vec![0i32; nnz as usize];
        let mut values = vec![0i32; nnz as usize];
        let (rows, got) = it
            .next_into(&mut indptr, &mut indices, ValuesOut::I32(&mut values))
            .unwrap();
        if rows == 0 {
            return out;
        }
        assert_eq!(got, nnz);
        indptr.truncate(rows as usize + 1);
        out.push((indptr, indices, values));
    }
}

#[test]
fn batches_over_a_url_fetch_ahead_each_tile_once_and_equal_local_batches() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-batches");
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&s.root("batches/ds"), &dir.join("ds"));
    let local = Arc::new(Dataset::open(dir.join("ds")).unwrap());
    for (mc, read_ahead) in [(1, 1), (2, 2), (16, 4)] {
        let mut opts = s.opts();
        opts.push(format!("max_concurrency={mc}"));
        let remote =
            Arc::new(Dataset::open_url("s3://dc-test/batches/ds", &as_strs(&opts)).unwrap());
        let counts = remote.store().remote().unwrap().clone();
        let gets = || counts.counts().gets.load(Ordering::Relaxed);
        // One batch per tile (tiles in a shuffled order, each tile's cells reversed): every
        // tile is read by one batch only, so fetching ahead must not fetch any tile twice.
        // The short last tile (5 cells) goes last, so that batches of TILE cells line up
        // with the tiles.
        let n_tiles = local.info().n_tiles;
        let mut tiles: Vec<u64> = Rng::new(mc as u64)
            .permutation(n_tiles as usize - 1)
            .into_iter()
            .map(|t| t as u64)
            .collect();
        tiles.push(n_tiles - 1);
        let mut by_tile = Vec::new();
        for &t in &tiles {
            let (first, cells, _) = local.tile_bounds(t).unwrap();
            by_tile.extend((first..first + cells).rev());
        }
        let before = gets();
        let want = all_batches(&local, &by_tile, TILE as usize, read_ahead);
        assert_eq!(
            all_batches(&remote, &by_tile, TILE as usize, read_ahead),
            want
        );
        assert_eq!(gets() - before, n_tiles, "one GET per tile (mc {mc})");
        // A block-shuffled epoch, batches across windows: equal to the local batches.
        let mut order = vec![0u64; N_CELLS];
        local.shuffled_order(mc as u64, 2, &mut order).unwrap();
        let want = all_batches(&local, &order, 20, read_ahead);
        assert_eq!(all_batches(&remote, &order, 20, read_ahead), want);
    }
}

/// A tile that cannot be fetched ahead (its object is gone) fails the batch that reads it,
/// with the error of its GET (NotFound, naming the tile's URL), and that batch only; the
/// iterator goes on. An iterator dropped while its fetches are in flight leaves the
/// dataset usable.
#[test]
fn a_missing_tile_fails_its_batch_only_and_a_dropped_iterator_leaves_the_dataset_usable() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-batches-missing");
    let input = input();
    write_local(&dir.join("ds"), &input);
    let root = s.root("batches-missing/ds");
    upload_dir(&root, &dir.join("ds"));
    let local = Arc::new(Dataset::open(dir.join("ds")).unwrap());
    let remote = Arc::new(
        Dataset::open_url("s3://dc-test/batches-missing/ds", &as_strs(&s.opts())).unwrap(),
    );
    // Dropped at once, its first fetches in flight; then a gather on the same handle.
    drop(Batches::new(remote.clone(), &[0, 100, 200], 1, 4).unwrap());
    check_gather(
        &remote,
        &input,
        Some(local.gene_order().unwrap()),
        &[5, 130, 229],
    );

    let gone = 3u64;
    root.delete(&tile_relpath(gone)).unwrap();
    let cells: Vec<u64> = (0..N_CELLS as u64).collect();
    let want = all_batches(&local, &cells, TILE as usize, 2);
    let mut it = Batches::new(remote.clone(), &cells, TILE as usize, 2).unwrap();
    for (k, w) in want.iter().enumerate() {
        let mut indptr = vec![0i64; TILE as usize + 1];
        let mut indices = vec![0i32; w.1.len()];
        let mut values = vec![0i32; w.1.len()];
        let got = it.next_into(&mut indptr, &mut indices, ValuesOut::I32(&mut values));
        if k as u64 == gone {
            let e = got.unwrap_err();
            assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
            let url = format!("s3://dc-test/batches-missing/ds/{}", tile_relpath(gone));
            assert!(e.message.contains(&url), "{}", e.message);
        } else {
            let (rows, _) = got.unwrap_or_else(|e| panic!("batch {k}: {}", e.message));
            indptr.truncate(rows as usize + 1);
            assert_eq!((indptr, indices, values), *w, "batch {k}");
        }
    }
    let end = it.next_into(&mut [0i64; 1], &mut [], ValuesOut::I32(&mut []));
    assert_eq!(end.unwrap(), (0, 0));
}

#[test]
fn http_dataset_reads_equal_local_reads() {
    let Some(s) = servers() else { return };
    let input = input();
    let name = "http-ds";
    let path = s.serve_dir.join(name);
    write_local(&path, &input);
    let dir = TempDir::new("remote-http");
    let local = Dataset::open(&path).unwrap();
    let remote = Dataset::open_url(&format!("{}/{name}", s.http), &[]).unwrap();
    assert_same(&local, &remote, &input, &dir.join("cache"));
    // Read only.
    let e = DatasetWriter::create_deferred_at(
        Root::parse(&format!("{}/new", s.http), &[]).unwrap(),
        N_GENES,
        test_options(TILE),
    )
    .err()
    .unwrap();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{}", e.message);
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn s3_writer_round_trips_manifest_last_and_overwrites() {
    let Some(s) = servers() else { return };
    let input = input();
    let url = "s3://dc-test/write/ds";
    let opts = s.opts();
    let create = |overwrite: bool| {
        let root = Root::parse(url, &as_strs(&opts)).unwrap();
        let mut o = test_options(TILE);
        o.overwrite = overwrite;
        DatasetWriter::create_deferred_at(root, N_GENES, o).unwrap()
    };
    let mut w = create(false);
    fill(&mut w, &input);
    let dir = TempDir::new("remote-write");
    write_local(&dir.join("ds"), &input);
    let local = Dataset::open(dir.join("ds")).unwrap();
    let remote = Dataset::open_url(url, &as_strs(&opts)).unwrap();
    assert_same(&local, &remote, &input, &dir.join("cache"));

    // Without overwrite: Exists, and the dataset is untouched.
    let mut w = create(false);
    let row = [0i64, 1];
    let e = w.append_csr(1, &row, &[0], &[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "{}", e.message);
    drop(w);
    assert_eq!(
        Dataset::open_url(url, &as_strs(&opts))
            .unwrap()
            .info()
            .n_cells,
        N_CELLS as u64
    );

    // An overwrite that dies before finish leaves nothing that opens (the old manifest
    // went first); one that finishes replaces the dataset.
    let mut w = create(true);
    w.append_csr(1, &row, &[0], &[1]).unwrap();
    drop(w);
    let e = Dataset::open_url(url, &as_strs(&opts)).err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
    assert!(e.message.contains("manifest.json"), "{}", e.message);
    let mut w = create(true);
    w.append_csr(1, &row, &[3], &[9]).unwrap();
    w.finish().unwrap();
    let ds = Dataset::open_url(url, &as_strs(&opts)).unwrap();
    assert_eq!(ds.info().n_cells, 1);
    check_gather(
        &ds,
        &Csr {
            n_genes: N_GENES,
            indptr: vec![0, 1],
            indices: vec![3],
            values: vec![9],
        },
        None,
        &[0],
    );
}

#[test]
fn missing_objects_are_not_found() {
    let Some(s) = servers() else { return };
    for url in [
        "s3://dc-test/no/such/dataset".to_string(),
        format!("{}/no-such-dataset", s.http),
    ] {
        let e = Dataset::open_url(&url, &as_strs(&s.opts_for(&url)))
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::NotFound, "{url}: {}", e.message);
        assert!(e.message.contains(&url), "{}", e.message);
    }
    // A bucket that does not exist.
    let e = Dataset::open_url("s3://no-such-bucket/ds", &as_strs(&s.opts()))
        .err()
        .unwrap();
    assert!(
        matches!(e.kind, ErrorKind::NotFound | ErrorKind::Io),
        "{:?}: {}",
        e.kind,
        e.message
    );
    assert!(
        e.message.contains("s3://no-such-bucket/ds"),
        "{}",
        e.message
    );
}

#[test]
fn refused_credentials_are_a_clear_io_error_without_the_secret() {
    let Some(s) = servers() else { return };
    let mut opts = Servers::s3_options(&s.deny);
    opts.push("retries=0".into());
    let e = Dataset::open_url("s3://dc-test/any", &as_strs(&opts))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    assert!(
        e.message.contains("s3://dc-test/any/manifest.json"),
        "{}",
        e.message
    );
    assert!(e.message.contains("GET"), "{}", e.message);
    assert!(e.message.contains("credentials"), "{}", e.message);
    assert!(!e.message.contains(SECRET), "{}", e.message);
}

#[test]
fn a_server_that_never_answers_is_an_io_error_within_the_timeouts() {
    let Some(s) = servers() else { return };
    let mut opts = Servers::s3_options(&s.blackhole);
    opts.extend(["timeout_ms=300".to_string(), "retries=1".to_string()]);
    let start = Instant::now();
    let e = Dataset::open_url("s3://dc-test/any", &as_strs(&opts))
        .err()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    assert!(
        e.message.contains("s3://dc-test/any/manifest.json"),
        "{}",
        e.message
    );
    // Not a performance threshold: a hang guard, far above the 2 x 300 ms + backoff budget.
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn reads_survive_dropped_connections_and_latency() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-faults");
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&s.root("faults/ds"), &dir.join("ds"));
    let local = Dataset::open(dir.join("ds")).unwrap();
    for (k, endpoint) in [&s.flaky, &s.slow].into_iter().enumerate() {
        let mut opts = Servers::s3_options(endpoint);
        opts.push("max_concurrency=4".into());
        let remote = Dataset::open_url("s3://dc-test/faults/ds", &as_strs(&opts)).unwrap();
        assert_same(&local, &remote, &input, &dir.join(&format!("cache-{k}")));
    }
}

#[test]
fn bad_urls_and_options_are_invalid_arguments() {
    for (url, opts) in [
        ("ftp://host/x", vec![]),
        ("s3://", vec![]),
        ("s3://b/a/../c", vec![]),
        ("https://user:pw@host/x", vec![]),
        ("s3://b/p", vec!["no_such_option=1"]),
        ("s3://b/p", vec!["google_service_account=x"]),
        ("s3://b/p", vec!["max_concurrency=0"]),
        ("s3://b/p", vec!["timeout_ms"]),
    ] {
        let e = Dataset::open_url(url, &opts).err().unwrap();
        assert_eq!(
            e.kind,
            ErrorKind::InvalidArgument,
            "{url} {opts:?}: {}",
            e.message
        );
    }
}

fn last_error() -> String {
    // SAFETY: dc_last_error never returns NULL.
    unsafe { CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Opens through the C ABI; the status and, on success, the handle.
fn c_open(url: &str, opts: &[String]) -> (dc_status, *mut dc_dataset) {
    let url = CString::new(url).unwrap();
    let owned: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap())
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = owned.iter().map(|o| o.as_ptr()).collect();
    let mut ds: *mut dc_dataset = ptr::null_mut();
    // SAFETY: valid strings and out-pointer.
    let st = unsafe { dc_dataset_open_opts(url.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut ds) };
    (st, ds)
}

#[test]
fn c_abi_opens_by_url() {
    let Some(s) = servers() else { return };
    let dir = TempDir::new("remote-ffi");
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&s.root("ffi/ds"), &dir.join("ds"));

    let (st, ds) = c_open("s3://dc-test/ffi/ds", &s.opts());
    assert_eq!(st, DC_OK, "{}", last_error());
    let mut info: dc_dataset_info = unsafe { std::mem::zeroed() };
    // SAFETY: a live handle and a writable struct.
    assert_eq!(unsafe { dc_dataset_info_get(ds, &mut info) }, DC_OK);
    assert_eq!(info.n_cells, N_CELLS as u64);
    assert_eq!(info.has_obs, 1);
    let cells = [5u64, 120, 229];
    let mut nnz = 0u64;
    // SAFETY: live handle, valid arrays.
    assert_eq!(
        unsafe { dc_dataset_batch_nnz(ds, cells.as_ptr(), cells.len(), &mut nnz) },
        DC_OK,
        "{}",
        last_error()
    );
    let local = Dataset::open(dir.join("ds")).unwrap();
    assert_eq!(nnz, local.batch_nnz(&cells).unwrap());
    // SAFETY: a live handle, freed once.
    unsafe { dc_dataset_free(ds) };

    // The plain function takes a URL too (settings from the environment: none here, so
    // the HTTP server, which needs none).
    let path = s.serve_dir.join("ffi-http");
    write_local(&path, &input);
    let url = CString::new(format!("{}/ffi-http", s.http)).unwrap();
    let mut ds: *mut dc_dataset = ptr::null_mut();
    // SAFETY: valid string and out-pointer.
    assert_eq!(
        unsafe { dc_dataset_open(url.as_ptr(), &mut ds) },
        DC_OK,
        "{}",
        last_error()
    );
    // SAFETY: a live handle, freed once.
    unsafe { dc_dataset_free(ds) };
    let _ = std::fs::remove_dir_all(&path);

    let (st, ds) = c_open("s3://dc-test/ffi/none", &s.opts());
    assert_eq!((st, ds.is_null()), (DC_ERR_NOT_FOUND, true));
    assert!(
        last_error().contains("s3://dc-test/ffi/none"),
        "{}",
        last_error()
    );
    let (st, _) = c_open("s3://dc-test/ffi/ds", &["bogus=1".to_string()]);
    assert_eq!(st, DC_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("bogus"), "{}", last_error());
    let mut deny = Servers::s3_options(&s.deny);
    deny.push("retries=0".into());
    let (st, _) = c_open("s3://dc-test/ffi/ds", &deny);
    assert_eq!(st, DC_ERR_IO);
    assert!(!last_error().contains(SECRET), "{}", last_error());
    // NULL options with a count.
    let url = CString::new("s3://dc-test/ffi/ds").unwrap();
    let mut ds: *mut dc_dataset = ptr::null_mut();
    // SAFETY: NULL options are checked by the function.
    let st = unsafe { dc_dataset_open_opts(url.as_ptr(), ptr::null(), 2, &mut ds) };
    assert_eq!(st, DC_ERR_INVALID_ARGUMENT);
}

#[test]
fn a_server_stopped_mid_read_is_an_io_error_naming_the_url() {
    if skip() {
        return;
    }
    // Its own servers: this test stops them.
    let dir = TempDir::new("remote-stopped");
    std::fs::create_dir_all(dir.join("serve")).unwrap();
    let own = Servers::start(&dir.join("serve"));
    let input = input();
    write_local(&dir.join("ds"), &input);
    upload_dir(&own.root("stopped/ds"), &dir.join("ds"));
    let mut opts = own.opts();
    opts.extend(["timeout_ms=500".to_string(), "retries=1".to_string()]);
    let ds = Dataset::open_url("s3://dc-test/stopped/ds", &as_strs(&opts)).unwrap();
    let order = ds.gene_order().unwrap().to_vec();
    check_gather(&ds, &input, Some(&order), &[3, 40]);
    drop(own);
    // Tiles not read yet: the requests (planning's, then the gather's) find no server.
    let cells = [120u64, 200];
    let start = Instant::now();
    let planned = ds.batch_nnz(&cells).unwrap_err();
    let nnz: usize = cells
        .iter()
        .map(|&c| (input.indptr[c as usize + 1] - input.indptr[c as usize]) as usize)
        .sum();
    let mut indptr = vec![0i64; cells.len() + 1];
    let mut indices = vec![0i32; nnz];
    let mut values = vec![0i32; nnz];
    let gathered = ds
        .gather(
            &cells,
            &mut indptr,
            &mut indices,
            ValuesOut::I32(&mut values),
        )
        .unwrap_err();
    for e in [planned, gathered] {
        assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
        assert!(
            e.message.contains("s3://dc-test/stopped/ds/tiles/"),
            "{}",
            e.message
        );
        assert!(e.message.contains("GET"), "{}", e.message);
    }
    // A hang guard, not a performance threshold.
    assert!(start.elapsed() < Duration::from_secs(60));
}

/// A server on 127.0.0.1 that answers `n` requests with 404 and hands back each request's
/// head (request line and headers, lower-cased names).
fn recording_server(n: usize) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for stream in listener.incoming().take(n) {
            let mut stream = stream.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            heads.push(String::from_utf8_lossy(&head).to_ascii_lowercase());
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
        heads
    });
    (addr, handle)
}

#[test]
fn gs_and_az_urls_reach_their_backends() {
    // Google Cloud Storage: GET <base>/<bucket>/<object name> with a bearer token.
    let (addr, server) = recording_server(1);
    let opts = [
        format!("google_base_url={addr}"),
        "google_bearer_token=gcs-token-QQQ".to_string(),
        "allow_http=true".to_string(),
        "retries=0".to_string(),
    ];
    let e = Dataset::open_url("gs://gbucket/some/ds", &as_strs(&opts))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
    assert!(
        e.message.contains("gs://gbucket/some/ds") && e.message.contains("manifest.json"),
        "{}",
        e.message
    );
    let heads = server.join().unwrap();
    assert!(
        // The object name is one percent-encoded path segment (lower-cased above).
        heads[0].starts_with("get /gbucket/some%2fds%2fmanifest%2ejson "),
        "{}",
        heads[0]
    );
    assert!(
        heads[0].contains("authorization: bearer gcs-token-qqq"),
        "{}",
        heads[0]
    );

    // Azure Blob Storage: GET <account endpoint>/<container>/<blob>, with x-ms-version.
    let (addr, server) = recording_server(1);
    let opts = [
        format!("azure_storage_endpoint={addr}"),
        "azure_storage_account_name=acct".to_string(),
        "azure_skip_signature=true".to_string(),
        "allow_http=true".to_string(),
        "retries=0".to_string(),
    ];
    let e = Dataset::open_url("az://cont/some/ds", &as_strs(&opts))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
    assert!(
        e.message.contains("az://cont/some/ds") && e.message.contains("manifest.json"),
        "{}",
        e.message
    );
    let heads = server.join().unwrap();
    assert!(
        heads[0].starts_with("get /cont/some/ds/manifest.json "),
        "{}",
        heads[0]
    );
    assert!(heads[0].contains("x-ms-version:"), "{}", heads[0]);
}
