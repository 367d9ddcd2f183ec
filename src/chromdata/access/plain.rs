//! Fixed-width column chunks stored as PLAIN pages without nulls, handed out page by page
//! as the values' bytes, without the parquet crate's decoder.
//!
//! Why: coordinates (x, y, z, layers; spec §10.1 and §6.2: never null, not
//! dictionary-encoded in coords partitions) are most of a get_chrom's bytes. Through the
//! crate, each page's values were copied from the decompressed page into a fresh Arrow
//! array, and from it into the result's column; here they are copied once, from the
//! decompressed page into place. Anything else (a dictionary, another encoding, a null, a
//! v2 page, a size that does not add up) makes the chunk "not plain", and the caller
//! decodes it through the crate, which also reports what is wrong with a damaged one.

use arrow_schema::DataType;
use parquet::basic::{Compression, Type as PhysicalType};

use super::pages::{pooled_buffer, with_zstd, Pooled};
use crate::error::Result;
use crate::parquet_meta::footer::{page_info, PageInfo};

/// Thrift enum values of the page header (parquet.thrift).
const DATA_PAGE: i64 = 0;
const PLAIN: i64 = 0;
const RLE: i64 = 3;

/// The byte width of an Arrow `t` whose values are the PLAIN bytes of Parquet `physical`
/// values as they are (little-endian, same width, same meaning); `None` for any other pair.
pub(crate) fn plain_width(physical: PhysicalType, t: &DataType) -> Option<usize> {
    if cfg!(target_endian = "big") {
        return None;
    }
    match (physical, t) {
        (PhysicalType::INT32, DataType::Int32) | (PhysicalType::FLOAT, DataType::Float32) => {
            Some(4)
        }
        (PhysicalType::INT64, DataType::Int64) | (PhysicalType::DOUBLE, DataType::Float64) => {
            Some(8)
        }
        _ => None,
    }
}

/// How a chunk was handled by [`decode_plain_chunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plain {
    /// Every page was handed out; the values cover the chunk's rows.
    Done,
    /// Not stored as this reader needs (see the module comment); some pages may have
    /// been handed out before it was found (a null in a later page).
    NotPlain,
}

/// A chunk's pages as walked: (offset of the page's bytes after its header, header).
fn plain_pages(chunk: &[u8], max_def: i16, rows: usize) -> Option<Vec<(usize, PageInfo)>> {
    let mut pages = Vec::new();
    let (mut pos, mut values) = (0usize, 0usize);
    while pos < chunk.len() {
        let p = page_info(&chunk[pos..]).ok()?;
        let d = p.data?;
        let plain = p.page_type == Some(DATA_PAGE)
            && d.encoding == Some(PLAIN)
            && (max_def == 0 || d.def_level_encoding == Some(RLE));
        if !plain {
            return None;
        }
        let body = pos.checked_add(p.header)?;
        pos = body.checked_add(p.size).filter(|&e| e <= chunk.len())?;
        values = values.checked_add(usize::try_from(d.num_values?).ok()?)?;
        pages.push((body, p));
    }
    (values == rows).then_some(pages)
}

/// Hands out the values of a fixed-width column chunk `chunk` (its bytes, page headers
/// included) of `rows` rows as `f(first row, values' bytes)` per page, when every page is
/// a v1 data page of PLAIN values of `width` bytes without nulls, stored UNCOMPRESSED or
/// ZSTD; `max_def` is the column's maximum definition level (0 or 1; nested columns are
/// not for this reader). Errors are those of `f`.
pub(crate) fn decode_plain_chunk(
    chunk: &[u8],
    compression: Compression,
    max_def: i16,
    width: usize,
    rows: usize,
    mut f: impl FnMut(usize, &[u8]) -> Result<()>,
) -> Result<Plain> {
    let zstd = match compression {
        Compression::ZSTD(_) => true,
        Compression::UNCOMPRESSED => false,
        _ => return Ok(Plain::NotPlain),
    };
    if max_def > 1 || width == 0 {
        return Ok(Plain::NotPlain);
    }
    let Some(pages) = plain_pages(chunk, max_def, rows) else {
        return Ok(Plain::NotPlain);
    };
    let mut row = 0usize;
    for (body, p) in pages {
        let stored = &chunk[body..body + p.size];
        let Some(size) = p.uncompressed else {
            return Ok(Plain::NotPlain);
        };
        let decompressed;
        let page: &[u8] = if zstd {
            match unzstd(stored, size) {
                Some(b) => {
                    decompressed = b;
                    &decompressed.0
                }
                None => return Ok(Plain::NotPlain),
            }
        } else if stored.len() == size {
            stored
        } else {
            return Ok(Plain::NotPlain);
        };
        let n = p.data.and_then(|d| d.num_values).unwrap_or(0) as usize;
        let Some(values) = values_of(page, max_def, n, width) else {
            return Ok(Plain::NotPlain);
        };
        f(row, values)?;
        row += n;
    }
    Ok(Plain::Done)
}

