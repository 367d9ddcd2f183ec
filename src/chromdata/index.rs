//! The `index/` arrays (§11), read through zarrs (bytes + zstd codecs) from a directory or
//! a `.cdz`, with their dtype, shape and value-level checks.

use std::sync::Arc;

use serde_json::Value;
use zarrs::array::Array;

use super::spec::{Layout, Root};
use super::store::{Store, ZarrsStorage};
use crate::error::{Error, ErrorKind, Result};

#[derive(Debug, Clone, Default)]
pub(crate) struct CoordsIndex {
    pub(crate) partition_offsets: Vec<u64>,
    pub(crate) partition_groups: Vec<u64>,
    pub(crate) partition_chrom: Vec<i32>,
    pub(crate) row_groups: Vec<u64>,
    pub(crate) run_offsets: Vec<u64>,
    /// Coords run of primary run r (inverse of `primary_run`).
    pub(crate) inv: Vec<u64>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    pub(crate) trace_offsets: Vec<u64>,
    pub(crate) trace_codes: Vec<i32>,
    pub(crate) trace_cells: Vec<i32>,
    pub(crate) chrom_trace: Vec<i32>,
    pub(crate) cell_offsets: Vec<u64>,
    pub(crate) cell_codes: Vec<i32>,
    pub(crate) row_groups: Vec<u64>,
    pub(crate) partition_offsets: Vec<u64>,
    pub(crate) partition_groups: Vec<u64>,
    pub(crate) partition_chrom: Vec<i32>,
    pub(crate) cell_partition: Vec<i32>,
    pub(crate) coords: Option<CoordsIndex>,
}

pub(crate) struct ArrayReader {
    store: Arc<Store>,
    zs: Arc<ZarrsStorage>,
}

impl ArrayReader {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        ArrayReader {
            zs: Arc::new(ZarrsStorage(store.clone())),
            store,
        }
    }

    /// Checks `<path>/zarr.json` describes a 1-D array of `dtype`; returns its length.
    pub(crate) fn shape_1d(&self, path: &str, dtype: &str) -> Result<u64> {
        let ctx = format!("{}/{path}/zarr.json", self.store.display);
        let meta = self.store.read_json(&format!("{path}/zarr.json"))?;
        let o = meta
            .as_object()
            .ok_or_else(|| Error::format(format!("{ctx}: expected a JSON object")))?;
        if o.get("zarr_format").and_then(Value::as_u64) != Some(3)
            || o.get("node_type").and_then(Value::as_str) != Some("array")
        {
            return Err(Error::format(format!("{ctx}: not a Zarr v3 array")));
        }
        let dt = o.get("data_type").and_then(Value::as_str).unwrap_or("?");
        if dt != dtype {
            return Err(Error::format(format!(
                "{ctx}: data_type \"{dt}\", expected \"{dtype}\" (spec §11)"
            )));
        }
        let shape: Vec<u64> = o
            .get("shape")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let n_dims = o.get("shape").and_then(Value::as_array).map_or(0, Vec::len);
        if shape.len() != 1 || n_dims != 1 {
            return Err(Error::format(format!(
                "{ctx}: shape must be 1-D, got {}",
                o.get("shape").unwrap_or(&Value::Null)
            )));
        }
        Ok(shape[0])
    }

    fn read<T: zarrs::array::ElementOwned + Send>(
        &self,
        path: &str,
        dtype: &str,
    ) -> Result<Vec<T>> {
        let n = self.shape_1d(path, dtype)?;
        let ctx = format!("{}/{path}", self.store.display);
        let zerr = |e: &dyn std::fmt::Display| match self.store.exists(&format!("{path}/zarr.json"))
        {
            true => Error::format(format!("{ctx}: {e}")),
            false => Error::new(ErrorKind::NotFound, format!("{ctx}: {e}")),
        };
        let array = Array::open(self.zs.clone(), &format!("/{path}")).map_err(|e| zerr(&e))?;
        // zarrs may fan out over chunks with rayon: keep that off the global pool.
        let pool = crate::pool::pool(2)?;
        let v: Vec<T> = pool
            .install(|| array.retrieve_array_subset::<Vec<T>>(&array.subset_all()))
            .map_err(|e| zerr(&e))?;
        if v.len() as u64 != n {
            return Err(Error::format(format!(
                "{ctx}: decoded {} elements, shape says {n}",
                v.len()
            )));
        }
        Ok(v)
    }

    pub(crate) fn read_i64(&self, path: &str) -> Result<Vec<i64>> {
        self.read::<i64>(path, "int64")
    }
    pub(crate) fn read_i32(&self, path: &str) -> Result<Vec<i32>> {
        self.read::<i32>(path, "int32")
    }

    /// An offsets array: starts at 0, strictly increasing, ends at `total`.
    fn offsets(&self, path: &str, total: u64, what: &str) -> Result<Vec<u64>> {
        let v = self.read_i64(path)?;
        check_offsets(&v, total, &format!("{}/{path}", self.store.display), what)
    }
}

