//! Reading the selected rows of file sets straight into the result's columns.
//!
//! A read is planned first: for every row group the selected ranges touch, the pieces
//! (rows of the group → rows of the output) it contributes. Each fixed-width output column
//! is allocated once, at its final size, and cut into the disjoint pieces' slices; the row
//! groups are then decoded in parallel on the library's pool — split by columns when there
//! are few groups — and each task copies its pieces into place and drops the decoded group.
//! A read therefore holds the result plus the groups being decoded (one per thread), not
//! all decoded groups plus a concatenated copy; reordering (2.1 runs across partitions, 2.2
//! coords runs into primary order) is a copy of whole blocks, reading the groups in turn
//! and writing each block once. Fixed-width columns stored as PLAIN pages without nulls
//! (coordinates) are copied from the decompressed pages themselves, dictionary-encoded ones
//! (2.2 primary tracks) gathered from their dictionary page page by page
//! ([`plain`](crate::chromdata::access::plain)), without an Arrow array in between. Columns
//! that are not fixed-width (strings, booleans) are kept as slices of their groups and
//! concatenated in output order at the end.

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef};
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder, Buffer, NullBuffer};
use arrow_data::ArrayDataBuilder;
use arrow_schema::DataType;

use super::arenas::{Arenas, Mem};
use super::codes::RunCodes;
use super::files::FileSet;
use crate::chromdata::access::pages;
use crate::chromdata::access::parquet::CACHE_PER_FILE;
use crate::chromdata::access::plain::Plain;
use crate::error::{Error, ErrorKind, Result};
use crate::memory::{advise_huge, HUGE, HUGE_MAX};

/// What to read from one file set: stored column names over global row ranges, the ranges
/// concatenated in order.
pub(crate) struct SetRead<'a> {
    pub(crate) set: &'a FileSet,
    pub(crate) names: &'a [String],
    pub(crate) ranges: &'a [(u64, u64)],
    /// Names (by index) only checked, not part of the result: the stored trace / cell
    /// codes, each checked against its runs by the task that decodes it (no memory of its
    /// own: a scratch column of them sat beside the result at a full read's peak).
    pub(crate) checks: &'a [Option<RunCodes>],
}

impl SetRead<'_> {
    fn check(&self, k: usize) -> Option<&RunCodes> {
        self.checks.get(k).and_then(Option::as_ref)
    }
}

/// Rows `[src, src + len)` of a row group go to output rows `[dst, dst + len)`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    src: usize,
    dst: usize,
    len: usize,
}

/// A touched row group of one read: its file, group within the file and pieces (in output
/// order).
struct GroupPlan {
    file: usize,
    local: usize,
    /// Rows of the group.
    rows: usize,
    pieces: Vec<Piece>,
}

/// The groups one `SetRead` touches, in first-use order, and its output rows.
struct SetPlan {
    groups: Vec<GroupPlan>,
    /// (group index, piece index) in output order.
    order: Vec<(usize, usize)>,
    rows: usize,
    /// Top-level column index of each name, per file (files not touched: empty).
    cols: Vec<Vec<usize>>,
    /// Output type of each name and its byte width when fixed-width.
    types: Vec<(DataType, Option<usize>)>,
}

fn plan_set(r: &SetRead<'_>) -> Result<SetPlan> {
    let fs = r.set;
    let mut groups: Vec<GroupPlan> = Vec::new();
    let mut slot: HashMap<(usize, usize), usize> = HashMap::new();
    let mut order = Vec::new();
    let mut dst = 0usize;
    for &(s, e) in r.ranges {
        let mut pos = s;
        while pos < e {
            let (g, p, local) = fs.locate(pos);
            let (gs, ge) = (fs.boundaries[g], fs.boundaries[g + 1]);
            let len = (e.min(ge) - pos) as usize;
            let i = *slot.entry((p, local)).or_insert_with(|| {
                groups.push(GroupPlan {
                    file: p,
                    local,
                    rows: (ge - gs) as usize,
                    pieces: Vec::new(),
                });
                groups.len() - 1
            });
            order.push((i, groups[i].pieces.len()));
            groups[i].pieces.push(Piece {
                src: (pos - gs) as usize,
                dst,
                len,
            });
            dst += len;
            pos += len as u64;
        }
    }
    let mut cols = vec![Vec::new(); fs.files.len()];
    for g in &groups {
        if cols[g.file].is_empty() {
            let f = &fs.files[g.file];
            cols[g.file] = r
                .names
                .iter()
                .map(|n| f.column(n))
                .collect::<Result<Vec<_>>>()?;
        }
    }
    let types = match groups.first() {
        Some(g) => {
            let f = &fs.files[g.file];
            cols[g.file]
                .iter()
                .map(|&c| {
                    let t = f.schema().field(c).data_type().clone();
                    let w = t.primitive_width();
                    (t, w)
                })
                .collect()
        }
        None => Vec::new(),
    };
    Ok(SetPlan {
        groups,
        order,
        rows: dst,
        cols,
        types,
    })
}

