//! One test per reader check: corrupt a valid tile in exactly one way (re-sealing the CRC so
//! that the structural check is the one that fires) and expect exactly that status.

mod common;

use common::*;
use deltacells::tile::{self, EncodeOptions};
use deltacells::ErrorKind;

/// A valid tile: 3 chunks, both kinds of exceptions, an empty cell.
fn base_csr() -> Csr {
    let rows = vec![
        vec![(0, 1), (70_000, 3)],
        vec![(5, 70_000), (6, 2)],
        vec![],
        vec![(1, 1), (2, 65_535), (150_000, 1)],
        vec![(9, 100_000)],
        vec![(3, 4)],
    ];
    Csr::from_rows(200_000, &rows)
}

fn base() -> Vec<u8> {
    let o = EncodeOptions {
        zstd_level: 3,
        n_chunks: 3,
        threads: 1,
    };
    tile::encode_tile(&base_csr().as_ref(), o).unwrap()
}

/// Both inspect-level parsing and full decoding must fail with `kind`, message containing `msg`.
fn expect(blob: &[u8], kind: ErrorKind, msg: &str) {
    let e = decode_i32(blob, 1).unwrap_err();
    assert_eq!(e.kind, kind, "message: {}", e.message);
    assert!(
        e.message.contains(msg),
        "message {:?} does not mention {msg:?}",
        e.message
    );
    // The same with parallel decoding.
    let e2 = decode_i32(blob, 3).unwrap_err();
    assert_eq!(e2.kind, kind);
}

/// Only decoding (not inspect) must fail: the problem is inside a compressed stream.
fn expect_decode(blob: &[u8], kind: ErrorKind, msg: &str) {
    tile::inspect(blob, true).expect("structure must be valid");
    expect(blob, kind, msg);
}

fn sealed(mut b: Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    f(&mut b);
    reseal(&mut b);
    b
}

#[test]
fn valid_base_decodes() {
    assert_eq!(decode_i32(&base(), 1).unwrap(), base_csr());
    assert_eq!(tile::inspect(&base(), true).unwrap().n_exceptions, 4);
}

#[test]
fn shorter_than_header() {
    expect(
        &base()[..63],
        ErrorKind::Format,
        "shorter than the 64-byte header",
    );
    expect(&[], ErrorKind::Format, "shorter");
}

#[test]
fn bad_magic() {
    let mut b = base();
    b[0] = b'X';
    expect(&b, ErrorKind::Format, "magic");
}

#[test]
fn unknown_version() {
    expect(
        &sealed(base(), |b| put_u32(b, 8, 3)),
        ErrorKind::Unsupported,
        "version 3",
    );
    expect(
        &sealed(base(), |b| put_u32(b, 8, 1)),
        ErrorKind::Unsupported,
        "version 1",
    );
}

#[test]
fn unknown_flags() {
    expect(
        &sealed(base(), |b| put_u32(b, 12, 4)),
        ErrorKind::Unsupported,
        "flags",
    );
}

#[test]
fn reserved_not_zero() {
    expect(
        &sealed(base(), |b| put_u32(b, 60, 1)),
        ErrorKind::Format,
        "reserved",
    );
}

#[test]
fn object_size_differs_from_total_size() {
    let b = base();
    expect(&b[..b.len() - 1], ErrorKind::Format, "truncated");
    let mut longer = b.clone();
    longer.push(0);
    expect(&longer, ErrorKind::Format, "trailing");
}

#[test]
fn n_genes_out_of_range() {
    expect(
        &sealed(base(), |b| put_u32(b, 32, 0)),
        ErrorKind::Format,
        "n_genes",
    );
    expect(
        &sealed(base(), |b| put_u32(b, 32, (1u32 << 31) + 1)),
        ErrorKind::Format,
        "n_genes",
    );
}

#[test]
fn crc_mismatch() {
    let mut b = base();
    let last = b.len() - 1;
    b[last] ^= 0x40;
    expect(&b, ErrorKind::Checksum, "CRC-32");
    // Without verification the damage inside a frame is still caught (or decodes to data
    // that passes every check), never a crash.
    let t = tile::Tile::parse(&b, false);
    if let Ok(t) = t {
        let n = t.header.nnz as usize;
        let mut ip = vec![0; t.header.n_cells as usize + 1];
        let (mut ix, mut v) = (vec![0; n], vec![0; n]);
        let _ = tile::decode_parsed(&t, 1, &mut ip, &mut ix, tile::ValuesOut::I32(&mut v));
    }
}

