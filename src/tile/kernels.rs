//! The per-nonzero loops of decoding, the only code between zstd and the caller's buffers.
//! Measured in benches/reads.rs and benches/tile.rs. On x86_64 they run on AVX2 when the CPU
//! has it (detected at run time), else on SSE2 (part of the x86_64 baseline); elsewhere, and
//! when forced (`force_path`), on plain scalar code. For outputs larger than the L2 cache
//! they use non-temporal stores: a decoded tile is 8 bytes per nonzero, and writing it
//! through the cache both reads every line first and evicts the zstd scratch that the next
//! frame reuses. Every path computes the same results; the tests run each one.

use std::sync::atomic::{AtomicU8, Ordering};

/// An implementation of the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// Portable code (every platform).
    Scalar,
    /// x86_64 baseline vectors (16 bytes).
    Sse2,
    /// x86_64 AVX2 (32 bytes), when the CPU has it.
    Avx2,
}

/// 0: decide from the CPU; otherwise 1 + the forced path.
static FORCED: AtomicU8 = AtomicU8::new(0);

impl KernelPath {
    fn code(self) -> u8 {
        match self {
            KernelPath::Scalar => 1,
            KernelPath::Sse2 => 2,
            KernelPath::Avx2 => 3,
        }
    }

    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            KernelPath::Sse2 => cfg!(target_arch = "x86_64"),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx2 => false,
        }
    }
}

/// Forces a kernel path for the whole process (`None`: the best the CPU has). For tests and
/// benchmarks: every path gives the same results. A path the CPU lacks is not taken (the
/// best available is used instead).
pub fn force_path(path: Option<KernelPath>) {
    FORCED.store(path.map_or(0, KernelPath::code), Ordering::Relaxed);
}

/// The path the kernels take now.
pub fn active_path() -> KernelPath {
    let forced = match FORCED.load(Ordering::Relaxed) {
        1 => Some(KernelPath::Scalar),
        2 => Some(KernelPath::Sse2),
        3 => Some(KernelPath::Avx2),
        _ => None,
    };
    match forced {
        Some(p) if p.available() => p,
        _ if KernelPath::Avx2.available() => KernelPath::Avx2,
        _ if KernelPath::Sse2.available() => KernelPath::Sse2,
        _ => KernelPath::Scalar,
    }
}

/// Outputs of at least this many bytes per chunk are written with streaming stores.
pub const STREAM_STORE_MIN_BYTES: usize = 1 << 20;

/// Gene indices of one cell from its gap planes: `out[i] = sum(gaps[..=i])`. Returns the
/// last (largest) index, computed without wrap-around, and whether a gap after the first is
/// 0 (a repeated gene: indices must strictly increase).
#[inline]
pub fn prefix_sum_gaps(out: &mut [i32], lo: &[u8], hi: &[u8], stream: bool) -> (u64, bool) {
    assert!(lo.len() == out.len() && hi.len() == out.len());
    // A cell of at most 65537 gaps sums below 2^32: 32-bit lanes cannot wrap.
    #[cfg(target_arch = "x86_64")]
    if out.len() <= 65_537 {
        match active_path() {
            // SAFETY: AVX2 is present (active_path checks); slice lengths are equal.
            KernelPath::Avx2 => unsafe {
                return if stream {
                    avx2::prefix_sum::<true>(out, lo, hi)
                } else {
                    avx2::prefix_sum::<false>(out, lo, hi)
                };
            },
            // SAFETY: SSE2 is in the x86_64 baseline; slice lengths are equal (asserted).
            KernelPath::Sse2 => unsafe {
                return if stream {
                    sse2::prefix_sum::<true>(out, lo, hi)
                } else {
                    sse2::prefix_sum::<false>(out, lo, hi)
                };
            },
            KernelPath::Scalar => {}
        }
    }
    let _ = stream;
    let last = prefix_sum_scalar(out, lo, hi, 0);
    (last, zero_after_first(lo, hi, 0, out.len()))
}

/// Whether a uint16 at a position in `from..to`, other than position 0, is 0.
#[inline]
fn zero_after_first(lo: &[u8], hi: &[u8], from: usize, to: usize) -> bool {
    (from.max(1)..to).any(|j| lo[j] | hi[j] == 0)
}

/// A cell of a chunk that breaks a rule (`k` indexes the cell bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellError {
    /// The cell's last gene index reaches `n_genes`.
    GeneRange { k: usize, last: u64 },
    /// A gap after the cell's first is 0: a gene repeats.
    RepeatedGene { k: usize },
}