/// Where a task puts one column of its group.
enum Dst<'a> {
    /// Fixed-width: one output slice per piece of the group, in piece order (not yet
    /// written: the task writes every byte of them).
    Fixed(Vec<&'a mut [MaybeUninit<u8>]>),
    /// Kept as slices, concatenated at the end.
    Slices,
    /// Only checked against the runs (stored trace / cell codes), never kept.
    Check(&'a RunCodes),
}

/// One decode: some columns of one row group of one read.
struct Task<'a> {
    read: usize,
    group: usize,
    /// Name indices (of the read) this task decodes, with their destinations.
    cols: Vec<(usize, Dst<'a>)>,
    /// Arrays of the group from the cache (no decoding), by name index.
    cached: Option<Vec<ArrayRef>>,
    /// Return the decoded arrays (the group goes into the file's cache).
    keep: bool,
}

/// What a task hands back besides the bytes it copied.
#[derive(Default)]
struct TaskOut {
    /// (read, name index, output row, validity of the piece) for pieces with nulls.
    nulls: Vec<(usize, usize, usize, BooleanBuffer)>,
    /// (read, name index, output row, slice) of non-fixed-width columns.
    slices: Vec<(usize, usize, usize, ArrayRef)>,
    /// (read, group, name index, array) for the cache.
    kept: Vec<(usize, usize, usize, ArrayRef)>,
    /// (read, group) when this task decoded (rather than took the group from the cache).
    decoded: Option<(usize, usize)>,
    /// (read, name index, bytes) written into the arena, per column of the task.
    written: Vec<(usize, usize, usize)>,
}

fn internal(what: &str) -> Error {
    Error::new(ErrorKind::Internal, what.to_string())
}

/// Rows per decoded batch: a batch's columns (up to 64 KiB each for 8-byte values) stay in
/// the cache for the copy, and the allocator reuses their memory batch after batch (whole
/// 64k-row groups came as 512 KiB arrays, which glibc maps and unmaps each time: a page
/// fault per 4 KiB).
const BATCH_ROWS: usize = 8192;

/// `dst` (not yet written) becomes a copy of `src` (same length).
fn write_bytes(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "piece and source of different lengths"
    );
    // SAFETY: both slices are valid for `src.len()` bytes (checked just above), `dst` is
    // exclusively borrowed so they cannot overlap, and writing bytes into MaybeUninit<u8>
    // needs no initialised destination.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len());
    }
}

/// Copies the parts of the group's pieces that a batch covers, for one column: `a` holds
/// group rows `[at, at + a.len())`.
#[allow(clippy::too_many_arguments)]
fn place(
    a: &ArrayRef,
    at: usize,
    pieces: &[Piece],
    dst: &mut Dst<'_>,
    (read, k): (usize, usize),
    width: Option<usize>,
    (out, written): (&mut TaskOut, &mut usize),
    path: &str,
) -> Result<()> {
    // (piece index, first group row, rows) of the piece parts inside this batch.
    let parts = parts_in(pieces, at, a.len());
    match dst {
        Dst::Fixed(slices) => {
            let w = same_width(a, width, path)?;
            let data = a.to_data();
            let values = data
                .buffers()
                .first()
                .ok_or_else(|| internal("fixed-width array without values"))?;
            let base = data.offset();
            for (i, s, n) in parts {
                let from = (base + s - at) * w;
                let src = values
                    .as_slice()
                    .get(from..from + n * w)
                    .ok_or_else(|| internal("piece outside its row group"))?;
                place_part(src, s, &pieces[i], slices[i], w, written);
                if let Some(nb) = a.nulls() {
                    let v = nb.inner().slice(s - at, n);
                    if v.count_set_bits() != n {
                        out.nulls
                            .push((read, k, pieces[i].dst + s - pieces[i].src, v));
                    }
                }
            }
        }
        Dst::Slices => {
            for (i, s, n) in parts {
                let dst = pieces[i].dst + s - pieces[i].src;
                out.slices.push((read, k, dst, a.slice(s - at, n)));
            }
        }
        Dst::Check(codes) => {
            let w = same_width(a, width, path)?;
            for (i, s, n) in parts {
                codes.check(&a.slice(s - at, n), pieces[i].dst + s - pieces[i].src)?;
                *written += n * w;
            }
        }
    }
    Ok(())
}

