// SPDX-License-Identifier: Apache-2.0
// tests/core/shadow_model.h: the shadow model every randomized allocator test
// checks against: what is live, what was freed recently and on which stream,
// and the statistics those imply.
//
// It knows nothing of gtest (the fuzz target uses it too): a check answers an
// absl::Status naming what disagrees.
//
//  - Live blocks: Add checks a block just handed out (non-null, aligned,
//    overlapping no live block, not handed out twice) and records it with
//    its size rounded to the minimum block size; Remove forgets it.
//  - Fill patterns (host-backed memory): Fill writes a block's pattern at its
//    ends and a few points inside, CheckFill reads it back.
//  - Statistics: CheckStats compares bytes_in_use, bytes_requested, their
//    peaks, largest_alloc_size and num_allocs with the model's own sums
//    (sizes only where they are exact: no split bound).
//  - Recently freed addresses, for double frees (Deallocate expectations).
//  - Freed byte ranges with the (stream, stamp) of the free, for checks of
//    stream-ordered reuse: TakeFreed hands back the pieces a new block
//    overlaps and forgets those bytes.
#ifndef GPUALLOC_TESTS_SHADOW_MODEL_H_
#define GPUALLOC_TESTS_SHADOW_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::testing {

struct ShadowBlock {
  std::uint64_t size = 0;       // rounded to the minimum block size
  std::uint64_t requested = 0;  // as asked
  std::uintptr_t stream = 0;
  unsigned char tag = 0;
};

// A freed byte range and the stream work that may still use it.
struct ShadowFree {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uintptr_t stream = 0;
  std::uint64_t stamp = 0;
};

class ShadowModel {
 public:
  // `exact_sizes`: every block is its request rounded up to `min_block`
  // (false with a split bound, where a block may keep a surplus).
  explicit ShadowModel(std::uint64_t min_block = 256, bool exact_sizes = true)
      : min_block_(min_block), exact_sizes_(exact_sizes) {}

  std::uint64_t Rounded(std::uint64_t bytes) const {
    return (std::max<std::uint64_t>(bytes, 1) + min_block_ - 1) / min_block_ *
           min_block_;
  }

