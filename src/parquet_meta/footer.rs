//! Parquet footers and page headers walked (Thrift compact protocol) without decoding them.
//!
//! Every footer and page header the parquet crate decodes for us is walked here first: the
//! walk checks every size against the bytes left, and the crate's own Thrift skipping does
//! not (parquet 60.1's `skip_till_depth` takes boolean elements of a list, set or map as
//! 0 bytes, so an unknown field announcing 2^31 booleans loops 2^31 times without reading:
//! a 2 KB file took minutes to refuse). See docs/reliability.md §1.
//!
//! ChromData footers are also read in two steps. Open walks the whole footer (Thrift compact protocol)
//! without decoding it, finding each row group's bytes and row count; the parquet crate then
//! decodes only the file-level part (schema, num_rows, key-value metadata) at open and one
//! row group's column chunks when that group is first read.
//!
//! Why: a store's footers are validated at open (spec §14), but decoding every column chunk
//! of a wide primary file is the larger part of open (10 M spots × 60 tracks: 167 row groups
//! × 60 columns, a 1 MB footer, decoded in ~4 ms on one core; the walk costs a fraction of
//! that and allocates nothing per chunk), and most queries read a few of its row groups.

use crate::error::{Error, Result};

/// Thrift compact type codes (field headers and collection elements).
const T_BOOL_TRUE: u8 = 1;
const T_BOOL_FALSE: u8 = 2;
const T_I8: u8 = 3;
const T_I16: u8 = 4;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_DOUBLE: u8 = 7;
const T_BINARY: u8 = 8;
const T_LIST: u8 = 9;
const T_SET: u8 = 10;
const T_MAP: u8 = 11;
const T_STRUCT: u8 = 12;
/// A 16-byte UUID (a newer addition to the compact protocol, skipped as the crate does).
const T_UUID: u8 = 13;

/// Type codes as bit sets (`1 << type`), for [`Walker::skip_struct`]'s dispatch.
const VARINT_TYPES: u16 = (1 << T_I16) | (1 << T_I32) | (1 << T_I64);
const BOOL_TYPES: u16 = (1 << T_BOOL_TRUE) | (1 << T_BOOL_FALSE);
const LIST_TYPES: u16 = (1 << T_LIST) | (1 << T_SET);

/// Nesting deeper than this is refused (a Parquet footer nests about 6 levels).
const MAX_DEPTH: u32 = 64;

/// Where the row groups lie in a footer's `FileMetaData` bytes.
#[derive(Debug)]
pub(crate) struct FooterMap {
    /// Byte range of field 4 (`row_groups`) after its field header: list header + elements.
    list: (usize, usize),
    /// Per row group: its byte range, `num_rows`, and the number of its column chunks.
    pub(crate) groups: Vec<GroupSpan>,
}

/// One row group in the footer bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupSpan {
    start: usize,
    end: usize,
    pub(crate) num_rows: i64,
    pub(crate) n_columns: usize,
}

impl FooterMap {
    /// Walks `FileMetaData` (every field, every nested value) and maps its row groups.
    /// Structural damage (truncation, bad type codes, sizes past the end, nesting too deep,
    /// missing `row_groups` or a row group without `num_rows` / `columns`) is an error.
    pub(crate) fn scan(buf: &[u8]) -> Result<FooterMap> {
        let mut w = Walker { buf, pos: 0 };
        w.file_metadata()
            .map_err(|Fail(what)| w.bad("Parquet footer", what))
    }

    /// Finds, walking only the fields before it, where `row_groups` (field 4) starts in
    /// `buf`, the head of a footer: the offset just after its field header. The head up to
    /// there decodes, with an empty list appended ([`head_without_groups`]), to the
    /// file-level metadata (version, schema, num_rows; the optional fields after the row
    /// groups are left out). `None` when the head ends first or is damaged: the caller then
    /// walks the whole footer ([`FooterMap::scan`]), which reports the damage.
    pub(crate) fn row_groups_start(buf: &[u8]) -> Option<usize> {
        let mut w = Walker { buf, pos: 0 };
        let mut last = 0i16;
        while let Some((id, ty)) = w.field_header(last).ok()? {
            if id == 4 {
                return (ty == T_LIST).then_some(w.pos);
            }
            w.skip_field(ty, 1).ok()?;
            last = id;
        }
        None
    }