/// Gene indices of all cells of a chunk: `bounds` are the cells' start offsets into the
/// chunk plus the end (`bounds[k] - base`). Returns the first cell (index into `bounds`)
/// whose last index reaches `n_genes`, with that index.
///
/// Cells are short in real data (tens of nonzeros), so instead of finishing each cell with a
/// scalar tail, the vector loop runs whole blocks of eight and lets the last one spill into the
/// next cell's range, which that cell then overwrites.
pub fn prefix_sum_cells(
    out: &mut [i32],
    lo: &[u8],
    hi: &[u8],
    bounds: &[i64],
    base: i64,
    n_genes: u64,
    stream: bool,
) -> Result<(), CellError> {
    let n = out.len();
    assert!(lo.len() == n && hi.len() == n);
    let path = active_path();
    for k in 0..bounds.len().saturating_sub(1) {
        let (a, b) = ((bounds[k] - base) as usize, (bounds[k + 1] - base) as usize);
        if a == b {
            continue;
        }
        let len = b - a;
        let (last, repeat) = match cell_blocks(path, stream, len, a, n) {
            #[cfg(target_arch = "x86_64")]
            Some(width) => {
                // SAFETY: out/lo/hi[a..a + width * ceil(len / width)] are in bounds
                // (cell_blocks checked); a cell of at most 65537 gaps sums below 2^32; the
                // path's CPU feature is present.
                let repeat = unsafe {
                    let (o, l, h) = (
                        out.as_mut_ptr().add(a),
                        lo.as_ptr().add(a),
                        hi.as_ptr().add(a),
                    );
                    if width == 16 {
                        avx2::prefix_sum_blocks(o, l, h, len)
                    } else {
                        sse2::prefix_sum_blocks(o, l, h, len)
                    }
                };
                (out[b - 1] as u32 as u64, repeat)
            }
            _ => prefix_sum_gaps(&mut out[a..b], &lo[a..b], &hi[a..b], stream),
        };
        if repeat {
            return Err(CellError::RepeatedGene { k });
        }
        // Indices only grow within a cell, so checking the last one bounds them all.
        if last >= n_genes {
            return Err(CellError::GeneRange { k, last });
        }
    }
    Ok(())
}

/// Whether a cell of `len` gaps at `a` (of `n`) can run in whole vector blocks that spill
/// past its end, and the block width (16 for AVX2, 8 for SSE2). Streaming stores need
/// aligned exact writes, so they never take this path.
#[inline]
fn cell_blocks(path: KernelPath, stream: bool, len: usize, a: usize, n: usize) -> Option<usize> {
    if stream || len > 65_537 {
        return None;
    }
    let fits = |w: usize| a + len.div_ceil(w) * w <= n;
    match path {
        KernelPath::Avx2 if fits(16) => Some(16),
        KernelPath::Avx2 | KernelPath::Sse2 if fits(8) => Some(8),
        _ => None,
    }
}

#[inline]
fn prefix_sum_scalar(out: &mut [i32], lo: &[u8], hi: &[u8], start: u64) -> u64 {
    let mut acc = start;
    for ((o, &l), &h) in out.iter_mut().zip(lo).zip(hi) {
        acc += l as u64 | (h as u64) << 8;
        *o = acc as i32;
    }
    acc
}

/// `out[i] = lo[i] | hi[i] << 8` as int32. Returns whether any value is 0.
#[inline]
pub fn planes_to_i32(out: &mut [i32], lo: &[u8], hi: &[u8], stream: bool) -> bool {
    assert!(lo.len() == out.len() && hi.len() == out.len());
    // SAFETY: `out` holds out.len() writable 4-byte elements; the plane lengths are equal.
    unsafe { planes_to_bits::<false>(out.as_mut_ptr().cast(), out.len(), lo, hi, stream) }
}

/// `out[i] = lo[i] | hi[i] << 8` as float32 (exact: below 2^16). Returns whether any value
/// is 0.
#[inline]
pub fn planes_to_f32(out: &mut [f32], lo: &[u8], hi: &[u8], stream: bool) -> bool {
    assert!(lo.len() == out.len() && hi.len() == out.len());
    // SAFETY: `out` holds out.len() writable 4-byte elements; the plane lengths are equal.
    unsafe { planes_to_bits::<true>(out.as_mut_ptr().cast(), out.len(), lo, hi, stream) }
}

