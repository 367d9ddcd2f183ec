//! Readers of the input formats people convert from, and the converter itself (behind the
//! `cli` feature: the library proper reads and writes only deltacells and ChromData, and
//! never depends on HDF5).
//!
//! * `mtx` — Matrix Market files and 10x Genomics matrix folders;
//! * `h5ad` — AnnData files (X as CSR, CSC or dense; obs and var tables as Arrow);
//! * `source` — the `CellSource` abstraction and `convert`, which streams any source into a
//!   `DatasetWriter`;
//! * `tables` — obs / var tables as Arrow record batches, and where they reach the writer;
//! * `verify`, `export` — whole-dataset checks and Matrix Market export for the CLI.

pub mod export;
pub mod h5ad;
pub mod mtx;
pub mod source;
pub mod tables;
pub mod verify;

pub use source::{convert, open_source, CellSource, ConvertOptions, ConvertSummary};
