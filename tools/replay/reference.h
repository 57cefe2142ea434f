// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference.h: other allocators' policies, modeled for
// comparison: PyTorch's CUDACachingAllocator, TensorFlow's BFC allocator and
// the driver's stream-ordered pool (cudaMallocAsync). Each is written from
// its project's source and documented behaviour (the rules each implements
// and leaves out: docs/REFERENCE.md, "Reference models"), and is an
// Allocator on a backend (the simulator in gpualloc-replay) so that the
// replay counts its calls, waits and modeled costs as it counts gpualloc's.
// They are models for comparison, not allocator modes: they share no code
// with the library's core (they use the public headers only), so that they
// cannot agree with gpualloc by construction.
#ifndef GPUALLOC_TOOLS_REPLAY_REFERENCE_H_
#define GPUALLOC_TOOLS_REPLAY_REFERENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/layer.h"

namespace gpualloc::replay {

// PyTorch's settings (PYTORCH_CUDA_ALLOC_CONF) the model honours; the
// defaults are PyTorch's.
struct PyTorchModelOptions {
  // max_split_size_mb, in bytes; UINT64_MAX: unlimited (the default).
  std::uint64_t max_split_size = UINT64_MAX;
  // roundup_power2_divisions (one value for every size); 0: off.
  std::uint32_t roundup_power2_divisions = 0;
  // set_per_process_memory_fraction, in bytes; 0: none (the device's
  // capacity bounds it).
  std::uint64_t memory_limit = 0;
  // expandable_segments:True: per stream and pool, one range of address
  // space mapped in pages (2 MiB small, 20 MiB large) as it grows, unmapped
  // only by empty_cache and the last out-of-memory stage. Needs a backend
  // with virtual memory.
  bool expandable_segments = false;
  // garbage_collection_threshold, in (0, 1); acts only with memory_limit
  // (PyTorch: only under set_per_process_memory_fraction). 0: off.
  double garbage_collection_threshold = 0;
};

// TensorFlow's GPU BFC allocator options the model honours (TF's defaults,
// but allow_growth on: without it TF reserves the whole limit at once).
struct TfModelOptions {
  bool allow_growth = true;
  // GPUOptions' per-process limit in bytes; 0: the device's capacity.
  std::uint64_t memory_limit = 0;
  // TF_ENABLE_GPU_GARBAGE_COLLECTION (default true): give back free regions
  // before reporting out of memory.
  bool garbage_collection = true;
  // BFCAllocator::Options::fragmentation_fraction; 0: 128 MiB bound.
  double fragmentation_fraction = 0;
};

// The driver's stream-ordered pool as PyTorch's backend:cudaMallocAsync
// configures it (release threshold UINT64_MAX, every reuse rule on).
struct AsyncModelOptions {
  std::uint64_t release_threshold = UINT64_MAX;
  PoolReuse reuse;
  // set_per_process_memory_fraction, in bytes; 0: none. As PyTorch's
  // cudaMallocAsync backend applies it: an allocation that would bring the
  // bytes allocated (live requests, not the pool's reserve) above it is out
  // of memory at once, without a pool call.
  std::uint64_t memory_limit = 0;
};

absl::StatusOr<std::unique_ptr<Allocator>> CreatePyTorchModel(
    const PyTorchModelOptions& options, std::shared_ptr<Backend> backend);
absl::StatusOr<std::unique_ptr<Allocator>> CreateTfModel(
    const TfModelOptions& options, std::shared_ptr<Backend> backend);
absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncModel(
    const AsyncModelOptions& options, std::shared_ptr<Backend> backend);

// The names gpualloc-replay --reference takes: "pytorch",
// "pytorch-expandable" (expandable_segments:True), "tf", "async".
const std::vector<std::string>& ReferenceNames();
// The model `name` names, with its defaults but for the memory limit:
// `memory_limit` bytes (0: none, the device's capacity bounds it), which
// each model applies by its own project's rule (the options' memory_limit
// above). An unknown name is InvalidArgument listing the known ones.
absl::StatusOr<std::unique_ptr<Allocator>> CreateReference(
    absl::string_view name, std::shared_ptr<Backend> backend,
    std::uint64_t memory_limit = 0);
absl::Status CheckReferenceName(absl::string_view name);
// "pytorch,tf" split and checked (empty parts refused).
absl::StatusOr<std::vector<std::string>> ParseReferenceList(
    absl::string_view list);
// The row label of a model in the tools' tables: "pytorch model", ...
std::string ReferenceLabel(absl::string_view name);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_REFERENCE_H_
