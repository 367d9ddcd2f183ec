"""Build hooks of the deltacells wheel (metadata is in pyproject.toml).

The package is pure Python over ctypes; what makes the wheel platform-specific is the shared
library it bundles, deltacells/_lib/libdeltacells.so, which is

* the file named by ``$DELTACELLS_LIBRARY`` when set (a library built already, e.g. by CI), or
* built here with ``cargo build --release --lib`` in the source tree two levels up.

An editable install (``pip install -e bindings/python``) bundles nothing: the package then
loads ``target/release/libdeltacells.so`` of the checkout (see deltacells/_native.py).
The wheel is tagged ``py3-none-<platform>``: any CPython 3, no Python ABI dependency.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LIBRARY_FILE = {"darwin": "libdeltacells.dylib", "win32": "deltacells.dll"}.get(sys.platform, "libdeltacells.so")


def shared_library() -> Path:
    explicit = os.environ.get("DELTACELLS_LIBRARY")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SystemExit(f"DELTACELLS_LIBRARY={explicit}: no such file")
        return path
    if not (ROOT / "Cargo.toml").is_file():
        raise SystemExit(f"{ROOT}: no Cargo.toml; set DELTACELLS_LIBRARY to a built {LIBRARY_FILE}")
    subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / LIBRARY_FILE


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "deltacells" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shared_library(), dest / LIBRARY_FILE)


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
