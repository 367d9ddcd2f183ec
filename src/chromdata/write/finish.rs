//! `finish` of the streaming writer: the stored types and storage decisions, the memory
//! plan (row-group targets, merge block and fan-in within the budget), the merge of the
//! runs into the Parquet sinks of the layout, the index arrays, the metadata, and the
//! atomic publish (as a directory or a `.cdz`, §13, §16).

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::RecordBatch;
use arrow_schema::DataType;

use super::collected::Collected;
use super::columns::{FinalType, Group};
use super::derived::decide_storage;
use super::index_arrays::{write_index, zarr_store, SourceRows};
use super::merge::{merge, merge_passes, Finalizer};
use super::metadata::{write_group, write_metadata, StoreFacts};
use super::queued_file::{MAX_WRITE_BUFFER, QUEUE_DEPTH};
use super::row_groups::{plan, Plan};
use super::runs::{spill_batch_rows, spill_write_buffer, RunOrder, RunSource, SPILL_DIR};
use super::sinks::{SinkChoices, Sinks, StoredColumns};
use super::target::Target;
use crate::chromdata::spec::{self, FloatType, Layout, Storage};
use crate::error::{Error, ErrorKind, Result};
use crate::storage::fs;

/// Rows per merged output block (at most; fewer for wide rows, see `MERGE_BLOCK_BYTES`).
const BLOCK_ROWS: usize = 32768;
/// Bytes per merged output block (about; less under budgets below 128 MiB). Each block
/// costs serial work on the block encoder's thread (partition slices, column writers,
/// one pool dispatch of every column) while the workers wait: 8 MiB blocks instead of
/// 4 MiB took 1.0-1.9 s less user CPU at 10 M x 60 (and the output's pages follow the
/// blocks, so the bytes depend on this size, not on batch splits or threads).
const MERGE_BLOCK_BYTES: u64 = 8 << 20;
/// Bytes an open Parquet column writer holds whatever its rows: mostly the dictionary
/// encoder's hash table, made with room for 4,096 values (parquet 60's `Interner`: 8,192
/// slots of 9 bytes). Uncounted, 90 of them (60 dictionary-encoded tracks and 5 coords
/// partitions) took a 2.2 write under an 8 MiB budget to 16.5 MB allocated at once
/// (tests/chromdata_writer_budget.rs counts the allocations).
const COLUMN_WRITER_BYTES: u64 = 96 << 10;
/// Bytes counted for an open Parquet column writer without a dictionary, whatever its rows
/// (its buffers grow with its rows, which the row-group share counts): an allowance, not a
/// measurement of its own; with it, every layout of 60 tracks holds a 12 MiB budget
/// (tests/chromdata_writer_budget.rs).
const PLAIN_COLUMN_WRITER_BYTES: u64 = 16 << 10;
/// Smallest row-group target the writer lowers the default to when a row group of wide
/// rows would not fit the memory budget.
const MIN_AUTO_ROW_GROUP: u64 = 1024;

