#!/usr/bin/env bash
# Coverage-guided fuzzing of libdeltacells: libFuzzer (the libfuzzer-sys crate builds it from
# its bundled sources with the system C++ compiler) on the stable toolchain. The coverage
# instrumentation is rustc's stable `-Cpasses=sancov-module` with LLVM's sanitizer-coverage
# options, so no nightly flag is needed (cargo-fuzz is not used: it wants nightly for its
# default -Zsanitizer). See docs/reliability.md.
#
#   scripts/fuzz.sh SECONDS [TARGET...]  fuzz each target (default: all) for SECONDS, one
#                                        after the other, on one core
#   scripts/fuzz.sh --replay [TARGET...] run every committed input once (fuzz/corpus and
#                                        fuzz/regressions): no new inputs
#   scripts/fuzz.sh --seed               rewrite fuzz/corpus from the tests' inputs
#   scripts/fuzz.sh --list               the targets
#
# Inputs the fuzzer finds go to $DC_FUZZ_WORK/corpus/<target> (default target/fuzz-work),
# not into the committed corpus. A finding (crash, panic, DC_ERR_INTERNAL, timeout, memory
# blow-up) is saved as $DC_FUZZ_WORK/artifacts/<target>/crash-* and fails the script:
# minimise it (`<binary> -minimize_crash=1 FILE`), fix it, and commit the input to
# fuzz/regressions/<target>/ (cargo test replays them too: tests/fuzz_replay.rs).
# Extra libFuzzer options: DC_FUZZ_ARGS (e.g. "-jobs=2 -workers=2"); DC_FUZZ_STRICT=1 makes
# a dependency panic contained by the library a finding as well.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

targets_all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^deltacells-fuzz$')
mode=fuzz
case "${1:-}" in
  --list) echo "$targets_all"; exit 0 ;;
  --replay) mode=replay; shift ;;
  --seed) mode=seed; shift ;;
  ''|-h|--help) sed -n '2,22p' "$0"; exit 2 ;;
  *) seconds=$1; shift ;;
esac
targets=${*:-$targets_all}

if [ "$mode" = seed ]; then
  # The seeds are written by an ignored test of the replay test (plain debug build).
  rm -rf fuzz/corpus.new
  DC_FUZZ_SEED_OUT=$root/fuzz/corpus.new cargo test --quiet --features cli --test fuzz_replay \
    -- --ignored --exact write_seed_corpus
  rm -rf fuzz/corpus && mv fuzz/corpus.new fuzz/corpus
  du -sh fuzz/corpus/*
  exit 0
fi

work=${DC_FUZZ_WORK:-$root/target/fuzz-work}
mkdir -p "$work"
# The base stores of the ChromData member target, and seeds: the independent Python writer.
stores=$work/stores
if [ ! -f "$stores/main_22.cdz" ]; then
  python3 tests/chromdata/make_stores.py "$stores" >/dev/null
fi
export DC_FUZZ_STORES=$stores
scratch_root=$(mktemp -d "${TMPDIR:-/tmp}/dc-fuzz.XXXXXX")
export DC_FUZZ_SCRATCH=$scratch_root
trap 'rm -rf "$scratch_root"' EXIT

triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cforce-frame-pointers=yes"
echo "== fuzz: build (release, coverage-instrumented, target/fuzz)"
bins=()
for t in $targets; do bins+=(--bin "$t"); done
# --target keeps the instrumentation off build scripts and proc macros.
cargo build --quiet --release --manifest-path fuzz/Cargo.toml --target "$triple" \
  --target-dir target/fuzz "${bins[@]}"
bindir=target/fuzz/$triple/release

failed=()
for t in $targets; do
  seeds=()
  for d in fuzz/corpus/$t fuzz/regressions/$t; do [ -d "$d" ] && seeds+=("$d"); done
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  common=(-rss_limit_mb=2048 -timeout=60 -artifact_prefix="$work/artifacts/$t/"
          -print_final_stats=1)
  if [ "$mode" = replay ]; then
    echo "== fuzz: replay $t (${#seeds[@]} input dirs)"
    args=(-runs=0 "${common[@]}" ${DC_FUZZ_ARGS:-} "${seeds[@]}")
  else
    echo "== fuzz: $t for ${seconds}s"
    args=(-max_total_time="$seconds" "${common[@]}" ${DC_FUZZ_ARGS:-} "$work/corpus/$t" "${seeds[@]}")
  fi
  log=$work/$t.log
  if "$bindir/$t" "${args[@]}" >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" |
      sed "s/^/  $t /" || true
  else
    echo "FINDING in $t (log: $log):" >&2
    grep -E 'panicked|ERROR|DC_ERR|deadly|Test unit written' "$log" | head -20 >&2 || tail -30 "$log" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: $(echo $targets | wc -w) targets, no findings"
