//! AnnData `.h5ad` input (HDF5, read with the `hdf5-metno` binding of libhdf5).
//!
//! * `X` (or another matrix element, e.g. `layers/counts`, `raw/X`): a CSR group
//!   (`encoding-type` `csr_matrix`: `data`, `indices`, `indptr`, attribute `shape`), a CSC
//!   group (`csc_matrix`), or a dense 2-D dataset. Values of any integer or float dtype are
//!   accepted when they are whole counts in 0..=2^31-1; anything else is an error naming the
//!   element and the position. CSR and dense are streamed (a block of cells at a time, plus
//!   one pass for the gene totals); CSC is read whole and transposed in memory.
//! * `obs` / `var`: AnnData dataframes (`_index`, `column-order`) become Arrow record batches
//!   (see `tables`): categorical -> dictionary (int32 keys, string values; code -1 -> null;
//!   non-string categories are formatted as text), numeric -> the same Arrow type,
//!   bool -> boolean, nullable-integer / nullable-boolean -> with nulls, string arrays ->
//!   utf8. Other encodings are an error naming the column.
//! * var names: the var index.
//!
//! Every read through the binding runs in a `contain::decoding` scope (a panic of the
//! binding becomes a `Format` error) and in an `h5watch` scope naming the object read, with
//! its time budget (the CLI's watchdog ends a libhdf5 call that never returns).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float32Array, Float64Array, Int16Array, Int32Array,
    Int64Array, Int8Array, RecordBatch, StringArray, UInt16Array, UInt32Array, UInt64Array,
    UInt8Array,
};
use hdf5::types::{FloatSize, IntSize, TypeDescriptor, VarLenAscii, VarLenUnicode};
use hdf5_metno as hdf5;

use super::h5watch::{bulk, small, unwatched, STRING_BYTES};
use super::mtx::CellMatrix;
use super::source::CellSource;
use super::tables::{self, Tables};
use crate::contain::decoding;
use crate::error::{Error, ErrorKind, Result};

/// Entries read per HDF5 call when streaming (bounds memory: 16 bytes per entry).
const READ_BLOCK: usize = 1 << 22;

/// Whether `path` starts with the HDF5 signature (at offset 0; user blocks are not
/// considered, AnnData never writes them).
pub fn is_hdf5(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, &e))?;
    let mut sig = [0u8; 8];
    let n = f.read(&mut sig).map_err(|e| Error::io(path, &e))?;
    Ok(n == 8 && sig == *b"\x89HDF\r\n\x1a\n")
}

enum Layout {
    Csr {
        data: hdf5::Dataset,
        indices: hdf5::Dataset,
        indptr: Vec<i64>,
    },
    /// Read whole and transposed to cell-major at open.
    InMemory(CellMatrix),
    Dense(hdf5::Dataset),
}

/// An open `.h5ad` file.
pub struct H5adSource {
    path: PathBuf,
    /// Always Some until dropped (taken by `Drop`, to close it inside a watched scope).
    file: Option<hdf5::File>,
    /// Name of the matrix element ("X", "layers/counts", ...).
    x_name: String,
    layout: Layout,
    n_cells: u64,
    n_genes: u32,
}

fn h5err(path: &Path, what: &str, e: hdf5::Error) -> Error {
    Error::format(format!("{}: {what}: {e}", path.display()))
}

impl H5adSource {
    /// Opens `path` and its `X`.
    pub fn open(path: &Path) -> Result<H5adSource> {
        Self::open_matrix(path, "X")
    }

    /// Opens `path` with the counts in element `x_name` (e.g. `layers/counts`, `raw/X`).
    /// A panic of the hdf5 binding on the file's data is a `Format` error naming the file
    /// (`contain::decoding`); a crash of libhdf5 itself cannot be caught in-process (the CLI
    /// reads HDF5 inputs in a child process: docs/reliability.md §1).
    pub fn open_matrix(path: &Path, x_name: &str) -> Result<H5adSource> {
        decoding(path.display(), || {
            small(
                || format!("opening {x_name}"),
                || Self::open_unchecked(path, x_name),
            )
        })
    }