/// The pieces' parts among group rows `[at, at + n)`: (piece index, first group row, rows).
fn parts_in(
    pieces: &[Piece],
    at: usize,
    n: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let end = at + n;
    pieces.iter().enumerate().filter_map(move |(i, p)| {
        let s = p.src.max(at);
        let e = (p.src + p.len).min(end);
        (s < e).then(|| (i, s, e - s)) // lazily: e - s underflows when s >= e
    })
}

/// Copies `src`, the values (`w` bytes each) of group rows from `s` on, into `piece`'s
/// slice `slice`.
fn place_part(
    src: &[u8],
    s: usize,
    piece: &Piece,
    slice: &mut [MaybeUninit<u8>],
    w: usize,
    written: &mut usize,
) {
    let into = (s - piece.src) * w;
    write_bytes(&mut slice[into..into + src.len()], src);
    *written += src.len();
}

/// Copies the values of group rows `[at, at + n)` (`values`, `w` bytes each, no nulls)
/// into the pieces' slices they belong to.
fn place_values(
    values: &[u8],
    at: usize,
    w: usize,
    pieces: &[Piece],
    slices: &mut [&mut [MaybeUninit<u8>]],
    written: &mut usize,
) -> Result<()> {
    let n = values.len() / w;
    for (i, s, len) in parts_in(pieces, at, n) {
        let from = (s - at) * w;
        let src = values
            .get(from..from + len * w)
            .ok_or_else(|| internal("piece outside its page"))?;
        place_part(src, s, &pieces[i], slices[i], w, written);
    }
    Ok(())
}

/// The byte width of fixed-width `a`, which must be `width`, the set's type for the column
/// (taken from its first file).
fn same_width(a: &ArrayRef, width: Option<usize>, path: &str) -> Result<usize> {
    let w = width.ok_or_else(|| internal("fixed column without a width"))?;
    if a.data_type().primitive_width() != Some(w) {
        return Err(Error::format(format!(
            "{path}: column decoded as {}, other files of the set hold another type",
            a.data_type()
        )));
    }
    Ok(w)
}

