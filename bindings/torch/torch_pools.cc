// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_pools.cc: libgpualloc_torch.so's graph pools: PyTorch's
// pools (a MempoolId per device) as gpualloc pools, the captures allocating
// to them (by stream filter in PyTorch 2.3+, by stream in 2.1/2.2), and
// PyTorch's graph-pool callbacks (torch_hook.cc says how the hook works).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bindings/torch/torch_hook_internal.h"
#include "gpualloc/gpualloc.h"

namespace gpualloc::torch_internal {
namespace {

// --- Graph pools -----------------------------------------------------------
// PyTorch names a pool by a MempoolId per device; gpualloc by a pool id. A
// pool exists from the first begin naming it until as many release_pool
// calls as begins (PyTorch calls begin once per capture into the pool and
// release once per graph destroyed).
struct PoolKey {
  int device;
  MempoolId id;
  bool operator==(const PoolKey& o) const {
    return device == o.device && id == o.id;
  }
  template <typename H>
  friend H AbslHashValue(H h, const PoolKey& k) {
    return H::combine(std::move(h), k.device, k.id.first, k.id.second);
  }
};

struct PoolEntry {
  std::uint64_t pool = 0;
  int references = 0;
  // A stream that allocated to it, given to gpualloc as the last use when
  // the pool goes.
  void* stream = nullptr;
};

// A capture (2.3+: by filter) or a stream (2.1/2.2) allocating to a pool.
struct Capture {
  PoolKey key;
  std::uint64_t pool = 0;
  StreamFilter filter;         // empty in the 2.1/2.2 form
  std::vector<void*> streams;  // routed to the pool in gpualloc
};

std::mutex pools_mu;
absl::flat_hash_map<PoolKey, PoolEntry>& Pools() {
  static auto* const pools = new absl::flat_hash_map<PoolKey, PoolEntry>;
  return *pools;
}
std::vector<Capture>& Captures() {
  static auto* const captures = new std::vector<Capture>;
  return *captures;
}

// The pool for `key`, made or retained; pools_mu held. 0 after Fail.
std::uint64_t AcquirePoolLocked(gpualloc_t* handle, const PoolKey& key) {
  auto it = Pools().find(key);
  if (it != Pools().end()) {
    if (gpualloc_retain_pool(handle, key.device, it->second.pool) !=
        GPUALLOC_OK) {
      FailWithLastError();
      return 0;
    }
    ++it->second.references;
    return it->second.pool;
  }
  std::uint64_t pool = 0;
  if (gpualloc_create_pool(handle, key.device, &pool) != GPUALLOC_OK) {
    FailWithLastError();
    return 0;
  }
  Pools()[key] = PoolEntry{pool, 1, nullptr};
  return pool;
}

std::string PoolName(const PoolKey& key) {
  return "pool (" + std::to_string(key.id.first) + ", " +
         std::to_string(key.id.second) + ") of device " +
         std::to_string(key.device);
}

// Routes `stream` to `c`'s pool in gpualloc; pools_mu held.
bool RouteLocked(gpualloc_t* handle, Capture& c, void* stream) {
  if (gpualloc_begin_allocate_to_pool(handle, c.key.device, c.pool, stream) !=
      GPUALLOC_OK) {
    FailWithLastError();
    return false;
  }
  c.streams.push_back(stream);
  Pools()[c.key].stream = stream;
  return true;
}

// Ends the capture `match` selects; pools_mu held. Never throws.
template <typename Match>
void EndCaptureLocked(gpualloc_t* handle, Match match) {
  auto& captures = Captures();
  for (auto it = captures.begin(); it != captures.end(); ++it) {
    if (!match(*it)) continue;
    if (!it->streams.empty() &&
        gpualloc_end_allocate_to_pool(handle, it->key.device, it->pool) !=
            GPUALLOC_OK) {
      FailWithLastError();
    }
    if (it->filter) filtered_captures.fetch_sub(1, std::memory_order_release);
    captures.erase(it);
    return;
  }
}

}  // namespace

// Captures by filter underway: malloc asks their filters about its stream.
std::atomic<int> filtered_captures{0};

// Before malloc on `stream` while captures by filter are underway: a stream
// a filter accepts allocates to that capture's pool.
void RouteByFilter(gpualloc_t* handle, int device, void* stream) {
  std::lock_guard<std::mutex> lock(pools_mu);
  for (Capture& c : Captures()) {
    if (!c.filter || c.key.device != device) continue;
    if (std::find(c.streams.begin(), c.streams.end(), stream) !=
        c.streams.end()) {
      return;  // routed already
    }
    if (c.filter(static_cast<TorchStream>(stream))) {
      if (!RouteLocked(handle, c, stream)) ThrowLatest();
      return;
    }
  }
}

}  // namespace gpualloc::torch_internal