    /// The footer with an empty row-group list: decodes to the file-level metadata only.
    pub(crate) fn without_groups(&self, buf: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(buf.len() - (self.list.1 - self.list.0) + 1);
        out.extend_from_slice(&buf[..self.list.0]);
        out.push(T_STRUCT); // list header: 0 elements of type struct
        out.extend_from_slice(&buf[self.list.1..]);
        out
    }

    /// A footer holding only row group `g` (the fields before `row_groups` and the group's
    /// own bytes; the optional fields after it are left out): decodes to that group's
    /// metadata as group 0.
    pub(crate) fn only_group(&self, buf: &[u8], g: usize) -> Vec<u8> {
        let s = self.groups[g];
        let mut out = Vec::with_capacity(self.list.0 + (s.end - s.start) + 2);
        out.extend_from_slice(&buf[..self.list.0]);
        out.push((1 << 4) | T_STRUCT); // list header: 1 element of type struct
        out.extend_from_slice(&buf[s.start..s.end]);
        out.push(0); // end of FileMetaData
        out
    }
}

/// Walks the `PageHeader` at the start of `buf` (every field, every nested value): its
/// length in bytes and its `compressed_page_size` (the page's bytes after the header).
/// Structural damage, a missing or negative size is an error.
pub(crate) fn page_header(buf: &[u8]) -> Result<(usize, usize)> {
    page_info(buf).map(|p| (p.header, p.size))
}

/// What a reader of PLAIN pages needs of a `PageHeader` (values as stored, unchecked but
/// for `size`, which [`page_header`] also gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageInfo {
    /// Bytes of the header.
    pub(crate) header: usize,
    /// `compressed_page_size`: the page's bytes after the header.
    pub(crate) size: usize,
    /// `type` (0 data page, 1 index page, 2 dictionary page, 3 data page v2).
    pub(crate) page_type: Option<i64>,
    /// `uncompressed_page_size` (`None` when missing or negative).
    pub(crate) uncompressed: Option<usize>,
    /// `data_page_header` (data pages v1).
    pub(crate) data: Option<DataPageV1>,
    /// `dictionary_page_header`: its `num_values` and `encoding` (each `None` when missing).
    pub(crate) dictionary: Option<[Option<i64>; 2]>,
}

/// The fields of a v1 `DataPageHeader` (each `None` when missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataPageV1 {
    pub(crate) num_values: Option<i64>,
    pub(crate) encoding: Option<i64>,
    pub(crate) def_level_encoding: Option<i64>,
}

/// Walks the `PageHeader` at the start of `buf` as [`page_header`] does, keeping the
/// fields of [`PageInfo`].
pub(crate) fn page_info(buf: &[u8]) -> Result<PageInfo> {
    let mut w = Walker { buf, pos: 0 };
    w.page_header()
        .map_err(|Fail(what)| w.bad("Parquet page header", what))
}

/// The head of a footer up to `row_groups` ([`FooterMap::row_groups_start`] = `start`)
/// with an empty row-group list and the end of `FileMetaData`: decodes to the file-level
/// metadata only.
pub(crate) fn head_without_groups(head: &[u8], start: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(start + 2);
    out.extend_from_slice(&head[..start]);
    out.push(T_STRUCT); // list header: 0 elements of type struct
    out.push(0); // end of FileMetaData
    out
}

