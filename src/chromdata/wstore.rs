//! `finish` of the streaming writer: run structure and row groups from the per-(cell,
//! trace, chrom) counts (§7), the k-way merge of the spilled runs into canonical order,
//! the Parquet files of each layout (§8–§10), derived columns (§10.3), `index/` arrays
//! (§11, Zarr v3 through zarrs), small tables and categories (§5), metadata (§3, §4), the
//! `.cdz` zip (§13) and the atomic publish (§16).

use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int16Type, Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::spec::{
    self, categories_path, portable, CodeType, ColumnDesc, ComponentKind, DerivedKey, FloatType,
    SmallTable, ValueType, AXES,
};
use super::wcol::{self, ColState, FinalType, Group, Slot};
use super::writer::{spill_batch_rows, PassTable, RunData, RunOrder, RunReader, RunSource};
use super::Layout;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::fs;

/// Spill directory inside the temporary store directory (removed before publishing).
pub(crate) const SPILL_DIR: &str = "_spill";
/// Rows per merged output block (at most; fewer for wide rows, see `MERGE_BLOCK_BYTES`).
const BLOCK_ROWS: usize = 16384;
/// Bytes per merged output block (about).
const MERGE_BLOCK_BYTES: u64 = 4 << 20;
/// Smallest row-group target the writer lowers the default to when a row group of wide
/// rows would not fit the memory budget.
const MIN_AUTO_ROW_GROUP: u64 = 1024;
/// Elements per chunk of 1-D index arrays (§6.1).
const INDEX_CHUNK: u64 = 1_048_576;

pub(crate) struct Input {
    pub(crate) tmp: PathBuf,
    pub(crate) target: PathBuf,
    pub(crate) layout: Layout,
    pub(crate) coord_f32: bool,
    pub(crate) row_group_size: u64,
    pub(crate) coords_row_group_size: u64,
    pub(crate) threads: usize,
    pub(crate) n_spots: u64,
    pub(crate) has_cells: bool,
    pub(crate) has_coords: bool,
    pub(crate) bins: RecordBatch,
    pub(crate) chrom_names: Vec<String>,
    pub(crate) chrom_of_bin: Vec<i32>,
    /// Provisional → final bin id (None: bins were given, ids are final).
    pub(crate) bin_final: Option<Vec<u32>>,
    pub(crate) cell_final: Vec<u32>,
    pub(crate) trace_final: Vec<u32>,
    pub(crate) trace_cats: ArrayRef,
    pub(crate) cell_cats: Option<ArrayRef>,
    pub(crate) cols: Vec<ColState>,
    pub(crate) final_types: Vec<FinalType>,
    pub(crate) layer_keys: Vec<String>,
    /// (cell code or -1, trace code, chrom code, spots), sorted.
    pub(crate) triples: Vec<(i32, i32, i32, u64)>,
    pub(crate) runs: Vec<RunSource>,
    pub(crate) overwrite: bool,
    /// Bytes of the memory budget left for the merge and the Parquet writers.
    pub(crate) available: u64,
    /// Bytes per row of the spilled batches (largest seen; 1 when unknown).
    pub(crate) row_bytes: u64,
    /// Bin tracks (n_bins rows), if set.
    pub(crate) bin_tracks: Option<RecordBatch>,
    /// Pass-through tables, staged in the spill directory.
    pub(crate) pass_tables: Vec<PassTable>,
}

// ---------------------------------------------------------------------------------------
// Run structure and row groups (§7)

#[derive(Debug, Clone)]
struct Run {
    cell: i32,
    trace: i32,
    /// -1: several chromosomes (flat only).
    chrom: i32,
    len: u64,
}

/// §7.3 packing. `units`: each unit's run lengths.
fn pack(units: &[Vec<u64>], t: u64) -> Vec<u64> {
    let mut leaves = Vec::new();
    for u in units {
        let s: u64 = u.iter().sum();
        if s <= t {
            leaves.push(s);
            continue;
        }
        for &r in u {
            if r <= t {
                leaves.push(r);
            } else {
                let mut x = r;
                while x > 0 {
                    let p = x.min(t);
                    leaves.push(p);
                    x -= p;
                }
            }
        }
    }
    let mut groups = Vec::new();
    let mut cur = 0;
    for l in leaves {
        if cur > 0 && cur + l > t {
            groups.push(cur);
            cur = 0;
        }
        cur += l;
    }
    if cur > 0 {
        groups.push(cur);
    }
    groups
}

/// Units of a run list: cell segments (runs grouped by `seg` key) or, without cells, runs.
fn units_of(runs: &[Run], has_cells: bool, seg: impl Fn(&Run) -> (i32, i32)) -> Vec<Vec<u64>> {
    if !has_cells {
        return runs.iter().map(|r| vec![r.len]).collect();
    }
    let mut out: Vec<Vec<u64>> = Vec::new();
    let mut last = None;
    for r in runs {
        let k = seg(r);
        if last != Some(k) {
            out.push(Vec::new());
            last = Some(k);
        }
        if let Some(u) = out.last_mut() {
            u.push(r.len);
        }
    }
    out
}

fn offsets(lens: impl Iterator<Item = u64>) -> Vec<i64> {
    let mut v = vec![0i64];
    let mut acc = 0i64;
    for l in lens {
        acc += l as i64;
        v.push(acc);
    }
    v
}

/// Cell segments of runs: (offsets, codes, first run of each segment).
fn segments(runs: &[Run], seg: impl Fn(&Run) -> (i32, i32)) -> (Vec<i64>, Vec<i32>, Vec<usize>) {
    let mut offs = vec![0i64];
    let mut codes = Vec::new();
    let mut first = Vec::new();
    let mut acc = 0i64;
    let mut last = None;
    for (i, r) in runs.iter().enumerate() {
        let k = seg(r);
        if last != Some(k) {
            if last.is_some() {
                offs.push(acc);
            }
            codes.push(r.cell);
            first.push(i);
            last = Some(k);
        }
        acc += r.len as i64;
    }
    if last.is_some() {
        offs.push(acc);
    }
    (offs, codes, first)
}

/// One set of row-aligned files: one file or one per partition.
#[derive(Debug, Clone)]
struct Partition {
    chrom: i32,
    rows: u64,
    groups: Vec<u64>,
}

#[derive(Debug, Default)]
struct Plan {
    /// Stored runs (primary side for 2.2).
    runs: Vec<Run>,
    cell_offsets: Vec<i64>,
    cell_codes: Vec<i32>,
    /// Row groups of the main file set (flat / primary); partitioned: per partition.
    groups: Vec<u64>,
    partitions: Vec<Partition>,
    cell_partition: Vec<i32>,
    /// 2.2 coords side.
    coords_runs: Vec<Run>,
    coords_parts: Vec<Partition>,
    primary_run: Vec<i64>,
}

