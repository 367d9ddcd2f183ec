//! Sorted runs (§16): the writer's buffer, sorted into the stored order of the layout by
//! value ranks (so the order agrees with the final categories and bins), spilled as Arrow
//! IPC files (or kept in memory when small), read back batch by batch by the merge.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};

use super::columns::{self, FinalType};
use super::queued_file::MAX_WRITE_BUFFER;
use crate::chromdata::spec::Layout;
use crate::error::{Error, ErrorKind, Result};

/// Spill directory inside the temporary store directory (removed before publishing).
pub(crate) const SPILL_DIR: &str = "_spill";
/// Bytes per record batch in spill files (the merge holds about one such batch per run).
const SPILL_BATCH_BYTES: u64 = 256 << 10;

/// Rows per spill batch for rows of `row_bytes` bytes: about `SPILL_BATCH_BYTES`, less
/// under small budgets (`available` bytes), so that the merge can hold a batch per run.
/// Write buffer of one spill file for `available` bytes of budget: a sixty-fourth of it,
/// 64 KiB to [`MAX_WRITE_BUFFER`] (why: there).
pub(crate) fn spill_write_buffer(available: u64) -> usize {
    (available / 64).clamp(64 << 10, MAX_WRITE_BUFFER as u64) as usize
}

pub(crate) fn spill_batch_rows(row_bytes: u64, available: u64) -> usize {
    let bytes = SPILL_BATCH_BYTES.min(available / 64).max(16 << 10);
    (bytes / row_bytes.max(1)).clamp(64, 4096) as usize
}

/// Row order of a spill run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOrder {
    /// (cell, trace, chrom, bin, input row): flat and primary+coords.
    Canonical,
    /// (chrom, cell, trace, bin, input row): partitioned, partition after partition.
    ChromMajor,
}

impl RunOrder {
    pub(crate) fn of(layout: Layout) -> RunOrder {
        if layout == Layout::Partitioned {
            RunOrder::ChromMajor
        } else {
            RunOrder::Canonical
        }
    }
}

/// Where a spill run lives.
pub(crate) enum RunData {
    Mem(Vec<RecordBatch>),
    /// Arrow IPC files holding consecutive column ranges of the run (one file, or one per
    /// column group written in parallel), whose batches are row-aligned.
    File(Vec<PathBuf>),
}

impl RunData {
    /// The run's files (none in memory).
    pub(crate) fn paths(&self) -> &[PathBuf] {
        match self {
            RunData::Mem(_) => &[],
            RunData::File(p) => p,
        }
    }
}

/// One sorted run.
pub(crate) struct RunSource {
    pub(crate) data: RunData,
    pub(crate) order: RunOrder,
    /// Batches are already in final form (written by an intermediate merge pass).
    pub(crate) finalized: bool,
    /// Largest batch of the run, bytes.
    pub(crate) batch_bytes: u64,
}

/// Value ranks that order the rows of a run: of each provisional cell, trace and bin id,
/// and of each bin's chromosome.
pub(crate) struct RunRanks {
    pub(crate) has_cells: bool,
    pub(crate) cell: Vec<u32>,
    pub(crate) trace: Vec<u32>,
    /// Rank of each provisional bin in (chrom, bin) order.
    pub(crate) bin: Vec<u32>,
    /// Rank of each provisional bin's chromosome.
    pub(crate) chrom_of_bin: Vec<u32>,
}

/// How runs are cut and where they go.
pub(crate) struct RunWriter {
    /// Rows per spilled batch.
    pub(crate) rows_per_batch: usize,
    pub(crate) threads: usize,
    /// The file of the run, or None to keep it in memory.
    pub(crate) path: Option<PathBuf>,
    /// Write buffer of each of its files ([`spill_write_buffer`]).
    pub(crate) write_buffer: usize,
}

/// Path of the `n`-th spilled run in the temporary directory `tmp`.
pub(crate) fn run_path(tmp: &Path, n: usize) -> PathBuf {
    tmp.join(SPILL_DIR).join(format!("run-{n:06}.arrow"))
}

/// Path of column group `g` of the run whose first group is at `base`.
fn group_path(base: &Path, g: usize) -> PathBuf {
    if g == 0 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().unwrap_or_default().to_string_lossy();
    base.with_file_name(format!("{stem}-g{g}.arrow"))
}

