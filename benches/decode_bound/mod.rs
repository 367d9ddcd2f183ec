//! `reads --only decode-bound`: how close to the zstd + CRC floor any tile decoder that writes
//! the output `dc_tile_decode` must hand back can come, measured beside the floor in one run
//! (issue 13, item 3: tile decode <= 1.15x the floor on 1 thread).
//!
//! The pieces, each on the decode section's tile, 1 thread, all lines run alternately:
//! * (a0) the floor's own zstd without the CRC (every frame whole into one reused buffer);
//! * (a) zstd in streaming mode into a small window (64 / 128 / 256 KiB, overwritten each
//!   time it fills, output discarded): zstd's own cost when what it hands out never leaves
//!   cache, which a fused decoder consuming slices while they are hot pays at least;
//! * (b) writing the output alone (indices + values, 8 bytes per nonzero, the 163 MB the API
//!   hands back), with every kind of store at hand (ordinary, memset, non-temporal SSE2 /
//!   AVX2 / AVX-512), also into outputs advised huge pages: what any decoder writes on top
//!   of the floor's work;
//! * (c) CRC-32 of the tile (the format requires it).
//!
//! Lower bound = min(a0, a) + min(b) + c, as a ratio to the floor. It assumes the pieces do
//! not overlap in time on one core; the skeleton lines test that assumption: the same zstd
//! with each piece's share of the output (2 bytes per decompressed byte) written right after
//! zstd hands the piece out (per whole frame, or per 64 / 128 KiB streaming window), and no
//! decoding work (a decoder whose kernels cost nothing).

use std::cell::RefCell;

use deltacells::tile::Tile;
use zstd::zstd_safe::{DCtx, InBuffer, OutBuffer, ResetDirective};

use super::{bare_zstd, fill_outputs, floor_decode, medians_dyn, our_decode, Data, Times};

/// Streams every frame of the tile through `dctx` into `window`, which is overwritten each
/// time it fills; `sink` sees every piece zstd hands out. Returns the bytes decompressed.
#[inline(never)]
fn stream_zstd(
    t: &Tile<'_>,
    dctx: &mut DCtx<'static>,
    window: &mut [u8],
    mut sink: impl FnMut(&[u8]),
) -> usize {
    let mut total = 0;
    for e in &t.chunks {
        for s in [e.gaps, e.vals, e.vexc, e.gexc] {
            if s.len == 0 {
                continue;
            }
            dctx.reset(ResetDirective::SessionOnly).unwrap();
            let mut input = InBuffer::around(t.bytes(s));
            loop {
                let (k, hint) = {
                    let mut out = OutBuffer::around(&mut *window);
                    let hint = dctx.decompress_stream(&mut out, &mut input).unwrap();
                    (out.pos(), hint)
                };
                total += k;
                sink(&window[..k]);
                if hint == 0 {
                    break;
                }
            }
        }
    }
    total
}

/// How output bytes are written.
#[derive(Clone, Copy, PartialEq)]
enum Stores {
    /// Ordinary stores (`slice::fill`).
    Ordinary,
    /// `memset` of a nonzero byte (glibc picks the stores). Not of 0: on this machine a
    /// memset of 0 over the whole output ran 2.5x faster than of 7 (zeros are special-cased
    /// below the program), and a decode's output is not zeros.
    Memset,
    /// Non-temporal 16-byte SSE2 stores.
    Sse2Stream,
    /// Non-temporal 32-byte AVX2 stores (SSE2 ones when the CPU lacks AVX2).
    Avx2Stream,
    /// Non-temporal 64-byte AVX-512 stores, a whole cache line each (SSE2 ones when the CPU
    /// lacks AVX-512F).
    Avx512Stream,
}

/// An i32 slice viewed as its bytes.
fn as_bytes(v: &mut [i32]) -> &mut [u8] {
    // SAFETY: the same memory, 4 bytes per i32; every byte pattern is a valid i32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 4) }
}

/// Writes every byte of `dst`.
fn fill(dst: &mut [u8], how: Stores) {
    match how {
        Stores::Ordinary => dst.fill(7),
        // SAFETY: writes exactly the slice's bytes (lowered to memset).
        Stores::Memset => unsafe { std::ptr::write_bytes(dst.as_mut_ptr(), 7, dst.len()) },
        Stores::Sse2Stream => stream_fill(dst, 7),
        Stores::Avx2Stream if std::arch::is_x86_feature_detected!("avx2") => {
            // SAFETY: the CPU has AVX2 (checked on the line above).
            unsafe { stream_fill_avx2(dst, 7) }
        }
        Stores::Avx512Stream if std::arch::is_x86_feature_detected!("avx512f") => {
            // SAFETY: the CPU has AVX-512F (checked on the line above).
            unsafe { stream_fill_avx512(dst, 7) }
        }
        Stores::Avx2Stream | Stores::Avx512Stream => stream_fill(dst, 7),
    }
}