#[test]
fn chunk_table_past_the_end() {
    expect(
        &sealed(base(), |b| put_u32(b, 36, 1 << 30)),
        ErrorKind::Format,
        "chunk table",
    );
}

#[test]
fn indptr_offset_unaligned_or_inside_the_table() {
    let b = base();
    let off = get_u64(&b, 40);
    expect(
        &sealed(b.clone(), |b| put_u64(b, 40, off + 4)),
        ErrorKind::Format,
        "multiple of 8",
    );
    expect(
        &sealed(b, |b| put_u64(b, 40, off - 8)),
        ErrorKind::Format,
        "inside the chunk table",
    );
}

#[test]
fn header_claiming_huge_counts_fails_cleanly() {
    // 2^60 cells: the indptr cannot fit.
    expect(
        &sealed(base(), |b| put_u64(b, 16, 1 << 60)),
        ErrorKind::Format,
        "indptr",
    );
    // u64::MAX cells: no overflow in the size arithmetic.
    expect(
        &sealed(base(), |b| put_u64(b, 16, u64::MAX)),
        ErrorKind::Format,
        "indptr",
    );
    // 2^60 nonzeros, consistently declared in header, chunk and indptr: refused.
    let blob = assemble(
        10,
        &[0, 1 << 60],
        &[RawChunk {
            cell_lo: 0,
            cell_hi: 1,
            gaps: vec![],
            vals: vec![],
            vexc: vec![],
            gexc: vec![],
        }],
    );
    expect(&blob, ErrorKind::Format, "fewer than 2^32");
    // 2^31 nonzeros with zstd frame headers claiming the 2^32 bytes that needs: refused
    // before anything is allocated.
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0xC0, 0x00];
    frame.extend_from_slice(&(1u64 << 32).to_le_bytes());
    frame.extend_from_slice(&[0x01, 0x00, 0x00]); // last, raw, 0 bytes
    let chunk = RawChunk {
        cell_lo: 0,
        cell_hi: 1,
        gaps: frame.clone(),
        vals: frame,
        vexc: vec![],
        gexc: vec![],
    };
    let blob = assemble(10, &[0, 1 << 31], &[chunk]);
    expect(
        &blob,
        ErrorKind::Format,
        "more than a 17-byte zstd frame can hold",
    );
}

#[test]
fn zero_cells_with_chunks_or_cells_without_chunks() {
    let zero =
        tile::encode_tile(&Csr::from_rows(5, &[]).as_ref(), EncodeOptions::default()).unwrap();
    let mut z = zero.clone();
    // Declare one chunk: move the indptr after a (zero) table entry.
    put_u32(&mut z, 36, 1);
    z.splice(64..64, vec![0u8; 96]);
    let total = z.len() as u64;
    put_u64(&mut z, 40, 64 + 96);
    put_u64(&mut z, 48, total);
    reseal(&mut z);
    expect(&z, ErrorKind::Format, "zero cells has zero chunks");
    expect(
        &sealed(base(), |b| put_u32(b, 36, 0)),
        ErrorKind::Format,
        "has no chunks",
    );
}

#[test]
fn chunks_not_contiguous() {
    let b = base();
    // Chunk 1 starts one cell later than chunk 0 ends.
    let lo = get_u64(&b, entry(1, 0));
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(1, 0), lo + 1)),
        ErrorKind::Format,
        "previous chunk ended",
    );
    // First chunk not starting at 0.
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(0, 2), 1)),
        ErrorKind::Format,
        "previous chunk ended",
    );
    // Last chunk ending before n_cells.
    let hi = get_u64(&b, entry(2, 1));
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(2, 1), hi - 1)),
        ErrorKind::Format,
        "chunks end at cell",
    );
    // Cell range beyond n_cells.
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(2, 1), hi + 1)),
        ErrorKind::Format,
        "n_cells",
    );
    // Nonzero range beyond nnz.
    let nz = get_u64(&b, entry(2, 3));
    expect(
        &sealed(b, |b| put_u64(b, entry(2, 3), nz + 1)),
        ErrorKind::Format,
        "(nnz)",
    );
}

