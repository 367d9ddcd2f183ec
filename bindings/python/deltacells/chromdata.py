"""ChromData stores (contract §5, §6): ``ChromData`` (backed reading) and
``ChromDataWriter`` (streaming writing). Every query answers with pyarrow data imported
zero-copy through the Arrow C stream interface."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from . import _arrow, _capi
from ._errors import call
from ._handles import Handle, Options, PathOrUrl, cstrings, normalize_source, open_handle, option_strings

Columns = Union[None, Literal["coords"], Sequence[str]]
"""Spot columns of a query: None = all; ``"coords"`` = the keys + x, y, z; or names."""

Id = Union[str, int]
"""A trace / cell id: text, or an int for integer-typed categories (sent as its decimal text)."""

LAYOUTS = {"flat": _capi.DC_LAYOUT_FLAT, "partitioned": _capi.DC_LAYOUT_PARTITIONED,
           "primary_coords": _capi.DC_LAYOUT_PRIMARY_COORDS}
"""Spot-table layouts by name: 2.0 flat, 2.1 partitioned by chromosome, 2.2 primary + coords."""
_LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}


@dataclass(frozen=True)
class ChromDataInfo:
    """Version, layout and counts of a store (``dc_chromdata_info``)."""

    format_major: int
    format_minor: int
    layout: str  # "flat", "partitioned" or "primary_coords"
    n_spots: int
    n_bins: int
    n_traces: int
    n_cells: int
    n_chroms: int
    has_coords: bool
    has_cell_id: bool
    n_runs: int
    n_row_groups: int
    has_source_row: bool
    coord_bits: int  # 32 or 64; 0 without coordinates


def _columns(columns: Columns) -> tuple[Any, int]:
    if columns is None:
        return None, 0
    if isinstance(columns, str):
        return cstrings([columns])
    return cstrings(list(columns))


def _id(value: Id) -> bytes:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, int, np.integer)):
        raise TypeError(f"an id is a str or an int, not {type(value).__name__}")
    return str(int(value) if isinstance(value, np.integer) else value).encode()


@dataclass(frozen=True)
class ChromDataPartition:
    """A unit of work over a store: the spots of some chromosomes (``by="chrom"``) or cells
    (``by="cell"``). ``read(cd)`` returns them as one table, in query order."""

    by: Literal["chrom", "cell"]
    ids: tuple[Id, ...]

    def read(self, cd: "ChromData", columns: Columns = None) -> pa.Table:
        """The partition's spots (``columns`` as in the queries) from ``cd``, one table."""
        query = cd.get_chrom if self.by == "chrom" else cd.get_cell
        tables = [query(i, columns) for i in self.ids]
        if not tables:
            raise ValueError("an empty partition")
        return pa.concat_tables(tables)


