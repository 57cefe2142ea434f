// SPDX-License-Identifier: Apache-2.0
// core/report/format_bytes.h: byte counts for people, in messages.
#ifndef GPUALLOC_CORE_FORMAT_BYTES_H_
#define GPUALLOC_CORE_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

#include "core/layer.h"

namespace gpualloc::core {

// "1.50 MiB": sizes in messages.
std::string FormatBytes(std::uint64_t bytes);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_FORMAT_BYTES_H_
