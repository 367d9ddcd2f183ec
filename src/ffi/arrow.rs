//! Arrow C stream export: results leave the library as `struct ArrowArrayStream`, owning
//! their data (collected batches, or an iterator holding the store open), so a stream
//! stays valid after the handle that produced it is freed.

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

use super::error::{guard, DC_ERR_INTERNAL, DC_OK};
use crate::error::{Error, Result};

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

/// Moves `reader` into the caller's `*out` (already checked non-NULL).
///
/// # Safety
/// `out` must be valid for a write of an `FFI_ArrowArrayStream`; its previous content is
/// overwritten without being released (it is an out-parameter).
pub(crate) unsafe fn export_reader(
    reader: Box<dyn RecordBatchReader + Send>,
    out: *mut FFI_ArrowArrayStream,
) {
    let stream = FFI_ArrowArrayStream::new(Box::new(Guarded {
        inner: reader,
        failed: None,
    }));
    // SAFETY: guaranteed by the caller; `write` does not drop the uninitialised old value.
    unsafe { out.write(stream) }
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
