"""Writing deltacells datasets (contract §4): ``Writer`` and ``write_anndata``."""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from . import _arrow, _capi
from ._errors import call
from ._handles import Handle, Options, PathOrUrl, cstrings, normalize_source, open_handle, option_strings

if TYPE_CHECKING:
    import anndata

_PARAMS = {
    "tile_size": _capi.DC_WRITER_TILE_SIZE,
    "n_chunks": _capi.DC_WRITER_N_CHUNKS,
    "zstd_level": _capi.DC_WRITER_ZSTD_LEVEL,
    "threads": _capi.DC_WRITER_THREADS,
    "overwrite": _capi.DC_WRITER_OVERWRITE,
    "obs_tiles_per_file": _capi.DC_WRITER_OBS_TILES_PER_FILE,
    "obs_max_categories": _capi.DC_WRITER_OBS_MAX_CATEGORIES,
}

ROWS_PER_APPEND = 1 << 16
"""Rows converted and handed to the library per call when appending a large matrix."""

_INT32_MAX = np.iinfo(np.int32).max


def _int32_counts(data: np.ndarray, first_row: int, indptr: np.ndarray) -> np.ndarray:
    """Counts as int32, refusing any value that would change (fractions, >= 2^31): a float
    matrix of integer counts converts, a normalised one is an error, never truncated."""
    if data.dtype == np.int32:
        return data
    if data.size == 0:
        return np.zeros(0, dtype=np.int32)
    if data.dtype.kind == "f":
        bad = ~np.isfinite(data) | (data != np.floor(data)) | (data > _INT32_MAX)
    elif data.dtype.kind in "iu":
        bad = data > _INT32_MAX
    elif data.dtype.kind == "b":
        return data.astype(np.int32)
    else:
        raise TypeError(f"counts of type {data.dtype} cannot be stored (integers or integral floats)")
    if bad.any():
        k = int(np.argmax(bad))
        row = first_row + int(np.searchsorted(indptr, k, side="right")) - 1
        raise ValueError(f"row {row}: count {data[k]!r} is not an integer in 0 .. 2^31-1; "
                         "a dataset stores raw counts (use the counts layer, e.g. adata.layers['counts'])")
    return data.astype(np.int32)


