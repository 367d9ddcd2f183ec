#!/usr/bin/env bash
# R stage of scripts/test.sh: builds the R package bindings/r (which links the static
# library, built by its configure with cargo), runs `R CMD check` on it (no errors or
# warnings allowed), then runs the scripts in examples-r/ against the installed package.
#
# The ChromData tests compare with the pandas answers of tests/chromdata/make_stores.py,
# written here as CSV by tests/chromdata/expected_csv.py (R cannot read Parquet without the
# arrow package).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export DELTACELLS_HOME=$root

work=$(mktemp -d "${TMPDIR:-/tmp}/deltacells-r.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== R: ChromData test stores and expected answers"
python3 tests/chromdata/make_stores.py "$work/stores" >/dev/null
python3 tests/chromdata/expected_csv.py "$work/stores" "$work/stores/r-expected"
python3 - "$work/stores" <<'PY'
import os, sys
root = sys.argv[1]
# A store whose int64 column holds 2^53 + 1 (no exact double) and -2^62 (exact), and whose
# int32 column holds -2^31: the R reader's integer rules (tests/testthat/test-chromdata.R).
sys.path.insert(0, "tests/chromdata")
import numpy as np
import make_stores as ms
ds = ms.make_dataset("big", np.random.default_rng(7), n_cells=2, n_traces=3, has_coords=True,
                     coord_dtype="float64")
spot_id = ds["spots"]["spot_id"].to_numpy().copy()
spot_id[0], spot_id[1] = 2**53 + 1, -(2**62)
ds["spots"]["spot_id"] = spot_id
# And an int32 column holding -2^31 (R's NA_integer_): read as double, never as NA.
fov = ds["spots"]["fov"].to_numpy().copy()
fov[0] = -(2**31)
ds["spots"]["fov"] = fov
assert ds["spots"]["trace_id"].iloc[0] == "t0" and ds["spots"]["trace_id"].iloc[1] == "t0"
ms.write_store(ds, os.path.join(root, "big_int64.chromdata.zarr"), "flat")
PY
export DELTACELLS_TEST_STORES=$work/stores DELTACELLS_REQUIRE_STORES=1

echo "== R: R CMD build + R CMD check (bindings/r)"
(cd "$work" && R CMD build --no-manual --no-build-vignettes "$root/bindings/r" >build.log 2>&1) ||
  { cat "$work/build.log"; exit 1; }
tarball=$(ls "$work"/deltacells_*.tar.gz)
export _R_CHECK_FORCE_SUGGESTS_=false
(cd "$work" && R CMD check --no-manual --no-build-vignettes "$tarball" >check.log 2>&1) || true
cat "$work/check.log"
status=$(grep -E '^Status: ' "$work/check.log" || true)
if [ -z "$status" ] || grep -qE 'ERROR|WARNING' <<<"$status"; then
  echo "R CMD check failed (${status:-no status line}); logs:" >&2
  for f in "$work"/deltacells.Rcheck/00install.out "$work"/deltacells.Rcheck/tests/testthat.Rout.fail; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -80 "$f" >&2; }
  done
  exit 1
fi
# The test results must show no skips: the ChromData tests ran.
grep -E '^\[ FAIL [0-9]+ \| WARN [0-9]+ \| SKIP [0-9]+ \| PASS [0-9]+ \]' \
  "$work/deltacells.Rcheck/tests/testthat.Rout" | tail -1 | sed 's/^/testthat: /'
if grep -qE 'SKIP [1-9]|\[ FAIL [1-9]' "$work/deltacells.Rcheck/tests/testthat.Rout"; then
  cat "$work/deltacells.Rcheck/tests/testthat.Rout" >&2
  echo "R tests skipped or failed" >&2
  exit 1
fi

echo "== R: examples-r/ (against the package just checked)"
export R_LIBS="$work/deltacells.Rcheck${R_LIBS:+:$R_LIBS}"
for f in examples-r/*.R; do
  echo "-- Rscript $f"
  Rscript "$f" "$work/stores/main_22.cdz"
done
echo "R stage passed"
