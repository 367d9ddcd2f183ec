//! The dataset side of the C ABI as the benchmarks call it (shared by benches/reads.rs and
//! benches/remote.rs): a handle opened by path or URL, gathers, tiles and batch iterators
//! into a caller's reused buffers, each call made as a C program makes it. A failed call
//! panics with the library's message: the benchmarks' inputs are valid.

// Each benchmark uses its own part of this module.
#![allow(dead_code)]

use std::ffi::{c_char, c_void, CStr, CString};

use deltacells::ffi as c;

/// Panics with the library's message unless `s` is `DC_OK`.
pub fn ok(s: c::dc_status, what: &str) {
    if s != c::DC_OK {
        // SAFETY: dc_last_error returns a NUL-terminated string valid until the next call
        // on this thread.
        let msg = unsafe { CStr::from_ptr(c::dc_last_error()) };
        panic!("{what}: status {s}: {}", msg.to_string_lossy());
    }
}

/// Calls `f` with `source` and `options` as C strings (the path, the array of option
/// pointers and its length), alive for the call.
pub fn with_c_args(
    source: &str,
    options: &[String],
    f: impl FnOnce(*const c_char, *const *const c_char, usize),
) {
    let p = CString::new(source).unwrap();
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap())
        .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    f(p.as_ptr(), ptrs.as_ptr(), ptrs.len());
}

/// A caller's reused output buffers (float32 counts).
pub struct Csr {
    pub ip: Vec<i64>,
    pub ix: Vec<i32>,
    pub vs: Vec<f32>,
}

impl Csr {
    /// Room for `rows` rows and `nnz` nonzeros.
    pub fn new(rows: usize, nnz: usize) -> Csr {
        Csr {
            ip: vec![0; rows + 1],
            ix: vec![0; nnz],
            vs: vec![0.0; nnz],
        }
    }

    pub fn capacity(&self) -> u64 {
        self.ix.len() as u64
    }
}

/// A dataset handle of the C ABI.
pub struct CDataset(pub *mut c::dc_dataset);

impl CDataset {
    /// `dc_dataset_open_opts` of a path or URL with `key=value` options (none: as
    /// `dc_dataset_open`), default settings.
    pub fn open(source: &str, options: &[String]) -> CDataset {
        let mut h = std::ptr::null_mut();
        with_c_args(source, options, |p, opts, n| {
            // SAFETY: `p` and the `n` options at `opts` are NUL-terminated strings alive for
            // the call (with_c_args); `h` is writable.
            ok(
                unsafe { c::dc_dataset_open_opts(p, opts, n, &mut h) },
                "dc_dataset_open_opts",
            )
        });
        CDataset(h)
    }

    pub fn set(&self, p: c::dc_dataset_param, v: i64) {
        // SAFETY: a live handle.
        ok(unsafe { c::dc_dataset_set(self.0, p, v) }, "dc_dataset_set");
    }

    /// Decode threads per call (0 = the library's default: all cores).
    pub fn threads(&self, n: usize) {
        self.set(c::DC_DATASET_THREADS, n as i64);
    }

    /// The decoded-data cache's budget (0: off, every read decodes again).
    pub fn cache_bytes(&self, bytes: i64) {
        self.set(c::DC_DATASET_CACHE_BYTES, bytes);
    }

    /// Empties the decoded-data cache and gives it `bytes` again.
    pub fn fresh_cache(&self, bytes: i64) {
        self.cache_bytes(0);
        self.cache_bytes(bytes);
    }

    pub fn batch_nnz(&self, cells: &[u64]) -> u64 {
        let mut nnz = 0;
        // SAFETY: a live handle; `cells` holds len values; `nnz` is writable.
        ok(
            unsafe { c::dc_dataset_batch_nnz(self.0, cells.as_ptr(), cells.len(), &mut nnz) },
            "dc_dataset_batch_nnz",
        );
        nnz
    }

