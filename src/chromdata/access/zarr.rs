//! Zarr v3 arrays of a store (§6.1, §11, §12): 1-D index arrays and the N-D arrays of the
//! component groups, read through zarrs (bytes + zstd
//! codecs) from a directory or a `.cdz` alike, with their dtype and shape checked.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    Int8Array, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use bytes::Bytes;
use serde_json::Value;
use zarrs::array::Array;

use super::store::Store;
use crate::chromdata::spec::ArrayType;
use crate::error::{Error, ErrorKind, Result};

/// Reads the 1-D Zarr arrays of a store.
pub(crate) struct ArrayReader {
    pub(crate) store: Arc<Store>,
    zs: Arc<ZarrsStorage>,
}

impl ArrayReader {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        ArrayReader {
            zs: Arc::new(ZarrsStorage(store.clone())),
            store,
        }
    }

    /// Fetches ahead (see [`Store::fetch_ahead`]) the documents of the 1-D `arrays` and
    /// the files `other` (whole), then the chunks of those arrays whose documents are in
    /// the plain encoding of §6.1: two rounds of concurrent requests for what reading the
    /// arrays one after another would ask for one at a time. Local stores: nothing.
    pub(crate) fn fetch_ahead_1d(&self, arrays: &[String], other: &[String]) {
        /// Chunk keys fetched ahead at most (the rest are read when needed).
        const MAX_CHUNKS: u64 = 4096;
        if self.store.location.is_some() {
            return;
        }
        let mut first: Vec<String> = arrays.iter().map(|a| format!("{a}/zarr.json")).collect();
        first.extend(other.iter().cloned());
        self.store.fetch_ahead(&first);
        let mut chunks = Vec::new();
        for a in arrays {
            let Ok(Some(meta)) = self.store.read_json_opt(&format!("{a}/zarr.json")) else {
                continue;
            };
            let (Some(layout), Some(n)) = (
                PlainLayout::of(&meta),
                meta.get("shape")
                    .and_then(|s| s.get(0))
                    .and_then(Value::as_u64),
            ) else {
                continue;
            };
            let n_chunks = n.div_ceil(layout.chunk);
            if chunks.len() as u64 + n_chunks > MAX_CHUNKS {
                continue;
            }
            chunks.extend((0..n_chunks).map(|k| format!("{a}/c/{k}")));
        }
        self.store.fetch_ahead(&chunks);
    }

    /// Checks `<path>/zarr.json` describes a 1-D array of `dtype`; returns its length.
    pub(crate) fn shape_1d(&self, path: &str, dtype: &str) -> Result<u64> {
        self.meta_1d(path, dtype).map(|(n, _)| n)
    }

    /// Checks `<path>/zarr.json` describes a 1-D array of `dtype`; returns its length and
    /// the document.
    fn meta_1d(&self, path: &str, dtype: &str) -> Result<(u64, Value)> {
        let ctx = format!("{}/{path}/zarr.json", self.store.display);
        let meta = self.store.read_json(&format!("{path}/zarr.json"))?;
        let o = meta
            .as_object()
            .ok_or_else(|| Error::format(format!("{ctx}: expected a JSON object")))?;
        if o.get("zarr_format").and_then(Value::as_u64) != Some(3)
            || o.get("node_type").and_then(Value::as_str) != Some("array")
        {
            return Err(Error::format(format!("{ctx}: not a Zarr v3 array")));
        }
        let dt = o.get("data_type").and_then(Value::as_str).unwrap_or("?");
        if dt != dtype {
            return Err(Error::format(format!(
                "{ctx}: data_type \"{dt}\", expected \"{dtype}\" (spec §11)"
            )));
        }
        let shape: Vec<u64> = o
            .get("shape")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let n_dims = o.get("shape").and_then(Value::as_array).map_or(0, Vec::len);
        if shape.len() != 1 || n_dims != 1 {
            return Err(Error::format(format!(
                "{ctx}: shape must be 1-D, got {}",
                o.get("shape").unwrap_or(&Value::Null)
            )));
        }
        Ok((shape[0], meta))
    }

    /// Reads a 1-D array in the encoding of §6.1 (regular chunks `c/<k>`, little-endian
    /// bytes, optionally zstd, fill value 0) without zarrs: the index arrays of every open.
    /// Through zarrs each array parsed its `zarr.json` again and made a zstd context per
    /// chunk, a quarter of a small store's open. None when the array is encoded otherwise.
    fn read_plain<T: LeElement>(&self, path: &str, n: u64, meta: &Value) -> Result<Option<Vec<T>>> {
        let Some(layout) = PlainLayout::of(meta) else {
            return Ok(None);
        };
        let ctx = format!("{}/{path}", self.store.display);
        let chunk_bytes = layout
            .chunk
            .checked_mul(T::SIZE as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::limit(format!("{ctx}: chunks too large")))?;
        let total = usize::try_from(n)
            .ok()
            .filter(|&n| n <= isize::MAX as usize / T::SIZE)
            .ok_or_else(|| Error::limit(format!("{ctx}: {n} elements")))?;
        let mut out: Vec<T> = Vec::with_capacity(total);
        let mut buf: Vec<u8> = Vec::new();
        let mut k = 0u64;
        while out.len() < total {
            let take = (total - out.len()).min(layout.chunk as usize);
            let key = format!("{path}/c/{k}");
            let Some(stored) = self.store.read_opt(&key)? else {
                // A missing chunk holds the fill value, 0 (standard Zarr v3).
                out.resize(out.len() + take, T::default());
                k += 1;
                continue;
            };
            let bytes: &[u8] = if layout.zstd {
                buf.clear();
                buf.reserve(chunk_bytes);
                super::pages::with_zstd(|d| d.decompress_to_buffer(&stored, &mut buf))
                    .and_then(|r| r)
                    .map_err(|e| Error::format(format!("{ctx}/c/{k}: zstd: {e}")))?;
                &buf
            } else {
                &stored
            };
            if bytes.len() != chunk_bytes {
                return Err(Error::format(format!(
                    "{ctx}/c/{k}: chunk of {} bytes, expected {chunk_bytes}",
                    bytes.len()
                )));
            }
            out.extend(bytes.chunks_exact(T::SIZE).take(take).map(T::from_le));
            k += 1;
        }
        Ok(Some(out))
    }

    fn read<T: zarrs::array::ElementOwned + Send + LeElement>(
        &self,
        path: &str,
        dtype: &str,
    ) -> Result<Vec<T>> {
        let (n, meta) = self.meta_1d(path, dtype)?;
        if let Some(v) = self.read_plain(path, n, &meta)? {
            return Ok(v);
        }
        let ctx = format!("{}/{path}", self.store.display);
        let zerr = |e: &dyn std::fmt::Display| match self.store.exists(&format!("{path}/zarr.json"))
        {
            Ok(true) => Error::format(format!("{ctx}: {e}")),
            Ok(false) => Error::new(ErrorKind::NotFound, format!("{ctx}: {e}")),
            Err(io) => io,
        };
        // zarrs may fan out over chunks with rayon: keep that off the global pool.
        let pool = crate::pool::pool(2)?;
        let v: Vec<T> = crate::contain::decoding(&ctx, || {
            let array = Array::open(self.zs.clone(), &format!("/{path}")).map_err(|e| zerr(&e))?;
            pool.install(|| array.retrieve_array_subset::<Vec<T>>(&array.subset_all()))
                .map_err(|e| zerr(&e))
        })?;
        if v.len() as u64 != n {
            return Err(Error::format(format!(
                "{ctx}: decoded {} elements, shape says {n}",
                v.len()
            )));
        }
        Ok(v)
    }

    /// The elements of the N-D array at `path` (§12: cellm, binm, results, uns), row-major,
    /// as one Arrow array of `ty`'s type. `shape` is the shape its `zarr.json` declares
    /// (parsed by the caller); the array must agree.
    pub(crate) fn read_values(&self, path: &str, ty: ArrayType, shape: &[u64]) -> Result<ArrayRef> {
        let ctx = format!("{}/{path}", self.store.display);
        let zerr = |e: &dyn std::fmt::Display| Error::format(format!("{ctx}: {e}"));
        let array = crate::contain::decoding(&ctx, || {
            Array::open(self.zs.clone(), &format!("/{path}")).map_err(|e| zerr(&e))
        })?;
        if array.shape() != shape {
            return Err(Error::format(format!(
                "{ctx}: zarrs reads shape {:?}, zarr.json says {shape:?}",
                array.shape()
            )));
        }
        let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n.is_none_or(|n| n > (isize::MAX as u64) / ty.size() as u64) {
            return Err(Error::limit(format!(
                "{ctx}: shape {shape:?} holds more elements than memory can"
            )));
        }
        // zarrs may fan out over chunks with rayon: keep that off the global pool.
        let pool = crate::pool::pool(2)?;
        let subset = array.subset_all();
        macro_rules! elements {
            ($t:ty) => {
                pool.install(|| array.retrieve_array_subset::<Vec<$t>>(&subset))
                    .map_err(|e| zerr(&e))?
            };
        }
        let values = crate::contain::decoding(&ctx, || -> Result<ArrayRef> {
            Ok(match ty {
                ArrayType::Bool => Arc::new(BooleanArray::from(elements!(bool))),
                ArrayType::Int8 => Arc::new(Int8Array::from(elements!(i8))),
                ArrayType::Int16 => Arc::new(Int16Array::from(elements!(i16))),
                ArrayType::Int32 => Arc::new(Int32Array::from(elements!(i32))),
                ArrayType::Int64 => Arc::new(Int64Array::from(elements!(i64))),
                ArrayType::UInt8 => Arc::new(UInt8Array::from(elements!(u8))),
                ArrayType::UInt16 => Arc::new(UInt16Array::from(elements!(u16))),
                ArrayType::UInt32 => Arc::new(UInt32Array::from(elements!(u32))),
                ArrayType::UInt64 => Arc::new(UInt64Array::from(elements!(u64))),
                ArrayType::Float32 => Arc::new(Float32Array::from(elements!(f32))),
                ArrayType::Float64 => Arc::new(Float64Array::from(elements!(f64))),
            })
        })?;
        if Some(values.len() as u64) != n {
            return Err(Error::format(format!(
                "{ctx}: decoded {} elements, shape {shape:?} says otherwise",
                values.len()
            )));
        }
        Ok(values)
    }

    /// Elements `[start, start + n)` of the 1-D int64 array at `path` (chunks outside the
    /// range are not read).
    pub(crate) fn read_i64_range(&self, path: &str, start: u64, n: u64) -> Result<Vec<i64>> {
        let len = self.shape_1d(path, "int64")?;
        let ctx = format!("{}/{path}", self.store.display);
        start.checked_add(n).filter(|&e| e <= len).ok_or_else(|| {
            Error::format(format!(
                "{ctx}: elements {start}..{start}+{n} requested, the array has {len}"
            ))
        })?;
        let array = Array::open(self.zs.clone(), &format!("/{path}"))
            .map_err(|e| Error::format(format!("{ctx}: {e}")))?;
        let subset = zarrs::array::ArraySubset::new_with_start_shape(vec![start], vec![n])
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        let pool = crate::pool::pool(2)?;
        let v: Vec<i64> = pool
            .install(|| array.retrieve_array_subset::<Vec<i64>>(&subset))
            .map_err(|e| Error::format(format!("{ctx}: {e}")))?;
        if v.len() as u64 != n {
            return Err(Error::format(format!(
                "{ctx}: decoded {} elements, expected {n}",
                v.len()
            )));
        }
        Ok(v)
    }

    pub(crate) fn read_i64(&self, path: &str) -> Result<Vec<i64>> {
        self.read::<i64>(path, "int64")
    }
    pub(crate) fn read_i32(&self, path: &str) -> Result<Vec<i32>> {
        self.read::<i32>(path, "int32")
    }
}

