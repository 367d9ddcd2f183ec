//! The merge (§16): spill batches converted into final batches (final bin ids and codes,
//! stored types), k-way merged from the sorted runs into the layout's order, in blocks,
//! in several passes when there are more runs than the memory budget lets it hold.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int16Type, Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::collected::Collected;
use super::columns::{self, FinalType};
use super::runs::{RunData, RunOrder, RunReader, RunSource};
use crate::error::{Error, ErrorKind, Result};

/// Converts spill batches into final batches:
/// bin_id, trace_id codes, [cell_id codes], [x, y, z], values..., __chrom, __row.
pub(crate) struct Finalizer<'a> {
    inp: &'a Collected,
    pub(crate) schema: SchemaRef,
    trace_type: DataType,
    cell_type: DataType,
    types: Vec<FinalType>,
}

impl<'a> Finalizer<'a> {
    pub(crate) fn new(inp: &'a Collected, types: Vec<FinalType>) -> Self {
        let code_t = |n: usize| {
            if n <= columns::INT16_CODES_MAX {
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

    pub(crate) fn first_value(&self) -> usize {
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
            columns::codes_array(
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
                cols.push(columns::coord_array(b.column(src), inp.coord_f32));
                src += 1;
            }
        }
        for (i, (c, t)) in inp.cols.iter().zip(&self.types).enumerate() {
            cols.push(columns::finalize(&c.name, b.column(src + i), t)?);
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
pub(crate) fn merge(
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
pub(crate) fn merge_passes(
    mut runs: Vec<RunSource>,
    fin: &Finalizer<'_>,
    order: RunOrder,
    fan_in: usize,
    out_rows: usize,
    write_buffer: usize,
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
                .flat_map(|r| r.data.paths().iter().cloned())
                .collect();
            let path = dir.join(format!("merge-{pass:03}-{k:06}.arrow"));
            k += 1;
            let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
            let ioerr = |e: arrow_schema::ArrowError| {
                Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
            };
            let mut w = arrow_ipc::writer::FileWriter::try_new(
                BufWriter::with_capacity(write_buffer, f),
                &fin.schema,
            )
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
                data: RunData::File(vec![path]),
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
