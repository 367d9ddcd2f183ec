"""deltacells: Python bindings of libdeltacells (one Rust core, one C ABI).

Translation only: every function calls the C API (``include/deltacells.h``) through ctypes
and turns its conventions into Python ones -- handles into classes (``with``, pickling as
source + settings), statuses into exceptions, CSR buffers into scipy / numpy, Arrow C
streams into pyarrow (zero-copy).

    import deltacells as dc
    ds = dc.Dataset("pbmc.dc")
    X = ds.gather([0, 42, 7])                 # scipy.sparse.csr_matrix, rows = cells
    obs = ds.obs(["cell_type"])               # pyarrow.Table
    cd = dc.ChromData("run.cdz")
    spots = cd.get_trace("t0", "coords")      # pyarrow.Table
"""
from __future__ import annotations

from . import _capi
from ._errors import (
    BufferTooSmallError,
    ChecksumError,
    DeltaCellsError,
    ExistsError,
    FormatError,
    InternalError,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    OutOfRangeError,
    StateError,
    StorageError,
    UnsupportedError,
    last_error,
    status_name,
)
from ._native import LIBRARY_PATH
from .chromdata import LAYOUTS, ChromData, ChromDataInfo, ChromDataPartition, ChromDataWriter
from .dataset import Csr, Dataset, DatasetInfo, TileBounds
from .writer import Writer, write_anndata, write_matrix
from . import tile

if _capi.dc_abi_version() != _capi.DC_ABI_VERSION:
    raise ImportError(
        f"deltacells: {LIBRARY_PATH} implements ABI {_capi.dc_abi_version()}, "
        f"this package was generated for ABI {_capi.DC_ABI_VERSION}")

__version__: str = _capi.dc_version().decode()
"""The library's version (``dc_version``); the package carries the same number."""


def abi_version() -> int:
    """The ABI version of the loaded library (``dc_abi_version``)."""
    return int(_capi.dc_abi_version())


__all__ = [
    "BufferTooSmallError", "ChecksumError", "ChromData", "ChromDataInfo", "ChromDataPartition",
    "ChromDataWriter", "Csr", "Dataset", "DatasetInfo", "DeltaCellsError", "ExistsError",
    "FormatError", "InternalError", "InvalidArgumentError", "LAYOUTS", "LIBRARY_PATH",
    "LimitError", "NotFoundError", "OutOfRangeError", "StateError", "StorageError", "TileBounds",
    "UnsupportedError", "Writer", "abi_version", "last_error", "status_name", "tile",
    "write_anndata", "write_matrix",
]
