//! Arrow values as both directions see them: the normal types a reader returns for stored
//! types (§15.4: strings as `utf8`, dictionaries decoded) and the values of any integer
//! column. Shared by `read` (decoding) and `write` (normalising the caller's batches).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use crate::error::{Error, ErrorKind, Result};

/// Arrow type a reader returns for a stored type: strings as `utf8`, dictionaries decoded.
pub(crate) fn normal_type(t: &DataType) -> DataType {
    match t {
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Dictionary(_, v) => normal_type(v),
        other => other.clone(),
    }
}

/// Makes an array of the normal type: dictionaries decoded, large / view strings to utf8.
pub(crate) fn normalise_array(a: &ArrayRef) -> Result<ArrayRef> {
    use arrow_array::cast::AsArray;
    Ok(match a.data_type() {
        DataType::LargeUtf8 => Arc::new(
            a.as_string::<i64>()
                .iter()
                .collect::<arrow_array::StringArray>(),
        ),
        DataType::Utf8View => Arc::new(
            a.as_string_view()
                .iter()
                .collect::<arrow_array::StringArray>(),
        ),
        DataType::Dictionary(_, _) => {
            let d = a.as_any_dictionary();
            let values = normalise_array(d.values())?;
            let keys = arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int64Type>(
                &arrow_cast_keys(d.keys())?,
            )
            .clone();
            arrow_select::take::take(&values, &keys, None)
                .map_err(|e| Error::format(format!("cannot decode dictionary: {e}")))?
        }
        _ => a.clone(),
    })
}

/// Dictionary keys as Int64 (any integer key type).
fn arrow_cast_keys(keys: &dyn Array) -> Result<ArrayRef> {
    let v = int_values(keys)?;
    Ok(Arc::new(arrow_array::Int64Array::from(v)))
}

/// Values of any integer array as `Option<i64>` (nulls kept); non-integers are an error.
pub(crate) fn int_values(a: &dyn Array) -> Result<Vec<Option<i64>>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    macro_rules! conv {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .iter()
                .map(|v| v.map(|x| x as i64))
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => conv!(Int8Type),
        DataType::Int16 => conv!(Int16Type),
        DataType::Int32 => conv!(Int32Type),
        DataType::Int64 => conv!(Int64Type),
        DataType::UInt8 => conv!(UInt8Type),
        DataType::UInt16 => conv!(UInt16Type),
        DataType::UInt32 => conv!(UInt32Type),
        DataType::UInt64 => a
            .as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.map(|x| x.min(i64::MAX as u64) as i64))
            .collect(),
        t => {
            return Err(Error::new(
                ErrorKind::Format,
                format!("expected an integer column, found {t}"),
            ))
        }
    })
}

/// A record batch with normal types, every field nullable, and no metadata.
pub(crate) fn normalise(b: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::with_capacity(b.num_columns());
    let mut cols = Vec::with_capacity(b.num_columns());
    for (f, c) in b.schema().fields().iter().zip(b.columns()) {
        let c = normalise_array(c)?;
        fields.push(Field::new(f.name(), c.data_type().clone(), true));
        cols.push(c);
    }
    let schema = Arc::new(Schema::new(fields));
    RecordBatch::try_new_with_options(
        schema,
        cols,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
    )
    .map_err(|e| Error::format(e.to_string()))
}
