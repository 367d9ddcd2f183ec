//! Exception frames: the rare counts and gaps that do not fit a uint16. A frame holds k
//! uint32 positions (strictly increasing, < the chunk's nonzeros) then k uint32 payloads.

use zstd::zstd_safe::DCtx;

use crate::error::{Error, Result};

use super::header::{read_u32, ChunkEntry, StreamRef, ESCAPE, MAX_COUNT};
use super::inspect::{StreamKind, Tile};
use super::values::ValuesOut;

/// A decoded, position-checked exception frame.
pub struct Exceptions<'a> {
    bytes: &'a [u8],
    pub k: usize,
}

impl<'a> Exceptions<'a> {
    /// A view of `k` exceptions in `bytes` (k positions, then k payloads).
    pub fn new(bytes: &'a [u8], k: usize) -> Exceptions<'a> {
        assert!(bytes.len() >= 8 * k);
        Exceptions { bytes, k }
    }
    /// The first exception whose position is `>= p` (positions are increasing), or `k`.
    pub fn first_at_or_after(&self, p: usize) -> usize {
        let (mut lo, mut hi) = (0, self.k);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.position(mid) < p {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
    #[inline]
    pub fn position(&self, i: usize) -> usize {
        read_u32(self.bytes, 4 * i) as usize
    }
    #[inline]
    pub fn payload(&self, i: usize) -> u32 {
        read_u32(self.bytes, 4 * (self.k + i))
    }
}

/// Decompresses the chunk's `kind` exception frame and checks its positions.
pub fn read_exceptions<'b>(
    dctx: &mut DCtx<'static>,
    tile: &Tile<'_>,
    c: usize,
    kind: StreamKind,
    e: &ChunkEntry,
    buf: &'b mut Vec<u8>,
) -> Result<Exceptions<'b>> {
    let s = match kind {
        StreamKind::Vexc => e.vexc,
        _ => e.gexc,
    };
    let fail = |rule: String| {
        Error::format(format!(
            "chunk {c}: {} frame at byte {}: {rule}",
            kind.name(),
            s.off
        ))
    };
    // `Tile::parse` checked the declared size: a multiple of 8, at most 8 * nnz.
    let expected = zstd::zstd_safe::get_frame_content_size(tile.bytes(s))
        .ok()
        .flatten()
        .unwrap_or(0) as usize;
    buf.clear();
    buf.reserve(expected);
    match dctx.decompress(buf, tile.bytes(s)) {
        Ok(got) if got == expected => {}
        Ok(got) => {
            return Err(fail(format!(
                "decompressed to {got} bytes, expected {expected}"
            )))
        }
        Err(code) => {
            return Err(fail(format!(
                "zstd: {}",
                zstd::zstd_safe::get_error_name(code)
            )))
        }
    }
    let exc = Exceptions::new(&buf[..], expected / 8);
    check_positions(c, kind, s, &exc, e.nnz() as usize)?;
    Ok(exc)
}

/// Exception positions must strictly increase and stay below the chunk's `n` nonzeros.
pub fn check_positions(
    c: usize,
    kind: StreamKind,
    s: StreamRef,
    exc: &Exceptions<'_>,
    n: usize,
) -> Result<()> {
    let fail = |rule: String| {
        Error::format(format!(
            "chunk {c}: {} frame at byte {}: {rule}",
            kind.name(),
            s.off
        ))
    };
    let mut prev: Option<usize> = None;
    for i in 0..exc.k {
        let p = exc.position(i);
        if p >= n {
            return Err(fail(format!(
                "exception {i}: position {p} is not below the chunk's {n} nonzeros"
            )));
        }
        if prev.is_some_and(|q| p <= q) {
            return Err(fail(format!(
                "exception {i}: position {p} does not follow {} (positions strictly increase)",
                prev.unwrap()
            )));
        }
        prev = Some(p);
    }
    Ok(())
}

/// What is wrong with a value exception's payload (the true count), if anything.
pub fn value_payload_rule(v: u32) -> Option<String> {
    (!(ESCAPE as u32 + 1..=MAX_COUNT).contains(&v))
        .then(|| format!("count {v} is not in 65536 ..= 2^31-1"))
}

/// What is wrong with a gap exception's payload (true gap - 65535), if anything.
pub fn gap_payload_rule(extra: u32, n_genes: u64) -> Option<String> {
    (extra == 0 || extra as u64 >= n_genes).then(|| {
        format!(
            "gap excess {extra} is not in 1 ..= n_genes - 1 = {}",
            n_genes - 1
        )
    })
}

/// Replaces the stored 65535 at each position by the true count (65536 ..= 2^31 - 1).
pub fn apply_value_exceptions(
    c: usize,
    e: &ChunkEntry,
    exc: &Exceptions<'_>,
    values: &mut ValuesOut<'_>,
) -> Result<()> {
    for i in 0..exc.k {
        let (p, v) = (exc.position(i), exc.payload(i));
        let fail = |rule: &str| {
            Error::format(format!(
                "chunk {c}: vexc frame at byte {}: exception {i} (position {p}): {rule}",
                e.vexc.off
            ))
        };
        if let Some(rule) = value_payload_rule(v) {
            return Err(fail(&rule));
        }
        let stored_escape = match values {
            ValuesOut::I32(out) => out[p] == ESCAPE as i32,
            ValuesOut::F32(out) => out[p] == ESCAPE as f32,
        };
        if !stored_escape {
            return Err(fail("the stored count there is not 65535"));
        }
        match values {
            ValuesOut::I32(out) => out[p] = v as i32,
            ValuesOut::F32(out) => out[p] = v as f32,
        }
    }
    Ok(())
}

/// Adds each payload (true gap - 65535) to the gene index at its position and to every later
/// index of the same cell, checking that no index reaches `n_genes`.
#[allow(clippy::too_many_arguments)]
pub fn apply_gap_exceptions(
    c: usize,
    e: &ChunkEntry,
    indptr: &[i64],
    gaps_lo: &[u8],
    gaps_hi: &[u8],
    exc: &Exceptions<'_>,
    indices: &mut [i32],
    n_genes: u64,
) -> Result<()> {
    let base = e.nnz_lo as i64;
    let mut cell = e.cell_lo as usize;
    for i in 0..exc.k {
        let (p, extra) = (exc.position(i), exc.payload(i));
        let fail = |rule: String| {
            Error::format(format!(
                "chunk {c}: gexc frame at byte {}: exception {i} (position {p}): {rule}",
                e.gexc.off
            ))
        };
        if let Some(rule) = gap_payload_rule(extra, n_genes) {
            return Err(fail(rule));
        }
        if gaps_lo[p] != 0xff || gaps_hi[p] != 0xff {
            return Err(fail("the stored gap there is not 65535".into()));
        }
        // Positions increase, so the owning cell is found by walking forward.
        while (indptr[cell + 1] - base) as usize <= p {
            cell += 1;
        }
        let end = (indptr[cell + 1] - base) as usize;
        let last = indices[end - 1] as u64 + extra as u64;
        if last >= n_genes {
            return Err(fail(format!(
                "cell {cell}: gene index {last} >= n_genes {n_genes}"
            )));
        }
        for idx in &mut indices[p..end] {
            *idx += extra as i32;
        }
    }
    Ok(())
}
