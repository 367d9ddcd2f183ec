//! What the encoder refuses, its exception policy, and property tests of the round trip.

mod common;

use common::*;
use deltacells::tile::{self, exception_limit, EncodeOptions};
use deltacells::ErrorKind;
use proptest::prelude::*;

fn encode(csr: &Csr) -> deltacells::Result<Vec<u8>> {
    tile::encode_tile(
        &csr.as_ref(),
        EncodeOptions {
            zstd_level: 1,
            n_chunks: 4,
            threads: 2,
        },
    )
}

fn refused(csr: &Csr, kind: ErrorKind, msg: &str) {
    let e = encode(csr).unwrap_err();
    assert_eq!(e.kind, kind, "{}", e.message);
    assert!(e.message.contains(msg), "{:?} lacks {msg:?}", e.message);
}

#[test]
fn refuses_bad_csr() {
    let ia = ErrorKind::InvalidArgument;
    refused(
        &Csr::from_rows(10, &[vec![(3, 1), (2, 1)]]),
        ia,
        "does not increase",
    );
    refused(
        &Csr::from_rows(10, &[vec![(3, 1), (3, 1)]]),
        ia,
        "does not increase",
    );
    refused(&Csr::from_rows(10, &[vec![(10, 1)]]), ia, "outside 0..10");
    refused(&Csr::from_rows(10, &[vec![(-1, 1)]]), ia, "outside 0..10");
    refused(
        &Csr::from_rows(10, &[vec![], vec![(1, 0)]]),
        ia,
        "row 1: count 0",
    );
    refused(&Csr::from_rows(10, &[vec![(1, -5)]]), ia, "count -5");
    refused(&Csr::from_rows(0, &[vec![]]), ia, "n_genes");
    let mut c = Csr::from_rows(10, &[vec![(1, 1)], vec![(2, 1)]]);
    c.indptr[1] = 3;
    refused(&c, ia, "decreases");
    let mut c = Csr::from_rows(10, &[vec![(1, 1)]]);
    c.indptr[0] = 1;
    refused(&c, ia, "indptr[0]");
    let mut c = Csr::from_rows(10, &[vec![(1, 1)]]);
    c.values.clear();
    refused(&c, ia, "only 1 indices / 0 values");
    let c = Csr::from_rows(10, &[vec![(1, 1)]]);
    let e = tile::encode_tile(
        &c.as_ref(),
        EncodeOptions {
            zstd_level: 99,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, ia);
}

#[test]
fn exception_limit_is_max_1024_or_nnz_over_200() {
    assert_eq!(exception_limit(0), 1024);
    assert_eq!(exception_limit(204_800), 1024);
    assert_eq!(exception_limit(1_000_000), 5000);
    // Exactly at the limit passes, one more is refused; for both kinds.
    for (count_kind, big) in [("count", true), ("gap", false)] {
        for extra in [0, 1] {
            let rows: Vec<Vec<(i32, i32)>> = (0..1024 + extra)
                .map(|_| {
                    if big {
                        vec![(0, 70_000)]
                    } else {
                        vec![(70_000, 1)]
                    }
                })
                .collect();
            let csr = Csr::from_rows(80_000, &rows);
            match (extra, encode(&csr)) {
                (0, Ok(blob)) => assert_eq!(decode_i32(&blob, 2).unwrap(), csr),
                (1, Err(e)) => {
                    assert_eq!(e.kind, ErrorKind::Limit);
                    assert!(e.message.contains(count_kind), "{}", e.message);
                }
                (_, r) => panic!("{count_kind} +{extra}: unexpected {:?}", r.map(|b| b.len())),
            }
        }
    }
}

fn csr_strategy() -> impl Strategy<Value = Csr> {
    (1u32..200_000, 0usize..40).prop_flat_map(|(n_genes, n_cells)| {
        let row = prop::collection::btree_map(
            0..n_genes as i32,
            prop_oneof![
                20 => 1i32..100,
                2 => 1i32..=65_536,
                1 => 65_530i32..=i32::MAX,
            ],
            0..30,
        );
        prop::collection::vec(row, n_cells).prop_map(move |rows| {
            let rows: Vec<Vec<(i32, i32)>> =
                rows.into_iter().map(|r| r.into_iter().collect()).collect();
            Csr::from_rows(n_genes, &rows)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// encode -> decode is the identity on canonical CSR, for any chunk and thread count,
    /// and the bytes do not depend on the thread count.
    #[test]
    fn encode_decode_is_identity(csr in csr_strategy(), chunks in 1u32..12, threads in 1usize..4) {
        let o = |t| EncodeOptions { zstd_level: 1, n_chunks: chunks, threads: t };
        let blob = tile::encode_tile(&csr.as_ref(), o(threads)).unwrap();
        prop_assert_eq!(&blob, &tile::encode_tile(&csr.as_ref(), o(1)).unwrap());
        prop_assert_eq!(&decode_i32(&blob, threads).unwrap(), &csr);
        prop_assert_eq!(&parse_independently(&blob), &csr);
    }

    /// Arbitrary byte damage never panics: it is either caught or decodes consistently.
    #[test]
    fn damaged_tiles_never_panic(csr in csr_strategy(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), crc in any::<bool>()) {
        let mut blob = tile::encode_tile(&csr.as_ref(), EncodeOptions { zstd_level: 1, n_chunks: 3, threads: 1 }).unwrap();
        for (i, x) in flips {
            let at = i.index(blob.len());
            blob[at] ^= x | 1;
        }
        if !crc {
            reseal(&mut blob);
        }
        if let Ok(t) = tile::Tile::parse(&blob, true) {
            // Allocation is bounded by the blob size (zstd's maximal expansion).
            prop_assert!(t.header.nnz <= 20_000 * blob.len() as u64);
            let _ = decode_i32(&blob, 2);
        }
    }
}
