//! The run structure and row groups (§7) from the spot counts per (cell, trace,
//! chromosome): runs of each layout, §7.3 packing into row groups, partitions, cell
//! segments, and the 2.2 coords side.

use std::collections::HashMap;

use crate::chromdata::spec::Layout;

#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) cell: i32,
    pub(crate) trace: i32,
    /// -1: several chromosomes (flat only).
    pub(crate) chrom: i32,
    pub(crate) len: u64,
}

/// §7.3 packing. `units`: each unit's run lengths.
pub(crate) fn pack(units: &[Vec<u64>], t: u64) -> Vec<u64> {
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

pub(crate) fn offsets(lens: impl Iterator<Item = u64>) -> Vec<i64> {
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
pub(crate) struct Partition {
    pub(crate) chrom: i32,
    pub(crate) rows: u64,
    pub(crate) groups: Vec<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Stored runs (primary side for 2.2).
    pub(crate) runs: Vec<Run>,
    pub(crate) cell_offsets: Vec<i64>,
    pub(crate) cell_codes: Vec<i32>,
    /// Row groups of the main file set (flat / primary); partitioned: per partition.
    pub(crate) groups: Vec<u64>,
    pub(crate) partitions: Vec<Partition>,
    pub(crate) cell_partition: Vec<i32>,
    /// 2.2 coords side.
    pub(crate) coords_runs: Vec<Run>,
    pub(crate) coords_parts: Vec<Partition>,
    pub(crate) primary_run: Vec<i64>,
}

pub(crate) fn plan(
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
