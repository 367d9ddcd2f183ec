//! Parquet bytes checked before the parquet crate decodes them: footers and page headers are
//! walked ([`footer`]) so that no damaged Thrift structure reaches the crate's decoder, whose
//! own skipping of unknown fields can loop for minutes (docs/reliability.md §1). Used by the
//! dataset's obs shards and `var.parquet` ([`arrow_metadata`], [`chunks::CheckedChunks`])
//! and by ChromData's Parquet files (their footers in two steps, their pages in memory).

pub(crate) mod chunks;
pub(crate) mod footer;

use std::sync::Arc;

use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::reader::ChunkReader;

use crate::error::{Error, Result};
use footer::FooterMap;

/// The footer of the Parquet file `source` (plaintext, `PAR1` trailer), walked, then
/// decoded (contained: docs/reliability.md §1) with `options`; no page index is read.
/// Any fault is a format error "`what`: not a readable parquet file (...)".
pub(crate) fn arrow_metadata<R: ChunkReader>(
    source: &R,
    what: &str,
    options: ArrowReaderOptions,
) -> Result<ArrowReaderMetadata> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::format(format!("{what}: not a readable parquet file ({e})"))
    };
    let len = source.len();
    let last8 = if len >= 12 {
        source.get_bytes(len - 8, 8).map_err(|e| unreadable(&e))?
    } else {
        bytes::Bytes::new()
    };
    let (at, meta_len) = footer_at(len, &last8).map_err(|e| unreadable(&e))?;
    let footer = source.get_bytes(at, meta_len).map_err(|e| unreadable(&e))?;
    FooterMap::scan(&footer).map_err(|e| unreadable(&e.message))?;
    crate::contain::decoding(what, || {
        let meta = ParquetMetaDataReader::decode_metadata_with_options(&footer, None)
            .map_err(|e| unreadable(&e))?;
        ArrowReaderMetadata::try_new(Arc::new(meta), options).map_err(|e| unreadable(&e))
    })
}

/// Where the footer of a Parquet file of `len` bytes lies, `(offset, length)`, from `tail`,
/// the file's last bytes (any number; only the last 8, footer length and `PAR1`, are
/// read); the error names the rule broken (too short, no plaintext `PAR1` trailer, a
/// footer longer than the file).
pub(crate) fn footer_at(len: u64, tail: &[u8]) -> std::result::Result<(u64, usize), String> {
    if len < 12 {
        return Err(format!("{len} bytes, too short for a Parquet file"));
    }
    let n = tail.len();
    if n < 8 || &tail[n - 4..] != b"PAR1" {
        return Err("the file does not end with PAR1 (encrypted footers are not supported)".into());
    }
    let meta_len = u32::from_le_bytes([tail[n - 8], tail[n - 7], tail[n - 6], tail[n - 5]]);
    let meta_len = u64::from(meta_len);
    if meta_len + 12 > len {
        return Err(format!(
            "footer of {meta_len} bytes in a file of {len} bytes"
        ));
    }
    Ok((len - 8 - meta_len, meta_len as usize))
}

#[cfg(test)]
mod tests {
    use super::chunks::{check_page_headers, chunk_range, CheckedChunks};
    use super::*;
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::{ArrowWriter, ProjectionMask};
    use parquet::file::properties::WriterProperties;