    /// A block-shuffled order of all `n` cells (`dc_dataset_shuffled_order`).
    pub fn shuffled(&self, seed: u64, window_tiles: u32, n: usize) -> Vec<u64> {
        let mut order = vec![0u64; n];
        // SAFETY: a live handle; `order` has room for n = n_cells values.
        ok(
            unsafe {
                c::dc_dataset_shuffled_order(self.0, seed, window_tiles, order.as_mut_ptr(), n)
            },
            "dc_dataset_shuffled_order",
        );
        order
    }

    /// `dc_dataset_gather` of `cells`; returns the nonzeros.
    pub fn gather(&self, cells: &[u64], out: &mut Csr) -> u64 {
        let mut nnz = 0;
        assert!(out.ip.len() > cells.len());
        // SAFETY: a live handle; indptr has room for n + 1 values (asserted), indices and
        // values for `capacity` each; no buffer overlaps another.
        ok(
            unsafe {
                c::dc_dataset_gather(
                    self.0,
                    cells.as_ptr(),
                    cells.len(),
                    c::DC_FLOAT32,
                    out.ip.as_mut_ptr(),
                    out.ix.as_mut_ptr(),
                    out.vs.as_mut_ptr().cast::<c_void>(),
                    out.capacity(),
                    &mut nnz,
                )
            },
            "dc_dataset_gather",
        );
        nnz
    }

    /// `dc_dataset_read_tile`; returns the nonzeros. `out.ip` must hold the tile's rows + 1.
    pub fn read_tile(&self, tile: u64, out: &mut Csr) -> u64 {
        let mut nnz = 0;
        // SAFETY: as in `gather`; indptr is sized for the largest tile by the caller.
        ok(
            unsafe {
                c::dc_dataset_read_tile(
                    self.0,
                    tile,
                    c::DC_FLOAT32,
                    out.ip.as_mut_ptr(),
                    out.ix.as_mut_ptr(),
                    out.vs.as_mut_ptr().cast::<c_void>(),
                    out.capacity(),
                    &mut nnz,
                )
            },
            "dc_dataset_read_tile",
        );
        nnz
    }

    /// Every batch of `order` through `dc_dataset_batches` (read-ahead `read_ahead`) and
    /// `dc_batches_next`, as a training loop takes them; returns (rows, nonzeros) delivered.
    /// `out` must have room for the largest batch.
    pub fn batches_pass(
        &self,
        order: &[u64],
        batch_size: usize,
        read_ahead: u32,
        out: &mut Csr,
    ) -> (u64, u64) {
        let mut b = std::ptr::null_mut();
        // SAFETY: a live handle; `order` holds len values; `b` is writable.
        ok(
            unsafe {
                c::dc_dataset_batches(
                    self.0,
                    order.as_ptr(),
                    order.len(),
                    batch_size,
                    read_ahead,
                    &mut b,
                )
            },
            "dc_dataset_batches",
        );
        let (mut total_rows, mut total_nnz) = (0, 0);
        loop {
            let (mut rows, mut nnz) = (0u64, 0u64);
            // SAFETY: a live iterator; indptr has room for batch_size + 1 values, indices
            // and values for `capacity` each; no buffer overlaps another.
            ok(
                unsafe {
                    c::dc_batches_next(
                        b,
                        c::DC_FLOAT32,
                        out.ip.as_mut_ptr(),
                        out.ix.as_mut_ptr(),
                        out.vs.as_mut_ptr().cast::<c_void>(),
                        out.capacity(),
                        &mut rows,
                        &mut nnz,
                    )
                },
                "dc_batches_next",
            );
            if rows == 0 {
                break;
            }
            total_rows += rows;
            total_nnz += nnz;
        }
        // SAFETY: an iterator from dc_dataset_batches, freed once.
        unsafe { c::dc_batches_free(b) };
        (total_rows, total_nnz)
    }
}

impl Drop for CDataset {
    fn drop(&mut self) {
        // SAFETY: the handle from dc_dataset_open_opts, freed once.
        unsafe { c::dc_dataset_free(self.0) };
    }
}

/// The median (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
