// SPDX-License-Identifier: Apache-2.0
// bindings/c/c_api_report.cc: the C API's (gpualloc/gpualloc.h) statistics,
// snapshots and history context: gpualloc_get_stats (gpualloc_stats_t checked
// against the table of Stats fields) and gpualloc_reset_peak_stats,
// gpualloc_snapshot_json and gpualloc_string_free,
// gpualloc_snapshot_torch_pickle, and gpualloc_set_context. Each entry point
// runs through Boundary (bindings/c/c_api_internal.h), as in c_api.cc.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bindings/c/c_api_internal.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/snapshot_json.h"
#include "gpualloc/core/stats_fields.h"
#include "gpualloc/core/torch_snapshot.h"
#include "gpualloc/gpualloc.h"

namespace gpualloc {
namespace {

// gpualloc_stats_t holds every row of GPUALLOC_STATS_FIELDS, of its type,
// and nothing else after struct_size (its fields may be in another order:
// fragmentation comes after host_waits there).
#define GPUALLOC_C_STATS_FIELD(name, type, age, description)            \
  static_assert(std::is_same_v<decltype(gpualloc_stats_t::name), type>, \
                "gpualloc_stats_t." #name                               \
                " must have the type of Stats::" #name);
GPUALLOC_STATS_FIELDS(GPUALLOC_C_STATS_FIELD)
#undef GPUALLOC_C_STATS_FIELD
#define GPUALLOC_STATS_FIELD_SIZE(name, type, age, description) +sizeof(type)
static_assert(sizeof(gpualloc_stats_t) ==
                  sizeof(std::uint64_t) +
                      (0 GPUALLOC_STATS_FIELDS(GPUALLOC_STATS_FIELD_SIZE)),
              "gpualloc_stats_t must hold struct_size and exactly the rows of "
              "GPUALLOC_STATS_FIELDS (gpualloc/core/stats_fields.h)");
#undef GPUALLOC_STATS_FIELD_SIZE

}  // namespace

void CopyStats(const Stats& s, gpualloc_stats_t* out) {
  gpualloc_stats_t full;
  std::memset(&full, 0, sizeof(full));
  full.struct_size = sizeof(full);
#define GPUALLOC_COPY_STATS_FIELD(name, type, age, description) \
  full.name = s.name;
  GPUALLOC_STATS_FIELDS(GPUALLOC_COPY_STATS_FIELD)
#undef GPUALLOC_COPY_STATS_FIELD
  // The caller's struct may be older (smaller): fill the whole fields that
  // fit, never part of one (a struct_size between two field boundaries gets
  // the fields before it). Or newer (larger): fill this library's fields and
  // leave the rest as the caller set them. Its struct_size stays.
  constexpr std::size_t kFieldEnds[] = {
#define GPUALLOC_FIELD_END(name, type, age, description) \
  offsetof(gpualloc_stats_t, name) + sizeof(gpualloc_stats_t::name),
      sizeof(gpualloc_stats_t::struct_size),
      GPUALLOC_STATS_FIELDS(GPUALLOC_FIELD_END)
#undef GPUALLOC_FIELD_END
  };
  CopyFieldsThatFit(&full, out, out->struct_size, kFieldEnds);
}

}  // namespace gpualloc

using gpualloc::Boundary;

extern "C" {

gpualloc_status_t gpualloc_get_stats(gpualloc_t* allocator, int device,
                                     gpualloc_stats_t* out) {
  return Boundary("gpualloc_get_stats", [&]() -> absl::Status {
    if (out == nullptr) return gpualloc::NullArgument("out");
    // Smaller values come from older headers, larger ones from newer
    // headers (fields appended): CopyStats fills the fields both know.
    if (out->struct_size < sizeof(out->struct_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "out->struct_size is %d: set it to sizeof(gpualloc_stats_t) "
          "(%d in this library)",
          out->struct_size, sizeof(gpualloc_stats_t)));
    }
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    gpualloc::CopyStats((*a)->GetStats(), out);
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_reset_peak_stats(gpualloc_t* allocator, int device) {
  return Boundary("gpualloc_reset_peak_stats", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    (*a)->ResetPeakStats();
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_snapshot_json(gpualloc_t* allocator, int device,
                                         char** out, size_t* out_length) {
  return Boundary("gpualloc_snapshot_json", [&]() -> absl::Status {
    if (out == nullptr) return gpualloc::NullArgument("out");
    *out = nullptr;
    if (out_length != nullptr) *out_length = 0;
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    const std::string json =
        gpualloc::SnapshotToJson((*a)->GetSnapshot(), &(*a)->device());
    char* copy = static_cast<char*>(std::malloc(json.size() + 1));
    if (copy == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of host memory for a ", json.size() + 1, "-byte snapshot"));
    }
    std::memcpy(copy, json.c_str(), json.size() + 1);
    *out = copy;
    if (out_length != nullptr) *out_length = json.size();
    return absl::OkStatus();
  });
}

void gpualloc_string_free(char* text) { std::free(text); }

gpualloc_status_t gpualloc_snapshot_torch_pickle(gpualloc_t* allocator,
                                                 int device, const char* path) {
  return Boundary("gpualloc_snapshot_torch_pickle", [&]() -> absl::Status {
    if (path == nullptr) return gpualloc::NullArgument("path");
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    const std::string pickle =
        gpualloc::TorchSnapshotPickle((*a)->GetSnapshot(), device);
    errno = 0;
    std::FILE* f = std::fopen(path, "wb");
    const bool written =
        f != nullptr &&
        std::fwrite(pickle.data(), 1, pickle.size(), f) == pickle.size();
    const int error = errno;
    if ((f != nullptr && std::fclose(f) != 0) || !written) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", path, ": ",
                       std::strerror(error != 0 ? error : EIO)));
    }
    return absl::OkStatus();
  });
}

void gpualloc_set_context(const char* context) {
  gpualloc::SetThreadContext(context == nullptr ? "" : context);
}

}  // extern "C"