/// Fills the unaligned head and the tail of `dst` with `v` (ordinary stores) and returns its
/// middle: `align`-byte aligned, a multiple of `align` long, for the streaming stores.
fn aligned_middle(dst: &mut [u8], align: usize, v: u8) -> &mut [u8] {
    let head = dst.as_ptr().align_offset(align).min(dst.len());
    let (h, rest) = dst.split_at_mut(head);
    h.fill(v);
    let mid = rest.len() / align * align;
    let (m, tail) = rest.split_at_mut(mid);
    tail.fill(v);
    m
}

/// Fills `dst` with `v` using non-temporal 64-byte AVX-512 stores for its aligned middle.
///
/// # Safety
/// The CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn stream_fill_avx512(dst: &mut [u8], v: u8) {
    use std::arch::x86_64::{_mm512_set1_epi8, _mm512_stream_si512, _mm_sfence};
    let m = aligned_middle(dst, 64, v);
    let x = _mm512_set1_epi8(v as i8);
    for p in m.chunks_exact_mut(64) {
        // SAFETY: `p` is 64 bytes, 64-byte aligned (after `head`); AVX-512F per the contract.
        unsafe { _mm512_stream_si512(p.as_mut_ptr().cast(), x) };
    }
    _mm_sfence();
}

/// Where the skeleton's writes go: the decode's two outputs, as bytes, filled front to back.
struct Outputs<'a> {
    indices: &'a mut [i32],
    values: &'a mut [i32],
    /// Bytes written so far to each.
    at: usize,
}

impl Outputs<'_> {
    /// Writes `k` more bytes to each output (a decode writes 8 bytes per nonzero for the 4
    /// bytes zstd hands out per nonzero).
    #[inline(never)]
    fn write(&mut self, k: usize, how: Stores) {
        let bytes = (self.indices.len() * 4).min(self.values.len() * 4);
        let (a, b) = (self.at.min(bytes), (self.at + k).min(bytes));
        self.at += k;
        fill(&mut as_bytes(self.indices)[a..b], how);
        fill(&mut as_bytes(self.values)[a..b], how);
    }
}

/// Fills `dst` with `v` using non-temporal 16-byte stores for its aligned middle.
fn stream_fill(dst: &mut [u8], v: u8) {
    use std::arch::x86_64::{_mm_set1_epi8, _mm_sfence, _mm_stream_si128};
    let head = dst.as_ptr().align_offset(16).min(dst.len());
    let (h, rest) = dst.split_at_mut(head);
    h.fill(v);
    let mid = rest.len() / 16 * 16;
    let (m, tail) = rest.split_at_mut(mid);
    tail.fill(v);
    // SAFETY: SSE2 is part of x86_64; `m` is 16-byte aligned (after `head`) and a multiple of
    // 16 bytes long, so every store writes 16 bytes within it.
    unsafe {
        let x = _mm_set1_epi8(v as i8);
        for p in m.chunks_exact_mut(16) {
            _mm_stream_si128(p.as_mut_ptr().cast(), x);
        }
        _mm_sfence();
    }
}

/// Fills `dst` with `v` using non-temporal 32-byte AVX2 stores for its aligned middle.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
unsafe fn stream_fill_avx2(dst: &mut [u8], v: u8) {
    use std::arch::x86_64::{_mm256_set1_epi8, _mm256_stream_si256, _mm_sfence};
    let m = aligned_middle(dst, 32, v);
    let x = _mm256_set1_epi8(v as i8);
    for p in m.chunks_exact_mut(32) {
        // SAFETY: `p` is 32 bytes, 32-byte aligned (after `head`); AVX2 per the contract.
        unsafe { _mm256_stream_si256(p.as_mut_ptr().cast(), x) };
    }
    _mm_sfence();
}

fn ms(t: Times) -> f64 {
    t.wall * 1e3
}

/// Bare zstd of every frame into `scratch` (as the floor), each frame's share of the output
/// written after it.
#[inline(never)]
fn frame_skeleton(
    t: &Tile<'_>,
    dctx: &mut DCtx<'static>,
    scratch: &mut Vec<u8>,
    o: &mut Outputs,
    how: Stores,
) {
    for e in &t.chunks {
        for s in [e.gaps, e.vals, e.vexc, e.gexc] {
            if s.len > 0 {
                scratch.clear();
                scratch.reserve(2 * e.nnz() as usize + 64);
                let k = dctx.decompress(scratch, t.bytes(s)).unwrap();
                o.write(k, how);
            }
        }
    }
}

