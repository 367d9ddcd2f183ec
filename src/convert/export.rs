//! Export of dataset cells to Matrix Market (`deltacells export`).
//!
//! The file is genes x cells, like 10x Genomics writes it (`%%MatrixMarket matrix coordinate
//! integer general`), entries ordered by cell then gene. Rows are genes in the *original
//! input order* when the dataset records a gene order (the converter's sort is undone), so
//! that an exported file lines up with the input's features.tsv; otherwise in dataset column
//! order. Column k is the k-th requested cell. The file is written through
//! `storage::fs::write_file_atomically` (a hidden temporary sibling, flushed and renamed into
//! place), so a failed export leaves no partial file under the requested name.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::storage::fs;
use crate::tile::ValuesOut;

/// Cells gathered per batch.
const BATCH: usize = 8192;

/// What `export_mtx` wrote.
#[derive(Debug, Clone, Copy)]
pub struct ExportSummary {
    pub n_cells: u64,
    pub n_genes: u32,
    pub nnz: u64,
    pub input_gene_order: bool,
}

/// Writes `cells` of `ds` to `out` (gzipped when the name ends in `.gz`).
pub fn export_mtx(ds: &Dataset, cells: &[u64], out: &Path) -> Result<ExportSummary> {
    let info = ds.info();
    let order: Option<Vec<i32>> = if info.has_gene_order {
        Some(ds.gene_order()?.to_vec())
    } else {
        None
    };
    let nnz = ds.batch_nnz(cells)?;
    let io = |e: std::io::Error| Error::io(out, &e);
    let body = |w: &mut dyn Write| -> Result<()> {
        writeln!(w, "%%MatrixMarket matrix coordinate integer general").map_err(io)?;
        writeln!(
            w,
            "% written by deltacells export: genes x cells, genes in {} order",
            if order.is_some() {
                "the original input"
            } else {
                "dataset column"
            }
        )
        .map_err(io)?;
        writeln!(w, "{} {} {}", info.n_genes, cells.len(), nnz).map_err(io)?;
        let mut row: Vec<(i32, i32)> = Vec::new();
        for (b, batch) in cells.chunks(BATCH).enumerate() {
            let plan = ds.plan_gather(batch)?;
            let n = plan.nnz() as usize;
            let mut indptr = vec![0i64; batch.len() + 1];
            let mut indices = vec![0i32; n];
            let mut values = vec![0i32; n];
            ds.gather_planned(
                &plan,
                &mut indptr,
                &mut indices,
                ValuesOut::I32(&mut values),
            )?;
            for c in 0..batch.len() {
                let col = b * BATCH + c + 1;
                let (lo, hi) = (indptr[c] as usize, indptr[c + 1] as usize);
                row.clear();
                row.extend((lo..hi).map(|k| {
                    let g = order
                        .as_ref()
                        .map_or(indices[k], |o| o[indices[k] as usize]);
                    (g, values[k])
                }));
                if order.is_some() {
                    row.sort_unstable_by_key(|e| e.0);
                }
                for &(g, v) in &row {
                    writeln!(w, "{} {col} {v}", g + 1).map_err(io)?;
                }
            }
        }
        Ok(())
    };
    fs::write_file_atomically(out, |f| {
        if out.extension().is_some_and(|e| e == "gz") {
            let mut w = flate2::write::GzEncoder::new(
                BufWriter::with_capacity(1 << 20, f),
                flate2::Compression::default(),
            );
            body(&mut w)?;
            w.finish().map_err(io)?.flush().map_err(io)
        } else {
            let mut w = BufWriter::with_capacity(1 << 20, f);
            body(&mut w)?;
            w.flush().map_err(io)
        }
    })?;
    Ok(ExportSummary {
        n_cells: cells.len() as u64,
        n_genes: info.n_genes,
        nnz,
        input_gene_order: order.is_some(),
    })
}