/// The page's values (`n` of `width` bytes) after its definition levels, when there is
/// no null among them.
fn values_of(page: &[u8], max_def: i16, n: usize, width: usize) -> Option<&[u8]> {
    let values = if max_def == 0 {
        page
    } else {
        let len = u32::from_le_bytes(page.get(..4)?.try_into().ok()?) as usize;
        let levels = page.get(4..4usize.checked_add(len)?)?;
        if !all_defined(levels, n) {
            return None;
        }
        &page[4 + len..]
    };
    (values.len() == n.checked_mul(width)?).then_some(values)
}

/// Whether the first `n` definition levels of width 1 (RLE / bit-packed hybrid) are all 1.
fn all_defined(mut levels: &[u8], n: usize) -> bool {
    let mut seen = 0usize;
    while seen < n {
        let Some((h, used)) = uleb128(levels) else {
            return false;
        };
        levels = &levels[used..];
        if h & 1 == 0 {
            // An RLE run: a count and the value in one byte.
            let count = h >> 1;
            match levels.split_first() {
                Some((&1, rest)) if count > 0 => {
                    levels = rest;
                    seen = seen.saturating_add(usize::try_from(count).unwrap_or(usize::MAX));
                }
                _ => return false,
            }
        } else {
            // Bit-packed: groups of 8 levels, one byte each at width 1.
            let Ok(groups) = usize::try_from(h >> 1) else {
                return false;
            };
            let Some(bytes) = levels.get(..groups) else {
                return false;
            };
            let take = (n - seen).min(groups.saturating_mul(8));
            let (full, part) = (take / 8, take % 8);
            if bytes[..full].iter().any(|&b| b != 0xff)
                || (part > 0 && bytes[full] & ((1u8 << part) - 1) != (1u8 << part) - 1)
                || groups == 0
            {
                return false;
            }
            levels = &levels[groups..];
            seen += take;
        }
    }
    true
}

