//! The `index/` arrays (§11) as 1-D Zarr v3 arrays (bytes + zstd codecs, chunks of
//! 2^20 elements): runs, cell segments, row groups, the partitions of 2.1, the coords side
//! of 2.2, and `source_row` (written per partition during the merge, kept only when the
//! stored order differs from the input order).

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::UInt64Array;

use super::row_groups::{offsets, Plan};
use crate::chromdata::spec::Layout;
use crate::error::{Error, ErrorKind, Result};

/// Elements per chunk of 1-D index arrays (§6.1).
const INDEX_CHUNK: u64 = 1_048_576;

pub(crate) fn zarr_store(root: &Path) -> Result<Arc<zarrs::filesystem::FilesystemStore>> {
    zarrs::filesystem::FilesystemStore::new(root)
        .map(Arc::new)
        .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", root.display())))
}

/// An error writing the array at `path` of `store`, naming the array's directory.
fn zarr_err(
    store: &zarrs::filesystem::FilesystemStore,
    path: &str,
    e: impl std::fmt::Display,
) -> Error {
    let dir = store
        .prefix_to_fs_path(&zarrs::storage::StorePrefix::root())
        .join(path);
    Error::new(
        ErrorKind::Io,
        format!("{}: writing the zarr array: {e}", dir.display()),
    )
}

