"""Finds and loads the shared library libdeltacells (the one native core).

Looked for, in order:

1. ``$DELTACELLS_LIBRARY``: an explicit path (then nothing else is tried);
2. ``deltacells/_lib/`` inside the installed package (what a wheel bundles);
3. ``target/release/`` of the source tree holding this package (an editable install in a
   checkout: ``cargo build --release`` and re-import, no reinstall).

The library's ABI version must equal the one the generated layer was made for.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

if sys.platform == "darwin":
    LIBRARY_FILE = "libdeltacells.dylib"
elif sys.platform == "win32":
    LIBRARY_FILE = "deltacells.dll"
else:
    LIBRARY_FILE = "libdeltacells.so"


def candidates() -> list[Path]:
    """The paths tried, in order (see the module docstring)."""
    explicit = os.environ.get("DELTACELLS_LIBRARY")
    if explicit:
        return [Path(explicit)]
    here = Path(__file__).resolve().parent
    return [here / "_lib" / LIBRARY_FILE, here.parents[2] / "target" / "release" / LIBRARY_FILE]


def _load() -> tuple[ctypes.CDLL, Path]:
    tried = candidates()
    for path in tried:
        if path.is_file():
            # CDLL (not PyDLL): every call releases the GIL.
            return ctypes.CDLL(str(path)), path
    raise ImportError(
        "deltacells: the shared library was not found; tried "
        + ", ".join(str(p) for p in tried)
        + " (install the wheel, set DELTACELLS_LIBRARY, or run `cargo build --release` in the source tree)"
    )


LIBRARY, LIBRARY_PATH = _load()
