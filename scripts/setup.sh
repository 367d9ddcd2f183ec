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
# libhdf5 for the CLI's .h5ad input (the `cli` feature; the library itself never links it).
pkg-config --exists hdf5 2>/dev/null || dpkg -s libhdf5-dev >/dev/null 2>&1 || apt_missing+=(libhdf5-dev)
command -v python3 >/dev/null 2>&1 || apt_missing+=(python3 python3-pip)
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

# anndata + h5py: the converter tests generate .h5ad fixtures with tests/data/make_h5ad.py
# (those tests are skipped, not failed, without them; one fixture is committed).
if ! python3 -c "import anndata, h5py" >/dev/null 2>&1; then
  echo "setup: installing anndata, h5py (pip)"
  python3 -m pip install --quiet anndata h5py 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages anndata h5py \
    || echo "setup: warning: could not install anndata/h5py; the generated-.h5ad tests will be skipped" >&2
fi
