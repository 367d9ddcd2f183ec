//! Whole-dataset verification for `deltacells verify`: every tile is read, its CRC checked
//! and decoded with every check of the format, its header compared with the manifest, and
//! its rows checked to be canonical (genes strictly increasing, no stored zero); the tiles
//! directory must hold exactly the tiles the manifest lists; the optional files the manifest
//! announces must exist and be valid. Problems are collected (one line each), not stopped at.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dataset::{paths, Dataset};
use crate::error::{Error, Result};
use crate::pool;
use crate::progress::{self, Observer, Progress, Stage, Unit};
use crate::tile::ValuesOut;

/// The outcome of `verify_dataset`.
#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    /// One line per problem; empty means the dataset is valid.
    pub problems: Vec<String>,
    /// Notes about parts this build cannot check (not problems).
    pub notes: Vec<String>,
    pub n_tiles: u64,
    pub tiles_ok: u64,
    pub n_cells: u64,
    pub nnz: u64,
}

/// Checks one decoded tile's rows; returns the first problem.
fn check_rows(indptr: &[i64], indices: &[i32], values: &[i32]) -> Option<String> {
    for r in 0..indptr.len() - 1 {
        let (a, b) = (indptr[r] as usize, indptr[r + 1] as usize);
        if let Some(k) = indices[a..b].windows(2).position(|w| w[1] <= w[0]) {
            return Some(format!(
                "cell {r}: gene {} follows gene {} (genes must strictly increase)",
                indices[a + k + 1],
                indices[a + k]
            ));
        }
        if let Some(k) = values[a..b].iter().position(|&v| v <= 0) {
            return Some(format!(
                "cell {r}: stored count {} (counts are >= 1; zeros are never stored)",
                values[a + k]
            ));
        }
    }
    None
}

/// Decodes and checks every tile on `threads` threads, adding to `rep`; false if the
/// observer cancelled before the first tile.
fn check_tiles(
    ds: &Dataset,
    threads: usize,
    observer: &dyn Observer,
    rep: &mut VerifyReport,
) -> bool {
    let n_tiles = rep.n_tiles;
    let tiles: Vec<u64> = (0..n_tiles).collect();
    let checked = AtomicU64::new(0);
    let tick = |done| {
        progress::report(
            observer,
            Progress {
                stage: Stage::Verify,
                unit: Unit::Tiles,
                done,
                total: Some(n_tiles),
            },
        )
    };
    if let Err(e) = tick(0) {
        rep.problems.push(e.message);
        return false;
    }
    let results = pool::map(pool::resolve_threads(threads), tiles, |t| {
        let (_, cells, nnz) = ds.tile_bounds(t)?;
        let mut indptr = vec![0i64; cells as usize + 1];
        let mut indices = vec![0i32; nnz as usize];
        let mut values = vec![0i32; nnz as usize];
        let r = ds
            .read_tile(t, &mut indptr, &mut indices, ValuesOut::I32(&mut values))
            .map_err(|e| e.message)
            .and_then(|_| match check_rows(&indptr, &indices, &values) {
                None => Ok(()),
                Some(p) => Err(format!("tile {t}: {p}")),
            });
        tick(checked.fetch_add(1, Ordering::Relaxed) + 1)?;
        Ok((t, cells, nnz, r))
    });
    match results {
        Ok(v) => {
            for (_, cells, nnz, r) in v {
                match r {
                    Ok(()) => {
                        rep.tiles_ok += 1;
                        rep.n_cells += cells;
                        rep.nnz += nnz;
                    }
                    Err(m) => rep.problems.push(m),
                }
            }
        }
        Err(e) => rep.problems.push(e.message),
    }
    true
}