/// Runs one task: decode (or take from the cache), copy the pieces batch by batch.
fn run(task: Task<'_>, reads: &[SetRead<'_>], plans: &[SetPlan]) -> Result<TaskOut> {
    let plan = &plans[task.read];
    let g = &plan.groups[task.group];
    let file = &reads[task.read].set.files[g.file];
    let mut out = TaskOut::default();
    let ks: Vec<usize> = task.cols.iter().map(|(k, _)| *k).collect();
    let mut dsts: Vec<Dst<'_>> = task.cols.into_iter().map(|(_, d)| d).collect();
    let mut kept: Vec<Vec<ArrayRef>> = vec![Vec::new(); ks.len()];
    let mut written = vec![0usize; ks.len()];
    // The task's columns left to decode through the crate (indices into `ks`).
    let mut rest: Vec<usize> = (0..ks.len()).collect();
    if task.cached.is_none() && !task.keep {
        rest.clear();
        for (j, &k) in ks.iter().enumerate() {
            let done = match (&mut dsts[j], plan.types[k].1) {
                (Dst::Fixed(slices), Some(w)) => file.decode_plain(
                    g.local,
                    plan.cols[g.file][k],
                    &plan.types[k].0,
                    |at, values| place_values(values, at, w, &g.pieces, slices, &mut written[j]),
                )?,
                _ => Plain::NotPlain,
            };
            if done == Plain::NotPlain {
                written[j] = 0; // decoded again, whole, below
                rest.push(j);
            }
        }
    }
    let mut batch = |at: usize, arrays: Vec<ArrayRef>, out: &mut TaskOut| -> Result<()> {
        for (&j, a) in rest.iter().zip(arrays) {
            let k = ks[j];
            let w = plan.types[k].1;
            place(
                &a,
                at,
                &g.pieces,
                &mut dsts[j],
                (task.read, k),
                w,
                (out, &mut written[j]),
                &file.path,
            )?;
            if task.keep {
                kept[j].push(a);
            }
        }
        Ok(())
    };
    match task.cached {
        Some(all) => batch(0, ks.iter().map(|&k| all[k].clone()).collect(), &mut out)?,
        None => {
            out.decoded = Some((task.read, task.group));
            let cols: Vec<usize> = rest.iter().map(|&j| plan.cols[g.file][ks[j]]).collect();
            if !cols.is_empty() {
                file.decode_batches(g.local, &cols, BATCH_ROWS, |at, arrays| {
                    batch(at, arrays, &mut out)
                })?;
            }
        }
    }
    out.written
        .extend(ks.iter().zip(written).map(|(&k, b)| (task.read, k, b)));
    if task.keep {
        for (j, parts) in kept.into_iter().enumerate() {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let a = match parts.as_slice() {
                [one] => one.clone(),
                _ => {
                    arrow_select::concat::concat(&refs).map_err(|e| Error::format(e.to_string()))?
                }
            };
            out.kept.push((task.read, task.group, ks[j], a));
        }
    }
    Ok(out)
}

/// Fresh arenas of at least this size, not advised for huge pages, are faulted in ahead.
const POPULATE_MIN: usize = 64 << 20;