/// Consecutive column ranges of `schema` of about equal bytes per row, at most `n`.
fn column_groups(schema: &Schema, n: usize) -> Vec<std::ops::Range<usize>> {
    let width = |f: &FieldRef| f.data_type().primitive_width().unwrap_or(16) as u64;
    let total: u64 = schema.fields().iter().map(width).sum();
    let n = n.clamp(1, schema.fields().len().max(1)) as u64;
    let mut out = Vec::new();
    let (mut start, mut acc) = (0, 0u64);
    for (c, f) in schema.fields().iter().enumerate() {
        acc += width(f);
        let cut = acc * n >= total * (out.len() as u64 + 1);
        if cut && (out.len() as u64) < n - 1 && c + 1 < schema.fields().len() {
            out.push(start..c + 1);
            start = c + 1;
        }
    }
    out.push(start..schema.fields().len());
    out
}

/// Sort key of a run row: (primary key, secondary key, input row) and where the row is
/// (batch, row in batch).
#[derive(Debug, Clone, Copy)]
struct RunKey(u64, u64, u64, u32, u32);

/// Gives every column of `batches` one type: columns whose spill types differ between
/// batches (integers / float32 mixed with floats) become float64.
fn unify_spill_types(mut batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let first = batches[0].schema();
    let ncol = first.fields().len();
    let mut differ = Vec::new();
    for c in 0..ncol {
        let t0 = batches[0].column(c).data_type();
        if !batches.iter().all(|b| b.column(c).data_type() == t0) {
            differ.push(c);
        }
    }
    if differ.is_empty() {
        return Ok(batches);
    }
    let mut fields: Vec<Field> = first.fields().iter().map(|f| f.as_ref().clone()).collect();
    for &c in &differ {
        fields[c] = Field::new(first.field(c).name(), DataType::Float64, true);
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    for b in batches.iter_mut() {
        let mut cols: Vec<ArrayRef> = b.columns().to_vec();
        for &c in &differ {
            let a = &cols[c];
            cols[c] = match a.data_type() {
                DataType::Float64 => a.clone(),
                DataType::Float32 | DataType::Int64 => columns::finalize("", a, &FinalType::F64)?,
                t => {
                    return Err(Error::invalid_argument(format!(
                        "column {}: mixed spill types ({t})",
                        first.field(c).name()
                    )))
                }
            };
        }
        *b = RecordBatch::try_new(schema.clone(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    }
    Ok(batches)
}

/// Reads a spill run batch by batch.
pub(crate) enum RunReader {
    Mem(std::vec::IntoIter<RecordBatch>),
    /// The readers of the run's column-group files, and the whole run's schema.
    File(Vec<(IpcReader, PathBuf)>, SchemaRef),
}

type IpcReader = arrow_ipc::reader::FileReader<BufReader<File>>;

impl RunReader {
    pub(crate) fn open(src: RunData) -> Result<RunReader> {
        Ok(match src {
            RunData::Mem(v) => RunReader::Mem(v.into_iter()),
            RunData::File(paths) => {
                let mut parts = Vec::with_capacity(paths.len());
                let mut fields: Vec<FieldRef> = Vec::new();
                for p in paths {
                    let f = File::open(&p).map_err(|e| Error::io(&p, &e))?;
                    let r = arrow_ipc::reader::FileReader::try_new(BufReader::new(f), None)
                        .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", p.display())))?;
                    fields.extend(r.schema().fields().iter().cloned());
                    parts.push((r, p));
                }
                RunReader::File(parts, Arc::new(Schema::new(fields)))
            }
        })
    }

    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let (parts, schema) = match self {
            RunReader::Mem(it) => return Ok(it.next()),
            RunReader::File(parts, schema) => (parts, schema),
        };
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        let (mut rows, mut ended) = (None, None);
        for (r, p) in parts.iter_mut() {
            let unreadable = |e: &str| {
                Error::new(
                    ErrorKind::Io,
                    format!("{}: spill run unreadable: {e}", p.display()),
                )
            };
            let b = r
                .next()
                .transpose()
                .map_err(|e| unreadable(&e.to_string()))?;
            // Every column group ends after the same batch, and its batches have the rows
            // of the other groups' batches.
            if *ended.get_or_insert(b.is_none()) != b.is_none() {
                return Err(unreadable("its column groups have different batch counts"));
            }
            if let Some(b) = b {
                if *rows.get_or_insert(b.num_rows()) != b.num_rows() {
                    return Err(unreadable("its column groups' batches are not aligned"));
                }
                cols.extend(b.columns().iter().cloned());
            }
        }
        let Some(rows) = rows else { return Ok(None) };
        let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(schema.clone(), cols, &opts)
            .map(Some)
            .map_err(|e| Error::new(ErrorKind::Io, format!("spill run unreadable: {e}")))
    }
}

/// Sorts `batches` (spill form) into `order` and writes them as a run of batches of
/// about `SPILL_BATCH_BYTES`, gathered straight from the inputs (no sorted copy of the
/// whole run is ever held).
pub(crate) fn sort_into_run(
    batches: Vec<RecordBatch>,
    order: RunOrder,
    ranks: &RunRanks,
    out: RunWriter,
) -> Result<RunSource> {
    let batches = unify_spill_types(batches)?;
    let threads = crate::pool::resolve_threads(out.threads);
    let pool = if threads > 1 {
        Some(crate::pool::pool(threads)?)
    } else {
        None
    };
    let batches = presort(batches, order, ranks)?;
    let keys = run_keys(&batches, order, ranks, out.threads)?;
    let schema = batches[0].schema();
    let rows_per = out.rows_per_batch;
    let columns: Vec<Vec<&dyn Array>> = (0..schema.fields().len())
        .map(|c| batches.iter().map(|b| b.column(c).as_ref()).collect())
        .collect();
    let piece = |ks: &[RunKey]| -> Result<RecordBatch> {
        let idx: Vec<(usize, usize)> = ks.iter().map(|k| (k.3 as usize, k.4 as usize)).collect();
        let gather = |arrays: &Vec<&dyn Array>| arrow_select::interleave::interleave(arrays, &idx);
        let cols = match &pool {
            Some(pool) => pool.install(|| {
                use rayon::prelude::*;
                columns.par_iter().map(gather).collect::<Vec<_>>()
            }),
            None => columns.iter().map(gather).collect(),
        }
        .into_iter()
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
        RecordBatch::try_new(schema.clone(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))
    };
    let mut batch_bytes = 0u64;
    let Some(path) = out.path else {
        let mut pieces = Vec::with_capacity(keys.len() / rows_per + 1);
        for ks in keys.chunks(rows_per) {
            let p = piece(ks)?;
            batch_bytes = batch_bytes.max(p.get_array_memory_size() as u64);
            pieces.push(p);
        }
        return Ok(RunSource {
            data: RunData::Mem(pieces),
            order,
            finalized: false,
            batch_bytes,
        });
    };
    // The column groups are gathered and written by one thread each: the kernel's copy
    // into the page cache and the IPC encoding were the serial third of a run's spill.
    let groups = column_groups(&schema, threads);
    let write_group = |g: usize, cols: &std::ops::Range<usize>| -> Result<(PathBuf, u64)> {
        let path = group_path(&path, g);
        let ioerr = |e: arrow_schema::ArrowError| {
            Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
        };
        let gschema = Arc::new(Schema::new(schema.fields()[cols.clone()].to_vec()));
        let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
        let mut w = arrow_ipc::writer::FileWriter::try_new(
            BufWriter::with_capacity(out.write_buffer, f),
            &gschema,
        )
        .map_err(ioerr)?;
        let mut bytes = 0u64;
        for ks in keys.chunks(rows_per) {
            let idx: Vec<(usize, usize)> =
                ks.iter().map(|k| (k.3 as usize, k.4 as usize)).collect();
            let arrays = columns[cols.clone()]
                .iter()
                .map(|a| arrow_select::interleave::interleave(a, &idx))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
            let p = RecordBatch::try_new(gschema.clone(), arrays)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
            bytes = bytes.max(p.get_array_memory_size() as u64);
            w.write(&p).map_err(ioerr)?;
        }
        w.finish().map_err(ioerr)?;
        Ok((path, bytes))
    };
    let written: Vec<Result<(PathBuf, u64)>> = match &pool {
        Some(pool) if groups.len() > 1 => pool.install(|| {
            use rayon::prelude::*;
            groups
                .par_iter()
                .enumerate()
                .map(|(g, cols)| write_group(g, cols))
                .collect()
        }),
        _ => groups
            .iter()
            .enumerate()
            .map(|(g, cols)| write_group(g, cols))
            .collect(),
    };
    let mut paths = Vec::with_capacity(written.len());
    for r in written {
        let (p, bytes) = r?;
        paths.push(p);
        batch_bytes += bytes;
    }
    Ok(RunSource {
        data: RunData::File(paths),
        order,
        finalized: false,
        batch_bytes,
    })
}

/// Each batch sorted into `order` on its own, one batch at a time (the run's rows are then
/// gathered from a few sorted streams, front to back, instead of at random over the whole
/// buffer: the random gather's cache and TLB misses were a third of a wide write's time;
/// a batch's own gather stays within one batch). Only the locality changes: the run is
/// still sorted as a whole afterwards, so its order and bytes are the same.
fn presort(
    mut batches: Vec<RecordBatch>,
    order: RunOrder,
    ranks: &RunRanks,
) -> Result<Vec<RecordBatch>> {
    if batches.len() < 2 {
        return Ok(batches);
    }
    for b in batches.iter_mut() {
        let keys = run_keys(std::slice::from_ref(b), order, ranks, 1)?;
        if keys.iter().enumerate().all(|(i, k)| k.4 as usize == i) {
            continue;
        }
        let idx = arrow_array::UInt32Array::from_iter_values(keys.iter().map(|k| k.4));
        drop(keys);
        // On this thread: the sorted copies replace buffers this thread allocated, in its
        // own allocator arena (pool workers' copies stayed resident in theirs after the
        // spill: +25 % peak RSS at 2 M x 60 spots under glibc).
        let cols = b
            .columns()
            .iter()
            .map(|a| arrow_select::take::take(a.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
        *b = RecordBatch::try_new(b.schema(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("spill: {e}")))?;
    }
    Ok(batches)
}

/// Sort keys of the rows of `batches`: the order's key, then the input row, compared by
/// value (ranks), so the order agrees with the final sorted categories and bins.
fn run_keys(
    batches: &[RecordBatch],
    order: RunOrder,
    ranks: &RunRanks,
    threads: usize,
) -> Result<Vec<RunKey>> {
    let (cell_rank, trace_rank) = (&ranks.cell, &ranks.trace);
    let (bin_rank, chrom_rank) = (&ranks.bin, &ranks.chrom_of_bin);
    let has_cells = ranks.has_cells;
    let n: usize = batches.iter().map(|b| b.num_rows()).sum();
    if n as u64 > u32::MAX as u64 {
        return Err(Error::limit("a run holds at most 2^32 rows"));
    }
    let mut keys: Vec<RunKey> = Vec::with_capacity(n);
    for (bi, b) in batches.iter().enumerate() {
        let cells = b.column(0).as_primitive::<arrow_array::types::UInt32Type>();
        let traces = b.column(1).as_primitive::<arrow_array::types::UInt32Type>();
        let bins = b.column(2).as_primitive::<arrow_array::types::UInt32Type>();
        let input_rows = b.column(3).as_primitive::<arrow_array::types::UInt64Type>();
        for i in 0..b.num_rows() {
            let c = if has_cells {
                cell_rank[cells.value(i) as usize]
            } else {
                0
            };
            let t = trace_rank[traces.value(i) as usize];
            let bin = bins.value(i) as usize;
            let k = match order {
                RunOrder::Canonical => (c as u64) << 32 | t as u64,
                RunOrder::ChromMajor => (chrom_rank[bin] as u64) << 32 | c as u64,
            };
            let k2 = match order {
                RunOrder::Canonical => (bin_rank[bin] as u64) << 32,
                RunOrder::ChromMajor => (t as u64) << 32 | bin_rank[bin] as u64,
            };
            keys.push(RunKey(k, k2, input_rows.value(i), bi as u32, i as u32));
        }
    }
    let cmp = |a: &RunKey, b: &RunKey| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2));
    let threads = crate::pool::resolve_threads(threads);
    if threads > 1 && n > 1 << 16 {
        let pool = crate::pool::pool(threads)?;
        pool.install(|| {
            use rayon::slice::ParallelSliceMut;
            keys.par_sort_unstable_by(cmp)
        });
    } else {
        keys.sort_unstable_by(cmp);
    }
    Ok(keys)
}

/// Re-sorts a run spilled in another order (the layout changed after it was spilled);
/// one run at a time, so this needs no more memory than spilling it did.
/// `out.path` is used when the run was on disk (else it stays in memory).
pub(crate) fn resort_run(
    run: RunSource,
    order: RunOrder,
    ranks: &RunRanks,
    mut out: RunWriter,
) -> Result<RunSource> {
    if !matches!(run.data, RunData::File(_)) {
        out.path = None;
    }
    let old = run.data.paths().to_vec();
    let mut reader = RunReader::open(run.data)?;
    let mut batches = Vec::new();
    while let Some(b) = reader.next_batch()? {
        batches.push(b);
    }
    drop(reader);
    if batches.is_empty() {
        return Ok(RunSource {
            data: RunData::Mem(batches),
            order,
            finalized: false,
            batch_bytes: 0,
        });
    }
    let r = sort_into_run(batches, order, ranks, out)?;
    for p in old {
        let _ = std::fs::remove_file(p);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float32Array, UInt32Array, UInt64Array};

    fn schema(types: &[DataType]) -> Schema {
        let fields: Vec<Field> = types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
            .collect();
        Schema::new(fields)
    }

    #[test]
    fn column_groups_cover_every_column_once_in_order() {
        let mut types = vec![DataType::UInt32, DataType::UInt32, DataType::UInt64];
        types.extend(std::iter::repeat_n(DataType::Float32, 60));
        let s = schema(&types);
        for n in [1, 2, 3, 8, 100] {
            let g = column_groups(&s, n);
            assert!(!g.is_empty() && g.len() <= n.min(types.len()), "{n}: {g:?}");
            assert_eq!(g[0].start, 0);
            assert_eq!(g.last().unwrap().end, types.len());
            assert!(g
                .windows(2)
                .all(|w| w[0].end == w[1].start && w[0].start < w[0].end));
        }
        // Two groups of a 16 + 240 bytes-per-row run hold about half the bytes each.
        let g = column_groups(&s, 2);
        assert_eq!(g.len(), 2);
        let bytes = |r: &std::ops::Range<usize>| -> usize {
            r.clone().map(|c| types[c].primitive_width().unwrap()).sum()
        };
        assert!(bytes(&g[0]).abs_diff(bytes(&g[1])) <= 8, "{g:?}");
        // One column cannot be cut.
        assert_eq!(column_groups(&schema(&[DataType::UInt64]), 4), vec![0..1]);
    }

    fn write_ipc(path: &Path, batches: &[RecordBatch]) {
        let f = File::create(path).unwrap();
        let mut w = arrow_ipc::writer::FileWriter::try_new(f, &batches[0].schema()).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
    }

    fn ids(lo: u32, n: u32) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "id",
            Arc::new(UInt32Array::from_iter_values(lo..lo + n)) as ArrayRef,
        )])
        .unwrap()
    }

    fn vals(n: usize) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "row",
                Arc::new(UInt64Array::from_iter_values(0..n as u64)) as ArrayRef,
            ),
            (
                "v",
                Arc::new(Float32Array::from_iter_values((0..n).map(|i| i as f32))) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn column_group_files_are_read_side_by_side_and_checked() {
        let dir = std::env::temp_dir().join(format!("dc-run-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.arrow"), dir.join("b.arrow"));
        write_ipc(&a, &[ids(0, 3), ids(3, 2)]);
        write_ipc(&b, &[vals(3), vals(2)]);
        let mut r = RunReader::open(RunData::File(vec![a.clone(), b.clone()])).unwrap();
        let first = r.next_batch().unwrap().unwrap();
        let names: Vec<&str> = first
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["id", "row", "v"]);
        assert_eq!(first.num_rows(), 3);
        assert_eq!(first.column(0).as_ref(), ids(0, 3).column(0).as_ref());
        assert_eq!(first.column(2).as_ref(), vals(3).column(1).as_ref());
        assert_eq!(r.next_batch().unwrap().unwrap().num_rows(), 2);
        assert!(r.next_batch().unwrap().is_none());
        // Batches whose rows differ between groups, or a group with fewer batches: an Io
        // error naming the file, never a shifted or shortened run.
        write_ipc(&b, &[vals(2), vals(3)]);
        let mut r = RunReader::open(RunData::File(vec![a.clone(), b.clone()])).unwrap();
        let e = r.next_batch().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(
            e.to_string().contains("b.arrow") && e.to_string().contains("aligned"),
            "{e}"
        );
        write_ipc(&b, &[vals(3)]);
        let mut r = RunReader::open(RunData::File(vec![a, b])).unwrap();
        assert_eq!(r.next_batch().unwrap().unwrap().num_rows(), 3);
        let e = r.next_batch().unwrap_err();
        assert!(e.to_string().contains("batch counts"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