/// The bits of int32 (or, with FLOAT, float32) values from the planes.
///
/// # Safety
/// `out` is valid for `n` 4-byte writes; `lo` and `hi` have length `n`.
#[inline]
unsafe fn planes_to_bits<const FLOAT: bool>(
    out: *mut u32,
    n: usize,
    lo: &[u8],
    hi: &[u8],
    stream: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    match active_path() {
        // SAFETY: AVX2 present (active_path checks); forwarded caller guarantee.
        KernelPath::Avx2 => unsafe {
            return if stream {
                avx2::planes::<true, FLOAT>(out, n, lo, hi)
            } else {
                avx2::planes::<false, FLOAT>(out, n, lo, hi)
            };
        },
        // SAFETY: SSE2 baseline; forwarded caller guarantee.
        KernelPath::Sse2 => unsafe {
            return if stream {
                sse2::planes::<true, FLOAT>(out, n, lo, hi)
            } else {
                sse2::planes::<false, FLOAT>(out, n, lo, hi)
            };
        },
        KernelPath::Scalar => {}
    }
    let _ = stream;
    let mut zero = false;
    for i in 0..n {
        let v = lo[i] as u32 | (hi[i] as u32) << 8;
        let bits = if FLOAT { (v as f32).to_bits() } else { v };
        // SAFETY: i < n (caller guarantee).
        unsafe { out.add(i).write_unaligned(bits) };
        zero |= v == 0;
    }
    zero
}

/// The first position `>= from` whose uint16 (`lo[i] | hi[i] << 8`) is 0, if any. Zeros are
/// rare in valid streams (a count is never 0; a gap is 0 only as a cell's first gene), so
/// this is a fast scan: 16 positions per step.
pub fn find_zero_u16(lo: &[u8], hi: &[u8], from: usize) -> Option<usize> {
    let n = lo.len().min(hi.len());
    let mut i = from.min(n);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: each step reads lo/hi[i..i + 16] with i + 16 <= n (SSE2 baseline).
        unsafe {
            let zero = _mm_setzero_si128();
            while i + 16 <= n {
                let l = _mm_loadu_si128(lo.as_ptr().add(i).cast());
                let h = _mm_loadu_si128(hi.as_ptr().add(i).cast());
                let mask = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(l, h), zero));
                if mask != 0 {
                    return Some(i + mask.trailing_zeros() as usize);
                }
                i += 16;
            }
        }
    }
    (i..n).find(|&j| lo[j] | hi[j] == 0)
}