/// An element stored little-endian in `SIZE` bytes.
trait LeElement: Copy + Default {
    const SIZE: usize;
    fn from_le(b: &[u8]) -> Self;
}

impl LeElement for i32 {
    const SIZE: usize = 4;
    fn from_le(b: &[u8]) -> Self {
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl LeElement for i64 {
    const SIZE: usize = 8;
    fn from_le(b: &[u8]) -> Self {
        i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

/// The 1-D encoding of §6.1 that [`ArrayReader::read_plain`] reads itself.
struct PlainLayout {
    chunk: u64,
    zstd: bool,
}

impl PlainLayout {
    /// The layout of an array document, if it is exactly §6.1's (any other key, codec,
    /// chunk grid, key encoding or fill value: None, and zarrs reads the array).
    fn of(meta: &Value) -> Option<PlainLayout> {
        let o = meta.as_object()?;
        const KNOWN: [&str; 10] = [
            "zarr_format",
            "node_type",
            "shape",
            "data_type",
            "chunk_grid",
            "chunk_key_encoding",
            "fill_value",
            "codecs",
            "attributes",
            "dimension_names",
        ];
        if o.keys().any(|k| !KNOWN.contains(&k.as_str())) {
            return None;
        }
        let grid = o.get("chunk_grid")?;
        if grid.get("name")?.as_str()? != "regular" {
            return None;
        }
        let shape = grid.get("configuration")?.get("chunk_shape")?.as_array()?;
        let chunk = match shape.as_slice() {
            [c] => c.as_u64().filter(|&c| c > 0)?,
            _ => return None,
        };
        let keys = o.get("chunk_key_encoding")?;
        let separator = keys
            .get("configuration")
            .and_then(|c| c.get("separator"))
            .map_or(Some("/"), Value::as_str)?;
        if keys.get("name")?.as_str()? != "default" || separator != "/" {
            return None;
        }
        if o.get("fill_value")?.as_i64()? != 0 {
            return None;
        }
        let codecs = o.get("codecs")?.as_array()?;
        let name = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_string);
        let little = |c: &Value| {
            name(c).as_deref() == Some("bytes")
                && c.get("configuration")
                    .and_then(|c| c.get("endian"))
                    .and_then(Value::as_str)
                    == Some("little")
        };
        let zstd = match codecs.as_slice() {
            [b] if little(b) => false,
            [b, z] if little(b) && name(z).as_deref() == Some("zstd") => true,
            _ => return None,
        };
        Some(PlainLayout { chunk, zstd })
    }
}

/// zarrs storage over a [`Store`], so Zarr arrays are read from directories and from
/// `.cdz` members alike (read-only; no listing, which the spec forbids relying on).
pub(crate) struct ZarrsStorage(pub(crate) Arc<Store>);

impl zarrs::storage::ReadableStorageTraits for ZarrsStorage {
    fn get_partial_many<'a>(
        &'a self,
        key: &zarrs::storage::StoreKey,
        byte_ranges: zarrs::storage::byte_range::ByteRangeIterator<'a>,
    ) -> std::result::Result<zarrs::storage::MaybeBytesIterator<'a>, zarrs::storage::StorageError>
    {
        let stored = self
            .0
            .read_opt(key.as_str())
            .map_err(|e| zarrs::storage::StorageError::Other(e.message))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let bytes = Bytes::from(stored);
        let len = bytes.len() as u64;
        Ok(Some(Box::new(byte_ranges.map(move |range| {
            use zarrs::storage::byte_range::ByteRange;
            let (start, end) = match range {
                ByteRange::FromStart(off, None) => (off, len),
                ByteRange::FromStart(off, Some(n)) => (off, off.saturating_add(n)),
                ByteRange::Suffix(n) => (len.saturating_sub(n), if n > len { 0 } else { len }),
            };
            if start > end || end > len {
                return Err(
                    zarrs::storage::byte_range::InvalidByteRangeError::new(range, len).into(),
                );
            }
            Ok(bytes.slice(start as usize..end as usize))
        }))))
    }

    fn supports_get_partial(&self) -> bool {
        true
    }

    fn size_key(
        &self,
        key: &zarrs::storage::StoreKey,
    ) -> std::result::Result<Option<u64>, zarrs::storage::StorageError> {
        match self.0.slice(key.as_str()) {
            Ok(s) => Ok(Some(s.len())),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(zarrs::storage::StorageError::Other(e.message)),
        }
    }
}
