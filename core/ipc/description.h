// SPDX-License-Identifier: Apache-2.0
// core/ipc/description.h: the byte string Allocator::Export returns and
// Allocator::Import reads (docs/REFERENCE.md, "Export descriptions", has the
// layout): versioned, self-describing, little-endian, ending in a checksum,
// so that a description garbled on its way is refused with what is wrong
// rather than mapped.
//
// Pure data: no system or backend calls.
#ifndef GPUALLOC_CORE_IPC_DESCRIPTION_H_
#define GPUALLOC_CORE_IPC_DESCRIPTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ipc/counter_page.h"
#include "core/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

inline constexpr std::uint16_t kDescriptionVersion = 2;
inline constexpr char kDescriptionMagic[8] = {'g', 'p', 'u', 'a',
                                              'l', 'i', 'p', 'c'};
// A description names at most this many mappings (a block of a few GiB over
// 2 MiB granules stays far below).
inline constexpr std::uint32_t kMaxDescribedMappings = 1 << 16;

enum class SharedKind : std::uint8_t {
  kIpcHandle = 1,  // a backend allocation's IPC handle (separate regions)
  kMappings = 2,   // descriptors of whole mappings (expandable regions)
};

struct DescribedMapping {
  std::int32_t fd = -1;     // the exporter's descriptor of its memory
  std::uint64_t bytes = 0;  // the mapping's size
};

struct BlockDescription {
  SharedKind kind = SharedKind::kIpcHandle;
  std::uint64_t pid = 0;  // the exporting process
  std::string backend;    // DeviceInfo::backend of the exporter (<= 15)
  std::uint32_t ordinal = 0;
  std::uint64_t bytes = 0;       // the block's size (its chunk)
  std::uint64_t offset = 0;      // the block's start in the allocation / first
                                 // mapping
  std::int32_t counter_fd = -1;  // the exporter's descriptor of the page
                                 // counting importers
  ExportToken token{};           // the export's (its counter page holds it
                                 // while the export is live)
  IpcHandle handle;              // kIpcHandle
  std::vector<DescribedMapping> mappings;  // kMappings, in address order
};

std::string EncodeDescription(const BlockDescription& description);
// InvalidArgument naming what is wrong: too short, not a description (magic),
// another version, an unknown kind, a length that does not match, a bad
// checksum (garbled), impossible values (no bytes, an offset past the
// memory described, negative descriptors, a block past 2^64).
absl::StatusOr<BlockDescription> DecodeDescription(absl::string_view bytes);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_IPC_DESCRIPTION_H_
