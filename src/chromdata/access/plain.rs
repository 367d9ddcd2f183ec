//! Fixed-width column chunks stored as PLAIN pages without nulls, or as a dictionary page
//! of PLAIN values and pages of indices into it, handed out page by page as the values'
//! bytes, without the parquet crate's decoder.
//!
//! Why: coordinates (x, y, z, layers; spec §10.1 and §6.2: never null, not
//! dictionary-encoded in coords partitions) are most of a get_chrom's bytes. Through the
//! crate, each page's values were copied from the decompressed page into a fresh Arrow
//! array, and from it into the result's column; here they are copied once, from the
//! decompressed page into place. Dictionary-encoded ones (2.2 primary tracks, which §6.2
//! asks writers to store with dictionaries) are gathered from the dictionary into one
//! reused page-sized buffer: through the crate, its RLE decoder and the copies were a third
//! of a 10 M x 60 store's full read (perf). Anything else (another encoding, a null, a v2
//! page, a size that does not add up, an index past the dictionary) makes the chunk "not
//! plain", and the caller decodes it through the crate, which also reports what is wrong
//! with a damaged one.

use arrow_schema::DataType;
use parquet::basic::{Compression, Type as PhysicalType};

use super::pages::{pooled_buffer, with_zstd, Pooled};
use crate::error::Result;
use crate::parquet_meta::footer::{page_info, PageInfo};

/// Thrift enum values of the page header (parquet.thrift).
const DATA_PAGE: i64 = 0;
const DICTIONARY_PAGE: i64 = 2;
const PLAIN: i64 = 0;
const PLAIN_DICTIONARY: i64 = 2;
const RLE: i64 = 3;
const RLE_DICTIONARY: i64 = 8;

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

/// One page of a chunk as walked.
#[derive(Clone, Copy)]
enum PageKind {
    /// The dictionary page (first in the chunk): PLAIN values.
    Dictionary,
    /// A data page of PLAIN values.
    Values,
    /// A data page of indices into the dictionary.
    Indices,
}

/// A chunk's pages as walked: (kind, offset of the page's bytes after its header, header).
fn plain_pages(
    chunk: &[u8],
    max_def: i16,
    rows: usize,
) -> Option<Vec<(PageKind, usize, PageInfo)>> {
    let mut pages = Vec::new();
    let (mut pos, mut values) = (0usize, 0usize);
    while pos < chunk.len() {
        let p = page_info(&chunk[pos..]).ok()?;
        let kind = if p.page_type == Some(DICTIONARY_PAGE) && pages.is_empty() {
            let [_, encoding] = p.dictionary?;
            matches!(encoding, Some(PLAIN | PLAIN_DICTIONARY)).then_some(PageKind::Dictionary)?
        } else {
            let d = p.data?;
            let levels_ok = max_def == 0 || d.def_level_encoding == Some(RLE);
            let dictionary = matches!(pages.first(), Some((PageKind::Dictionary, _, _)));
            let kind = match d.encoding {
                Some(PLAIN) => PageKind::Values,
                Some(PLAIN_DICTIONARY | RLE_DICTIONARY) if dictionary => PageKind::Indices,
                _ => return None,
            };
            if p.page_type != Some(DATA_PAGE) || !levels_ok {
                return None;
            }
            values = values.checked_add(usize::try_from(d.num_values?).ok()?)?;
            kind
        };
        let body = pos.checked_add(p.header)?;
        pos = body.checked_add(p.size).filter(|&e| e <= chunk.len())?;
        pages.push((kind, body, p));
    }
    (values == rows).then_some(pages)
}

