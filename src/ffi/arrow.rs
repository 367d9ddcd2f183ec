//! Arrow across the boundary, one idiom each way (c-api.md §1, "Arrow"):
//!
//! * **in**: a `struct ArrowArray` (a struct array: one record batch) is *moved* into the
//!   library and its `struct ArrowSchema` borrowed. [`BatchIn::take`] takes the array before
//!   anything else can fail, so that it is released on every path (the caller's struct is
//!   marked released at once); [`BatchIn::import`] validates it fully.
//! * **out**: results leave as a `struct ArrowArrayStream` written to an out-parameter
//!   ([`export_stream`]), owning their data (collected batches, or an iterator holding the
//!   store open), so a stream stays valid after the handle that produced it is freed.

use std::sync::Arc;

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{
    Array, ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchOptions, RecordBatchReader,
    StructArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

use super::args::{null_arg, Out};
use super::error::{guard, DC_ERR_INTERNAL, DC_OK};

/// A record batch passed in by C, taken from the caller's `struct ArrowArray`.
pub(crate) struct BatchIn {
    array: Option<FFI_ArrowArray>,
    schema: *const FFI_ArrowSchema,
    what: &'static str,
}

impl BatchIn {
    /// Takes ownership of the caller's array: the caller's struct is marked released at
    /// once, whatever happens next (the Arrow C data interface's move semantics). `what`
    /// names the argument in messages.
    ///
    /// # Safety
    /// `array` is NULL or points to a valid (possibly released) `struct ArrowArray`;
    /// `schema` is NULL or a valid `struct ArrowSchema` describing it, which stays valid
    /// until `import` returns.
    pub(crate) unsafe fn take(
        array: *mut FFI_ArrowArray,
        schema: *const FFI_ArrowSchema,
        what: &'static str,
    ) -> BatchIn {
        let array = if array.is_null() {
            None
        } else {
            // SAFETY: a valid ArrowArray per the caller; an empty (released) one is left
            // behind, and the original's release callback runs once, when ours is dropped.
            Some(unsafe { std::ptr::replace(array, FFI_ArrowArray::empty()) })
        };
        BatchIn {
            array,
            schema,
            what,
        }
    }

    /// Imports the batch with its schema (whose metadata is kept). Every buffer is
    /// validated: a C caller's data is not trusted.
    ///
    /// Errors: `InvalidArgument` (NULL, released, not a struct array, invalid buffers, null
    /// rows).
    pub(crate) fn import(self) -> Result<RecordBatch> {
        let what = self.what;
        let array = self.array.ok_or_else(|| null_arg(what))?;
        // SAFETY: NULL or valid until now, per `take`'s contract.
        let schema = unsafe { self.schema.as_ref() }.ok_or_else(|| null_arg("schema"))?;
        if array.is_released() {
            return Err(Error::invalid_argument(format!(
                "{what} is a released ArrowArray"
            )));
        }
        let bad = |e: &dyn std::fmt::Display| Error::invalid_argument(format!("{what}: {e}"));
        let dt = DataType::try_from(schema).map_err(|e| bad(&e))?;
        if !matches!(dt, DataType::Struct(_)) {
            return Err(Error::invalid_argument(format!(
                "{what} must be a struct array (a record batch), got {dt}"
            )));
        }
        let fields = Schema::try_from(schema).map_err(|e| bad(&e))?;
        // SAFETY: the array and its schema come from the caller, who guarantees they agree;
        // the data is fully validated below before any use.
        let data = unsafe { from_ffi(array, schema) }.map_err(|e| bad(&e))?;
        data.validate_full().map_err(|e| bad(&e))?;
        if !matches!(data.data_type(), DataType::Struct(_)) {
            return Err(Error::invalid_argument(format!(
                "{what} must be a struct array (a record batch), got {}",
                data.data_type()
            )));
        }
        let st = StructArray::from(data);
        if st.null_count() > 0 {
            return Err(Error::invalid_argument(format!(
                "{what}: the struct array has {} null rows; a record batch has none",
                st.null_count()
            )));
        }
        let n = st.len();
        let (_, columns, _) = st.into_parts();
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        RecordBatch::try_new_with_options(Arc::new(fields), columns, &opts).map_err(|e| bad(&e))
    }
}

/// Moves `reader` into the caller's stream out-parameter. Each batch is produced under the
/// guard of an exported call (`Guarded`).
///
/// The schema is converted first: the C Data Interface carries names as C strings, so a
/// field name with a NUL byte cannot cross it, and a stream whose `get_schema` fails would
/// hand out a result that looks complete but cannot be read. Such a result is refused here
/// with `Format` naming `what` (the readers refuse the names where they read them, naming the
/// file; this is the boundary's own check, for every stream).
pub(crate) fn export_stream(
    out: Out<'_, FFI_ArrowArrayStream>,
    reader: Box<dyn RecordBatchReader + Send>,
    what: &str,
) -> Result<()> {
    FFI_ArrowSchema::try_from(reader.schema().as_ref()).map_err(|e| {
        Error::format(format!(
            "{what}: the result's schema cannot cross the Arrow C Data Interface ({e})"
        ))
    })?;
    out.set(FFI_ArrowArrayStream::new(Box::new(Guarded {
        inner: reader,
        failed: None,
    })));
    Ok(())
}

/// A stream's reader as the consumer's `get_next` reaches it: each batch is produced under
/// the guard of an exported call (counted as library work for fork safety, panics caught
/// and never printed). After a panic the stream only reports that error.
struct Guarded {
    inner: Box<dyn RecordBatchReader + Send>,
    failed: Option<String>,
}

impl Iterator for Guarded {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(m) = &self.failed {
            return Some(Err(ArrowError::ExternalError(m.clone().into())));
        }
        let mut item = None;
        let status = guard(|| {
            item = self.inner.next();
            Ok(())
        });
        if status == DC_OK {
            return item;
        }
        debug_assert_eq!(status, DC_ERR_INTERNAL);
        let m = super::error::last_error_message();
        self.failed = Some(m.clone());
        Some(Err(ArrowError::ExternalError(m.into())))
    }
}

impl RecordBatchReader for Guarded {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

/// A stream of one batch.
pub(crate) fn one_batch(batch: RecordBatch) -> Box<dyn RecordBatchReader + Send> {
    let schema = batch.schema();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// A one-column table (nullable field, no metadata).
pub(crate) fn one_column(name: &str, values: ArrayRef) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        name,
        values.data_type().clone(),
        true,
    )]));
    RecordBatch::try_new(schema, vec![values]).map_err(|e| Error::format(e.to_string()))
}

/// A one-column utf8 table.
pub(crate) fn string_column(name: &str, values: Vec<String>) -> Result<RecordBatch> {
    let a: ArrayRef = Arc::new(arrow_array::StringArray::from(values));
    debug_assert_eq!(a.data_type(), &DataType::Utf8);
    one_column(name, a)
}
