#!/usr/bin/env bash
# Installs a built tree into a staging directory, then compiles and runs a
# consumer against it through pkg-config alone (the C++ consumer, and the C
# example examples/embed.c linked shared and static), loads the installed
# PyTorch hook, builds a Meson project that takes gpualloc as a subproject, and
# a CMake project that finds it with find_package (tools/install-check/cmake).
#   tools/install-check/run.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

meson install -C "$build" --destdir "$work/stage" >/dev/null
pc="$(find "$work/stage" -name gpualloc.pc -print -quit)"
[[ -n "$pc" ]] || { echo "install-check: no gpualloc.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$work/stage"
# gpualloc.pc lies in LIBDIR/pkgconfig (pkg-config's --variable answers differ
# between pkg-config and pkgconf under a sysroot).
libdir="$(dirname "$(dirname "$pc")")"
for f in "$libdir/libgpualloc.so" "$libdir/libgpualloc.a" \
  "$libdir/libgpualloc_torch.so"; do
  [[ -e "$f" ]] || { echo "install-check: ${f#"$work/stage"} not installed" >&2; exit 1; }
done
[[ -n "$(find "$work/stage" -path '*/include/gpualloc/gpualloc.h' -print -quit)" ]] ||
  { echo "install-check: gpualloc/gpualloc.h not installed" >&2; exit 1; }
# The staged shared library is not on the loader's path.
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck disable=SC2046  # pkg-config prints several flags
"${CXX:-c++}" -std=c++20 "$root/tools/install-check/consumer.cc" \
  $(pkg-config --cflags --libs gpualloc) -o "$work/consumer"
"$work/consumer"

# The C example, as its comment says to build it (shared library), then
# against the static archive: pkg-config --static adds the C++ runtime.
# shellcheck disable=SC2046
"${CC:-cc}" "$root/examples/embed.c" $(pkg-config --cflags --libs gpualloc) \
  -o "$work/embed"
"$work/embed"
# shellcheck disable=SC2046
"${CC:-cc}" "$root/examples/embed.c" $(pkg-config --cflags gpualloc) \
  $(pkg-config --static --libs gpualloc | sed 's/-lgpualloc\b/-l:libgpualloc.a/') \
  -o "$work/embed-static"
if ldd "$work/embed-static" | grep -q 'libgpualloc\.so'; then
  echo "install-check: embed-static links the shared library" >&2
  exit 1
fi
"$work/embed-static" >/dev/null

# The installed PyTorch hook, driven by the harness when the tests were built.
if [[ -x "$build/tests/torch_hook_harness" ]]; then
  # Its error-path checks print the hook's one-time message: shown on failure.
  out="$("$build/tests/torch_hook_harness" "$libdir/libgpualloc_torch.so" \
    "$root/tests/data/traces/torch-cs336-medium_1024_inference.csv" 2>&1)" ||
    { echo "$out" >&2; exit 1; }
fi

# As a Meson subproject: dependency('gpualloc') resolved by override_dependency.
mkdir -p "$work/sub/subprojects"
ln -s "$root" "$work/sub/subprojects/gpualloc"
cp "$root/tools/install-check/consumer.cc" "$work/sub/"
cat >"$work/sub/meson.build" <<'MESON'
project('gpualloc-subproject-check', 'cpp', default_options: ['cpp_std=c++20'])
gpualloc = dependency('gpualloc', fallback: ['gpualloc', 'gpualloc_dep'],
  default_options: ['tests=disabled', 'tools=false'])
executable('consumer', 'consumer.cc', dependencies: gpualloc)
MESON
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
meson setup "$work/sub/build" "$work/sub" >/dev/null
ninja -C "$work/sub/build" >/dev/null
"$work/sub/build/consumer"

# As a CMake package: find_package(gpualloc) in the staged prefix gives the
# C++ consumer the shared library and the C example the static archive.
prefix="$(meson introspect "$build" --buildoptions | python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')"
for f in gpuallocConfig.cmake gpuallocConfigVersion.cmake; do
  [[ -n "$(find "$work/stage" -path "*/cmake/gpualloc/$f" -print -quit)" ]] ||
    { echo "install-check: $f not installed" >&2; exit 1; }
done
out="$(cmake -G Ninja -S "$root/tools/install-check/cmake" -B "$work/cmake" \
  -DCMAKE_PREFIX_PATH="$work/stage$prefix" 2>&1 &&
  cmake --build "$work/cmake" 2>&1)" || { echo "$out" >&2; exit 1; }
[[ "$(ldd "$work/cmake/consumer")" == *libgpualloc.so* ]] ||
  { echo "install-check: the CMake consumer does not link the shared library" >&2; exit 1; }
if [[ "$(ldd "$work/cmake/embed-static")" == *libgpualloc.so* ]]; then
  echo "install-check: the CMake embed-static links the shared library" >&2
  exit 1
fi
"$work/cmake/consumer"
"$work/cmake/embed-static" >/dev/null
echo "install-check: installed copy (C++ consumer, C example shared and static, PyTorch hook), subproject and CMake package all work"
