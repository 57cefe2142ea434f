#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/device-check.sh: the checks that need an NVIDIA GPU, in one run that
# fits in 5 minutes on one H200.
#
#   tools/device-check.sh [OUT.md]     (default OUT: device-check.md)
#   tools/device-check.sh --probe      only say whether a GPU is here
#
# 1. Looks for a GPU (nvidia-smi, else libcuda.so.1 plus /dev/nvidia0). Without
#    one it says so, writes that to OUT and exits 0.
# 2. Builds the project with the CUDA backend (tools/lib-build.sh; build-device/
#    unless BUILD_DIR says otherwise), finding cuda.h in $CUDA_PATH,
#    /usr/local/cuda*, /opt/cuda or a pip "nvidia" package.
# 3. Runs the CUDA tests (cuda_backend, cuda_conformance with its real-device
#    instance, registry).
# 4. Runs gpualloc-device-bench: cuMemAlloc/cuMemFree vs gpualloc BFC vs the
#    async pool vs virtual-memory map/unmap for 256 B .. 1 GiB (median host us),
#    granularity and alignment observed, usable device memory; and each call
#    on its own (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap,
#    cuMemRelease, cuMemAlloc, cuMemFree) at 2 MiB, 20 MiB and 1 GiB, median
#    host us next to the simulator's cost model for the device's profile; and
#    Sleep / Wake of 1 GiB of tagged memory (each call's host time, the free
#    device memory before and after the sleep, the content after a wake from
#    a host backup).
# 5. Runs gpualloc-ipc-host-check: a mapping exported as a file descriptor in
#    one process and imported and read back in another (ExportMapping /
#    ImportPhysical), the same with an IPC handle of a plain allocation, and
#    HostAllocate / HostFree of 1 MiB .. 64 MiB against malloc / free (median
#    host us per call).
# 6. Runs gpualloc-counter-check: how the allocator can learn that a stream's
#    work completed, each mechanism's host cost per call (median host us of
#    2001: cuEventRecord, cuEventQuery of a complete and a not-complete event,
#    cuStreamWaitEvent, cuStreamWriteValue64, a counter load,
#    cuStreamWaitValue64, cuStreamQuery idle and busy, and the backend's
#    RecordEvent, QueryEvent, WriteCounter, WaitCounter) next to the
#    simulator's cost model, and that a completion counter written after a
#    memset is seen only after it, and a stream waiting for a counter runs
#    only once it is written.
# 7. When PyTorch with CUDA is installed, trains a small transformer
#    (tools/torch_train_check.py) with PyTorch's allocator and, when the build
#    made libgpualloc_torch.so, with gpualloc through the pluggable-allocator
#    hook, and compares peak memory.
# The report (Markdown) goes to OUT and stdout; progress goes to stderr.
#
# Env: DEVICE_CHECK_BUDGET_S (default 285: the whole run), BUILD_DIR, NINJA_JOBS,
# GPUALLOC_SKIP_DEPS=1 (do not try to install packages), CUDA_PATH,
# GPUALLOC_DEVICE_CHECK_PREBUILT=1 (use the programs already in BUILD_DIR,
# built on another machine with -Dcuda=enabled: nothing is compiled here),
# GPUALLOC_DEVICE_CHECK_ASSUME_GPU=1 (run every step even without a GPU: for
# testing this script).
# Exit status: 0 when every step that ran passed (or there is no GPU), 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$SECONDS
budget="${DEVICE_CHECK_BUDGET_S:-285}"
left() { echo $((budget - (SECONDS - start))); }
say() { echo "device-check: $*" >&2; }

# --- 1. Is there a GPU? -------------------------------------------------------
gpu_reason=""
find_libcuda() {
  local p
  if command -v ldconfig >/dev/null 2>&1; then
    p=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
    [[ -n "$p" ]] && { echo "$p"; return 0; }
  fi
  for p in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
           /usr/lib/aarch64-linux-gnu/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 \
           /usr/lib/wsl/lib/libcuda.so.1; do
    [[ -e "$p" ]] && { echo "$p"; return 0; }
  done
  return 1
}
have_gpu() {
  local libcuda
  # For testing this script on a machine without a GPU: go through every step
  # (the device tests then skip and the benchmark reports no device).
  if [[ "${GPUALLOC_DEVICE_CHECK_ASSUME_GPU:-0}" == 1 ]]; then
    gpu_reason="GPUALLOC_DEVICE_CHECK_ASSUME_GPU=1 (no GPU was looked for)"
    return 0
  fi
  if ! libcuda=$(find_libcuda); then
    gpu_reason="no libcuda.so.1 (the NVIDIA driver's library) on this machine"
    return 1
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    local list
    list=$(timeout 20 nvidia-smi -L 2>&1) || true
    if grep -q '^GPU 0' <<<"$list"; then
      gpu_reason="$(head -n 1 <<<"$list")"
      return 0
    fi
    gpu_reason="nvidia-smi lists no GPU: $(head -n 1 <<<"$list")"
    return 1
  fi
  if [[ -e /dev/nvidia0 ]]; then
    gpu_reason="$libcuda and /dev/nvidia0"
    return 0
  fi
  gpu_reason="$libcuda is installed but there is no /dev/nvidia0"
  return 1
}