/// Orders streaming stores before whatever signals the work done (they are weakly ordered).
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions (SSE baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// Stores 4 lanes at `p`: streaming (p must be 16-byte aligned) or plain unaligned.
    #[inline(always)]
    unsafe fn store<const STREAM: bool>(p: *mut __m128i, v: __m128i) {
        // SAFETY: the caller passes a pointer valid for 16 bytes, aligned when STREAM.
        unsafe {
            if STREAM {
                _mm_stream_si128(p, v)
            } else {
                _mm_storeu_si128(p, v)
            }
        }
    }

    /// Elements to handle one by one before `p + i` is 16-byte aligned (0 without STREAM).
    #[inline(always)]
    fn head<const STREAM: bool>(p: *const u8, n: usize) -> usize {
        if STREAM {
            (p.align_offset(16) / 4).min(n)
        } else {
            0
        }
    }

    /// See `super::prefix_sum_gaps`. Eight gaps at a time: interleave the planes into u16,
    /// widen to u32, prefix-sum within each half in registers, carry the total across.
    ///
    /// # Safety
    /// `lo`, `hi` and `out` have equal lengths; the sum of a cell's gaps is below 2^32.
    #[inline]
    pub unsafe fn prefix_sum<const STREAM: bool>(
        out: &mut [i32],
        lo: &[u8],
        hi: &[u8],
    ) -> (u64, bool) {
        let n = out.len();
        let start = head::<STREAM>(out.as_ptr().cast(), n);
        let mut acc = super::prefix_sum_scalar(&mut out[..start], &lo[..start], &hi[..start], 0);
        let mut repeat = super::zero_after_first(lo, hi, 0, start);
        let mut i = start;
        // SAFETY: each iteration reads lo/hi[i..i + 8] and writes out[i..i + 8] with
        // i + 8 <= n; with STREAM, out + i is 16-byte aligned (i advances by 8 int32).
        unsafe {
            let zero = _mm_setzero_si128();
            let mut carry = _mm_set1_epi32(acc as i32);
            // Zero gaps seen; the cell's first gap (position 0) may be 0 and is masked out.
            let mut zeros = zero;
            let mut first = if start == 0 {
                _mm_cvtsi32_si128(1)
            } else {
                zero
            };
            while i + 8 <= n {
                let l = _mm_loadl_epi64(lo.as_ptr().add(i).cast());
                let h = _mm_loadl_epi64(hi.as_ptr().add(i).cast());
                let gaps = _mm_unpacklo_epi8(l, h);
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(_mm_or_si128(gaps, first), zero));
                first = zero;
                let mut a = _mm_unpacklo_epi16(gaps, zero);
                let mut b = _mm_unpackhi_epi16(gaps, zero);
                a = _mm_add_epi32(a, _mm_slli_si128(a, 4));
                b = _mm_add_epi32(b, _mm_slli_si128(b, 4));
                a = _mm_add_epi32(a, _mm_slli_si128(a, 8));
                b = _mm_add_epi32(b, _mm_slli_si128(b, 8));
                a = _mm_add_epi32(a, carry);
                b = _mm_add_epi32(b, _mm_shuffle_epi32(a, 0xFF));
                carry = _mm_shuffle_epi32(b, 0xFF);
                store::<STREAM>(out.as_mut_ptr().add(i).cast(), a);
                store::<STREAM>(out.as_mut_ptr().add(i + 4).cast(), b);
                i += 8;
            }
            acc = _mm_cvtsi128_si32(carry) as u32 as u64;
            repeat |= _mm_movemask_epi8(zeros) != 0;
        }
        repeat |= super::zero_after_first(lo, hi, i, n);
        (
            super::prefix_sum_scalar(&mut out[i..], &lo[i..], &hi[i..], acc),
            repeat,
        )
    }

    /// The gaps of one cell of `len` nonzeros in whole blocks of eight from the given
    /// positions (the last block runs past the cell), with a running total that starts at 0
    /// (see `super::prefix_sum_cells`). Returns whether a gap after the cell's first is 0.
    ///
    /// # Safety
    /// `out`, `lo`, `hi` are valid for `8 * ceil(len / 8)` elements; the cell's gaps sum
    /// below 2^32; `len >= 1`.
    #[inline]
    pub unsafe fn prefix_sum_blocks(
        out: *mut i32,
        lo: *const u8,
        hi: *const u8,
        len: usize,
    ) -> bool {
        let blocks = len.div_ceil(8);
        // SAFETY: block j reads lo/hi[8j..8j + 8] and writes out[8j..8j + 8], j < blocks.
        unsafe {
            let zero = _mm_setzero_si128();
            let mut carry = zero;
            let mut zeros = zero;
            // Lanes not checked for zero gaps: the cell's first (it may be gene 0), and in the
            // last block the lanes past the cell (they belong to the next cell).
            let mut skip = _mm_cvtsi32_si128(1);
            let past_end = _mm_cmpgt_epi16(
                _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7),
                _mm_set1_epi16((len - 8 * (blocks - 1)) as i16 - 1),
            );
            for j in 0..blocks {
                let i = 8 * j;
                let l = _mm_loadl_epi64(lo.add(i).cast());
                let h = _mm_loadl_epi64(hi.add(i).cast());
                let gaps = _mm_unpacklo_epi8(l, h);
                if j + 1 == blocks {
                    skip = _mm_or_si128(skip, past_end);
                }
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(_mm_or_si128(gaps, skip), zero));
                skip = zero;
                let mut a = _mm_unpacklo_epi16(gaps, zero);
                let mut b = _mm_unpackhi_epi16(gaps, zero);
                a = _mm_add_epi32(a, _mm_slli_si128(a, 4));
                b = _mm_add_epi32(b, _mm_slli_si128(b, 4));
                a = _mm_add_epi32(a, _mm_slli_si128(a, 8));
                b = _mm_add_epi32(b, _mm_slli_si128(b, 8));
                a = _mm_add_epi32(a, carry);
                b = _mm_add_epi32(b, _mm_shuffle_epi32(a, 0xFF));
                carry = _mm_shuffle_epi32(b, 0xFF);
                _mm_storeu_si128(out.add(i).cast(), a);
                _mm_storeu_si128(out.add(i + 4).cast(), b);
            }
            _mm_movemask_epi8(zeros) != 0
        }
    }

    /// Sixteen values at a time: interleave the planes into u16, widen to int32 (and
    /// convert to float32 when FLOAT).
    ///
    /// # Safety
    /// `out` is valid for `n` 4-byte elements; `lo` and `hi` have length `n`.
    #[inline]
    pub unsafe fn planes<const STREAM: bool, const FLOAT: bool>(
        out: *mut u32,
        n: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> bool {
        let one = |o: *mut u32, l: u8, h: u8| {
            let v = l as u32 | (h as u32) << 8;
            let bits = if FLOAT { (v as f32).to_bits() } else { v };
            // SAFETY: o is within out[..n] (callers below).
            unsafe { o.write_unaligned(bits) }
        };
        let mut any_zero = false;
        let start = head::<STREAM>(out.cast(), n);
        for i in 0..start {
            // SAFETY: i < start <= n.
            one(unsafe { out.add(i) }, lo[i], hi[i]);
            any_zero |= lo[i] | hi[i] == 0;
        }
        let mut i = start;
        // SAFETY: each iteration reads lo/hi[i..i + 16] and writes out[i..i + 16] with
        // i + 16 <= n; with STREAM, out + i is 16-byte aligned.
        unsafe {
            let zero = _mm_setzero_si128();
            let mut zeros = zero;
            let conv = |v: __m128i| {
                if FLOAT {
                    _mm_castps_si128(_mm_cvtepi32_ps(v))
                } else {
                    v
                }
            };
            while i + 16 <= n {
                let l = _mm_loadu_si128(lo.as_ptr().add(i).cast());
                let h = _mm_loadu_si128(hi.as_ptr().add(i).cast());
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi8(_mm_or_si128(l, h), zero));
                let w0 = _mm_unpacklo_epi8(l, h);
                let w1 = _mm_unpackhi_epi8(l, h);
                let p = out.add(i).cast::<__m128i>();
                store::<STREAM>(p, conv(_mm_unpacklo_epi16(w0, zero)));
                store::<STREAM>(p.add(1), conv(_mm_unpackhi_epi16(w0, zero)));
                store::<STREAM>(p.add(2), conv(_mm_unpacklo_epi16(w1, zero)));
                store::<STREAM>(p.add(3), conv(_mm_unpackhi_epi16(w1, zero)));
                i += 16;
            }
            any_zero |= _mm_movemask_epi8(zeros) != 0;
        }
        for j in i..n {
            // SAFETY: j < n.
            one(unsafe { out.add(j) }, lo[j], hi[j]);
            any_zero |= lo[j] | hi[j] == 0;
        }
        any_zero
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Stores 8 lanes at `p`: streaming (p must be 32-byte aligned) or plain unaligned.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store<const STREAM: bool>(p: *mut __m256i, v: __m256i) {
        // SAFETY: the caller passes a pointer valid for 32 bytes, aligned when STREAM.
        unsafe {
            if STREAM {
                _mm256_stream_si256(p, v)
            } else {
                _mm256_storeu_si256(p, v)
            }
        }
    }

    /// Elements to handle one by one before `p + i` is 32-byte aligned (0 without STREAM).
    #[inline(always)]
    fn head<const STREAM: bool>(p: *const u8, n: usize) -> usize {
        if STREAM {
            (p.align_offset(32) / 4).min(n)
        } else {
            0
        }
    }

    /// Inclusive prefix sum of 8 u32 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn scan8(x: __m256i) -> __m256i {
        let x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
        let x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
        // Each 128-bit half now holds its own prefix; add the low half's total (its
        // element 3, broadcast) to the high half.
        let t = _mm256_shuffle_epi32(x, 0xFF);
        _mm256_add_epi32(x, _mm256_permute2x128_si256(t, t, 0x08))
    }

    /// Sixteen gaps at `lo`/`hi`: their prefix sums plus `carry` (elements 0..7 and 8..15),
    /// the next carry, and the gaps as u16 (for the zero checks). The carry chain is one
    /// add per sixteen gaps; everything else is off it.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn block16(
        lo: *const u8,
        hi: *const u8,
        carry: __m256i,
    ) -> (__m256i, __m256i, __m256i, __m128i, __m128i) {
        // SAFETY: the caller guarantees 16 readable bytes at lo and hi.
        unsafe {
            let l = _mm_loadu_si128(lo.cast());
            let h = _mm_loadu_si128(hi.cast());
            let w0 = _mm_unpacklo_epi8(l, h);
            let w1 = _mm_unpackhi_epi8(l, h);
            let a = scan8(_mm256_cvtepu16_epi32(w0));
            let b = scan8(_mm256_cvtepu16_epi32(w1));
            let last = _mm256_set1_epi32(7);
            let ta = _mm256_permutevar8x32_epi32(a, last);
            let tb = _mm256_permutevar8x32_epi32(b, last);
            let out_a = _mm256_add_epi32(a, carry);
            let out_b = _mm256_add_epi32(_mm256_add_epi32(b, ta), carry);
            (
                out_a,
                out_b,
                _mm256_add_epi32(carry, _mm256_add_epi32(ta, tb)),
                w0,
                w1,
            )
        }
    }

    /// See `super::prefix_sum_gaps` (and `sse2::prefix_sum`): sixteen gaps at a time.
    ///
    /// # Safety
    /// The CPU has AVX2; `lo`, `hi` and `out` have equal lengths; the sum of the gaps is
    /// below 2^32.
    #[target_feature(enable = "avx2")]
    pub unsafe fn prefix_sum<const STREAM: bool>(
        out: &mut [i32],
        lo: &[u8],
        hi: &[u8],
    ) -> (u64, bool) {
        let n = out.len();
        let start = head::<STREAM>(out.as_ptr().cast(), n);
        let acc = super::prefix_sum_scalar(&mut out[..start], &lo[..start], &hi[..start], 0);
        let mut repeat = super::zero_after_first(lo, hi, 0, start);
        let mut i = start;
        let acc = {
            let zero = _mm_setzero_si128();
            let mut carry = _mm256_set1_epi32(acc as i32);
            let mut zeros = zero;
            // The cell's first gap (position 0) may be 0 and is masked out.
            let mut first = if start == 0 {
                _mm_cvtsi32_si128(1)
            } else {
                zero
            };
            while i + 16 <= n {
                // SAFETY: reads lo/hi[i..i + 16] and writes out[i..i + 16], i + 16 <= n;
                // with STREAM, out + i is 32-byte aligned (i advances by 16 int32).
                unsafe {
                    let (a, b, c, w0, w1) = block16(lo.as_ptr().add(i), hi.as_ptr().add(i), carry);
                    zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(_mm_or_si128(w0, first), zero));
                    zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(w1, zero));
                    first = zero;
                    let p = out.as_mut_ptr().add(i).cast::<__m256i>();
                    store::<STREAM>(p, a);
                    store::<STREAM>(p.add(1), b);
                    carry = c;
                }
                i += 16;
            }
            repeat |= _mm_movemask_epi8(zeros) != 0;
            _mm256_cvtsi256_si32(carry) as u32 as u64
        };
        repeat |= super::zero_after_first(lo, hi, i, n);
        (
            super::prefix_sum_scalar(&mut out[i..], &lo[i..], &hi[i..], acc),
            repeat,
        )
    }

    /// See `sse2::prefix_sum_blocks`: whole blocks of sixteen from the given positions (the
    /// last block runs past the cell).
    ///
    /// # Safety
    /// The CPU has AVX2; `out`, `lo`, `hi` are valid for `16 * ceil(len / 16)` elements;
    /// the cell's gaps sum below 2^32; `len >= 1`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn prefix_sum_blocks(
        out: *mut i32,
        lo: *const u8,
        hi: *const u8,
        len: usize,
    ) -> bool {
        let blocks = len.div_ceil(16);
        let zero = _mm_setzero_si128();
        let mut carry = _mm256_setzero_si256();
        let mut zeros = zero;
        // Lanes not checked for zero gaps: the cell's first, and in the last block the
        // lanes past the cell (they belong to the next cell).
        let rem = (len - 16 * (blocks - 1)) as i16;
        let past_end0 = _mm_cmpgt_epi16(
            _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7),
            _mm_set1_epi16(rem - 1),
        );
        let past_end1 = _mm_cmpgt_epi16(
            _mm_setr_epi16(8, 9, 10, 11, 12, 13, 14, 15),
            _mm_set1_epi16(rem - 1),
        );
        let mut skip0 = _mm_cvtsi32_si128(1);
        let mut skip1 = zero;
        for j in 0..blocks {
            let i = 16 * j;
            if j + 1 == blocks {
                skip0 = _mm_or_si128(skip0, past_end0);
                skip1 = past_end1;
            }
            // SAFETY: block j reads lo/hi[16j..16j + 16] and writes out[16j..16j + 16],
            // j < blocks (caller guarantee).
            unsafe {
                let (a, b, c, w0, w1) = block16(lo.add(i), hi.add(i), carry);
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(_mm_or_si128(w0, skip0), zero));
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi16(_mm_or_si128(w1, skip1), zero));
                let p = out.add(i).cast::<__m256i>();
                _mm256_storeu_si256(p, a);
                _mm256_storeu_si256(p.add(1), b);
                carry = c;
            }
            skip0 = zero;
        }
        _mm_movemask_epi8(zeros) != 0
    }

    /// The lanes as float32 bits when FLOAT, else unchanged.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn conv<const FLOAT: bool>(v: __m256i) -> __m256i {
        if FLOAT {
            _mm256_castps_si256(_mm256_cvtepi32_ps(v))
        } else {
            v
        }
    }

    /// Eight u16 values widened to 32-bit lanes (float32 bits when FLOAT).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn widen<const FLOAT: bool>(w: __m128i) -> __m256i {
        conv::<FLOAT>(_mm256_cvtepu16_epi32(w))
    }

    /// See `sse2::planes`: thirty-two values per step (two 32-byte loads), widened with one
    /// instruction per eight.
    ///
    /// # Safety
    /// The CPU has AVX2; `out` is valid for `n` 4-byte elements; `lo` and `hi` have length
    /// `n`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn planes<const STREAM: bool, const FLOAT: bool>(
        out: *mut u32,
        n: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> bool {
        let one = |o: *mut u32, l: u8, h: u8| {
            let v = l as u32 | (h as u32) << 8;
            let bits = if FLOAT { (v as f32).to_bits() } else { v };
            // SAFETY: o is within out[..n] (callers below).
            unsafe { o.write_unaligned(bits) }
        };
        let mut any_zero = false;
        let start = head::<STREAM>(out.cast(), n);
        for i in 0..start {
            // SAFETY: i < start <= n.
            one(unsafe { out.add(i) }, lo[i], hi[i]);
            any_zero |= lo[i] | hi[i] == 0;
        }
        let mut i = start;
        let zero = _mm256_setzero_si256();
        let mut zeros = zero;
        while i + 32 <= n {
            // SAFETY: reads lo/hi[i..i + 32] and writes out[i..i + 32] with i + 32 <= n;
            // with STREAM, out + i is 32-byte aligned.
            unsafe {
                let l = _mm256_loadu_si256(lo.as_ptr().add(i).cast());
                let h = _mm256_loadu_si256(hi.as_ptr().add(i).cast());
                zeros = _mm256_or_si256(zeros, _mm256_cmpeq_epi8(_mm256_or_si256(l, h), zero));
                // Interleaving works within 16-byte halves: w0 holds values 0..8 and
                // 16..24, w1 values 8..16 and 24..32.
                let w0 = _mm256_unpacklo_epi8(l, h);
                let w1 = _mm256_unpackhi_epi8(l, h);
                let p = out.add(i).cast::<__m256i>();
                store::<STREAM>(p, widen::<FLOAT>(_mm256_castsi256_si128(w0)));
                store::<STREAM>(p.add(1), widen::<FLOAT>(_mm256_castsi256_si128(w1)));
                store::<STREAM>(p.add(2), widen::<FLOAT>(_mm256_extracti128_si256(w0, 1)));
                store::<STREAM>(p.add(3), widen::<FLOAT>(_mm256_extracti128_si256(w1, 1)));
            }
            i += 32;
        }
        any_zero |= _mm256_movemask_epi8(zeros) != 0;
        for j in i..n {
            // SAFETY: j < n.
            one(unsafe { out.add(j) }, lo[j], hi[j]);
            any_zero |= lo[j] | hi[j] == 0;
        }
        any_zero
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path this CPU can run.
    fn paths() -> Vec<KernelPath> {
        [KernelPath::Scalar, KernelPath::Sse2, KernelPath::Avx2]
            .into_iter()
            .filter(|p| p.available())
            .collect()
    }

    /// Runs `f` once on each path, forced.
    fn on_every_path(f: impl Fn(KernelPath)) {
        for p in paths() {
            force_path(Some(p));
            assert_eq!(active_path(), p);
            f(p);
        }
        force_path(None);
    }

    #[test]
    fn the_best_path_is_taken_unless_forced() {
        let best = *paths().last().unwrap();
        if FORCED.load(Ordering::Relaxed) == 0 {
            assert_eq!(active_path(), best);
        }
        assert!(KernelPath::Scalar.available());
    }

    fn planes(v: &[u16]) -> (Vec<u8>, Vec<u8>) {
        (
            v.iter().map(|x| *x as u8).collect(),
            v.iter().map(|x| (*x >> 8) as u8).collect(),
        )
    }

    /// Every length and alignment offset against the scalar definition.
    #[test]
    fn kernels_match_the_definition() {
        on_every_path(|_| {
            let vals: Vec<u16> = (0..300u32).map(|i| (i * 7919 % 65536) as u16).collect();
            for offset in 0..8 {
                for n in 0..80 {
                    let (lo, hi) = planes(&vals[..n]);
                    let expect_sum: Vec<i32> = vals[..n]
                        .iter()
                        .scan(0u64, |acc, &g| {
                            *acc += g as u64;
                            Some(*acc as i32)
                        })
                        .collect();
                    for stream in [false, true] {
                        let mut buf = vec![0i32; n + 8];
                        let (last, repeat) =
                            prefix_sum_gaps(&mut buf[offset..offset + n], &lo, &hi, stream);
                        assert_eq!(&buf[offset..offset + n], &expect_sum[..]);
                        assert_eq!(last, expect_sum.last().map_or(0, |&x| x as u64));
                        // vals[0] is 0: allowed as a cell's first gap, but a zero count.
                        assert!(!repeat);
                        let mut ibuf = vec![0i32; n + 8];
                        let zi = planes_to_i32(&mut ibuf[offset..offset + n], &lo, &hi, stream);
                        let mut fbuf = vec![0f32; n + 8];
                        let zf = planes_to_f32(&mut fbuf[offset..offset + n], &lo, &hi, stream);
                        assert_eq!((zi, zf), (n > 0, n > 0));
                        store_fence();
                        for i in 0..n {
                            assert_eq!(ibuf[offset + i], vals[i] as i32);
                            assert_eq!(fbuf[offset + i], vals[i] as f32);
                        }
                    }
                }
            }
        });
    }

    /// Many short cells, empty ones among them, in both store modes, against the definition.
    #[test]
    fn cells_of_a_chunk_match_the_definition() {
        on_every_path(|_| {
            let lens = [0usize, 1, 7, 8, 9, 0, 3, 16, 17, 0, 2, 40, 5];
            let base = 1000i64;
            let mut bounds = vec![base];
            for l in lens {
                bounds.push(bounds.last().unwrap() + l as i64);
            }
            let n = (bounds.last().unwrap() - base) as usize;
            let vals: Vec<u16> = (0..n as u32).map(|i| (i * 40503 % 65536) as u16).collect();
            let (lo, hi) = planes(&vals);
            let mut expect = vec![0i32; n];
            for k in 0..lens.len() {
                let (a, b) = ((bounds[k] - base) as usize, (bounds[k + 1] - base) as usize);
                let mut acc = 0i64;
                for i in a..b {
                    acc += vals[i] as i64;
                    expect[i] = acc as i32;
                }
            }
            for stream in [false, true] {
                let mut out = vec![-1i32; n];
                prefix_sum_cells(&mut out, &lo, &hi, &bounds, base, 1 << 31, stream).unwrap();
                store_fence();
                assert_eq!(out, expect);
            }
            // The first cell (index into bounds) whose last index reaches n_genes is reported.
            let mut out = vec![0i32; n];
            let k = 3; // the cell of 8
            let limit = expect[(bounds[k + 1] - base) as usize - 1] as u64;
            let smaller_before = (0..k).all(|j| {
                let (a, b) = ((bounds[j] - base) as usize, (bounds[j + 1] - base) as usize);
                a == b || (expect[b - 1] as u64) < limit
            });
            if smaller_before {
                let e =
                    prefix_sum_cells(&mut out, &lo, &hi, &bounds, base, limit, false).unwrap_err();
                assert_eq!(e, CellError::GeneRange { k, last: limit });
            }
        });
    }

    #[test]
    fn finds_zero_values_anywhere() {
        for n in [0usize, 1, 15, 16, 17, 40] {
            let (lo, hi) = planes(&vec![0x0100u16; n]);
            assert_eq!(find_zero_u16(&lo, &hi, 0), None);
            for z in 0..n {
                let mut v = vec![0x0100u16; n];
                v[z] = 0;
                let (lo, hi) = planes(&v);
                assert_eq!(find_zero_u16(&lo, &hi, 0), Some(z));
                assert_eq!(find_zero_u16(&lo, &hi, z + 1), None);
            }
        }
    }

    /// A zero gap after a cell's first is found at every position, in every path (whole
    /// blocks running past the cell, per-cell with scalar head/tail, streaming); zero gaps
    /// at cells' first positions (also in the lanes a block runs past its cell) are not.
    #[test]
    fn repeated_genes_are_found_and_first_gaps_of_0_are_not() {
        on_every_path(|_| {
            for len in 1..40usize {
                for z in 0..len {
                    // Cell k = 1 of len gaps, between two cells whose gaps are all 0-first.
                    let lens = [3usize, len, 9];
                    let base = 0i64;
                    let bounds: Vec<i64> = [0, 3, 3 + len as i64, 12 + len as i64].to_vec();
                    let n = lens.iter().sum::<usize>();
                    let mut v = vec![1u16; n];
                    v[0] = 0; // first gap of cell 0
                    v[3 + len] = 0; // first gap of cell 2, inside cell 1's overshoot block
                    v[3 + z] = 0; // cell 1: position z
                    let (lo, hi) = planes(&v);
                    for stream in [false, true] {
                        let mut out = vec![0i32; n];
                        let r =
                            prefix_sum_cells(&mut out, &lo, &hi, &bounds, base, 1 << 31, stream);
                        if z == 0 {
                            assert_eq!(r, Ok(()), "len {len} z {z}");
                        } else {
                            assert_eq!(r, Err(CellError::RepeatedGene { k: 1 }), "len {len} z {z}");
                        }
                        let mut one = vec![0i32; len];
                        let (_, repeat) =
                            prefix_sum_gaps(&mut one, &lo[3..3 + len], &hi[3..3 + len], stream);
                        assert_eq!(repeat, z > 0, "len {len} z {z} stream {stream}");
                    }
                }
            }
        });
    }

    #[test]
    fn long_cells_fall_back_to_64_bit_sums() {
        on_every_path(|_| {
            let n = 70_000;
            let (lo, hi) = planes(&vec![65_535u16; n]);
            let mut out = vec![0i32; n];
            let (last, repeat) = prefix_sum_gaps(&mut out, &lo, &hi, false);
            assert_eq!((last, repeat), (65_535 * n as u64, false));
        });
    }
}