    fn open_unchecked(path: &Path, x_name: &str) -> Result<H5adSource> {
        let file = small(
            || "the file's superblock and root group".to_string(),
            || hdf5::File::open(path),
        )
        .map_err(|e| h5err(path, "cannot open as HDF5", e))?;
        let fail = |m: String| Error::format(format!("{}: {x_name}: {m}", path.display()));
        if !file.link_exists(x_name) {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{}: no '{x_name}' element (not an AnnData file?)",
                    path.display()
                ),
            ));
        }
        let kind = file
            .loc_type_by_name(x_name)
            .map_err(|e| h5err(path, x_name, e))?;
        let (layout, n_cells, n_genes) = if kind == hdf5::LocationType::Dataset {
            let ds = file.dataset(x_name).map_err(|e| h5err(path, x_name, e))?;
            let shape = ds.shape();
            if shape.len() != 2 {
                return Err(fail(format!(
                    "dense matrix with {} dimensions, expected 2",
                    shape.len()
                )));
            }
            (Layout::Dense(ds), shape[0] as u64, shape[1] as u64)
        } else {
            let g = file.group(x_name).map_err(|e| h5err(path, x_name, e))?;
            let enc = string_attr(&g, x_name, "encoding-type").map_err(|e| {
                fail(format!(
                    "no readable 'encoding-type' attribute ({})",
                    e.message
                ))
            })?;
            let shape = small(
                || format!("{x_name} attribute 'shape'"),
                || g.attr("shape").and_then(|a| a.read_raw::<i64>()),
            )
            .map_err(|e| h5err(path, &format!("{x_name} attribute 'shape'"), e))?;
            if shape.len() != 2 || shape.iter().any(|&s| s < 0) {
                return Err(fail(format!(
                    "attribute 'shape' is {shape:?}, expected 2 sizes"
                )));
            }
            let (rows, cols) = (shape[0] as u64, shape[1] as u64);
            let open = |n: &str| {
                small(|| format!("{x_name}/{n}"), || g.dataset(n))
                    .map_err(|e| h5err(path, &format!("{x_name}/{n}"), e))
            };
            let (data, indices) = (open("data")?, open("indices")?);
            let indptr_ds = open("indptr")?;
            let major = match enc.as_str() {
                "csr_matrix" => rows,
                "csc_matrix" => cols,
                other => {
                    return Err(fail(format!(
                        "encoding-type '{other}' is not supported (csr_matrix, csc_matrix or a dense array are)"
                    )))
                }
            };
            let indptr = bulk(
                || format!("{x_name}/indptr"),
                (major + 1) * 8,
                || indptr_ds.read_raw::<i64>(),
            )
            .map_err(|e| h5err(path, &format!("{x_name}/indptr"), e))?;
            check_indptr(&indptr, major, data.size() as u64, indices.size() as u64)
                .map_err(|m| fail(format!("indptr: {m}")))?;
            if enc == "csr_matrix" {
                (
                    Layout::Csr {
                        data,
                        indices,
                        indptr,
                    },
                    rows,
                    cols,
                )
            } else {
                let m = read_csc(path, x_name, &data, &indices, &indptr, rows, cols)?;
                (Layout::InMemory(m), rows, cols)
            }
        };
        if n_genes == 0 || n_genes > crate::tile::MAX_GENES {
            return Err(fail(format!("{n_genes} genes (columns): must be 1..2^31")));
        }
        Ok(H5adSource {
            path: path.to_path_buf(),
            file: Some(file),
            x_name: x_name.to_string(),
            layout,
            n_cells,
            n_genes: n_genes as u32,
        })
    }

    fn x_err(&self, m: String) -> Error {
        Error::format(format!("{}: {}: {m}", self.path.display(), self.x_name))
    }

    /// Reads `data` / `indices` entries a..b of a compressed layout.
    fn read_entries(
        &self,
        data: &hdf5::Dataset,
        indices: &hdf5::Dataset,
        a: usize,
        b: usize,
        minor: u64,
    ) -> Result<(Vec<i32>, Vec<i32>)> {
        let bytes = (b - a) as u64 * 8;
        let vals = bulk(
            || format!("{}/data entries {a}..{b}", self.x_name),
            bytes,
            || data.read_slice_1d::<f64, _>(a..b),
        )
        .map_err(|e| h5err(&self.path, &format!("{}/data", self.x_name), e))?;
        let idx = bulk(
            || format!("{}/indices entries {a}..{b}", self.x_name),
            bytes,
            || indices.read_slice_1d::<i64, _>(a..b),
        )
        .map_err(|e| h5err(&self.path, &format!("{}/indices", self.x_name), e))?;
        // Our own computing: no libhdf5 call.
        unwatched(|| {
            let mut v = Vec::with_capacity(vals.len());
            for (k, &x) in vals.iter().enumerate() {
                v.push(to_count(x).ok_or_else(|| {
                    self.x_err(format!(
                        "data[{}] is {x}, not a count (a whole number in 0..=2^31-1)",
                        a + k
                    ))
                })?);
            }
            let mut ix = Vec::with_capacity(idx.len());
            for (k, &i) in idx.iter().enumerate() {
                if i < 0 || i as u64 >= minor {
                    return Err(
                        self.x_err(format!("indices[{}] is {i}, outside 0..{minor}", a + k))
                    );
                }
                ix.push(i as i32);
            }
            Ok((v, ix))
        })
    }

    /// Rows lo..hi of the dense matrix as CSR.
    fn read_dense(&self, ds: &hdf5::Dataset, lo: u64, hi: u64) -> Result<CellMatrix> {
        let g = self.n_genes as usize;
        let mut m = CellMatrix {
            n_cells: (hi - lo) as usize,
            n_genes: self.n_genes,
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        };
        let step = (READ_BLOCK / g).max(1) as u64;
        let mut r = lo;
        while r < hi {
            let e = (r + step).min(hi);
            let block = bulk(
                || format!("{} rows {r}..{e}", self.x_name),
                (e - r) * g as u64 * 8,
                || ds.read_slice_2d::<f64, _>((r as usize..e as usize, ..)),
            )
            .map_err(|err| h5err(&self.path, &self.x_name, err))?;
            unwatched(|| -> Result<()> {
                for (i, row) in block.outer_iter().enumerate() {
                    for (j, &x) in row.iter().enumerate() {
                        let v = to_count(x).ok_or_else(|| {
                            self.x_err(format!(
                                "[{}, {j}] is {x}, not a count (a whole number in 0..=2^31-1)",
                                r as usize + i
                            ))
                        })?;
                        if v != 0 {
                            m.indices.push(j as i32);
                            m.values.push(v);
                        }
                    }
                    m.indptr.push(m.indices.len() as i64);
                }
                Ok(())
            })?;
            r = e;
        }
        Ok(m)
    }

    /// A dataframe group (`obs` or `var`) as a record batch, or None if absent.
    pub fn dataframe(&self, name: &str, n_rows: u64) -> Result<Option<RecordBatch>> {
        let file = self.file.as_ref().expect("open until dropped");
        let p = &self.path;
        let g = small(
            || format!("group '{name}'"),
            || file.link_exists(name).then(|| file.group(name)).transpose(),
        )
        .map_err(|e| h5err(p, name, e))?;
        let Some(g) = g else {
            return Ok(None);
        };
        let index_name = string_attr(&g, name, "_index").map_err(|e| {
            Error::format(format!(
                "{}: {name}: no readable '_index' attribute ({}); files of anndata < 0.7 are not supported",
                p.display(),
                e.message
            ))
        })?;
        let index_ds = small(|| format!("{name}/{index_name}"), || g.dataset(&index_name))
            .map_err(|e| h5err(p, &format!("{name}/{index_name}"), e))?;
        let index = read_strings(p, &format!("{name}/{index_name}"), &index_ds)?;
        if index.len() as u64 != n_rows {
            return Err(Error::format(format!(
                "{}: {name}/{index_name}: {} entries, X has {n_rows}",
                p.display(),
                index.len()
            )));
        }
        let order = string_array_attr(&g, name, "column-order")
            .map_err(|e| Error::format(format!("{}: {name}: {}", p.display(), e.message)))?;
        let mut columns = Vec::with_capacity(order.len());
        for col in order {
            let what = format!("{name}/{col}");
            let a = read_column(p, &g, &col, &what)?;
            if a.len() as u64 != n_rows {
                return Err(Error::format(format!(
                    "{}: {what}: {} entries, the table has {n_rows} rows",
                    p.display(),
                    a.len()
                )));
            }
            columns.push((col, a));
        }
        let display = format!("{}: {name}", p.display());
        tables::batch_with_index(&index_name, index, columns, &display).map(Some)
    }
}

