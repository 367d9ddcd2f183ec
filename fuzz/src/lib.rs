//! What the fuzz targets share: the readers every target runs on its input (through the C
//! ABI, as users reach the library), the base dataset and stores whose single members the
//! member targets replace, and what counts as a finding.
//!
//! A finding is
//! * a panic that reaches the target (libFuzzer reports it as a crash), or a crash;
//! * `DC_ERR_INTERNAL` from any call: a panic caught at the C boundary (a library bug);
//! * with `DC_FUZZ_STRICT=1`: a dependency's panic contained by the library and reported as
//!   `DC_ERR_FORMAT` (to find where validation before decoding is still missing).

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use deltacells::ffi::*;

/// Fails the run (a finding) when `status` says the library panicked; true on `DC_OK`.
pub fn ok(status: dc_status, call: &str) -> bool {
    if status == DC_ERR_INTERNAL {
        panic!("{call}: DC_ERR_INTERNAL: {}", last_error());
    }
    if status != DC_OK {
        let msg = last_error();
        if msg.is_empty() {
            panic!("{call}: {} without a message", status_name(status));
        }
        let _ = ERRORS.try_with(|e| {
            let mut e = e.borrow_mut();
            if e.len() < 64 {
                e.push((status, msg));
            }
        });
    }
    strict_check(call);
    status == DC_OK
}

thread_local! {
    /// The error statuses and messages of the calls checked by [`ok`] on this thread (the
    /// first 64), for tests that look at what an input was rejected with.
    static ERRORS: std::cell::RefCell<Vec<(dc_status, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The errors [`ok`] saw on this thread since the last call, oldest first.
pub fn take_errors() -> Vec<(dc_status, String)> {
    ERRORS
        .try_with(|e| std::mem::take(&mut *e.borrow_mut()))
        .unwrap_or_default()
}

fn strict_check(call: &str) {
    static STRICT: OnceLock<bool> = OnceLock::new();
    if *STRICT.get_or_init(|| std::env::var_os("DC_FUZZ_STRICT").is_some_and(|v| v == "1")) {
        let n = deltacells::contain::contained_panics();
        if n > 0 {
            panic!(
                "{call}: a dependency panicked ({n} contained): {}",
                last_error()
            );
        }
    }
}

pub fn last_error() -> String {
    // SAFETY: dc_last_error never returns NULL; the string is valid until the next call.
    unsafe { CStr::from_ptr(dc_last_error()) }
        .to_string_lossy()
        .into_owned()
}

pub fn status_name(s: dc_status) -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(dc_status_name(s)) }
        .to_string_lossy()
        .into_owned()
}

/// Reads every batch of a stream the library produced; the stream is released.
pub fn drain(mut stream: FFI_ArrowArrayStream, call: &str) -> usize {
    // SAFETY: the stream was just written by the library and is owned here.
    let reader = match unsafe { RecordBatchStreamReader::from_raw(&mut stream) } {
        Ok(r) => r,
        Err(e) => panic!("{call}: the library's stream has no schema: {e}"),
    };
    let mut rows = 0;
    for b in reader {
        match b {
            Ok(b) => rows += b.num_rows(),
            Err(e) => {
                let m = e.to_string();
                if m.contains("internal error") {
                    panic!("{call}: a stream batch failed with an internal error: {m}");
                }
                break;
            }
        }
    }
    rows
}

static SCRATCH_BASE: OnceLock<PathBuf> = OnceLock::new();
static STORES: OnceLock<PathBuf> = OnceLock::new();

/// Sets the directories the harness uses instead of `$DC_FUZZ_SCRATCH` / `$DC_FUZZ_STORES`
/// (the replay test); before the first use, later calls are ignored.
pub fn use_dirs(scratch_base: &Path, stores: Option<&Path>) {
    let _ = SCRATCH_BASE.set(scratch_base.to_path_buf());
    if let Some(s) = stores {
        let _ = STORES.set(s.to_path_buf());
    }
}

/// A private scratch directory for this process (tmpfs when there is one).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = SCRATCH_BASE
            .get()
            .cloned()
            .or_else(|| std::env::var_os("DC_FUZZ_SCRATCH").map(PathBuf::from))
            .unwrap_or_else(|| {
                let shm = Path::new("/dev/shm");
                if shm.is_dir() {
                    shm.to_path_buf()
                } else {
                    std::env::temp_dir()
                }
            });
        let d = base.join(format!("dc-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch directory");
        d
    })
}

