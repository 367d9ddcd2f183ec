//! The `index/` arrays (§11) with their length and value checks (§14): runs, cell segments,
//! row groups, and the arrays of the partitioned and primary+coords layouts.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::chromdata::access::zarr::ArrayReader;
use crate::chromdata::spec::{Layout, Root};
use crate::error::{Error, Result};

/// Runs and row groups of all layouts (§11.1), and the layout's own arrays.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    /// Stored rows of run r: `[trace_offsets[r], trace_offsets[r+1])`.
    pub(crate) trace_offsets: Vec<u64>,
    pub(crate) trace_codes: Vec<i32>,
    pub(crate) trace_cells: Vec<i32>,
    /// Chromosome of each run; -1: several (flat only).
    pub(crate) chrom_trace: Vec<i32>,
    pub(crate) cell_offsets: Vec<u64>,
    pub(crate) cell_codes: Vec<i32>,
    /// Row-group boundaries of the spot files (2.2: of the primary side).
    pub(crate) row_groups: Vec<u64>,
    pub(crate) layout: LayoutIndex,
}

/// The arrays only one layout has.
#[derive(Debug, Clone)]
pub(crate) enum LayoutIndex {
    Flat,
    /// §11.2 (`cell_partition` is checked at open; queries do not need it).
    Partitioned {
        partitions: Partitions,
    },
    /// §11.3: the coords side.
    PrimaryCoords(CoordsIndex),
}

/// Rows, row groups and chromosome of each partition.
#[derive(Debug, Clone)]
pub(crate) struct Partitions {
    pub(crate) offsets: Vec<u64>,
    pub(crate) groups: Vec<u64>,
    pub(crate) chrom: Vec<i32>,
}

/// `index/coords/` of a 2.2 store.
#[derive(Debug, Clone)]
pub(crate) struct CoordsIndex {
    pub(crate) partitions: Partitions,
    pub(crate) row_groups: Vec<u64>,
    pub(crate) run_offsets: Vec<u64>,
    /// Coords run of primary run r (inverse of `primary_run`).
    pub(crate) inv: Vec<u64>,
}

impl Index {
    /// The coords rows of primary run `r` (2.2), or its own rows.
    pub(crate) fn key_rows(&self, r: usize) -> (u64, u64) {
        match &self.layout {
            LayoutIndex::PrimaryCoords(c) => {
                let k = c.inv[r] as usize;
                (c.run_offsets[k], c.run_offsets[k + 1])
            }
            _ => (self.trace_offsets[r], self.trace_offsets[r + 1]),
        }
    }
}

/// An offsets array: starts at 0, strictly increasing, ends at `total`.
pub(crate) fn check_offsets(v: Vec<i64>, total: u64, ctx: &str, what: &str) -> Result<Vec<u64>> {
    if v.first() != Some(&0) {
        return Err(Error::format(format!("{ctx}: must start at 0")));
    }
    if v.windows(2).any(|w| w[1] <= w[0]) {
        return Err(Error::format(format!(
            "{ctx}: offsets must be strictly increasing"
        )));
    }
    let last = *v.last().unwrap_or(&0) as u64;
    if last != total {
        return Err(Error::format(format!(
            "{ctx}: ends at {last}, but {what} is {total}"
        )));
    }
    // In place (same layout): no second buffer of the array's size.
    Ok(v.into_iter().map(|x| x as u64).collect())
}

fn check_len(ctx: &str, len: usize, expected: u64, what: &str) -> Result<()> {
    if len as u64 != expected {
        return Err(Error::format(format!(
            "{ctx}: length {len}, expected {expected} ({what})"
        )));
    }
    Ok(())
}

fn check_codes(ctx: &str, v: &[i32], lo: i32, n: u64) -> Result<()> {
    // One pass for the range (vectorised), the position only when something is out of it.
    let (min, max) = v
        .iter()
        .fold((i32::MAX, i32::MIN), |(a, b), &c| (a.min(c), b.max(c)));
    if v.is_empty() || (min >= lo && (max < 0 || (max as u64) < n)) {
        return Ok(());
    }
    if let Some((i, &c)) = v
        .iter()
        .enumerate()
        .find(|&(_, &c)| c < lo || (c >= 0 && c as u64 >= n))
    {
        return Err(Error::format(format!(
            "{ctx}[{i}] = {c}: out of range [{lo}, {n})"
        )));
    }
    Ok(())
}

/// An index array read ahead, or why it could not be read.
enum Ahead {
    I32(Result<Vec<i32>>),
    I64(Result<Vec<i64>>),
}