  absl::Status Add(std::uint64_t address, std::uint64_t requested,
                   std::uint64_t alignment = 0, std::uintptr_t stream = 0,
                   unsigned char tag = 0) {
    const std::uint64_t size = Rounded(requested);
    if (address == 0) return Bad("Allocate(%d) returned null", requested);
    if (address % min_block_ != 0 ||
        (alignment != 0 && address % alignment != 0)) {
      return Bad("Allocate(%d, alignment %d) returned %#x: misaligned",
                 requested, alignment, address);
    }
    auto next = blocks_.lower_bound(address);
    if (next != blocks_.end() && next->first < address + size) {
      return Bad("%#x (+%d) overlaps the live block at %#x", address, size,
                 next->first);
    }
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > address) {
        return Bad("%#x overlaps the live block at %#x (+%d)", address,
                   prev->first, prev->second.size);
      }
    }
    blocks_.emplace(address, ShadowBlock{size, requested, stream, tag});
    recently_freed_.erase(
        std::remove(recently_freed_.begin(), recently_freed_.end(), address),
        recently_freed_.end());
    in_use_ += size;
    requested_ += requested;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    peak_requested_ = std::max(peak_requested_, requested_);
    largest_ = std::max(largest_, size);
    ++allocs_;
    return absl::OkStatus();
  }

  absl::Status Remove(std::uint64_t address) {
    auto it = blocks_.find(address);
    if (it == blocks_.end())
      return Bad("%#x is not live in the model", address);
    in_use_ -= it->second.size;
    requested_ -= it->second.requested;
    blocks_.erase(it);
    recently_freed_.push_back(address);
    if (recently_freed_.size() > kFreedWindow) recently_freed_.pop_front();
    return absl::OkStatus();
  }

  // The live block `address` lies strictly inside, or nullptr.
  const ShadowBlock* Containing(std::uint64_t address) const {
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return nullptr;
    --it;
    return address > it->first && address < it->first + it->second.size
               ? &it->second
               : nullptr;
  }

  // Host-backed memory: the block's pattern, from its tag.
  void Fill(std::uint64_t address) {
    const ShadowBlock& b = blocks_.at(address);
    Pattern(address, b, /*write=*/true);
  }
  absl::Status CheckFill(std::uint64_t address) const {
    const ShadowBlock& b = blocks_.at(address);
    if (Pattern(address, b, /*write=*/false)) return absl::OkStatus();
    return Bad("the block at %#x (%d bytes) was overwritten", address,
               b.requested);
  }
  absl::Status CheckAllFills() const {
    for (const auto& [address, b] : blocks_) {
      if (!Pattern(address, b, /*write=*/false)) return CheckFill(address);
    }
    return absl::OkStatus();
  }

  // Peaks may exceed the model's by up to `bytes`: front caches on several
  // streams keep their peaks as an upper bound (docs/DESIGN.md, "Front
  // caches"), above the true peak by at most what the caches held.
  void set_peak_slack(std::uint64_t bytes) { peak_slack_ = bytes; }
  bool PeakAgrees(std::uint64_t peak, std::uint64_t model) const {
    return peak >= model && peak - model <= peak_slack_;
  }

  absl::Status CheckStats(const Stats& s) const {
    if (s.bytes_requested != requested_ || s.num_allocs != allocs_ ||
        !PeakAgrees(s.peak_bytes_requested, peak_requested_)) {
      return Bad(
          "requested %d (peak %d), %d allocations; the model says %d "
          "(peak %d), %d",
          s.bytes_requested, s.peak_bytes_requested, s.num_allocs, requested_,
          peak_requested_, allocs_);
    }
    if (exact_sizes_ && (s.bytes_in_use != in_use_ ||
                         !PeakAgrees(s.peak_bytes_in_use, peak_in_use_) ||
                         s.largest_alloc_size != largest_)) {
      return Bad(
          "in use %d (peak %d), largest allocation %d; the model says "
          "%d (peak %d), %d",
          s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size, in_use_,
          peak_in_use_, largest_);
    }
    if (s.bytes_in_use < in_use_ || s.peak_bytes_in_use < s.bytes_in_use) {
      return Bad("in use %d (peak %d) below the model's %d", s.bytes_in_use,
                 s.peak_bytes_in_use, in_use_);
    }
    return absl::OkStatus();
  }
  // After Allocator::ResetPeakStats: the peaks restart from the current
  // values and largest_alloc_size from 0, in every mode.
  void ResetPeaks() {
    peak_in_use_ = in_use_;
    peak_requested_ = requested_;
    largest_ = 0;
  }

  // Stream-ordered frees.
  void RecordFree(const ShadowFree& freed) { freed_.push_back(freed); }
  // The freed pieces [address, address + size) overlaps; those bytes are no
  // longer free in the model.
  std::vector<ShadowFree> TakeFreed(std::uint64_t address, std::uint64_t size) {
    std::vector<ShadowFree> overlapped, rest;
    for (const ShadowFree& f : freed_) {
      if (f.address >= address + size || address >= f.address + f.size) {
        rest.push_back(f);
        continue;
      }
      overlapped.push_back(f);
      if (f.address < address) {
        rest.push_back({f.address, address - f.address, f.stream, f.stamp});
      }
      if (f.address + f.size > address + size) {
        rest.push_back({address + size, f.address + f.size - (address + size),
                        f.stream, f.stamp});
      }
    }
    freed_ = std::move(rest);
    return overlapped;
  }

  const std::map<std::uint64_t, ShadowBlock>& blocks() const { return blocks_; }
  // The last kFreedWindow addresses freed and not handed out again.
  const std::deque<std::uint64_t>& recently_freed() const {
    return recently_freed_;
  }
  std::uint64_t bytes_in_use() const { return in_use_; }
  std::uint64_t bytes_requested() const { return requested_; }

  static constexpr std::size_t kFreedWindow = 64;

 private:
  template <typename... Args>
  static absl::Status Bad(const absl::FormatSpec<Args...>& format,
                          const Args&... args) {
    return absl::InternalError("shadow model: " +
                               absl::StrFormat(format, args...));
  }

  // Writes (or checks) the pattern of the requested bytes: all of a small
  // block, the ends and four points inside a large one.
  static bool Pattern(std::uint64_t address, const ShadowBlock& b, bool write) {
    auto* p = reinterpret_cast<unsigned char*>(address);
    const std::uint64_t size = b.requested;
    auto touch = [&](std::uint64_t from, std::uint64_t to) {
      for (std::uint64_t i = from; i < to && i < size; ++i) {
        const auto want = static_cast<unsigned char>(b.tag + i * 131);
        if (write) {
          p[i] = want;
        } else if (p[i] != want) {
          return false;
        }
      }
      return true;
    };
    if (size <= 4096) return touch(0, size);
    bool ok = touch(0, 256) && touch(size - 256, size);
    for (std::uint64_t at = size / 4; ok && at < size; at += size / 4) {
      ok = touch(at, at + 64);
    }
    return ok;
  }

  const std::uint64_t min_block_;
  const bool exact_sizes_;
  std::uint64_t peak_slack_ = 0;
  std::map<std::uint64_t, ShadowBlock> blocks_;
  std::deque<std::uint64_t> recently_freed_;
  std::vector<ShadowFree> freed_;
  std::uint64_t in_use_ = 0, requested_ = 0, peak_in_use_ = 0,
                peak_requested_ = 0, largest_ = 0, allocs_ = 0;
};

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_SHADOW_MODEL_H_
