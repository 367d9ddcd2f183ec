//! Matrix Market coordinate files (optionally gzipped), as written by 10x Genomics
//! (rows = genes, columns = cells) or by anyone else (`--cells-are-rows`).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Opens a file, transparently gunzipping `.gz`.
pub fn open_maybe_gz(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let f = File::open(path).map_err(|e| Error::io(path, &e))?;
    let gz = path.extension().is_some_and(|e| e == "gz");
    Ok(if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::MultiGzDecoder::new(BufReader::new(f)),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, f))
    })
}

/// A count matrix as cell-major CSR (rows = cells), the layout of a tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellMatrix {
    pub n_cells: usize,
    pub n_genes: u32,
    pub indptr: Vec<i64>,
    pub indices: Vec<i32>,
    pub values: Vec<i32>,
}

impl CellMatrix {
    /// Rows `lo..hi`, as a new matrix with indptr from 0.
    pub fn slice_rows(&self, lo: usize, hi: usize) -> CellMatrix {
        let (a, b) = (self.indptr[lo] as usize, self.indptr[hi] as usize);
        CellMatrix {
            n_cells: hi - lo,
            n_genes: self.n_genes,
            indptr: self.indptr[lo..=hi].iter().map(|&p| p - a as i64).collect(),
            indices: self.indices[a..b].to_vec(),
            values: self.values[a..b].to_vec(),
        }
    }

    pub fn as_csr(&self) -> crate::tile::CsrRef<'_> {
        crate::tile::CsrRef {
            n_genes: self.n_genes,
            indptr: &self.indptr,
            indices: &self.indices,
            values: &self.values,
        }
    }

    /// Total count of each gene.
    pub fn gene_totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; self.n_genes as usize];
        for (&g, &v) in self.indices.iter().zip(&self.values) {
            t[g as usize] += v as u64;
        }
        t
    }

    /// The order that sorts genes by decreasing total count (ties by index), as the format's
    /// `gene_order`: output column j is input column order[j].
    pub fn order_by_decreasing_total(&self) -> Vec<i32> {
        let totals = self.gene_totals();
        let mut order: Vec<i32> = (0..self.n_genes as i32).collect();
        order.sort_by(|&a, &b| totals[b as usize].cmp(&totals[a as usize]).then(a.cmp(&b)));
        order
    }

    /// Permutes columns: output column j = input column order[j]. Rows stay sorted.
    pub fn permute_genes(&self, order: &[i32]) -> CellMatrix {
        let mut inverse = vec![0i32; order.len()];
        for (j, &g) in order.iter().enumerate() {
            inverse[g as usize] = j as i32;
        }
        let mut out = self.clone();
        let mut row: Vec<(i32, i32)> = Vec::new();
        for c in 0..self.n_cells {
            let (a, b) = (self.indptr[c] as usize, self.indptr[c + 1] as usize);
            row.clear();
            row.extend((a..b).map(|j| (inverse[self.indices[j] as usize], self.values[j])));
            row.sort_unstable();
            for (k, &(g, v)) in row.iter().enumerate() {
                out.indices[a + k] = g;
                out.values[a + k] = v;
            }
        }
        out
    }
}

fn parse_err(path: &Path, line: u64, what: impl std::fmt::Display) -> Error {
    Error::format(format!("{}:{line}: {what}", path.display()))
}

/// Reads a Matrix Market `coordinate` file of integer counts into cell-major CSR.
/// `genes_are_rows` is the 10x convention (matrix rows = genes, columns = cells).
/// Accepts `integer` fields and `real` fields holding whole numbers; explicit zeros are
/// dropped; duplicate entries and negative counts are errors naming the line.
pub fn read_matrix_market(path: &Path, genes_are_rows: bool) -> Result<CellMatrix> {
    let mut r = open_maybe_gz(path)?;
    read_matrix_market_from(&mut r, path, genes_are_rows)
}

