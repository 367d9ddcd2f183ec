#!/usr/bin/env bash
# Python stage of scripts/test.sh: the package bindings/python as a user gets it.
#   1. the ctypes layer is up to date with the header and the package uses every function;
#   2. a wheel is built by the package's own tooling (setuptools; the shared library of
#      `cargo build --release --lib` bundled, no build isolation: nothing is downloaded);
#   3. the wheel is installed into a fresh virtual environment with only numpy and pyarrow
#      (from the package index) and imported with no compiler, cargo or rustc on PATH: it
#      must load its bundled library;
#   4. an editable install (pip install -e) imports the checkout's sources and loads
#      target/release/libdeltacells.so;
#   5. pytest runs bindings/python/tests against that installed wheel (a second venv that
#      sees the system's test modules: scipy, anndata, dask, ...).
# DELTACELLS_PYTHON_FRESH_VENV=0 skips step 3 (it needs the package index).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

work=$(mktemp -d "${TMPDIR:-/tmp}/deltacells-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== Python: ctypes layer vs header (bindings/python/gen/generate.py --check)"
python3 bindings/python/gen/generate.py --check

echo "== Python: wheel (setuptools + the cdylib)"
cargo build --release --lib --quiet
lib=${CARGO_TARGET_DIR:-$root/target}/release/libdeltacells.so
rm -rf bindings/python/build bindings/python/deltacells.egg-info
DELTACELLS_LIBRARY=$lib python3 -m pip wheel --quiet --no-build-isolation --no-deps \
  --wheel-dir "$work/dist" bindings/python
rm -rf bindings/python/build bindings/python/deltacells.egg-info
wheel=$(ls "$work"/dist/deltacells-*.whl)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) kB)"

if [ "${DELTACELLS_PYTHON_FRESH_VENV:-1}" != 0 ]; then
  echo "== Python: install into a fresh venv, import without compiler or Rust"
  python3 -m venv "$work/fresh"
  "$work/fresh/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
  mkdir -p "$work/empty-path"
  (cd "$work" && env -i HOME="$work" PATH="$work/empty-path" "$work/fresh/bin/python" - <<'PY'
import shutil
import deltacells as dc
assert shutil.which("cc") is None and shutil.which("cargo") is None and shutil.which("rustc") is None
assert "/site-packages/deltacells/_lib/" in str(dc.LIBRARY_PATH), dc.LIBRARY_PATH
print(f"deltacells {dc.__version__} imported from {dc.LIBRARY_PATH}")
PY
  )
fi

echo "== Python: editable install (development: the package's sources, target/release's library)"
# --without-pip: the venv would bring its own (older) setuptools; the system's pip and
# setuptools (>= 70.1) are seen through --system-site-packages.
python3 -m venv --system-site-packages --without-pip "$work/editable"
"$work/editable/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  -e bindings/python
rm -rf bindings/python/build bindings/python/deltacells.egg-info
# The checkout's target/release is found by itself; another CARGO_TARGET_DIR is named.
if [ "$lib" -ef "$root/target/release/libdeltacells.so" ]; then found=(-u DELTACELLS_LIBRARY); else found=(DELTACELLS_LIBRARY="$lib"); fi
(cd "$work" && env "${found[@]}" ROOT="$root" LIB="$lib" "$work/editable/bin/python" - <<'PY'
import os
from pathlib import Path
import deltacells as dc
root = Path(os.environ["ROOT"])
assert Path(dc.__file__).resolve() == root / "bindings/python/deltacells/__init__.py", dc.__file__
assert Path(dc.LIBRARY_PATH).resolve() == Path(os.environ["LIB"]).resolve(), dc.LIBRARY_PATH
print(f"editable: deltacells {dc.__version__} from {Path(dc.__file__).parent}, library {dc.LIBRARY_PATH}")
PY
)

echo "== Python: pytest bindings/python/tests (against the installed wheel)"
python3 -m venv --system-site-packages "$work/test"
"$work/test/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$wheel"
# Run from outside the source tree so that `import deltacells` is the installed wheel.
(cd "$work" && DELTACELLS_EXPECT_BUNDLED=1 "$work/test/bin/python" -m pytest -q -p no:cacheprovider \
  --durations=5 "$root/bindings/python/tests")
echo "Python stage passed"