using gpualloc::torch_internal::AcquirePoolLocked;
using gpualloc::torch_internal::Capture;
using gpualloc::torch_internal::Captures;
using gpualloc::torch_internal::EndCaptureLocked;
using gpualloc::torch_internal::Fail;
using gpualloc::torch_internal::FailWithLastError;
using gpualloc::torch_internal::filtered_captures;
using gpualloc::torch_internal::Handle;
using gpualloc::torch_internal::PoolEntry;
using gpualloc::torch_internal::PoolKey;
using gpualloc::torch_internal::PoolName;
using gpualloc::torch_internal::Pools;
using gpualloc::torch_internal::pools_mu;
using gpualloc::torch_internal::RouteLocked;
using gpualloc::torch_internal::ThrowLatest;

extern "C" {

// ---------------------------------------------------------------------------
// PyTorch's graph-pool callbacks (CUDAPluggableAllocator), exact signatures.

// PyTorch 2.3+: begin_allocate_to_pool_fn: void(int device, MempoolId_t,
// std::function<bool(cudaStream_t)> filter). Until the matching end, every
// allocation on a stream the filter accepts (the capturing one) comes from
// the pool. Throws when the pool cannot be made.
GPUALLOC_API void gpualloc_torch_begin_allocate_to_pool(int device,
                                                        MempoolId mempool_id,
                                                        StreamFilter filter) {
  gpualloc_t* handle = Handle("gpualloc_torch_begin_allocate_to_pool");
  if (handle == nullptr) ThrowLatest();
  std::lock_guard<std::mutex> lock(pools_mu);
  const PoolKey key{device, mempool_id};
  const std::uint64_t pool = AcquirePoolLocked(handle, key);
  if (pool == 0) ThrowLatest();
  Captures().push_back(Capture{key, pool, std::move(filter), {}});
  filtered_captures.fetch_add(1, std::memory_order_release);
}

// PyTorch 2.3+: end_allocate_to_pool_fn: void(int device, MempoolId_t).
// Never throws.
GPUALLOC_API void gpualloc_torch_end_allocate_to_pool(int device,
                                                      MempoolId mempool_id) {
  gpualloc_t* handle = Handle("gpualloc_torch_end_allocate_to_pool");
  if (handle == nullptr) return;
  std::lock_guard<std::mutex> lock(pools_mu);
  const PoolKey key{device, mempool_id};
  EndCaptureLocked(handle, [&](const Capture& c) { return c.key == key; });
}

// PyTorch 2.1+: release_pool_fn: void(int device, MempoolId_t), when a graph
// (or MemPool) using the pool is destroyed. The last release gives the
// pool's memory back to the allocator, reusable elsewhere once the work
// queued on the stream that allocated to it and on the default stream (where
// graphs usually replay) has completed. Never throws (PyTorch calls it from
// a destructor).
GPUALLOC_API void gpualloc_torch_release_pool(int device,
                                              MempoolId mempool_id) {
  gpualloc_t* handle = Handle("gpualloc_torch_release_pool");
  if (handle == nullptr) return;
  std::lock_guard<std::mutex> lock(pools_mu);
  const PoolKey key{device, mempool_id};
  auto it = Pools().find(key);
  if (it == Pools().end()) {
    Fail("gpualloc_torch_release_pool: " + PoolName(key) +
         " was never allocated to (or is released already)");
    return;
  }
  PoolEntry& entry = it->second;
  // The default stream as the last use; the pool's own streams are known to
  // gpualloc already.
  if (gpualloc_release_pool(handle, device, entry.pool, nullptr) !=
      GPUALLOC_OK) {
    FailWithLastError();
    return;
  }
  if (--entry.references == 0) Pools().erase(it);
}

// PyTorch 2.1 and 2.2: begin_allocate_stream_to_pool_fn: void(int device,
// cudaStream_t stream, MempoolId_t). Throws when the pool cannot be made.
GPUALLOC_API void gpualloc_torch_begin_allocate_stream_to_pool(
    int device, TorchStream stream, MempoolId mempool_id) {
  gpualloc_t* handle = Handle("gpualloc_torch_begin_allocate_stream_to_pool");
  if (handle == nullptr) ThrowLatest();
  std::lock_guard<std::mutex> lock(pools_mu);
  const PoolKey key{device, mempool_id};
  const std::uint64_t pool = AcquirePoolLocked(handle, key);
  if (pool == 0) ThrowLatest();
  Captures().push_back(Capture{key, pool, StreamFilter(), {}});
  if (!RouteLocked(handle, Captures().back(), stream)) {
    Captures().pop_back();
    if (gpualloc_release_pool(handle, device, pool, nullptr) == GPUALLOC_OK &&
        --Pools()[key].references == 0) {
      Pools().erase(key);
    }
    ThrowLatest();
  }
}

// PyTorch 2.1 and 2.2: end_allocate_stream_to_pool_fn: void(int device,
// cudaStream_t stream). Never throws.
GPUALLOC_API void gpualloc_torch_end_allocate_stream_to_pool(
    int device, TorchStream stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_end_allocate_stream_to_pool");
  if (handle == nullptr) return;
  std::lock_guard<std::mutex> lock(pools_mu);
  void* const s = stream;
  EndCaptureLocked(handle, [&](const Capture& c) {
    return !c.filter && c.key.device == device && !c.streams.empty() &&
           c.streams.front() == s;
  });
}

}  // extern "C"