fn check_indptr(
    indptr: &[i64],
    major: u64,
    n_data: u64,
    n_indices: u64,
) -> std::result::Result<(), String> {
    if indptr.len() as u64 != major + 1 {
        return Err(format!(
            "{} entries, expected {} (one more than the rows/columns it indexes)",
            indptr.len(),
            major + 1
        ));
    }
    if indptr[0] != 0 {
        return Err(format!("indptr[0] is {}, must be 0", indptr[0]));
    }
    if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
        return Err(format!(
            "decreases at {i} ({} -> {})",
            indptr[i],
            indptr[i + 1]
        ));
    }
    let last = *indptr.last().unwrap() as u64;
    if last != n_data || last != n_indices {
        return Err(format!(
            "ends at {last}, but data has {n_data} and indices {n_indices} entries"
        ));
    }
    Ok(())
}

fn to_count(x: f64) -> Option<i32> {
    (x.fract() == 0.0 && (0.0..=i32::MAX as f64).contains(&x)).then_some(x as i32)
}

/// Reads a CSC matrix whole and transposes it to cell-major CSR (rows sorted).
fn read_csc(
    path: &Path,
    x_name: &str,
    data: &hdf5::Dataset,
    indices: &hdf5::Dataset,
    indptr: &[i64],
    rows: u64,
    cols: u64,
) -> Result<CellMatrix> {
    let bytes = *indptr.last().unwrap_or(&0) as u64 * 8;
    let vals = bulk(
        || format!("{x_name}/data"),
        bytes,
        || data.read_raw::<f64>(),
    )
    .map_err(|e| h5err(path, &format!("{x_name}/data"), e))?;
    let idx = bulk(
        || format!("{x_name}/indices"),
        bytes,
        || indices.read_raw::<i64>(),
    )
    .map_err(|e| h5err(path, &format!("{x_name}/indices"), e))?;
    unwatched(|| transpose_csc(x_name, path, &vals, &idx, indptr, rows, cols))
}