#[test]
fn chunk_of_2_pow_32_nonzeros() {
    let b = base();
    let n_chunks = 3;
    let big = get_u64(&b, entry(n_chunks - 1, 2)) + (1u64 << 32);
    let b = sealed(b, |b| {
        put_u64(b, 24, big);
        put_u64(b, entry(n_chunks - 1, 3), big);
    });
    expect(&b, ErrorKind::Format, "fewer than 2^32");
}

#[test]
fn stream_unaligned_outside_or_not_one_frame() {
    let b = base();
    let off = get_u64(&b, entry(0, 4));
    let len = get_u64(&b, entry(0, 5));
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(0, 4), off + 1)),
        ErrorKind::Format,
        "8-byte boundary",
    );
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(0, 4), 64)),
        ErrorKind::Format,
        "stream area",
    );
    expect(
        &sealed(b.clone(), |b| {
            let n = b.len() as u64;
            put_u64(b, entry(0, 5), n)
        }),
        ErrorKind::Format,
        "stream area",
    );
    // Length shorter than the frame: truncated frame.
    expect(
        &sealed(b.clone(), |b| put_u64(b, entry(0, 5), len - 1)),
        ErrorKind::Format,
        "zstd frame",
    );
    // Not a zstd frame at all.
    expect(
        &sealed(b.clone(), |b| b[off as usize] ^= 0xff),
        ErrorKind::Format,
        "not a zstd frame",
    );
    // A gaps/vals stream of length 0 is not a frame.
    expect(
        &sealed(b, |b| put_u64(b, entry(0, 7), 0)),
        ErrorKind::Format,
        "not a zstd frame",
    );
}

fn chunks_of(csr: &Csr) -> Vec<RawChunk> {
    vec![
        raw_chunk(csr, 0, 2),
        raw_chunk(csr, 2, 4),
        raw_chunk(csr, 4, 6),
    ]
}

#[test]
fn frame_declaring_the_wrong_size() {
    let csr = base_csr();
    let mut chunks = chunks_of(&csr);
    chunks[1].vals = frame(&[0u8; 10]); // chunk 1 has 3 nonzeros: 6 bytes expected
    expect(
        &assemble(csr.n_genes, &csr.indptr, &chunks),
        ErrorKind::Format,
        "needs exactly 6",
    );
}

#[test]
fn frame_decompressing_to_a_size_other_than_declared() {
    // A frame header declaring 6 bytes whose only (raw) block holds 4.
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x20, 6];
    f.extend_from_slice(&[(4 << 3) | 1, 0, 0]);
    f.extend_from_slice(&[1, 2, 3, 4]);
    let csr = base_csr();
    let mut chunks = chunks_of(&csr);
    chunks[1].gaps = f;
    expect_decode(
        &assemble(csr.n_genes, &csr.indptr, &chunks),
        ErrorKind::Format,
        "gaps frame",
    );
}

#[test]
fn indptr_invariants() {
    let b = base();
    let off = get_u64(&b, 40) as usize;
    expect(
        &sealed(b.clone(), |b| put_u64(b, off, 1)),
        ErrorKind::Format,
        "indptr[0]",
    );
    // Decreasing between cells 2 and 3 (cell 2 is empty): indptr[3] < indptr[2].
    let v2 = get_u64(&b, off + 16);
    expect(
        &sealed(b.clone(), |b| put_u64(b, off + 24, v2 - 1)),
        ErrorKind::Format,
        "decreases",
    );
    let n_cells = get_u64(&b, 16) as usize;
    let last = get_u64(&b, off + 8 * n_cells);
    let before = get_u64(&b, off + 8 * (n_cells - 1));
    assert!(last > before);
    expect(
        &sealed(b.clone(), |b| put_u64(b, off + 8 * n_cells, last - 1)),
        ErrorKind::Format,
        "indptr[n_cells]",
    );
    // Moving an inner boundary (cell 1 gets one nonzero more, cell 0 one less) keeps indptr
    // monotone but disagrees with chunk 0's nonzero range only if it is a chunk boundary;
    // chunk boundaries are at cells 0, lo1, lo2.
    let lo1 = get_u64(&b, entry(1, 0)) as usize;
    let v = get_u64(&b, off + 8 * lo1);
    let prev = get_u64(&b, off + 8 * (lo1 - 1));
    assert!(v > prev);
    expect(
        &sealed(b, |b| put_u64(b, off + 8 * lo1, v - 1)),
        ErrorKind::Format,
        "disagrees",
    );
}