/// A zeroed output of `n` int32 not touched yet (calloc maps fresh pages), with huge pages
/// advised over its 2 MiB-aligned interior before the first write faults the pages in.
fn huge_output(n: usize) -> Vec<i32> {
    let v = vec![0i32; n];
    let (p, len) = (v.as_ptr() as usize, n * 4);
    let a = p.next_multiple_of(2 << 20);
    let b = (p + len) / (2 << 20) * (2 << 20);
    if b > a {
        // SAFETY: advice over whole pages inside the vector's own allocation; it changes no
        // contents (the pages are zero either way).
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
    }
    v
}

/// One line of the table.
struct Line {
    what: &'static str,
    run: Box<dyn FnMut()>,
}

/// The `decode-bound` section (see the module doc).
pub fn decode_bound(data: &Data, reps: usize) {
    let blob: &'static [u8] = Vec::leak(std::fs::read(data.decode_tile()).unwrap());
    let t: &'static Tile<'static> = Box::leak(Box::new(Tile::parse(blob, true).unwrap()));
    let (cells, nnz) = (t.header.n_cells as usize, t.header.nnz as usize);
    type Out = (Vec<i64>, Vec<i32>, Vec<i32>);
    let out: &'static RefCell<Out> = Box::leak(Box::new(RefCell::new((
        vec![0i64; cells + 1],
        vec![0i32; nnz],
        vec![0i32; nnz],
    ))));
    let pool: &'static rayon::ThreadPool = Box::leak(Box::new(deltacells::pool::pool(1).unwrap()));
    // Each line keeps its own zstd context and buffer warm.
    let ctx = || (DCtx::create(), Vec::<u8>::new());
    let win = |w: usize| (DCtx::create(), vec![0u8; w]);
    let bare = move |what, how: Option<Stores>| {
        let (mut d, mut s) = ctx();
        Line {
            what,
            run: Box::new(move || match how {
                None => {
                    std::hint::black_box(bare_zstd(t, &mut s, &mut d));
                }
                Some(how) => {
                    let o = &mut *out.borrow_mut();
                    let mut outs = Outputs {
                        indices: &mut o.1,
                        values: &mut o.2,
                        at: 0,
                    };
                    frame_skeleton(t, &mut d, &mut s, &mut outs, how);
                }
            }),
        }
    };
    let streamed = move |what, w: usize, how: Option<Stores>| {
        let (mut d, mut win) = win(w);
        Line {
            what,
            run: Box::new(move || match how {
                None => {
                    std::hint::black_box(stream_zstd(t, &mut d, &mut win, |_| {}));
                }
                Some(how) => {
                    let o = &mut *out.borrow_mut();
                    let mut outs = Outputs {
                        indices: &mut o.1,
                        values: &mut o.2,
                        at: 0,
                    };
                    stream_zstd(t, &mut d, &mut win, |s| outs.write(s.len(), how));
                }
            }),
        }
    };
    let huge: &'static RefCell<(Vec<i32>, Vec<i32>)> =
        Box::leak(Box::new(RefCell::new((huge_output(nnz), huge_output(nnz)))));
    let write_huge = move |what, how: Stores| Line {
        what,
        run: Box::new(move || {
            let o = &mut *huge.borrow_mut();
            fill(as_bytes(&mut o.0), how);
            fill(as_bytes(&mut o.1), how);
            std::hint::black_box(&o.0[0]);
        }),
    };
    let write = move |what, how: Stores| Line {
        what,
        run: Box::new(move || {
            let o = &mut *out.borrow_mut();
            fill(as_bytes(&mut o.1), how);
            fill(as_bytes(&mut o.2), how);
            std::hint::black_box(&o.1[0]);
        }),
    };
    let (mut fd, mut fs) = ctx();
    let mut lines = vec![
        Line {
            what: "floor: bare zstd of every frame + CRC-32",
            run: Box::new(move || {
                std::hint::black_box(floor_decode(blob, t, &mut fs, &mut fd));
            }),
        },
        Line {
            what: "ours: dc_tile_decode, CRC checked, int32 out",
            run: Box::new(move || {
                our_decode(blob, 1, &mut out.borrow_mut());
            }),
        },
        bare(
            "(a0) the floor's zstd alone (whole frames into one reused buffer)",
            None,
        ),
        streamed("(a) zstd streaming into a 64 KiB window", 64 << 10, None),
        streamed("(a) zstd streaming into a 128 KiB window", 128 << 10, None),
        streamed("(a) zstd streaming into a 256 KiB window", 256 << 10, None),
        Line {
            what: "(b) writing the output alone (indices + values): the decode section's fill",
            run: Box::new(move || fill_outputs(&mut out.borrow_mut(), 1, pool)),
        },
        write(
            "(b) the same, memset of 7 (glibc's choice of stores)",
            Stores::Memset,
        ),
        write("(b) the same, non-temporal SSE2 stores", Stores::Sse2Stream),
        write("(b) the same, non-temporal AVX2 stores", Stores::Avx2Stream),
        write(
            "(b) the same, non-temporal AVX-512 stores",
            Stores::Avx512Stream,
        ),
        write_huge(
            "(b) the same, into outputs advised huge pages (2 MiB), non-temporal AVX2",
            Stores::Avx2Stream,
        ),
        write_huge(
            "(b) the same, into outputs advised huge pages, memset of 7",
            Stores::Memset,
        ),
        Line {
            what: "(c) CRC-32 of the tile",
            run: Box::new(move || {
                std::hint::black_box(crc32fast::hash(&blob[64..]));
            }),
        },
        bare(
            "skeleton: (a0), each frame's output written after it, memset",
            Some(Stores::Memset),
        ),
        bare(
            "skeleton: (a0), the same, non-temporal SSE2",
            Some(Stores::Sse2Stream),
        ),
        bare(
            "skeleton: (a0), the same, non-temporal AVX2",
            Some(Stores::Avx2Stream),
        ),
        bare(
            "skeleton: (a0), the same, non-temporal AVX-512",
            Some(Stores::Avx512Stream),
        ),
        streamed(
            "skeleton: (a) 64 KiB, each slice's output written after it, non-temporal AVX2",
            64 << 10,
            Some(Stores::Avx2Stream),
        ),
        streamed(
            "skeleton: (a) 128 KiB, the same, non-temporal AVX2",
            128 << 10,
            Some(Stores::Avx2Stream),
        ),
        streamed(
            "skeleton: (a) 128 KiB, the same, ordinary stores",
            128 << 10,
            Some(Stores::Ordinary),
        ),
    ];
    let times = {
        let mut fs: Vec<&mut dyn FnMut()> = lines
            .iter_mut()
            .map(|l| &mut *l.run as &mut dyn FnMut())
            .collect();
        medians_dyn(reps, &mut fs)
    };
    print_bound(t, reps, &lines, &times);
}