/// Writes `bytes` to `name` in the scratch directory and returns its path.
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, bytes).expect("scratch file");
    p
}

fn cstr(p: &Path) -> CString {
    CString::new(p.to_str().expect("UTF-8 path")).expect("no NUL")
}

/// Opens the dataset at `path` and reads everything through the C ABI: info, every tile,
/// gathers across tiles, gene order, every var name, the var table and every obs column.
pub fn read_dataset(path: &Path) {
    let p = cstr(path);
    let mut ds: *mut dc_dataset = std::ptr::null_mut();
    // SAFETY: valid C string and out-pointer; every later call gets the live handle.
    unsafe {
        if !ok(dc_dataset_open(p.as_ptr(), &mut ds), "dc_dataset_open") {
            return;
        }
        // The obs cache would hand back columns of an earlier input with the same
        // fingerprint: point it somewhere it cannot be created.
        let nowhere = CString::new("/dev/null/no-cache").unwrap();
        ok(
            dc_dataset_set_cache_dir(ds, nowhere.as_ptr()),
            "set_cache_dir",
        );
        ok(dc_dataset_set(ds, DC_DATASET_THREADS, 1), "dc_dataset_set");
        let mut info = dc_dataset_info::default();
        if ok(dc_dataset_info_get(ds, &mut info), "dc_dataset_info_get") {
            read_dataset_cells(ds, &info);
            read_dataset_parts(ds, &info);
        }
        dc_dataset_free(ds);
    }
}

/// # Safety
/// `ds` is a live dataset handle.
unsafe fn read_dataset_cells(ds: *mut dc_dataset, info: &dc_dataset_info) {
    for t in 0..info.n_tiles.min(64) {
        let (mut first, mut n, mut nnz) = (0u64, 0u64, 0u64);
        // SAFETY: live handle, valid out-pointers.
        if !ok(
            unsafe { dc_dataset_tile_bounds(ds, t, &mut first, &mut n, &mut nnz) },
            "tile_bounds",
        ) || n > 1 << 20
            || nnz > 1 << 24
        {
            continue;
        }
        let mut indptr = vec![0i64; n as usize + 1];
        let mut indices = vec![0i32; nnz as usize];
        let mut values = vec![0i32; nnz as usize];
        let mut got = 0u64;
        // SAFETY: buffers of n + 1 and nnz elements.
        ok(
            unsafe {
                dc_dataset_read_tile(
                    ds,
                    t,
                    DC_INT32,
                    indptr.as_mut_ptr(),
                    indices.as_mut_ptr(),
                    values.as_mut_ptr().cast(),
                    nnz,
                    &mut got,
                )
            },
            "read_tile",
        );
    }
    // Every cell, backwards (a gather across all tiles), then in float32.
    let n = info.n_cells.min(1 << 16);
    let cells: Vec<u64> = (0..n).rev().collect();
    let mut nnz = 0u64;
    // SAFETY: `cells` holds n cells.
    if !ok(
        unsafe { dc_dataset_batch_nnz(ds, cells.as_ptr(), cells.len(), &mut nnz) },
        "batch_nnz",
    ) || nnz > 1 << 24
    {
        return;
    }
    for dtype in [DC_INT32, DC_FLOAT32] {
        let mut indptr = vec![0i64; cells.len() + 1];
        let mut indices = vec![0i32; nnz as usize];
        let mut values = vec![0i32; nnz as usize];
        let mut got = 0u64;
        // SAFETY: buffers sized for the request (float32 has the width of int32).
        ok(
            unsafe {
                dc_dataset_gather(
                    ds,
                    cells.as_ptr(),
                    cells.len(),
                    dtype,
                    indptr.as_mut_ptr(),
                    indices.as_mut_ptr(),
                    values.as_mut_ptr().cast(),
                    nnz,
                    &mut got,
                )
            },
            "gather",
        );
    }
}

/// # Safety
/// `ds` is a live dataset handle.
unsafe fn read_dataset_parts(ds: *mut dc_dataset, info: &dc_dataset_info) {
    let n_genes = info.n_genes.min(1 << 20) as usize;
    let mut order = vec![0i32; n_genes];
    // SAFETY: live handle; `order` holds n_genes values.
    unsafe {
        ok(
            dc_dataset_gene_order(ds, order.as_mut_ptr(), order.len()),
            "gene_order",
        );
        for g in 0..n_genes as u32 {
            let mut name: *const c_char = std::ptr::null();
            if !ok(dc_dataset_var_name(ds, g, &mut name), "var_name") {
                break;
            }
        }
        let mut s = FFI_ArrowArrayStream::empty();
        if ok(dc_dataset_var_table(ds, &mut s), "var_table") {
            drain(s, "var_table");
        }
        let mut s = FFI_ArrowArrayStream::empty();
        if ok(dc_dataset_obs(ds, std::ptr::null(), 0, &mut s), "obs") {
            drain(s, "obs");
        }
    }
}