/// An unsigned LEB128 varint (at most 10 bytes) and its length.
fn uleb128(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i as u32);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A zstd page decompressed with this thread's context into a pooled buffer, when it
/// holds exactly `size` bytes.
fn unzstd(stored: &[u8], size: usize) -> Option<Pooled> {
    let mut out = pooled_buffer(size);
    let n = with_zstd(|d| d.decompress_to_buffer(stored, &mut out))
        .ok()?
        .ok()?;
    (n == size && out.len() == size).then_some(Pooled(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float32Array, Float64Array, Int32Array, RecordBatch};
    use arrow_schema::{Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{WriterProperties, WriterVersion};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    /// Writes `a` as the one column of a file (pages of `page_rows` rows, `props` given)
    /// and returns each row group's chunk bytes, compression and max definition level.
    fn chunks_of(
        a: ArrayRef,
        nullable: bool,
        props: WriterProperties,
    ) -> Vec<(Vec<u8>, Compression, i16, usize)> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            a.data_type().clone(),
            nullable,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![a]).unwrap();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let bytes = Bytes::from(buf);
        let r = SerializedFileReader::new(bytes.clone()).unwrap();
        let md = r.metadata();
        let max_def = md.file_metadata().schema_descr().column(0).max_def_level();
        md.row_groups()
            .iter()
            .map(|rg| {
                let c = rg.column(0);
                let (s, l) = c.byte_range();
                let chunk = bytes[s as usize..(s + l) as usize].to_vec();
                (chunk, c.compression(), max_def, rg.num_rows() as usize)
            })
            .collect()
    }

    fn props(dict: bool, zstd: bool, v2: bool, group_rows: usize) -> WriterProperties {
        let mut b = WriterProperties::builder()
            .set_dictionary_enabled(dict)
            .set_data_page_row_count_limit(1000)
            .set_write_batch_size(1000)
            .set_max_row_group_row_count(Some(group_rows))
            .set_writer_version(if v2 {
                WriterVersion::PARQUET_2_0
            } else {
                WriterVersion::PARQUET_1_0
            });
        if zstd {
            b = b.set_compression(Compression::ZSTD(Default::default()));
        }
        b.build()
    }

    /// The bytes handed out for every chunk, concatenated, or the first NotPlain.
    fn decode_all(
        chunks: &[(Vec<u8>, Compression, i16, usize)],
        width: usize,
    ) -> std::result::Result<Vec<u8>, Plain> {
        let mut out = Vec::new();
        for (chunk, comp, max_def, rows) in chunks {
            let mut at = 0usize;
            let mut got = Vec::new();
            let r = decode_plain_chunk(chunk, *comp, *max_def, width, *rows, |row, v| {
                assert_eq!(row, at, "pages hand out consecutive rows");
                at += v.len() / width;
                got.extend_from_slice(v);
                Ok(())
            })
            .unwrap();
            if r == Plain::NotPlain {
                return Err(r);
            }
            assert_eq!(at, *rows);
            out.extend(got);
        }
        Ok(out)
    }

    fn le_bytes<T: Copy>(v: &[T], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    /// PLAIN chunks (required or nullable without nulls, zstd or not, several pages and
    /// row groups) give exactly the values written, in order.
    #[test]
    fn plain_chunks_give_the_values_written() {
        let f: Vec<f32> = (0..5000).map(|i| (i as f32) * 0.5 - 7.0).collect();
        let d: Vec<f64> = (0..3001).map(|i| (i as f64).sin()).collect();
        let n: Vec<i32> = (0..4321).map(|i| i * 7919 - 100_000).collect();
        for (nullable, zstd) in [(false, false), (false, true), (true, false), (true, true)] {
            let p = || props(false, zstd, false, 1500);
            let c = chunks_of(Arc::new(Float32Array::from(f.clone())), nullable, p());
            assert!(c.len() > 1, "several row groups");
            assert_eq!(
                decode_all(&c, 4),
                Ok(le_bytes(&f, |x| x.to_le_bytes().to_vec()))
            );
            let c = chunks_of(Arc::new(Float64Array::from(d.clone())), nullable, p());
            assert_eq!(
                decode_all(&c, 8),
                Ok(le_bytes(&d, |x| x.to_le_bytes().to_vec()))
            );
            let c = chunks_of(Arc::new(Int32Array::from(n.clone())), nullable, p());
            assert_eq!(
                decode_all(&c, 4),
                Ok(le_bytes(&n, |x| x.to_le_bytes().to_vec()))
            );
        }
    }

    /// Dictionary pages, v2 pages, a null and a wrong width or row count are not plain.
    #[test]
    fn other_chunks_are_not_plain() {
        let f: Vec<f32> = (0..3000).map(|i| (i % 17) as f32).collect();
        let a = || Arc::new(Float32Array::from(f.clone())) as ArrayRef;
        let dict = chunks_of(a(), false, props(true, true, false, 5000));
        assert_eq!(decode_all(&dict, 4), Err(Plain::NotPlain));
        let v2 = chunks_of(a(), false, props(false, true, true, 5000));
        assert_eq!(decode_all(&v2, 4), Err(Plain::NotPlain));
        // One null in the last page: the first pages are handed out, then NotPlain.
        let mut with_null: Vec<Option<f32>> = f.iter().copied().map(Some).collect();
        with_null[2999] = None;
        let nulls = chunks_of(
            Arc::new(Float32Array::from(with_null)),
            true,
            props(false, false, false, 5000),
        );
        assert_eq!(decode_all(&nulls, 4), Err(Plain::NotPlain));
        let plain = chunks_of(a(), false, props(false, true, false, 5000));
        assert_eq!(decode_all(&plain, 8), Err(Plain::NotPlain), "wrong width");
        let (chunk, comp, max_def, rows) = &plain[0];
        for wrong in [rows - 1, rows + 1] {
            let r = decode_plain_chunk(chunk, *comp, *max_def, 4, wrong, |_, _| Ok(())).unwrap();
            assert_eq!(r, Plain::NotPlain, "{wrong} rows instead of {rows}");
        }
        // A chunk cut short anywhere is not plain (the crate then reports it).
        for cut in [1, chunk.len() / 2, chunk.len() - 1] {
            let r = decode_plain_chunk(&chunk[..cut], *comp, *max_def, 4, *rows, |_, _| Ok(()))
                .unwrap();
            assert_eq!(r, Plain::NotPlain, "cut at {cut}");
        }
    }

    /// Levels: RLE runs of 1 and bit-packed all-ones groups (padding bits ignored) are all
    /// defined; a 0 anywhere among the first n, a zero-length run, or too few levels not.
    #[test]
    fn definition_levels_all_defined_or_not() {
        assert!(all_defined(&[0x14, 1], 10)); // RLE: 10 x 1
        assert!(all_defined(&[0x08, 1, 0x0c, 1], 10)); // 4 x 1 then 6 x 1
        assert!(all_defined(&[0x05, 0xff, 0x03], 10)); // bit-packed 16, padding 0s
        assert!(!all_defined(&[0x05, 0xff, 0x01], 10)); // level 9 is 0
        assert!(!all_defined(&[0x14, 0], 10)); // RLE of 0
        assert!(!all_defined(&[0x00, 1], 1)); // empty run
        assert!(!all_defined(&[0x08, 1], 10)); // 4 levels of 10
        assert!(!all_defined(&[0x01], 1)); // empty bit-packed
        assert!(all_defined(&[], 0));
        assert_eq!(plain_width(PhysicalType::INT32, &DataType::Date32), None);
        assert_eq!(plain_width(PhysicalType::INT64, &DataType::Float64), None);
        assert_eq!(
            plain_width(PhysicalType::DOUBLE, &DataType::Float64),
            Some(8)
        );
    }
}
