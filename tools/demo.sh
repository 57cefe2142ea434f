#!/usr/bin/env bash
# The README's main-job command: install missing deps, configure and build
# build/ (BUILD_DIR overrides), then run gpualloc-demo with this script's
# arguments. Build output goes to stderr so the demo's stdout stays clean;
# relative paths in the arguments are resolved from the caller's directory.
#
#   tools/demo.sh [gpualloc-demo args...]
set -euo pipefail
# shellcheck source=tools/lib-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-build.sh"

{
  ga_install_deps
  ga_setup
  demo_target=tools/gpualloc-demo
  if ninja -C "$GPUALLOC_BUILD_DIR" -t targets all 2>/dev/null | grep -q "^${demo_target}:"; then
    ga_compile "$demo_target"
  else
    echo "demo.sh: the build defines no ${demo_target} target (tools/meson.build missing it," \
         "or -Dtools=false)" >&2
    exit 1
  fi
} >&2

demo="$GPUALLOC_BUILD_DIR/tools/gpualloc-demo"
if [[ ! -x "$demo" ]]; then
  echo "demo.sh: $demo was not built" >&2
  exit 1
fi
exec "$demo" "$@"
