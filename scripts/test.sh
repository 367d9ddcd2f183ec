#!/usr/bin/env bash
# Runs every test of libdeltacells: formatting, lints, header drift, Rust tests, and the C
# tests (against the shared and the static library, and again under valgrind) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --quiet --all-targets --all-features -- -D warnings

echo "== header drift (include/deltacells.h vs a fresh cbindgen run)"
mkdir -p target
cbindgen --quiet --config cbindgen.toml --crate deltacells --output target/deltacells.h.fresh
if ! diff -u include/deltacells.h target/deltacells.h.fresh; then
  echo "include/deltacells.h is stale: regenerate it with" >&2
  echo "  cbindgen --config cbindgen.toml --crate deltacells --output include/deltacells.h" >&2
  exit 1
fi

echo "== Rust tests"
cargo test --all-features

echo "== C tests (ctest: shared, static, valgrind)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
(cd build && ctest --output-on-failure)