/// Lines of a Matrix Market stream, with their 1-based numbers for messages.
struct MtxLines<'a> {
    r: &'a mut dyn BufRead,
    path: &'a Path,
    line: Vec<u8>,
    number: u64,
}

impl MtxLines<'_> {
    /// Reads the next line (without its line break) into `self.line`; false at the end.
    fn next(&mut self) -> Result<bool> {
        self.line.clear();
        let n = self
            .r
            .read_until(b'\n', &mut self.line)
            .map_err(|e| Error::io(self.path, &e))?;
        self.number += 1;
        while self.line.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
            self.line.pop();
        }
        Ok(n > 0)
    }

    fn err(&self, what: impl std::fmt::Display) -> Error {
        parse_err(self.path, self.number, what)
    }
}

/// Entries read from the file, in file order (zeros dropped), mapped to (cell, gene).
struct Triplets {
    cells: Vec<u32>,
    genes: Vec<i32>,
    values: Vec<i32>,
}

pub fn read_matrix_market_from(
    r: &mut dyn BufRead,
    path: &Path,
    genes_are_rows: bool,
) -> Result<CellMatrix> {
    read_matrix_market_capped(r, path, genes_are_rows, u64::MAX)
}

/// [`read_matrix_market_from`] holding at most `max_bytes` of matrix in memory: 8 bytes per
/// declared cell (the cell index) and 8 per entry. A size line may announce billions of cells
/// that have no entries, all of which the converter keeps; the fuzz target caps the memory
/// this way (a refused allocation is `DC_ERR_LIMIT` in any case, never an abort).
pub fn read_matrix_market_capped(
    r: &mut dyn BufRead,
    path: &Path,
    genes_are_rows: bool,
    max_bytes: u64,
) -> Result<CellMatrix> {
    let mut lines = MtxLines {
        r,
        path,
        line: Vec::with_capacity(128),
        number: 0,
    };
    if !lines.next()? {
        return Err(lines.err("empty file, expected a %%MatrixMarket header"));
    }
    let real = parse_banner(&lines.line).map_err(|what| lines.err(what))?;
    let (n_rows, n_cols, nnz) = read_size_line(&mut lines)?;
    let (n_genes, n_cells) = if genes_are_rows {
        (n_rows, n_cols)
    } else {
        (n_cols, n_rows)
    };
    if n_genes == 0 || n_genes > crate::tile::MAX_GENES {
        return Err(lines.err(format!("{n_genes} genes: must be 1..2^31")));
    }
    if n_cells > u32::MAX as u64 * 16 || nnz > n_rows.saturating_mul(n_cols) {
        return Err(lines.err(format!(
            "implausible size {n_rows} x {n_cols} with {nnz} entries"
        )));
    }
    let t = read_entries(&mut lines, (n_rows, n_cols, nnz), real, genes_are_rows)?;
    let need = (n_cells as u128 + 1) * 8 + t.cells.len() as u128 * 8;
    if need > u128::from(max_bytes) {
        return Err(Error::limit(format!(
            "{}: {n_cells} cells with {} entries need {need} bytes in memory, over the limit of {max_bytes}",
            path.display(),
            t.cells.len()
        )));
    }
    let mut m = cell_major(t, n_cells as usize, n_genes as u32).map_err(|what| {
        Error::limit(format!(
            "{}: {n_cells} cells x {n_genes} genes: cannot allocate {what} in memory",
            path.display()
        ))
    })?;
    sort_rows(&mut m).map_err(|(cell, gene)| {
        Error::format(format!(
            "{}: duplicate entry for cell {} / gene {} (1-based)",
            path.display(),
            cell + 1,
            gene + 1
        ))
    })?;
    Ok(m)
}