fn plan(
    layout: Layout,
    triples: &[(i32, i32, i32, u64)],
    has_cells: bool,
    t: u64,
    tc: u64,
) -> Plan {
    let canon: Vec<Run> = triples
        .iter()
        .map(|&(cell, trace, chrom, len)| Run {
            cell,
            trace,
            chrom,
            len,
        })
        .collect();
    let by_chrom = || {
        let mut v: Vec<(usize, Run)> = canon.iter().cloned().enumerate().collect();
        v.sort_by_key(|(i, r)| (r.chrom, *i));
        v
    };
    let partitions_of = |runs: &[Run], t: u64| -> Vec<Partition> {
        let mut parts: Vec<Partition> = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            let c = runs[i].chrom;
            let mut j = i;
            while j < runs.len() && runs[j].chrom == c {
                j += 1;
            }
            let pr = &runs[i..j];
            let units = units_of(pr, has_cells, |r| (r.chrom, r.cell));
            parts.push(Partition {
                chrom: c,
                rows: pr.iter().map(|r| r.len).sum(),
                groups: pack(&units, t),
            });
            i = j;
        }
        parts
    };
    let mut p = Plan::default();
    match layout {
        Layout::Flat => {
            let mut runs: Vec<Run> = Vec::new();
            for r in &canon {
                match runs.last_mut() {
                    Some(l) if l.cell == r.cell && l.trace == r.trace => {
                        l.len += r.len;
                        if l.chrom != r.chrom {
                            l.chrom = -1;
                        }
                    }
                    _ => runs.push(r.clone()),
                }
            }
            p.groups = pack(&units_of(&runs, has_cells, |r| (r.cell, 0)), t);
            if has_cells {
                let (o, c, _) = segments(&runs, |r| (r.cell, 0));
                p.cell_offsets = o;
                p.cell_codes = c;
            }
            p.runs = runs;
        }
        Layout::Partitioned => {
            let runs: Vec<Run> = by_chrom().into_iter().map(|(_, r)| r).collect();
            p.partitions = partitions_of(&runs, t);
            p.groups = p.partitions.iter().flat_map(|q| q.groups.clone()).collect();
            if has_cells {
                let (o, c, first) = segments(&runs, |r| (r.chrom, r.cell));
                let part_index: HashMap<i32, i32> = p
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(i, q)| (q.chrom, i as i32))
                    .collect();
                p.cell_partition = first.iter().map(|&i| part_index[&runs[i].chrom]).collect();
                p.cell_offsets = o;
                p.cell_codes = c;
            }
            p.runs = runs;
        }
        Layout::PrimaryCoords => {
            p.groups = pack(&units_of(&canon, has_cells, |r| (r.cell, 0)), t);
            if has_cells {
                let (o, c, _) = segments(&canon, |r| (r.cell, 0));
                p.cell_offsets = o;
                p.cell_codes = c;
            }
            let bc = by_chrom();
            p.primary_run = bc.iter().map(|(i, _)| *i as i64).collect();
            p.coords_runs = bc.into_iter().map(|(_, r)| r).collect();
            p.coords_parts = partitions_of(&p.coords_runs, tc);
            p.runs = canon;
        }
    }
    if !has_cells {
        p.cell_offsets = vec![0];
    }
    p
}

// ---------------------------------------------------------------------------------------
// Final batches and the merge

/// Converts spill batches into final batches:
/// bin_id, trace_id codes, [cell_id codes], [x, y, z], values..., __chrom, __row.
struct Finalizer<'a> {
    inp: &'a Input,
    schema: SchemaRef,
    trace_type: DataType,
    cell_type: DataType,
    types: Vec<FinalType>,
}

impl<'a> Finalizer<'a> {
    fn new(inp: &'a Input, types: Vec<FinalType>) -> Self {
        let code_t = |n: usize| {
            if n <= wcol::INT16_CODES_MAX {
                DataType::Int16
            } else {
                DataType::Int32
            }
        };
        let trace_type = code_t(inp.trace_cats.len());
        let cell_type = code_t(inp.cell_cats.as_ref().map_or(0, |c| c.len()));
        let mut fields = vec![
            Field::new("bin_id", DataType::Int32, true),
            Field::new("trace_id", trace_type.clone(), true),
        ];
        if inp.has_cells {
            fields.push(Field::new("cell_id", cell_type.clone(), true));
        }
        if inp.has_coords {
            let ct = if inp.coord_f32 {
                DataType::Float32
            } else {
                DataType::Float64
            };
            for a in ["x", "y", "z"] {
                fields.push(Field::new(a, ct.clone(), true));
            }
        }
        for (c, t) in inp.cols.iter().zip(&types) {
            fields.push(Field::new(&c.name, t.stored(), true));
        }
        fields.push(Field::new("__chrom", DataType::Int32, true));
        fields.push(Field::new("__row", DataType::UInt64, true));
        Finalizer {
            inp,
            schema: Arc::new(Schema::new(fields)),
            trace_type,
            cell_type,
            types,
        }
    }

    fn first_value(&self) -> usize {
        2 + self.inp.has_cells as usize + 3 * self.inp.has_coords as usize
    }

    fn convert(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let inp = self.inp;
        let n = b.num_rows();
        let prov = |i: usize| b.column(i).as_primitive::<UInt32Type>();
        let bins: Vec<i32> = prov(2)
            .values()
            .iter()
            .map(|&p| match &inp.bin_final {
                Some(f) => f[p as usize] as i32,
                None => p as i32,
            })
            .collect();
        let chrom: Vec<i32> = bins.iter().map(|&b| inp.chrom_of_bin[b as usize]).collect();
        let codes = |vals: &[u32], map: &[u32], t: &DataType| {
            wcol::codes_array(
                vals.iter().map(|&p| Some(map[p as usize] as i32)).collect(),
                t,
            )
        };
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(bins)),
            codes(prov(1).values(), &inp.trace_final, &self.trace_type),
        ];
        if inp.has_cells {
            cols.push(codes(prov(0).values(), &inp.cell_final, &self.cell_type));
        }
        let mut src = 4;
        if inp.has_coords {
            for _ in 0..3 {
                cols.push(wcol::coord_array(b.column(src), inp.coord_f32));
                src += 1;
            }
        }
        for (i, (c, t)) in inp.cols.iter().zip(&self.types).enumerate() {
            cols.push(wcol::finalize(&c.name, b.column(src + i), t)?);
        }
        cols.push(Arc::new(Int32Array::from(chrom)));
        cols.push(b.column(3).clone());
        debug_assert_eq!(cols[0].len(), n);
        RecordBatch::try_new(self.schema.clone(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("final batch: {e}")))
    }
}

type Key = (i32, i32, i32, i32, u64);

struct Cursor {
    /// Batches are final already (an intermediate merge wrote them).
    finalized: bool,
    reader: RunReader,
    batch: Option<RecordBatch>,
    keys: Vec<Key>,
    pos: usize,
    /// Index of `batch` in the current block's sources.
    src: usize,
}

fn keys_of(b: &RecordBatch, has_cells: bool, chrom_col: usize, order: RunOrder) -> Vec<Key> {
    let n = b.num_rows();
    let bin = b.column(0).as_primitive::<Int32Type>();
    let code = |a: &ArrayRef, i: usize| -> i32 {
        match a.data_type() {
            DataType::Int16 => a.as_primitive::<Int16Type>().value(i) as i32,
            _ => a.as_primitive::<Int32Type>().value(i),
        }
    };
    let trace = b.column(1);
    let chrom = b.column(chrom_col).as_primitive::<Int32Type>();
    let row = b.column(chrom_col + 1).as_primitive::<UInt64Type>();
    (0..n)
        .map(|i| {
            let cell = if has_cells { code(b.column(2), i) } else { -1 };
            match order {
                RunOrder::Canonical => (
                    cell,
                    code(trace, i),
                    chrom.value(i),
                    bin.value(i),
                    row.value(i),
                ),
                RunOrder::ChromMajor => (
                    chrom.value(i),
                    cell,
                    code(trace, i),
                    bin.value(i),
                    row.value(i),
                ),
            }
        })
        .collect()
}

