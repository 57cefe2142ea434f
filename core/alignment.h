// SPDX-License-Identifier: Apache-2.0
// core/alignment.h: the check every mode makes of a requested alignment.
#ifndef GPUALLOC_CORE_ALIGNMENT_H_
#define GPUALLOC_CORE_ALIGNMENT_H_

#include <bit>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/layer.h"

namespace gpualloc::core {

// InvalidArgument when `alignment` is not 0 or a power of two up to
// `max_alignment`; the same messages as the BFC allocator.
inline absl::Status CheckAlignment(std::size_t bytes, std::size_t alignment,
                                   std::uint64_t max_alignment) {
  if (alignment != 0 && !std::has_single_bit(alignment)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Allocate(%d bytes): alignment %d is not a power of two", bytes,
        alignment));
  }
  if (alignment > max_alignment) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Allocate(%d bytes): alignment %d exceeds the "
                        "largest supported alignment %d (one growth granule)",
                        bytes, alignment, max_alignment));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_ALIGNMENT_H_