class ChromData(Handle):
    """An open ChromData store (``dc_chromdata``): a ``*.chromdata.zarr`` directory or a
    ``.cdz`` file (or their URLs with ``options``), read backed. May be used from several
    threads at once; pickles as (source, options) and re-opens where it is unpickled.

    Queries return ``pyarrow.Table`` (``iter_traces`` / ``iter_cells`` a
    ``pyarrow.RecordBatchReader`` that reads as it is consumed); the tables' buffers are the
    library's own, handed over without a copy. Tables outlive the store handle."""

    _free = _capi.dc_chromdata_free

    def __init__(self, path_or_url: PathOrUrl, *, options: Options = None):
        self._source = normalize_source(path_or_url)
        self._options = option_strings(options)
        self._h = open_handle(_capi.dc_chromdata_open, _capi.dc_chromdata_open_opts, self._source, self._options)
        info = _capi.dc_chromdata_info()
        call(_capi.dc_chromdata_info_get, self._h, ctypes.byref(info))
        values = {f: getattr(info, f) for f, _ in _capi.dc_chromdata_info._fields_}
        values["layout"] = _LAYOUT_NAMES.get(values["layout"], str(values["layout"]))
        for flag in ("has_coords", "has_cell_id", "has_source_row"):
            values[flag] = bool(values[flag])
        self._info = ChromDataInfo(**values)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self._source, self._options))

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("deltacells.ChromData", self._source, tuple(self._options))

    def __repr__(self) -> str:
        if self.closed:
            return f"ChromData({self._source!r}, closed)"
        i = self._info
        return (f"ChromData({self._source!r}, {i.format_major}.{i.format_minor} {i.layout}, "
                f"{i.n_spots} spots, {i.n_traces} traces, {i.n_cells} cells)")

    @property
    def source(self) -> str:
        """The path (made absolute) or URL the store was opened from."""
        return self._source

    @property
    def info(self) -> ChromDataInfo:
        """Version, layout and counts (``dc_chromdata_info_get``, read at open)."""
        return self._info

    # ---- small tables, keys, categories
    def table(self, name: str) -> pa.Table:
        """"bins", "bin_tracks", "traces", "cells", "intervals/<key>", "points/<key>"
        (``dc_chromdata_table``)."""
        return _arrow.read_table(_capi.dc_chromdata_table, self._live(), name.encode())

    def keys(self, kind: str) -> list[str]:
        """Original keys of a kind ("layers", "intervals", "points", "cellm", "binm",
        "results", "uns", "contacts", "links"), in logical order (``dc_chromdata_keys``)."""
        t = _arrow.read_table(_capi.dc_chromdata_keys, self._live(), kind.encode())
        return t.column("key").to_pylist()

    def categories(self, table: str, column: str) -> pa.Array:
        """The category list of a coded column, e.g. ("spots", "trace_id")
        (``dc_chromdata_categories``)."""
        t = _arrow.read_table(_capi.dc_chromdata_categories, self._live(), table.encode(), column.encode())
        return t.column("category").combine_chunks()

    # ---- spot queries
    def get_trace(self, trace_id: Id, columns: Columns = None) -> pa.Table:
        """All spots of a trace, in canonical order (``dc_chromdata_get_trace``)."""
        arr, n = _columns(columns)
        return _arrow.read_table(_capi.dc_chromdata_get_trace, self._live(), _id(trace_id), arr, n)

    def get_cell(self, cell_id: Id, columns: Columns = None) -> pa.Table:
        """All spots of a cell, in canonical order (``dc_chromdata_get_cell``)."""
        arr, n = _columns(columns)
        return _arrow.read_table(_capi.dc_chromdata_get_cell, self._live(), _id(cell_id), arr, n)

    def get_chrom(self, chrom: str, columns: Columns = None) -> pa.Table:
        """All spots on a chromosome, in canonical order (``dc_chromdata_get_chrom``)."""
        arr, n = _columns(columns)
        return _arrow.read_table(_capi.dc_chromdata_get_chrom, self._live(), str(chrom).encode(), arr, n)

    def iter_traces(self, batch: int = 1, columns: Columns = None) -> pa.RecordBatchReader:
        """Record batches of ``batch`` whole runs (a trace in one cell and chromosome) in
        stored order, read row group by row group as consumed (``dc_chromdata_iter_traces``)."""
        arr, n = _columns(columns)
        return _arrow.import_stream(_capi.dc_chromdata_iter_traces, self._live(), batch, arr, n)

    def iter_cells(self, batch: int = 1, columns: Columns = None) -> pa.RecordBatchReader:
        """Record batches of ``batch`` cell segments in stored order (``dc_chromdata_iter_cells``)."""
        arr, n = _columns(columns)
        return _arrow.import_stream(_capi.dc_chromdata_iter_cells, self._live(), batch, arr, n)

    def read_spots(self, columns: Columns = None, *, original_order: bool = False) -> pa.Table:
        """The whole spot table in canonical order, or as written with ``original_order``
        (``dc_chromdata_read_spots``)."""
        return self.spots_reader(columns, original_order=original_order).read_all()

    def spots_reader(self, columns: Columns = None, *, original_order: bool = False) -> pa.RecordBatchReader:
        """``read_spots`` as a stream of record batches."""
        arr, n = _columns(columns)
        return _arrow.import_stream(_capi.dc_chromdata_read_spots, self._live(), 1 if original_order else 0, arr, n)

    # ---- scale-out
    def attrs(self, kind: str, path: Sequence[str] = ()) -> Any:
        """Metadata of a pass-through entry, parsed from JSON (``dc_chromdata_attrs``):
        ``kind`` "results" / "cellm" / "binm" / "intervals" / "points" with ``path`` = the
        key (then member keys inside results mappings), or "uns" / "contacts" / "links"
        with an empty path."""
        import json

        arr, n = cstrings(list(path))
        out = ctypes.c_void_p()
        size = ctypes.c_size_t()
        call(_capi.dc_chromdata_attrs, self._live(), kind.encode(), arr, n, ctypes.byref(out),
             ctypes.byref(size))
        try:
            return json.loads(ctypes.string_at(out.value, size.value))
        finally:
            _capi.dc_bytes_free(out, size)

    def array(self, kind: str, path: Sequence[str]) -> np.ndarray:
        """An array entry (cellm, binm, an array result, an uns array) as a NumPy array of
        its full shape (``dc_chromdata_array``)."""
        import json

        arr, n = cstrings(list(path))
        t = _arrow.read_table(_capi.dc_chromdata_array, self._live(), kind.encode(), arr, n)
        field = t.schema.field(0)
        shape = json.loads(field.metadata[b"shape"])
        col = t.column(0).combine_chunks()
        while pa.types.is_fixed_size_list(col.type):
            col = col.flatten()
        return col.to_numpy(zero_copy_only=False).reshape(shape)

    def result_table(self, path: Sequence[str]) -> pa.Table:
        """A results entry of type table (``dc_chromdata_result_table``)."""
        arr, n = cstrings(list(path))
        return _arrow.read_table(_capi.dc_chromdata_result_table, self._live(), arr, n)

    def chroms(self) -> list[str]:
        """Chromosome names, in the store's order (the categories of bins.chrom)."""
        return [str(c) for c in self.categories("bins", "chrom").to_pylist()]

    def cell_ids(self) -> list[Id]:
        """Cell ids in the store's category order (NotFoundError without cell_id)."""
        return self.categories("spots", "cell_id").to_pylist()

    def partitions(self, n: int, by: Literal["chrom", "cell"] = "chrom") -> list[ChromDataPartition]:
        """At most ``n`` units of work covering every spot once: chromosomes (``by="chrom"``,
        in store order, dealt out in contiguous groups) or contiguous ranges of cells
        (``by="cell"``). Each partition's ``read(cd)`` returns its spots."""
        if n < 1:
            raise ValueError(f"partitions: n must be >= 1, not {n}")
        if by not in ("chrom", "cell"):
            raise ValueError(f"partitions: by='chrom' or 'cell', not {by!r}")
        ids = self.chroms() if by == "chrom" else self.cell_ids()
        groups = [g for g in np.array_split(np.arange(len(ids)), min(n, len(ids))) if g.size] if ids else []
        return [ChromDataPartition(by, tuple(ids[i] for i in g)) for g in groups]