/// The CSC arrays (checked here) as cell-major CSR: our own computing, no libhdf5 call.
fn transpose_csc(
    x_name: &str,
    path: &Path,
    vals: &[f64],
    idx: &[i64],
    indptr: &[i64],
    rows: u64,
    cols: u64,
) -> Result<CellMatrix> {
    let fail = |m: String| Error::format(format!("{}: {x_name}: {m}", path.display()));
    let mut counts = vec![0i64; rows as usize + 1];
    for (k, &r) in idx.iter().enumerate() {
        if r < 0 || r as u64 >= rows {
            return Err(fail(format!("indices[{k}] is {r}, outside 0..{rows}")));
        }
        counts[r as usize + 1] += 1;
    }
    for i in 0..rows as usize {
        counts[i + 1] += counts[i];
    }
    let mut fill = counts.clone();
    let mut out_idx = vec![0i32; idx.len()];
    let mut out_val = vec![0i32; idx.len()];
    for c in 0..cols as usize {
        let mut prev = -1i64;
        for k in indptr[c] as usize..indptr[c + 1] as usize {
            let r = idx[k];
            if r <= prev {
                return Err(fail(format!(
                    "column {c}: row indices not strictly increasing at indices[{k}] (duplicate or unsorted entry)"
                )));
            }
            prev = r;
            let v = to_count(vals[k]).ok_or_else(|| {
                fail(format!(
                    "data[{k}] is {}, not a count (a whole number in 0..=2^31-1)",
                    vals[k]
                ))
            })?;
            let at = &mut fill[r as usize];
            out_idx[*at as usize] = c as i32;
            out_val[*at as usize] = v;
            *at += 1;
        }
    }
    // Columns were visited in increasing order, so each row is already sorted.
    Ok(CellMatrix {
        n_cells: rows as usize,
        n_genes: cols as u32,
        indptr: counts,
        indices: out_idx,
        values: out_val,
    })
}