/// A 1-D array (§6.1) written chunk by chunk.
struct ZarrArray1 {
    array: zarrs::array::Array<zarrs::filesystem::FilesystemStore>,
    store: Arc<zarrs::filesystem::FilesystemStore>,
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
            .map_err(|e| zarr_err(store, path, e))?;
        array
            .store_metadata()
            .map_err(|e| zarr_err(store, path, e))?;
        Ok(ZarrArray1 {
            array,
            store: store.clone(),
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
            .map_err(|e| zarr_err(&self.store, &self.path, e))
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

/// Input row of each stored row, written per partition to raw files during the merge.
pub(crate) struct SourceRows {
    files: Vec<(PathBuf, BufWriter<File>)>,
    counts: Vec<u64>,
    starts: Vec<u64>,
    identity: bool,
}

impl SourceRows {
    pub(crate) fn new(dir: &Path, starts: Vec<u64>) -> Result<Self> {
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

    pub(crate) fn push(&mut self, p: usize, rows: &UInt64Array) -> Result<()> {
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
    /// Its chunks are read back and compressed on `threads` threads (one chunk each).
    pub(crate) fn finish(
        self,
        store: &Arc<zarrs::filesystem::FilesystemStore>,
        n: u64,
        threads: usize,
    ) -> Result<bool> {
        let mut files = Vec::new();
        for ((path, mut f), &count) in self.files.into_iter().zip(&self.counts) {
            f.flush().map_err(|e| Error::io(&path, &e))?;
            files.push((path, count));
        }
        if self.identity {
            return Ok(false);
        }
        let a = ZarrArray1::create(store, "index/source_row", n, true)?;
        let c = a.chunk_len() as u64;
        let total: u64 = files.iter().map(|f| f.1).sum();
        let store_chunk = |i: u64| -> Result<()> {
            let mut buf = read_rows(&files, i * c, ((i + 1) * c).min(total))?;
            buf.resize(c as usize, 0);
            a.store_chunk(i, &buf)
        };
        let chunks = total.div_ceil(c);
        if threads > 1 && chunks > 1 {
            let pool = crate::pool::pool(threads)?;
            pool.install(|| {
                use rayon::prelude::*;
                (0..chunks as usize)
                    .into_par_iter()
                    .with_max_len(1)
                    .try_for_each(|i| store_chunk(i as u64))
            })?;
        } else {
            (0..chunks).try_for_each(store_chunk)?;
        }
        Ok(true)
    }
}

/// Rows `lo .. hi` of the concatenation of `files` ((raw little-endian values, count)).
fn read_rows(files: &[(PathBuf, u64)], lo: u64, hi: u64) -> Result<Vec<i64>> {
    let mut out: Vec<i64> = Vec::with_capacity((hi - lo) as usize);
    let mut bytes = vec![0u8; 8 << 16];
    let mut start = 0u64;
    for (p, count) in files {
        let (a, b) = (lo.max(start), hi.min(start + count));
        start += count;
        if a >= b {
            continue;
        }
        let mut f = File::open(p).map_err(|e| Error::io(p, &e))?;
        f.seek(SeekFrom::Start((a - (start - count)) * 8))
            .map_err(|e| Error::io(p, &e))?;
        let mut left = ((b - a) * 8) as usize;
        while left > 0 {
            let k = left.min(bytes.len());
            f.read_exact(&mut bytes[..k])
                .map_err(|e| Error::io(p, &e))?;
            out.extend(
                bytes[..k]
                    .chunks_exact(8)
                    .map(|v| i64::from_le_bytes(v.try_into().unwrap_or_default())),
            );
            left -= k;
        }
    }
    Ok(out)
}

/// Writes the index arrays of `plan` (all but `source_row`); returns the number of coords
/// row groups (2.2).
pub(crate) fn write_index(
    zs: &Arc<zarrs::filesystem::FilesystemStore>,
    layout: Layout,
    plan: &Plan,
) -> Result<usize> {
    let runs_of = &plan.runs;
    zarr_i64(
        zs,
        "index/trace_offsets",
        &offsets(runs_of.iter().map(|r| r.len)),
    )?;
    zarr_i32(
        zs,
        "index/trace_codes",
        &runs_of.iter().map(|r| r.trace).collect::<Vec<_>>(),
    )?;
    zarr_i32(
        zs,
        "index/trace_cells",
        &runs_of.iter().map(|r| r.cell).collect::<Vec<_>>(),
    )?;
    zarr_i32(
        zs,
        "index/chrom_trace",
        &runs_of.iter().map(|r| r.chrom).collect::<Vec<_>>(),
    )?;
    zarr_i64(zs, "index/cell_offsets", &plan.cell_offsets)?;
    zarr_i32(zs, "index/cell_codes", &plan.cell_codes)?;
    zarr_i64(
        zs,
        "index/row_groups",
        &offsets(plan.groups.iter().copied()),
    )?;
    let mut n_coord_groups = 0;
    if layout == Layout::Partitioned {
        zarr_i64(
            zs,
            "index/partition_offsets",
            &offsets(plan.partitions.iter().map(|p| p.rows)),
        )?;
        zarr_i64(
            zs,
            "index/partition_groups",
            &offsets(plan.partitions.iter().map(|p| p.groups.len() as u64)),
        )?;
        zarr_i32(
            zs,
            "index/partition_chrom",
            &plan.partitions.iter().map(|p| p.chrom).collect::<Vec<_>>(),
        )?;
        zarr_i32(zs, "index/cell_partition", &plan.cell_partition)?;
    }
    if layout == Layout::PrimaryCoords {
        let cp = &plan.coords_parts;
        zarr_i64(
            zs,
            "index/coords/partition_offsets",
            &offsets(cp.iter().map(|p| p.rows)),
        )?;
        zarr_i64(
            zs,
            "index/coords/partition_groups",
            &offsets(cp.iter().map(|p| p.groups.len() as u64)),
        )?;
        zarr_i32(
            zs,
            "index/coords/partition_chrom",
            &cp.iter().map(|p| p.chrom).collect::<Vec<_>>(),
        )?;
        let groups: Vec<u64> = cp.iter().flat_map(|p| p.groups.iter().copied()).collect();
        n_coord_groups = groups.len();
        zarr_i64(zs, "index/coords/row_groups", &offsets(groups.into_iter()))?;
        zarr_i64(
            zs,
            "index/coords/run_offsets",
            &offsets(plan.coords_runs.iter().map(|r| r.len)),
        )?;
        zarr_i64(zs, "index/coords/primary_run", &plan.primary_run)?;
    }
    Ok(n_coord_groups)
}
