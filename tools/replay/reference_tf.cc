// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_tf.cc: a model of TensorFlow's GPU BFC allocator
// (xla/tsl/framework/bfc_allocator.cc, BFCAllocator; formerly
// tensorflow/core/common_runtime/bfc_allocator.cc) with allow_growth, for
// comparison. Each rule names the function of that file it follows. What it
// leaves out: docs/REFERENCE.md, "Reference models".
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/reference.h"
#include "tools/replay/reference_model.h"

namespace gpualloc::replay {
namespace {

constexpr std::uint64_t kMinAllocationSize = 256;  // kMinAllocationBits 8
constexpr int kNumBins = 21;
constexpr double kBackpedalFactor = 0.9;

// RoundedBytes: a multiple of kMinAllocationSize.
std::uint64_t RoundedBytes(std::uint64_t bytes) {
  return kMinAllocationSize *
         ((bytes + kMinAllocationSize - 1) / kMinAllocationSize);
}

// BinNumForSize: bin b holds [256 << b, 256 << (b + 1)); the last the rest.
int BinNumForSize(std::uint64_t bytes) {
  const std::uint64_t v = std::max<std::uint64_t>(bytes, 256) >> 8;
  const int b = 63 - __builtin_clzll(v);
  return std::min(kNumBins - 1, b);
}

struct Chunk {
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;
  bool in_use = false;
  Chunk* prev = nullptr;  // neighbours in the region
  Chunk* next = nullptr;
  std::uint64_t region = 0;  // the region's base
};

// ChunkComparator: (size, address).
struct BySize {
  bool operator()(const Chunk* a, const Chunk* b) const {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

class TfModel final : public ReferenceModel {
 public:
  TfModel(const TfModelOptions& o, std::shared_ptr<Backend> backend)
      : ReferenceModel("tf", std::move(backend)), o_(o) {
    const std::uint64_t total = backend_->info().total_bytes;
    memory_limit_ = o.memory_limit != 0 ? o.memory_limit : total;
    // The constructor: allow_growth starts at 2 MiB regions, without it
    // one region of the whole limit.
    curr_region_allocation_bytes_ =
        o.allow_growth
            ? RoundedBytes(std::min<std::uint64_t>(memory_limit_, 2 << 20))
            : RoundedBytes(memory_limit_);
    max_internal_fragmentation_ =
        o.fragmentation_fraction > 0
            ? static_cast<std::uint64_t>(o.fragmentation_fraction *
                                         static_cast<double>(memory_limit_))
            : std::uint64_t{128} << 20;
    stats_.bytes_limit = memory_limit_;
  }

  ~TfModel() override {
    for (auto& [base, head] : regions_) {
      (void)backend_->Free(base);
      for (Chunk* c = head.first; c != nullptr;) {
        Chunk* next = c->next;
        delete c;
        c = next;
      }
    }
  }

  // AllocateRawInternal.
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream, std::size_t,
                                 Tag) override {
    const std::uint64_t rounded =
        RoundedBytes(std::max<std::uint64_t>(bytes, 1));
    Chunk* c = FindChunkPtr(rounded, bytes);
    if (c == nullptr) {
      absl::StatusOr<bool> grown = Extend(rounded);
      if (!grown.ok()) return grown.status();
      if (*grown) c = FindChunkPtr(rounded, bytes);
    }
    if (c == nullptr && o_.garbage_collection) {
      // DeallocateFreeRegions, then Extend again.
      absl::StatusOr<bool> freed = DeallocateFreeRegions(rounded);
      if (!freed.ok()) return freed.status();
      if (*freed) {
        absl::StatusOr<bool> grown = Extend(rounded);
        if (!grown.ok()) return grown.status();
        if (*grown) c = FindChunkPtr(rounded, bytes);
      }
    }
    if (c == nullptr) {
      return OutOfMemory(bytes,
                         "no free chunk fits and no region can be added "
                         "within the limit");
    }
    return reinterpret_cast<void*>(c->ptr);
  }

  // DeallocateRawInternal: MarkFree, TryToCoalesce, InsertFreeChunkIntoBin.
  // The stream is not looked at: TensorFlow's BFC allocator serves one
  // compute stream and reuses freed memory at once.
  absl::Status Deallocate(void* ptr, Stream) override {
    auto it = in_use_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == in_use_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tf model did not hand out ",
                       reinterpret_cast<std::uintptr_t>(ptr)));
    }
    Chunk* c = it->second;
    in_use_.erase(it);
    OnFreed(c->requested, c->size);
    c->in_use = false;
    c->requested = 0;
    if (c->next != nullptr && !c->next->in_use) {
      Chunk* n = c->next;
      RemoveFromBin(n);
      Merge(c, n);
    }
    if (c->prev != nullptr && !c->prev->in_use) {
      Chunk* p = c->prev;
      RemoveFromBin(p);
      Merge(p, c);
      c = p;
    }
    InsertIntoBin(c);
    return absl::OkStatus();
  }