class Writer(Handle):
    """A dataset being written (``dc_writer``), streaming: rows are encoded into tiles in the
    background as they are appended; ``finish()`` writes the manifest last and moves the
    dataset into place atomically. Without ``finish()`` (``close()``, garbage collection, an
    exception inside ``with``) the write is abandoned and nothing appears at the target.

    ``Writer(path, n_genes, tile_size=..., n_chunks=..., zstd_level=..., threads=...,
    overwrite=..., obs_tiles_per_file=..., obs_max_categories=..., options=None)``.
    ``with Writer(...) as w: ...`` finishes on a normal exit. One thread at a time.
    """

    _free = _capi.dc_writer_free

    def __init__(self, path_or_url: PathOrUrl, n_genes: int, *, options: Options = None, **settings: Any):
        self._source = normalize_source(path_or_url)
        self._n_genes = int(n_genes)
        self._rows = 0
        self._h = open_handle(_capi.dc_writer_create, _capi.dc_writer_create_opts, self._source,
                              option_strings(options), ctypes.c_uint32(self._n_genes))
        self.set(**{k: v for k, v in settings.items() if v is not None})

    def __reduce__(self) -> Any:
        raise TypeError("a Writer cannot be pickled: a write in progress lives in one process")

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None and not self.closed:
                self.finish()
        finally:
            self.close()

    @property
    def n_rows(self) -> int:
        """Rows appended so far."""
        return self._rows

    def set(self, **settings: Any) -> None:
        """Writer parameters (``dc_writer_set``): tile_size, n_chunks, zstd_level, threads,
        overwrite, obs_tiles_per_file, obs_max_categories (``DC_WRITER_*``)."""
        for key, value in settings.items():
            if key not in _PARAMS:
                raise TypeError(f"unknown writer setting {key!r}; known: {', '.join(_PARAMS)}")
            call(_capi.dc_writer_set, self._live(), _PARAMS[key], int(value))

    @staticmethod
    def param_bounds(key: str) -> tuple[int, int]:
        """The values ``set(key=...)`` accepts, as ``(min, max)`` inclusive
        (``dc_writer_param_bounds``; the zstd levels are those of the bundled zstd)."""
        if key not in _PARAMS:
            raise TypeError(f"unknown writer setting {key!r}; known: {', '.join(_PARAMS)}")
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        call(_capi.dc_writer_param_bounds, _PARAMS[key], ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value

    def set_gene_order(self, order: Sequence[int]) -> None:
        """Output column j = input column ``order[j]`` (``dc_writer_set_gene_order``)."""
        a = np.ascontiguousarray(order, dtype=np.int32)
        call(_capi.dc_writer_set_gene_order, self._live(), a.ctypes.data, a.size)

    def set_var_names(self, names: Sequence[str]) -> None:
        """Gene names in input column order (``dc_writer_set_var_names``)."""
        arr, n = cstrings([str(s) for s in names])
        call(_capi.dc_writer_set_var_names, self._live(), arr, n)

    def set_var(self, var: Any) -> None:
        """The gene table (n_genes rows, input column order): a pyarrow Table / RecordBatch or
        a pandas DataFrame, whose index is kept as the first column (``_index`` when unnamed)
        with the pandas metadata that restores it (``dc_writer_set_var_table``)."""
        batch = _arrow.one_batch(_with_index_first(var))
        with _arrow.exported(batch) as (array, schema):
            call(_capi.dc_writer_set_var_table, self._live(), array, schema)

    def append(self, matrix: Any) -> None:
        """Appends rows (cells) in input column space: a scipy sparse matrix (any format), a
        dense 2-D numpy array, or anything scipy turns into CSR. Counts must be integers
        (integral floats convert; anything else is refused). Rows go to the library in
        blocks of ROWS_PER_APPEND (``dc_writer_append_csr``)."""
        import scipy.sparse as sp

        m = matrix if sp.issparse(matrix) else sp.csr_matrix(np.asarray(matrix))
        if m.ndim != 2 or m.shape[1] != self._n_genes:
            raise ValueError(f"append: a matrix of {self._n_genes} columns (genes), not shape {m.shape}")
        m = sp.csr_matrix(m)
        for start in range(0, m.shape[0], ROWS_PER_APPEND):
            block = m[start:start + ROWS_PER_APPEND]
            if not block.has_canonical_format:
                block = block.copy()
                block.sum_duplicates()
            self.append_csr(block.indptr, block.indices, block.data)

    def append_csr(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        """Appends ``len(indptr) - 1`` rows given as CSR arrays (``dc_writer_append_csr``);
        ``indptr`` may start anywhere (rows of a larger matrix)."""
        ip = np.ascontiguousarray(indptr, dtype=np.int64)
        n_rows = ip.size - 1
        if n_rows < 0:
            raise ValueError("append_csr: indptr needs at least one entry")
        ix = np.ascontiguousarray(indices, dtype=np.int32)
        v = np.ascontiguousarray(_int32_counts(np.asarray(values), self._rows, ip - ip[0]))
        call(_capi.dc_writer_append_csr, self._live(), n_rows, ip.ctypes.data,
             ix.ctypes.data if ix.size else None, v.ctypes.data if v.size else None)
        self._rows += n_rows

    def append_obs(self, obs: Any) -> None:
        """Appends obs rows (cell metadata, row i overall = cell i): a pyarrow Table /
        RecordBatch / reader or a pandas DataFrame (its index kept as the first column,
        ``_index`` when unnamed). Categorical columns are stored as categories, one
        ``dc_writer_append_obs`` call per record batch."""
        for batch in _arrow.batches(_with_index_first(obs)):
            with _arrow.exported(batch) as (array, schema):
                call(_capi.dc_writer_append_obs, self._live(), array, schema)

    def finish(self) -> None:
        """Encodes the rest, writes the manifest last and moves the dataset into place
        (``dc_writer_finish``). On DC_ERR_EXISTS nothing is lost: set ``overwrite=1`` and
        call again."""
        call(_capi.dc_writer_finish, self._live())


def _with_index_first(data: Any) -> Any:
    """A pandas DataFrame as a pyarrow Table whose first column is its index (named, or
    ``_index``), with pandas metadata; anything else unchanged."""
    if not type(data).__module__.startswith("pandas"):
        return data
    df = data
    name = df.index.name if df.index.name is not None else _arrow.INDEX_COLUMN
    if name in df.columns:
        raise ValueError(f"the index name {name!r} is also a column name")
    table = pa.Table.from_pandas(df.rename_axis(name), preserve_index=True)
    return table.select([name] + [c for c in table.column_names if c != name])


def write_matrix(path_or_url: PathOrUrl, matrix: Any, *, var_names: Optional[Sequence[str]] = None,
                 gene_order: Optional[Sequence[int]] = None, obs: Any = None, var: Any = None,
                 options: Options = None, **settings: Any) -> None:
    """Writes a cells x genes matrix (scipy sparse or dense) with optional gene names,
    gene order, obs and var tables, as one dataset."""
    n_genes = matrix.shape[1]
    with Writer(path_or_url, n_genes, options=options, **settings) as w:
        if gene_order is not None:
            w.set_gene_order(gene_order)
        if var_names is not None:
            w.set_var_names(var_names)
        if var is not None:
            w.set_var(var)
        w.append(matrix)
        if obs is not None:
            w.append_obs(obs)


def write_anndata(adata: "anndata.AnnData", path_or_url: PathOrUrl, *, layer: Optional[str] = None,
                  gene_order: Optional[Sequence[int]] = None, options: Options = None,
                  **settings: Any) -> None:
    """Writes an AnnData object (in memory or opened ``backed="r"``) as a dataset: X (or
    ``adata.layers[layer]``) cells x genes, obs and var kept (their indexes as first
    columns, ``_index`` when unnamed), var names from ``adata.var_names``. A backed X is
    streamed in blocks of ROWS_PER_APPEND rows."""
    x = adata.X if layer is None else adata.layers[layer]
    n_cells, n_genes = adata.shape
    with Writer(path_or_url, n_genes, options=options, **settings) as w:
        if gene_order is not None:
            w.set_gene_order(gene_order)
        w.set_var_names([str(v) for v in adata.var_names])
        w.set_var(adata.var)
        for start in range(0, n_cells, ROWS_PER_APPEND):
            w.append(x[start:min(start + ROWS_PER_APPEND, n_cells)])
        w.append_obs(adata.obs)