    /// Two row groups of an int64 and a string column.
    fn file() -> (Vec<u8>, RecordBatch) {
        let batch = RecordBatch::try_from_iter([
            (
                "a",
                Arc::new(Int64Array::from_iter_values(0..1000)) as arrow_array::ArrayRef,
            ),
            (
                "b",
                Arc::new(StringArray::from_iter_values(
                    (0..1000).map(|i| format!("v{}", i % 37)),
                )) as _,
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(600))
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(100)
            .build();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        (out, batch)
    }

    /// The thrift header of an unknown field (id 100) that is a list announcing 2^31 - 1
    /// booleans and holding none.
    const BILLIONS_OF_BOOLEANS: [u8; 9] = [0x09, 0xC8, 0x01, 0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0x07];

    #[test]
    fn the_trailer_locates_the_footer_or_names_the_rule_broken() {
        let (file, _) = file();
        let len = file.len() as u64;
        let (at, n) = footer_at(len, &file[file.len() - 8..]).unwrap();
        // The bytes found decode, on their own, to the file's metadata (2 row groups).
        let footer = &file[at as usize..at as usize + n];
        let meta = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(footer).unwrap();
        assert_eq!(meta.num_row_groups(), 2);
        // Only the last 8 bytes count, however many are given.
        assert_eq!(footer_at(len, &file[file.len() - 100..]), Ok((at, n)));
        assert!(footer_at(11, b"")
            .unwrap_err()
            .contains("11 bytes, too short"));
        let mut bad = file[file.len() - 8..].to_vec();
        bad[7] = b'E';
        assert!(footer_at(len, &bad)
            .unwrap_err()
            .contains("does not end with PAR1"));
        let longer = (len as u32 - 11).to_le_bytes();
        bad = [&longer[..], b"PAR1"].concat();
        let e = footer_at(len, &bad).unwrap_err();
        assert!(
            e.contains(&format!("footer of {} bytes in a file of {len}", len - 11)),
            "{e}"
        );
        assert_eq!(
            footer_at(
                len,
                &[&(len as u32 - 12).to_le_bytes()[..], b"PAR1"].concat()
            ),
            Ok((4, len as usize - 12))
        );
    }

    #[test]
    fn a_valid_file_reads_through_the_checks() {
        let (file, batch) = file();
        let source = Bytes::from(file);
        let meta = arrow_metadata(&source, "f", ArrowReaderOptions::new()).unwrap();
        assert_eq!(meta.metadata().num_row_groups(), 2);
        let chunks =
            CheckedChunks::fetch(&source, meta.metadata(), &ProjectionMask::all(), "f").unwrap();
        let got: Vec<RecordBatch> =
            ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, meta)
                .build()
                .unwrap()
                .collect::<std::result::Result<_, _>>()
                .unwrap();
        let got = arrow_select::concat::concat_batches(&batch.schema(), &got).unwrap();
        assert_eq!(got, batch);
    }

    /// A footer with an unknown field announcing billions of booleans (the parquet crate
    /// loops over them without reading) is refused by the walk, naming the fault.
    #[test]
    fn a_footer_announcing_more_values_than_bytes_is_refused() {
        let (file, _) = file();
        let n = file.len();
        let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
        let footer = &file[n - 8 - len..n - 8];
        assert_eq!(footer.last(), Some(&0));
        let mut bad = file[..n - 8 - len].to_vec();
        bad.extend_from_slice(&footer[..len - 1]);
        bad.extend_from_slice(&BILLIONS_OF_BOOLEANS);
        bad.push(0);
        bad.extend_from_slice(&((len + BILLIONS_OF_BOOLEANS.len()) as u32).to_le_bytes());
        bad.extend_from_slice(b"PAR1");
        let e =
            arrow_metadata(&Bytes::from(bad), "shard 0", ArrowReaderOptions::new()).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Format);
        assert!(
            e.message
                .starts_with("shard 0: not a readable parquet file (invalid Parquet footer")
                && e.message.contains("collection size past the end"),
            "{e}"
        );
        // Truncated files and a wrong trailer are refused too, never a panic.
        for cut in [0, 4, 11, n - 1] {
            assert!(
                arrow_metadata(&Bytes::from(file[..cut].to_vec()), "f", Default::default())
                    .is_err()
            );
        }
    }

    /// Every page header of a column chunk is walked: a valid chunk passes, one whose header
    /// holds the same unknown list, or whose last page runs past the chunk, is refused.
    #[test]
    fn page_headers_are_walked() {
        let (file, _) = file();
        let source = Bytes::from(file.clone());
        let meta = arrow_metadata(&source, "f", ArrowReaderOptions::new()).unwrap();
        for rg in meta.metadata().row_groups() {
            for col in rg.columns() {
                let (s, l) = chunk_range(col).unwrap();
                let chunk = &file[s as usize..(s + l) as usize];
                check_page_headers(chunk).unwrap();
                let (h, size) = super::footer::page_header(chunk).unwrap();
                assert!(h > 0 && h + size <= chunk.len());
                // The unknown field just before the header's stop byte.
                let mut bad = chunk[..h - 1].to_vec();
                bad.extend_from_slice(&BILLIONS_OF_BOOLEANS);
                bad.extend_from_slice(&chunk[h - 1..]);
                let e = check_page_headers(&bad).unwrap_err();
                assert!(
                    e.starts_with(
                        "page at byte 0 of the column chunk: invalid Parquet page header"
                    ) && e.contains("collection size past the end"),
                    "{e}"
                );
                let e = check_page_headers(&chunk[..chunk.len() - 1]).unwrap_err();
                assert!(e.contains("run past the chunk's"), "{e}");
            }
        }
    }
}