  Snapshot GetSnapshot() const override {
    Snapshot snap;
    for (const auto& [base, head] : regions_) {
      RegionSnapshot r;
      r.base = base;
      r.size = head.second;
      for (const Chunk* c = head.first; c != nullptr; c = c->next) {
        ChunkSnapshot s;
        s.address = c->ptr;
        s.size = c->size;
        s.requested = c->requested;
        s.in_use = c->in_use;
        r.chunks.push_back(s);
      }
      snap.regions.push_back(std::move(r));
    }
    snap.stats = GetStats();
    return snap;
  }

  absl::Status Trim() override {
    absl::StatusOr<bool> freed = DeallocateFreeRegions(0);
    return freed.status();
  }

 protected:
  void FreeSummary(std::uint64_t* largest, double* frag) const override {
    std::uint64_t total = 0, max = 0;
    for (const auto& bin : bins_) {
      for (const Chunk* c : bin) total += c->size;
      if (!bin.empty()) max = std::max(max, (*bin.rbegin())->size);
    }
    *largest = max;
    *frag = total == 0
                ? 0
                : 1.0 - static_cast<double>(max) / static_cast<double>(total);
  }

 private:
  void InsertIntoBin(Chunk* c) { bins_[BinNumForSize(c->size)].insert(c); }
  void RemoveFromBin(Chunk* c) { bins_[BinNumForSize(c->size)].erase(c); }

  // Merge: b, which follows a, into a.
  void Merge(Chunk* a, Chunk* b) {
    a->size += b->size;
    a->next = b->next;
    if (b->next != nullptr) b->next->prev = a;
    delete b;
  }

  // FindChunkPtr: from the request's bin up, the first free chunk (smallest,
  // then lowest address) that fits; split when the chunk is at least twice
  // the request or would waste max_internal_fragmentation_bytes or more.
  Chunk* FindChunkPtr(std::uint64_t rounded, std::uint64_t requested) {
    for (int b = BinNumForSize(rounded); b < kNumBins; ++b) {
      auto& bin = bins_[b];
      Chunk key;
      key.size = rounded;
      auto it = bin.lower_bound(&key);
      if (it == bin.end()) continue;
      Chunk* c = *it;
      bin.erase(it);
      if (c->size >= rounded * 2 ||
          c->size - rounded >= max_internal_fragmentation_) {
        // SplitChunk: the front is the allocation, the rest a free chunk.
        Chunk* rest = new Chunk;
        rest->ptr = c->ptr + rounded;
        rest->size = c->size - rounded;
        rest->region = c->region;
        rest->prev = c;
        rest->next = c->next;
        if (c->next != nullptr) c->next->prev = rest;
        c->next = rest;
        c->size = rounded;
        InsertIntoBin(rest);
      }
      c->in_use = true;
      c->requested = requested;
      in_use_[c->ptr] = c;
      OnAllocated(requested, c->size);
      return c;
    }
    return nullptr;
  }