/// Prints the table and the bound; `times[i]` is line `i`'s median.
fn print_bound(t: &Tile<'_>, reps: usize, lines: &[Line], times: &[Times]) {
    let f = ms(times[0]);
    println!(
        "\n### Tile decode: the lower bound beside the floor ({} cells, {} nonzeros, {} chunks, \
         1 thread, medians of {reps}, the lines run alternately)\n",
        t.header.n_cells,
        t.header.nnz,
        t.chunks.len()
    );
    println!("| piece | ms | / floor |\n|---|---|---|");
    let pick = |prefix: &str| -> f64 {
        lines
            .iter()
            .zip(times)
            .filter(|(l, _)| l.what.starts_with(prefix))
            .map(|(_, t)| ms(*t))
            .fold(f64::MAX, f64::min)
    };
    let (a, b, c) = (pick("(a"), pick("(b)"), pick("(c)"));
    let bound = a + b + c;
    for (l, t) in lines.iter().zip(times) {
        println!("| {} | {:.3} | {:.3} |", l.what, ms(*t), ms(*t) / f);
        if l.what.starts_with("(c)") {
            println!(
                "| **lower bound: min (a0, a) + min (b) + (c)** | **{bound:.3}** | **{:.3}** |",
                bound / f
            );
        }
    }
    let skeleton = pick("skeleton");
    println!(
        "\nlower bound / floor: **{:.3}** (goal <= 1.15: {}): the goal allows {:.3} ms beyond \
         the floor, writing the output alone takes {b:.3} ms. Best skeleton (zstd + the output \
         written, no decoding work) / floor: **{:.3}**; ours / best skeleton: {:.3}",
        bound / f,
        if bound / f <= 1.15 {
            "room left"
        } else {
            "**unreachable** by a decoder whose pieces add up"
        },
        0.15 * f,
        skeleton / f,
        pick("ours") / skeleton
    );
}