/// The string attribute `name` of `loc` (`owner`: its name, for the watchdog).
fn string_attr(loc: &hdf5::Location, owner: &str, name: &str) -> Result<String> {
    small(
        || format!("{owner} attribute '{name}'"),
        || string_attr_unwatched(loc, name),
    )
}

fn string_attr_unwatched(loc: &hdf5::Location, name: &str) -> Result<String> {
    let a = loc
        .attr(name)
        .map_err(|e| Error::format(format!("attribute '{name}': {e}")))?;
    let d = a
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| Error::format(format!("attribute '{name}': {e}")))?;
    let r = match d {
        TypeDescriptor::VarLenUnicode => a.read_scalar::<VarLenUnicode>().map(|s| s.to_string()),
        TypeDescriptor::VarLenAscii => a.read_scalar::<VarLenAscii>().map(|s| s.to_string()),
        other => {
            return Err(Error::format(format!(
                "attribute '{name}' has type {other:?}, expected a string"
            )))
        }
    };
    r.map_err(|e| Error::format(format!("attribute '{name}': {e}")))
}

/// A string-array attribute; an empty array of any type (h5py writes an empty
/// `column-order` as float64) is an empty list.
fn string_array_attr(loc: &hdf5::Location, owner: &str, name: &str) -> Result<Vec<String>> {
    small(
        || format!("{owner} attribute '{name}'"),
        || string_array_attr_unwatched(loc, name),
    )
}

fn string_array_attr_unwatched(loc: &hdf5::Location, name: &str) -> Result<Vec<String>> {
    let a = loc
        .attr(name)
        .map_err(|e| Error::format(format!("attribute '{name}': {e}")))?;
    if a.size() == 0 {
        return Ok(Vec::new());
    }
    let d = a
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| Error::format(format!("attribute '{name}': {e}")))?;
    let r = match d {
        TypeDescriptor::VarLenUnicode => a
            .read_raw::<VarLenUnicode>()
            .map(|v| v.iter().map(|s| s.to_string()).collect()),
        TypeDescriptor::VarLenAscii => a
            .read_raw::<VarLenAscii>()
            .map(|v| v.iter().map(|s| s.to_string()).collect()),
        other => {
            return Err(Error::format(format!(
                "attribute '{name}' has type {other:?}, expected strings"
            )))
        }
    };
    r.map_err(|e| Error::format(format!("attribute '{name}': {e}")))
}

/// A variable-length string dataset (budget: [`STRING_BYTES`] per element).
fn read_strings(path: &Path, what: &str, ds: &hdf5::Dataset) -> Result<Vec<String>> {
    let n = small(|| what.to_string(), || ds.size()) as u64;
    bulk(
        || what.to_string(),
        n * STRING_BYTES,
        || read_strings_unwatched(path, what, ds),
    )
}

fn read_strings_unwatched(path: &Path, what: &str, ds: &hdf5::Dataset) -> Result<Vec<String>> {
    let d = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| h5err(path, what, e))?;
    let r = match d {
        TypeDescriptor::VarLenUnicode => ds
            .read_raw::<VarLenUnicode>()
            .map(|v| v.iter().map(|s| s.to_string()).collect()),
        TypeDescriptor::VarLenAscii => ds
            .read_raw::<VarLenAscii>()
            .map(|v| v.iter().map(|s| s.to_string()).collect()),
        other => {
            return Err(Error::format(format!(
                "{}: {what}: type {other:?} is not a variable-length string array",
                path.display()
            )))
        }
    };
    r.map_err(|e| h5err(path, what, e))
}

/// A numeric, boolean or string column (budget: 8 bytes per element, the widest type).
fn read_numeric(path: &Path, what: &str, ds: &hdf5::Dataset) -> Result<ArrayRef> {
    let n = small(|| what.to_string(), || ds.size()) as u64;
    bulk(
        || what.to_string(),
        n * 8,
        || read_numeric_unwatched(path, what, ds),
    )
}