if [[ "${1:-}" == "--probe" ]]; then
  if have_gpu; then echo "gpu: $gpu_reason"; else echo "no NVIDIA GPU: $gpu_reason"; fi
  exit 0
fi
if [[ "${1:-}" == -* ]]; then
  echo "usage: tools/device-check.sh [OUT.md] | --probe" >&2
  exit 2
fi
out="${1:-device-check.md}"
[[ "$out" == /* ]] || out="$PWD/$out"

if ! have_gpu; then
  msg="no NVIDIA GPU here ($gpu_reason): nothing to check."
  echo "$msg"
  printf '# gpualloc device check\n\n%s\n' "$msg" >"$out"
  exit 0
fi
say "GPU: $gpu_reason"

report=""
add() { report+="$*"$'\n'; }
failed=0
fail() { failed=1; add "- FAILED: $*"; say "FAILED: $*"; }
finish() {
  add ""
  add "Total time: $((SECONDS - start)) s of a ${budget} s budget."
  printf '%s' "$report" | tee "$out"
  exit "$failed"
}
add "# gpualloc device check"
add ""
add "- machine: $gpu_reason; $(nproc) CPUs; $(uname -r)"
add "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# --- 2. Build --------------------------------------------------------------------
find_cuda_path() {
  local d
  for d in "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
    [[ -n "$d" && -f "$d/include/cuda.h" ]] && { echo "$d"; return 0; }
  done
  # A pip-installed toolkit (nvidia-cuda-runtime / nvidia-cuda-nvcc wheels).
  if command -v python3 >/dev/null 2>&1; then
    d=$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for h in glob.glob(os.path.join(r, "nvidia", "*", "include", "cuda.h")):
        print(os.path.dirname(os.path.dirname(h))); sys.exit(0)
PY
)
    [[ -n "$d" ]] && { echo "$d"; return 0; }
  fi
  return 1
}
if ! cuda_path=$(find_cuda_path); then
  fail "no CUDA toolkit headers (cuda.h) in \$CUDA_PATH, /usr/local/cuda*, /opt/cuda or a pip nvidia package: the CUDA backend cannot be built"
  finish
fi
export CUDA_PATH="$cuda_path"
add "- cuda.h from: $CUDA_PATH/include"

# shellcheck source=tools/lib-build.sh
source "$root/tools/lib-build.sh"
export BUILD_DIR="${BUILD_DIR:-build-device}"
export NINJA_JOBS="${NINJA_JOBS:-$(nproc)}"
export MESON_ARGS="-Dcuda=enabled -Dbuildtype=release -Dtools=true"
ga_resolve_build_dir
build_log="$GPUALLOC_BUILD_DIR/device-check.log"
mkdir -p "$GPUALLOC_BUILD_DIR"
: >"$build_log"
say "building in $GPUALLOC_BUILD_DIR (log: $build_log)"
if [[ "${GPUALLOC_DEVICE_CHECK_PREBUILT:-0}" == 1 ]]; then
  # Built elsewhere (a machine with the build's packages) and copied here with
  # the shared libraries it needs (LD_LIBRARY_PATH): nothing is set up or
  # compiled, and the programs must be in the build directory already.
  torch_target=""
  [[ -f "$GPUALLOC_BUILD_DIR/bindings/torch/libgpualloc_torch.so" ]] &&
    torch_target="bindings/torch/libgpualloc_torch.so"
  if [[ ! -x "$GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-device-bench" ]]; then
    fail "GPUALLOC_DEVICE_CHECK_PREBUILT=1, but $GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-device-bench is missing"
    finish
  fi
  missing=$(ldd "$GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-device-bench" 2>&1 | grep 'not found' || true)
  if [[ -n "$missing" ]]; then
    fail "the prebuilt programs lack shared libraries (set LD_LIBRARY_PATH): $missing"
    finish
  fi
  add "- build: prebuilt in $GPUALLOC_BUILD_DIR (GPUALLOC_DEVICE_CHECK_PREBUILT=1)"
else
  if [[ "${GPUALLOC_SKIP_DEPS:-0}" != 1 ]]; then
    # Missing packages are installed when possible; a machine that cannot reach
    # a mirror goes on with what it has.
    timeout 120 "$root/tools/install-deps.sh" >>"$build_log" 2>&1 ||
      say "install-deps.sh did not finish; going on with what is installed"
  fi
  if ! timeout "$(left)" bash -c "source '$root/tools/lib-build.sh'; ga_setup" >>"$build_log" 2>&1; then
    fail "meson setup (see $build_log)"
    finish
  fi
  targets=(tools/cuda/gpualloc-device-bench tools/cuda/gpualloc-ipc-host-check
           tools/cuda/gpualloc-counter-check)
  all_targets=$(ninja -C "$GPUALLOC_BUILD_DIR" -t targets all 2>/dev/null | cut -d: -f1)
  for t in tests/cuda_backend_test tests/cuda_conformance_test tests/registry_test; do
    grep -qx "$t" <<<"$all_targets" && targets+=("$t")
  done
  # The stand-in libcuda modules cuda_backend_test dlopens.
  while read -r t; do
    [[ -n "$t" ]] && targets+=("$t")
  done < <(grep -E '(^|/)libcuda_fake_libcuda_v[0-9]+\.so$' <<<"$all_targets")
  torch_target=$(grep -E '(^|/)libgpualloc_torch\.so$' <<<"$all_targets" | head -n 1)
  [[ -n "$torch_target" ]] && targets+=("$torch_target")
  build_start=$SECONDS
  if ! timeout "$(left)" ninja -C "$GPUALLOC_BUILD_DIR" -j "$NINJA_JOBS" "${targets[@]}" >>"$build_log" 2>&1; then
    fail "build of ${targets[*]} (see $build_log)"
    finish
  fi
  add "- build: ${#targets[@]} targets in $((SECONDS - build_start)) s"
fi

# --- 3. Tests --------------------------------------------------------------------
add ""
add "## Tests"
add ""
run_gtest() {  # name binary [gtest args...]
  local name="$1" bin="$2"
  shift 2
  if [[ ! -x "$bin" ]]; then
    add "- $name: not built (no GoogleTest?)"
    return
  fi
  local log rc=0
  log=$(timeout "$(( $(left) > 120 ? 120 : $(left) ))" "$bin" "$@" 2>&1) || rc=$?
  local passed skipped failed_n
  passed=$(grep -c '^\[       OK \]' <<<"$log")
  skipped=$(grep -c '^\[  SKIPPED \] .* ms)$' <<<"$log")
  failed_n=$(grep -c '^\[  FAILED  \] .* ms)$' <<<"$log")
  add "- $name: $passed passed, $failed_n failed, $skipped skipped (exit $rc)"
  if (( rc != 0 )); then
    fail "$name"
    add '```'
    add "$(grep -E -A10 ': Failure$|^\[  FAILED  \] .* ms\)$' <<<"$log" | head -n 60)"
    add '```'
  fi
  if (( skipped > 0 )); then
    add "  first skip: $(grep -m1 -A1 ': Skipped$' <<<"$log" | tail -n 1 | cut -c1-300)"
  fi
}
b="$GPUALLOC_BUILD_DIR/tests"
run_gtest "cuda_conformance (real device)" "$b/cuda_conformance_test" --gtest_filter='CudaDevice/*'
run_gtest "cuda_conformance (fake driver)" "$b/cuda_conformance_test" --gtest_filter='CudaFakeDriver/*'
run_gtest "cuda_backend" "$b/cuda_backend_test"
run_gtest "registry" "$b/registry_test"

# --- 4. Benchmark ----------------------------------------------------------------
add ""
add "## Allocation costs and memory"
add ""
bench_out="$GPUALLOC_BUILD_DIR/device-bench.md"
bench_budget=$(( $(left) - 90 ))
(( bench_budget > 150 )) && bench_budget=150
if (( bench_budget < 20 )); then
  fail "no time left for the benchmark"
else
  say "benchmark (up to ${bench_budget} s)"
  rc=0
  timeout "$bench_budget" "$GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-device-bench" \
    --out "$bench_out" >/dev/null 2>"$bench_out.err" || rc=$?
  if [[ -s "$bench_out" ]]; then
    add "$(tail -n +3 "$bench_out")"
  fi
  if (( rc != 0 )); then
    fail "gpualloc-device-bench exit $rc: $(head -c 600 "$bench_out.err")"
  fi
fi

# --- 5. Sharing between processes and host memory --------------------------------
add ""
share_bin="$GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-ipc-host-check"
share_budget=$(( $(left) - 60 ))
(( share_budget > 60 )) && share_budget=60
if [[ ! -x "$share_bin" ]]; then
  add "- gpualloc-ipc-host-check not built: skipped"
elif (( share_budget < 10 )); then
  fail "no time left for gpualloc-ipc-host-check"
else
  say "sharing and host memory (up to ${share_budget} s)"
  rc=0
  share_out=$(timeout "$share_budget" "$share_bin" 2>"$GPUALLOC_BUILD_DIR/ipc-host-check.err") || rc=$?
  add "$share_out"
  if (( rc != 0 )); then
    fail "gpualloc-ipc-host-check exit $rc: $(head -c 600 "$GPUALLOC_BUILD_DIR/ipc-host-check.err")"
  fi
fi

# --- 6. Completion counters against events ---------------------------------------
add ""
counter_bin="$GPUALLOC_BUILD_DIR/tools/cuda/gpualloc-counter-check"
counter_budget=$(( $(left) - 45 ))
(( counter_budget > 45 )) && counter_budget=45
if [[ ! -x "$counter_bin" ]]; then
  add "- gpualloc-counter-check not built: skipped"
elif (( counter_budget < 10 )); then
  fail "no time left for gpualloc-counter-check"
else
  say "completion counters (up to ${counter_budget} s)"
  rc=0
  counter_out=$(timeout "$counter_budget" "$counter_bin" 2>"$GPUALLOC_BUILD_DIR/counter-check.err") || rc=$?
  add "$counter_out"
  if (( rc != 0 )); then
    fail "gpualloc-counter-check exit $rc: $(head -c 600 "$GPUALLOC_BUILD_DIR/counter-check.err")"
  fi
fi

# --- 7. PyTorch ------------------------------------------------------------------
add ""
add "## PyTorch training (small transformer; memory fraction 0.9, record_stream on a side stream, a CUDA graph, empty_cache)"
add ""
if ! timeout 60 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  add "- PyTorch with CUDA is not installed here: skipped"
  finish
fi
train() {  # allocator [hook]
  local t=$(( $(left) - 5 ))
  (( t > 90 )) && t=90
  (( t < 15 )) && { echo '{"error": "no time left"}'; return 1; }
  local args=(--allocator "$1")
  [[ -n "${2:-}" ]] && args+=(--hook "$2")
  timeout "$t" python3 "$root/tools/torch_train_check.py" "${args[@]}" 2>"$GPUALLOC_BUILD_DIR/torch-$1.err" | tail -n 1
}
gib() { python3 -c "import sys; v=sys.argv[1]; print('n/a' if v in ('', 'None', 'null') else '%.3f GiB' % (int(v) / 2**30))" "$1"; }
field() { python3 -c "import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2]))" "$1" "$2" 2>/dev/null; }
native=$(train native)
if [[ "$(field "$native" peak_device_bytes)" == "" ]]; then
  fail "PyTorch training with its own allocator: $(tail -c 600 "$GPUALLOC_BUILD_DIR/torch-native.err")"
  finish
fi
row() {  # label json
  add "| $1 | $(gib "$(field "$2" peak_device_bytes)") | $(gib "$(field "$2" max_memory_reserved)") | $(gib "$(field "$2" reserved_after_empty_cache)") | $(field "$2" graph_ok) | $(field "$2" loss_first) -> $(field "$2" loss_last) | $(field "$2" seconds) |"
}
add "| allocator | peak device memory in use | peak reserved (its own statistic) | reserved after empty_cache | CUDA graph replays match | loss first -> last | seconds |"
add "|---|---:|---:|---:|---|---|---:|"
row "PyTorch caching allocator" "$native"
hook=""
[[ -n "$torch_target" ]] && hook="$GPUALLOC_BUILD_DIR/$torch_target"
if [[ -z "$hook" || ! -f "$hook" ]]; then
  add ""
  add "- torch hook not built: skipped"
else
  ours=$(train gpualloc "$hook")
  if [[ "$(field "$ours" peak_device_bytes)" == "" ]]; then
    fail "PyTorch training with gpualloc: $(tail -c 600 "$GPUALLOC_BUILD_DIR/torch-gpualloc.err")"
  else
    row "gpualloc (gpualloc.torch.enable())" "$ours"
  fi
fi
add ""
add "Peak device memory in use is cudaMemGetInfo's total - free above the level before the model was made, sampled after each forward, backward and optimizer step. Peak reserved is torch.cuda.max_memory_reserved() for PyTorch's allocator and gpualloc.torch.max_memory_reserved() for gpualloc (torch raises on its own statistics with a pluggable allocator)."
finish
