"""Reading deltacells datasets (contract §3): ``Dataset``."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from . import _arrow, _capi
from ._errors import call
from ._handles import Handle, Options, PathOrUrl, cstrings, normalize_source, open_handle, option_strings

if TYPE_CHECKING:
    import pandas as pd

Cells = Union[Sequence[int], np.ndarray, range, int]
"""Cell indices: any integer sequence or array (any order, repeats allowed), or one int."""

MatrixFormat = Literal["csr_matrix", "csr_array", "arrays"]
"""What a read returns: a ``scipy.sparse.csr_matrix`` (default), a ``csr_array``, or the
numpy CSR arrays themselves (``Csr``)."""

_DTYPES = {np.dtype(np.int32): _capi.DC_INT32, np.dtype(np.float32): _capi.DC_FLOAT32}

# Handle parameters (dc_dataset_set) by keyword; CACHE_BYTES since contract 1.1.
_PARAMS = {
    "threads": _capi.DC_DATASET_THREADS,
    "tile_cache": _capi.DC_DATASET_TILE_CACHE,
    "verify_crc": _capi.DC_DATASET_VERIFY_CRC,
}
if hasattr(_capi, "DC_DATASET_CACHE_BYTES"):
    _PARAMS["cache_bytes"] = _capi.DC_DATASET_CACHE_BYTES


class Csr(NamedTuple):
    """A CSR matrix as numpy arrays (rows = cells): row i holds
    ``indices[indptr[i]:indptr[i+1]]`` (genes, increasing) and the same slice of ``values``."""

    indptr: np.ndarray  # int64, n_rows + 1, starting at 0
    indices: np.ndarray  # int32
    values: np.ndarray  # int32 or float32
    shape: tuple[int, int]


@dataclass(frozen=True)
class DatasetInfo:
    """Summary of a dataset (``dc_dataset_info``)."""

    n_cells: int
    n_genes: int
    version: int
    n_tiles: int
    tile_size: int
    nnz: int
    has_gene_order: bool
    has_var_names: bool
    has_var_table: bool
    has_obs: bool


@dataclass(frozen=True)
class TileBounds:
    """Tile t holds global cells ``range(first_cell, first_cell + n_cells)`` and ``nnz`` nonzeros."""

    first_cell: int
    n_cells: int
    nnz: int

    @property
    def cells(self) -> range:
        """The tile's global cell indices."""
        return range(self.first_cell, self.first_cell + self.n_cells)


def cells_array(cells: Cells) -> np.ndarray:
    """Cell indices as the contiguous uint64 array the C API reads (no copy when it is one)."""
    a = np.asarray(cells)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"cells: a 1-D sequence of indices, not an array of shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"cells: integer indices, not {a.dtype}")
    if a.dtype.kind == "i":
        low = int(a.min())
        if low < 0:
            pos = int(np.argmax(a < 0))
            raise IndexError(f"cells[{pos}] = {low}: cells are numbered 0 .. n_cells-1 (no negative indices)")
    return np.ascontiguousarray(a, dtype=np.uint64)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def csr_result(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, shape: tuple[int, int],
               format: MatrixFormat) -> Any:
    """The decoded CSR arrays in the requested form (no copy of indices or values)."""
    if format == "arrays":
        return Csr(indptr, indices, values, shape)
    import scipy.sparse as sp

    if format == "csr_matrix":
        return sp.csr_matrix((values, indices, indptr), shape=shape, copy=False)
    if format == "csr_array":
        return sp.csr_array((values, indices, indptr), shape=shape, copy=False)
    raise ValueError(f"format: 'csr_matrix', 'csr_array' or 'arrays', not {format!r}")


def dtype_code(dtype: Any) -> tuple[np.dtype, int]:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise TypeError(f"dtype: int32 or float32, not {dt}")
    return dt, _DTYPES[dt]


