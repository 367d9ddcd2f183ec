//! Streaming import of a 4DN FOF-CT core table (CSV) into a ChromData store.
//!
//! The file starts with `#` header lines; `##FOF-CT_version=...` and
//! `##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, ...)` are read,
//! other `#` lines are skipped. Without a `##columns` line the first non-`#` line is taken
//! as the column header. Rows are read in chunks of [`CHUNK_ROWS`] and appended to a
//! [`ChromDataWriter`], so memory stays bounded by the chunk plus the writer's budget.
//!
//! Column mapping: `Trace_ID` → trace_id, `Cell_ID` → cell_id (optional), `X`/`Y`/`Z` →
//! x/y/z (empty, `NaN` or `NA` → NaN), `Chrom`, `Chrom_Start`, `Chrom_End` → chrom / start /
//! end; every other column is kept as an extra spot column under its own name, typed per
//! chunk (integers, else floats, else strings; empty = missing) and unified by the writer.
//! Fields are comma-separated; a field wrapped in double quotes has them removed (no
//! embedded commas). Malformed lines are reported as `Format` errors "file:line: ...".

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::write::{ChromDataWriter, WriterOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::{self, Observer, Stage, Unit};
use crate::storage::Root;

/// Rows per appended chunk (at most; fewer under small memory budgets).
pub const CHUNK_ROWS: usize = 65536;

const REQUIRED: [(&str, &str); 7] = [
    ("Trace_ID", "trace_id"),
    ("X", "x"),
    ("Y", "y"),
    ("Z", "z"),
    ("Chrom", "chrom"),
    ("Chrom_Start", "start"),
    ("Chrom_End", "end"),
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ColKind {
    Unknown,
    Int,
    Float,
    Str,
}

struct Col {
    name: String,
    role: &'static str,
    kind: ColKind,
    values: Vec<Option<String>>,
    lines: Vec<u64>,
}

fn unquote(s: &str) -> &str {
    let t = s.trim();
    if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') {
        &t[1..t.len() - 1]
    } else {
        t
    }
}

/// Imports the FOF-CT table `csv_path` into a new store at `out_path` (directory or
/// `.cdz`), with the writer `options`. Returns the number of spots written.
///
/// Errors: `NotFound` / `Io` (files), `Format` ("file:line: ..." for malformed lines,
/// missing required columns), and every error of [`ChromDataWriter`].
pub fn import(
    csv_path: impl AsRef<Path>,
    out_path: impl AsRef<Path>,
    options: WriterOptions,
) -> Result<u64> {
    import_observed(csv_path, out_path, options, &progress::Silent)
}

/// [`import`], telling `observer` how far it got: [`Stage::Read`] in bytes of the table
/// (after every chunk of rows), then [`Stage::Finish`] (the writer's sort, merge and index;
/// no count) before and after. A cancel abandons the write: nothing appears at `out_path`.
pub fn import_observed(
    csv_path: impl AsRef<Path>,
    out_path: impl AsRef<Path>,
    options: WriterOptions,
    observer: &dyn Observer,
) -> Result<u64> {
    let out = Root::Local(out_path.as_ref().to_path_buf());
    import_observed_at(csv_path, out, options, observer)
}

/// [`import_observed`] into a store at a local path or an object-store URL (`out`; see
/// [`ChromDataWriter::create_deferred_at`]: to a URL the store is built in the local spill
/// directory and uploaded at the end).
pub fn import_observed_at(
    csv_path: impl AsRef<Path>,
    out: Root,
    options: WriterOptions,
    observer: &dyn Observer,
) -> Result<u64> {
    let csv = csv_path.as_ref();
    let disp = csv.display().to_string();
    let f = File::open(csv).map_err(|e| Error::io(csv, &e))?;
    let file_bytes = f.metadata().map(|m| m.len()).ok();
    let mut bytes_read = 0u64;
    let read_progress = progress::counter(observer, Stage::Read, Unit::Bytes, file_bytes);
    read_progress(0)?;
    let mut lines = BufReader::with_capacity(1 << 20, f);
    let mut header: Option<Vec<String>> = None;
    // An eighth of the budget holds the chunk of parsed lines (about 64 bytes per field);
    // the writer gets the rest, so the import as a whole stays within the budget.
    let mut options = options;
    let budget = match options.memory_budget {
        0 => super::default_memory_budget(),
        b => b,
    };
    options.memory_budget = (budget - budget / 8).max(1 << 20);
    let chunk_bytes = budget / 8;
    let mut chunk_rows = 0;
    let mut w = ChromDataWriter::create_at(out, options)?;
    let mut cols: Vec<Col> = Vec::new();
    let mut line_no = 0u64;
    let mut buf = String::new();
    let mut total = 0u64;
    let ferr = |line: u64, msg: String| Error::format(format!("{disp}:{line}: {msg}"));
    loop {
        buf.clear();
        let n = lines
            .read_line(&mut buf)
            .map_err(|e| Error::new(ErrorKind::Io, format!("{disp}:{}: {e}", line_no + 1)))?;
        if n == 0 {
            break;
        }
        bytes_read += n as u64;
        line_no += 1;
        let line = buf.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            if let Some(c) = h.trim_start_matches('#').trim().strip_prefix("columns=") {
                let c = c.trim();
                let c = c
                    .strip_prefix('(')
                    .and_then(|c| c.strip_suffix(')'))
                    .ok_or_else(|| ferr(line_no, "##columns= must be (name, name, ...)".into()))?;
                header = Some(c.split(',').map(|s| unquote(s).to_string()).collect());
            }
            continue;
        }
        if cols.is_empty() {
            let names = match header.take() {
                Some(h) => h,
                None => {
                    // The first line is the header.
                    header = Some(line.split(',').map(|s| unquote(s).to_string()).collect());
                    let h = header.take().unwrap_or_default();
                    cols = make_cols(&h, &disp, line_no)?;
                    continue;
                }
            };
            cols = make_cols(&names, &disp, line_no)?;
        }
        if chunk_rows == 0 {
            chunk_rows =
                ((chunk_bytes / (64 * cols.len().max(1) as u64)) as usize).clamp(256, CHUNK_ROWS);
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != cols.len() {
            return Err(ferr(
                line_no,
                format!("expected {} fields, found {}", cols.len(), fields.len()),
            ));
        }
        for (c, v) in cols.iter_mut().zip(fields) {
            let v = unquote(v);
            c.values.push((!v.is_empty()).then(|| v.to_string()));
            c.lines.push(line_no);
        }
        if cols[0].values.len() >= chunk_rows {
            total += flush(&mut w, &mut cols, &disp)?;
            read_progress(bytes_read)?;
        }
    }
    if cols.is_empty() {
        return Err(Error::format(format!(
            "{disp}: no column header and no data"
        )));
    }
    total += flush(&mut w, &mut cols, &disp)?;
    read_progress(bytes_read)?;
    progress::uncounted(observer, Stage::Finish, Unit::Rows, total, || w.finish())?;
    Ok(total)
}

fn make_cols(names: &[String], disp: &str, line: u64) -> Result<Vec<Col>> {
    // A column name becomes an Arrow field name, which the C Data interface carries as a C
    // string: a NUL (or any control character) would make every stream of the store fail.
    if let Some(n) = names.iter().find(|n| n.chars().any(char::is_control)) {
        return Err(Error::format(format!(
            "{disp}:{line}: column name {n:?} contains a control character"
        )));
    }
    for (req, _) in REQUIRED {
        if !names.iter().any(|n| n == req) {
            return Err(Error::format(format!(
                "{disp}:{line}: required FOF-CT column {req} is missing (columns: {names:?})"
            )));
        }
    }
    Ok(names
        .iter()
        .map(|n| {
            let role = REQUIRED
                .iter()
                .find(|(r, _)| r == n)
                .map(|(_, to)| *to)
                .unwrap_or(if n == "Cell_ID" { "cell_id" } else { "" });
            Col {
                name: n.clone(),
                role,
                kind: ColKind::Unknown,
                values: Vec::new(),
                lines: Vec::new(),
            }
        })
        .collect())
}

fn flush(w: &mut ChromDataWriter, cols: &mut [Col], disp: &str) -> Result<u64> {
    let n = cols[0].values.len();
    if n == 0 {
        return Ok(0);
    }
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for c in cols.iter_mut() {
        let at = |i: usize| c.lines[i];
        let bad = |i: usize, what: &str, v: &str| {
            Error::format(format!(
                "{disp}:{}: column {}: {what} \"{v}\"",
                at(i),
                c.name
            ))
        };
        let a: ArrayRef = match c.role {
            "x" | "y" | "z" => {
                let mut v = Vec::with_capacity(n);
                for (i, s) in c.values.iter().enumerate() {
                    v.push(match s.as_deref() {
                        None | Some("NaN" | "nan" | "NA") => f64::NAN,
                        Some(s) => s.parse().map_err(|_| bad(i, "not a number:", s))?,
                    });
                }
                Arc::new(Float64Array::from(v))
            }
            "start" | "end" => {
                let mut v = Vec::with_capacity(n);
                for (i, s) in c.values.iter().enumerate() {
                    let s = s.as_deref().ok_or_else(|| bad(i, "missing value", ""))?;
                    v.push(s.parse::<i64>().map_err(|_| bad(i, "not an integer:", s))?);
                }
                Arc::new(Int64Array::from(v))
            }
            "chrom" => {
                if let Some(i) = c.values.iter().position(Option::is_none) {
                    return Err(bad(i, "missing value", ""));
                }
                Arc::new(StringArray::from(c.values.clone()))
            }
            role => {
                let id = role == "trace_id" || role == "cell_id";
                if id {
                    if let Some(i) = c.values.iter().position(Option::is_none) {
                        return Err(bad(i, "missing value", ""));
                    }
                }
                let all_int = c.values.iter().flatten().all(|s| s.parse::<i64>().is_ok());
                let all_float =
                    all_int || (!id && c.values.iter().flatten().all(|s| s.parse::<f64>().is_ok()));
                let kind = match (c.kind, all_int, all_float) {
                    (ColKind::Str, _, _) => ColKind::Str,
                    (ColKind::Unknown, true, _) => ColKind::Int,
                    (ColKind::Unknown, false, true) => ColKind::Float,
                    (ColKind::Unknown, false, false) => ColKind::Str,
                    (ColKind::Int, true, _) => ColKind::Int,
                    (ColKind::Int | ColKind::Float, false, true) if !id => ColKind::Float,
                    (ColKind::Float, true, _) => ColKind::Float,
                    _ => {
                        let i = c
                            .values
                            .iter()
                            .position(|s| {
                                s.as_deref().is_some_and(|s| {
                                    if id {
                                        s.parse::<i64>().is_err()
                                    } else {
                                        s.parse::<f64>().is_err()
                                    }
                                })
                            })
                            .unwrap_or(0);
                        let v = c.values[i].clone().unwrap_or_default();
                        return Err(bad(
                            i,
                            "earlier rows were numeric, found the non-numeric value",
                            &v,
                        ));
                    }
                };
                c.kind = kind;
                match kind {
                    ColKind::Int => Arc::new(Int64Array::from(
                        c.values
                            .iter()
                            .map(|s| s.as_deref().and_then(|s| s.parse::<i64>().ok()))
                            .collect::<Vec<_>>(),
                    )),
                    ColKind::Float => Arc::new(Float64Array::from(
                        c.values
                            .iter()
                            .map(|s| s.as_deref().and_then(|s| s.parse::<f64>().ok()))
                            .collect::<Vec<_>>(),
                    )),
                    _ => Arc::new(StringArray::from(c.values.clone())),
                }
            }
        };
        let name = if c.role.is_empty() {
            c.name.as_str()
        } else {
            c.role
        };
        fields.push(Field::new(name, a.data_type().clone(), true));
        arrays.push(a);
        c.values.clear();
        c.lines.clear();
    }
    debug_assert!(fields.iter().all(|f| f.data_type() != &DataType::Null));
    let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    w.append(b)?;
    Ok(n as u64)
}