/// Writes the store; returns the number of intermediate merge passes.
pub(crate) fn write_store(mut inp: Collected) -> Result<usize> {
    let root = inp.tmp.clone();
    let spill = root.join(SPILL_DIR);
    let (types, layer_types) = unify_layer_types(&inp);
    let (storage, derived) = decide_storage(&inp, &types)?;
    let runs = std::mem::take(&mut inp.runs);
    let fin = Finalizer::new(&inp, types.clone());
    let sizes = Sizes::choose(&inp, &fin, &types, &storage, &runs);
    let order = RunOrder::of(inp.layout);
    let (runs, passes) = merge_passes(
        runs,
        &fin,
        order,
        sizes.fan_in,
        spill_batch_rows(inp.row_bytes.max(1), inp.available),
        spill_write_buffer(inp.available),
        &spill,
    )?;
    let run_files: Vec<PathBuf> = runs
        .iter()
        .flat_map(|r| r.data.paths().iter().cloned())
        .collect();
    let plan = plan(inp.layout, &inp.triples, inp.has_cells, sizes.t, sizes.tc);
    let fv = fin.first_value();
    let cols = StoredColumns::new(&inp, &fin.schema, fv, storage, layer_types);
    let choices = SinkChoices {
        coords_row_group_size: sizes.tc,
        dictionaries: sizes.dictionaries,
        file_buffer: sizes.file_buffer,
    };
    let mut sinks = Sinks::open(&inp, &root, &fin.schema, fv, &plan, &cols, choices)?;
    let src = write_rows(
        &inp,
        &plan,
        runs,
        &fin,
        sizes.block_rows,
        &mut sinks,
        &spill,
    )?;
    drop(fin);
    let zs = zarr_store(&root)?;
    let threads = crate::pool::resolve_threads(inp.threads);
    let index = || -> Result<(bool, usize)> {
        let has_source_row = src.finish(&zs, inp.n_spots, threads)?;
        Ok((has_source_row, write_index(&zs, inp.layout, &plan)?))
    };
    let (has_source_row, n_coord_groups) = if threads > 1 {
        // The runs are merged: their files go (unlinking the spill's page cache took a
        // tenth of a core-second per GB, serial at the end) while the index arrays are
        // written. Failures to remove are left to the removal of the spill directory.
        std::thread::scope(|scope| {
            let removal = scope.spawn(|| {
                for p in &run_files {
                    let _ = std::fs::remove_file(p);
                }
            });
            let r = index();
            let _ = removal.join();
            r
        })?
    } else {
        index()?
    };
    if inp.layout == Layout::PrimaryCoords {
        write_group(&root.join("index/coords"), &spec::Members::new())?;
    }
    let facts = StoreFacts {
        types: &types,
        cols: &cols,
        derived,
        plan: &plan,
        sinks,
        row_group_size: sizes.t,
        has_source_row,
        n_coord_groups,
    };
    write_metadata(&inp, facts, &root, &spill)?;
    publish(&root, &inp.target, inp.overwrite)?;
    Ok(passes)
}

/// The stored types with one type per layer (float64 when any axis is), and each layer's.
fn unify_layer_types(inp: &Collected) -> (Vec<FinalType>, Vec<FloatType>) {
    let mut types = inp.final_types.clone();
    let mut layer_f64 = vec![false; inp.layer_keys.len()];
    for (c, ty) in inp.cols.iter().zip(&types) {
        if let Group::Layer(k, _) = c.group {
            layer_f64[k] |= !matches!(ty, FinalType::F32);
        }
    }
    for (c, ty) in inp.cols.iter().zip(types.iter_mut()) {
        if let Group::Layer(k, _) = c.group {
            *ty = if layer_f64[k] {
                FinalType::F64
            } else {
                FinalType::F32
            };
        }
    }
    let layer_types = layer_f64
        .into_iter()
        .map(|f64| FloatType::of(!f64))
        .collect();
    (types, layer_types)
}

/// The memory plan of `finish`.
struct Sizes {
    /// Target rows per row group.
    t: u64,
    /// Target rows per coords row group (2.2).
    tc: u64,
    /// Rows per merged block.
    block_rows: usize,
    /// Runs merged at once.
    fan_in: usize,
    /// Whether the files' columns may be dictionary-encoded (the layout's choice) or none is.
    dictionaries: bool,
    /// Write buffer of each Parquet file.
    file_buffer: usize,
}