/// Why a walk stopped (turned into an [`Error`] with the position at the top): small, so
/// that the hot skipping loop passes it around in registers.
#[derive(Debug, Clone, Copy)]
struct Fail(&'static str);

type Walk<T> = std::result::Result<T, Fail>;

/// A cursor over Thrift compact bytes that checks every read against the end.
struct Walker<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Walker<'_> {
    /// The error of a walk of `structure` that stopped at the current byte.
    fn bad(&self, structure: &str, what: &str) -> Error {
        Error::format(format!(
            "invalid {structure} at byte {} of {}: {what}",
            self.pos,
            self.buf.len()
        ))
    }

    #[inline]
    fn byte(&mut self) -> Walk<u8> {
        let b = *self.buf.get(self.pos).ok_or(Fail("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn advance(&mut self, n: u64) -> Walk<()> {
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(Fail("a value runs past the end"));
        }
        self.pos += n as usize;
        Ok(())
    }

    #[inline]
    fn varint(&mut self) -> Walk<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Fail("varint longer than 10 bytes"))
    }

    /// Skips a varint without assembling it.
    #[inline(always)]
    fn skip_varint(&mut self) -> Walk<()> {
        let (buf, start) = (self.buf, self.pos);
        let end = buf.len().min(start + 10);
        let mut p = start;
        while p < end {
            let b = buf[p];
            p += 1;
            if b & 0x80 == 0 {
                self.pos = p;
                return Ok(());
            }
        }
        if end - start < 10 {
            Err(Fail("truncated"))
        } else {
            Err(Fail("varint longer than 10 bytes"))
        }
    }

    fn zigzag(&mut self) -> Walk<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// Next field header of a struct: `None` at its end, else (field id, type).
    fn field_header(&mut self, last: i16) -> Walk<Option<(i16, u8)>> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let (delta, ty) = (b >> 4, b & 0x0f);
        let id = if delta == 0 {
            i16::try_from(self.zigzag()?).map_err(|_| Fail("field id out of range"))?
        } else {
            last.checked_add(delta as i16)
                .ok_or(Fail("field id out of range"))?
        };
        Ok(Some((id, ty)))
    }

    /// A list or set header: (element type, size), the size checked against the bytes left
    /// (every element takes at least one byte).
    #[inline]
    fn list_header(&mut self) -> Walk<(u8, usize)> {
        let b = self.byte()?;
        let (mut n, elem) = ((b >> 4) as u64, b & 0x0f);
        if n == 15 {
            n = self.varint()?;
        }
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(Fail("collection size past the end"));
        }
        Ok((elem, n as usize))
    }

    /// Skips the value of a struct field of type `ty` (booleans carry their value in the
    /// field header).
    #[inline]
    fn skip_field(&mut self, ty: u8, depth: u32) -> Walk<()> {
        match ty {
            T_BOOL_TRUE | T_BOOL_FALSE => Ok(()),
            _ => self.skip_value(ty, depth),
        }
    }

    /// Skips the rest of a struct (field ids are not needed, only the values' extents).
    /// The common value types are skipped here, without a call per field: a footer is
    /// mostly column chunks of some thirty small fields each, and this loop is most of
    /// the walk (the walk is most of a wide store's open).
    ///
    /// The type is told by conditional branches on bit sets, most frequent first, not by a
    /// `match` on it: compiled to one indirect jump, that was mispredicted so often that
    /// it took a third of the walk's time (perf annotate, 10 M x 60 store's open).
    fn skip_struct(&mut self, depth: u32) -> Walk<()> {
        if depth > MAX_DEPTH {
            return Err(Fail("nested too deeply"));
        }
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            if b >> 4 == 0 {
                self.skip_varint()?; // a field id written in full
            }
            let ty = b & 0x0f;
            let bit = 1u16 << ty;
            if bit & VARINT_TYPES != 0 {
                self.skip_varint()?;
            } else if bit & BOOL_TYPES != 0 {
            } else if ty == T_BINARY {
                let n = self.varint()?;
                self.advance(n)?;
            } else if ty == T_STRUCT {
                self.skip_struct(depth + 1)?;
            } else if bit & LIST_TYPES != 0 {
                self.skip_list(depth + 1)?;
            } else {
                self.skip_value(ty, depth + 1)?;
            }
        }
    }

    /// Skips a list or set (header and elements), elements of the common types in one loop.
    fn skip_list(&mut self, depth: u32) -> Walk<()> {
        if depth > MAX_DEPTH {
            return Err(Fail("nested too deeply"));
        }
        let (elem, n) = self.list_header()?;
        match elem {
            T_I16 | T_I32 | T_I64 => (0..n).try_for_each(|_| self.skip_varint()),
            T_BINARY => (0..n).try_for_each(|_| {
                let len = self.varint()?;
                self.advance(len)
            }),
            T_STRUCT => (0..n).try_for_each(|_| self.skip_struct(depth + 1)),
            _ => (0..n).try_for_each(|_| self.skip_value(elem, depth + 1)),
        }
    }

    /// Skips one value of type `ty` as it appears in a collection (booleans: one byte).
    fn skip_value(&mut self, ty: u8, depth: u32) -> Walk<()> {
        if depth > MAX_DEPTH {
            return Err(Fail("nested too deeply"));
        }
        match ty {
            T_BOOL_TRUE | T_BOOL_FALSE | T_I8 => self.advance(1),
            T_I16 | T_I32 | T_I64 => self.skip_varint(),
            T_DOUBLE => self.advance(8),
            T_BINARY => {
                let n = self.varint()?;
                self.advance(n)
            }
            T_LIST | T_SET => self.skip_list(depth),
            T_MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                if n > (self.buf.len() - self.pos) as u64 {
                    return Err(Fail("map size past the end"));
                }
                (0..n).try_for_each(|_| {
                    self.skip_value(kv >> 4, depth + 1)?;
                    self.skip_value(kv & 0x0f, depth + 1)
                })
            }
            T_STRUCT => self.skip_struct(depth),
            T_UUID => self.advance(16),
            _ => Err(Fail("unknown type code")),
        }
    }

    /// One `RowGroup` struct: its span, `num_rows` (field 3) and number of column chunks
    /// (field 1), every other field skipped.
    fn row_group(&mut self) -> Walk<GroupSpan> {
        let start = self.pos;
        let (mut num_rows, mut n_columns) = (None, None);
        let mut last = 0i16;
        while let Some((id, ty)) = self.field_header(last)? {
            match (id, ty) {
                (1, T_LIST) => {
                    let (elem, n) = self.list_header()?;
                    if elem != T_STRUCT {
                        return Err(Fail("row group columns are not structs"));
                    }
                    (0..n).try_for_each(|_| self.skip_struct(3))?;
                    n_columns = Some(n);
                }
                (3, T_I64) => num_rows = Some(self.zigzag()?),
                _ => self.skip_field(ty, 2)?,
            }
            last = id;
        }
        match (num_rows, n_columns) {
            (Some(num_rows), Some(n_columns)) => Ok(GroupSpan {
                start,
                end: self.pos,
                num_rows,
                n_columns,
            }),
            _ => Err(Fail("a row group without num_rows or columns")),
        }
    }

    /// A `PageHeader`: its length, field 3 `compressed_page_size` and what [`PageInfo`]
    /// holds of the other fields; every other field skipped.
    fn page_header(&mut self) -> Walk<PageInfo> {
        let (mut size, mut page_type, mut uncompressed) = (None, None, None);
        let (mut data, mut dictionary) = (None, None);
        let mut last = 0i16;
        while let Some((id, ty)) = self.field_header(last)? {
            match (id, ty) {
                (1, T_I32) => page_type = Some(self.zigzag()?),
                (2, T_I32) => uncompressed = Some(self.zigzag()?),
                (3, T_I32) => size = Some(self.zigzag()?),
                (5, T_STRUCT) => data = Some(self.data_page_header()?),
                (7, T_STRUCT) => dictionary = Some(self.dictionary_page_header()?),
                _ => self.skip_field(ty, 1)?,
            }
            last = id;
        }
        let size = match size {
            Some(n) if (0..=i32::MAX as i64).contains(&n) => n as usize,
            Some(_) => return Err(Fail("compressed_page_size out of range")),
            None => return Err(Fail("no compressed_page_size")),
        };
        Ok(PageInfo {
            header: self.pos,
            size,
            page_type,
            uncompressed: uncompressed.and_then(|n| usize::try_from(n).ok()),
            data,
            dictionary,
        })
    }

    /// A `DataPageHeader` (v1): fields 1-3, every other field skipped; a missing required
    /// field is `None` there.
    fn data_page_header(&mut self) -> Walk<DataPageV1> {
        let [num_values, encoding, def_level_encoding] = self.first_i32_fields()?;
        Ok(DataPageV1 {
            num_values,
            encoding,
            def_level_encoding,
        })
    }

    /// A `DictionaryPageHeader`: fields 1 (`num_values`) and 2 (`encoding`), every other
    /// field skipped.
    fn dictionary_page_header(&mut self) -> Walk<[Option<i64>; 2]> {
        self.first_i32_fields()
    }

    /// A struct whose fields 1..=K are i32: their values (`None` when missing or of
    /// another type), every other field skipped.
    fn first_i32_fields<const K: usize>(&mut self) -> Walk<[Option<i64>; K]> {
        let mut f = [None; K];
        let mut last = 0i16;
        while let Some((id, ty)) = self.field_header(last)? {
            match (usize::try_from(id), ty) {
                (Ok(i @ 1..), T_I32) if i <= K => f[i - 1] = Some(self.zigzag()?),
                _ => self.skip_field(ty, 2)?,
            }
            last = id;
        }
        Ok(f)
    }

    /// The top-level `FileMetaData` walk of [`FooterMap::scan`].
    fn file_metadata(&mut self) -> Walk<FooterMap> {
        let mut list = None;
        let mut groups = Vec::new();
        let mut last = 0i16;
        while let Some((id, ty)) = self.field_header(last)? {
            if id == 4 {
                if ty != T_LIST {
                    return Err(Fail("row_groups is not a list"));
                }
                let start = self.pos;
                let (elem, n) = self.list_header()?;
                if elem != T_STRUCT {
                    return Err(Fail("row_groups is not a list of structs"));
                }
                groups.reserve(n);
                for _ in 0..n {
                    groups.push(self.row_group()?);
                }
                list = Some((start, self.pos));
            } else {
                self.skip_field(ty, 1)?;
            }
            last = id;
        }
        let list = list.ok_or(Fail("no row_groups field"))?;
        Ok(FooterMap { list, groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walker(buf: &[u8]) -> Walker<'_> {
        Walker { buf, pos: 0 }
    }

    /// A varint of every length, with every number of bytes after it, ends where it ends;
    /// an 11th continuation byte and a cut varint are refused without moving.
    #[test]
    fn varints_of_every_length_are_skipped_exactly() {
        for len in 1..=10usize {
            for after in 0..12usize {
                let mut bytes = vec![0x80u8; len - 1];
                bytes.push(0x01);
                bytes.extend(std::iter::repeat_n(0x00, after));
                let mut w = walker(&bytes);
                assert!(w.skip_varint().is_ok(), "{len} + {after}");
                assert_eq!(w.pos, len, "{len} + {after}");
                let cut = &bytes[..len - 1];
                let mut w = walker(cut);
                assert!(matches!(w.skip_varint(), Err(Fail("truncated"))), "{len}");
                assert_eq!(w.pos, 0);
            }
        }
        for after in 0..12usize {
            let bytes = [vec![0x80u8; 11], vec![0x00; after]].concat();
            let mut w = walker(&bytes);
            let got = w.skip_varint();
            assert!(
                matches!(got, Err(Fail("varint longer than 10 bytes"))),
                "{after}"
            );
            assert_eq!(w.pos, 0);
        }
    }

    /// Every type code as a struct field: each value's extent is skipped exactly (the walk
    /// ends on the struct's stop byte, before the trailing marker), and the codes no value
    /// has are refused.
    #[test]
    fn a_struct_field_of_every_type_is_skipped_by_its_own_rule() {
        let fields: Vec<Vec<u8>> = vec![
            vec![0x11],                                     // 1: bool true (in the header)
            vec![0x12],                                     // 2: bool false
            vec![0x13, 0x80],                               // 3: i8 (a varint would run on)
            vec![0x14, 0x80, 0x01],                         // 4: i16 varint
            vec![0x15, 0xff, 0xff, 0x03],                   // 5: i32 varint
            vec![0x16, 0x81, 0x80, 0x80, 0x80, 0x01],       // 6: i64 varint
            [vec![0x17], vec![9; 8]].concat(),              // 7: double
            vec![0x18, 0x03, b'a', b'b', b'c'],             // 8: binary
            vec![0x19, 0x25, 0x02, 0x04],                   // 9: list of two i32
            vec![0x1a, 0x18, 0x01, b'x'],                   // 10: set of one binary
            vec![0x1b, 0x02, 0x55, 0x02, 0x04, 0x06, 0x08], // 11: map i32 -> i32, 2 pairs
            vec![0x1c, 0x15, 0x02, 0x00],                   // 12: struct { i32 }
            [vec![0x1d], vec![7; 16]].concat(),             // 13: uuid
            vec![0x05, 0x08, 0x02],                         // i32, field id 4 written in full
        ];
        let body: Vec<u8> = fields.concat();
        let bytes = [body.clone(), vec![0x00, 0xee]].concat();
        let mut w = walker(&bytes);
        assert!(w.skip_struct(1).is_ok());
        assert_eq!(w.pos, body.len() + 1, "ends after the stop byte");
        for ty in [0x0e, 0x0f] {
            let bytes = [0x10 | ty, 0x00, 0x00];
            let mut w = walker(&bytes);
            assert!(
                matches!(w.skip_struct(1), Err(Fail("unknown type code"))),
                "{ty}"
            );
        }
        // Nesting past MAX_DEPTH through struct fields is refused, never a stack overflow.
        let deep = [vec![0x1c; 200], vec![0x00; 201]].concat();
        let mut w = walker(&deep);
        assert!(matches!(w.skip_struct(1), Err(Fail("nested too deeply"))));
    }

    /// A footer written by the parquet crate maps to its own row groups, and the two
    /// rewritten footers decode to the file-level part and to one group.
    #[test]
    fn maps_the_row_groups_of_a_real_footer() {
        use arrow_array::{Float32Array, Int64Array, RecordBatch};
        use parquet::arrow::ArrowWriter;
        use parquet::file::metadata::ParquetMetaDataReader;
        use parquet::file::properties::WriterProperties;
        use std::sync::Arc;

        let rows = [5usize, 7, 1];
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(7))
            .build();
        let schema = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![0i64])) as _),
            ("b", Arc::new(Float32Array::from(vec![0f32])) as _),
        ])
        .unwrap()
        .schema();
        let mut file = Vec::new();
        let mut w = ArrowWriter::try_new(&mut file, schema.clone(), Some(props)).unwrap();
        let mut v = 0i64;
        for &n in &rows {
            let a: Vec<i64> = (v..v + n as i64).collect();
            let b: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            v += n as i64;
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(a)),
                    Arc::new(Float32Array::from(b)),
                ],
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.flush().unwrap();
        }
        w.close().unwrap();
        let n = file.len();
        let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
        let footer = &file[n - 8 - len..n - 8];
        let full = ParquetMetaDataReader::decode_metadata(footer).unwrap();

        let map = FooterMap::scan(footer).unwrap();
        let got: Vec<i64> = map.groups.iter().map(|g| g.num_rows).collect();
        assert_eq!(got, vec![5, 7, 1]);
        assert!(map.groups.iter().all(|g| g.n_columns == 2));
        let skeleton = ParquetMetaDataReader::decode_metadata(&map.without_groups(footer)).unwrap();
        assert_eq!(skeleton.num_row_groups(), 0);
        assert_eq!(skeleton.file_metadata().num_rows(), 13);
        for g in 0..3 {
            let one = ParquetMetaDataReader::decode_metadata(&map.only_group(footer, g)).unwrap();
            assert_eq!(one.num_row_groups(), 1);
            let (a, b) = (one.row_group(0), full.row_group(g));
            assert_eq!(a.num_rows(), b.num_rows());
            for c in 0..2 {
                assert_eq!(
                    a.column(c).data_page_offset(),
                    b.column(c).data_page_offset()
                );
                assert_eq!(a.column(c).compressed_size(), b.column(c).compressed_size());
            }
        }
        // The head alone (up to row_groups) decodes to the same file-level metadata; every
        // head too short to reach row_groups gives None, never a panic.
        let start = FooterMap::row_groups_start(footer).unwrap();
        assert_eq!(start, map.list.0);
        let head =
            ParquetMetaDataReader::decode_metadata(&head_without_groups(footer, start)).unwrap();
        assert_eq!(head.num_row_groups(), 0);
        assert_eq!(head.file_metadata().num_rows(), 13);
        assert_eq!(
            head.file_metadata().schema_descr().num_columns(),
            full.file_metadata().schema_descr().num_columns()
        );
        for cut in 0..start {
            assert_eq!(
                FooterMap::row_groups_start(&footer[..cut]),
                None,
                "cut at {cut}"
            );
        }
        assert_eq!(FooterMap::row_groups_start(&footer[..start]), Some(start));
        // Every truncation of the footer is refused by the walk, never a panic.
        for cut in 0..footer.len() {
            assert!(FooterMap::scan(&footer[..cut]).is_err(), "cut at {cut}");
        }
    }
}