/// Reads the arrays of one store with messages naming them.
struct Arrays<'a> {
    r: &'a ArrayReader,
    d: String,
    /// Arrays read ahead, in parallel ([`Arrays::read_ahead`]), taken by the checks.
    ahead: Mutex<HashMap<String, Ahead>>,
}

impl Arrays<'_> {
    /// Reads (and decompresses) `arrays` (path, whether int64) ahead, in parallel on the
    /// current pool (the caller's: one of the library's). The checks then take them in
    /// their own order, so the first failing check or read in that order is the one
    /// reported, as when read one after another.
    fn read_ahead(&self, arrays: &[(String, bool)]) {
        use rayon::prelude::*;
        let read: Vec<(String, Ahead)> = arrays
            .par_iter()
            .map(|(path, wide)| {
                let v = if *wide {
                    Ahead::I64(self.r.read_i64(path))
                } else {
                    Ahead::I32(self.r.read_i32(path))
                };
                (path.clone(), v)
            })
            .collect();
        self.ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(read);
    }
    fn take(&self, path: &str) -> Option<Ahead> {
        self.ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(path)
    }
    fn ctx(&self, path: &str) -> String {
        format!("{}/{path}", self.d)
    }
    fn i32s(&self, path: &str) -> Result<Vec<i32>> {
        match self.take(path) {
            Some(Ahead::I32(v)) => v,
            _ => self.r.read_i32(path),
        }
    }
    fn i64s(&self, path: &str) -> Result<Vec<i64>> {
        match self.take(path) {
            Some(Ahead::I64(v)) => v,
            _ => self.r.read_i64(path),
        }
    }
    fn offsets(&self, path: &str, total: u64, what: &str) -> Result<Vec<u64>> {
        check_offsets(self.i64s(path)?, total, &self.ctx(path), what)
    }
    fn len(&self, path: &str, len: usize, expected: u64, what: &str) -> Result<()> {
        check_len(&self.ctx(path), len, expected, what)
    }
    fn codes(&self, path: &str, v: &[i32], lo: i32, n: u64) -> Result<()> {
        check_codes(&self.ctx(path), v, lo, n)
    }
}

/// The 1-D index arrays [`load`] reads for `root` (not `source_row`, of which only the
/// document is read): what an open at a URL fetches ahead.
pub(crate) fn array_paths(root: &Root) -> Vec<String> {
    let mut names = vec![
        "trace_offsets",
        "trace_codes",
        "trace_cells",
        "chrom_trace",
        "cell_offsets",
        "cell_codes",
        "row_groups",
    ];
    let partitions = ["partition_offsets", "partition_groups", "partition_chrom"];
    match root.layout {
        Layout::Flat => {}
        Layout::Partitioned => {
            names.extend(partitions);
            names.push("cell_partition");
        }
        Layout::PrimaryCoords => {
            let coords = ["row_groups", "run_offsets", "primary_run"];
            let mut out: Vec<String> = names.iter().map(|n| format!("index/{n}")).collect();
            out.extend(
                coords
                    .iter()
                    .chain(&partitions)
                    .map(|n| format!("index/coords/{n}")),
            );
            return out;
        }
    }
    names.iter().map(|n| format!("index/{n}")).collect()
}

/// Reads and validates every index array except `source_row`'s content (§14). `parallel`:
/// called on one of the library's pools, whose threads then read the arrays.
pub(crate) fn load(r: &ArrayReader, root: &Root, parallel: bool) -> Result<Index> {
    let a = Arrays {
        r,
        d: r.store.display.clone(),
        ahead: Mutex::new(HashMap::new()),
    };
    // The arrays' reads and zstd are most of the index's cost (10 M spots: ~1 MB decoded,
    // ~1.2 ms on one thread), and independent of each other.
    if parallel {
        let wide = |p: &String| {
            p.ends_with("offsets")
                || p.ends_with("row_groups")
                || p.ends_with("partition_groups")
                || p.ends_with("primary_run")
        };
        let paths: Vec<(String, bool)> = array_paths(root)
            .into_iter()
            .map(|p| {
                let w = wide(&p);
                (p, w)
            })
            .collect();
        a.read_ahead(&paths);
    }
    let mut ix = load_runs(&a, root)?;
    check_source_row(&a, root)?;
    ix.layout = match root.layout {
        Layout::Flat => LayoutIndex::Flat,
        Layout::Partitioned => load_partitioned(&a, root, &ix)?,
        Layout::PrimaryCoords => LayoutIndex::PrimaryCoords(load_coords(&a, root, &ix)?),
    };
    Ok(ix)
}