fn read_numeric_unwatched(path: &Path, what: &str, ds: &hdf5::Dataset) -> Result<ArrayRef> {
    let d = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| h5err(path, what, e))?;
    let e = |err| h5err(path, what, err);
    Ok(match d {
        TypeDescriptor::Integer(IntSize::U1) => Arc::new(Int8Array::from(ds.read_raw::<i8>().map_err(e)?)),
        TypeDescriptor::Integer(IntSize::U2) => Arc::new(Int16Array::from(ds.read_raw::<i16>().map_err(e)?)),
        TypeDescriptor::Integer(IntSize::U4) => Arc::new(Int32Array::from(ds.read_raw::<i32>().map_err(e)?)),
        TypeDescriptor::Integer(IntSize::U8) => Arc::new(Int64Array::from(ds.read_raw::<i64>().map_err(e)?)),
        TypeDescriptor::Unsigned(IntSize::U1) => Arc::new(UInt8Array::from(ds.read_raw::<u8>().map_err(e)?)),
        TypeDescriptor::Unsigned(IntSize::U2) => Arc::new(UInt16Array::from(ds.read_raw::<u16>().map_err(e)?)),
        TypeDescriptor::Unsigned(IntSize::U4) => Arc::new(UInt32Array::from(ds.read_raw::<u32>().map_err(e)?)),
        TypeDescriptor::Unsigned(IntSize::U8) => Arc::new(UInt64Array::from(ds.read_raw::<u64>().map_err(e)?)),
        TypeDescriptor::Float(FloatSize::U4) => Arc::new(Float32Array::from(ds.read_raw::<f32>().map_err(e)?)),
        TypeDescriptor::Float(FloatSize::U8) => Arc::new(Float64Array::from(ds.read_raw::<f64>().map_err(e)?)),
        TypeDescriptor::Boolean | TypeDescriptor::Enum(_) => {
            Arc::new(BooleanArray::from(ds.read_raw::<bool>().map_err(e)?))
        }
        TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii => {
            Arc::new(StringArray::from(read_strings(path, what, ds)?))
        }
        other => {
            return Err(Error::unsupported(format!(
                "{}: {what}: type {other:?} is not supported in obs/var (categorical, numeric, bool and string columns are)",
                path.display()
            )))
        }
    })
}

/// Applies a nullable-* mask (true = missing) to a column.
fn with_mask(a: ArrayRef, mask: &[bool], path: &Path, what: &str) -> Result<ArrayRef> {
    if mask.len() != a.len() {
        return Err(Error::format(format!(
            "{}: {what}: mask has {} entries, values {}",
            path.display(),
            mask.len(),
            a.len()
        )));
    }
    let nulls = arrow_buffer::NullBuffer::from(mask.iter().map(|&m| !m).collect::<Vec<bool>>());
    let data = a.to_data().into_builder().nulls(Some(nulls));
    let data = data
        .build()
        .map_err(|e| Error::format(format!("{}: {what}: {e}", path.display())))?;
    Ok(arrow_array::make_array(data))
}

