#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libgpualloc_torch.so exports its gpualloc_torch_* entry points and nothing
# else (bindings/torch/gpualloc_torch.map).
#   tests/bindings/torch_hook_symbols.sh LIBRARY
set -euo pipefail
lib="$1"
nm_tool="${NM:-nm}"
command -v "$nm_tool" >/dev/null || { echo "SKIP: no $nm_tool"; exit 77; }
# Defined dynamic symbols; the version-script node (type A) is not code.
symbols="$("$nm_tool" -D --defined-only "$lib" | awk '$2 != "A" {print $3}')"
exported="$(grep -c '^gpualloc_torch_' <<<"$symbols" || true)"
leaked="$(grep -v '^gpualloc_torch_' <<<"$symbols" || true)"
if [[ -n "$leaked" ]]; then
  echo "$lib exports symbols besides gpualloc_torch_*:" >&2
  echo "$leaked" | head -n 20 >&2
  exit 1
fi
for want in malloc free init reset memory_fraction record_stream \
  begin_allocate_to_pool end_allocate_to_pool release_pool \
  begin_allocate_stream_to_pool end_allocate_stream_to_pool configure \
  try_malloc empty_cache try_record_stream release_stream last_error \
  get_stats reset_peak_stats device_count set_oom_handler set_tag sleep wake \
  snapshot_json string_free snapshot_pickle set_context host_alloc host_free \
  host_record_stream host_trim host_get_stats; do
  grep -qx "gpualloc_torch_$want" <<<"$symbols" ||
    { echo "$lib: gpualloc_torch_$want is not exported" >&2; exit 1; }
done
echo "$lib: $exported symbols exported, all gpualloc_torch_*"