impl Sizes {
    fn choose(
        inp: &Collected,
        fin: &Finalizer<'_>,
        types: &[FinalType],
        storage: &[Storage],
        runs: &[RunSource],
    ) -> Sizes {
        let layout = inp.layout;
        let t = match (inp.row_group_size, layout) {
            (0, Layout::Partitioned) => 16384,
            (0, _) => 65536,
            (x, _) => x,
        };
        let tc = if inp.coords_row_group_size == 0 {
            16384
        } else {
            inp.coords_row_group_size
        };
        let fs = &fin.schema;
        let fv = fin.first_value();
        // Memory of the finish: the Parquet writers buffer one row group per open file (one
        // partition at a time for 2.1, whose runs are chromosome-major; every coords partition
        // at once for 2.2, whose merge is in canonical order), the merge one batch per run and
        // one block. When the default row-group targets would take more than half the
        // available budget they are halved (§7.3 lets a writer choose T; it is recorded);
        // the merge gets the rest and merges in several passes when there are more runs than
        // it can hold.
        let n_rows = inp.n_spots.max(1);
        let width = |cols: &mut dyn Iterator<Item = usize>| -> u64 {
            let mut ts = Vec::new();
            let mut strs = 0;
            for c in cols {
                ts.push(fs.field(c).data_type().clone());
                if c >= fv && c - fv < inp.cols.len() && matches!(types[c - fv], FinalType::Str) {
                    strs += inp.cols[c - fv].str_value_bytes / n_rows;
                }
            }
            buffered_row_bytes(&ts, strs)
        };
        let n_values = inp.cols.len();
        let (main_w, key_w) = match layout {
            Layout::PrimaryCoords => {
                let ei: Vec<usize> = (0..n_values)
                    .filter(|&i| inp.cols[i].group == Group::Extra)
                    .collect();
                let primary_extra = |i: usize| {
                    ei.iter()
                        .position(|&e| e == i)
                        .is_some_and(|k| matches!(storage[k], Storage::Primary))
                };
                (
                    width(
                        &mut (0..n_values)
                            .filter(|&i| inp.cols[i].group != Group::Extra || primary_extra(i))
                            .map(|i| fv + i),
                    ),
                    width(&mut (0..fv)),
                )
            }
            _ => (width(&mut (0..fv + n_values)), 0),
        };
        let n_chroms = {
            let mut c: Vec<i32> = inp.triples.iter().map(|x| x.2).collect();
            c.sort_unstable();
            c.dedup();
            c.len() as u64
        };
        // Column writers open at once: every column of the main files (twice: a block that
        // ends a row group opens the next group's writers before the finished ones are
        // appended) and, for 2.2, the key columns of every coords partition.
        let n_writers = 2 * (fv + n_values) as u64
            + if layout == Layout::PrimaryCoords {
                n_chroms * fv as u64
            } else {
                0
            };
        // The default row-group targets are halved while the sinks would take more than half
        // the budget. When even the smallest targets do not fit beside the dictionary
        // encoders' fixed memory (60 tracks: ~160 column writers, ~16 MB) and the row-group
        // sizes are the writer's to choose, no column is dictionary-encoded: the files take
        // more bytes, the budget holds. Row-group sizes given by the caller fix the bytes
        // for any budget (the fixed memory may then exceed a small one).
        let fit = |per_writer: u64| {
            let fixed = n_writers * per_writer;
            let share = (inp.available / 2).saturating_sub(fixed);
            let (mut t, mut tc) = (t, tc);
            loop {
                let (a, b) = (t * main_w, n_chroms * tc * key_w);
                if a + b <= share && fixed <= inp.available / 2 {
                    return (t, tc, fixed, true);
                }
                let can_t = inp.row_group_size == 0 && t > MIN_AUTO_ROW_GROUP;
                let can_tc = inp.coords_row_group_size == 0 && tc > MIN_AUTO_ROW_GROUP && b > 0;
                if can_t && (a >= b || !can_tc) {
                    t /= 2;
                } else if can_tc {
                    tc /= 2;
                } else {
                    return (t, tc, fixed, false);
                }
            }
        };
        let mut dictionaries = true;
        let (mut t, mut tc, mut fixed, fits) = fit(COLUMN_WRITER_BYTES);
        let sizes_chosen = inp.row_group_size == 0 && inp.coords_row_group_size == 0;
        if !fits && sizes_chosen {
            dictionaries = false;
            (t, tc, fixed, _) = fit(PLAIN_COLUMN_WRITER_BYTES);
        }
        let sink_bytes = |t: u64, tc: u64| fixed + t * main_w + n_chroms * tc * key_w;
        let row_bytes = inp.row_bytes.max(1);
        let block_bytes = MERGE_BLOCK_BYTES.min(inp.available / 16);
        let block_rows = ((block_bytes / row_bytes) as usize).clamp(256, BLOCK_ROWS);
        let batch_bytes = runs.iter().map(|r| r.batch_bytes).max().unwrap_or(0).max(1);
        // Files open at once, at most: spots, spot_tracks and each layer's file (of every
        // chromosome for 2.1) and, for 2.2, every coords partition. Their write buffers
        // share a sixteenth of the budget, at most MAX_WRITE_BUFFER each. The write
        // thread's queue holds up to 2 * QUEUE_DEPTH + 1 more (queued, being written,
        // kept for reuse).
        let per_set = 2 + inp.layer_keys.len() as u64;
        let n_files = match layout {
            Layout::Flat => per_set,
            Layout::Partitioned => n_chroms * per_set,
            Layout::PrimaryCoords => per_set + n_chroms,
        };
        let file_buffer =
            (inp.available / 16 / n_files.max(1)).clamp(8 << 10, MAX_WRITE_BUFFER as u64);
        let merge_mem = inp
            .available
            .saturating_sub(sink_bytes(t, tc))
            .saturating_sub((n_files + 2 * QUEUE_DEPTH as u64 + 1) * file_buffer)
            .saturating_sub(4 * block_rows as u64 * row_bytes);
        let fan_in = ((merge_mem / (4 * batch_bytes)) as usize).max(2);
        Sizes {
            t,
            tc,
            block_rows,
            fan_in,
            dictionaries,
            file_buffer: file_buffer as usize,
        }
    }
}