fn read_column(path: &Path, g: &hdf5::Group, col: &str, what: &str) -> Result<ArrayRef> {
    let kind =
        small(|| what.to_string(), || g.loc_type_by_name(col)).map_err(|e| h5err(path, what, e))?;
    if kind == hdf5::LocationType::Dataset {
        let ds = small(|| what.to_string(), || g.dataset(col)).map_err(|e| h5err(path, what, e))?;
        if ds.ndim() != 1 {
            return Err(Error::unsupported(format!(
                "{}: {what}: {}-dimensional column, only 1-D columns are supported",
                path.display(),
                ds.ndim()
            )));
        }
        return read_numeric(path, what, &ds);
    }
    let cg = small(|| what.to_string(), || g.group(col)).map_err(|e| h5err(path, what, e))?;
    let enc = string_attr(&cg, what, "encoding-type")
        .map_err(|e| Error::format(format!("{}: {what}: {}", path.display(), e.message)))?;
    let sub = |n: &str| {
        small(|| format!("{what}/{n}"), || cg.dataset(n))
            .map_err(|e| h5err(path, &format!("{what}/{n}"), e))
    };
    match enc.as_str() {
        "categorical" => {
            let codes_ds = sub("codes")?;
            let n_codes = small(|| format!("{what}/codes"), || codes_ds.size()) as u64;
            let codes = bulk(|| format!("{what}/codes"), n_codes * 4, || codes_ds.read_raw::<i32>())
                .map_err(|e| h5err(path, &format!("{what}/codes"), e))?;
            let cats_ds = sub("categories")?;
            let cats: Vec<String> = match read_numeric(path, &format!("{what}/categories"), &cats_ds)? {
                a if a.data_type() == &arrow_schema::DataType::Utf8 => {
                    let s = a.as_any().downcast_ref::<StringArray>().unwrap();
                    s.iter().map(|x| x.unwrap_or("").to_string()).collect()
                }
                a => (0..a.len())
                    .map(|i| {
                        arrow_cast_display(&a, i)
                    })
                    .collect(),
            };
            let n = cats.len() as i32;
            let mut keys = Vec::with_capacity(codes.len());
            for (k, &c) in codes.iter().enumerate() {
                if c == -1 {
                    keys.push(None);
                } else if (0..n).contains(&c) {
                    keys.push(Some(c));
                } else {
                    return Err(Error::format(format!(
                        "{}: {what}/codes[{k}] is {c}, outside -1..{n} (categories)",
                        path.display()
                    )));
                }
            }
            let dict = DictionaryArray::<Int32Type>::try_new(
                Int32Array::from(keys),
                Arc::new(StringArray::from(cats)),
            )
            .map_err(|e| Error::format(format!("{}: {what}: {e}", path.display())))?;
            Ok(Arc::new(dict))
        }
        "nullable-integer" | "nullable-boolean" | "nullable-string-array" => {
            let values = read_numeric(path, &format!("{what}/values"), &sub("values")?)?;
            let mask_ds = sub("mask")?;
            let n_mask = small(|| format!("{what}/mask"), || mask_ds.size()) as u64;
            let mask = bulk(|| format!("{what}/mask"), n_mask, || mask_ds.read_raw::<bool>())
                .map_err(|e| h5err(path, &format!("{what}/mask"), e))?;
            with_mask(values, &mask, path, what)
        }
        other => Err(Error::unsupported(format!(
            "{}: {what}: encoding '{other}' is not supported in obs/var (categorical, numeric, bool and string columns are)",
            path.display()
        ))),
    }
}

/// A numeric or boolean array element as text (for non-string categories).
fn arrow_cast_display(a: &ArrayRef, i: usize) -> String {
    use arrow_array::Array;
    macro_rules! try_fmt {
        ($($t:ty),*) => {
            $(if let Some(x) = a.as_any().downcast_ref::<$t>() {
                return format!("{}", x.value(i));
            })*
        };
    }
    try_fmt!(
        Int8Array,
        Int16Array,
        Int32Array,
        Int64Array,
        UInt8Array,
        UInt16Array,
        UInt32Array,
        UInt64Array,
        Float32Array,
        Float64Array,
        BooleanArray
    );
    let _ = a.len();
    String::new()
}