/// Merges the runs (all in `order`) into one sequence in that order, handing blocks of at
/// most `block_rows` final rows to `sink`. Holds one batch per run plus one block.
fn merge(
    runs: Vec<RunSource>,
    fin: &Finalizer<'_>,
    order: RunOrder,
    block_rows: usize,
    mut sink: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let has_cells = fin.inp.has_cells;
    let chrom_col = fin.schema.fields().len() - 2;
    let mut cursors: Vec<Cursor> = Vec::with_capacity(runs.len());
    let mut sources: Vec<RecordBatch> = Vec::new();
    let load = |c: &mut Cursor, sources: &mut Vec<RecordBatch>| -> Result<()> {
        c.batch = None;
        c.pos = 0;
        while let Some(b) = c.reader.next_batch()? {
            if b.num_rows() == 0 {
                continue;
            }
            let f = if c.finalized { b } else { fin.convert(&b)? };
            c.keys = keys_of(&f, has_cells, chrom_col, order);
            c.src = sources.len();
            sources.push(f.clone());
            c.batch = Some(f);
            break;
        }
        Ok(())
    };
    let mut heap: BinaryHeap<std::cmp::Reverse<(Key, usize)>> = BinaryHeap::new();
    for r in runs {
        if r.order != order {
            return Err(Error::new(
                ErrorKind::Internal,
                "merge: a run is not in the merge order",
            ));
        }
        let mut c = Cursor {
            finalized: r.finalized,
            reader: RunReader::open(r.data)?,
            batch: None,
            keys: Vec::new(),
            pos: 0,
            src: 0,
        };
        load(&mut c, &mut sources)?;
        if c.batch.is_some() {
            heap.push(std::cmp::Reverse((c.keys[0], cursors.len())));
        }
        cursors.push(c);
    }
    let mut picks: Vec<(usize, usize)> = Vec::with_capacity(block_rows);
    let emit = |picks: &mut Vec<(usize, usize)>,
                sources: &mut Vec<RecordBatch>,
                cursors: &mut Vec<Cursor>,
                sink: &mut dyn FnMut(RecordBatch) -> Result<()>|
     -> Result<()> {
        if picks.is_empty() {
            return Ok(());
        }
        let ncol = fin.schema.fields().len();
        let mut cols = Vec::with_capacity(ncol);
        for c in 0..ncol {
            let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
            cols.push(
                arrow_select::interleave::interleave(&arrays, picks)
                    .map_err(|e| Error::new(ErrorKind::Internal, format!("merge: {e}")))?,
            );
        }
        let block = RecordBatch::try_new(fin.schema.clone(), cols)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("merge: {e}")))?;
        picks.clear();
        sources.clear();
        for c in cursors.iter_mut() {
            if let Some(b) = &c.batch {
                c.src = sources.len();
                sources.push(b.clone());
            }
        }
        sink(block)
    };
    while let Some(std::cmp::Reverse((_, ci))) = heap.pop() {
        let c = &mut cursors[ci];
        picks.push((c.src, c.pos));
        c.pos += 1;
        if c.pos == c.keys.len() {
            load(c, &mut sources)?;
        }
        if c.batch.is_some() {
            heap.push(std::cmp::Reverse((c.keys[c.pos], ci)));
        }
        if picks.len() == block_rows {
            emit(&mut picks, &mut sources, &mut cursors, &mut sink)?;
        }
    }
    emit(&mut picks, &mut sources, &mut cursors, &mut sink)
}

/// Merges groups of at most `fan_in` runs into single runs (final form, Arrow IPC in
/// `dir`) until at most `fan_in` runs are left; consumed run files are deleted.
fn merge_passes(
    mut runs: Vec<RunSource>,
    fin: &Finalizer<'_>,
    order: RunOrder,
    fan_in: usize,
    out_rows: usize,
    dir: &Path,
) -> Result<(Vec<RunSource>, usize)> {
    let fan_in = fan_in.max(2);
    let mut pass = 0;
    while runs.len() > fan_in {
        let mut next = Vec::new();
        let mut rest = runs.into_iter();
        let mut k = 0;
        loop {
            let group: Vec<RunSource> = rest.by_ref().take(fan_in).collect();
            if group.is_empty() {
                break;
            }
            if group.len() == 1 {
                next.extend(group);
                continue;
            }
            let consumed: Vec<PathBuf> = group
                .iter()
                .filter_map(|r| match &r.data {
                    RunData::File(p) => Some(p.clone()),
                    RunData::Mem(_) => None,
                })
                .collect();
            let path = dir.join(format!("merge-{pass:03}-{k:06}.arrow"));
            k += 1;
            let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
            let ioerr = |e: arrow_schema::ArrowError| {
                Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
            };
            let mut w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &fin.schema)
                .map_err(ioerr)?;
            let mut batch_bytes = 0u64;
            merge(group, fin, order, out_rows, |b| {
                batch_bytes = batch_bytes.max(b.get_array_memory_size() as u64);
                w.write(&b).map_err(ioerr)
            })?;
            w.finish().map_err(ioerr)?;
            for p in consumed {
                let _ = std::fs::remove_file(p);
            }
            next.push(RunSource {
                data: RunData::File(path),
                order,
                finalized: true,
                batch_bytes,
            });
        }
        runs = next;
        pass += 1;
    }
    Ok((runs, pass))
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

// ---------------------------------------------------------------------------------------
// Parquet sinks

fn props(dict_off: &[String]) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(None)
        .set_created_by("libdeltacells".to_string());
    for c in dict_off {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c.as_str()), false);
    }
    b.build()
}

struct PqSink {
    path: PathBuf,
    writer: Option<ArrowWriter<BufWriter<File>>>,
    /// (column of the final batch, stored name).
    cols: Vec<usize>,
    schema: SchemaRef,
    groups: Vec<u64>,
    g: usize,
    in_group: u64,
    /// Partition index, or None for all rows.
    part: Option<usize>,
}

impl PqSink {
    fn new(
        root: &Path,
        rel: &str,
        fin_schema: &Schema,
        cols: Vec<(usize, String)>,
        groups: Vec<u64>,
        part: Option<usize>,
        dict_floats: bool,
    ) -> Result<PqSink> {
        let path = root.join("tables").join(rel);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
        }
        let fields: Vec<Field> = cols
            .iter()
            .map(|(i, n)| Field::new(n, fin_schema.field(*i).data_type().clone(), true))
            .collect();
        let dict_off: Vec<String> = if dict_floats {
            Vec::new()
        } else {
            fields
                .iter()
                .filter(|f| matches!(f.data_type(), DataType::Float32 | DataType::Float64))
                .map(|f| f.name().clone())
                .collect()
        };
        let schema = Arc::new(Schema::new(fields));
        let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
        let w = ArrowWriter::try_new(BufWriter::new(f), schema.clone(), Some(props(&dict_off)))
            .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", path.display())))?;
        Ok(PqSink {
            path,
            writer: Some(w),
            cols: cols.into_iter().map(|(i, _)| i).collect(),
            schema,
            groups,
            g: 0,
            in_group: 0,
            part,
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display()))
    }

    fn write(&mut self, b: &RecordBatch) -> Result<()> {
        let proj = RecordBatch::try_new(
            self.schema.clone(),
            self.cols.iter().map(|&i| b.column(i).clone()).collect(),
        )
        .map_err(|e| self.err(e))?;
        let mut off = 0usize;
        while off < proj.num_rows() {
            let Some(&target) = self.groups.get(self.g) else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("{}: more rows than planned", self.path.display()),
                ));
            };
            let n = ((target - self.in_group) as usize).min(proj.num_rows() - off);
            let w = self.writer.as_mut().unwrap_or_else(|| unreachable!());
            w.write(&proj.slice(off, n))
                .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display())))?;
            off += n;
            self.in_group += n as u64;
            if self.in_group == target {
                w.flush().map_err(|e| {
                    Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display()))
                })?;
                self.g += 1;
                self.in_group = 0;
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        if self.g != self.groups.len() || self.in_group != 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "{}: wrote {} of {} planned row groups",
                    self.path.display(),
                    self.g,
                    self.groups.len()
                ),
            ));
        }
        if let Some(w) = self.writer.take() {
            let inner = w.into_inner().map_err(|e| self.err(e))?;
            let f = inner.into_inner().map_err(|e| self.err(e.error()))?;
            f.sync_all().map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}