class Dataset(Handle):
    """An open deltacells dataset (``dc_dataset``), read on demand.

    ``Dataset(path_or_url, threads=0, tile_cache=None, verify_crc=None, cache_bytes=None, cache_dir=None,
    options=None)`` opens and validates the manifest. Settings left ``None`` keep the
    library's defaults. ``options`` (a mapping or ``"key=value"`` strings) are object-store
    settings for URLs (contract §7).

    A Dataset may be used from several threads at once (the library releases the GIL).
    It pickles as (source, options, settings) and re-opens where it is unpickled.
    """

    _free = _capi.dc_dataset_free

    def __init__(self, path_or_url: PathOrUrl, *, options: Options = None,
                 cache_dir: Optional[str] = None, **settings: Optional[int]):
        self._source = normalize_source(path_or_url)
        self._options = option_strings(options)
        self._settings: dict[str, int] = {}
        self._cache_dir: Optional[str] = None
        self._var_names: Optional[list[str]] = None
        self._h = open_handle(_capi.dc_dataset_open, _capi.dc_dataset_open_opts, self._source, self._options)
        info = _capi.dc_dataset_info()
        call(_capi.dc_dataset_info_get, self._h, ctypes.byref(info))
        values = {f: getattr(info, f) for f, _ in _capi.dc_dataset_info._fields_}
        self._info = DatasetInfo(**{k: bool(v) if k.startswith("has_") else v for k, v in values.items()})
        self.set(**{k: v for k, v in settings.items() if v is not None})
        if cache_dir is not None:
            self.set_cache_dir(cache_dir)

    # ---- pickling: (source, options, settings), re-opened on the other side
    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self._source, self._options, self._cache_dir, self._settings))

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("deltacells.Dataset", self._source, tuple(self._options), tuple(sorted(self._settings.items())))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.n_cells} cells x {self.n_genes} genes, {self.info.n_tiles} tiles"
        return f"Dataset({self._source!r}, {state})"

    # ---- settings and summary
    @property
    def source(self) -> str:
        """The path (made absolute) or URL the dataset was opened from."""
        return self._source

    def set(self, **settings: int) -> None:
        """Sets handle parameters (``dc_dataset_set``): ``threads`` (decode threads per call,
        0 = ``DELTACELLS_NUM_THREADS`` or all cores), ``tile_cache`` (decoded tiles kept),
        ``verify_crc`` (0 or 1), ``cache_bytes`` (budget of the decoded-data cache shared by
        gathers and batch iterators; 0 disables it)."""
        for key, value in settings.items():
            if key not in _PARAMS:
                raise TypeError(f"unknown dataset setting {key!r}; known: {', '.join(_PARAMS)}")
            call(_capi.dc_dataset_set, self._live(), _PARAMS[key], int(value))
            self._settings[key] = int(value)

    @staticmethod
    def param_bounds(key: str) -> tuple[int, int]:
        """The values ``set(key=...)`` accepts, as ``(min, max)`` inclusive
        (``dc_dataset_param_bounds``)."""
        if key not in _PARAMS:
            raise TypeError(f"unknown dataset setting {key!r}; known: {', '.join(_PARAMS)}")
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        call(_capi.dc_dataset_param_bounds, _PARAMS[key], ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value

    def set_cache_dir(self, directory: Optional[str]) -> None:
        """Where obs columns are cached locally (``dc_dataset_set_cache_dir``); None restores
        the default (``$DELTACELLS_CACHE``, ``$XDG_CACHE_HOME/deltacells``, ``~/.cache/deltacells``)."""
        call(_capi.dc_dataset_set_cache_dir, self._live(), None if directory is None else str(directory).encode())
        self._cache_dir = directory

    @property
    def info(self) -> DatasetInfo:
        """The dataset's summary (``dc_dataset_info_get``, read at open)."""
        return self._info

    @property
    def n_cells(self) -> int:
        """Cells (rows)."""
        return self._info.n_cells

    @property
    def n_genes(self) -> int:
        """Genes (columns)."""
        return self._info.n_genes

    @property
    def shape(self) -> tuple[int, int]:
        """(n_cells, n_genes): rows are cells."""
        return (self._info.n_cells, self._info.n_genes)

    def __len__(self) -> int:
        return self._info.n_cells

    # ---- tiles
    def tile_bounds(self, tile: int) -> TileBounds:
        """Cells and nonzeros of one tile (``dc_dataset_tile_bounds``; nothing is read)."""
        first, n, nnz = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        call(_capi.dc_dataset_tile_bounds, self._live(), tile, ctypes.byref(first), ctypes.byref(n), ctypes.byref(nnz))
        return TileBounds(first.value, n.value, nnz.value)

    def tiles(self) -> list[TileBounds]:
        """The bounds of every tile, in order."""
        return [self.tile_bounds(t) for t in range(self._info.n_tiles)]

    def read_tile(self, tile: int, *, dtype: Any = np.int32, format: MatrixFormat = "csr_matrix") -> Any:
        """One whole tile as CSR, rows = its cells (``dc_dataset_read_tile``)."""
        dt, code = dtype_code(dtype)
        b = self.tile_bounds(tile)
        indptr = np.empty(b.n_cells + 1, dtype=np.int64)
        indices = np.empty(max(b.nnz, 1), dtype=np.int32)
        values = np.empty(max(b.nnz, 1), dtype=dt)
        nnz = ctypes.c_uint64()
        call(_capi.dc_dataset_read_tile, self._live(), tile, code, _ptr(indptr), _ptr(indices), _ptr(values),
             b.nnz, ctypes.byref(nnz))
        n = nnz.value
        return csr_result(indptr, indices[:n], values[:n], (b.n_cells, self.n_genes), format)

    # ---- any cells
    def batch_nnz(self, cells: Cells) -> int:
        """Nonzeros a gather of these cells returns (``dc_dataset_batch_nnz``; headers only)."""
        c = cells_array(cells)
        nnz = ctypes.c_uint64()
        call(_capi.dc_dataset_batch_nnz, self._live(), _ptr(c), c.size, ctypes.byref(nnz))
        return nnz.value

    def gather(self, cells: Cells, *, dtype: Any = np.int32, format: MatrixFormat = "csr_matrix") -> Any:
        """Rows for ``cells`` (any order, repeats allowed, across tiles): row i is cell
        ``cells[i]`` (``dc_dataset_gather``). Returns a ``scipy.sparse.csr_matrix`` of shape
        (len(cells), n_genes) by default; ``format="arrays"`` gives the numpy ``Csr``."""
        dt, code = dtype_code(dtype)
        c = cells_array(cells)
        need = self.batch_nnz(c)
        indptr = np.empty(c.size + 1, dtype=np.int64)
        indices = np.empty(max(need, 1), dtype=np.int32)
        values = np.empty(max(need, 1), dtype=dt)
        nnz = ctypes.c_uint64()
        call(_capi.dc_dataset_gather, self._live(), _ptr(c), c.size, code, _ptr(indptr), _ptr(indices),
             _ptr(values), need, ctypes.byref(nnz))
        n = nnz.value
        return csr_result(indptr, indices[:n], values[:n], (c.size, self.n_genes), format)

    def __getitem__(self, cells: Union[Cells, slice]) -> Any:
        """``ds[cells]`` = ``ds.gather(cells)``; a slice selects a cell range."""
        if isinstance(cells, slice):
            cells = range(*cells.indices(self.n_cells))
        return self.gather(cells)

    # ---- genes
    def gene_order(self) -> np.ndarray:
        """Output column j was input column ``gene_order()[j]`` (``dc_dataset_gene_order``).
        Raises NotFoundError when the dataset records none."""
        out = np.empty(self.n_genes, dtype=np.int32)
        call(_capi.dc_dataset_gene_order, self._live(), _ptr(out), out.size)
        return out

    def var_name(self, gene: int) -> str:
        """The name of output column ``gene`` (``dc_dataset_var_name``)."""
        name = ctypes.c_char_p()
        call(_capi.dc_dataset_var_name, self._live(), gene, ctypes.byref(name))
        return name.value.decode()

    def var_names(self) -> list[str]:
        """Gene names in output column order (NotFoundError when the dataset has none)."""
        if self._var_names is None:
            self._var_names = [self.var_name(g) for g in range(self.n_genes)]
        return list(self._var_names)

    def var(self, *, pandas: bool = False) -> Union[pa.Table, "pd.DataFrame"]:
        """The gene table, one row per output column (``dc_dataset_var_table``): a pyarrow
        Table, or with ``pandas=True`` a DataFrame indexed by the stored index column
        (``_index`` when the index had no name)."""
        table = _arrow.read_table(_capi.dc_dataset_var_table, self._live())
        return _arrow.to_pandas(table) if pandas else table

    # ---- obs
    def obs_reader(self, columns: Optional[Sequence[str]] = None) -> pa.RecordBatchReader:
        """Obs columns (None or empty = all) as a stream of one record batch per tile, in cell order
        (``dc_dataset_obs``); category columns arrive as dictionary arrays."""
        arr, n = cstrings(list(columns or []))
        return _arrow.import_stream(_capi.dc_dataset_obs, self._live(), arr, n)

    def obs(self, columns: Optional[Sequence[str]] = None, *, pandas: bool = False) -> Union[pa.Table, "pd.DataFrame"]:
        """Obs columns (None = all) as one pyarrow Table, or a pandas DataFrame with
        ``pandas=True`` (indexed by the ``_index`` column when there is one; dictionary columns
        become ``category``)."""
        table = self.obs_reader(columns).read_all()
        return _arrow.to_pandas(table) if pandas else table

    # ---- batches
    def batches(self, cells: Optional[Cells] = None, batch_size: int = 1024, *, shuffle: bool = False,
                seed: int = 0, window_tiles: int = 1, read_ahead: int = 0, dtype: Any = np.int32,
                format: MatrixFormat = "csr_matrix") -> "Batches":
        """The library's batch iterator (``dc_dataset_batches``): ``(cells, X)`` for
        consecutive batches of ``batch_size`` rows of the declared order, the last possibly
        shorter; X is what ``gather(cells)`` returns.

        The order: ``cells`` (any order, repeats allowed), or every cell -- ascending, or with
        ``shuffle=True`` the library's block shuffle ``shuffled_order(seed, window_tiles)``.
        While the caller works on one batch the next ``read_ahead`` (0 = 2, at most 64) are
        decoded on the dataset's pool into its decoded-data cache (``cache_bytes``). The
        iterator may outlive this dataset; ``close()`` (or ``with``) stops the read-ahead.
        Make it in the process that iterates it (after a fork, not before)."""
        if shuffle:
            if cells is not None:
                raise ValueError("batches: shuffle=True shuffles every cell; pass cells=None "
                                 "(or shuffle your own cells and pass them)")
            order = self.shuffled_order(seed, window_tiles)
        else:
            order = np.arange(self.n_cells, dtype=np.uint64) if cells is None else cells_array(cells)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        return Batches(self, order, batch_size, read_ahead, dtype, format)

    def shuffled_order(self, seed: int, window_tiles: int = 1) -> np.ndarray:
        """A block-shuffled permutation of all cells (``dc_dataset_shuffled_order``): tiles in
        random order, cells shuffled within windows of ``window_tiles`` tiles; the same for a
        seed on every platform."""
        out = np.empty(max(self.n_cells, 1), dtype=np.uint64)
        call(_capi.dc_dataset_shuffled_order, self._live(), seed, window_tiles, _ptr(out), self.n_cells)
        return out[:self.n_cells]

    # ---- scale-out
    def partitions(self, n: int) -> list[range]:
        """At most ``n`` contiguous, tile-aligned cell ranges covering every cell, balanced by
        stored nonzeros (each tile also counts its cells, so empty tiles spread too): the
        units of work for an engine such as dask (see examples/)."""
        if n < 1:
            raise ValueError(f"partitions: n must be >= 1, not {n}")
        bounds = self.tiles()
        if not bounds:
            return []
        weight = np.cumsum([b.nnz + b.n_cells for b in bounds], dtype=np.float64)
        targets = weight[-1] * np.arange(1, n) / n
        cuts = np.unique(np.searchsorted(weight, targets, side="left") + 1)
        edges = [0] + [int(c) for c in cuts if 0 < c < len(bounds)] + [len(bounds)]
        return [range(bounds[a].first_cell, bounds[b - 1].first_cell + bounds[b - 1].n_cells)
                for a, b in zip(edges, edges[1:])]


class Batches(Handle):
    """Batches read ahead by the library (``dc_batches``), made by ``Dataset.batches``.
    Iterating yields ``(cells, X)``: the batch's cells (uint64, a view of ``order``) and its
    rows. A batch that fails to read raises its error and is consumed: iterating again goes
    on with the next one. ``close()`` stops the read-ahead (also at the end of a ``with``)."""

    _free = _capi.dc_batches_free

    def __init__(self, ds: Dataset, order: np.ndarray, batch_size: int, read_ahead: int, dtype: Any,
                 format: MatrixFormat) -> None:
        self._dt, self._code = dtype_code(dtype)
        if format not in ("csr_matrix", "csr_array", "arrays"):
            raise ValueError(f"format: 'csr_matrix', 'csr_array' or 'arrays', not {format!r}")
        self._format = format
        self._n_genes = ds.n_genes
        self.order = order
        """The cells of every batch, in order (uint64)."""
        self.batch_size = int(batch_size)
        self._start = 0
        h = ctypes.c_void_p()
        call(_capi.dc_dataset_batches, ds._live(), _ptr(order), order.size, batch_size, read_ahead,
             ctypes.byref(h))
        self._h = h

    def __len__(self) -> int:
        """Batches in all (those already handed out included)."""
        return -(-self.order.size // self.batch_size)

    def peek(self) -> tuple[int, int]:
        """(rows, nonzeros) of the next batch; rows is 0 at the end."""
        rows, nnz = ctypes.c_uint64(), ctypes.c_uint64()
        call(_capi.dc_batches_peek, self._live(), ctypes.byref(rows), ctypes.byref(nnz))
        return rows.value, nnz.value

    def __iter__(self) -> "Batches":
        return self

    def __next__(self) -> tuple[np.ndarray, Any]:
        try:
            rows, need = self.peek()
        except Exception:
            # dc_batches_next hands out (consumes) the failed batch with the same error.
            self._start += self.batch_size
            r, z = ctypes.c_uint64(), ctypes.c_uint64()
            call(_capi.dc_batches_next, self._live(), self._code, None, None, None, 0,
                 ctypes.byref(r), ctypes.byref(z))
            raise
        if rows == 0:
            raise StopIteration
        indptr = np.empty(rows + 1, dtype=np.int64)
        indices = np.empty(max(need, 1), dtype=np.int32)
        values = np.empty(max(need, 1), dtype=self._dt)
        r, z = ctypes.c_uint64(), ctypes.c_uint64()
        cells = self.order[self._start:self._start + rows]
        self._start += rows
        call(_capi.dc_batches_next, self._live(), self._code, _ptr(indptr), _ptr(indices), _ptr(values), need,
             ctypes.byref(r), ctypes.byref(z))
        n = z.value
        return cells, csr_result(indptr, indices[:n], values[:n], (r.value, self._n_genes), self._format)


def _reopen(source: str, options: list[str], cache_dir: Optional[str], settings: dict[str, int]) -> Dataset:
    return Dataset(source, options=options or None, cache_dir=cache_dir, **settings)