/// Hands out the values of a fixed-width column chunk `chunk` (its bytes, page headers
/// included) of `rows` rows as `f(first row, values' bytes)` per page, when every page is
/// a v1 data page without nulls of PLAIN values of `width` bytes or of indices into the
/// chunk's dictionary page of PLAIN values, stored UNCOMPRESSED or ZSTD; `max_def` is the
/// column's maximum definition level (0 or 1; nested columns are not for this reader).
/// Errors are those of `f`.
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
    if max_def > 1 || !matches!(width, 4 | 8) {
        return Ok(Plain::NotPlain);
    }
    let Some(pages) = plain_pages(chunk, max_def, rows) else {
        return Ok(Plain::NotPlain);
    };
    let mut row = 0usize;
    let mut dictionary = Dictionary::None;
    let mut gathered: Option<Pooled> = None;
    for (kind, body, p) in pages {
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
        if let PageKind::Dictionary = kind {
            let n = p.dictionary.and_then(|[n, _]| n);
            match Dictionary::of(page, width, n) {
                Some(d) => dictionary = d,
                None => return Ok(Plain::NotPlain),
            }
            continue;
        }
        let n = p.data.and_then(|d| d.num_values).unwrap_or(0) as usize;
        let Some(body) = after_levels(page, max_def, n) else {
            return Ok(Plain::NotPlain);
        };
        let values = match kind {
            PageKind::Indices => {
                let out =
                    gathered.get_or_insert_with(|| Pooled(pooled_buffer(n.saturating_mul(width))));
                if dictionary.gather(body, n, &mut out.0).is_none() {
                    return Ok(Plain::NotPlain);
                }
                &out.0[..]
            }
            _ if Some(body.len()) == n.checked_mul(width) => body,
            _ => return Ok(Plain::NotPlain),
        };
        f(row, values)?;
        row += n;
    }
    Ok(Plain::Done)
}

/// The page's bytes after its definition levels, when there is no null among its `n`
/// values.
fn after_levels(page: &[u8], max_def: i16, n: usize) -> Option<&[u8]> {
    if max_def == 0 {
        return Some(page);
    }
    let len = u32::from_le_bytes(page.get(..4)?.try_into().ok()?) as usize;
    let levels = page.get(4..4usize.checked_add(len)?)?;
    all_defined(levels, n).then(|| &page[4 + len..])
}

/// A chunk's dictionary: its values, by width.
enum Dictionary {
    None,
    W4(Vec<[u8; 4]>),
    W8(Vec<[u8; 8]>),
}

impl Dictionary {
    /// The dictionary page's values (`page`, PLAIN values of `width` bytes, `n` of them
    /// when the header says). `None` when the sizes do not add up or it is empty.
    fn of(page: &[u8], width: usize, n: Option<i64>) -> Option<Dictionary> {
        let count = page.len() / width;
        if !page.len().is_multiple_of(width) || count == 0 || n.is_some_and(|n| n != count as i64) {
            return None;
        }
        Some(match width {
            4 => Dictionary::W4(
                page.chunks_exact(4)
                    .map(|c| c.try_into().expect("4"))
                    .collect(),
            ),
            8 => Dictionary::W8(
                page.chunks_exact(8)
                    .map(|c| c.try_into().expect("8"))
                    .collect(),
            ),
            _ => return None,
        })
    }

    /// Writes into `out` (replacing its contents) the values of the `n` indices of a data
    /// page's `body` (bit width, then RLE / bit-packed hybrid runs). `None` when the body
    /// is short, a run is empty, the width is over 32 or an index is past the dictionary.
    fn gather(&self, body: &[u8], n: usize, out: &mut Vec<u8>) -> Option<()> {
        match self {
            Dictionary::None => None,
            Dictionary::W4(d) => gather_indices(body, n, d, out),
            Dictionary::W8(d) => gather_indices(body, n, d, out),
        }
    }
}

/// [`Dictionary::gather`] for values of `W` bytes.
fn gather_indices<const W: usize>(
    body: &[u8],
    n: usize,
    dict: &[[u8; W]],
    out: &mut Vec<u8>,
) -> Option<()> {
    let (&bits, mut rest) = body.split_first()?;
    if bits > 32 || dict.is_empty() {
        return None;
    }
    let bits = u32::from(bits);
    out.clear();
    out.resize(n.checked_mul(W)?, 0);
    let mut slots = out.chunks_exact_mut(W);
    let mut left = n;
    while left > 0 {
        match next_run(&mut rest, bits)? {
            Run::Repeat { count, value } => {
                let index = value
                    .iter()
                    .rev()
                    .fold(0usize, |v, &b| (v << 8) | b as usize);
                let value = dict.get(index)?;
                for slot in slots.by_ref().take(count.min(left)) {
                    slot.copy_from_slice(value);
                }
                left -= count.min(left);
            }
            Run::Packed { groups, packed } => {
                let take = groups.saturating_mul(8).min(left);
                unpack_gather(packed, bits, take, dict, &mut slots)?;
                left -= take;
            }
        }
    }
    Some(())
}

