// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/snapshot_json.h: an allocator Snapshot as JSON, and back.
//
// The document (docs/REFERENCE.md, "Snapshot JSON"; one line, no spaces):
//   {"format":"gpualloc-snapshot","version":1,
//    "device":{"ordinal":0,"backend":"sim","name":"...","total_bytes":N},
//    "stats":{"num_allocs":N,...every Stats field under its own name...},
//    "region_kind":"separate"|"expandable",
//    "regions":[{"base":N,"size":N,
//                "chunks":[{"address":N,"size":N,"requested":N,
//                           "state":"in_use"|"free","stream":N},...]},...]}
//    "history":{"recorded":N,"dropped":N,
//               "events":[{"action":"alloc"|"free_requested"|...,
//                          "address":N,"size":N,"stream":N,"time_ns":N,
//                          "context":"..."},...]}}
// "history" is written when Options::history is on, read when present.
// A chunk may also have "pool", "tag" and "asleep":true (its memory given
// back: the chunks without it add up to stats.bytes_reserved); "pools" lists
// private pools and tags (docs/REFERENCE.md). A document without
// "region_kind" (an older one) reads as expandable when its history maps or
// unmaps, else separate.
// Regions and chunks are in address order. Every number is an unsigned 64-bit
// integer written in decimal, except stats.fragmentation (a fraction).
// "device" is present when a DeviceInfo is given.
#ifndef GPUALLOC_SNAPSHOT_JSON_H_
#define GPUALLOC_SNAPSHOT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

std::string SnapshotToJson(const Snapshot& snapshot,
                           const DeviceInfo* device = nullptr);

// Parses what SnapshotToJson wrote. Strict about what it needs: malformed
// JSON, a missing or mistyped field, or a "format"/"version" it does not know
// is InvalidArgument naming the field (e.g. "regions[2].chunks[0].size") or
// the byte offset of the syntax error. Unknown fields are skipped, so later
// versions may add some.
absl::StatusOr<Snapshot> SnapshotFromJson(absl::string_view json);

// Appends `s` to *out as a JSON string: quoted, with quotes, backslashes and
// control characters escaped (the tools' JSON output uses it too).
void AppendJsonString(std::string* out, absl::string_view s);

}  // namespace gpualloc

#endif  // GPUALLOC_SNAPSHOT_JSON_H_