/// Faults in the pages of `[addr, addr + len)` (fresh memory of an arena) on the pool's
/// threads, `MADV_POPULATE_WRITE` per 32 MiB piece: one call per piece instead of a page
/// fault per 4 KiB page while the decoders write. First reads of 10 M x 60 (2.6 GB arena,
/// not huge-advised) in fresh processes, bin/quiet 00:29, 4 alternations: 2.55 / 1.59 /
/// 1.81 / 1.59 s populated, 1.99 / 1.78 / 2.04 / 1.77 s not. Not for huge-advised arenas:
/// populating those was slower (10 M coords 392-538 ms against 240-386 ms; 1 M x 30 all
/// 102-187 against 104-128 ms). Linux >= 5.14; elsewhere (or on failure) a no-op, and the
/// pages are faulted on first write as before.
fn populate(addr: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PIECE: usize = 32 << 20;
        if len < POPULATE_MIN {
            return;
        }
        let start = addr.next_multiple_of(4096);
        let end = (addr + len) / 4096 * 4096;
        let pieces: Vec<(usize, usize)> = (start..end)
            .step_by(PIECE)
            .map(|p| (p, (p + PIECE).min(end) - p))
            .collect();
        let threads = crate::pool::resolve_threads(0);
        let _ = crate::pool::map(threads, pieces, |(p, n)| {
            // SAFETY: [p, p + n) lies inside the arena's allocation, which the caller owns
            // and has not handed out; populating only backs its pages (zero-filled), the
            // memory's validity does not change. Failures are ignored.
            unsafe {
                libc::madvise(p as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE);
            }
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len);
}

/// Start of every column in the arena is a multiple of this (Arrow's preferred alignment).
const COLUMN_ALIGN: usize = 64;

/// One allocation holding every fixed-width column of a read, each at a 64-byte-aligned
/// offset; the result's arrays are slices of it.
///
/// The memory is not zeroed: the tasks write every byte of every column (the pieces of a
/// column tile it, and [`read_sets`] checks that the bytes written add up to its length
/// before the arena becomes a buffer); only the alignment gaps between columns are zeroed
/// here. Zeroing it was a calloc, which glibc serves from memory it keeps after a free and
/// then clears byte by byte on the calling thread (glibc raises its mmap threshold to the
/// size of the last large block freed, so every query after the first got reused, cleared
/// memory: memset was 11 % of get_chrom(coords)). An arena of 2 MiB up to
/// [`HUGE_MAX`] starts on a 2 MiB boundary of a slightly larger allocation, advised
/// for huge pages ([`crate::memory`]); untouched slack costs no resident memory. A large
/// arena is taken from the handle's kept arenas when one fits, and goes back there when
/// the result is released ([`super::arenas`]).
struct Arena {
    mem: Mem,
    start: usize,
    /// (offset, bytes) of each fixed-width column: `cols[read][name]`.
    cols: ColumnSpans,
    len: usize,
}

impl Arena {
    /// The arena of the fixed-width columns `(read, name)` that `pick` accepts: memory
    /// kept by `pool` when some fits, else fresh.
    fn new(plans: &[SetPlan], pool: &Arenas, pick: impl Fn(usize, usize) -> bool) -> Arena {
        let mut len = 0usize;
        let cols = plans
            .iter()
            .enumerate()
            .map(|(r, p)| {
                p.types
                    .iter()
                    .enumerate()
                    .map(|(k, (_, w))| {
                        w.filter(|_| pick(r, k)).map(|w| {
                            let off = len.next_multiple_of(COLUMN_ALIGN);
                            len = off + p.rows * w;
                            (off, p.rows * w)
                        })
                    })
                    .collect()
            })
            .collect();
        let huge = (HUGE..=HUGE_MAX).contains(&len) && cfg!(target_os = "linux");
        // malloc's 16-byte alignment when not huge: the column offsets are then 16-byte
        // aligned, enough for every fixed-width Arrow type.
        let total = if huge { len + HUGE } else { len };
        let kept = pool.take(total);
        let reused = kept.is_some();
        let mut mem: Mem = kept.unwrap_or_else(|| Vec::with_capacity(total));
        // SAFETY: MaybeUninit<u8> needs no initialisation and `total <= capacity` (a kept
        // arena has at least the capacity asked for).
        unsafe { mem.set_len(total) };
        let start = if huge {
            let base = mem.as_ptr() as usize;
            let start = base.next_multiple_of(HUGE) - base;
            if !reused {
                advise_huge(mem[start..].as_ptr().cast(), len);
            }
            start
        } else {
            0
        };
        if !reused && !huge {
            populate(mem[start..].as_ptr() as usize, len);
        }
        Arena {
            mem,
            start,
            cols,
            len,
        }
    }

    /// The bytes of every fixed-width column, `[read][name]`, not yet written (the gaps
    /// between them are zeroed here).
    fn columns(&mut self) -> Vec<Vec<Option<&mut [MaybeUninit<u8>]>>> {
        let mut rest = &mut self.mem[self.start..self.start + self.len];
        let mut at = 0usize;
        let mut out = Vec::with_capacity(self.cols.len());
        for row in &self.cols {
            let mut r = Vec::with_capacity(row.len());
            for c in row {
                r.push(c.map(|(off, len)| {
                    let (gap, tail) = std::mem::take(&mut rest).split_at_mut(off - at);
                    gap.fill(MaybeUninit::new(0));
                    let (col, tail) = tail.split_at_mut(len);
                    rest = tail;
                    at = off + len;
                    col
                }));
            }
            out.push(r);
        }
        out
    }

    /// The arena as one Arrow buffer (zero-copy) and the columns' (offset, bytes).
    /// `written[read][name]`: the bytes the tasks wrote into each column, which must be
    /// its length (else the read is an internal error and the memory is dropped unread).
    fn into_buffer(
        self,
        written: &HashMap<(usize, usize), usize>,
        pool: &Arc<Arenas>,
    ) -> Result<(Buffer, ColumnSpans)> {
        for (r, row) in self.cols.iter().enumerate() {
            for (k, c) in row.iter().enumerate() {
                if let Some((_, len)) = c {
                    if written.get(&(r, k)).copied().unwrap_or(0) != *len {
                        return Err(internal("a result column was not filled"));
                    }
                }
            }
        }
        if self.mem.len() < self.start + self.len {
            return Err(internal("arena shorter than its columns"));
        }
        // SAFETY: `[start, start + len)` lies inside `mem` (checked just above) and every
        // byte of it is initialised: the alignment gaps were zeroed by `columns`, and each
        // column's bytes were written by the tasks (disjoint slices of it, whose written
        // counts add up to its length, checked above).
        let buf = unsafe { super::arenas::pooled_buffer(self.mem, self.start, self.len, pool) };
        Ok((buf, self.cols))
    }
}

/// Where each fixed-width column lies in the arena, `[read][name]`: (offset, bytes).
type ColumnSpans = Vec<Vec<Option<(usize, usize)>>>;

/// One column's output cut per group and piece: `[group][piece]`.
type GroupSlices<'a> = Vec<Vec<&'a mut [MaybeUninit<u8>]>>;

/// Cuts `buf` (output rows × `w` bytes) into the slices of every piece, handed to the
/// groups they belong to: `dst[group][piece]`.
fn carve<'a>(buf: &'a mut [MaybeUninit<u8>], w: usize, plan: &SetPlan) -> GroupSlices<'a> {
    let mut per_group: GroupSlices<'a> = plan
        .groups
        .iter()
        .map(|g| Vec::with_capacity(g.pieces.len()))
        .collect();
    let mut rest = buf;
    for &(gi, pi) in &plan.order {
        let len = plan.groups[gi].pieces[pi].len * w;
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
        per_group[gi].push(head);
        rest = tail;
    }
    per_group
}

