"""Errors: a failed library call raises a DeltaCellsError subclass chosen by its dc_status.

Every exception carries ``status`` (the ``dc_status`` value), ``status_name``
(``"DC_ERR_FORMAT"``, from ``dc_status_name``), ``message`` (the library's one-line message,
``dc_last_error``) and ``function`` (the C function that failed). The message is read right
after the failing call, before any other call on the thread (it is thread-local and valid
only until the next call).
"""
from __future__ import annotations

from typing import Any, Callable

from . import _capi


class DeltaCellsError(Exception):
    """A libdeltacells call failed. ``str(e)`` is ``"<function>: <STATUS_NAME>: <message>"``."""

    status: int
    status_name: str
    message: str
    function: str

    def __init__(self, status: int, function: str, message: str):
        self.status = status
        self.status_name = status_name(status)
        self.message = message
        self.function = function
        super().__init__(f"{function}: {self.status_name}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (dask, DataLoader)
        return (error_for, (self.status, self.function, self.message))


class InvalidArgumentError(DeltaCellsError, ValueError):
    """DC_ERR_INVALID_ARGUMENT: a bad value, type or combination of arguments."""


class StorageError(DeltaCellsError, OSError):
    """DC_ERR_IO: the operating system (or object store) refused a read, write or rename."""


class NotFoundError(DeltaCellsError, LookupError):
    """DC_ERR_NOT_FOUND: a missing file, id, column or table, or an optional part absent."""


class FormatError(DeltaCellsError):
    """DC_ERR_FORMAT: malformed or inconsistent data."""


class ChecksumError(FormatError):
    """DC_ERR_CHECKSUM: a CRC-32 or SHA-256 mismatch."""


class UnsupportedError(DeltaCellsError):
    """DC_ERR_UNSUPPORTED: a version, flag, layout or type this build does not read."""


class OutOfRangeError(DeltaCellsError, IndexError):
    """DC_ERR_OUT_OF_RANGE: an index (cell, tile, gene) past the end."""


class BufferTooSmallError(DeltaCellsError):
    """DC_ERR_BUFFER_TOO_SMALL: a buffer shorter than needed (the package sizes its own)."""


class StateError(DeltaCellsError, RuntimeError):
    """DC_ERR_STATE: the call is not valid now (e.g. append after finish)."""


class LimitError(DeltaCellsError):
    """DC_ERR_LIMIT: a policy limit was hit (e.g. a memory budget)."""


class ExistsError(DeltaCellsError, FileExistsError):
    """DC_ERR_EXISTS: the output exists and overwriting was not allowed."""


class InternalError(DeltaCellsError, RuntimeError):
    """DC_ERR_INTERNAL: a bug in the library (a caught panic); the handle is poisoned."""


_BY_STATUS: dict[int, type[DeltaCellsError]] = {
    _capi.DC_ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _capi.DC_ERR_IO: StorageError,
    _capi.DC_ERR_NOT_FOUND: NotFoundError,
    _capi.DC_ERR_FORMAT: FormatError,
    _capi.DC_ERR_CHECKSUM: ChecksumError,
    _capi.DC_ERR_UNSUPPORTED: UnsupportedError,
    _capi.DC_ERR_OUT_OF_RANGE: OutOfRangeError,
    _capi.DC_ERR_BUFFER_TOO_SMALL: BufferTooSmallError,
    _capi.DC_ERR_STATE: StateError,
    _capi.DC_ERR_LIMIT: LimitError,
    _capi.DC_ERR_EXISTS: ExistsError,
    _capi.DC_ERR_INTERNAL: InternalError,
}


def status_name(status: int) -> str:
    """The name of a status code, e.g. ``"DC_ERR_FORMAT"`` (``dc_status_name``)."""
    return _capi.dc_status_name(status).decode()


def last_error() -> str:
    """The calling thread's last error message (``dc_last_error``)."""
    return _capi.dc_last_error().decode("utf-8", "replace")


def error_for(status: int, function: str, message: str) -> DeltaCellsError:
    """The exception for a status (DeltaCellsError itself for an unknown value)."""
    return _BY_STATUS.get(status, DeltaCellsError)(status, function, message)


def call(fn: Callable[..., int], *args: Any) -> None:
    """Calls a fallible C function; raises the matching DeltaCellsError unless it returns DC_OK."""
    status = fn(*args)
    if status != _capi.DC_OK:
        raise error_for(status, fn.__name__, last_error())
