//! Inputs as sources of cells, and the converter that streams one into a dataset.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::dataset::{DatasetWriter, WriterOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::{self, Observer, Progress, Stage, Unit};

use super::mtx::{self, CellMatrix};
use super::tables::{self, Tables, VarNamesFrom};

/// A count matrix that can be read in blocks of consecutive cells (rows), in input gene
/// order.
pub trait CellSource {
    /// What the input is, for messages ("10x folder", "Matrix Market file", "h5ad").
    fn kind(&self) -> &'static str;
    fn n_cells(&self) -> u64;
    fn n_genes(&self) -> u32;
    /// Total count of each gene (a full pass over the data unless already in memory).
    fn gene_totals(&mut self) -> Result<Vec<u64>>;
    /// Cells `lo..hi` as CSR (indptr from 0), columns in input gene order, sorted per row.
    fn read_cells(&mut self, lo: u64, hi: u64) -> Result<CellMatrix>;
    /// Gene names (input order), and how they were chosen; `None` when the input has none.
    fn var_names(&mut self) -> Result<Option<(Vec<String>, String)>>;
    /// The obs and var tables as Arrow record batches (see `tables`).
    fn tables(&mut self) -> Result<Tables>;
    /// Bytes of the input files (for throughput).
    fn input_bytes(&self) -> u64;
}

/// A Matrix Market file or a 10x folder, read whole (the file is gene-major, so there is no
/// way to produce cells in order without reading all of it).
pub struct MtxSource {
    matrix: CellMatrix,
    files: Vec<PathBuf>,
    tenx: Option<mtx::TenxFolder>,
    names: Option<(Vec<String>, VarNamesFrom, Tables)>,
}

impl MtxSource {
    pub fn open(path: &Path) -> Result<MtxSource> {
        let (matrix_path, tenx) = if path.is_dir() {
            let f = mtx::find_10x_folder(path)?;
            (f.matrix.clone(), Some(f))
        } else {
            (path.to_path_buf(), None)
        };
        let matrix = mtx::read_matrix_market(&matrix_path, true)?;
        let mut files = vec![matrix_path];
        if let Some(f) = &tenx {
            files.push(f.features.clone());
            files.push(f.barcodes.clone());
        }
        Ok(MtxSource {
            matrix,
            files,
            tenx,
            names: None,
        })
    }

    /// The parsed matrix (all cells, input gene order).
    pub fn matrix(&self) -> &CellMatrix {
        &self.matrix
    }

    fn load_tables(&mut self) -> Result<()> {
        if self.names.is_some() {
            return Ok(());
        }
        let Some(f) = &self.tenx else {
            return Ok(());
        };
        let features = mtx::read_lines(&f.features)?;
        let barcodes = mtx::read_lines(&f.barcodes)?;
        self.names = Some(tables::tenx_tables(
            &f.features,
            &features,
            &f.barcodes,
            &barcodes,
            self.matrix.n_genes,
            self.matrix.n_cells as u64,
        )?);
        Ok(())
    }
}