/// §11.1: runs, cell segments and row groups.
fn load_runs(a: &Arrays<'_>, root: &Root) -> Result<Index> {
    let u = root.uchrom();
    let n_runs = u.n_runs;
    let trace_offsets = a.offsets("index/trace_offsets", u.n_spots, "n_spots")?;
    a.len(
        "index/trace_offsets",
        trace_offsets.len() - 1,
        n_runs,
        "n_runs + 1 elements minus one",
    )?;
    let trace_codes = a.i32s("index/trace_codes")?;
    let trace_cells = a.i32s("index/trace_cells")?;
    let chrom_trace = a.i32s("index/chrom_trace")?;
    a.len("index/trace_codes", trace_codes.len(), n_runs, "n_runs")?;
    a.len("index/trace_cells", trace_cells.len(), n_runs, "n_runs")?;
    a.len("index/chrom_trace", chrom_trace.len(), n_runs, "n_runs")?;
    a.codes("index/trace_codes", &trace_codes, 0, u.n_traces)?;
    if u.has_cell_id {
        a.codes("index/trace_cells", &trace_cells, 0, u.n_cells)?;
    } else if let Some(i) = trace_cells.iter().position(|&c| c != -1) {
        return Err(Error::format(format!(
            "{}[{i}]: must be -1 without cell_id",
            a.ctx("index/trace_cells")
        )));
    }
    let chrom_lo = if root.layout == Layout::Flat { -1 } else { 0 };
    a.codes("index/chrom_trace", &chrom_trace, chrom_lo, u.n_chroms)?;
    let (cell_offsets, cell_codes) = load_cell_segments(a, root)?;
    // Runs and cell segments nest: every segment boundary is a run boundary.
    for &b in &cell_offsets {
        if trace_offsets.binary_search(&b).is_err() {
            return Err(Error::format(format!(
                "{}: segment boundary {b} is not a run boundary",
                a.ctx("index/cell_offsets")
            )));
        }
    }
    let row_groups = a.offsets("index/row_groups", u.n_spots, "n_spots")?;
    a.len(
        "index/row_groups",
        row_groups.len() - 1,
        u.n_row_groups,
        "n_row_groups",
    )?;
    Ok(Index {
        trace_offsets,
        trace_codes,
        trace_cells,
        chrom_trace,
        cell_offsets,
        cell_codes,
        row_groups,
        layout: LayoutIndex::Flat,
    })
}

/// `cell_offsets` / `cell_codes`: `[0]` and empty without cell_id.
fn load_cell_segments(a: &Arrays<'_>, root: &Root) -> Result<(Vec<u64>, Vec<i32>)> {
    let u = root.uchrom();
    if u.has_cell_id {
        let co = a.offsets("index/cell_offsets", u.n_spots, "n_spots")?;
        let cc = a.i32s("index/cell_codes")?;
        a.len(
            "index/cell_codes",
            cc.len(),
            co.len() as u64 - 1,
            "len(cell_offsets) - 1",
        )?;
        a.codes("index/cell_codes", &cc, 0, u.n_cells)?;
        Ok((co, cc))
    } else {
        let co = a.i64s("index/cell_offsets")?;
        let cc = a.i32s("index/cell_codes")?;
        if co != [0] || !cc.is_empty() {
            return Err(Error::format(format!(
                "{}: must be [0] (and cell_codes empty) without cell_id",
                a.ctx("index/cell_offsets")
            )));
        }
        Ok((vec![0], cc))
    }
}

/// `index/source_row` exists iff has_source_row, with n_spots elements (its content is read
/// when original order is asked for).
fn check_source_row(a: &Arrays<'_>, root: &Root) -> Result<()> {
    let u = root.uchrom();
    if u.has_source_row {
        let n = a.r.shape_1d("index/source_row", "int64")?;
        if n != u.n_spots {
            return Err(Error::format(format!(
                "{}: length {n}, expected n_spots = {}",
                a.ctx("index/source_row"),
                u.n_spots
            )));
        }
    } else if a.r.store.exists("index/source_row/zarr.json")? {
        return Err(Error::format(format!(
            "{} exists but has_source_row is false",
            a.ctx("index/source_row")
        )));
    }
    Ok(())
}