/// Merges the runs into the sinks (each partition's rows to its sinks) and records the
/// input row of every stored row (`source_row`, per partition for 2.1).
fn write_rows(
    inp: &Collected,
    plan: &Plan,
    runs: Vec<RunSource>,
    fin: &Finalizer<'_>,
    block_rows: usize,
    sinks: &mut Sinks,
    spill: &Path,
) -> Result<SourceRows> {
    let partitioned = inp.layout == Layout::Partitioned;
    let src_parts: Vec<u64> = if partitioned {
        let mut s = Vec::new();
        let mut acc = 0;
        for p in &plan.partitions {
            s.push(acc);
            acc += p.rows;
        }
        s
    } else {
        vec![0]
    };
    let mut src = SourceRows::new(spill, src_parts)?;
    let threads = crate::pool::resolve_threads(inp.threads);
    let pool = if threads > 1 {
        Some(crate::pool::pool(threads)?)
    } else {
        None
    };
    let chrom_col = fin.schema.fields().len() - 2;
    let rows_col = chrom_col + 1;
    let order = RunOrder::of(inp.layout);
    let part_rows_col = sinks.part_col(rows_col).unwrap_or(0);
    let mut encode = |block: RecordBatch| -> Result<()> {
        let parts = sinks.split(&block, chrom_col)?;
        if partitioned {
            for (p, b) in parts.iter().enumerate() {
                if let Some(b) = b {
                    src.push(p, b.column(part_rows_col).as_primitive::<UInt64Type>())?;
                }
            }
        } else {
            src.push(0, block.column(rows_col).as_primitive::<UInt64Type>())?;
        }
        sinks.write(&block, &parts, pool.as_deref())
    };
    if threads > 1 {
        // The merge (this thread) and the encoding of its blocks (a second thread, which
        // spreads the columns over the pool) overlap, one block in flight between them; the
        // blocks and their order are the same.
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<RecordBatch>(1);
            let encoder = scope.spawn(move || {
                crate::contain::catch(move || rx.into_iter().try_for_each(&mut encode))
                    .unwrap_or_else(|what| {
                        Err(Error::new(
                            ErrorKind::Internal,
                            format!("the block encoder panicked ({what})"),
                        ))
                    })
            });
            let merged = merge(runs, fin, order, block_rows, |block| {
                // A closed channel means the encoder stopped on an error, reported below.
                tx.send(block)
                    .map_err(|_| Error::new(ErrorKind::Internal, "the block encoder stopped"))
            });
            drop(tx);
            let encoded = encoder.join().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Internal,
                    "the block encoder panicked",
                ))
            });
            encoded.and(merged)
        })?;
    } else {
        merge(runs, fin, order, block_rows, &mut encode)?;
    }
    for s in sinks.list.iter_mut() {
        s.close()?;
    }
    Ok(src)
}