/// The reads of `CellSource`, which runs each in a `contain::decoding` scope.
impl H5adSource {
    fn gene_totals_unchecked(&mut self) -> Result<Vec<u64>> {
        match &self.layout {
            Layout::InMemory(m) => Ok(m.gene_totals()),
            Layout::Csr {
                data,
                indices,
                indptr,
            } => {
                let mut t = vec![0u64; self.n_genes as usize];
                let end = *indptr.last().unwrap() as usize;
                let mut a = 0;
                while a < end {
                    let b = (a + READ_BLOCK).min(end);
                    let (v, ix) = self.read_entries(data, indices, a, b, self.n_genes as u64)?;
                    unwatched(|| {
                        for (&g, &x) in ix.iter().zip(&v) {
                            t[g as usize] += x as u64;
                        }
                    });
                    a = b;
                }
                Ok(t)
            }
            Layout::Dense(ds) => {
                let mut t = vec![0u64; self.n_genes as usize];
                let step = (READ_BLOCK / self.n_genes as usize).max(1) as u64;
                let mut lo = 0;
                while lo < self.n_cells {
                    let hi = (lo + step).min(self.n_cells);
                    let m = self.read_dense(ds, lo, hi)?;
                    unwatched(|| {
                        for (&g, &x) in m.indices.iter().zip(&m.values) {
                            t[g as usize] += x as u64;
                        }
                    });
                    lo = hi;
                }
                Ok(t)
            }
        }
    }
    fn read_cells_unchecked(&mut self, lo: u64, hi: u64) -> Result<CellMatrix> {
        match &self.layout {
            Layout::InMemory(m) => Ok(m.slice_rows(lo as usize, hi as usize)),
            Layout::Dense(ds) => self.read_dense(ds, lo, hi),
            Layout::Csr {
                data,
                indices,
                indptr,
            } => {
                let (a, b) = (indptr[lo as usize] as usize, indptr[hi as usize] as usize);
                let (values, idx) = self.read_entries(data, indices, a, b, self.n_genes as u64)?;
                let indptr = indptr[lo as usize..=hi as usize]
                    .iter()
                    .map(|&p| p - a as i64)
                    .collect();
                let mut m = CellMatrix {
                    n_cells: (hi - lo) as usize,
                    n_genes: self.n_genes,
                    indptr,
                    indices: idx,
                    values,
                };
                // scipy allows unsorted indices; the writer sorts them (and rejects
                // duplicates); drop explicit zeros here so counts stay honest.
                unwatched(|| drop_zeros(&mut m));
                Ok(m)
            }
        }
    }
    fn var_names_unchecked(&mut self) -> Result<Option<(Vec<String>, String)>> {
        let Some(var) = self.dataframe("var", self.n_genes as u64)? else {
            return Ok(None);
        };
        let idx = var
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("index column is utf8");
        let names: Vec<String> = idx.iter().map(|s| s.unwrap_or("").to_string()).collect();
        Ok(Some((names, "the var index".to_string())))
    }
    fn tables_unchecked(&mut self) -> Result<Tables> {
        Ok(Tables {
            var: self.dataframe("var", self.n_genes as u64)?,
            obs: self.dataframe("obs", self.n_cells)?,
        })
    }
}

impl CellSource for H5adSource {
    fn kind(&self) -> &'static str {
        "h5ad file"
    }
    fn n_cells(&self) -> u64 {
        self.n_cells
    }
    fn n_genes(&self) -> u32 {
        self.n_genes
    }
    fn gene_totals(&mut self) -> Result<Vec<u64>> {
        let path = self.path.clone();
        let x = self.x_name.clone();
        decoding(path.display(), || {
            small(
                || format!("{x} (the pass for gene totals)"),
                || self.gene_totals_unchecked(),
            )
        })
    }
    fn read_cells(&mut self, lo: u64, hi: u64) -> Result<CellMatrix> {
        let path = self.path.clone();
        let x = self.x_name.clone();
        decoding(path.display(), || {
            small(
                || format!("{x} cells {lo}..{hi}"),
                || self.read_cells_unchecked(lo, hi),
            )
        })
    }
    fn var_names(&mut self) -> Result<Option<(Vec<String>, String)>> {
        let path = self.path.clone();
        decoding(path.display(), || {
            small(
                || "var (the gene names)".to_string(),
                || self.var_names_unchecked(),
            )
        })
    }
    fn tables(&mut self) -> Result<Tables> {
        let path = self.path.clone();
        decoding(path.display(), || {
            small(|| "obs and var".to_string(), || self.tables_unchecked())
        })
    }
    fn input_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
}

/// Closes the file and the datasets it holds open inside a watched scope (libhdf5 flushes
/// and frees its caches on close: it has crashed there on a malformed file, and could hang).
impl Drop for H5adSource {
    fn drop(&mut self) {
        let file = self.file.take();
        let layout = std::mem::replace(
            &mut self.layout,
            Layout::InMemory(CellMatrix {
                n_cells: 0,
                n_genes: 0,
                indptr: vec![0],
                indices: Vec::new(),
                values: Vec::new(),
            }),
        );
        small(
            || "closing the file".to_string(),
            move || drop((layout, file)),
        );
    }
}

fn drop_zeros(m: &mut CellMatrix) {
    if !m.values.contains(&0) {
        return;
    }
    let (mut w, mut start) = (0usize, 0usize);
    for c in 0..m.n_cells {
        let end = m.indptr[c + 1] as usize;
        for k in start..end {
            if m.values[k] != 0 {
                m.indices[w] = m.indices[k];
                m.values[w] = m.values[k];
                w += 1;
            }
        }
        start = end;
        m.indptr[c + 1] = w as i64;
    }
    m.indices.truncate(w);
    m.values.truncate(w);
}
