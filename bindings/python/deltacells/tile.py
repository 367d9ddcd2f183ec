"""Single tiles in memory (contract §2): inspect, decode, encode."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _capi
from ._errors import call
from .dataset import MatrixFormat, csr_result, dtype_code


@dataclass(frozen=True)
class TileInfo:
    """Summary of a tile (``dc_tile_info``)."""

    version: int
    n_chunks: int
    n_cells: int
    nnz: int
    n_genes: int
    n_exceptions: int
    total_size: int


def _blob(blob: Any) -> np.ndarray:
    """The tile's bytes as a uint8 array (no copy; read-only buffers such as bytes work)."""
    return np.frombuffer(blob, dtype=np.uint8)


def inspect(blob: Any, *, verify_crc: bool = True) -> TileInfo:
    """Validates a tile's structure (and CRC) without decompressing it (``dc_tile_inspect``)."""
    data = _blob(blob)
    info = _capi.dc_tile_info()
    call(_capi.dc_tile_inspect, data.ctypes.data if data.size else None, data.size, 1 if verify_crc else 0,
         ctypes.byref(info))
    return TileInfo(*(getattr(info, f) for f, _ in _capi.dc_tile_info._fields_))


def decode(blob: Any, *, dtype: Any = np.int32, threads: int = 0, verify_crc: bool = True,
           format: MatrixFormat = "csr_matrix") -> Any:
    """Decodes a whole tile, every check of the format made (``dc_tile_decode``)."""
    dt, code = dtype_code(dtype)
    data = _blob(blob)
    info = inspect(data, verify_crc=verify_crc)
    indptr = np.empty(info.n_cells + 1, dtype=np.int64)
    indices = np.empty(max(info.nnz, 1), dtype=np.int32)
    values = np.empty(max(info.nnz, 1), dtype=dt)
    nnz = ctypes.c_uint64()
    call(_capi.dc_tile_decode, data.ctypes.data if data.size else None, data.size, threads, 1 if verify_crc else 0,
         code, indptr.ctypes.data, indices.ctypes.data, values.ctypes.data, info.nnz, ctypes.byref(nnz))
    k = nnz.value
    return csr_result(indptr, indices[:k], values[:k], (info.n_cells, info.n_genes), format)


def encode(matrix: Any, *, zstd_level: int = 19, n_chunks: int = 0, threads: int = 0) -> bytes:
    """Encodes one tile from a cells x genes CSR matrix (scipy, with sorted unique indices
    per row and counts >= 1) (``dc_tile_encode``)."""
    import scipy.sparse as sp

    m = sp.csr_matrix(matrix)
    indptr = np.ascontiguousarray(m.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(m.indices, dtype=np.int32)
    values = np.ascontiguousarray(m.data, dtype=np.int32)
    if not np.array_equal(values, m.data):
        raise ValueError("encode: counts must be integers in 1 .. 2^31-1")
    out = ctypes.c_void_p()
    size = ctypes.c_size_t()
    call(_capi.dc_tile_encode, m.shape[0], m.shape[1], indptr.ctypes.data,
         indices.ctypes.data if indices.size else None, values.ctypes.data if values.size else None,
         zstd_level, n_chunks, threads, ctypes.byref(out), ctypes.byref(size))
    try:
        return ctypes.string_at(out.value, size.value)
    finally:
        _capi.dc_bytes_free(out, size)
