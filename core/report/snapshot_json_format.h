// SPDX-License-Identifier: Apache-2.0
// core/report/snapshot_json_format.h: what the snapshot JSON's writer
// (core/report/snapshot_json.cc) and reader
// (core/report/snapshot_json_reader.cc) agree on: the "format" and "version"
// fields' values.
#ifndef GPUALLOC_CORE_SNAPSHOT_JSON_FORMAT_H_
#define GPUALLOC_CORE_SNAPSHOT_JSON_FORMAT_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "core/layer.h"

namespace gpualloc {
namespace snapshot_json_internal {

inline constexpr absl::string_view kFormat = "gpualloc-snapshot";
inline constexpr std::uint64_t kVersion = 1;

}  // namespace snapshot_json_internal
}  // namespace gpualloc

#endif  // GPUALLOC_CORE_SNAPSHOT_JSON_FORMAT_H_