/// Fixed-width bytes of a read (result and checked-only columns) from which the decoding
/// threads' pooled buffers are freed when its decoding ends.
const RELEASE_AFTER: usize = 16 << 20;

/// Reads every `SetRead`, returning one array per name per read (types as stored; `None`
/// for the names only checked). Large arenas come from, and go back to, `pool`.
pub(crate) fn read_sets(
    reads: &[SetRead<'_>],
    pool: &Arc<Arenas>,
) -> Result<Vec<Vec<Option<ArrayRef>>>> {
    let plans = reads.iter().map(plan_set).collect::<Result<Vec<_>>>()?;
    let checked_bytes = check_plans(reads, &plans)?;
    // The fixed-width columns of the result, at their final size.
    let mut arena = Arena::new(&plans, pool, |r, k| reads[r].check(k).is_none());
    let outs = {
        let tasks = make_tasks(reads, &plans, arena.columns());
        // At a URL, groups are fetched (and decoded) up to `max_concurrency` at once.
        let io = reads
            .iter()
            .flat_map(|r| r.set.files.iter().map(|f| f.request_width()))
            .max()
            .unwrap_or(1);
        let threads = crate::pool::resolve_threads(0).max(io);
        let outs = crate::pool::map(threads, tasks, |t| run(t, reads, &plans))?;
        // The decoding threads' pooled page and chunk buffers go now, before the output
        // columns are made (issue 17, item 4): kept, they sat beside the finished result at
        // the read's peak (1 M x 30 all columns, first read: peak - open - result 21.8-24.0
        // MiB kept, 12.0-12.7 MiB freed; 2 M x 1: 9.8-10.3 -> 4.2-4.7 MiB), and keeping
        // them saved nothing measurable on repeated reads (quiet A/B, 3 x 30 reads each).
        // Bulk reads only (a result of RELEASE_AFTER or more): a point query keeps them for
        // the next (get_trace at 10 M x 60 re-allocating them every query: 19-22 -> 24.7 ms).
        if arena.len + checked_bytes >= RELEASE_AFTER {
            pages::release_buffers();
            if threads > 1 {
                crate::pool::pool(threads)?.broadcast(|_| pages::release_buffers());
            }
            // Freed, they stay resident in the decoding threads' malloc arenas, where the
            // output columns made next on this thread cannot reuse them.
            crate::memory::release_free_memory();
        }
        outs
    };
    // Row-group decodes, and the cache: the last groups decoded per file, in first-use order.
    let mut kept: HashMap<(usize, usize), Vec<Option<ArrayRef>>> = HashMap::new();
    let mut decoded: HashSet<(usize, usize)> = HashSet::new();
    let mut nulls: HashMap<(usize, usize), Vec<(usize, BooleanBuffer)>> = HashMap::new();
    let mut slices: HashMap<(usize, usize), Vec<(usize, ArrayRef)>> = HashMap::new();
    let mut written: HashMap<(usize, usize), usize> = HashMap::new();
    for o in outs {
        for (r, k, b) in o.written {
            *written.entry((r, k)).or_default() += b;
        }
        for (r, k, dst, v) in o.nulls {
            nulls.entry((r, k)).or_default().push((dst, v));
        }
        for (r, k, dst, a) in o.slices {
            slices.entry((r, k)).or_default().push((dst, a));
        }
        for (r, g, k, a) in o.kept {
            let n = reads[r].names.len();
            kept.entry((r, g)).or_insert_with(|| vec![None; n])[k] = Some(a);
        }
        decoded.extend(o.decoded);
    }
    remember(reads, &plans, &decoded, kept);
    // Every row of a checked column was checked.
    for (r, plan) in plans.iter().enumerate() {
        for (k, (_, w)) in plan.types.iter().enumerate() {
            if reads[r].check(k).is_some()
                && written.get(&(r, k)).copied().unwrap_or(0) != plan.rows * w.unwrap_or(0)
            {
                return Err(internal("a checked column was not read whole"));
            }
        }
    }
    // Assemble each column.
    let (buffer, offsets) = arena.into_buffer(&written, pool)?;
    let mut result = Vec::with_capacity(reads.len());
    for (r, plan) in plans.iter().enumerate() {
        let mut cols = Vec::with_capacity(plan.types.len());
        for (k, (t, _)) in plan.types.iter().enumerate() {
            if reads[r].check(k).is_some() {
                cols.push(None);
                continue;
            }
            let a = match offsets[r][k] {
                Some((off, len)) => fixed_array(
                    t,
                    buffer.slice_with_length(off, len),
                    plan.rows,
                    nulls.remove(&(r, k)),
                )?,
                None => concat_slices(slices.remove(&(r, k)).unwrap_or_default())?,
            };
            cols.push(Some(a));
        }
        if plan.types.is_empty() {
            return Err(internal("read of zero rows"));
        }
        result.push(cols);
    }
    Ok(result)
}

/// Checks that every checked-only column of `reads` holds integers and that its runs cover
/// the read's rows; returns the bytes of those columns (read, never kept).
fn check_plans(reads: &[SetRead<'_>], plans: &[SetPlan]) -> Result<usize> {
    let mut bytes = 0usize;
    for (read, plan) in reads.iter().zip(plans) {
        for (k, (t, w)) in plan.types.iter().enumerate() {
            let Some(codes) = read.check(k) else {
                continue;
            };
            codes.check_type(t)?;
            if codes.rows() != plan.rows {
                return Err(internal("runs and rows of a read differ"));
            }
            bytes += plan.rows * w.unwrap_or(0);
        }
    }
    Ok(bytes)
}

/// The tasks of a read: one per touched group, split by columns when there are fewer
/// groups to decode than twice the threads (point queries), so that both cores work.
fn make_tasks<'a>(
    reads: &'a [SetRead<'_>],
    plans: &[SetPlan],
    columns: Vec<Vec<Option<&'a mut [MaybeUninit<u8>]>>>,
) -> Vec<Task<'a>> {
    // dst[read][name][group] = slices of that group's pieces.
    let mut dst: Vec<Vec<Option<GroupSlices<'a>>>> = Vec::with_capacity(columns.len());
    for (r, row) in columns.into_iter().enumerate() {
        let plan = &plans[r];
        dst.push(
            row.into_iter()
                .zip(&plan.types)
                .map(|(b, (_, w))| match (b, w) {
                    (Some(b), Some(w)) => Some(carve(b, *w, plan)),
                    _ => None,
                })
                .collect(),
        );
    }
    let threads = crate::pool::resolve_threads(0);
    let mut n_decodes = 0usize;
    let mut entries = Vec::new();
    for (r, plan) in plans.iter().enumerate() {
        let fs = reads[r].set;
        let keep = last_per_file(plan);
        for (gi, g) in plan.groups.iter().enumerate() {
            let file = &fs.files[g.file];
            let cached = file.cached(g.local, &plan.cols[g.file]);
            if cached.is_none() {
                n_decodes += 1;
            }
            entries.push((r, gi, cached, keep.contains(&gi)));
        }
    }
    let split = n_decodes > 0 && n_decodes < 2 * threads;
    let mut tasks = Vec::new();
    for (r, gi, cached, keep) in entries {
        let n_cols = plans[r].types.len();
        let mut cols: Vec<(usize, Dst<'a>)> = (0..n_cols)
            .map(|k| {
                let d = match (dst[r][k].as_mut(), reads[r].check(k)) {
                    (_, Some(codes)) => Dst::Check(codes),
                    (Some(per_group), None) => Dst::Fixed(std::mem::take(&mut per_group[gi])),
                    (None, None) => Dst::Slices,
                };
                (k, d)
            })
            .collect();
        let chunks = if split && cached.is_none() {
            // About 4 tasks per thread over the decodes, at least one column each.
            (4 * threads).div_ceil(n_decodes).clamp(1, n_cols.max(1))
        } else {
            1
        };
        let per = n_cols.div_ceil(chunks).max(1);
        while !cols.is_empty() {
            let rest = cols.split_off(per.min(cols.len()));
            tasks.push(Task {
                read: r,
                group: gi,
                cols,
                cached: cached.clone(),
                keep,
            });
            cols = rest;
        }
    }
    tasks
}