/// Partition offsets / groups / chromosomes under `dir` (§11.2, §11.3), checked against
/// the row groups `row_groups` (`n_groups` of them, named `groups_what`).
fn load_partitions(
    a: &Arrays<'_>,
    root: &Root,
    dir: &str,
    row_groups: &[u64],
    groups_what: &str,
) -> Result<Partitions> {
    let u = root.uchrom();
    let path = |name: &str| format!("{dir}/{name}");
    let offsets = a.offsets(&path("partition_offsets"), u.n_spots, "n_spots")?;
    let n_groups = row_groups.len() as u64 - 1;
    let groups = a.offsets(&path("partition_groups"), n_groups, groups_what)?;
    let chrom = a.i32s(&path("partition_chrom"))?;
    let n_part = offsets.len() as u64 - 1;
    a.len(
        &path("partition_groups"),
        groups.len(),
        n_part + 1,
        "n_part + 1",
    )?;
    a.len(&path("partition_chrom"), chrom.len(), n_part, "n_part")?;
    a.codes(&path("partition_chrom"), &chrom, 0, u.n_chroms)?;
    for (p, w) in groups.windows(2).enumerate() {
        if row_groups[w[0] as usize] != offsets[p] || row_groups[w[1] as usize] != offsets[p + 1] {
            return Err(Error::format(format!(
                "{}: partition {p} groups do not start/end at its rows",
                a.ctx(&path("partition_groups"))
            )));
        }
    }
    Ok(Partitions {
        offsets,
        groups,
        chrom,
    })
}

/// §11.2; each run lies in one partition, with that partition's chromosome.
fn load_partitioned(a: &Arrays<'_>, root: &Root, ix: &Index) -> Result<LayoutIndex> {
    let partitions = load_partitions(a, root, "index", &ix.row_groups, "n_row_groups")?;
    let cell_partition = a.i32s("index/cell_partition")?;
    let n_part = partitions.offsets.len() as u64 - 1;
    a.len(
        "index/cell_partition",
        cell_partition.len(),
        ix.cell_codes.len() as u64,
        "n_seg",
    )?;
    a.codes("index/cell_partition", &cell_partition, 0, n_part)?;
    let po = &partitions.offsets;
    for r in 0..ix.trace_codes.len() {
        let start = ix.trace_offsets[r];
        let p = po.partition_point(|&o| o <= start) - 1;
        if ix.trace_offsets[r + 1] > po[p + 1] || ix.chrom_trace[r] != partitions.chrom[p] {
            return Err(Error::format(format!(
                "{}: run {r} crosses partitions or its chrom_trace differs from partition_chrom",
                a.ctx("index")
            )));
        }
    }
    Ok(LayoutIndex::Partitioned { partitions })
}

/// §11.3: the coords partitions and runs; `primary_run` is a permutation mapping coords
/// runs to primary runs of the same length and chromosome.
fn load_coords(a: &Arrays<'_>, root: &Root, ix: &Index) -> Result<CoordsIndex> {
    let u = root.uchrom();
    let n_runs = u.n_runs;
    let rg = a.offsets("index/coords/row_groups", u.n_spots, "n_spots")?;
    a.len(
        "index/coords/row_groups",
        rg.len() - 1,
        u.n_coord_row_groups.unwrap_or_default(),
        "n_coord_row_groups",
    )?;
    let partitions = load_partitions(a, root, "index/coords", &rg, "n_coord_row_groups")?;
    let ro = a.offsets("index/coords/run_offsets", u.n_spots, "n_spots")?;
    a.len("index/coords/run_offsets", ro.len() - 1, n_runs, "n_runs")?;
    let pr = a.i64s("index/coords/primary_run")?;
    a.len("index/coords/primary_run", pr.len(), n_runs, "n_runs")?;
    let mut inv = vec![u64::MAX; pr.len()];
    for (k, &p) in pr.iter().enumerate() {
        if p < 0 || p as u64 >= n_runs || inv[p as usize] != u64::MAX {
            return Err(Error::format(format!(
                "{}: not a permutation of 0..n_runs (element {k} = {p})",
                a.ctx("index/coords/primary_run")
            )));
        }
        inv[p as usize] = k as u64;
    }
    let po = &partitions.offsets;
    // Coords runs are in row order (`ro` strictly increasing), so their partitions are
    // found by one walk along `po` (what `po.partition_point(|&o| o <= ro[k]) - 1` gives).
    let mut part = 0usize;
    for (k, &p) in pr.iter().enumerate() {
        let p = p as usize;
        let cl = ro[k + 1] - ro[k];
        let pl = ix.trace_offsets[p + 1] - ix.trace_offsets[p];
        while part + 2 < po.len() && po[part + 1] <= ro[k] {
            part += 1;
        }
        if cl != pl || ro[k + 1] > po[part + 1] || partitions.chrom[part] != ix.chrom_trace[p] {
            return Err(Error::format(format!(
                "{}: coords run {k} does not match primary run {p} (length or chromosome)",
                a.ctx("index/coords")
            )));
        }
    }
    Ok(CoordsIndex {
        partitions,
        row_groups: rg,
        run_offsets: ro,
        inv,
    })
}