/// Verifies the dataset at `root` with `threads` threads (0 = default). `observer` hears of
/// the tiles checked ([`Stage::Verify`], in tiles, from the pool's threads); a cancel is
/// reported as a problem and stops the tile checks.
pub fn verify_dataset(root: &Path, threads: usize, observer: &dyn Observer) -> VerifyReport {
    let mut rep = VerifyReport::default();
    let ds = match Dataset::open(root) {
        Ok(d) => d,
        Err(e) => {
            rep.problems.push(e.message);
            return rep;
        }
    };
    ds.set_cache_bytes(0);
    ds.set_threads(1);
    let info = ds.info();
    rep.n_tiles = info.n_tiles;
    if !check_tiles(&ds, threads, observer, &mut rep) {
        return rep;
    }
    // The tiles directory holds exactly the listed tiles.
    let tiles_dir = root.join(paths::TILES_DIR);
    match std::fs::read_dir(&tiles_dir) {
        Ok(rd) => {
            let mut extra: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    let listed = n
                        .strip_prefix("tile_")
                        .and_then(|r| r.strip_suffix(".dct"))
                        .filter(|d| d.len() >= 6 && d.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|d| d.parse::<u64>().ok())
                        .is_some_and(|t| {
                            t < info.n_tiles && paths::tile_relpath(t).ends_with(n.as_str())
                        });
                    !listed
                })
                .collect();
            extra.sort();
            for n in extra {
                rep.problems.push(format!(
                    "{}: '{n}' is not one of the {} tiles the manifest lists",
                    tiles_dir.display(),
                    info.n_tiles
                ));
            }
        }
        Err(e) => rep.problems.push(format!("{}: {e}", tiles_dir.display())),
    }
    if info.has_gene_order {
        if let Err(e) = ds.gene_order() {
            rep.problems.push(e.message);
        }
    }
    if info.has_var_names {
        if let Err(e) = ds.var_names() {
            rep.problems.push(e.message);
        }
    }
    // Optional files the manifest does not announce must not be there either (a reader
    // would ignore them, which hides a broken write).
    for (flag, rel) in [
        (info.has_gene_order, paths::GENE_ORDER),
        (info.has_var_names, paths::VAR_NAMES),
        (info.has_var_table, paths::VAR_TABLE),
        (info.has_obs, paths::OBS_DIR),
    ] {
        let p = root.join(rel);
        let present = std::fs::symlink_metadata(&p).is_ok();
        if flag && !present {
            rep.problems.push(format!(
                "{}: missing, though the manifest says it exists",
                p.display()
            ));
        } else if !flag && present {
            rep.problems.push(format!(
                "{}: present, though the manifest says the dataset has none",
                p.display()
            ));
        }
    }
    let m = ds.manifest();
    if info.has_obs {
        if let Some(sizes) = &m.obs_shard_bytes {
            for (s, &want) in sizes.iter().enumerate() {
                let p = root
                    .join(paths::OBS_DIR)
                    .join(format!("obs_{s:04}.parquet"));
                match std::fs::metadata(&p) {
                    Ok(md) if md.len() == want => {}
                    Ok(md) => rep.problems.push(format!(
                        "{}: {} bytes, the manifest's obs_shard_bytes[{s}] is {want}",
                        p.display(),
                        md.len()
                    )),
                    Err(e) => rep.problems.push(format!("{}: {e}", p.display())),
                }
            }
        }
        // SHA-256 of every shard and the fingerprint, then the structure (schema, one row
        // group per tile with the tile's cells) by reading every column.
        match ds.verify_obs() {
            Ok(()) => match ds.obs(None) {
                Ok(batches) => {
                    for (t, b) in batches.enumerate() {
                        if let Err(e) = b {
                            rep.problems.push(format!("obs, tile {t}: {e}"));
                            break;
                        }
                    }
                }
                Err(e) => rep.problems.push(format!("obs: {e}")),
            },
            Err(e) => rep.problems.push(format!("obs: {e}")),
        }
    }
    if info.has_var_table {
        if let Err(e) = ds.var_table().and_then(|r| {
            r.collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::format(format!("var.parquet: {e}")))
        }) {
            rep.problems.push(format!("var.parquet: {e}"));
        }
    }
    rep
}

/// Gathers every cell of `ds` (in batches of a tile, so through the reader's gather path)
/// and compares it with `source`, undoing the recorded gene order. Errors name the first
/// differing cell. Returns the nonzeros compared. `observer` hears of the cells compared
/// ([`Stage::Compare`]); it may cancel.
pub fn compare_with_source(
    ds: &Dataset,
    source: &mut dyn super::CellSource,
    observer: &dyn Observer,
) -> Result<u64> {
    let info = ds.info();
    if (info.n_cells, info.n_genes) != (source.n_cells(), source.n_genes()) {
        return Err(Error::format(format!(
            "the dataset is {} cells x {} genes, the input {} x {}",
            info.n_cells,
            info.n_genes,
            source.n_cells(),
            source.n_genes()
        )));
    }
    let order = if info.has_gene_order {
        Some(ds.gene_order()?.to_vec())
    } else {
        None
    };
    let step = info.tile_size.max(1);
    let mut row: Vec<(i32, i32)> = Vec::new();
    let mut total = 0u64;
    let mut lo = 0;
    let tick = |done| {
        progress::report(
            observer,
            Progress {
                stage: Stage::Compare,
                unit: Unit::Cells,
                done,
                total: Some(info.n_cells),
            },
        )
    };
    tick(0)?;
    while lo < info.n_cells {
        let hi = (lo + step).min(info.n_cells);
        let cells: Vec<u64> = (lo..hi).collect();
        let plan = ds.plan_gather(&cells)?;
        let n = plan.nnz() as usize;
        let (mut ip, mut ix, mut v) = (vec![0i64; cells.len() + 1], vec![0i32; n], vec![0i32; n]);
        ds.gather_planned(&plan, &mut ip, &mut ix, ValuesOut::I32(&mut v))?;
        let want = source.read_cells(lo, hi)?;
        for c in 0..cells.len() {
            row.clear();
            row.extend(
                (ip[c] as usize..ip[c + 1] as usize)
                    .map(|k| (order.as_ref().map_or(ix[k], |o| o[ix[k] as usize]), v[k])),
            );
            row.sort_unstable();
            let (a, b) = (want.indptr[c] as usize, want.indptr[c + 1] as usize);
            let mut src: Vec<(i32, i32)> = (a..b)
                .map(|k| (want.indices[k], want.values[k]))
                .filter(|e| e.1 != 0)
                .collect();
            src.sort_unstable();
            if row != src {
                return Err(Error::format(format!(
                    "cell {}: the dataset has {} nonzeros, the input {}{}",
                    lo + c as u64,
                    row.len(),
                    src.len(),
                    if row.len() == src.len() {
                        " (same count, different genes or values)"
                    } else {
                        ""
                    }
                )));
            }
            total += row.len() as u64;
        }
        lo = hi;
        tick(lo)?;
    }
    Ok(total)
}
