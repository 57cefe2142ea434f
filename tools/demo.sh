#!/usr/bin/env bash
# The README's main job: install missing deps, configure and build build/
# (BUILD_DIR overrides), then replay the four bundled PyTorch traces
# (tests/data/traces) on a simulated H100 (80 GB) and MI300X (192 GiB) under
# the main configurations and print the table next to PyTorch's own peak
# reserved memory on the same runs. Build output goes to stderr so the
# table on stdout stays clean.
#
#   tools/demo.sh                       the default comparison
#   tools/demo.sh [gpualloc-replay args...]   anything else gpualloc-replay takes
set -euo pipefail
# shellcheck source=tools/lib-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-build.sh"

{
  ga_install_deps
  ga_setup
  replay_target=tools/gpualloc-replay
  if ninja -C "$GPUALLOC_BUILD_DIR" -t targets all 2>/dev/null | grep -q "^${replay_target}:"; then
    ga_compile "$replay_target"
  else
    echo "demo.sh: the build defines no ${replay_target} target (-Dtools=false?)" >&2
    exit 1
  fi
} >&2

replay="$GPUALLOC_BUILD_DIR/tools/gpualloc-replay"
if [[ ! -x "$replay" ]]; then
  echo "demo.sh: $replay was not built" >&2
  exit 1
fi
if (( $# > 0 )); then
  exec "$replay" "$@"
fi

traces="$GPUALLOC_ROOT/tests/data/traces"
configs=()
for device in h100 mi300x; do
  configs+=(--config "name=${device}-bfc-preallocate,arch=${device}")
  configs+=(--config "name=${device}-bfc-regions,arch=${device},preallocate=false,expandable=false")
  configs+=(--config "name=${device}-bfc-expandable,arch=${device},preallocate=false")
  configs+=(--config "name=${device}-platform,arch=${device},allocator=platform")
  configs+=(--config "name=${device}-async,arch=${device},allocator=async")
done
echo "Replaying the four bundled PyTorch traces on simulated H100 (80 GB) and MI300X (192 GiB);"
echo "PyTorch's own peak reserved on the same runs from tests/data/traces/SOURCES.md."
echo
"$replay" --baseline "$traces/SOURCES.md" "${configs[@]}" \
  "$traces"/torch-*.csv
echo
echo "bfc-preallocate reserves 75% of the device on first use (JAX's default); bfc-regions grows on"
echo "demand by separate device allocations; bfc-expandable grows on demand by mapping one handle per"
echo "growth into one reserved address range (the default where virtual memory works) and unmaps free ones;"
echo "platform asks the device for every block; async uses the device's stream-ordered pool."
echo "The address space over time, for one trace:"
echo "  $replay --svg demo.svg --config arch=h100,preallocate=false,expandable=false --config arch=h100,preallocate=false \\"
echo "    $traces/torch-opt125m-zo-finetune.csv"