  // Extend: a new region of curr_region_allocation_bytes_ (doubled until
  // the request fits; doubled after a region that did not need that),
  // within the limit; the first time the device refuses, back off by 0.9
  // until it succeeds or the region would not hold the request.
  absl::StatusOr<bool> Extend(std::uint64_t rounded) {
    std::uint64_t available = memory_limit_ - total_region_allocated_bytes_;
    available = (available / kMinAllocationSize) * kMinAllocationSize;
    if (rounded > available) return false;
    bool increased = false;
    while (rounded > curr_region_allocation_bytes_) {
      curr_region_allocation_bytes_ *= 2;
      increased = true;
    }
    std::uint64_t bytes = std::min(curr_region_allocation_bytes_, available);
    absl::StatusOr<std::optional<DeviceAddress>> p = SubAlloc(bytes);
    if (!p.ok()) return p.status();
    if (!p->has_value() && !started_backpedal_) {
      started_backpedal_ = true;
      while (!p->has_value()) {
        bytes = RoundedBytes(static_cast<std::uint64_t>(
            static_cast<double>(bytes) * kBackpedalFactor));
        if (bytes < rounded) break;
        p = SubAlloc(bytes);
        if (!p.ok()) return p.status();
      }
    }
    if (!p->has_value()) return false;
    if (!increased) curr_region_allocation_bytes_ *= 2;
    const DeviceAddress base = **p;
    total_region_allocated_bytes_ += bytes;
    OnReserved(bytes);
    Chunk* c = new Chunk;
    c->ptr = base;
    c->size = bytes;
    c->region = base;
    regions_[base] = {c, bytes};
    InsertIntoBin(c);
    return true;
  }

  // The sub-allocator: cuMemAlloc; nullopt when the device is full.
  absl::StatusOr<std::optional<DeviceAddress>> SubAlloc(std::uint64_t bytes) {
    absl::StatusOr<DeviceAddress> p = backend_->Allocate(bytes);
    if (p.ok()) return std::optional<DeviceAddress>(*p);
    if (absl::IsResourceExhausted(p.status())) {
      return std::optional<DeviceAddress>();
    }
    return p.status();
  }

  // DeallocateFreeRegions: every region with nothing in use goes back, when
  // that could make room for the request. cuMemFree synchronizes the
  // device: one host wait when any region went back.
  absl::StatusOr<bool> DeallocateFreeRegions(std::uint64_t rounded) {
    std::vector<std::uint64_t> free_regions;
    std::uint64_t free_bytes = 0;
    for (const auto& [base, head] : regions_) {
      if (!head.first->in_use && head.first->next == nullptr) {
        free_regions.push_back(base);
        free_bytes += head.second;
      }
    }
    if (free_bytes == 0) return false;
    if (rounded > memory_limit_ - total_region_allocated_bytes_ + free_bytes) {
      return false;
    }
    for (std::uint64_t base : free_regions) {
      auto it = regions_.find(base);
      RemoveFromBin(it->second.first);
      delete it->second.first;
      absl::Status s = backend_->Free(base);
      if (!s.ok()) return s;
      total_region_allocated_bytes_ -= it->second.second;
      OnReleased(it->second.second);
      regions_.erase(it);
    }
    ++stats_.host_waits;
    return true;
  }

  const TfModelOptions o_;
  std::uint64_t memory_limit_ = 0;
  std::uint64_t curr_region_allocation_bytes_ = 0;
  std::uint64_t total_region_allocated_bytes_ = 0;
  std::uint64_t max_internal_fragmentation_ = 0;
  bool started_backpedal_ = false;
  std::set<Chunk*, BySize> bins_[kNumBins];
  absl::flat_hash_map<std::uint64_t, Chunk*> in_use_;
  // Regions by base: the first chunk and the region's size.
  std::map<std::uint64_t, std::pair<Chunk*, std::uint64_t>> regions_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreateTfModel(
    const TfModelOptions& options, std::shared_ptr<Backend> backend) {
  if (options.fragmentation_fraction < 0 ||
      options.fragmentation_fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fragmentation_fraction must be in [0, 1], got ",
                     options.fragmentation_fraction));
  }
  return std::unique_ptr<Allocator>(new TfModel(options, std::move(backend)));
}

}  // namespace gpualloc::replay
