//! Encode -> decode round trips over the shapes the format has to handle, checked against
//! the input and against an independent parser of the encoder's output.

mod common;

use common::*;
use deltacells::tile::{self, decode_tile, DecodeOptions, EncodeOptions, ValuesOut};
use deltacells::ErrorKind;

fn opts(n_chunks: u32, threads: usize) -> EncodeOptions {
    EncodeOptions {
        zstd_level: 3,
        n_chunks,
        threads,
    }
}

/// Encodes with 1 and 3 threads (which must agree byte for byte), then checks the blob with
/// the library decoder (int32 and float32, 1 and 4 threads) and the independent parser.
fn check(csr: &Csr, n_chunks: u32) -> Vec<u8> {
    let blob = tile::encode_tile(&csr.as_ref(), opts(n_chunks, 1)).unwrap();
    let blob3 = tile::encode_tile(&csr.as_ref(), opts(n_chunks, 3)).unwrap();
    assert!(blob == blob3, "output depends on the thread count");
    assert_eq!(
        &parse_independently(&blob),
        csr,
        "independent parser disagrees"
    );
    for threads in [1, 4] {
        assert_eq!(&decode_i32(&blob, threads).unwrap(), csr);
        let nnz = csr.indices.len();
        let mut indptr = vec![0i64; csr.n_cells() + 1];
        let mut indices = vec![0i32; nnz];
        let mut values = vec![0f32; nnz];
        let opts = DecodeOptions {
            threads,
            verify_crc: true,
        };
        let n = decode_tile(
            &blob,
            opts,
            &mut indptr,
            &mut indices,
            ValuesOut::F32(&mut values),
        )
        .unwrap();
        assert_eq!(n as usize, nnz);
        assert_eq!(indices, csr.indices);
        let expected: Vec<f32> = csr.values.iter().map(|&v| v as f32).collect();
        assert_eq!(values, expected);
    }
    let info = tile::inspect(&blob, true).unwrap();
    assert_eq!(info.n_cells as usize, csr.n_cells());
    assert_eq!(info.nnz as usize, csr.indices.len());
    assert_eq!(info.n_genes, csr.n_genes);
    assert_eq!(info.total_size as usize, blob.len());
    assert_eq!(
        info.n_chunks as usize,
        (n_chunks as usize).min(csr.n_cells())
    );
    blob
}

#[test]
fn one_by_one() {
    check(&Csr::from_rows(1, &[vec![(0, 7)]]), 8);
}

#[test]
fn empty_first_middle_last_cells() {
    let rows = vec![
        vec![],
        vec![(0, 1), (5, 2)],
        vec![],
        vec![],
        vec![(3, 9)],
        vec![],
    ];
    for chunks in [1, 2, 3, 6, 8] {
        check(&Csr::from_rows(10, &rows), chunks);
    }
}

#[test]
fn all_empty_tile() {
    let csr = Csr::from_rows(100, &[vec![], vec![], vec![]]);
    for chunks in [1, 3] {
        check(&csr, chunks);
    }
}

#[test]
fn zero_cell_tile() {
    let csr = Csr::from_rows(5, &[]);
    let blob = check(&csr, 8);
    assert_eq!(tile::inspect(&blob, true).unwrap().n_chunks, 0);
}

#[test]
fn chunk_counts() {
    let mut rng = Rng::new(1);
    let csr = random_csr(&mut rng, 1500, 3000, 40);
    for chunks in [1, 3, 8, 1000] {
        let blob = check(&csr, chunks);
        // Chunks are balanced by nonzeros: none holds more than twice its share plus a cell.
        let info = tile::inspect(&blob, true).unwrap();
        let share = csr.indices.len() as u64 / info.n_chunks as u64;
        let max_cell = csr.indptr.windows(2).map(|w| w[1] - w[0]).max().unwrap() as u64;
        for c in 0..info.n_chunks as usize {
            let n = get_u64(&blob, entry(c, 3)) - get_u64(&blob, entry(c, 2));
            assert!(
                n <= share + 2 * max_cell,
                "chunk {c} holds {n}, share {share}"
            );
        }
    }
}

#[test]
fn one_gene() {
    let rows = vec![vec![(0, 3)], vec![], vec![(0, 1)]];
    check(&Csr::from_rows(1, &rows), 2);
}