/// The `%%MatrixMarket matrix coordinate integer|real general` line; true for `real`.
fn parse_banner(line: &[u8]) -> std::result::Result<bool, String> {
    let header = String::from_utf8_lossy(line).to_ascii_lowercase();
    let words: Vec<&str> = header.split_whitespace().collect();
    if words.len() < 5 || words[0] != "%%matrixmarket" || words[1] != "matrix" {
        return Err("not a Matrix Market file (expected '%%MatrixMarket matrix ...')".into());
    }
    if words[2] != "coordinate" {
        return Err(format!(
            "'{}' matrices are not supported, only 'coordinate'",
            words[2]
        ));
    }
    let real = match words[3] {
        "integer" => false,
        "real" => true,
        other => return Err(format!("field '{other}' is not integer or real counts")),
    };
    if words[4] != "general" {
        return Err(format!(
            "symmetry '{}' is not supported, only 'general'",
            words[4]
        ));
    }
    Ok(real)
}

/// The size line `rows columns entries`, after any comment lines.
fn read_size_line(lines: &mut MtxLines<'_>) -> Result<(u64, u64, u64)> {
    loop {
        if !lines.next()? {
            return Err(lines.err("missing the size line"));
        }
        let line = &lines.line;
        if line.first() == Some(&b'%') || line.iter().all(|c| c.is_ascii_whitespace()) {
            continue;
        }
        let s = String::from_utf8_lossy(line);
        let v: Vec<u64> = s
            .split_whitespace()
            .map(|w| w.parse::<u64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| lines.err(format!("bad size line '{s}'")))?;
        if v.len() != 3 {
            return Err(lines.err(format!("size line has {} numbers, expected 3", v.len())));
        }
        return Ok((v[0], v[1], v[2]));
    }
}

/// The `nnz` entry lines `row column value` (1-based indices within the size), zeros
/// dropped; exactly `nnz` of them.
fn read_entries(
    lines: &mut MtxLines<'_>,
    (n_rows, n_cols, nnz): (u64, u64, u64),
    real: bool,
    genes_are_rows: bool,
) -> Result<Triplets> {
    let capacity = nnz.min(1 << 28) as usize;
    let mut t = Triplets {
        cells: Vec::with_capacity(capacity),
        genes: Vec::with_capacity(capacity),
        values: Vec::with_capacity(capacity),
    };
    let mut seen = 0u64;
    while lines.next()? {
        let line = &lines.line;
        if line.is_empty() || line[0] == b'%' {
            continue;
        }
        let mut it = line
            .split(|c| *c == b' ' || *c == b'\t')
            .filter(|w| !w.is_empty());
        let mut field = |name: &str| -> Result<&[u8]> {
            it.next()
                .ok_or_else(|| lines.err(format!("missing {name}")))
        };
        let row = parse_index(field("row")?, n_rows)
            .ok_or_else(|| lines.err(format!("row index is not in 1..={n_rows}")))?;
        let col = parse_index(field("column")?, n_cols)
            .ok_or_else(|| lines.err(format!("column index is not in 1..={n_cols}")))?;
        let vtext = field("value")?;
        let v = parse_count(vtext, real).ok_or_else(|| {
            lines.err(format!(
                "value '{}' is not a count in 0..=2^31-1",
                String::from_utf8_lossy(vtext)
            ))
        })?;
        seen += 1;
        if seen > nnz {
            return Err(lines.err(format!("more entries than the {nnz} announced")));
        }
        if v == 0 {
            continue;
        }
        let (g, c) = if genes_are_rows {
            (row, col)
        } else {
            (col, row)
        };
        t.cells.push(c as u32);
        t.genes.push(g as i32);
        t.values.push(v);
    }
    if seen != nnz {
        return Err(lines.err(format!("{seen} entries, the size line announced {nnz}")));
    }
    Ok(t)
}

