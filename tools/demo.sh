#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/demo.sh: the README's main job. Reads the command line only: like
# gpualloc-replay, not the GPUALLOC_* variables (BUILD_DIR and the build
# variables of tools/lib-build.sh aside).
#
#   tools/demo.sh               the simulated H100, bfc-expandable and bfc-regions
#   tools/demo.sh --all         also the MI300X, and the preallocate, platform and
#                               async modes (40 rows, and 30 multi-stream)
#   tools/demo.sh --svg FILE    one trace under both configurations, and its
#                               address space over time drawn into FILE
#   tools/demo.sh --help        this text, then gpualloc-replay's
#   tools/demo.sh [gpualloc-replay args...]   anything else gpualloc-replay takes
#
# Installs missing deps, configures and builds build/ (BUILD_DIR overrides),
# then replays the four bundled PyTorch traces (tests/data/traces) on a
# simulated H100 under the two configurations that compare with PyTorch's
# caching allocator, and prints the table next to PyTorch's own peak reserved
# memory on the same runs, its legend, and the comparison computed from the
# run; then the three generated multi-stream traces (gen-*.csv) under the same
# configurations, each with its no-wait bound and the peak reserved of the
# same replay on one stream (--compare-one-stream). Both tables add the
# model of PyTorch's caching allocator (gpualloc-replay --reference pytorch)
# on the same simulated device, under the same limit: on the recordings it
# checks the model against what PyTorch reserved; on the generated traces,
# which PyTorch never ran, it stands in for PyTorch, and the model of the
# driver's stream-ordered pool (--reference async) joins it; there every row
# shows its stream waits and completion calls (event records and queries)
# per 100 frees. Build output goes to
# stderr so the report on stdout stays clean.
set -euo pipefail
# shellcheck source=tools/lib-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-build.sh"

usage() {
  sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

all=0
svg=""
case "${1:-}" in
  --all)
    all=1
    shift
    ;;
  --svg)
    if (( $# < 2 )); then
      echo "demo.sh: --svg needs a FILE" >&2
      exit 2
    fi
    svg=$2
    shift 2
    ;;
esac
if (( (all == 1 || ${#svg} > 0) && $# > 0 )); then
  echo "demo.sh: --all and --svg FILE take no other arguments" >&2
  exit 2
fi

{
  ga_install_deps
  ga_setup
  replay_target=tools/gpualloc-replay
  # The list is read whole first: under pipefail, grep -q leaving early would
  # fail ninja with SIGPIPE now and then, and the demo with it.
  targets=$(ninja -C "$GPUALLOC_BUILD_DIR" -t targets all 2>/dev/null || true)
  if grep -q "^${replay_target}:" <<<"$targets"; then
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
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  usage
  echo
  exec "$replay" --help
fi
if (( $# > 0 )); then
  exec "$replay" "$@"
fi

traces="$GPUALLOC_ROOT/tests/data/traces"
configs=()
devices=(h100)
if (( all == 1 )); then
  devices=(h100 mi300x)
fi
for device in "${devices[@]}"; do
  prefix=""
  (( all == 1 )) && prefix="${device}-"
  configs+=(--config "name=${prefix}bfc-expandable,arch=${device},preallocate=false")
  configs+=(--config "name=${prefix}bfc-regions,arch=${device},preallocate=false,expandable=false")
  if (( all == 1 )); then
    configs+=(--config "name=${prefix}bfc-preallocate,arch=${device}")
    configs+=(--config "name=${prefix}platform,arch=${device},allocator=platform")
    configs+=(--config "name=${prefix}async,arch=${device},allocator=async")
  fi
done

if (( all == 1 )); then
  echo "gpualloc demo: the four PyTorch traces in tests/data/traces replayed on a simulated H100 (80 GB)"
  echo "and MI300X (192 GiB), next to the peak memory PyTorch's own caching allocator reserved on the"
  echo "same runs (tests/data/traces/SOURCES.md). The configurations, all up to 75% of the device:"
else
  echo "gpualloc demo: the four PyTorch traces in tests/data/traces replayed on a simulated H100 (80 GB),"
  echo "next to the peak memory PyTorch's own caching allocator reserved on the same runs"
  echo "(tests/data/traces/SOURCES.md). Both configurations grow on demand up to 75% of the device:"
fi
echo "  bfc-expandable   best-fit chunks in one reserved address range, growing by mapping device memory"
echo "                   into it and unmapping free pieces (the default where the device has virtual"
echo "                   memory, as both simulated devices do; like PyTorch's expandable_segments:True)"
echo "  bfc-regions      the same, growing by separate device allocations (expandable=false; like"
echo "                   PyTorch's default segments)"
echo "  pytorch model    not gpualloc: a model of PyTorch's caching allocator (its rules: 2 MiB and 20 MiB"
echo "                   segments, pools per stream, ...) replayed on the same device for comparison"
if (( all == 1 )); then
  echo "  bfc-preallocate  reserves 75% of the device on first use (JAX's default)"
  echo "  platform         one device allocation per block: exactly what is live, at a device call per op"
  echo "  async            the device's stream-ordered pool (cudaMallocAsync)"
else
  echo "tools/demo.sh --all adds the MI300X and the preallocate, platform and async modes; tools/demo.sh"
  echo "--svg FILE draws the address space over time of one trace under both configurations."
fi
echo

svg_args=()
trace_files=("$traces"/torch-*.csv)
if [[ -n "$svg" ]]; then
  # One trace: the picture of four would be four times as tall.
  svg_args=(--svg "$svg")
  trace_files=("$traces/torch-opt125m-zo-finetune.csv")
fi
reference_args=(--reference pytorch)
[[ -n "$svg" ]] && reference_args=()
"$replay" --baseline "$traces/SOURCES.md" "${svg_args[@]}" "${configs[@]}" \
  "${reference_args[@]}" "${trace_files[@]}"
if [[ -n "$svg" ]]; then
  echo
  echo "The address space over time of $(basename "${trace_files[0]}" .csv): $svg"
  exit 0
fi

echo
echo "Multi-stream traces (tests/data/traces/gen-*.csv, generated by gpualloc-gen: weight prefetch on"
echo "copy streams, FSDP all-gathers, an inference server on four streams), same configurations. Memory"
echo "freed on one stream is reusable on another only once that stream's work is done: no-wait bound is"
echo "what an allocator that never makes a stream or the host wait must hold; one-stream peak is the"
echo "same replay with every stream mapped to stream 0 (peak reserved minus it: what the streams cost)."
echo "PyTorch never ran these: the pytorch model row is what its caching allocator's rules need here;"
echo "the async model row is the driver's stream-ordered pool (cudaMallocAsync, as PyTorch's"
echo "backend:cudaMallocAsync uses it), which makes a stream wait for another's free rather than grow."
echo "waits/100 frees and completion/100 frees: what each row pays to reuse memory across streams, in"
echo "stream waits and in calls made to learn completion (event records and queries), per 100 frees."
echo
"$replay" --compare-one-stream "${configs[@]}" --reference pytorch,async \
  "$traces"/gen-*.csv