#[test]
fn gene_index_reaching_n_genes() {
    // Shrink n_genes below the largest index.
    expect(
        &sealed(base(), |b| put_u32(b, 32, 150_000)),
        ErrorKind::Format,
        ">= n_genes",
    );
    // Without exceptions, through the plain prefix sum.
    let csr = Csr::from_rows(10, &[vec![(3, 1), (9, 1)]]);
    let b = tile::encode_tile(&csr.as_ref(), EncodeOptions::default()).unwrap();
    expect(
        &sealed(b, |b| put_u32(b, 32, 9)),
        ErrorKind::Format,
        "gene index 9 >= n_genes 9",
    );
}

fn with_exceptions(vexc: Option<Vec<u8>>, gexc: Option<Vec<u8>>, chunk: usize) -> Vec<u8> {
    let csr = base_csr();
    let mut chunks = chunks_of(&csr);
    if let Some(v) = vexc {
        chunks[chunk].vexc = v;
    }
    if let Some(g) = gexc {
        chunks[chunk].gexc = g;
    }
    assemble(csr.n_genes, &csr.indptr, &chunks)
}

#[test]
fn exception_frame_sizes() {
    // Not a multiple of 8.
    let b = with_exceptions(Some(frame(&[0u8; 12])), None, 0);
    expect(&b, ErrorKind::Format, "8*k bytes");
    // More exceptions than nonzeros (chunk 0 has 4 nonzeros).
    let five: Vec<(u32, u32)> = (0..5).map(|p| (p, 70_000)).collect();
    let b = with_exceptions(Some(frame(&exception_raw(&five))), None, 0);
    expect(&b, ErrorKind::Format, "k <= 4");
}

#[test]
fn exception_positions() {
    // Chunk 0: cells 0-1, nonzeros (0,1) (70000,3) | (5,70000) (6,2): value exception at 2.
    let b = with_exceptions(Some(frame(&exception_raw(&[(4, 70_000)]))), None, 0);
    expect_decode(&b, ErrorKind::Format, "not below the chunk's 4 nonzeros");
    let b = with_exceptions(
        Some(frame(&exception_raw(&[(2, 70_000), (2, 70_000)]))),
        None,
        0,
    );
    expect_decode(&b, ErrorKind::Format, "strictly increase");
    let b = with_exceptions(None, Some(frame(&exception_raw(&[(1, 10), (0, 10)]))), 0);
    expect_decode(&b, ErrorKind::Format, "strictly increase");
}

#[test]
fn value_exception_payloads() {
    let b = with_exceptions(Some(frame(&exception_raw(&[(2, 65_535)]))), None, 0);
    expect_decode(&b, ErrorKind::Format, "not in 65536");
    let b = with_exceptions(Some(frame(&exception_raw(&[(2, 1 << 31)]))), None, 0);
    expect_decode(&b, ErrorKind::Format, "not in 65536");
    // Position 3 holds a stored count of 2, not the 65535 placeholder.
    let b = with_exceptions(
        Some(frame(&exception_raw(&[(2, 70_000), (3, 70_000)]))),
        None,
        0,
    );
    expect_decode(&b, ErrorKind::Format, "stored count there is not 65535");
}

#[test]
fn gap_exception_payloads() {
    // Chunk 0's gap exception is at position 1 (gap 70000 = 65535 + 4465).
    let b = with_exceptions(None, Some(frame(&exception_raw(&[(1, 0)]))), 0);
    expect_decode(&b, ErrorKind::Format, "gap excess 0");
    let b = with_exceptions(None, Some(frame(&exception_raw(&[(1, 200_000)]))), 0);
    expect_decode(&b, ErrorKind::Format, "gap excess 200000");
    // Valid payload range, but the resulting index reaches n_genes.
    let b = with_exceptions(None, Some(frame(&exception_raw(&[(1, 199_999)]))), 0);
    expect_decode(&b, ErrorKind::Format, ">= n_genes");
    // Position 0 stores gap 0, not the placeholder.
    let b = with_exceptions(None, Some(frame(&exception_raw(&[(0, 5), (1, 4465)]))), 0);
    expect_decode(&b, ErrorKind::Format, "stored gap there is not 65535");
}

#[test]
fn exception_frame_that_is_not_zstd() {
    let b = with_exceptions(Some(vec![1, 2, 3, 4, 5, 6, 7, 8]), None, 0);
    expect(&b, ErrorKind::Format, "vexc frame");
}
