// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/stats_fields.h: the fields of gpualloc::Stats as one table, for
// every output that writes them all out (the C API's gpualloc_stats_t, the
// snapshot JSON, gpualloc-replay's JSON), so that a new field reaches each
// of them or the build fails.
//
// GPUALLOC_STATS_FIELDS(X) calls X(name, type, age, description) once per
// field, in Stats' declaration order:
//   name         the member of Stats, also its name in every output
//   type         its C++ type (std::uint64_t or double)
//   age          StatsFieldAge: kOriginal for the fields of the first snapshot
//                format (a reader requires them), kAdded for later ones (a
//                reader takes a document without them)
//   description  one line, as the outputs' documentation says it
//
// A new Stats field: its member in Stats (gpualloc/core/allocator.h), its row
// here (kAdded), its field at the END of gpualloc_stats_t (gpualloc/gpualloc.h)
// and in the Python mirror (python/gpualloc/torch.py, _Stats). The
// static_asserts below fail when Stats has a member the table lacks; those
// in bindings/c/c_api_report.cc when gpualloc_stats_t lacks a row;
// tests/bindings/stats_mirror_test.py when the Python mirror does.
#ifndef GPUALLOC_STATS_FIELDS_H_
#define GPUALLOC_STATS_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gpualloc/core/allocator.h"

// clang-format off
#define GPUALLOC_STATS_FIELDS(X)                                                                             \
  X(num_allocs, std::uint64_t, kOriginal, "successful Allocate calls, ever")                                 \
  X(bytes_in_use, std::uint64_t, kOriginal, "sum of the sizes of in-use chunks")                             \
  X(peak_bytes_in_use, std::uint64_t, kOriginal, "most bytes_in_use since the last peak reset")              \
  X(largest_alloc_size, std::uint64_t, kOriginal, "largest chunk handed out since the last peak reset")      \
  X(bytes_limit, std::uint64_t, kOriginal, "the most bytes the allocator may reserve")                       \
  X(bytes_reserved, std::uint64_t, kOriginal, "sum of region sizes")                                         \
  X(peak_bytes_reserved, std::uint64_t, kOriginal, "most bytes_reserved since the last peak reset")          \
  X(largest_free_block_bytes, std::uint64_t, kOriginal, "largest free chunk")                                \
  X(bytes_requested, std::uint64_t, kOriginal, "sum of the sizes as asked")                                  \
  X(peak_bytes_requested, std::uint64_t, kOriginal, "most bytes_requested since the last peak reset")        \
  X(fragmentation, double, kOriginal, "1 - largest free block / total free bytes (0: nothing free)")          \
  X(num_ooms, std::uint64_t, kOriginal, "final out-of-memory answers of Allocate")                           \
  X(backend_allocs, std::uint64_t, kOriginal, "device allocations made")                                     \
  X(backend_frees, std::uint64_t, kOriginal, "device allocations given back")                                \
  X(events_recorded, std::uint64_t, kOriginal, "backend events recorded for stream-ordered frees")           \
  X(stream_waits, std::uint64_t, kOriginal, "new streams made to wait for a free")                           \
  X(host_waits, std::uint64_t, kOriginal, "host blocked on an event (out of memory)")                        \
  X(pool_bytes_reserved, std::uint64_t, kAdded, "memory private pools hold (in bytes_reserved)")             \
  X(pool_bytes_in_use, std::uint64_t, kAdded, "of it, what they handed out (in bytes_in_use)")               \
  X(bytes_sleeping, std::uint64_t, kAdded, "memory of tags asleep, given back (not in bytes_reserved)")      \
  X(bytes_release_pending, std::uint64_t, kAdded, "memory the device refused to take back (in bytes_reserved)") \
  X(front_cache_bytes, std::uint64_t, kAdded, "freed blocks the front caches hold (not in bytes_in_use)")     \
  X(front_cache_hits, std::uint64_t, kAdded, "allocations the front caches served")                          \
  X(front_cache_misses, std::uint64_t, kAdded, "allocations that found no block of their size in the front cache") \
  X(bytes_exported, std::uint64_t, kAdded, "live blocks exported to other processes (in bytes_in_use)")            \
  X(bytes_held_for_importers, std::uint64_t, kAdded, "exported blocks freed, kept until every importer closed them") \
  X(bytes_imported, std::uint64_t, kAdded, "memory of other processes imported here (not in bytes_reserved)")
// clang-format on

namespace gpualloc {

// The `age` column of GPUALLOC_STATS_FIELDS.
enum class StatsFieldAge { kOriginal, kAdded };

// Calls f(name, member, age) for each row of GPUALLOC_STATS_FIELDS, in its
// order: name a const char*, member a pointer to the Stats member
// (std::uint64_t Stats::* or double Stats::*), age a StatsFieldAge.
template <typename F>
void ForEachStatsField(F&& f) {
#define GPUALLOC_STATS_VISIT(name, type, age, description) \
  f(#name, &Stats::name, StatsFieldAge::age);
  GPUALLOC_STATS_FIELDS(GPUALLOC_STATS_VISIT)
#undef GPUALLOC_STATS_VISIT
}

namespace stats_fields_internal {

// Each row names a Stats member of its type, in declaration order, and the
// rows cover Stats without a gap: a member of Stats the table lacks fails
// here (the sizes no longer add up).
#define GPUALLOC_STATS_CHECK(name, type, age, description)   \
  static_assert(std::is_same_v<decltype(Stats::name), type>, \
                "GPUALLOC_STATS_FIELDS: Stats::" #name       \
                " has another "                              \
                "type than its row");
GPUALLOC_STATS_FIELDS(GPUALLOC_STATS_CHECK)
#undef GPUALLOC_STATS_CHECK

// The end offset of the rows, each checked to start where the one before it
// ends; SIZE_MAX when one does not.
constexpr std::size_t RowsEnd() {
  std::size_t end = 0;
#define GPUALLOC_STATS_OFFSET(name, type, age, description) \
  if (offsetof(Stats, name) != end) return SIZE_MAX;        \
  end += sizeof(type);
  GPUALLOC_STATS_FIELDS(GPUALLOC_STATS_OFFSET)
#undef GPUALLOC_STATS_OFFSET
  return end;
}
static_assert(
    RowsEnd() == sizeof(Stats),
    "GPUALLOC_STATS_FIELDS (gpualloc/core/stats_fields.h) must list every "
    "member of gpualloc::Stats, in declaration order");

}  // namespace stats_fields_internal
}  // namespace gpualloc

#endif  // GPUALLOC_STATS_FIELDS_H_
