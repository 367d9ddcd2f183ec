"""What every handle class shares: opening from a path or URL (with object-store options
once the library takes them), closing, context management, and pickling as
(source, options, settings) so that a handle re-opens on another process or machine
(dask workers, spawned DataLoader workers)."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from . import _capi
from ._errors import UnsupportedError, call

PathOrUrl = Union[str, "os.PathLike[str]"]
Options = Union[Mapping[str, Any], Sequence[str], None]


def is_url(source: str) -> bool:
    """True for ``scheme://...`` sources (object stores, http), which are kept verbatim."""
    return "://" in source


def normalize_source(source: PathOrUrl) -> str:
    """A URL as given; a local path made absolute (so a pickled handle re-opens anywhere
    the same file system is mounted)."""
    s = os.fspath(source)
    if not isinstance(s, str):
        s = os.fsdecode(s)
    return s if is_url(s) else os.path.abspath(s)


def option_strings(options: Options) -> list[str]:
    """``{"aws_region": "eu-west-1"}`` or ``["aws_region=eu-west-1"]`` -> ``["aws_region=eu-west-1"]``."""
    if options is None:
        return []
    if isinstance(options, Mapping):
        return [f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in options.items()]
    if isinstance(options, (str, bytes)):
        raise TypeError("options: a mapping or a sequence of 'key=value' strings, not one string")
    return [str(o) for o in options]


def cstrings(items: Sequence[str]) -> tuple[Any, int]:
    """(const char *const *, n) for a list of strings; (NULL, 0) for an empty list."""
    if not items:
        return None, 0
    encoded = [os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode() for s in items]
    arr = (ctypes.c_char_p * len(items))(*encoded)
    return arr, len(items)


def open_handle(plain: Callable[..., int], with_options: Union[None, str, Callable[..., int]], source: str,
                options: list[str], *middle: Any) -> ctypes.c_void_p:
    """Opens through ``plain(source, *middle, &h)``, or ``<with_options>(source, *middle,
    options, n, &h)`` when options are given (contract §7, remote storage)."""
    handle = ctypes.c_void_p()
    if options:
        if callable(with_options):
            fn = with_options
        else:
            fn = getattr(_capi, with_options, None) if with_options else None
        if fn is None:
            raise UnsupportedError(
                _capi.DC_ERR_UNSUPPORTED, str(with_options or plain.__name__),
                "this build of libdeltacells takes no open options (contract §7 not implemented yet)")
        arr, n = cstrings(options)
        call(fn, source.encode(), *middle, arr, n, ctypes.byref(handle))
    else:
        call(plain, source.encode(), *middle, ctypes.byref(handle))
    return handle


class Handle:
    """Base of the handle classes: ``close()``, ``with``, ``closed``."""

    _h: Optional[ctypes.c_void_p] = None
    _free: Callable[[Any], None]

    def _live(self) -> ctypes.c_void_p:
        if self._h is None:
            raise ValueError(f"{type(self).__name__}: operation on a closed handle")
        return self._h

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Releases the native handle (idempotent). Arrow tables and readers obtained from it
        stay valid. Do not close a handle that another thread is using."""
        h, self._h = self._h, None
        if h is not None:
            type(self)._free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may be gone
            pass
