// SPDX-License-Identifier: Apache-2.0
// tools/bench/tf_bfc_reference.h: a compact re-implementation of TensorFlow's
// BFC allocator algorithm (xla/tsl/framework/bfc_allocator.cc), for measuring
// gpualloc against it side by side in one benchmark run. Benchmark-only code.
//
// What it keeps of TensorFlow's design, because that is what costs time:
//   - 21 bins; bin i holds free chunks of [256 << i, 256 << (i + 1)) bytes,
//   each
//     bin a std::set of chunk handles ordered by (size, address) through the
//     chunk vector (a heap node per insert, a dereference per comparison);
//   - best fit: from the request's bin upwards, the first chunk that fits;
//   - split when the chunk is at least twice the request or the surplus is at
//     least 128 MiB; merge with both free neighbours on free;
//   - pointer -> chunk through a table with one handle per 256 B of the region
//     (TensorFlow's RegionManager), so host memory grows with the pool;
//   - one lock around each call (std::mutex here, so that the comparison is of
//     the algorithms, not of Debian's absl::Mutex debug checks).
// One preallocated region, fake addresses; no growth, stats or error reporting.
#ifndef GPUALLOC_TOOLS_BENCH_TF_BFC_REFERENCE_H_
#define GPUALLOC_TOOLS_BENCH_TF_BFC_REFERENCE_H_

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace gpualloc::bench {

class TfBfcReference {
 public:
  TfBfcReference(std::uint64_t base, std::uint64_t size)
      : base_(base),
        handles_(size >> kMinShift, kInvalid),
        bins_(kNumBins, std::set<Handle, Less>(Less{&chunks_})) {
    const Handle h = NewChunk();
    chunks_[h].ptr = base;
    chunks_[h].size = size;
    handles_[0] = h;
    InsertIntoBin(h);
  }

  // nullptr when nothing fits.
  void* Allocate(std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t rounded =
        bytes < 256 ? 256 : (bytes + 255) & ~std::uint64_t{255};
    for (int b = BinFor(rounded); b < kNumBins; ++b) {
      std::set<Handle, Less>& bin = bins_[b];
      for (auto it = bin.begin(); it != bin.end(); ++it) {
        const Handle h = *it;
        if (chunks_[h].size < rounded) continue;
        bin.erase(it);
        if (chunks_[h].size >= rounded * 2 ||
            chunks_[h].size - rounded >= kMaxInternalFrag) {
          Split(h, rounded);
        }
        chunks_[h].allocated = true;
        return reinterpret_cast<void*>(chunks_[h].ptr);
      }
    }
    return nullptr;
  }

  void Deallocate(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    Handle h =
        handles_[(reinterpret_cast<std::uint64_t>(p) - base_) >> kMinShift];
    chunks_[h].allocated = false;
    const Handle next = chunks_[h].next;
    if (next != kInvalid && !chunks_[next].allocated) {
      RemoveFromBin(next);
      Merge(h, next);
    }
    const Handle prev = chunks_[h].prev;
    if (prev != kInvalid && !chunks_[prev].allocated) {
      RemoveFromBin(prev);
      Merge(prev, h);
      h = prev;
    }
    InsertIntoBin(h);
  }

  std::uint64_t HostTableBytes() const {
    return handles_.size() * sizeof(Handle);
  }

 private:
  using Handle = std::int64_t;  // TensorFlow's ChunkHandle is a size_t
  static constexpr Handle kInvalid = -1;
  static constexpr int kMinShift = 8;
  static constexpr int kNumBins = 21;
  static constexpr std::uint64_t kMaxInternalFrag = std::uint64_t{128} << 20;

  struct Chunk {
    std::uint64_t ptr = 0;
    std::uint64_t size = 0;
    Handle prev = kInvalid;
    Handle next = kInvalid;
    int bin = -1;
    bool allocated = false;
  };
  struct Less {
    const std::vector<Chunk>* chunks;
    bool operator()(Handle a, Handle b) const {
      const Chunk& x = (*chunks)[a];
      const Chunk& y = (*chunks)[b];
      return x.size != y.size ? x.size < y.size : x.ptr < y.ptr;
    }
  };

  static int BinFor(std::uint64_t size) {
    const int b = 63 - __builtin_clzll(size >> kMinShift);
    return b < kNumBins - 1 ? b : kNumBins - 1;
  }

  Handle NewChunk() {
    if (!free_handles_.empty()) {
      const Handle h = free_handles_.back();
      free_handles_.pop_back();
      chunks_[h] = Chunk();
      return h;
    }
    chunks_.emplace_back();
    return static_cast<Handle>(chunks_.size() - 1);
  }

  void InsertIntoBin(Handle h) {
    const int b = BinFor(chunks_[h].size);
    chunks_[h].bin = b;
    bins_[b].insert(h);
  }
  void RemoveFromBin(Handle h) {
    bins_[chunks_[h].bin].erase(h);
    chunks_[h].bin = -1;
  }

  void Split(Handle h, std::uint64_t size) {
    const Handle t = NewChunk();
    Chunk& c = chunks_[h];
    Chunk& n = chunks_[t];
    n.ptr = c.ptr + size;
    n.size = c.size - size;
    c.size = size;
    n.prev = h;
    n.next = c.next;
    if (c.next != kInvalid) chunks_[c.next].prev = t;
    c.next = t;
    handles_[(n.ptr - base_) >> kMinShift] = t;
    InsertIntoBin(t);
  }

  // Merges b, which follows a, into a.
  void Merge(Handle a, Handle b) {
    Chunk& x = chunks_[a];
    const Chunk& y = chunks_[b];
    x.size += y.size;
    x.next = y.next;
    if (y.next != kInvalid) chunks_[y.next].prev = a;
    handles_[(y.ptr - base_) >> kMinShift] = kInvalid;
    free_handles_.push_back(b);
  }

  std::mutex mu_;
  const std::uint64_t base_;
  std::vector<Chunk> chunks_;
  std::vector<Handle> free_handles_;
  std::vector<Handle> handles_;
  std::vector<std::set<Handle, Less>> bins_;
};

}  // namespace gpualloc::bench

#endif  // GPUALLOC_TOOLS_BENCH_TF_BFC_REFERENCE_H_