/// Bytes a Parquet writer buffers per row of `types` before a row group is flushed:
/// the plain-encoded values plus a 2-byte definition level per column, and half again
/// for the compressed pages made at the flush.
fn buffered_row_bytes(types: &[DataType], str_bytes: u64) -> u64 {
    let w: u64 = types
        .iter()
        .map(|t| match t {
            DataType::Boolean => 1,
            DataType::Int8 | DataType::UInt8 => 1,
            DataType::Int16 | DataType::UInt16 => 2,
            DataType::Int32 | DataType::UInt32 | DataType::Float32 => 4,
            DataType::Utf8 => 4,
            _ => 8,
        } + 2)
        .sum();
    (w + str_bytes) * 3 / 2
}

/// Files under `dir`, relative with `/`, `zarr.json` first then byte-wise order (§13).
fn member_list(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| Error::io(&d, &e))? {
            let e = e.map_err(|e| Error::io(&d, &e))?;
            let p = e.path();
            let ft = e.file_type().map_err(|e| Error::io(&p, &e))?;
            if ft.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap_or(&p)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push(rel);
            }
        }
    }
    out.sort_by(|a, b| (a != "zarr.json", a.as_bytes()).cmp(&(b != "zarr.json", b.as_bytes())));
    Ok(out)
}

/// The `.cdz` file under the zip writer. zip 4.6's `ZipWriter` finalizes the archive in its
/// `Drop` and prints "ZipWriter drop failed: ..." on stderr when that fails, which it does
/// after any earlier I/O error (its bookkeeping no longer matches the file: "Large file option
/// has not been set"; the full fault sweep of docs/reliability.md §7 saw it 242 times), and
/// 4.6 also panicked on an assertion there. So the zip writer never sees an I/O error: the
/// first one is kept in `error`, and from then on writes and seeks only move a virtual
/// position (nothing reaches the file). The zip writer's state stays consistent, its finalize
/// succeeds, nothing is printed; `write_cdz` reports the kept error (DC_ERR_IO naming the file).
struct CdzFile {
    inner: BufWriter<File>,
    pos: u64,
    end: u64,
    error: Rc<RefCell<Option<std::io::Error>>>,
}

impl CdzFile {
    fn failed(&self) -> bool {
        self.error.borrow().is_some()
    }

    fn keep(&self, e: std::io::Error) {
        self.error.borrow_mut().get_or_insert(e);
    }
}

impl Write for CdzFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.failed() {
            if let Err(e) = self.inner.write_all(buf) {
                self.keep(e);
            }
        }
        self.pos += buf.len() as u64;
        self.end = self.end.max(self.pos);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.failed() {
            if let Err(e) = self.inner.flush() {
                self.keep(e);
            }
        }
        Ok(())
    }
}