/// Writes a small table (one row group) to `tables/<rel>`.
fn write_small(root: &Path, rel: &str, b: &RecordBatch) -> Result<()> {
    write_parquet(&root.join("tables").join(rel), b)
}

/// Writes `b` as one Parquet file (one row group, zstd), creating the parent directory.
pub(crate) fn write_parquet(path: &Path, b: &RecordBatch) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
    }
    let err =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("{}: {e}", path.display()));
    let f = File::create(path).map_err(|e| Error::io(path, &e))?;
    let mut w =
        ArrowWriter::try_new(BufWriter::new(f), b.schema(), Some(props(&[]))).map_err(|e| {
            Error::unsupported(format!("{}: cannot store this table: {e}", path.display()))
        })?;
    if b.num_rows() > 0 {
        w.write(b).map_err(|e| err(&e))?;
    }
    w.close().map_err(|e| err(&e))?;
    Ok(())
}

fn one_col(name: &str, a: ArrayRef) -> Result<RecordBatch> {
    let s = Schema::new(vec![Field::new(name, a.data_type().clone(), true)]);
    RecordBatch::try_new(Arc::new(s), vec![a])
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

// ---------------------------------------------------------------------------------------
// Zarr

fn zarr_store(root: &Path) -> Result<Arc<zarrs::filesystem::FilesystemStore>> {
    zarrs::filesystem::FilesystemStore::new(root)
        .map(Arc::new)
        .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", root.display())))
}

fn zarr_err(path: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("zarr array {path}: {e}"))
}

/// A 1-D array (§6.1) written chunk by chunk.
struct ZarrArray1 {
    array: zarrs::array::Array<zarrs::filesystem::FilesystemStore>,
    path: String,
}

impl ZarrArray1 {
    fn create(
        store: &Arc<zarrs::filesystem::FilesystemStore>,
        path: &str,
        n: u64,
        int64: bool,
    ) -> Result<Self> {
        use zarrs::array::codec::{BytesCodec, ZstdCodec};
        let chunk = n.clamp(1, INDEX_CHUNK);
        let (dt, fill) = if int64 {
            (
                zarrs::array::data_type::int64(),
                zarrs::array::FillValue::from(0i64),
            )
        } else {
            (
                zarrs::array::data_type::int32(),
                zarrs::array::FillValue::from(0i32),
            )
        };
        let array = zarrs::array::ArrayBuilder::new(vec![n], [chunk], dt, fill)
            .array_to_bytes_codec(Arc::new(BytesCodec::little()))
            .bytes_to_bytes_codecs(vec![Arc::new(ZstdCodec::new(3, false))])
            .build(store.clone(), &format!("/{path}"))
            .map_err(|e| zarr_err(path, e))?;
        array.store_metadata().map_err(|e| zarr_err(path, e))?;
        Ok(ZarrArray1 {
            array,
            path: path.to_string(),
        })
    }

    fn chunk_len(&self) -> usize {
        let n = self.array.shape()[0];
        n.clamp(1, INDEX_CHUNK) as usize
    }

    fn store_chunk<T: zarrs::array::Element>(&self, i: u64, data: &[T]) -> Result<()> {
        self.array
            .store_chunk(&[i], data)
            .map_err(|e| zarr_err(&self.path, e))
    }
}

fn zarr_i64(store: &Arc<zarrs::filesystem::FilesystemStore>, path: &str, v: &[i64]) -> Result<()> {
    let a = ZarrArray1::create(store, path, v.len() as u64, true)?;
    let c = a.chunk_len();
    for (i, ch) in v.chunks(c).enumerate() {
        let mut buf = ch.to_vec();
        buf.resize(c, 0);
        a.store_chunk(i as u64, &buf)?;
    }
    Ok(())
}

fn zarr_i32(store: &Arc<zarrs::filesystem::FilesystemStore>, path: &str, v: &[i32]) -> Result<()> {
    let a = ZarrArray1::create(store, path, v.len() as u64, false)?;
    let c = a.chunk_len();
    for (i, ch) in v.chunks(c).enumerate() {
        let mut buf = ch.to_vec();
        buf.resize(c, 0);
        a.store_chunk(i as u64, &buf)?;
    }
    Ok(())
}

/// Writes a metadata document (pretty JSON), creating the parent directory.
fn write_json(path: &Path, doc: &impl serde::Serialize) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
    }
    fs::write_synced(path, &spec::to_json(doc)?)
}

/// Writes `<dir>/zarr.json` of a group with these attributes.
fn write_group(dir: &Path, attrs: &impl serde::Serialize) -> Result<()> {
    write_json(&dir.join("zarr.json"), &spec::GroupNode::new(attrs))
}

// ---------------------------------------------------------------------------------------
// Source rows

/// Input row of each stored row, written per partition to raw files during the merge.
struct SourceRows {
    files: Vec<(PathBuf, BufWriter<File>)>,
    counts: Vec<u64>,
    starts: Vec<u64>,
    identity: bool,
}

impl SourceRows {
    fn new(dir: &Path, starts: Vec<u64>) -> Result<Self> {
        let mut files = Vec::new();
        for p in 0..starts.len() {
            let path = dir.join(format!("source_row-{p}.bin"));
            let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
            files.push((path, BufWriter::new(f)));
        }
        Ok(SourceRows {
            counts: vec![0; starts.len()],
            files,
            starts,
            identity: true,
        })
    }

    fn push(&mut self, p: usize, rows: &UInt64Array) -> Result<()> {
        let (path, f) = &mut self.files[p];
        for &r in rows.values() {
            if r != self.starts[p] + self.counts[p] {
                self.identity = false;
            }
            self.counts[p] += 1;
            f.write_all(&(r as i64).to_le_bytes())
                .map_err(|e| Error::io(path, &e))?;
        }
        Ok(())
    }