/// Writes the values of the first `take` indices of `bits` bits packed in `packed` into
/// the next `take` slots. Widths up to 16 bits go a group of 8 indices (two 64-bit loads)
/// at a time while 16 bytes are left; the rest one index (one 64-bit load) at a time.
#[inline]
fn unpack_gather<const W: usize>(
    packed: &[u8],
    bits: u32,
    take: usize,
    dict: &[[u8; W]],
    slots: &mut std::slice::ChunksExactMut<'_, u8>,
) -> Option<()> {
    let b = bits as usize;
    let mask = (1u64 << b) - 1;
    let mut i = 0usize;
    if b <= 16 {
        // A group's indices 0-3 lie in the 8 bytes at its start and 4-7 in the 8 bytes
        // from byte 4b / 8, shifted by 4b % 8 (0 or 4): 4 * 16 + 0 and 4 * 15 + 4 bits fit.
        let (hi_at, hi_shift) = (4 * b / 8, (4 * b % 8) as u32);
        let last = dict.len() - 1;
        while i + 8 <= take {
            let at = i / 8 * b;
            let Some(group) = packed.get(at..at + 16) else {
                break;
            };
            let lo = u64::from_le_bytes(group[..8].try_into().expect("8 bytes"));
            let hi = u64::from_le_bytes(group[hi_at..hi_at + 8].try_into().expect("8 bytes"));
            let hi = hi >> hi_shift;
            let mut past = false;
            for word in [lo, hi] {
                for k in 0..4 {
                    let index = ((word >> (k * b)) & mask) as usize;
                    past |= index > last;
                    slots.next()?.copy_from_slice(&dict[index.min(last)]);
                }
            }
            if past {
                return None;
            }
            i += 8;
        }
    }
    for i in i..take {
        let bit = i * b;
        let at = bit >> 3;
        let word = match packed.get(at..at + 8) {
            Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
            None => packed[at.min(packed.len())..]
                .iter()
                .rev()
                .fold(0u64, |v, &b| (v << 8) | u64::from(b)),
        };
        let index = ((word >> (bit & 7)) & mask) as usize;
        slots.next()?.copy_from_slice(dict.get(index)?);
    }
    Some(())
}

/// Whether the first `n` definition levels of width 1 (RLE / bit-packed hybrid) are all 1.
fn all_defined(mut levels: &[u8], n: usize) -> bool {
    let mut seen = 0usize;
    while seen < n {
        match next_run(&mut levels, 1) {
            Some(Run::Repeat { count, value: [1] }) => seen = seen.saturating_add(count),
            Some(Run::Packed { groups, packed }) => {
                // One byte per group of 8 levels at width 1.
                let take = (n - seen).min(groups.saturating_mul(8));
                let (full, part) = (take / 8, take % 8);
                if packed[..full].iter().any(|&b| b != 0xff)
                    || (part > 0 && packed[full] & ((1u8 << part) - 1) != (1u8 << part) - 1)
                {
                    return false;
                }
                seen += take;
            }
            _ => return false,
        }
    }
    true
}