#[test]
fn many_genes_with_several_gap_exceptions_in_one_cell() {
    let n_genes = 300_000;
    // Cell 1 has gaps 70000, 150000 and 65536 (three exceptions), cell 2 starts far out.
    let rows = vec![
        vec![(1, 1), (2, 2)],
        vec![
            (3, 1),
            (70_003, 4),
            (220_003, 5),
            (220_004, 1),
            (285_540, 2),
        ],
        vec![(299_999, 8)],
        vec![(65_535, 1), (131_070, 1)],
    ];
    let csr = Csr::from_rows(n_genes, &rows);
    let blob = check(&csr, 2);
    let info = tile::inspect(&blob, true).unwrap();
    // 70000, 150000, 65536 (cell 1), 299999 (cell 2); 65535 twice in cell 3 is no exception.
    assert_eq!(info.n_exceptions, 4);
}

#[test]
fn counts_at_the_uint16_boundary_and_int32_max() {
    let rows = vec![
        vec![(0, 65535), (1, 65536), (2, i32::MAX), (3, 1)],
        vec![(7, 65537)],
    ];
    let csr = Csr::from_rows(8, &rows);
    let blob = check(&csr, 1);
    assert_eq!(tile::inspect(&blob, true).unwrap().n_exceptions, 3);
}

#[test]
fn level_19_and_default_level_round_trip() {
    let mut rng = Rng::new(7);
    let csr = random_csr(&mut rng, 200, 5000, 100);
    for level in [0, 1, 19] {
        let o = EncodeOptions {
            zstd_level: level,
            n_chunks: 4,
            threads: 2,
        };
        let blob = tile::encode_tile(&csr.as_ref(), o).unwrap();
        assert_eq!(decode_i32(&blob, 2).unwrap(), csr);
    }
}

#[test]
fn golden_tile_assembled_from_the_format_text_decodes() {
    // Built by tests/common (not the library's encoder), with an unusual but valid layout:
    // a chunk holding only empty cells, and exceptions of both kinds.
    let rows = vec![
        vec![(2, 5), (90_000, 70_000)],
        vec![],
        vec![],
        vec![(0, 1), (1, 65535), (200_000, 3)],
    ];
    let csr = Csr::from_rows(250_000, &rows);
    let chunks = [
        raw_chunk(&csr, 0, 1),
        raw_chunk(&csr, 1, 3),
        raw_chunk(&csr, 3, 4),
    ];
    let blob = assemble(csr.n_genes, &csr.indptr, &chunks);
    assert_eq!(decode_i32(&blob, 1).unwrap(), csr);
    assert_eq!(decode_i32(&blob, 3).unwrap(), csr);
    assert_eq!(tile::inspect(&blob, true).unwrap().n_exceptions, 3);
}

#[test]
fn output_buffers_too_small_report_the_needed_size() {
    let csr = Csr::from_rows(10, &[vec![(1, 1), (2, 2)], vec![(3, 3)]]);
    let blob = tile::encode_tile(&csr.as_ref(), opts(2, 1)).unwrap();
    let mut indptr = vec![0i64; 3];
    let mut indices = vec![0i32; 2];
    let mut values = vec![0i32; 2];
    let e = decode_tile(
        &blob,
        DecodeOptions::default(),
        &mut indptr,
        &mut indices,
        ValuesOut::I32(&mut values),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: 3 });
    let mut short_indptr = vec![0i64; 2];
    let mut indices = vec![0i32; 3];
    let mut values = vec![0i32; 3];
    let e = decode_tile(
        &blob,
        DecodeOptions::default(),
        &mut short_indptr,
        &mut indices,
        ValuesOut::I32(&mut values),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BufferTooSmall { needed: 3 });
}

/// Every kernel path (scalar, SSE2, AVX2 where the CPU has them) decodes the same tiles to
/// the same output, including long cells (the streaming-store path) and gap exceptions.
#[test]
fn every_kernel_path_decodes_the_same() {
    use deltacells::tile::{active_path, force_path, KernelPath};
    let mut rng = Rng::new(31);
    let csrs = [
        random_csr(&mut rng, 300, 70_000, 30),
        random_csr(&mut rng, 40, 38_000, 6_000),
        random_csr(&mut rng, 500, 200, 15),
    ];
    let paths: Vec<KernelPath> = [KernelPath::Scalar, KernelPath::Sse2, KernelPath::Avx2]
        .into_iter()
        .filter(|p| p.available())
        .collect();
    assert!(paths.contains(&KernelPath::Scalar));
    for csr in &csrs {
        let blob = tile::encode_tile(&csr.as_ref(), opts(3, 1)).unwrap();
        for &p in &paths {
            force_path(Some(p));
            assert_eq!(active_path(), p);
            for threads in [1, 2] {
                assert_eq!(&decode_i32(&blob, threads).unwrap(), csr, "{p:?}");
            }
        }
        force_path(None);
    }
}