/// Indices of the groups of `plan` that end up in the file caches: the last
/// `CACHE_PER_FILE` per file, in first-use order, among those the read uses only part of
/// (a later query — the next batch of an iteration — may want the rest; a group read whole,
/// as in full reads, is not kept: keeping the last groups of every partition would hold
/// hundreds of MB after a full read).
fn last_per_file(plan: &SetPlan) -> Vec<usize> {
    let mut per_file: HashMap<usize, Vec<usize>> = HashMap::new();
    for (gi, g) in plan.groups.iter().enumerate() {
        if g.pieces.iter().map(|p| p.len).sum::<usize>() < g.rows {
            per_file.entry(g.file).or_default().push(gi);
        }
    }
    per_file
        .into_values()
        .flat_map(|v| v.into_iter().rev().take(CACHE_PER_FILE))
        .collect()
}

/// Counts the decodes and puts the kept groups into their files' caches in first-use order.
fn remember(
    reads: &[SetRead<'_>],
    plans: &[SetPlan],
    decoded: &HashSet<(usize, usize)>,
    mut kept: HashMap<(usize, usize), Vec<Option<ArrayRef>>>,
) {
    for (r, plan) in plans.iter().enumerate() {
        let fs = reads[r].set;
        for (gi, g) in plan.groups.iter().enumerate() {
            if !decoded.contains(&(r, gi)) {
                continue;
            }
            let file = &fs.files[g.file];
            let cols = &plan.cols[g.file];
            file.count_reads(1);
            if let Some(arrays) = kept.remove(&(r, gi)) {
                if let Some(arrays) = arrays.into_iter().collect::<Option<Vec<_>>>() {
                    file.remember_arrays(g.local, cols, arrays);
                }
            }
        }
    }
}

/// A fixed-width column from its filled buffer and the validity of the pieces with nulls.
fn fixed_array(
    t: &DataType,
    values: Buffer,
    rows: usize,
    nulls: Option<Vec<(usize, BooleanBuffer)>>,
) -> Result<ArrayRef> {
    let nulls = nulls.map(|mut pieces| {
        pieces.sort_unstable_by_key(|(dst, _)| *dst);
        let mut b = BooleanBufferBuilder::new(rows);
        for (dst, v) in pieces {
            b.append_n(dst - b.len(), true);
            b.append_buffer(&v);
        }
        b.append_n(rows - b.len(), true);
        NullBuffer::new(b.finish())
    });
    let data = ArrayDataBuilder::new(t.clone())
        .len(rows)
        .add_buffer(values)
        .nulls(nulls)
        .build()
        .map_err(|e| Error::format(e.to_string()))?;
    Ok(make_array(data))
}

/// Slices in output order, as one array.
fn concat_slices(mut pieces: Vec<(usize, ArrayRef)>) -> Result<ArrayRef> {
    pieces.sort_unstable_by_key(|(dst, _)| *dst);
    let refs: Vec<&dyn Array> = pieces.iter().map(|(_, a)| a.as_ref()).collect();
    if refs.is_empty() {
        return Err(internal("read of zero rows"));
    }
    arrow_select::concat::concat(&refs).map_err(|e| Error::format(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populated_fresh_memory_is_writable_and_kept_as_written() {
        let n = POPULATE_MIN + (40 << 20) + 12_345; // pieces of 32 MiB and a ragged tail
        let mut v: Vec<u8> = Vec::with_capacity(n);
        populate(v.as_ptr() as usize, n);
        v.extend((0..n).map(|i| (i % 251) as u8));
        assert!(v.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }
}
