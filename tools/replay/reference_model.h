// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_model.h: what the reference models (reference.h)
// share: the Allocator calls a replay does not use, and the statistics every
// model keeps the same way (so that their columns mean what gpualloc's do).
// Internal to tools/replay.
#ifndef GPUALLOC_TOOLS_REPLAY_REFERENCE_MODEL_H_
#define GPUALLOC_TOOLS_REPLAY_REFERENCE_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/layer.h"

namespace gpualloc::replay {

class ReferenceModel : public Allocator {
 public:
  ReferenceModel(std::string name, std::shared_ptr<Backend> backend)
      : name_(std::move(name)), backend_(std::move(backend)) {
    // Options are reported as the platform mode's: the fields a replay
    // reads (mode, expandable) must not claim gpualloc's bfc regions.
    options_.mode = AllocatorMode::kPlatform;
  }

  absl::Status RecordStream(void*, Stream) override {
    return absl::UnimplementedError(
        absl::StrCat("the ", name_, " model does not take RecordStream"));
  }
  absl::Status ReleaseStream(Stream) override { return absl::OkStatus(); }
  Stats GetStats() const override {
    Stats s = stats_;
    FreeSummary(&s.largest_free_block_bytes, &s.fragmentation);
    return s;
  }
  void ResetPeakStats() override {
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
    stats_.peak_bytes_reserved = stats_.bytes_reserved;
    stats_.peak_bytes_requested = stats_.bytes_requested;
    stats_.largest_alloc_size = 0;
  }
  absl::Status SetLimit(std::uint64_t) override {
    return absl::UnimplementedError(
        absl::StrCat("the ", name_, " model has no SetLimit"));
  }
  absl::Status Validate() const override { return absl::OkStatus(); }
  void SetOutOfMemoryHandler(OutOfMemoryHandler) override {}
  const DeviceInfo& device() const override { return backend_->info(); }
  const Options& options() const override { return options_; }

 protected:
  // The largest free block and 1 - largest / total free (0 when none).
  virtual void FreeSummary(std::uint64_t* largest, double* frag) const = 0;

  void OnAllocated(std::uint64_t requested, std::uint64_t size) {
    ++stats_.num_allocs;
    stats_.bytes_in_use += size;
    stats_.bytes_requested += requested;
    stats_.largest_alloc_size = std::max(stats_.largest_alloc_size, size);
    stats_.peak_bytes_in_use =
        std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    stats_.peak_bytes_requested =
        std::max(stats_.peak_bytes_requested, stats_.bytes_requested);
  }
  void OnFreed(std::uint64_t requested, std::uint64_t size) {
    stats_.bytes_in_use -= size;
    stats_.bytes_requested -= requested;
  }
  void OnReserved(std::uint64_t bytes) {
    ++stats_.backend_allocs;
    stats_.bytes_reserved += bytes;
    stats_.peak_bytes_reserved =
        std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  void OnReleased(std::uint64_t bytes) {
    ++stats_.backend_frees;
    stats_.bytes_reserved -= bytes;
  }
  // Out of memory: counted, and the answer says why.
  absl::Status OutOfMemory(std::uint64_t bytes, absl::string_view why) {
    ++stats_.num_ooms;
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", name_, " model is out of memory: ", bytes,
                     " bytes asked, ", stats_.bytes_reserved, " reserved, ",
                     stats_.bytes_in_use, " in use: ", why));
  }

  const std::string name_;
  std::shared_ptr<Backend> backend_;
  Options options_;
  mutable Stats stats_;  // mutable: the async model reads the pool in GetStats
};

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_REFERENCE_MODEL_H_
