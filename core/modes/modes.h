// SPDX-License-Identifier: Apache-2.0
// core/modes/modes.h: the allocator modes other than BFC (docs/DESIGN.md,
// "Allocator modes"), created
// by CreateAllocator according to Options::mode.
//
//   platform: each Allocate is one backend Allocate and each Deallocate one
//     backend Free, at once; the limit still applies.
//   async: the backend's stream-ordered pool, configured with release
//     threshold = the limit; fails at creation when the backend lacks
//     capabilities.stream_ordered_pools.
#ifndef GPUALLOC_CORE_MODES_H_
#define GPUALLOC_CORE_MODES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/config/options.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

absl::StatusOr<std::unique_ptr<Allocator>> CreatePlatformAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend);

absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend);

// CreateAllocator with the options resolved already (the host pool sets
// ResolvedOptions::host_pool first).
absl::StatusOr<std::unique_ptr<Allocator>> CreateResolvedAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_MODES_H_
