// SPDX-License-Identifier: Apache-2.0
// core/bfc/allocation_request.h: one allocation request as the BFC facade's
// slow path and pools see it (core/bfc/bfc_allocator.h): the sizes named, so
// that the caller's bytes and the chunk that serves them never trade places.
#ifndef GPUALLOC_CORE_ALLOCATION_REQUEST_H_
#define GPUALLOC_CORE_ALLOCATION_REQUEST_H_

#include <cstdint>

#include "core/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

struct AllocationRequest {
  std::uint64_t requested = 0;   // the bytes the caller asked for
  std::uint64_t chunk_size = 0;  // the chunk that serves them (ChunkSize)
  std::uint64_t alignment = 0;   // at least the minimum block size
  // The free bytes that hold an aligned chunk_size anywhere: what growth
  // must provide.
  std::uint64_t needed = 0;
  Stream stream;  // as the core sees it (BfcAllocator::Key)
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_ALLOCATION_REQUEST_H_