pub(crate) fn check_offsets(v: &[i64], total: u64, ctx: &str, what: &str) -> Result<Vec<u64>> {
    if v.first() != Some(&0) {
        return Err(Error::format(format!("{ctx}: must start at 0")));
    }
    if v.windows(2).any(|w| w[1] <= w[0]) {
        return Err(Error::format(format!(
            "{ctx}: offsets must be strictly increasing"
        )));
    }
    let last = *v.last().expect("non-empty") as u64;
    if last != total {
        return Err(Error::format(format!(
            "{ctx}: ends at {last}, but {what} is {total}"
        )));
    }
    Ok(v.iter().map(|&x| x as u64).collect())
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

/// Reads and validates every index array except `source_row`'s content (§14).
pub(crate) fn load(r: &ArrayReader, root: &Root) -> Result<Index> {
    let d = r.store.display.clone();
    let layout = root.layout;
    let root = root.uchrom();
    let n_runs = root.n_runs;
    let trace_offsets = r.offsets("index/trace_offsets", root.n_spots, "n_spots")?;
    check_len(
        &format!("{d}/index/trace_offsets"),
        trace_offsets.len() - 1,
        n_runs,
        "n_runs + 1 elements minus one",
    )?;
    let trace_codes = r.read_i32("index/trace_codes")?;
    let trace_cells = r.read_i32("index/trace_cells")?;
    let chrom_trace = r.read_i32("index/chrom_trace")?;
    check_len(
        &format!("{d}/index/trace_codes"),
        trace_codes.len(),
        n_runs,
        "n_runs",
    )?;
    check_len(
        &format!("{d}/index/trace_cells"),
        trace_cells.len(),
        n_runs,
        "n_runs",
    )?;
    check_len(
        &format!("{d}/index/chrom_trace"),
        chrom_trace.len(),
        n_runs,
        "n_runs",
    )?;
    check_codes(
        &format!("{d}/index/trace_codes"),
        &trace_codes,
        0,
        root.n_traces,
    )?;
    if root.has_cell_id {
        check_codes(
            &format!("{d}/index/trace_cells"),
            &trace_cells,
            0,
            root.n_cells,
        )?;
    } else if let Some(i) = trace_cells.iter().position(|&c| c != -1) {
        return Err(Error::format(format!(
            "{d}/index/trace_cells[{i}]: must be -1 without cell_id"
        )));
    }
    let chrom_lo = if layout == Layout::Flat { -1 } else { 0 };
    check_codes(
        &format!("{d}/index/chrom_trace"),
        &chrom_trace,
        chrom_lo,
        root.n_chroms,
    )?;

    let (cell_offsets, cell_codes) = if root.has_cell_id {
        let co = r.offsets("index/cell_offsets", root.n_spots, "n_spots")?;
        let cc = r.read_i32("index/cell_codes")?;
        check_len(
            &format!("{d}/index/cell_codes"),
            cc.len(),
            co.len() as u64 - 1,
            "len(cell_offsets) - 1",
        )?;
        check_codes(&format!("{d}/index/cell_codes"), &cc, 0, root.n_cells)?;
        (co, cc)
    } else {
        let co = r.read_i64("index/cell_offsets")?;
        let cc = r.read_i32("index/cell_codes")?;
        if co != [0] || !cc.is_empty() {
            return Err(Error::format(format!(
                "{d}/index/cell_offsets: must be [0] (and cell_codes empty) without cell_id"
            )));
        }
        (vec![0], cc)
    };
    // Runs and cell segments nest: every segment boundary is a run boundary.
    for &b in &cell_offsets {
        if trace_offsets.binary_search(&b).is_err() {
            return Err(Error::format(format!(
                "{d}/index/cell_offsets: segment boundary {b} is not a run boundary"
            )));
        }
    }
    let row_groups = r.offsets("index/row_groups", root.n_spots, "n_spots")?;
    check_len(
        &format!("{d}/index/row_groups"),
        row_groups.len() - 1,
        root.n_row_groups,
        "n_row_groups",
    )?;

    let mut ix = Index {
        trace_offsets,
        trace_codes,
        trace_cells,
        chrom_trace,
        cell_offsets,
        cell_codes,
        row_groups,
        ..Index::default()
    };
    if root.has_source_row {
        let n = r.shape_1d("index/source_row", "int64")?;
        if n != root.n_spots {
            return Err(Error::format(format!(
                "{d}/index/source_row: length {n}, expected n_spots = {}",
                root.n_spots
            )));
        }
    } else if r.store.exists("index/source_row/zarr.json") {
        return Err(Error::format(format!(
            "{d}/index/source_row exists but has_source_row is false"
        )));
    }

    match layout {
        Layout::Flat => {}
        Layout::Partitioned => {
            let po = r.offsets("index/partition_offsets", root.n_spots, "n_spots")?;
            let pg = r.offsets("index/partition_groups", root.n_row_groups, "n_row_groups")?;
            let pc = r.read_i32("index/partition_chrom")?;
            let cp = r.read_i32("index/cell_partition")?;
            let n_part = po.len() as u64 - 1;
            check_len(
                &format!("{d}/index/partition_groups"),
                pg.len(),
                n_part + 1,
                "n_part + 1",
            )?;
            check_len(
                &format!("{d}/index/partition_chrom"),
                pc.len(),
                n_part,
                "n_part",
            )?;
            check_len(
                &format!("{d}/index/cell_partition"),
                cp.len(),
                ix.cell_codes.len() as u64,
                "n_seg",
            )?;
            check_codes(&format!("{d}/index/partition_chrom"), &pc, 0, root.n_chroms)?;
            check_codes(&format!("{d}/index/cell_partition"), &cp, 0, n_part)?;
            for (p, w) in pg.windows(2).enumerate() {
                if ix.row_groups[w[0] as usize] != po[p]
                    || ix.row_groups[w[1] as usize] != po[p + 1]
                {
                    return Err(Error::format(format!(
                        "{d}/index/partition_groups: partition {p} groups do not start/end at its rows"
                    )));
                }
            }
            // Each run lies in one partition with that partition's chromosome.
            for r_ in 0..ix.trace_codes.len() {
                let start = ix.trace_offsets[r_];
                let p = po.partition_point(|&o| o <= start) - 1;
                if ix.trace_offsets[r_ + 1] > po[p + 1] || ix.chrom_trace[r_] != pc[p] {
                    return Err(Error::format(format!(
                        "{d}/index: run {r_} crosses partitions or its chrom_trace differs from partition_chrom"
                    )));
                }
            }
            ix.partition_offsets = po;
            ix.partition_groups = pg;
            ix.partition_chrom = pc;
            ix.cell_partition = cp;
        }
        Layout::PrimaryCoords => {
            let po = r.offsets("index/coords/partition_offsets", root.n_spots, "n_spots")?;
            let rg = r.offsets("index/coords/row_groups", root.n_spots, "n_spots")?;
            check_len(
                &format!("{d}/index/coords/row_groups"),
                rg.len() - 1,
                root.n_coord_row_groups.unwrap_or_default(),
                "n_coord_row_groups",
            )?;
            let n_cg = rg.len() as u64 - 1;
            let pg = r.offsets("index/coords/partition_groups", n_cg, "n_coord_row_groups")?;
            let pc = r.read_i32("index/coords/partition_chrom")?;
            let n_part = po.len() as u64 - 1;
            check_len(
                &format!("{d}/index/coords/partition_groups"),
                pg.len(),
                n_part + 1,
                "n_part + 1",
            )?;
            check_len(
                &format!("{d}/index/coords/partition_chrom"),
                pc.len(),
                n_part,
                "n_part",
            )?;
            check_codes(
                &format!("{d}/index/coords/partition_chrom"),
                &pc,
                0,
                root.n_chroms,
            )?;
            for (p, w) in pg.windows(2).enumerate() {
                if rg[w[0] as usize] != po[p] || rg[w[1] as usize] != po[p + 1] {
                    return Err(Error::format(format!(
                        "{d}/index/coords/partition_groups: partition {p} groups do not start/end at its rows"
                    )));
                }
            }
            let ro = r.offsets("index/coords/run_offsets", root.n_spots, "n_spots")?;
            check_len(
                &format!("{d}/index/coords/run_offsets"),
                ro.len() - 1,
                n_runs,
                "n_runs",
            )?;
            let pr = r.read_i64("index/coords/primary_run")?;
            check_len(
                &format!("{d}/index/coords/primary_run"),
                pr.len(),
                n_runs,
                "n_runs",
            )?;
            let mut inv = vec![u64::MAX; pr.len()];
            for (k, &p) in pr.iter().enumerate() {
                if p < 0 || p as u64 >= n_runs || inv[p as usize] != u64::MAX {
                    return Err(Error::format(format!(
                        "{d}/index/coords/primary_run: not a permutation of 0..n_runs (element {k} = {p})"
                    )));
                }
                inv[p as usize] = k as u64;
            }
            for (k, &p) in pr.iter().enumerate() {
                let p = p as usize;
                let cl = ro[k + 1] - ro[k];
                let pl = ix.trace_offsets[p + 1] - ix.trace_offsets[p];
                let part = po.partition_point(|&o| o <= ro[k]) - 1;
                if cl != pl || ro[k + 1] > po[part + 1] || pc[part] != ix.chrom_trace[p] {
                    return Err(Error::format(format!(
                        "{d}/index/coords: coords run {k} does not match primary run {p} (length or chromosome)"
                    )));
                }
            }
            ix.coords = Some(CoordsIndex {
                partition_offsets: po,
                partition_groups: pg,
                partition_chrom: pc,
                row_groups: rg,
                run_offsets: ro,
                inv,
            });
        }
    }
    Ok(ix)
}
