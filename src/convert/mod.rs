//! Readers of the input formats people convert from, and the converter itself (behind the
//! `cli` feature: the library proper reads and writes only deltacells and ChromData, and
//! never depends on HDF5).
//!
//! * `mtx` — Matrix Market files and 10x Genomics matrix folders;
//! * `h5ad` — AnnData files (X as CSR, CSC or dense; obs and var tables as Arrow);
//! * `h5watch` — the libhdf5 call in progress and its time budget, for the CLI's watchdog;
//! * `source` — the `CellSource` abstraction and `convert`, which streams any source into a
//!   `DatasetWriter`; `open_source` (here) picks the reader by format;
//! * `tables` — obs / var tables as Arrow record batches, and where they reach the writer;
//! * `verify`, `export` — whole-dataset checks and Matrix Market export for the CLI.

pub mod export;
pub mod h5ad;
pub mod h5watch;
pub mod mtx;
pub mod source;
pub mod tables;
pub mod verify;

use std::path::Path;

use crate::error::{Error, Result};

pub use source::{convert, CellSource, ConvertOptions, ConvertSummary};

/// Opens any supported input: a 10x folder, a `.h5ad` file, or a Matrix Market file
/// (`.mtx`, `.mtx.gz`, or anything else starting with `%%MatrixMarket`).
pub fn open_source(path: &Path) -> Result<Box<dyn CellSource>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, &e))?;
    if meta.is_dir() {
        return Ok(Box::new(source::MtxSource::open(path)?));
    }
    // HDF5 files are recognised by their signature, whatever their name.
    if h5ad::is_hdf5(path)? {
        return Ok(Box::new(h5ad::H5adSource::open(path)?));
    }
    Ok(Box::new(source::MtxSource::open(path)?))
}
