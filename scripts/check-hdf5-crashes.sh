#!/usr/bin/env bash
# Runs .h5ad files that may crash libhdf5 (e.g. the h5ad fuzz target's artifacts) through the
# CLI, which must contain every crash (docs/reliability.md §1): for each file, `convert`
# (plain and --no-sort-genes), `convert --overwrite` over a good dataset and `verify
# --against`. Reports the CLI dying of a signal, anything left beside the output, and a
# previous output changed by a failed conversion; counts the contained libhdf5 crashes and
# the libhdf5 calls the watchdog ended (hangs contained).
#
#     scripts/check-hdf5-crashes.sh target/debug/deltacells DIR_OR_FILES...
#
# Exit status 1 if any file broke a rule. libhdf5 can loop forever on a malformed file (e.g.
# in H5C_protect under H5HG_read); the child's watchdog ends such a call after its budget
# (docs §1), here CALL_TIMEOUT seconds (default 5, exported as DELTACELLS_HDF5_CALL_TIMEOUT).
# A run still going after CHECK_TIMEOUT seconds (default 60) is a hang the watchdog missed:
# it breaks a rule.
# A new crash site is kept as a reproducer with
# scripts/make-hdf5-crash-patch.py FILE NAME --minimize target/debug/deltacells.
set -u
B=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SEED=$ROOT/tests/data/scrna/10x-v3-1107-cells-chr21.h5ad
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$W"
"$B" convert "$SEED" good.dc --quiet && cp -r good.dc keep.dc
files=()
for a in "$@"; do
  if [ -d "$a" ]; then for f in "$a"/*; do files+=("$f"); done; else files+=("$a"); fi
done
export DELTACELLS_HDF5_CALL_TIMEOUT=${CALL_TIMEOUT:-5}
n=0; crashed=0; bad=0; hangs=0; ended=0
for f in "${files[@]}"; do
  cp "$f" in.h5ad; n=$((n+1)); c=0; h=0; ok=1
  for args in "convert in.h5ad o.dc" "convert in.h5ad o.dc --no-sort-genes" \
              "convert in.h5ad good.dc --overwrite" "verify keep.dc --against in.h5ad"; do
    timeout "${CHECK_TIMEOUT:-60}" "$B" $args >out.txt 2>err.txt; rc=$?
    if [ $rc = 124 ]; then echo "$(basename "$f"): '$args': hangs (killed after ${CHECK_TIMEOUT:-60} s)"; hangs=$((hangs+1)); ok=0
    elif [ $rc -gt 128 ]; then echo "$(basename "$f"): '$args': the CLI died (status $rc)"; ok=0; fi
    grep -q "libhdf5 crashed" err.txt && c=1
    grep -q "libhdf5 did not return within" err.txt && h=1
    if grep -q -e "libhdf5 crashed" -e "libhdf5 did not return" err.txt; then
      [ "$(grep -c '^deltacells' err.txt)" = 1 ] && tail -n 1 err.txt | grep -q '^deltacells' && [ $rc = 1 ] || { echo "$(basename "$f"): '$args': not one error line with status 1 (status $rc)"; ok=0; }
      diff -rq good.dc keep.dc >/dev/null || { echo "$(basename "$f"): '$args': a failure changed the previous output"; ok=0; }
    fi
    rm -rf o.dc; rm -rf good.dc; cp -r keep.dc good.dc
  done
  extra=$(ls -A | grep -v -x -e in.h5ad -e good.dc -e keep.dc -e out.txt -e err.txt)
  if [ -n "$extra" ]; then echo "$(basename "$f"): left behind: $extra"; ok=0; rm -rf $extra; fi
  crashed=$((crashed+c)); ended=$((ended+h)); [ $ok = 1 ] || bad=$((bad+1))
done
echo "$n files: $crashed crashed libhdf5 (contained), $ended hung in libhdf5 (ended by the watchdog), $hangs runs hung (not ended), $bad broke a rule"
[ $bad = 0 ]
