# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Shared by tools/test.sh, tools/demo.sh and .ci/run: source it, don't run it.
#
# Env:
#   BUILD_DIR   build directory (default: build), relative paths are relative to
#               the repository root
#   MESON_ARGS  extra `meson setup` arguments, split on whitespace,
#               e.g. "-Db_sanitize=address,undefined -Dbuildtype=debug"
#   NINJA_JOBS  ninja -j value (default: ninja's own choice)
#   GPUALLOC_SKIP_DEPS=1  don't run tools/install-deps.sh
#
# Note: options given to an existing build dir persist across --reconfigure
# (dropping a flag from MESON_ARGS does not reset it), and the compiler (CXX)
# is fixed when a build dir is first set up; delete the dir to start over.

GPUALLOC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Sets GPUALLOC_BUILD_DIR (absolute) from BUILD_DIR.
ga_resolve_build_dir() {
  local dir="${BUILD_DIR:-build}"
  [[ "$dir" == /* ]] || dir="$GPUALLOC_ROOT/$dir"
  GPUALLOC_BUILD_DIR="$dir"
}

ga_install_deps() {
  "$GPUALLOC_ROOT/tools/install-deps.sh"
}

# meson setup (or --reconfigure when the dir is already a meson build dir).
ga_setup() {
  ga_resolve_build_dir
  local -a extra=()
  if [[ -n "${MESON_ARGS:-}" ]]; then
    read -r -a extra <<<"$MESON_ARGS"
  fi
  if [[ -f "$GPUALLOC_BUILD_DIR/meson-private/coredata.dat" ]]; then
    meson setup --reconfigure "${extra[@]}" "$GPUALLOC_BUILD_DIR" "$GPUALLOC_ROOT"
  else
    meson setup "${extra[@]}" "$GPUALLOC_BUILD_DIR" "$GPUALLOC_ROOT"
  fi
}

# ninja [targets...] in the build dir.
ga_compile() {
  ga_resolve_build_dir
  local -a jobs=()
  [[ -z "${NINJA_JOBS:-}" ]] || jobs=(-j "$NINJA_JOBS")
  ninja -C "$GPUALLOC_BUILD_DIR" "${jobs[@]}" "$@"
}
