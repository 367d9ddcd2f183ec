#!/usr/bin/env bash
# The main job, end to end on the bundled real data: convert each real count matrix of
# tests/data/scrna (10x Genomics folders, and the .h5ad of the chr21 set) into a deltacells
# dataset with `deltacells convert` (genes sorted by decreasing total, zstd 19, 8 chunks per
# tile), then read each back: `deltacells info` (summary from the manifest), `deltacells
# verify --against` (every tile decoded with its CRC and every check, then every cell
# gathered and compared with the source), and an export to Matrix Market. The single-tile
# `deltacells tile` commands run too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --quiet --features cli --bin deltacells
dc=target/release/deltacells
out=${1:-target/demo}
mkdir -p "$out"
for src in tests/data/scrna/*/ tests/data/scrna/*.h5ad; do
  name=$(basename "$src")
  echo "== $name"
  # Small tiles for these small sets, so that each dataset has several tiles.
  $dc convert "$src" "$out/$name.deltacells" --tile-size 2500 --overwrite
  $dc info "$out/$name.deltacells"
  $dc verify "$out/$name.deltacells" --against "$src"
done
echo "== export: first 10 cells of the mouse set back to Matrix Market (input gene order)"
$dc export "$out/mouse-10k-cells-1k-genes.deltacells" "$out/mouse-first10.mtx" --cells 0-9
head -3 "$out/mouse-first10.mtx"
echo "== single tiles"
for dir in tests/data/scrna/*/; do
  name=$(basename "$dir")
  $dc tile encode "$dir" "$out/$name.dct"
  $dc tile verify "$out/$name.dct" --against "$dir"
done
$dc tile info "$out/10x-v3-1107-cells-chr21.dct"
