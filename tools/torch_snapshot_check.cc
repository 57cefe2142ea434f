// SPDX-License-Identifier: Apache-2.0
// tools/torch_snapshot_check.cc: the layout check gpualloc-torch-snapshot
// runs on a JSON snapshot (tools/torch_snapshot_check.h).
#include "tools/torch_snapshot_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpualloc::tools {
namespace {

absl::Status Inconsistent(absl::string_view field, std::uint64_t value,
                          absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value, ": ", why));
}

// One region's chunks (`path` is the region's, e.g. "regions[2]").
absl::Status CheckChunks(const RegionSnapshot& r, const std::string& path) {
  if (r.chunks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".chunks: none: the chunks must tile the region (",
                     r.base, " to ", r.base + r.size, ")"));
  }
  const std::uint64_t end = r.base + r.size;
  std::uint64_t at = r.base;
  for (std::size_t j = 0; j < r.chunks.size(); ++j) {
    const ChunkSnapshot& c = r.chunks[j];
    const std::string cpath = absl::StrCat(path, ".chunks[", j, "]");
    if (c.address != at) {
      return Inconsistent(
          absl::StrCat(cpath, ".address"), c.address,
          j == 0 ? absl::StrCat("expected ", at, " (", path,
                                "'s base): the chunks must tile the region")
                 : absl::StrCat("expected ", at, " (where ", path, ".chunks[",
                                j - 1,
                                "] ends): the chunks must tile the "
                                "region"));
    }
    if (c.size == 0) {
      return Inconsistent(absl::StrCat(cpath, ".size"), 0,
                          "a chunk is never empty");
    }
    if (c.size > end - at) {
      return Inconsistent(
          absl::StrCat(cpath, ".size"), c.size,
          absl::StrCat("the chunk ends past the region's end (", end, ")"));
    }
    if (c.requested > c.size) {
      return Inconsistent(absl::StrCat(cpath, ".requested"), c.requested,
                          absl::StrCat("above the chunk's size ", c.size));
    }
    at += c.size;
  }
  if (at != end) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".chunks[", r.chunks.size() - 1, "]: ends at ", at,
                     ", expected the region's end (", end,
                     "): the chunks must tile the region"));
  }
  return absl::OkStatus();
}

// A list of regions (`path` e.g. "regions" or "pools[1].regions").
absl::Status CheckRegions(const std::vector<RegionSnapshot>& regions,
                          const std::string& path) {
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const RegionSnapshot& r = regions[i];
    const std::string rpath = absl::StrCat(path, "[", i, "]");
    if (r.size == 0) {
      return Inconsistent(absl::StrCat(rpath, ".size"), 0,
                          "a region is never empty");
    }
    if (r.base > kMaxSnapshotAddress || r.size > kMaxSnapshotAddress - r.base) {
      return Inconsistent(
          absl::StrCat(rpath, r.base > kMaxSnapshotAddress ? ".base" : ".size"),
          r.base > kMaxSnapshotAddress ? r.base : r.size,
          absl::StrCat("the region ends past 2^53 (", kMaxSnapshotAddress,
                       "), the largest address memory_viz reads exactly"));
    }
    if (i > 0) {
      const RegionSnapshot& prev = regions[i - 1];
      if (r.base < prev.base + prev.size) {
        const std::string prev_path = absl::StrCat(path, "[", i - 1, "]");
        return Inconsistent(
            absl::StrCat(rpath, ".base"), r.base,
            r.base == prev.base && r.size == prev.size
                ? absl::StrCat("the same region as ", prev_path)
            : r.base < prev.base
                ? absl::StrCat("below ", prev_path, "'s base ", prev.base,
                               ": regions are in address order")
                : absl::StrCat("overlaps ", prev_path, " (", prev.base, " to ",
                               prev.base + prev.size, ")"));
      }
    }
    if (absl::Status s = CheckChunks(r, rpath); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSnapshotForExport(const Snapshot& snapshot) {
  if (absl::Status s = CheckRegions(snapshot.regions, "regions"); !s.ok()) {
    return s;
  }
  for (std::size_t p = 0; p < snapshot.pools.size(); ++p) {
    if (absl::Status s = CheckRegions(snapshot.pools[p].regions,
                                      absl::StrCat("pools[", p, "].regions"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::tools
