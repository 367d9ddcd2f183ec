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

    /// Checks `<path>/zarr.json` describes a 1-D array of `dtype`; returns its length.
    pub(crate) fn shape_1d(&self, path: &str, dtype: &str) -> Result<u64> {
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
        Ok(shape[0])
    }

    fn read<T: zarrs::array::ElementOwned + Send>(
        &self,
        path: &str,
        dtype: &str,
    ) -> Result<Vec<T>> {
        let n = self.shape_1d(path, dtype)?;
        let ctx = format!("{}/{path}", self.store.display);
        let zerr = |e: &dyn std::fmt::Display| match self.store.exists(&format!("{path}/zarr.json"))
        {
            true => Error::format(format!("{ctx}: {e}")),
            false => Error::new(ErrorKind::NotFound, format!("{ctx}: {e}")),
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
        let path = key.as_str();
        if !self.0.exists(path) {
            return Ok(None);
        }
        let bytes = Bytes::from(
            self.0
                .read(path)
                .map_err(|e| zarrs::storage::StorageError::Other(e.message))?,
        );
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
        let path = key.as_str();
        if !self.0.exists(path) {
            return Ok(None);
        }
        let s = self
            .0
            .slice(path)
            .map_err(|e| zarrs::storage::StorageError::Other(e.message))?;
        Ok(Some(s.len()))
    }
}
