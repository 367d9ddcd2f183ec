"""Arrow across the boundary, zero-copy, through the Arrow C data and stream interfaces.

Out: a C function fills a ``struct ArrowArrayStream``; pyarrow imports it at once
(``RecordBatchReader._import_from_c``), taking ownership: the record batches it yields wrap
the library's buffers (no copy) and release them when pyarrow drops them. Streams outlive the
handle that produced them (contract §1).

In: pyarrow exports a record batch into a ``struct ArrowArray`` + ``struct ArrowSchema``
(``RecordBatch._export_to_c``); the library takes the array (it calls ``release``) and borrows
the schema, which is released here after the call.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pyarrow as pa

from . import _capi
from ._errors import call

_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

INDEX_COLUMN = "_index"
"""The column that holds an unnamed pandas index (as the converter and AnnData name it)."""


def import_stream(fn: Callable[..., int], *args: Any) -> pa.RecordBatchReader:
    """Calls ``fn(*args, &stream)`` and hands the stream to pyarrow."""
    stream = _capi.ArrowArrayStream()
    call(fn, *args, ctypes.byref(stream))
    return pa.RecordBatchReader._import_from_c(ctypes.addressof(stream))


def read_table(fn: Callable[..., int], *args: Any) -> pa.Table:
    """As import_stream, read to the end into one table."""
    return import_stream(fn, *args).read_all()


def _release(struct: ctypes.Structure) -> None:
    if struct.release:
        _RELEASE(struct.release)(ctypes.addressof(struct))


@contextmanager
def exported(batch: pa.RecordBatch) -> Iterator[tuple[ctypes.c_void_p, ctypes.c_void_p]]:
    """(array*, schema*) of a record batch for one C call that moves the array in and
    borrows the schema; whatever the library did not take is released on exit."""
    array = _capi.ArrowArray()
    schema = _capi.ArrowSchema()
    batch._export_to_c(ctypes.addressof(array), ctypes.addressof(schema))
    try:
        yield ctypes.byref(array), ctypes.byref(schema)
    finally:
        _release(array)
        _release(schema)


def as_table(data: Any, *, preserve_index: bool = False) -> pa.Table:
    """A pyarrow Table from a Table, RecordBatch, RecordBatchReader, pandas DataFrame or any
    object with ``__arrow_c_stream__`` / ``__arrow_c_array__`` (polars, nanoarrow, ...)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=preserve_index)
    return pa.table(data)


def one_batch(data: Any, *, preserve_index: bool = False) -> pa.RecordBatch:
    """The whole input as a single record batch (for calls that take one table)."""
    table = as_table(data, preserve_index=preserve_index).combine_chunks()
    batches = table.to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    (batch,) = batches  # one chunk per column after combine_chunks
    return batch


def batches(data: Any, *, preserve_index: bool = False) -> Iterator[pa.RecordBatch]:
    """The input's record batches, in order (a reader is consumed as it goes)."""
    if isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.RecordBatchReader):
        yield from data
    else:
        yield from as_table(data, preserve_index=preserve_index).to_batches()


def to_pandas(table: pa.Table) -> Any:
    """A DataFrame whose index is the ``_index`` column (or the stored pandas index),
    unnamed as it was in AnnData; dictionary columns become ``category``, and integer
    columns with missing values pandas' nullable integers (not floats)."""
    import pandas as pd

    df = table.to_pandas()
    nullable = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
                pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype()}
    for field, column in zip(table.schema, table.columns):
        if field.type not in nullable or not column.null_count or field.name not in df.columns:
            continue  # not a nullable integer column, or the pandas metadata made it the index
        if not isinstance(df[field.name].dtype, pd.api.extensions.ExtensionDtype):
            df[field.name] = column.to_pandas(types_mapper=nullable.get).array
    if INDEX_COLUMN in df.columns:
        df = df.set_index(INDEX_COLUMN)
    if df.index.name == INDEX_COLUMN:
        df.index.name = None
    return df