/// `n` zeros, or what could not be allocated: the size line of a small file may announce
/// billions of cells, and an allocation the system refuses must be an error, not an abort.
fn zeros<T: Copy + Default>(n: usize, what: &str) -> std::result::Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        format!(
            "the {what} ({} bytes)",
            (n as u128) * std::mem::size_of::<T>() as u128
        )
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Cell-major CSR from triplets (a counting sort by cell; rows not yet sorted by gene).
fn cell_major(
    t: Triplets,
    n_cells: usize,
    n_genes: u32,
) -> std::result::Result<CellMatrix, String> {
    let mut indptr: Vec<i64> = zeros(n_cells.saturating_add(1), "cell index")?;
    for &c in &t.cells {
        indptr[c as usize + 1] += 1;
    }
    for i in 0..n_cells {
        indptr[i + 1] += indptr[i];
    }
    let mut fill: Vec<i64> = zeros(indptr.len(), "cell index")?;
    fill.copy_from_slice(&indptr);
    let mut indices: Vec<i32> = zeros(t.cells.len(), "gene indices")?;
    let mut values: Vec<i32> = zeros(t.cells.len(), "values")?;
    for k in 0..t.cells.len() {
        let at = &mut fill[t.cells[k] as usize];
        indices[*at as usize] = t.genes[k];
        values[*at as usize] = t.values[k];
        *at += 1;
    }
    Ok(CellMatrix {
        n_cells,
        n_genes,
        indptr,
        indices,
        values,
    })
}

/// Sorts each row by gene; returns the first duplicate (cell, gene) found.
fn sort_rows(m: &mut CellMatrix) -> std::result::Result<(), (usize, i32)> {
    let mut row: Vec<(i32, i32)> = Vec::new();
    for c in 0..m.n_cells {
        let (a, b) = (m.indptr[c] as usize, m.indptr[c + 1] as usize);
        if m.indices[a..b].windows(2).all(|w| w[0] < w[1]) {
            continue;
        }
        row.clear();
        row.extend((a..b).map(|j| (m.indices[j], m.values[j])));
        row.sort_unstable_by_key(|e| e.0);
        if let Some(w) = row.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err((c, w[0].0));
        }
        for (k, &(g, v)) in row.iter().enumerate() {
            m.indices[a + k] = g;
            m.values[a + k] = v;
        }
    }
    Ok(())
}

fn parse_index(w: &[u8], max: u64) -> Option<u64> {
    let v = parse_u64(w)?;
    (1..=max).contains(&v).then(|| v - 1)
}

fn parse_u64(w: &[u8]) -> Option<u64> {
    if w.is_empty() || w.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &c in w {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    Some(v)
}

fn parse_count(w: &[u8], real: bool) -> Option<i32> {
    let v = match parse_u64(w) {
        Some(v) => v,
        None if real => {
            let f: f64 = std::str::from_utf8(w).ok()?.parse().ok()?;
            if f.fract() != 0.0 || !(0.0..=i32::MAX as f64).contains(&f) {
                return None;
            }
            f as u64
        }
        None => return None,
    };
    (v <= i32::MAX as u64).then_some(v as i32)
}

/// The files of a 10x Genomics matrix folder.
#[derive(Debug, Clone)]
pub struct TenxFolder {
    pub matrix: PathBuf,
    pub features: PathBuf,
    pub barcodes: PathBuf,
}

/// Finds `matrix.mtx[.gz]`, `features.tsv[.gz]` (or `genes.tsv[.gz]`), `barcodes.tsv[.gz]`.
pub fn find_10x_folder(dir: &Path) -> Result<TenxFolder> {
    let pick = |names: &[&str]| -> Result<PathBuf> {
        names
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::new(
                    crate::error::ErrorKind::NotFound,
                    format!(
                        "{}: no {} in this 10x matrix folder",
                        dir.display(),
                        names.join(" or ")
                    ),
                )
            })
    };
    Ok(TenxFolder {
        matrix: pick(&["matrix.mtx.gz", "matrix.mtx"])?,
        features: pick(&[
            "features.tsv.gz",
            "features.tsv",
            "genes.tsv.gz",
            "genes.tsv",
        ])?,
        barcodes: pick(&["barcodes.tsv.gz", "barcodes.tsv"])?,
    })
}

