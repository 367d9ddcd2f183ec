#!/usr/bin/env bash
# Coverage-guided fuzzing of libdeltacells: libFuzzer (the libfuzzer-sys crate builds it from
# its bundled sources with the system C++ compiler) on the stable toolchain. The coverage
# instrumentation is rustc's stable `-Cpasses=sancov-module` with LLVM's sanitizer-coverage
# options, so no nightly flag is needed (cargo-fuzz is not used: it wants nightly for its
# default -Zsanitizer). See docs/reliability.md.
#
#   scripts/fuzz.sh SECONDS [TARGET...]  fuzz each target (default: all) for SECONDS, one
#                                        after the other, on one core
#   scripts/fuzz.sh --cpu SECONDS [TARGET...]
#                                        the documented run: every target at once at nice 19,
#                                        each until SECONDS of its own CPU time (user + system,
#                                        /proc/PID/stat) or 10 M executions, whichever is first;
#                                        wall time does not count, so builds and benchmarks
#                                        beside it only delay it (SIGSTOP a fuzzer to pause it)
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
  --cpu) mode=cpu; seconds=${2:?--cpu SECONDS}; shift 2 ;;
  ''|-h|--help) sed -n '2,28p' "$0"; exit 2 ;;
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
# Why a unit failed, from a libFuzzer log: the lines that name it.
report_finding() {
  echo "FINDING in $1 (log: $2):" >&2
  grep -E 'panicked|ERROR|DC_ERR|deadly|Test unit written' "$2" | head -20 >&2 || tail -30 "$2" >&2
  failed+=("$1")
}
print_stats() {
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$2" |
    sed "s/^/  $1 /" || true
}
seed_dirs() {
  for d in fuzz/corpus/$1 fuzz/regressions/$1; do if [ -d "$d" ]; then echo "$d"; fi; done
}
common_args() {
  echo -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/$1/" -print_final_stats=1
}

if [ "$mode" = cpu ]; then
  # Every target at once; each gets SIGINT at $seconds of CPU time (libFuzzer then prints its
  # final statistics and exits with 72). libFuzzer's -timeout is wall time: 900 s, so that a
  # unit slowed by the other fuzzers or paused is not taken for a hang.
  ticks=$(getconf CLK_TCK)
  # Waits up to 60 s for FILE to be written (non-empty); fails after that.
  wait_for_file() {
    local i
    for ((i = 0; i < 600; i++)); do
      [ -s "$1" ] && return 0
      sleep 0.1
    done
    return 1
  }
  declare -A pids=()
  for t in $targets; do
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    # A subshell starts the fuzzer, hands its pid out and keeps its exit status in a file:
    # the main loop's `wait` could not get it (after an hour of the loop's command
    # substitutions bash had forgotten an early-finished fuzzer: "not a child of this shell").
    rm -f "$work/$t.rc" "$work/$t.pid"
    (
      # shellcheck disable=SC2046
      nice -n 19 "$bindir/$t" -runs=10000000 -timeout=900 $(common_args "$t") ${DC_FUZZ_ARGS:-} \
        "$work/corpus/$t" $(seed_dirs "$t") >"$work/$t.log" 2>&1 &
      echo $! >"$work/$t.pid"
      rc=0; wait $! || rc=$?
      echo "$rc" >"$work/$t.rc"
    ) &
    if ! wait_for_file "$work/$t.pid"; then
      echo "fuzz: $t did not start (no pid after 60 s)" >&2
      exit 1
    fi
    pids[$t]=$(cat "$work/$t.pid")
    echo "== fuzz: $t (pid ${pids[$t]}) until ${seconds}s of CPU or 10 M executions"
  done
  running=${#pids[@]}
  while [ "$running" -gt 0 ]; do
    sleep 2
    running=0
    for t in "${!pids[@]}"; do
      stat=$(cat "/proc/${pids[$t]}/stat" 2>/dev/null) || continue
      # After "pid (comm) ": state, then utime and stime (fields 14 and 15) in clock ticks.
      fields=$(echo "$stat" | sed 's/.*) //')
      [ "$(echo "$fields" | awk '{print $1}')" = Z ] && continue
      running=$((running + 1))
      cpu=$(echo "$fields" | awk '{print $12 + $13}')
      if [ "$cpu" -ge $((seconds * ticks)) ]; then kill -INT "${pids[$t]}" 2>/dev/null || true; fi
    done
  done
  for t in "${!pids[@]}"; do
    # The fuzzer has ended (the loop above saw it gone): its subshell writes the status at
    # once, unless the subshell itself was killed.
    if ! wait_for_file "$work/$t.rc"; then
      echo "  $t: no exit status after 60 s (its waiting subshell was killed?); see $work/$t.log" >&2
      failed+=("$t (no exit status: not a clean run)")
      continue
    fi
    rc=$(cat "$work/$t.rc")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 72 ]; then report_finding "$t" "$work/$t.log"; continue; fi
    echo "  $t: exit $rc (72: stopped at the CPU budget), $(ls "$work/corpus/$t" | wc -l) corpus files"
    print_stats "$t" "$work/$t.log"
  done
else
  for t in $targets; do
    mapfile -t seeds < <(seed_dirs "$t")
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    # shellcheck disable=SC2207
    common=($(common_args "$t") -timeout=60)
    if [ "$mode" = replay ]; then
      echo "== fuzz: replay $t (${#seeds[@]} input dirs)"
      args=(-runs=0 "${common[@]}" ${DC_FUZZ_ARGS:-} "${seeds[@]}")
    else
      echo "== fuzz: $t for ${seconds}s"
      args=(-max_total_time="$seconds" "${common[@]}" ${DC_FUZZ_ARGS:-} "$work/corpus/$t" "${seeds[@]}")
    fi
    log=$work/$t.log
    if "$bindir/$t" "${args[@]}" >"$log" 2>&1; then
      print_stats "$t" "$log"
    else
      report_finding "$t" "$log"
    fi
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: $(echo $targets | wc -w) targets, no findings"
