#!/usr/bin/env bash
# Installs what building and testing libdeltacells needs on a bare Debian machine.
# Idempotent: installs only what is missing. Used by scripts/test.sh, scripts/demo.sh, .ci/run.
set -euo pipefail

CBINDGEN_VERSION=0.29.2
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

apt_missing=()
command -v cmake >/dev/null 2>&1 || apt_missing+=(cmake)
command -v valgrind >/dev/null 2>&1 || apt_missing+=(valgrind)
command -v pkg-config >/dev/null 2>&1 || apt_missing+=(pkg-config)
command -v cc >/dev/null 2>&1 || apt_missing+=(gcc)
command -v c++ >/dev/null 2>&1 || apt_missing+=(g++)
command -v make >/dev/null 2>&1 || apt_missing+=(make)
command -v python3 >/dev/null 2>&1 || apt_missing+=(python3 python3-pip python3-venv)
# R with Matrix and testthat, for the R package bindings/r (scripts/test-r.sh).
command -v R >/dev/null 2>&1 || apt_missing+=(r-base-core)
if ! Rscript -e 'library(Matrix)' >/dev/null 2>&1; then apt_missing+=(r-cran-matrix); fi
if ! Rscript -e 'library(testthat)' >/dev/null 2>&1; then apt_missing+=(r-cran-testthat); fi
if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "setup: installing ${apt_missing[*]} (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi

if ! cbindgen --version 2>/dev/null | grep -q "cbindgen $CBINDGEN_VERSION"; then
  echo "setup: installing cbindgen $CBINDGEN_VERSION (cargo install)"
  cargo install --locked --quiet "cbindgen@$CBINDGEN_VERSION"
fi

# Python modules of the independent writers used as test oracles (ChromData stores).
if ! python3 -c "import pyarrow, pandas, numpy, zarr; assert int(zarr.__version__.split('.')[0]) >= 3" 2>/dev/null; then
  echo "setup: installing zarr>=3 pyarrow pandas numpy (pip)"
  pip_flags=(--quiet --disable-pip-version-check)
  # Debian's own python3 refuses system-wide installs without this flag (PEP 668).
  if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] &&
      pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" 'zarr>=3' pyarrow pandas numpy
fi