/// Reads the lines of a small text table (features, barcodes), gunzipping if needed.
pub fn read_lines(path: &Path) -> Result<Vec<String>> {
    let mut s = String::new();
    open_maybe_gz(path)?
        .read_to_string(&mut s)
        .map_err(|e| Error::io(path, &e))?;
    Ok(s.lines().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, genes_are_rows: bool) -> Result<CellMatrix> {
        read_matrix_market_from(&mut text.as_bytes(), Path::new("m.mtx"), genes_are_rows)
    }

    /// A three-line file announcing 2^36 cells (a 550 GB cell index): an error naming the
    /// file, not an abort of the process (fuzzing found 4,444,444,444 cells aborting it).
    #[test]
    fn cells_beyond_memory_are_a_limit_error() {
        let text = "%%MatrixMarket matrix coordinate integer general\n6404 68719476720 0\n";
        let e = parse(text, true).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Limit, "{e}");
        assert!(
            e.message.contains("m.mtx") && e.message.contains("cell index"),
            "{e}"
        );
    }

    #[test]
    fn reads_10x_orientation_and_sorts_rows() {
        let m = parse(
            "%%MatrixMarket matrix coordinate integer general\n% c\n3 2 4\n3 1 5\n1 1 2\n2 2 7\n1 2 0\n",
            true,
        )
        .unwrap();
        assert_eq!(m.n_cells, 2);
        assert_eq!(m.n_genes, 3);
        assert_eq!(m.indptr, vec![0, 2, 3]);
        assert_eq!(m.indices, vec![0, 2, 1]);
        assert_eq!(m.values, vec![2, 5, 7]);
    }

    #[test]
    fn errors_name_the_line() {
        let head = "%%MatrixMarket matrix coordinate integer general\n2 2 2\n";
        let e = parse(&format!("{head}1 1 1\n3 1 1\n"), true).unwrap_err();
        assert_eq!(e.message, "m.mtx:4: row index is not in 1..=2");
        let e = parse(&format!("{head}1 1 1\n1 2 -1\n"), true).unwrap_err();
        assert!(
            e.message.starts_with("m.mtx:4: value '-1'"),
            "{}",
            e.message
        );
        let e = parse(&format!("{head}1 1 1\n1 1 3\n"), true).unwrap_err();
        assert!(
            e.message.contains("duplicate entry for cell 1 / gene 1"),
            "{}",
            e.message
        );
        let e = parse(&format!("{head}1 1 1\n"), true).unwrap_err();
        assert!(e.message.contains("1 entries, the size line announced 2"));
        let e = parse("%%MatrixMarket matrix array integer general\n", true).unwrap_err();
        assert!(e.message.contains("only 'coordinate'"));
    }

    #[test]
    fn real_fields_with_whole_numbers_are_counts() {
        let m = parse(
            "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 3.0\n",
            false,
        )
        .unwrap();
        assert_eq!(m.values, vec![3]);
        assert!(parse(
            "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2.5\n",
            false
        )
        .is_err());
    }

    #[test]
    fn gene_order_by_decreasing_total() {
        let m = parse(
            "%%MatrixMarket matrix coordinate integer general\n3 2 4\n1 1 1\n2 1 5\n3 2 5\n2 2 1\n",
            true,
        )
        .unwrap();
        // totals: g0 = 1, g1 = 6, g2 = 5
        let order = m.order_by_decreasing_total();
        assert_eq!(order, vec![1, 2, 0]);
        let p = m.permute_genes(&order);
        // cell 0: g0 (1) -> col 2, g1 (5) -> col 0
        assert_eq!(&p.indices[..2], &[0, 2]);
        assert_eq!(&p.values[..2], &[5, 1]);
    }
}
