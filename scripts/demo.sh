#!/usr/bin/env bash
# The main job, end to end on the bundled real data: convert each real count matrix of
# tests/data/scrna (10x Genomics folders, and the .h5ad of the chr21 set) into a deltacells
# dataset with `deltacells convert` (genes sorted by decreasing total, zstd 19, 8 chunks per
# tile), then read each back: `deltacells info` (summary from the manifest), `deltacells
# verify --against` (every tile decoded with its CRC and every check, then every cell
# gathered and compared with the source), and an export to Matrix Market. The single-tile
# `deltacells tile` commands run too.
#
# Then ChromData, end to end: a chromatin-tracing table in the 4DN FOF-CT format
# (tests/data/chromatin/: SYNTHETIC, made by its seeded script -- no real table with a clear
# licence ships in the package registries; see its README) is imported into a store
# (`deltacells chromdata import-fofct`: a 2.2 `.cdz` and a 2.0 directory), described
# (`chromdata info`), queried by trace, cell and chromosome (`chromdata get`, CSV), and
# verified against the source table by an independent checker
# (tests/chromdata/check_fofct_store.py: the store read back by read_store.py with pyarrow +
# zarr, every row and column compared with the table; every query's rows compared with the
# table filtered in Python).
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

echo
echo "== ChromData: a chromatin-tracing table (FOF-CT) -> store -> queries -> checked against the table"
table=tests/data/chromatin/synthetic_traces.fofct.csv
# The bundled table is exactly what its seeded generator writes (stdlib only, any machine).
python3 tests/data/chromatin/make_fofct.py --check "$table"
echo "   $table: $(grep -vc '^#' "$table") spots, SYNTHETIC (3D random-walk traces with missing spots," \
     "32 cells, 2 alleles, 3 chromosomes, per-spot quality columns; tests/data/chromatin/README.md)"
$dc chromdata import-fofct "$table" "$out/traces.cdz" --overwrite
$dc chromdata import-fofct "$table" "$out/traces.chromdata.zarr" --layout flat --overwrite
$dc chromdata info "$out/traces.cdz"
trace=17 cell=fov2_cell05 chrom=chr21
$dc chromdata get "$out/traces.cdz" --trace "$trace" --output "$out/trace_$trace.csv"
$dc chromdata get "$out/traces.cdz" --cell "$cell" --output "$out/cell_$cell.csv"
$dc chromdata get "$out/traces.cdz" --chrom "$chrom" --output "$out/chrom_$chrom.csv"
$dc chromdata get "$out/traces.chromdata.zarr" --trace "$trace" --output "$out/trace_${trace}_flat.csv"
echo "   trace $trace (first rows of $out/trace_$trace.csv):"
head -4 "$out/trace_$trace.csv" | sed 's/^/     /'
echo "== ChromData: independent check against the source table"
python3 tests/chromdata/check_fofct_store.py "$table" "$out/traces.cdz" \
  --query trace "$trace" "$out/trace_$trace.csv" \
  --query cell "$cell" "$out/cell_$cell.csv" \
  --query chrom "$chrom" "$out/chrom_$chrom.csv"
python3 tests/chromdata/check_fofct_store.py "$table" "$out/traces.chromdata.zarr" \
  --query trace "$trace" "$out/trace_${trace}_flat.csv"
echo "== done: scRNA datasets converted, read back and verified; chromatin traces imported, queried by" \
     "trace, cell and chromosome, and verified against their source table (outputs in $out)"
