// SPDX-License-Identifier: Apache-2.0
// core/report/format_bytes.cc: see format_bytes.h.
#include "core/report/format_bytes.h"

#include "absl/strings/str_format.h"

namespace gpualloc::core {

std::string FormatBytes(std::uint64_t b) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  if (b >= (std::uint64_t{1} << 30))
    return absl::StrFormat("%.2f GiB", b / kGiB);
  if (b >= (std::uint64_t{1} << 20))
    return absl::StrFormat("%.2f MiB", b / (1024.0 * 1024));
  if (b >= 1024) return absl::StrFormat("%.2f KiB", b / 1024.0);
  return absl::StrFormat("%d B", b);
}

}  // namespace gpualloc::core
