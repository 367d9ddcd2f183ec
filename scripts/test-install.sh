#!/usr/bin/env bash
# Tests the installed package as a user sees it: `cmake --install` into a temporary prefix,
# then the programs of examples-c/ built OUT OF TREE against it and run
#   1. with find_package(deltacells CONFIG) and deltacells::deltacells (shared),
#   2. with find_package(deltacells CONFIG) and deltacells::deltacells_static,
#   3. with `pkg-config --cflags --libs deltacells` (shared),
#   4. with `pkg-config --static` (static),
#   5. the C++ wrapper deltacells.hpp from the prefix, with pkg-config,
#   6. the C++ example examples-cpp/trace_distances (typed Arrow access through
#      deltacells.hpp) with find_package, shared and static, checked on a ChromData store
#      against the pandas answer of tests/chromdata/make_stores.py, and again built with
#      pkg-config (shared and static),
# runs each program, and checks that the statically linked ones need no libdeltacells at
# run time (ldd lists only system libraries). Uses the build directory `build` of
# scripts/test.sh (configured and built here if needed; cargo does nothing when current).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/deltacells-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== install: cmake --install build --prefix $prefix"
cmake --install build --prefix "$prefix" >/dev/null
for f in lib/libdeltacells.a include/deltacells.h include/deltacells.hpp \
         lib/cmake/deltacells/deltacellsConfig.cmake \
         lib/cmake/deltacells/deltacellsConfigVersion.cmake lib/pkgconfig/deltacells.pc; do
  [ -f "$prefix/$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
soname=$(objdump -p "$prefix/lib/libdeltacells.so.1" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = libdeltacells.so.1 ] || { echo "SONAME is '$soname'" >&2; exit 1; }
[ "$(readlink "$prefix/lib/libdeltacells.so")" = libdeltacells.so.1 ] &&
  [ -f "$(readlink -f "$prefix/lib/libdeltacells.so.1")" ] ||
  { echo "bad libdeltacells.so symlinks" >&2; ls -l "$prefix/lib" >&2; exit 1; }

# Only system libraries: no libdeltacells, nothing "not found".
check_static() {
  local exe=$1 deps
  deps=$(ldd "$exe")
  if grep -E 'deltacells|not found' <<<"$deps"; then
    echo "$exe: statically linked, yet needs the above at run time" >&2
    exit 1
  fi
  echo "   ldd $(basename "$exe"): $(awk '{print $1}' <<<"$deps" | tr '\n' ' ')"
}

# Runs the examples built in $1: tile_roundtrip, then dataset_write + dataset_gather (the
# program of docs/c-api.md), whose output is checked against what dataset_write wrote.
run_examples() {
  local dir=$1
  "$dir/tile_roundtrip" >/dev/null
  rm -rf "$dir/example.dcds"
  "$dir/dataset_write" "$dir/example.dcds" >/dev/null
  local out
  out=$("$dir/dataset_gather" "$dir/example.dcds")
  [ "$out" = $'cell 0: 3 nonzeros\ncell 4: 4 nonzeros\ncell 0: 3 nonzeros' ] ||
    { echo "dataset_gather printed: $out" >&2; exit 1; }
  echo "   ran tile_roundtrip, dataset_write, dataset_gather: OK"
}

# The examples are copied away from the source tree so nothing in-tree can leak in.
cp -r examples-c "$work/examples-c"

n=0
for target in deltacells::deltacells deltacells::deltacells_static; do
  n=$((n + 1))
  echo "== find_package(deltacells CONFIG), $target"
  cmake -S "$work/examples-c/standalone" -B "$work/cmake-$n" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DDELTACELLS_TARGET="$target" >"$work/cmake-$n.log" ||
    { cat "$work/cmake-$n.log"; exit 1; }
  cmake --build "$work/cmake-$n" -j2 >/dev/null
  run_examples "$work/cmake-$n"
  for exe in tile_roundtrip dataset_write dataset_gather; do
    if [ "$target" = deltacells::deltacells_static ]; then
      check_static "$work/cmake-$n/$exe"
    else
      # (ldd's output is captured first: with pipefail, `ldd | grep -q` fails when grep
      # exits at the first match and ldd gets SIGPIPE)
      deps=$(ldd "$work/cmake-$n/$exe")
      grep -q "libdeltacells.so.1 => $prefix/lib/" <<<"$deps" ||
        { echo "$exe does not use $prefix/lib/libdeltacells.so.1:" >&2; echo "$deps" >&2; exit 1; }
    fi
  done
done
# A version the package must refuse (SameMajorVersion).
mkdir -p "$work/major"
cat >"$work/major/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(major LANGUAGES C)
find_package(deltacells 1 CONFIG QUIET)
if(deltacells_FOUND)
  message(FATAL_ERROR "deltacells 0.x accepted a request for major version 1")
endif()
CM
cmake -S "$work/major" -B "$work/major/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
echo "== deltacellsConfigVersion.cmake refuses another major version: OK"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cc=${CC:-cc}
echo "== pkg-config --cflags --libs deltacells (shared): $(pkg-config --cflags --libs deltacells)"
mkdir -p "$work/pc_shared" "$work/pc_static"
for exe in tile_roundtrip dataset_write dataset_gather; do
  # shellcheck disable=SC2046
  $cc -std=c11 "examples-c/$exe.c" -o "$work/pc_shared/$exe" $(pkg-config --cflags --libs deltacells) \
      -Wl,-rpath,"$(pkg-config --variable=libdir deltacells)"
done
run_examples "$work/pc_shared"

static_libs=$(pkg-config --static --libs deltacells)
static_libs=${static_libs/-ldeltacells/-Wl,-Bstatic -ldeltacells -Wl,-Bdynamic}
echo "== pkg-config --static (static): $static_libs"
for exe in tile_roundtrip dataset_write dataset_gather; do
  # shellcheck disable=SC2046,SC2086
  $cc -std=c11 "examples-c/$exe.c" -o "$work/pc_static/$exe" $(pkg-config --cflags deltacells) $static_libs
  check_static "$work/pc_static/$exe"
done
run_examples "$work/pc_static"

echo "== C++17 wrapper from the prefix (deltacells.hpp), static, pkg-config"
cat >"$work/hello.cpp" <<'CPP'
#include <deltacells.hpp>
#include <cstdio>
int main() {
  deltacells::Csr m{{0, 1}, {3}, {2}};
  auto back = deltacells::tile_decode(deltacells::tile_encode(m, 5));
  try {
    deltacells::Dataset ds("/nonexistent/deltacells");
  } catch (const deltacells::error &e) {
    std::printf("%s %s\n", deltacells::version().c_str(), e.status_name());
    return back.values == m.values && e.status() == DC_ERR_NOT_FOUND ? 0 : 1;
  }
  return 1;
}
CPP
# shellcheck disable=SC2046,SC2086
${CXX:-c++} -std=c++17 -Wall -Wextra -Werror "$work/hello.cpp" -o "$work/hello" \
    $(pkg-config --cflags deltacells) $static_libs
"$work/hello" >/dev/null
check_static "$work/hello"

echo "== C++ example examples-cpp/trace_distances, find_package, on a ChromData store"
python3 tests/chromdata/make_stores.py "$work/stores" >/dev/null
python3 tests/chromdata/expected_csv.py "$work/stores" "$work/stores/csv"
cp -r examples-cpp "$work/examples-cpp"
for target in deltacells::deltacells deltacells::deltacells_static; do
  n=$((n + 1))
  cmake -S "$work/examples-cpp/standalone" -B "$work/cmake-$n" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DDELTACELLS_TARGET="$target" >"$work/cmake-$n.log" ||
    { cat "$work/cmake-$n.log"; exit 1; }
  cmake --build "$work/cmake-$n" -j2 >/dev/null
  echo "   $target: $(python3 examples-cpp/check_trace_distances.py "$work/cmake-$n/trace_distances" \
        "$work/stores/main_22.cdz" chr2 "$work/stores/csv/chrom_chr2_coords.csv")"
  if [ "$target" = deltacells::deltacells_static ]; then
    check_static "$work/cmake-$n/trace_distances"
  fi
done
echo "== C++ example examples-cpp/trace_distances, pkg-config, shared and static"
# shellcheck disable=SC2046
${CXX:-c++} -std=c++17 -Wall -Wextra -Werror examples-cpp/trace_distances.cpp \
    -o "$work/pc_shared/trace_distances" $(pkg-config --cflags --libs deltacells) \
    -Wl,-rpath,"$(pkg-config --variable=libdir deltacells)"
# shellcheck disable=SC2046,SC2086
${CXX:-c++} -std=c++17 -Wall -Wextra -Werror examples-cpp/trace_distances.cpp \
    -o "$work/pc_static/trace_distances" $(pkg-config --cflags deltacells) $static_libs
for kind in shared static; do
  echo "   $kind: $(python3 examples-cpp/check_trace_distances.py "$work/pc_$kind/trace_distances" \
        "$work/stores/main_22.cdz" chr2 "$work/stores/csv/chrom_chr2_coords.csv")"
done
check_static "$work/pc_static/trace_distances"
echo "install tests passed"