/// Opens the ChromData store at `path` and runs every query of the C ABI on it.
pub fn read_chromdata(path: &Path) {
    let p = cstr(path);
    let mut cd: *mut dc_chromdata = std::ptr::null_mut();
    // SAFETY: valid C string and out-pointer; every later call gets the live handle.
    unsafe {
        if !ok(dc_chromdata_open(p.as_ptr(), &mut cd), "dc_chromdata_open") {
            return;
        }
        let mut info = std::mem::zeroed::<dc_chromdata_info>();
        ok(dc_chromdata_info_get(cd, &mut info), "info");
        query_chromdata(cd);
        dc_chromdata_free(cd);
    }
}

/// The first values of a one-column utf8 stream (keys, categories).
fn strings(mut stream: FFI_ArrowArrayStream, limit: usize) -> Vec<String> {
    use arrow_array::cast::AsArray;
    let mut out = Vec::new();
    // SAFETY: a stream the library just wrote, owned here.
    if let Ok(r) = unsafe { RecordBatchStreamReader::from_raw(&mut stream) } {
        for b in r.flatten() {
            if let Some(a) = b.columns().first().and_then(|c| c.as_string_opt::<i32>()) {
                // (values with a NUL cannot be passed back through the C API: skipped)
                out.extend(
                    a.iter()
                        .flatten()
                        .filter(|v| !v.contains('\0'))
                        .take(limit)
                        .map(str::to_string),
                );
            }
        }
    }
    out.truncate(limit);
    out
}