    /// Writes `index/source_row` (unless stored order is input order); true if written.
    fn finish(self, store: &Arc<zarrs::filesystem::FilesystemStore>, n: u64) -> Result<bool> {
        let mut paths = Vec::new();
        for (path, mut f) in self.files {
            f.flush().map_err(|e| Error::io(&path, &e))?;
            paths.push(path);
        }
        if self.identity {
            return Ok(false);
        }
        let a = ZarrArray1::create(store, "index/source_row", n, true)?;
        let c = a.chunk_len();
        let mut buf: Vec<i64> = Vec::with_capacity(c);
        let mut chunk = 0u64;
        let mut bytes = vec![0u8; 8 << 16];
        for p in &paths {
            let mut f = File::open(p).map_err(|e| Error::io(p, &e))?;
            loop {
                let k = f.read(&mut bytes).map_err(|e| Error::io(p, &e))?;
                if k == 0 {
                    break;
                }
                // Reads of a regular file return whole 8-byte values except at EOF
                // boundaries; read_exact the remainder to keep alignment.
                let mut k = k;
                while k % 8 != 0 {
                    f.read_exact(&mut bytes[k..k + (8 - k % 8)])
                        .map_err(|e| Error::io(p, &e))?;
                    k += 8 - k % 8;
                }
                for v in bytes[..k].chunks_exact(8) {
                    buf.push(i64::from_le_bytes(v.try_into().unwrap_or_default()));
                    if buf.len() == c {
                        a.store_chunk(chunk, &buf)?;
                        chunk += 1;
                        buf.clear();
                    }
                }
            }
        }
        if !buf.is_empty() {
            buf.resize(c, 0);
            a.store_chunk(chunk, &buf)?;
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------
// The store

/// Storage decision of an extra column (2.2).
#[derive(Debug, Clone)]
enum Storage {
    Spots,
    Primary,
    Bins(String),
    Derived(usize),
}

/// Derived columns per key: (column, values by code).
type DerivedCols = [Vec<(usize, ArrayRef)>; 3];

fn decide_storage(inp: &Input, types: &[FinalType]) -> Result<(Vec<Storage>, DerivedCols)> {
    let mut out = Vec::new();
    let mut derived: [Vec<(usize, ArrayRef)>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let n_codes = [
        inp.chrom_of_bin.len(),
        inp.cell_cats.as_ref().map_or(0, |c| c.len()),
        inp.trace_cats.len(),
    ];
    for (ci, c) in inp.cols.iter().enumerate() {
        if c.group != Group::Extra {
            continue;
        }
        if inp.layout != Layout::PrimaryCoords {
            out.push(Storage::Spots);
            continue;
        }
        let t = &types[ci];
        let mut st = Storage::Primary;
        if inp.n_spots > 0 {
            // Final-code slots per key.
            let finals: [Option<Vec<Slot>>; 3] = std::array::from_fn(|k| {
                let slots = c.detect[k].slots.as_ref()?;
                if k == 1 && !inp.has_cells {
                    return None;
                }
                let mut v = vec![Slot::Empty; n_codes[k]];
                for (p, s) in slots.iter().enumerate() {
                    if *s == Slot::Empty {
                        continue;
                    }
                    let f = match k {
                        0 => inp.bin_final.as_ref().map_or(p as u32, |m| m[p]),
                        1 => inp.cell_final[p],
                        _ => inp.trace_final[p],
                    } as usize;
                    v[f] = s.clone();
                }
                Some(v)
            });
            // Reference to a bins column (non-categorical, same type).
            if let (Some(slots), false) = (&finals[0], matches!(t, FinalType::Cat(_))) {
                let bs = inp.bins.schema();
                for (bi, f) in bs.fields().iter().enumerate().skip(3) {
                    if f.data_type() != &t.stored() {
                        continue;
                    }
                    let spill = wcol::to_spill(f.name(), inp.bins.column(bi))?;
                    let ok = slots.iter().enumerate().all(|(b, s)| {
                        *s == Slot::Empty || {
                            let one = spill.slice(b, 1);
                            let mut d = wcol::Detect::new();
                            d.feed(one.as_ref(), &[0]);
                            d.slots.as_ref().is_some_and(|v| v[0] == *s)
                        }
                    });
                    if ok {
                        st = Storage::Bins(f.name().clone());
                        break;
                    }
                }
            }
            if matches!(st, Storage::Primary) {
                for (k, f) in finals.iter().enumerate() {
                    if let Some(slots) = f {
                        let slots: Vec<Slot> = slots
                            .iter()
                            .map(|s| {
                                if *s == Slot::Empty {
                                    Slot::Null
                                } else {
                                    s.clone()
                                }
                            })
                            .collect();
                        let a = wcol::derived_array(&c.name, &slots, t)?;
                        derived[k].push((ci, a));
                        st = Storage::Derived(k);
                        break;
                    }
                }
            }
        }
        out.push(st);
    }
    Ok((out, derived))
}

/// The members of `tables.spots` that depend on the layout, filled while the sinks are made.
#[derive(Default)]
struct SpotFilesMeta {
    path: Option<String>,
    primary_path: Option<Option<String>>,
    coords_row_group_size: Option<u64>,
    partitions: Option<Vec<spec::Partition>>,
    files: Option<Vec<String>>,
    coords_files: Option<Vec<String>>,
}

/// Writes the store; returns the number of intermediate merge passes.
pub(crate) fn write_store(mut inp: Input) -> Result<usize> {
    let root = inp.tmp.clone();
    let layout = inp.layout;
    let has_cells = inp.has_cells;
    let mut t = match (inp.row_group_size, layout) {
        (0, Layout::Partitioned) => 16384,
        (0, _) => 65536,
        (x, _) => x,
    };
    let mut tc = if inp.coords_row_group_size == 0 {
        16384
    } else {
        inp.coords_row_group_size
    };
    // Layers: one type per layer.
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
    let (storage, derived) = decide_storage(&inp, &types)?;
    let runs = std::mem::take(&mut inp.runs);
    let fin = Finalizer::new(&inp, types.clone());
    let fs = fin.schema.clone();
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
    let sink_bytes = |t: u64, tc: u64| t * main_w + n_chroms * tc * key_w;
    let share = inp.available / 2;
    loop {
        let (a, b) = (t * main_w, n_chroms * tc * key_w);
        if a + b <= share {
            break;
        }
        let can_t = inp.row_group_size == 0 && t > MIN_AUTO_ROW_GROUP;
        let can_tc = inp.coords_row_group_size == 0 && tc > MIN_AUTO_ROW_GROUP && b > 0;
        if can_t && (a >= b || !can_tc) {
            t /= 2;
        } else if can_tc {
            tc /= 2;
        } else {
            break;
        }
    }
    let row_bytes = inp.row_bytes.max(1);
    let block_bytes = MERGE_BLOCK_BYTES.min(inp.available / 16);
    let block_rows = ((block_bytes / row_bytes) as usize).clamp(256, BLOCK_ROWS);
    let batch_bytes = runs.iter().map(|r| r.batch_bytes).max().unwrap_or(0).max(1);
    let merge_mem = inp
        .available
        .saturating_sub(sink_bytes(t, tc))
        .saturating_sub(3 * block_rows as u64 * row_bytes);
    let fan_in = ((merge_mem / (4 * batch_bytes)) as usize).max(2);
    let order = RunOrder::of(layout);
    let (runs, passes) = merge_passes(
        runs,
        &fin,
        order,
        fan_in,
        spill_batch_rows(row_bytes, inp.available),
        &root.join(SPILL_DIR),
    )?;
    let plan = plan(layout, &inp.triples, has_cells, t, tc);
    let extras: Vec<usize> = (0..inp.cols.len())
        .filter(|&i| inp.cols[i].group == Group::Extra)
        .collect();
    let tracks: Vec<usize> = (0..inp.cols.len())
        .filter(|&i| matches!(inp.cols[i].group, Group::Track(_)))
        .collect();
    let layer_cols = |k: usize| -> Vec<(usize, String)> {
        (0..3)
            .map(|a| {
                let i = inp
                    .cols
                    .iter()
                    .position(|c| c.group == Group::Layer(k, a))
                    .unwrap_or(0);
                (fv + i, ["x", "y", "z"][a].to_string())
            })
            .collect()
    };
    let track_cols: Vec<(usize, String)> = tracks
        .iter()
        .map(|&i| match &inp.cols[i].group {
            Group::Track(n) => (fv + i, n.clone()),
            _ => unreachable!(),
        })
        .collect();
    let key_cols: Vec<(usize, String)> = (0..fv).map(|i| (i, fs.field(i).name().clone())).collect();
    let stored_extras = |want: &dyn Fn(&Storage) -> bool| -> Vec<(usize, String)> {
        extras
            .iter()
            .zip(&storage)
            .filter(|(_, s)| want(s))
            .map(|(&i, _)| (fv + i, inp.cols[i].name.clone()))
            .collect()
    };
    let layer_names = portable(
        &inp.layer_keys
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let chrom_dirs: Vec<String> = spec::chrom_dirs(&inp.chrom_names);

    // Sinks.
    let mut sinks: Vec<PqSink> = Vec::new();
    let mut spot_files = SpotFilesMeta::default();
    let mut tracks_meta: Option<spec::TracksEntry> =
        (!tracks.is_empty()).then(|| spec::TracksEntry {
            path: None,
            files: None,
            columns: Vec::new(),
            other: spec::Members::new(),
        });
    let mut layers_meta: Vec<spec::LayerEntry> = inp
        .layer_keys
        .iter()
        .enumerate()
        .map(|(k, key)| spec::LayerEntry {
            key: key.clone(),
            ty: FloatType::of(!layer_f64[k]),
            columns: AXES.iter().map(|a| a.to_string()).collect(),
            path: None,
            files: None,
            other: spec::Members::new(),
        })
        .collect();
    let part_meta = |parts: &[Partition]| -> Vec<spec::Partition> {
        parts
            .iter()
            .map(|p| spec::Partition {
                chrom: inp.chrom_names[p.chrom as usize].clone(),
                chrom_code: p.chrom as i64,
                dir: Some(chrom_dirs[p.chrom as usize].clone()),
                n_rows: p.rows,
                n_row_groups: p.groups.len() as u64,
                other: spec::Members::new(),
            })
            .collect()
    };
    let mut part_of_chrom: HashMap<i32, usize> = HashMap::new();
    let new_sink = |rel: &str,
                    cols: Vec<(usize, String)>,
                    groups: &[u64],
                    part: Option<usize>,
                    dict_floats: bool| {
        PqSink::new(&root, rel, &fs, cols, groups.to_vec(), part, dict_floats)
    };
    // spot_tracks and layers of the single-file layouts (flat; primary of 2.2).
    let whole_tables = |prefix: &str,
                        dict_floats: bool,
                        sinks: &mut Vec<PqSink>,
                        tracks_meta: &mut Option<spec::TracksEntry>,
                        layers_meta: &mut [spec::LayerEntry]|
     -> Result<()> {
        if let Some(m) = tracks_meta.as_mut() {
            let rel = format!("{prefix}spot_tracks.parquet");
            sinks.push(new_sink(
                &rel,
                track_cols.clone(),
                &plan.groups,
                None,
                dict_floats,
            )?);
            m.path = Some(rel);
        }
        for (k, m) in layers_meta.iter_mut().enumerate() {
            let rel = format!("{prefix}layers/{}.parquet", layer_names[k]);
            sinks.push(new_sink(
                &rel,
                layer_cols(k),
                &plan.groups,
                None,
                dict_floats,
            )?);
            m.path = Some(rel);
        }
        Ok(())
    };
    match layout {
        Layout::Flat => {
            let mut cols = key_cols.clone();
            cols.extend(stored_extras(&|_| true));
            sinks.push(new_sink("spots.parquet", cols, &plan.groups, None, false)?);
            spot_files.path = Some("spots.parquet".into());
            whole_tables("", false, &mut sinks, &mut tracks_meta, &mut layers_meta)?;
        }
        Layout::Partitioned => {
            let mut files = Vec::new();
            let mut tfiles = Vec::new();
            let mut lfiles: Vec<Vec<String>> = vec![Vec::new(); inp.layer_keys.len()];
            for (p, part) in plan.partitions.iter().enumerate() {
                part_of_chrom.insert(part.chrom, p);
                let d = &chrom_dirs[part.chrom as usize];
                let mut cols = key_cols.clone();
                cols.extend(stored_extras(&|_| true));
                let rel = format!("spots/{d}/part-0.parquet");
                sinks.push(new_sink(&rel, cols, &part.groups, Some(p), false)?);
                files.push(rel);
                if !tracks.is_empty() {
                    let rel = format!("spot_tracks/{d}/part-0.parquet");
                    sinks.push(new_sink(
                        &rel,
                        track_cols.clone(),
                        &part.groups,
                        Some(p),
                        false,
                    )?);
                    tfiles.push(rel);
                }
                for (k, lf) in lfiles.iter_mut().enumerate() {
                    let rel = format!("layers/{}/{d}/part-0.parquet", layer_names[k]);
                    sinks.push(new_sink(&rel, layer_cols(k), &part.groups, Some(p), false)?);
                    lf.push(rel);
                }
            }
            spot_files.partitions = Some(part_meta(&plan.partitions));
            spot_files.files = Some(files);
            if let Some(m) = tracks_meta.as_mut() {
                m.files = Some(tfiles);
            }
            for (m, f) in layers_meta.iter_mut().zip(lfiles) {
                m.files = Some(f);
            }
        }
        Layout::PrimaryCoords => {
            let prim = stored_extras(&|s| matches!(s, Storage::Primary));
            if prim.is_empty() {
                spot_files.primary_path = Some(None);
            } else {
                let rel = "primary/spots.parquet";
                sinks.push(new_sink(rel, prim, &plan.groups, None, true)?);
                spot_files.primary_path = Some(Some(rel.into()));
            }
            whole_tables(
                "primary/",
                true,
                &mut sinks,
                &mut tracks_meta,
                &mut layers_meta,
            )?;
            let mut files = Vec::new();
            for (p, part) in plan.coords_parts.iter().enumerate() {
                part_of_chrom.insert(part.chrom, p);
                let rel = format!("coords/{}/part-0.parquet", chrom_dirs[part.chrom as usize]);
                sinks.push(new_sink(
                    &rel,
                    key_cols.clone(),
                    &part.groups,
                    Some(p),
                    false,
                )?);
                files.push(rel);
            }
            spot_files.coords_row_group_size = Some(tc);
            spot_files.partitions = Some(part_meta(&plan.coords_parts));
            spot_files.coords_files = Some(files);
        }
    }

    // Source rows: per partition for 2.1, else in canonical order.
    let spill = root.join(SPILL_DIR);
    let src_parts: Vec<u64> = if layout == Layout::Partitioned {
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
    let mut src = SourceRows::new(&spill, src_parts)?;
    let n_parts = part_of_chrom.len();
    let threads = crate::pool::resolve_threads(inp.threads);
    let pool = if threads > 1 {
        Some(crate::pool::pool(threads)?)
    } else {
        None
    };
    let chrom_col = fs.fields().len() - 2;
    merge(runs, &fin, order, block_rows, |block| {
        // Per-partition slices of the block.
        let mut parts: Vec<Option<RecordBatch>> = vec![None; n_parts];
        if n_parts > 0 {
            let chrom = block.column(chrom_col).as_primitive::<Int32Type>();
            let mut idx: Vec<Vec<u32>> = vec![Vec::new(); n_parts];
            for (i, c) in chrom.values().iter().enumerate() {
                idx[part_of_chrom[c]].push(i as u32);
            }
            for (p, ix) in idx.into_iter().enumerate() {
                if ix.is_empty() {
                    continue;
                }
                let b = arrow_select::take::take_record_batch(&block, &UInt32Array::from(ix))
                    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
                parts[p] = Some(b);
            }
        }
        let rows_col = chrom_col + 1;
        if layout == Layout::Partitioned {
            for (p, b) in parts.iter().enumerate() {
                if let Some(b) = b {
                    src.push(p, b.column(rows_col).as_primitive::<UInt64Type>())?;
                }
            }
        } else {
            src.push(0, block.column(rows_col).as_primitive::<UInt64Type>())?;
        }
        let work = |s: &mut PqSink| -> Result<()> {
            match s.part {
                None => s.write(&block),
                Some(p) => match &parts[p] {
                    Some(b) => s.write(b),
                    None => Ok(()),
                },
            }
        };
        match &pool {
            Some(pool) => pool.install(|| {
                use rayon::prelude::*;
                sinks.par_iter_mut().map(work).collect::<Result<Vec<()>>>()
            })?,
            None => sinks.iter_mut().map(work).collect::<Result<Vec<()>>>()?,
        };
        Ok(())
    })?;
    for s in sinks.iter_mut() {
        s.close()?;
    }
    drop(fin);

    // Zarr arrays.
    let zs = zarr_store(&root)?;
    let has_source_row = src.finish(&zs, inp.n_spots)?;
    let runs_of = &plan.runs;
    zarr_i64(
        &zs,
        "index/trace_offsets",
        &offsets(runs_of.iter().map(|r| r.len)),
    )?;
    zarr_i32(
        &zs,
        "index/trace_codes",
        &runs_of.iter().map(|r| r.trace).collect::<Vec<_>>(),
    )?;
    zarr_i32(
        &zs,
        "index/trace_cells",
        &runs_of.iter().map(|r| r.cell).collect::<Vec<_>>(),
    )?;
    zarr_i32(
        &zs,
        "index/chrom_trace",
        &runs_of.iter().map(|r| r.chrom).collect::<Vec<_>>(),
    )?;
    zarr_i64(&zs, "index/cell_offsets", &plan.cell_offsets)?;
    zarr_i32(&zs, "index/cell_codes", &plan.cell_codes)?;
    zarr_i64(
        &zs,
        "index/row_groups",
        &offsets(plan.groups.iter().copied()),
    )?;
    let mut n_coord_groups = 0;
    if layout == Layout::Partitioned {
        zarr_i64(
            &zs,
            "index/partition_offsets",
            &offsets(plan.partitions.iter().map(|p| p.rows)),
        )?;
        zarr_i64(
            &zs,
            "index/partition_groups",
            &offsets(plan.partitions.iter().map(|p| p.groups.len() as u64)),
        )?;
        zarr_i32(
            &zs,
            "index/partition_chrom",
            &plan.partitions.iter().map(|p| p.chrom).collect::<Vec<_>>(),
        )?;
        zarr_i32(&zs, "index/cell_partition", &plan.cell_partition)?;
    }
    if layout == Layout::PrimaryCoords {
        let cp = &plan.coords_parts;
        zarr_i64(
            &zs,
            "index/coords/partition_offsets",
            &offsets(cp.iter().map(|p| p.rows)),
        )?;
        zarr_i64(
            &zs,
            "index/coords/partition_groups",
            &offsets(cp.iter().map(|p| p.groups.len() as u64)),
        )?;
        zarr_i32(
            &zs,
            "index/coords/partition_chrom",
            &cp.iter().map(|p| p.chrom).collect::<Vec<_>>(),
        )?;
        let groups: Vec<u64> = cp.iter().flat_map(|p| p.groups.iter().copied()).collect();
        n_coord_groups = groups.len();
        zarr_i64(&zs, "index/coords/row_groups", &offsets(groups.into_iter()))?;
        zarr_i64(
            &zs,
            "index/coords/run_offsets",
            &offsets(plan.coords_runs.iter().map(|r| r.len)),
        )?;
        zarr_i64(&zs, "index/coords/primary_run", &plan.primary_run)?;
        write_group(&root.join("index/coords"), &spec::Members::new())?;
    }

    // Categories and small tables.
    let extra_names: Vec<&str> = extras.iter().map(|&i| inp.cols[i].name.as_str()).collect();
    let extra_stored = portable(&extra_names);
    let cat_file =
        |rel: &str, a: &ArrayRef| write_small(&root, rel, &one_col("category", a.clone())?);
    let spot_cat = |name: &str, rel: &str, cats: &ArrayRef| {
        ColumnDesc::categorical(
            name,
            Some(CodeType::for_categories(cats.len())),
            rel,
            cats.len() as u64,
        )
    };
    let trace_rel = categories_path("spots", "trace_id");
    cat_file(&trace_rel, &inp.trace_cats)?;
    let trace_desc = spot_cat("trace_id", &trace_rel, &inp.trace_cats);
    let cell_desc = match &inp.cell_cats {
        Some(c) => {
            let rel = categories_path("spots", "cell_id");
            cat_file(&rel, c)?;
            Some(spot_cat("cell_id", &rel, c))
        }
        None => None,
    };
    let chrom_cats: ArrayRef = Arc::new(arrow_array::StringArray::from_iter_values(
        inp.chrom_names.iter(),
    ));
    let chrom_rel = categories_path("bins", "chrom");
    cat_file(&chrom_rel, &chrom_cats)?;
    let mut col_descs = Vec::new();
    for (j, &i) in extras.iter().enumerate() {
        let c = &inp.cols[i];
        let d = match &types[i] {
            FinalType::Cat(cats) => {
                let rel = categories_path("spots", &extra_stored[j]);
                cat_file(&rel, &cats.values)?;
                spot_cat(&c.name, &rel, &cats.values)
            }
            t => ColumnDesc::value(&c.name, t.value_type()),
        };
        col_descs.push(d.with_storage(match &storage[j] {
            Storage::Spots => spec::Storage::Spots,
            Storage::Primary => spec::Storage::Primary,
            Storage::Bins(s) => spec::Storage::Bins(s.clone()),
            Storage::Derived(k) => spec::Storage::Derived(DerivedKey::ALL[*k]),
        }));
    }
    let mut derived_meta = Vec::new();
    for (k, cols) in derived.iter().enumerate() {
        if cols.is_empty() {
            continue;
        }
        let fields: Vec<Field> = cols
            .iter()
            .map(|(i, a)| Field::new(&inp.cols[*i].name, a.data_type().clone(), true))
            .collect();
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            cols.iter().map(|(_, a)| a.clone()).collect(),
        )
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let key = DerivedKey::ALL[k];
        let rel = format!("derived/{}.parquet", key.name());
        write_small(&root, &rel, &b)?;
        derived_meta.push(spec::DerivedEntry {
            key,
            path: rel,
            n_rows: b.num_rows() as u64,
            columns: cols
                .iter()
                .map(|(i, _)| inp.cols[*i].name.clone())
                .collect(),
            other: spec::Members::new(),
        });
    }
    let small = |path: &str, n_rows: usize, index: Option<&str>, columns| SmallTable {
        path: path.into(),
        n_rows: n_rows as u64,
        index: index.map(str::to_string),
        columns,
        other: spec::Members::new(),
    };
    let value_columns = |b: &RecordBatch, skip: usize| -> Vec<ColumnDesc> {
        b.schema()
            .fields()
            .iter()
            .skip(skip)
            .map(|f| ColumnDesc::value(f.name(), ValueType::of_stored(f.data_type())))
            .collect()
    };
    write_small(&root, "bins.parquet", &inp.bins)?;
    let mut bins_cols = vec![ColumnDesc::categorical(
        "chrom",
        None,
        &chrom_rel,
        chrom_cats.len() as u64,
    )];
    bins_cols.extend(value_columns(&inp.bins, 1));
    let index_column = |name: &str, a: &ArrayRef| {
        let t = if a.data_type() == &DataType::Int64 {
            ValueType::Int64
        } else {
            ValueType::String
        };
        vec![ColumnDesc::value(name, t)]
    };
    write_small(
        &root,
        "traces.parquet",
        &one_col("trace_id", inp.trace_cats.clone())?,
    )?;
    let cells_meta = match &inp.cell_cats {
        Some(c) => {
            write_small(&root, "cells.parquet", &one_col("cell_id", c.clone())?)?;
            Some(small(
                "cells.parquet",
                c.len(),
                Some("cell_id"),
                index_column("cell_id", c),
            ))
        }
        None => None,
    };
    let bin_tracks_meta = match &inp.bin_tracks {
        Some(b) => {
            write_small(&root, "bin_tracks.parquet", b)?;
            Some(small(
                "bin_tracks.parquet",
                b.num_rows(),
                None,
                value_columns(b, 0),
            ))
        }
        None => None,
    };
    // Pass-through tables: staged files moved to their portable names.
    let mut pass_meta = [Vec::new(), Vec::new()];
    for (slot, collection) in ["intervals", "points"].into_iter().enumerate() {
        let list: Vec<&PassTable> = inp
            .pass_tables
            .iter()
            .filter(|t| t.collection == collection)
            .collect();
        let names = portable(&list.iter().map(|t| t.key.as_str()).collect::<Vec<_>>());
        for (t, name) in list.into_iter().zip(names) {
            let rel = format!("{collection}/{name}.parquet");
            let dest = root.join("tables").join(&rel);
            if let Some(d) = dest.parent() {
                std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
            }
            std::fs::rename(&t.staged, &dest).map_err(|e| Error::io(&dest, &e))?;
            pass_meta[slot].push(spec::PassTableEntry {
                key: t.key.clone(),
                path: rel,
                n_rows: t.n_rows,
                kind: t.kind.clone(),
                source_result: t.kind.as_ref().map(|_| None),
                other: spec::Members::new(),
            });
        }
    }
    let coord_type = FloatType::of(inp.coord_f32);
    let spots = spec::SpotsEntry {
        path: spot_files.path,
        primary_path: spot_files.primary_path,
        coords_row_group_size: spot_files.coords_row_group_size,
        partitions: spot_files.partitions,
        files: spot_files.files,
        coords_files: spot_files.coords_files,
        layout,
        n_rows: inp.n_spots,
        row_group_size: Some(t),
        bin_id: spec::IdDesc {
            name: "bin_id".into(),
            ty: "int32".into(),
            other: spec::Members::new(),
        },
        trace_id: trace_desc,
        cell_id: cell_desc,
        coords: inp.has_coords.then(|| spec::CoordsDesc {
            columns: AXES.iter().map(|a| a.to_string()).collect(),
            ty: coord_type,
            other: spec::Members::new(),
        }),
        columns: col_descs,
        other: spec::Members::new(),
    };
    let spot_tracks = tracks_meta.map(|mut m| {
        m.columns = tracks
            .iter()
            .filter_map(|&i| match &inp.cols[i].group {
                Group::Track(n) => Some(ColumnDesc::value(n, types[i].value_type())),
                _ => None,
            })
            .collect();
        m
    });
    let [intervals, points] = pass_meta;
    let tables = spec::Tables {
        spots,
        spot_tracks,
        layers: layers_meta,
        derived: derived_meta,
        bins: small("bins.parquet", inp.chrom_of_bin.len(), None, bins_cols),
        bin_tracks: bin_tracks_meta,
        traces: small(
            "traces.parquet",
            inp.trace_cats.len(),
            Some("trace_id"),
            index_column("trace_id", &inp.trace_cats),
        ),
        cells: cells_meta,
        intervals,
        points,
        other: spec::Members::new(),
    };
    write_group(
        &root.join("tables"),
        &spec::TablesAttrs {
            tables,
            other: spec::Members::new(),
        },
    )?;
    write_group(&root.join("index"), &spec::Members::new())?;
    for kind in ComponentKind::ALL {
        write_group(&root.join(kind.name()), &kind.empty_attrs())?;
    }
    let uchrom = spec::Uchrom {
        format: "chromdata.zarr".into(),
        format_version: layout.format_version().into(),
        spot_order: layout.spot_order().into(),
        n_spots: inp.n_spots,
        n_bins: inp.chrom_of_bin.len() as u64,
        n_traces: inp.trace_cats.len() as u64,
        n_cells: inp.cell_cats.as_ref().map_or(0, |c| c.len()) as u64,
        n_chroms: inp.chrom_names.len() as u64,
        n_runs: plan.runs.len() as u64,
        n_row_groups: plan.groups.len() as u64,
        has_source_row,
        has_cell_id: has_cells,
        has_coords: inp.has_coords,
        coord_dtype: inp.has_coords.then_some(coord_type),
        n_coord_row_groups: (layout == Layout::PrimaryCoords).then_some(n_coord_groups as u64),
        other: spec::Members::new(),
    };
    // The spill goes before the root metadata is written: the root zarr.json comes last.
    std::fs::remove_dir_all(&spill).map_err(|e| Error::io(&spill, &e))?;
    write_json(
        &root.join("zarr.json"),
        &spec::Root::new(layout, uchrom).node,
    )?;
    publish(&root, &inp.target, inp.overwrite)?;
    Ok(passes)
}

// ---------------------------------------------------------------------------------------
// .cdz and publish

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

fn write_cdz(dir: &Path, out: &Path) -> Result<()> {
    let zerr =
        |e: zip::result::ZipError| Error::new(ErrorKind::Io, format!("{}: {e}", out.display()));
    let f = File::create(out).map_err(|e| Error::io(out, &e))?;
    let mut z = zip::ZipWriter::new(BufWriter::new(f));
    for m in member_list(dir)? {
        let p = dir.join(&m);
        let size = std::fs::metadata(&p).map_err(|e| Error::io(&p, &e))?.len();
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .large_file(size >= 0xFFFF_FFFF);
        z.start_file(m.as_str(), opts).map_err(zerr)?;
        let mut src = File::open(&p).map_err(|e| Error::io(&p, &e))?;
        std::io::copy(&mut src, &mut z).map_err(|e| Error::io(out, &e))?;
    }
    let w = z.finish().map_err(zerr)?;
    let f = w.into_inner().map_err(|e| Error::io(out, e.error()))?;
    f.sync_all().map_err(|e| Error::io(out, &e))
}

/// Moves the finished tree in `tmp` to `target` (as a `.cdz` when the target ends in it).
fn publish(tmp: &Path, target: &Path, overwrite: bool) -> Result<()> {
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