impl CellSource for MtxSource {
    fn kind(&self) -> &'static str {
        if self.tenx.is_some() {
            "10x matrix folder"
        } else {
            "Matrix Market file"
        }
    }
    fn n_cells(&self) -> u64 {
        self.matrix.n_cells as u64
    }
    fn n_genes(&self) -> u32 {
        self.matrix.n_genes
    }
    fn gene_totals(&mut self) -> Result<Vec<u64>> {
        Ok(self.matrix.gene_totals())
    }
    fn read_cells(&mut self, lo: u64, hi: u64) -> Result<CellMatrix> {
        Ok(self.matrix.slice_rows(lo as usize, hi as usize))
    }
    fn var_names(&mut self) -> Result<Option<(Vec<String>, String)>> {
        self.load_tables()?;
        Ok(self
            .names
            .as_ref()
            .map(|(n, from, _)| (n.clone(), from.describe().to_string())))
    }
    fn tables(&mut self) -> Result<Tables> {
        self.load_tables()?;
        Ok(self
            .names
            .as_ref()
            .map(|(_, _, t)| t.clone())
            .unwrap_or_default())
    }
    fn input_bytes(&self) -> u64 {
        self.files
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// Settings of a conversion.
#[derive(Debug, Clone, Copy)]
pub struct ConvertOptions {
    pub writer: WriterOptions,
    /// Sort genes by decreasing total count (recorded in gene_order.npy).
    pub sort_genes: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            writer: WriterOptions::default(),
            sort_genes: true,
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct ConvertSummary {
    pub kind: &'static str,
    pub n_cells: u64,
    pub n_genes: u32,
    pub nnz: u64,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub var_names: Option<String>,
    /// Whether obs / var tables were stored (false until the writer supports them).
    pub tables_stored: bool,
    pub tables_available: bool,
    pub read_seconds: f64,
    pub total_seconds: f64,
}

/// Converts `source` into a new dataset at `output`. `observer` hears of the cells read and
/// written ([`Stage::Read`], in cells) after every block of cells; it may cancel. An error,
/// a cancel (or a kill) leaves no dataset at `output`: the writer works in a temporary
/// directory and publishes only in `finish`.
pub fn convert(
    source: &mut dyn CellSource,
    output: &Path,
    opts: &ConvertOptions,
    observer: &dyn Observer,
) -> Result<ConvertSummary> {
    let t0 = Instant::now();
    let (n_cells, n_genes) = (source.n_cells(), source.n_genes());
    if n_cells == 0 {
        return Err(Error::format(format!(
            "the input {} has no cells; a dataset needs at least one",
            source.kind()
        )));
    }
    let mut writer = DatasetWriter::create(output, n_genes, opts.writer)?;
    if opts.sort_genes {
        writer.set_gene_order(&order_by_decreasing(&source.gene_totals()?))?;
    }
    let names = source.var_names()?;
    if let Some((n, _)) = &names {
        writer.set_var_names(n)?;
    }
    let tables = source.tables()?;
    let tables_available = tables.var.is_some() || tables.obs.is_some();
    let read_seconds = t0.elapsed().as_secs_f64();
    // Blocks of whole tiles, so that a source reading ranges (h5ad) reads each once.
    let block = opts.writer.tile_size.clamp(1, 1 << 20);
    let mut nnz = 0u64;
    let mut lo = 0u64;
    let progress = |done| {
        progress::report(
            observer,
            Progress {
                stage: Stage::Read,
                unit: Unit::Cells,
                done,
                total: Some(n_cells),
            },
        )
    };
    progress(0)?;
    while lo < n_cells {
        let hi = (lo + block).min(n_cells);
        let m = source.read_cells(lo, hi)?;
        nnz += m.indices.len() as u64;
        writer
            .append_csr(m.n_cells as u64, &m.indptr, &m.indices, &m.values)
            .map_err(|e| {
                if e.kind == ErrorKind::InvalidArgument {
                    Error::format(format!("input {}: {}", source.kind(), e.message))
                } else {
                    e
                }
            })?;
        lo = hi;
        progress(lo)?;
    }
    let tables_stored = tables::attach_tables(&mut writer, tables)?;
    writer.finish()?;
    let output_bytes = dir_bytes(output);
    Ok(ConvertSummary {
        kind: source.kind(),
        n_cells,
        n_genes,
        nnz,
        input_bytes: source.input_bytes(),
        output_bytes,
        var_names: names.map(|(_, from)| from),
        tables_stored,
        tables_available,
        read_seconds,
        total_seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The gene order sorting genes by decreasing total (ties by input index): output column j
/// is input column order[j], as `CellMatrix::order_by_decreasing_total`.
pub fn order_by_decreasing(totals: &[u64]) -> Vec<i32> {
    let mut order: Vec<i32> = (0..totals.len() as i32).collect();
    order.sort_by(|&a, &b| totals[b as usize].cmp(&totals[a as usize]).then(a.cmp(&b)));
    order
}

/// Total size of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