/// # Safety
/// `cd` is a live ChromData handle.
unsafe fn query_chromdata(cd: *mut dc_chromdata) {
    let c = |s: &str| CString::new(s).unwrap();
    let stream = || FFI_ArrowArrayStream::empty();
    // SAFETY (whole block): live handle, valid C strings, out-pointers to owned streams.
    unsafe {
        for name in ["bins", "bin_tracks", "traces", "cells"] {
            let mut s = stream();
            if ok(dc_chromdata_table(cd, c(name).as_ptr(), &mut s), "table") {
                drain(s, "table");
            }
        }
        for kind in [
            "layers",
            "intervals",
            "points",
            "cellm",
            "binm",
            "results",
            "uns",
        ] {
            let mut s = stream();
            if !ok(dc_chromdata_keys(cd, c(kind).as_ptr(), &mut s), "keys") {
                continue;
            }
            for key in strings(s, 4) {
                let mut s = stream();
                let name = c(&format!("{kind}/{key}"));
                if ok(dc_chromdata_table(cd, name.as_ptr(), &mut s), "table") {
                    drain(s, "table");
                }
            }
        }
        let mut ids = Vec::new();
        for col in ["trace_id", "cell_id", "chrom"] {
            let mut s = stream();
            let (t, cc) = (c("spots"), c(col));
            let got = ok(
                dc_chromdata_categories(cd, t.as_ptr(), cc.as_ptr(), &mut s),
                "categories",
            );
            ids.push(if got { strings(s, 3) } else { Vec::new() });
        }
        type Get = unsafe extern "C" fn(
            *mut dc_chromdata,
            *const c_char,
            *const *const c_char,
            usize,
            *mut FFI_ArrowArrayStream,
        ) -> dc_status;
        let gets: [(Get, &str); 3] = [
            (dc_chromdata_get_trace, "get_trace"),
            (dc_chromdata_get_cell, "get_cell"),
            (dc_chromdata_get_chrom, "get_chrom"),
        ];
        for ((get, what), keys) in gets.into_iter().zip(&ids) {
            for k in keys.iter().map(String::as_str).chain(["no-such-id"]) {
                let mut s = stream();
                if ok(get(cd, c(k).as_ptr(), std::ptr::null(), 0, &mut s), what) {
                    drain(s, what);
                }
            }
        }
        for batch in [1u64, 3] {
            let mut s = stream();
            if ok(
                dc_chromdata_iter_traces(cd, batch, std::ptr::null(), 0, &mut s),
                "iter",
            ) {
                drain(s, "iter_traces");
            }
            let mut s = stream();
            if ok(
                dc_chromdata_iter_cells(cd, batch, std::ptr::null(), 0, &mut s),
                "iter",
            ) {
                drain(s, "iter_cells");
            }
        }
        for original in [0, 1] {
            let mut s = stream();
            if ok(
                dc_chromdata_read_spots(cd, original, std::ptr::null(), 0, &mut s),
                "spots",
            ) {
                drain(s, "read_spots");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The base dataset and stores of the member targets
// ---------------------------------------------------------------------------------------

/// Writes a small dataset with every optional part to `path` (deterministic bytes): 70 cells
/// in 5 tiles of 2 chunks, counts above 65535 (exceptions), a gene order, var names, a var
/// table, and obs (a category, text, float, integer and bool column) in 3 shards.
pub fn write_dataset(path: &Path) -> deltacells::Result<()> {
    use arrow_array::{
        ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray,
    };
    use deltacells::dataset::{DatasetWriter, WriterOptions};
    use std::sync::Arc;
    const N_CELLS: usize = 70;
    const N_GENES: u32 = 40;
    let opts = WriterOptions {
        tile_size: 16,
        n_chunks: 2,
        zstd_level: 3,
        threads: 1,
        overwrite: true,
        obs_tiles_per_file: 2,
    };
    let mut w = DatasetWriter::create(path, N_GENES, opts)?;
    let order: Vec<i32> = (0..N_GENES as i32).rev().collect();
    w.set_gene_order(&order)?;
    let names: Vec<String> = (0..N_GENES).map(|g| format!("gene{g}")).collect();
    w.set_var_names(&names)?;
    let var = RecordBatch::try_from_iter([
        (
            "gene_ids",
            Arc::new(StringArray::from(names.clone())) as ArrayRef,
        ),
        (
            "mean",
            Arc::new(Float64Array::from_iter_values(
                (0..N_GENES).map(|g| g as f64 * 0.5),
            )),
        ),
    ])
    .expect("var table");
    w.set_var_table(var)?;
    let (mut indptr, mut indices, mut values) = (vec![0i64], Vec::new(), Vec::new());
    for c in 0..N_CELLS {
        for g in (c % 7..N_GENES as usize).step_by(1 + c % 5) {
            indices.push(g as i32);
            values.push(if (c + g) % 23 == 0 {
                70_000 + g as i32
            } else {
                1 + ((c * g) % 9) as i32
            });
        }
        indptr.push(indices.len() as i64);
    }
    w.append_csr(N_CELLS as u64, &indptr, &indices, &values)?;
    let kinds = ["T", "B", "NK"];
    let cell_type: DictionaryArray<arrow_array::types::Int32Type> =
        (0..N_CELLS).map(|c| kinds[c % 3]).collect();
    let obs = RecordBatch::try_from_iter([
        ("cell_type", Arc::new(cell_type) as ArrayRef),
        (
            "barcode",
            Arc::new(StringArray::from_iter_values(
                (0..N_CELLS).map(|c| format!("AC{c:04}")),
            )),
        ),
        (
            "score",
            Arc::new(Float64Array::from_iter(
                (0..N_CELLS).map(|c| (c % 4 != 0).then_some(c as f64 / 3.0)),
            )) as ArrayRef,
        ),
        (
            "n_genes",
            Arc::new(Int32Array::from_iter_values(0..N_CELLS as i32)),
        ),
        (
            "ok",
            Arc::new(BooleanArray::from_iter(
                (0..N_CELLS).map(|c| (c % 5 != 0).then_some(c % 2 == 0)),
            )) as ArrayRef,
        ),
    ])
    .expect("obs batch");
    w.append_obs(obs)?;
    w.finish()
}

/// The parts of a dataset the dataset targets replace one at a time.
#[derive(Debug, Clone, Copy)]
pub enum DatasetMember {
    Manifest,
    GeneOrder,
    VarNames,
    VarTable,
    ObsShard,
    Tile,
    ObsSchema,
}

/// Store-relative path of `m` in the dataset at `root` (the first obs shard / tile 1).
pub fn member_path(root: &Path, m: DatasetMember) -> PathBuf {
    let first_in = |dir: &str| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .expect("dataset subdirectory")
            .map(|e| e.expect("entry").path())
            .collect();
        v.sort();
        v.into_iter().next().expect("a file")
    };
    match m {
        DatasetMember::Manifest => root.join("manifest.json"),
        DatasetMember::GeneOrder => root.join("gene_order.npy"),
        DatasetMember::VarNames => root.join("var_names.txt"),
        DatasetMember::VarTable => root.join("var.parquet"),
        DatasetMember::ObsShard => first_in("obs"),
        DatasetMember::Tile => root.join("tiles/tile_000001.dct"),
        DatasetMember::ObsSchema => root.join("obs/schema.json"),
    }
}

/// Runs the dataset readers on the base dataset with member `m` replaced by `bytes`.
pub fn fuzz_dataset_member(m: DatasetMember, bytes: &[u8]) {
    static BASE: OnceLock<(PathBuf, [PathBuf; 7])> = OnceLock::new();
    let (root, members) = BASE.get_or_init(|| {
        let root = scratch().join("base.dc");
        write_dataset(&root).expect("base dataset");
        use DatasetMember::*;
        let members = [
            Manifest, GeneOrder, VarNames, VarTable, ObsShard, Tile, ObsSchema,
        ]
        .map(|m| member_path(&root, m));
        (root, members)
    });
    std::fs::write(&members[m as usize], bytes).expect("write member");
    read_dataset(root);
}

/// The base ChromData stores (directory form) of the layouts 2.0, 2.1 and 2.2, as written by
/// the independent Python writer (tests/chromdata/make_stores.py) into `$DC_FUZZ_STORES`.
pub const BASE_STORES: [&str; 3] = [
    "main_20.chromdata.zarr",
    "main_21.chromdata.zarr",
    "main_22.chromdata.zarr",
];

/// Every file of the store at `root`, store-relative, sorted.
pub fn store_members(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("store directory").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Where make_stores.py wrote the base stores.
pub fn stores_dir() -> PathBuf {
    if let Some(s) = STORES.get() {
        return s.clone();
    }
    PathBuf::from(std::env::var_os("DC_FUZZ_STORES").expect(
        "DC_FUZZ_STORES: the output directory of tests/chromdata/make_stores.py (scripts/fuzz.sh sets it)",
    ))
}

/// Runs every query on a base store with one member replaced: `input[0]` picks the store,
/// `input[1]` the member (in `store_members` order), the rest is its new content. The
/// member is restored afterwards.
pub fn fuzz_store_member(input: &[u8]) {
    type Base = Vec<(PathBuf, Vec<(PathBuf, Vec<u8>)>)>;
    static BASE: OnceLock<Base> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        BASE_STORES
            .iter()
            .map(|name| {
                let dst = scratch().join(name);
                copy_tree(&stores_dir().join(name), &dst);
                let members = store_members(&dst)
                    .into_iter()
                    .map(|m| {
                        let p = dst.join(&m);
                        let bytes = std::fs::read(&p).expect("member");
                        (p, bytes)
                    })
                    .collect();
                (dst, members)
            })
            .collect()
    });
    let [s, m, content @ ..] = input else {
        return;
    };
    let (root, members) = &base[*s as usize % base.len()];
    let (path, original) = &members[*m as usize % members.len()];
    std::fs::write(path, content).expect("write member");
    read_chromdata(root);
    std::fs::write(path, original).expect("restore member");
}

pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(src).expect("read_dir").flatten() {
        let (s, d) = (e.path(), dst.join(e.file_name()));
        if s.is_dir() {
            copy_tree(&s, &d);
        } else {
            std::fs::copy(&s, &d).expect("copy");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Single-input targets
// ---------------------------------------------------------------------------------------

/// Inspects and decodes `blob` as a tile, in int32 and float32, and once with a buffer one
/// short (which must be `DC_ERR_BUFFER_TOO_SMALL` reporting the size).
pub fn fuzz_tile(blob: &[u8], verify_crc: bool) {
    let crc = i32::from(verify_crc);
    let mut info = dc_tile_info::default();
    // SAFETY: `blob` is readable for its length; `info` is writable.
    if !ok(
        unsafe { dc_tile_inspect(blob.as_ptr(), blob.len(), crc, &mut info) },
        "inspect",
    ) || info.nnz > 1 << 24
        || info.n_cells > 1 << 22
    {
        return;
    }
    let mut indptr = vec![0i64; info.n_cells as usize + 1];
    let mut indices = vec![0i32; info.nnz as usize];
    let mut values = vec![0i32; info.nnz as usize];
    for dtype in [DC_INT32, DC_FLOAT32] {
        let mut nnz = 0u64;
        // SAFETY: buffers of n_cells + 1 and nnz elements (float32 is 4 bytes like int32).
        let s = unsafe {
            dc_tile_decode(
                blob.as_ptr(),
                blob.len(),
                1,
                crc,
                dtype,
                indptr.as_mut_ptr(),
                indices.as_mut_ptr(),
                values.as_mut_ptr().cast(),
                info.nnz,
                &mut nnz,
            )
        };
        if ok(s, "decode") {
            assert_eq!(nnz, info.nnz, "decode and inspect disagree on nnz");
        }
    }
    if info.nnz > 0 {
        let mut needed = 0u64;
        // SAFETY: as above, with a capacity one short.
        let s = unsafe {
            dc_tile_decode(
                blob.as_ptr(),
                blob.len(),
                1,
                crc,
                DC_INT32,
                indptr.as_mut_ptr(),
                indices.as_mut_ptr(),
                values.as_mut_ptr().cast(),
                info.nnz - 1,
                &mut needed,
            )
        };
        if s == DC_ERR_BUFFER_TOO_SMALL {
            assert_eq!(needed, info.nnz, "BUFFER_TOO_SMALL reports the wrong size");
        } else {
            ok(s, "decode (short buffer)");
        }
    }
}

/// Parses `text` as manifest.json; what parses must be emitted and parsed back unchanged.
pub fn fuzz_manifest(text: &[u8]) {
    use deltacells::dataset::Manifest;
    if let Ok(m) = contained("Manifest::parse", || Manifest::parse(text)) {
        let json = m.to_json().expect("a parsed manifest can be written");
        let back = Manifest::parse(&json).expect("the written manifest parses");
        assert_eq!(back, m, "manifest round trip changed it");
    }
}

/// Parses `bytes` as a gene order (.npy of int32) of `bytes[0]` entries.
pub fn fuzz_npy(bytes: &[u8]) {
    if let [n, npy @ ..] = bytes {
        let _ = contained("npy", || {
            deltacells::dataset::npy::read_i32(npy, u64::from(*n), "gene_order.npy")
        });
    }
}

/// Runs `f` (a Rust API call, outside the C guard): a panic is a finding, with the call.
pub fn contained<T>(call: &str, f: impl FnOnce() -> T) -> T {
    let r = f();
    strict_check(call);
    r
}

/// Imports `csv` as FOF-CT into a store; a store that was written must open and answer.
pub fn fuzz_fofct(csv: &[u8]) {
    use deltacells::chromdata::{fofct, WriterOptions};
    let input = scratch_file("input.fofct.csv", csv);
    let out = scratch().join("fofct.chromdata.zarr");
    let opts = WriterOptions {
        overwrite: true,
        threads: 1,
        memory_budget: 16 << 20,
        ..WriterOptions::default()
    };
    if contained("fofct::import", || fofct::import(&input, &out, opts)).is_ok() {
        read_chromdata(&out);
    }
}

/// Reads `text` as a Matrix Market file, genes as rows and as columns. The converter keeps
/// 8 bytes per declared cell, entries or not: the matrix is capped at 256 MiB so that a size
/// line announcing a billion cells is an error here, not the fuzzer's 2 GB memory limit.
pub fn fuzz_mtx(text: &[u8]) {
    use deltacells::convert::mtx::read_matrix_market_capped;
    for genes_are_rows in [true, false] {
        let mut r = std::io::Cursor::new(text);
        let _ = contained("read_matrix_market", || {
            read_matrix_market_capped(&mut r, Path::new("input.mtx"), genes_are_rows, 256 << 20)
        });
    }
}

/// Opens `bytes` as an .h5ad file and reads all of it through the converter's source.
pub fn fuzz_h5ad(bytes: &[u8]) {
    use deltacells::convert::h5ad::H5adSource;
    use deltacells::convert::CellSource;
    let path = scratch_file("input.h5ad", bytes);
    let Ok(mut src) = contained("H5adSource::open", || H5adSource::open(&path)) else {
        return;
    };
    let n = src.n_cells().min(1 << 16);
    let _ = contained("h5ad gene_totals", || src.gene_totals());
    let _ = contained("h5ad read_cells", || src.read_cells(0, n));
    let _ = contained("h5ad var_names", || src.var_names());
    let _ = contained("h5ad tables", || src.tables());
}
