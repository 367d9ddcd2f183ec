#!/usr/bin/env bash
# The main job, end to end on the bundled real data: encode each real count matrix of
# tests/data/scrna into a deltacells tile (genes sorted by decreasing total, zstd 19,
# 8 chunks), then decode it with every check of the format and compare it with the source.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --quiet --features cli --bin deltacells
out=${1:-target/demo}
mkdir -p "$out"
for dir in tests/data/scrna/*/; do
  name=$(basename "$dir")
  target/release/deltacells tile encode "$dir" "$out/$name.dct"
  target/release/deltacells tile verify "$out/$name.dct" --against "$dir"
done
target/release/deltacells tile info "$out/10x-v3-1107-cells-chr21.dct"