impl Seek for CdzFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let at = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.end.checked_add_signed(d),
        }
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before 0"))?;
        if !self.failed() && at != self.pos {
            if let Err(e) = self.inner.seek(SeekFrom::Start(at)) {
                self.keep(e);
            }
        }
        self.pos = at;
        Ok(at)
    }
}

fn write_cdz(dir: &Path, out: &Path) -> Result<()> {
    let zerr =
        |e: zip::result::ZipError| Error::new(ErrorKind::Io, format!("{}: {e}", out.display()));
    let f = File::create(out).map_err(|e| Error::io(out, &e))?;
    let error = Rc::new(RefCell::new(None));
    // Members are copied in 8 KiB reads, written in MAX_WRITE_BUFFER pieces (why: there).
    let mut z = zip::ZipWriter::new(CdzFile {
        inner: BufWriter::with_capacity(MAX_WRITE_BUFFER, f),
        pos: 0,
        end: 0,
        error: error.clone(),
    });
    let kept = || error.borrow().as_ref().map(|e| Error::io(out, e));
    if let Err(e) = add_members(&mut z, dir, &kept) {
        // Its Drop finalizes the archive (through CdzFile: it cannot fail on I/O), in a
        // containment scope all the same; the caller deletes the partial file.
        let _ = crate::contain::catch(move || drop(z));
        return Err(e);
    }
    let w = crate::contain::catch(move || z.finish())
        .map_err(|what| {
            Error::new(
                ErrorKind::Io,
                format!("{}: finishing the zip failed ({what})", out.display()),
            )
        })?
        .map_err(zerr)?;
    if let Some(e) = kept() {
        return Err(e);
    }
    let f = w
        .inner
        .into_inner()
        .map_err(|e| Error::io(out, e.error()))?;
    f.sync_all().map_err(|e| Error::io(out, &e))
}

/// Every member of the tree `dir` into the zip `z` (STORED); stops at the first write error
/// `kept` reports.
fn add_members(
    z: &mut zip::ZipWriter<CdzFile>,
    dir: &Path,
    kept: &dyn Fn() -> Option<Error>,
) -> Result<()> {
    for m in member_list(dir)? {
        let p = dir.join(&m);
        let zerr = |e: zip::result::ZipError| {
            Error::new(
                ErrorKind::Io,
                format!("{}: adding it to the zip: {e}", p.display()),
            )
        };
        let size = std::fs::metadata(&p).map_err(|e| Error::io(&p, &e))?.len();
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .large_file(size >= 0xFFFF_FFFF);
        z.start_file(m.as_str(), opts).map_err(zerr)?;
        let mut src = File::open(&p).map_err(|e| Error::io(&p, &e))?;
        std::io::copy(&mut src, z).map_err(|e| Error::io(&p, &e))?;
        if let Some(e) = kept() {
            return Err(e);
        }
    }
    Ok(())
}

/// Moves the finished tree in `tmp` to `target` (as a `.cdz` when the target ends in it),
/// or uploads it to an object store.
fn publish(tmp: &Path, target: &Target, overwrite: bool) -> Result<()> {
    match target {
        Target::Local(p) => publish_local(tmp, p, overwrite),
        #[cfg(feature = "remote")]
        Target::Remote(r) => super::target::remote::publish(r, tmp, overwrite, write_cdz),
    }
}

fn publish_local(tmp: &Path, target: &Path, overwrite: bool) -> Result<()> {
    let existing = if overwrite {
        fs::Existing::Replace
    } else {
        fs::Existing::Keep
    };
    let cdz = target
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("cdz"));
    if !cdz {
        return fs::publish_dir(tmp, target, existing, fs::Flush::Tree);
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmpzip = fs::parent_of(target).join(fs::fresh_temp_name(&name));
    if let Err(e) =
        write_cdz(tmp, &tmpzip).and_then(|_| fs::publish_file(&tmpzip, target, existing))
    {
        let _ = std::fs::remove_file(&tmpzip);
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(tmp);
    Ok(())
}