def _reopen(source: str, options: list[str]) -> ChromData:
    return ChromData(source, options=options or None)


_CDW_PARAMS = {
    "memory_budget": _capi.DC_CDW_MEMORY_BUDGET,
    "coord_float32": _capi.DC_CDW_COORD_FLOAT32,
    "layout": _capi.DC_CDW_LAYOUT,
    "overwrite": _capi.DC_CDW_OVERWRITE,
    "threads": _capi.DC_CDW_THREADS,
}


class ChromDataWriter(Handle):
    """A ChromData store being written (``dc_chromdata_writer``): a ``*.chromdata.zarr``
    directory, or a ``.cdz`` zip when the path ends in ``.cdz``. Spots are appended in any
    order (external sort under ``memory_budget``); ``finish()`` sorts, indexes and moves the
    store into place atomically; without it (``close()``, an exception inside ``with``)
    nothing appears at the target. ``with ChromDataWriter(...) as w:`` finishes on a normal
    exit. One thread at a time.

    Settings: ``memory_budget`` (bytes), ``coord_float32`` (bool), ``layout`` ("flat",
    "partitioned", "primary_coords" or a DC_LAYOUT_* value), ``overwrite`` (bool),
    ``threads``.

    Tables are given as pyarrow Tables / RecordBatches / readers or pandas DataFrames (their
    index dropped) or any object with ``__arrow_c_stream__``."""

    _free = _capi.dc_chromdata_writer_free

    def __init__(self, path_or_url: PathOrUrl, *, options: Options = None, **settings: Any):
        self._source = normalize_source(path_or_url)
        self._h = open_handle(_capi.dc_chromdata_writer_create, _capi.dc_chromdata_writer_create_opts,
                              self._source, option_strings(options))
        self.set(**{k: v for k, v in settings.items() if v is not None})

    def __reduce__(self) -> Any:
        raise TypeError("a ChromDataWriter cannot be pickled: a write in progress lives in one process")

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None and not self.closed:
                self.finish()
        finally:
            self.close()

    def set(self, **settings: Any) -> None:
        """Writer parameters (``dc_chromdata_writer_set``, ``DC_CDW_*``)."""
        for key, value in settings.items():
            if key not in _CDW_PARAMS:
                raise TypeError(f"unknown ChromData writer setting {key!r}; known: {', '.join(_CDW_PARAMS)}")
            if key == "layout" and isinstance(value, str):
                if value not in LAYOUTS:
                    raise ValueError(f"layout: one of {', '.join(LAYOUTS)}, not {value!r}")
                value = LAYOUTS[value]
            call(_capi.dc_chromdata_writer_set, self._live(), _CDW_PARAMS[key], int(value))

    @staticmethod
    def param_bounds(key: str) -> tuple[int, int]:
        """The values ``set(key=...)`` accepts, as ``(min, max)`` inclusive
        (``dc_chromdata_writer_param_bounds``; ``memory_budget`` is also 0 or at least 1 MiB)."""
        if key not in _CDW_PARAMS:
            raise TypeError(f"unknown ChromData writer setting {key!r}; known: {', '.join(_CDW_PARAMS)}")
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        call(_capi.dc_chromdata_writer_param_bounds, _CDW_PARAMS[key], ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value

    def set_bins(self, bins: Any) -> None:
        """The bins table (chrom, start, end, ...), before the first append
        (``dc_chromdata_writer_set_bins``)."""
        self._one_table(_capi.dc_chromdata_writer_set_bins, bins)

    def append(self, spots: Any) -> None:
        """Spots in any order: chrom, start, end (or bin_id with bins set), trace_id,
        [cell_id], [x, y, z], extra columns; one ``dc_chromdata_writer_append`` call per
        record batch."""
        for batch in _arrow.batches(spots):
            with _arrow.exported(batch) as (array, schema):
                call(_capi.dc_chromdata_writer_append, self._live(), array, schema)

    def set_bin_tracks(self, tracks: Any) -> None:
        """Bin tracks: one row per bin of the bins table (``dc_chromdata_writer_set_bin_tracks``)."""
        self._one_table(_capi.dc_chromdata_writer_set_bin_tracks, tracks)

    def add_table(self, collection: Literal["intervals", "points"], key: str, table: Any,
                  kind: Optional[str] = None) -> None:
        """A pass-through table: ``collection="intervals"`` with a ``kind`` ("domain", "pair",
        "peak", "segment" or another), or ``"points"`` without (``dc_chromdata_writer_add_table``)."""
        batch = _arrow.one_batch(table)
        with _arrow.exported(batch) as (array, schema):
            call(_capi.dc_chromdata_writer_add_table, self._live(), collection.encode(), key.encode(),
                 None if not kind else kind.encode(), array, schema)

    def set_categories(self, column: str, categories: Sequence[Any]) -> None:
        """The category list of "trace_id", "cell_id" or an extra categorical column, kept
        in this order with unused categories; before the first append
        (``dc_chromdata_writer_set_categories``)."""
        self._one_table(lambda h, a, s: _capi.dc_chromdata_writer_set_categories(h, column.encode(), a, s),
                        pa.table({"category": pa.array(list(categories))}))

    def set_table(self, name: Literal["traces", "cells"], table: Any) -> None:
        """The traces / cells annotation table; first column trace_id / cell_id
        (``dc_chromdata_writer_set_table``)."""
        self._one_table(lambda h, a, s: _capi.dc_chromdata_writer_set_table(h, name.encode(), a, s), table)

    def add_array(self, kind: Literal["cellm", "binm"], key: str, values: Any) -> None:
        """A cellm / binm array (a NumPy array; first dimension n_cells / n_bins)
        (``dc_chromdata_writer_add_array``)."""
        batch = _array_batch(values)
        with _arrow.exported(batch) as (array, schema):
            call(_capi.dc_chromdata_writer_add_array, self._live(), kind.encode(), key.encode(), array, schema)

    def add_result(self, path: Sequence[str], attrs: dict, data: Any = None) -> None:
        """A results entry: ``attrs`` with "type" (table, array, json, mapping) and optional
        provenance; ``data`` a table or a NumPy array for tables and arrays
        (``dc_chromdata_writer_add_result``)."""
        import json

        arr, n = cstrings(list(path))
        text = json.dumps(attrs).encode()
        if data is None:
            call(_capi.dc_chromdata_writer_add_result, self._live(), arr, n, text, None, None)
            return
        batch = _array_batch(data) if attrs.get("type") == "array" else _arrow.one_batch(data)
        with _arrow.exported(batch) as (array, schema):
            call(_capi.dc_chromdata_writer_add_result, self._live(), arr, n, text, array, schema)

    def set_json(self, kind: str, value: Any, key: Optional[str] = None) -> None:
        """"uns" (tagged-JSON dict), "contacts" / "links" (lists of records), or
        "intervals" with ``key`` and ``{"source_result": ...}`` (``dc_chromdata_writer_set_json``)."""
        import json

        call(_capi.dc_chromdata_writer_set_json, self._live(), kind.encode(),
             None if key is None else key.encode(), json.dumps(value).encode())

    def finish(self) -> None:
        """External sort, index, metadata, atomic rename (``dc_chromdata_writer_finish``)."""
        call(_capi.dc_chromdata_writer_finish, self._live())

    def _one_table(self, fn: Any, data: Any) -> None:
        batch = _arrow.one_batch(data)
        with _arrow.exported(batch) as (array, schema):
            call(fn, self._live(), array, schema)



def _array_batch(values: Any) -> pa.RecordBatch:
    """A NumPy array as the one-column batch of ``dc_chromdata_array``: nested fixed-size
    lists, the shape in the field metadata."""
    import json

    a = np.ascontiguousarray(values)
    col: pa.Array = pa.array(a.reshape(-1))
    for d in reversed(a.shape[1:]):
        col = pa.FixedSizeListArray.from_arrays(col, int(d))
    field = pa.field("value", col.type, nullable=False, metadata={"shape": json.dumps(list(a.shape))})
    return pa.RecordBatch.from_arrays([col], schema=pa.schema([field]))


def rewrite(src: PathOrUrl, dst: PathOrUrl, *, layout: str = "primary_coords", overwrite: bool = False) -> None:
    """Writes store ``src`` (any version, layout, directory or .cdz) again at ``dst`` in
    ``layout`` with everything it holds (``dc_chromdata_rewrite``)."""
    call(_capi.dc_chromdata_rewrite, str(src).encode(), str(dst).encode(), LAYOUTS[layout], 1 if overwrite else 0)