/// One run of RLE / bit-packed hybrid data (definition levels, dictionary indices).
enum Run<'a> {
    /// `count` times the value in `value` (ceil(bits / 8) bytes, little-endian).
    Repeat { count: usize, value: &'a [u8] },
    /// `groups` groups of 8 values of `bits` bits, LSB first, in `packed`.
    Packed { groups: usize, packed: &'a [u8] },
}

/// The run of `bits`-bit values at the start of `rest`, which is advanced past it. `None`
/// when the bytes end first or the run is empty.
fn next_run<'a>(rest: &mut &'a [u8], bits: u32) -> Option<Run<'a>> {
    let (h, used) = uleb128(rest)?;
    let count = usize::try_from(h >> 1).ok().filter(|&c| c > 0)?;
    let len = if h & 1 == 0 {
        bits.div_ceil(8) as usize
    } else {
        count.checked_mul(bits as usize)?
    };
    let bytes = rest.get(used..used.checked_add(len)?)?;
    *rest = &rest[used + len..];
    Some(if h & 1 == 0 {
        Run::Repeat {
            count,
            value: bytes,
        }
    } else {
        Run::Packed {
            groups: count,
            packed: bytes,
        }
    })
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

    /// Dictionary-encoded chunks give exactly the values written: every index width from
    /// a one-value dictionary (0 bits) to 17 bits, RLE runs and bit-packed groups, required
    /// or nullable, zstd or not, several pages and row groups; and a dictionary that grew
    /// past its limit, after which the writer stored PLAIN pages in the same chunk.
    #[test]
    fn dictionary_chunks_give_the_values_written() {
        for distinct in [1usize, 2, 3, 255, 256, 300, 70_000] {
            // Runs of repeats (RLE) and scattered values (bit-packed).
            let f: Vec<f32> = (0..9000)
                .map(|i| {
                    if i % 1000 < 100 {
                        1.5
                    } else {
                        ((i * 7919) % distinct) as f32
                    }
                })
                .collect();
            let d: Vec<f64> = f.iter().map(|&x| f64::from(x) * -0.25).collect();
            let n: Vec<i32> = f.iter().map(|&x| x as i32 - 5).collect();
            for (nullable, zstd) in [(false, false), (false, true), (true, false), (true, true)] {
                let p = || props(true, zstd, false, 4000);
                let c = chunks_of(Arc::new(Float32Array::from(f.clone())), nullable, p());
                assert!(c.len() > 1, "several row groups");
                let expected = le_bytes(&f, |x| x.to_le_bytes().to_vec());
                assert_eq!(decode_all(&c, 4), Ok(expected), "{distinct}");
                let c = chunks_of(Arc::new(Float64Array::from(d.clone())), nullable, p());
                let expected = le_bytes(&d, |x| x.to_le_bytes().to_vec());
                assert_eq!(decode_all(&c, 8), Ok(expected), "{distinct}");
                let c = chunks_of(Arc::new(Int32Array::from(n.clone())), nullable, p());
                let expected = le_bytes(&n, |x| x.to_le_bytes().to_vec());
                assert_eq!(decode_all(&c, 4), Ok(expected), "{distinct}");
            }
        }
        let f: Vec<f32> = (0..9000).map(|i| i as f32).collect();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(true)
            .set_dictionary_page_size_limit(1024)
            .set_data_page_row_count_limit(500)
            .set_write_batch_size(500)
            .build();
        let c = chunks_of(Arc::new(Float32Array::from(f.clone())), false, props);
        let (chunk, ..) = &c[0];
        let pages = plain_pages(chunk, 0, c[0].3).expect("walked");
        assert!(matches!(pages[0].0, PageKind::Dictionary));
        assert!(pages.iter().any(|p| matches!(p.0, PageKind::Indices)));
        assert!(pages.iter().any(|p| matches!(p.0, PageKind::Values)));
        assert_eq!(
            decode_all(&c, 4),
            Ok(le_bytes(&f, |x| x.to_le_bytes().to_vec()))
        );
    }

    /// Index runs decoded by hand: RLE and bit-packed runs (padding of the last group
    /// ignored); an index past the dictionary, an empty run, a short body and widths over
    /// 32 bits are refused.
    #[test]
    fn dictionary_indices_decode_or_are_refused() {
        let dict: Vec<[u8; 4]> = (0..8u32).map(|v| (v * 10).to_le_bytes()).collect();
        let values = |out: &[u8]| -> Vec<u32> {
            out.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let mut out = Vec::new();
        // Width 3: RLE 4 x index 5, then one bit-packed group 0..7 (3 bytes), 10 values.
        // 0..7 packed LSB first at 3 bits: 0b10_001_000, 0b1_100_011_0, 0b111_110_1 ...
        let packed = [0x88, 0xc6, 0xfa];
        let body = [&[3u8, 0x08, 5, 0x03][..], &packed].concat();
        gather_indices(&body, 10, &dict, &mut out).unwrap();
        assert_eq!(values(&out), vec![50, 50, 50, 50, 0, 10, 20, 30, 40, 50]);
        gather_indices(&body, 12, &dict, &mut out).unwrap();
        assert_eq!(values(&out)[4..], [0, 10, 20, 30, 40, 50, 60, 70]);
        assert!(
            gather_indices(&body, 13, &dict, &mut out).is_none(),
            "too few"
        );
        assert!(
            gather_indices(&[3, 0x08, 8], 4, &dict, &mut out).is_none(),
            "index 8 of 8"
        );
        assert!(
            gather_indices(&[3, 0x00, 1], 1, &dict, &mut out).is_none(),
            "empty run"
        );
        assert!(gather_indices(&[33, 0x02, 0, 0, 0, 0, 0], 1, &dict, &mut out).is_none());
        assert!(gather_indices(&[], 1, &dict, &mut out).is_none());
        let none: [[u8; 4]; 0] = [];
        assert!(gather_indices(&[0, 0x02], 1, &none, &mut out).is_none());
        // Bit-packed groups with 16 bytes from their start go 8 at a time (here the first
        // four of 40 indices of 9 bits: 45 bytes), the last one one at a time.
        let wide: Vec<[u8; 4]> = (0..512u32).map(|v| (v * 3).to_le_bytes()).collect();
        let pack = |indices: &[u32]| -> Vec<u8> {
            let mut packed = vec![0u8; 45];
            for (i, &v) in indices.iter().enumerate() {
                for k in 0..9 {
                    if v >> k & 1 == 1 {
                        packed[(i * 9 + k) / 8] |= 1 << ((i * 9 + k) % 8);
                    }
                }
            }
            [&[9u8, 0x0b][..], &packed].concat()
        };
        let mut indices: Vec<u32> = (0..40u32).map(|i| (i * 97 + 5) % 511).collect();
        gather_indices(&pack(&indices), 40, &wide, &mut out).unwrap();
        let want: Vec<u32> = indices.iter().map(|&i| i * 3).collect();
        assert_eq!(values(&out), want);
        // Index 511 in a dictionary of 511 values, in a group of 8 or one of the last:
        // refused either way; in the full dictionary, decoded.
        for at in [3, 29, 36] {
            let saved = indices[at];
            indices[at] = 511;
            let body = pack(&indices);
            assert!(
                gather_indices(&body, 40, &wide[..511], &mut out).is_none(),
                "{at}"
            );
            gather_indices(&body, 40, &wide, &mut out).unwrap();
            assert_eq!(values(&out)[at], 511 * 3);
            indices[at] = saved;
        }
        // Width 0: every index is 0, with no bytes for the values.
        gather_indices(&[0, 0x16], 11, &dict, &mut out).unwrap();
        assert_eq!(values(&out), vec![0; 11]);
        // Wide indices: 17 bits, RLE value in 3 bytes.
        let big: Vec<[u8; 8]> = (0..70_000u64).map(|v| v.to_le_bytes()).collect();
        gather_indices(&[17, 0x04, 0x11, 0x11, 0x01], 2, &big, &mut out).unwrap();
        assert_eq!(
            out,
            [0x11111u64.to_le_bytes(), 0x11111u64.to_le_bytes()].concat()
        );
        let mut d = Dictionary::of(&[0u8; 12], 4, Some(3)).unwrap();
        assert!(d.gather(&[1, 0x02, 2], 1, &mut out).is_some());
        assert!(
            Dictionary::of(&[0u8; 12], 4, Some(2)).is_none(),
            "count differs"
        );
        assert!(
            Dictionary::of(&[0u8; 10], 4, None).is_none(),
            "not whole values"
        );
        assert!(Dictionary::of(&[], 4, None).is_none(), "empty");
        d = Dictionary::None;
        assert!(
            d.gather(&[1, 0x02, 0], 1, &mut out).is_none(),
            "no dictionary page"
        );
    }

    /// Encodes `indices` at `bits` bits as RLE / bit-packed hybrid runs: runs of 8 or more
    /// equal indices as RLE (when `rle`), the rest in bit-packed groups of 8, the last
    /// group padded with zeros. Independent of the decoder: bit by bit.
    fn encode_hybrid(indices: &[u32], bits: u32, rle: bool) -> Vec<u8> {
        let mut out = vec![bits as u8];
        let uleb = |out: &mut Vec<u8>, mut v: u64| loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        };
        let mut i = 0;
        while i < indices.len() {
            let same = indices[i..]
                .iter()
                .take_while(|&&v| v == indices[i])
                .count();
            if rle && same >= 8 {
                uleb(&mut out, (same as u64) << 1);
                let bytes = bits.div_ceil(8) as usize;
                out.extend_from_slice(&indices[i].to_le_bytes()[..bytes]);
                i += same;
                continue;
            }
            // Bit-packed up to the next run of 8 equal indices (whole groups of 8).
            let mut end = i;
            while end < indices.len() {
                let run = indices[end..]
                    .iter()
                    .take_while(|&&v| v == indices[end])
                    .count();
                if rle && run >= 8 && end > i && (end - i) % 8 == 0 {
                    break;
                }
                end += 1;
            }
            let groups = (end - i).div_ceil(8);
            uleb(&mut out, ((groups as u64) << 1) | 1);
            let mut packed = vec![0u8; groups * bits as usize];
            for (k, &v) in indices[i..end].iter().enumerate() {
                for b in 0..bits as usize {
                    if v >> b & 1 == 1 {
                        let bit = k * bits as usize + b;
                        packed[bit / 8] |= 1 << (bit % 8);
                    }
                }
            }
            out.extend(packed);
            i = end;
        }
        out
    }

    proptest::proptest! {
        /// Random indices at every width up to 20 bits, in RLE and bit-packed runs, decode
        /// to the dictionary's values; with one index made past the dictionary they are
        /// refused.
        #[test]
        fn encoded_indices_decode_to_the_dictionary_values(
            bits in 0u32..=20,
            seeds in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..300),
            runs in proptest::prelude::any::<bool>(),
            bad in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let size = 1usize << bits;
            let dict: Vec<[u8; 8]> = (0..size as u64).map(|v| (v * 31 + 7).to_le_bytes()).collect();
            // Runs of repeats when `runs`: each seed gives an index and a repeat count.
            let indices: Vec<u32> = seeds
                .iter()
                .flat_map(|&s| {
                    let n = if runs { 1 + (s >> 24) as usize % 20 } else { 1 };
                    std::iter::repeat_n(s % size as u32, n)
                })
                .collect();
            let body = encode_hybrid(&indices, bits, runs);
            let mut out = Vec::new();
            proptest::prop_assert!(gather_indices(&body, indices.len(), &dict, &mut out).is_some());
            let want: Vec<u8> = indices.iter().flat_map(|&i| dict[i as usize]).collect();
            proptest::prop_assert_eq!(&out, &want);
            if !indices.is_empty() && bits > 0 {
                let at = bad.index(indices.len());
                let short = &dict[..indices[at] as usize];
                let got = gather_indices(&body, indices.len(), short, &mut out);
                proptest::prop_assert!(got.is_none());
            }
        }

        /// Arbitrary bytes as a page body never panic; what decodes is dictionary values.
        #[test]
        fn arbitrary_index_bytes_never_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            n in 0usize..400,
            size in 1usize..70,
        ) {
            let dict: Vec<[u8; 4]> = (0..size as u32).map(|v| (v + 1000).to_le_bytes()).collect();
            let mut out = Vec::new();
            if gather_indices(&body, n, &dict, &mut out).is_some() {
                proptest::prop_assert_eq!(out.len(), n * 4);
                for v in out.chunks_exact(4) {
                    let v = u32::from_le_bytes(v.try_into().unwrap());
                    proptest::prop_assert!((1000..1000 + size as u32).contains(&v));
                }
            }
        }
    }

    /// V2 pages, a null and a wrong width or row count are not plain.
    #[test]
    fn other_chunks_are_not_plain() {
        let f: Vec<f32> = (0..3000).map(|i| (i % 17) as f32).collect();
        let a = || Arc::new(Float32Array::from(f.clone())) as ArrayRef;
        let dict = chunks_of(a(), false, props(true, true, false, 5000));
        assert_eq!(decode_all(&dict, 8), Err(Plain::NotPlain), "wrong width");
        let v2_dict = chunks_of(a(), false, props(true, true, true, 5000));
        assert_eq!(decode_all(&v2_dict, 4), Err(Plain::NotPlain));
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
