#!/usr/bin/env bash
# Installs a built tree into a staging directory, then compiles and runs a
# consumer against it through pkg-config alone, and builds a Meson project that
# takes gpualloc as a subproject.
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
# shellcheck disable=SC2046  # pkg-config prints several flags
"${CXX:-c++}" -std=c++20 "$root/tools/install-check/consumer.cc" \
  $(pkg-config --cflags --libs gpualloc) -o "$work/consumer"
"$work/consumer"

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
echo "install-check: installed copy and subproject both work"
