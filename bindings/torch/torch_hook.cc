// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_hook.cc: libgpualloc_torch.so, gpualloc as PyTorch's
// CUDA (or ROCm) allocator through torch.cuda.memory.CUDAPluggableAllocator.
//
// Two kinds of entry points:
//
//  - The callbacks PyTorch calls, with exactly the signatures of
//    torch/csrc/cuda/CUDAPluggableAllocator.h (PyTorch 2.1 to 2.9; the
//    python/gpualloc/torch.py helper registers them): malloc, free, init,
//    reset (empty_cache), memory_fraction, record_stream and the graph-pool
//    hooks, in their 2.3+ form (begin_allocate_to_pool with a stream filter)
//    and their 2.1/2.2 form (begin_allocate_stream_to_pool). PyTorch calls
//    them through std::function objects and turns a C++ exception into a
//    Python RuntimeError, so those called from Python (malloc, init, reset,
//    memory_fraction, record_stream, begin_allocate_*) throw
//    gpualloc_torch_error on failure. PyTorch does not check malloc's result:
//    a NULL would become a tensor at address 0, so malloc throws instead.
//    Those PyTorch calls from destructors (free, end_allocate_*,
//    release_pool) never throw: they report.
//
//  - Functions for ctypes and C callers, which never throw: statuses and
//    gpualloc_torch_last_error(), gpualloc_torch_try_malloc (NULL on
//    failure), statistics, snapshots, tags, sleep and wake.
//
// One process-wide gpualloc handle, created at the first call (or by
// gpualloc_torch_configure) with PyTorch's conventions: growth on demand
// unless the environment asks for preallocation (gpualloc_create_pytorch).
// It is never destroyed: PyTorch frees tensors during interpreter shutdown,
// after static destructors would have run.
//
// Failures that cannot throw print the first reason to stderr and keep the
// latest for gpualloc_torch_last_error().
//
// PyTorch passes free the size it allocated. The hook keeps each live
// block's requested size and checks it: a free with another size is
// reported and the block is not freed (a mismatch means the caller's
// bookkeeping is wrong, and freeing could release memory still in use). A
// pointer the hook does not know goes to the allocator, whose message says
// what it is (unknown, freed, or interior: "interior pointer, 256 bytes into
// the allocation at ...").
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gpualloc/gpualloc.h"

// PyTorch's types, laid out as torch's own: cudaStream_t (hipStream_t on
// ROCm builds) is a pointer to an opaque struct; c10::cuda::MempoolId_t is
// std::pair<CaptureId_t, CaptureId_t> with CaptureId_t unsigned long long;
// the capture filter is std::function<bool(cudaStream_t)>.
struct CUstream_st;
using TorchStream = CUstream_st*;
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using StreamFilter = std::function<bool(TorchStream)>;

// What the throwing callbacks throw; PyTorch shows what() in the
// RuntimeError it raises.
class gpualloc_torch_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace {

struct Hook {
  gpualloc_t* handle = nullptr;
  gpualloc_status_t create_status = GPUALLOC_OK;
  std::string create_error;
  std::string config;  // gpualloc_torch_configure's string
  int num_devices = 0;
  // Devices malloc was called for (the first 64), for record_stream, which
  // is not told the device.
  std::atomic<std::uint64_t> used_devices{0};
};

std::mutex create_mu;  // guards the handle's creation and Hook::config
std::atomic<Hook*> created{nullptr};

Hook& Unborn() {
  static Hook* const hook = new Hook;
  return *hook;
}

// Creates the handle from `config` and the environment; create_mu held.
void CreateLocked(Hook& h) {
  h.create_status = gpualloc_create_pytorch(

      h.config.empty() ? nullptr : h.config.c_str(), &h.handle);
  if (h.create_status != GPUALLOC_OK) {
    h.create_error = gpualloc_last_error();
  } else if (gpualloc_device_count(h.handle, &h.num_devices) != GPUALLOC_OK) {
    h.num_devices = 0;
  }
  created.store(&h, std::memory_order_release);
}

Hook& Instance() {
  Hook* h = created.load(std::memory_order_acquire);
  if (h != nullptr) return *h;
  std::lock_guard<std::mutex> lock(create_mu);
  h = created.load(std::memory_order_relaxed);
  if (h != nullptr) return *h;
  CreateLocked(Unborn());
  return Unborn();
}

// The requested size of every live block malloc returned, by (device,
// pointer).
std::mutex sizes_mu;
absl::flat_hash_map<std::pair<int, void*>, std::size_t>& Sizes() {
  static auto* const sizes =
      new absl::flat_hash_map<std::pair<int, void*>, std::size_t>;
  return *sizes;
}

std::mutex error_mu;
std::string& LatestError() {
  static std::string* const error = new std::string;
  return *error;
}
std::atomic<bool> printed{false};

// Keeps `message` as the latest error; prints the first one.
void Fail(const std::string& message) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      LatestError() = message;
    }
    if (!printed.exchange(true)) {
      std::fprintf(stderr,
                   "gpualloc_torch: %s\n(printed once; later errors: "
                   "gpualloc_torch_last_error())\n",
                   message.c_str());
    }
  } catch (...) {
    // Out of host memory while reporting: the caller's failure stands.
  }
}

// The handle, or NULL after reporting why there is none.
gpualloc_t* Handle(const char* function) noexcept {
  try {
    Hook& h = Instance();
    if (h.handle == nullptr) {
      Fail(std::string(function) +
           ": gpualloc could not be set up from the environment: " +
           h.create_error);
    }
    return h.handle;
  } catch (...) {
    return nullptr;
  }
}

void FailWithLastError() noexcept {
  try {
    Fail(gpualloc_last_error());
  } catch (...) {
  }
}

// For the throwing callbacks: the latest error as an exception.
[[noreturn]] void ThrowLatest() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(error_mu);
    message = LatestError();
  }
  throw gpualloc_torch_error("gpualloc: " + message);
}

// A call of the C API: 0 or the status, the reason kept.
template <typename Call>
int Checked(const char* name, Call call) {
  gpualloc_t* handle = Handle(name);
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s = call(handle);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// The tag malloc gives this thread's allocations.
thread_local std::uint32_t current_tag = 0;

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
// Captures by filter underway: malloc asks their filters about its stream.
std::atomic<int> filtered_captures{0};

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

void* Malloc(gpualloc_t* handle, size_t size, int device, void* stream) {
  if (filtered_captures.load(std::memory_order_acquire) != 0) {
    RouteByFilter(handle, device, stream);
  }
  void* p = nullptr;
  if (gpualloc_malloc_tagged(handle, device, size, 0, stream, current_tag,
                             &p) != GPUALLOC_OK) {
    FailWithLastError();
    return nullptr;
  }
  try {
    std::lock_guard<std::mutex> lock(sizes_mu);
    Sizes()[{device, p}] = size;
  } catch (...) {
    // Out of host memory for the bookkeeping: give the block back.
    (void)gpualloc_free(handle, device, p, stream);
    Fail("gpualloc_torch_malloc: out of host memory");
    return nullptr;
  }
  if (device >= 0 && device < 64) {
    Instance().used_devices.fetch_or(std::uint64_t{1} << device,
                                     std::memory_order_relaxed);
  }
  return p;
}

// record_stream without a device: the devices used so far are asked in
// turn until one knows the pointer. False after Fail.
bool RecordStream(gpualloc_t* handle, void* ptr, void* stream) {
  Hook& h = Instance();
  const std::uint64_t used = h.used_devices.load(std::memory_order_relaxed);
  for (int d = 0; d < h.num_devices; ++d) {
    if (d < 64 && (used & (std::uint64_t{1} << d)) == 0) continue;
    if (gpualloc_record_stream(handle, d, ptr, stream) == GPUALLOC_OK) {
      return true;
    }
  }
  char message[200];
  std::snprintf(message, sizeof(message),
                "Tensor.record_stream: %p is not a live allocation on any "
                "device gpualloc served",
                ptr);
  Fail(message);
  return false;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------
// PyTorch's callbacks (CUDAPluggableAllocator), exact signatures.

// alloc_fn: void*(size_t size, int device, cudaStream_t stream). Throws
// gpualloc_torch_error with the out-of-memory report (or the setup error).
GPUALLOC_API void* gpualloc_torch_malloc(size_t size, int device,
                                         TorchStream stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_malloc");
  if (handle == nullptr) ThrowLatest();
  void* p = Malloc(handle, size, device, stream);
  if (p == nullptr) ThrowLatest();
  return p;
}

// free_fn: void(void* ptr, size_t size, int device, cudaStream_t stream),
// the stream malloc was given. Never throws (PyTorch frees in destructors).
GPUALLOC_API void gpualloc_torch_free(void* ptr, size_t size, int device,
                                      TorchStream stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_free");
  if (handle == nullptr) return;
  if (ptr == nullptr) return;
  // A block of the right size leaves the table before it is freed (another
  // thread may be handed the same address at once), and returns to it if
  // the free fails.
  bool known = false;
  try {
    std::lock_guard<std::mutex> lock(sizes_mu);
    auto it = Sizes().find({device, ptr});
    if (it != Sizes().end()) {
      if (it->second != size) {
        char message[256];
        std::snprintf(message, sizeof(message),
                      "gpualloc_torch_free(%p, %zu bytes, device %d): the "
                      "block was allocated with %zu bytes; not freed",
                      ptr, size, device, it->second);
        Fail(message);
        return;
      }
      Sizes().erase(it);
      known = true;
    }
  } catch (...) {
    Fail("gpualloc_torch_free: out of host memory");
    return;
  }
  // An unknown pointer goes to the allocator too: its message says what the
  // pointer is (never allocated, already freed, interior).
  if (gpualloc_free(handle, device, ptr, stream) != GPUALLOC_OK) {
    FailWithLastError();
    if (known) {
      try {
        std::lock_guard<std::mutex> lock(sizes_mu);
        Sizes()[{device, ptr}] = size;
      } catch (...) {
      }
    }
  }
}

// init_fn: void(int device_count), at PyTorch's CUDA initialization. Sets
// gpualloc up, so that a bad setting raises there, naming the variable, and
// checks that gpualloc's backend sees the devices PyTorch sees (not, say,
// the simulator or another vendor's driver).
GPUALLOC_API void gpualloc_torch_init(int device_count) {
  if (Handle("gpualloc_torch_init") == nullptr) ThrowLatest();
  const int seen = Instance().num_devices;
  if (device_count > seen) {
    Fail("PyTorch sees " + std::to_string(device_count) +
         " device(s) but gpualloc's backend sees " + std::to_string(seen) +
         "; check GPUALLOC_BACKEND (auto picks the driver that loads) and "
         "that CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES are set before "
         "the process starts");
    ThrowLatest();
  }
}

// reset_fn: void(), torch.cuda.empty_cache(): every fully free region goes
// back to the device. Throws when that fails (e.g. during a capture).
GPUALLOC_API void gpualloc_torch_reset(void) {
  gpualloc_t* handle = Handle("torch.cuda.empty_cache");
  if (handle == nullptr) ThrowLatest();
  if (gpualloc_trim(handle, GPUALLOC_ALL_DEVICES) != GPUALLOC_OK) {
    FailWithLastError();
    ThrowLatest();
  }
}

// memory_fraction_fn: void(double fraction, int device),
// torch.cuda.set_per_process_memory_fraction: the device's limit becomes
// fraction x its total memory (gpualloc_set_memory_fraction).
GPUALLOC_API void gpualloc_torch_memory_fraction(double fraction, int device) {
  if (Checked("torch.cuda.set_per_process_memory_fraction", [&](gpualloc_t* h) {
        return gpualloc_set_memory_fraction(h, device, fraction);
      }) != GPUALLOC_OK) {
    ThrowLatest();
  }
}

// record_stream_fn: void(void* ptr, cudaStream_t stream),
// Tensor.record_stream: the block is reused on other streams only once the
// work queued so far on `stream` has completed too.
GPUALLOC_API void gpualloc_torch_record_stream(void* ptr, TorchStream stream) {
  gpualloc_t* handle = Handle("Tensor.record_stream");
  if (handle == nullptr) ThrowLatest();
  if (!RecordStream(handle, ptr, stream)) ThrowLatest();
}

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

// ---------------------------------------------------------------------------
// For ctypes and C: statuses, never exceptions.

// Sets gpualloc up now with `config` ("key=value,...", the configuration
// string; NULL or "" for none) over the environment, instead of at the first
// call. 0, or a gpualloc_status_t with the reason (naming the variable or
// key) in gpualloc_torch_last_error(). Once set up, another call with the
// same string is 0 and with another is GPUALLOC_FAILED_PRECONDITION.
GPUALLOC_API int gpualloc_torch_configure(const char* config) {
  const std::string text = config == nullptr ? "" : config;
  Hook* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(create_mu);
    h = created.load(std::memory_order_relaxed);
    if (h == nullptr) {
      Unborn().config = text;
      CreateLocked(Unborn());
      h = &Unborn();
    } else if (h->config != text) {
      Fail("gpualloc_torch_configure(\"" + text +
           "\"): gpualloc is set up already (configuration \"" + h->config +
           "\"); configure before PyTorch's first CUDA allocation");
      return GPUALLOC_FAILED_PRECONDITION;
    }
  }
  if (h->handle == nullptr) {
    Fail(h->create_error);
    return h->create_status;
  }
  return GPUALLOC_OK;
}

// malloc for C callers: NULL on failure, with the reason in
// gpualloc_torch_last_error().
GPUALLOC_API void* gpualloc_torch_try_malloc(size_t size, int device,
                                             void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_try_malloc");
  if (handle == nullptr) return nullptr;
  try {
    return Malloc(handle, size, device, stream);
  } catch (const std::exception& e) {  // a filter that threw
    Fail(e.what());
    return nullptr;
  }
}

// empty_cache for C callers: 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_empty_cache(void) {
  return Checked("gpualloc_torch_empty_cache", [](gpualloc_t* h) {
    return gpualloc_trim(h, GPUALLOC_ALL_DEVICES);
  });
}

// record_stream for C callers: 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_try_record_stream(void* ptr, void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_try_record_stream");
  if (handle == nullptr) return Instance().create_status;
  return RecordStream(handle, ptr, stream) ? GPUALLOC_OK : GPUALLOC_NOT_FOUND;
}

// Before the runtime destroys `stream`: the allocator never touches it
// again on any device (the work queued on it still guards its memory).
// 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_release_stream(void* stream) {
  return Checked("gpualloc_torch_release_stream", [&](gpualloc_t* h) {
    return gpualloc_release_stream(h, GPUALLOC_ALL_DEVICES, stream);
  });
}

// The latest failure's message ("" if none), from any thread. The pointer
// stays valid until the calling thread calls this again.
GPUALLOC_API const char* gpualloc_torch_last_error(void) {
  thread_local std::string copy;
  try {
    std::lock_guard<std::mutex> lock(error_mu);
    copy = LatestError();
  } catch (...) {
    copy.clear();
  }
  return copy.c_str();
}

// 0 and *out filled (set out->struct_size), or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_get_stats(int device, gpualloc_stats_t* out) {
  return Checked("gpualloc_torch_get_stats", [&](gpualloc_t* h) {
    return gpualloc_get_stats(h, device, out);
  });
}

// torch.cuda.reset_peak_memory_stats's replacement. 0 or a status.
GPUALLOC_API int gpualloc_torch_reset_peak_stats(int device) {
  return Checked("gpualloc_torch_reset_peak_stats", [&](gpualloc_t* h) {
    return gpualloc_reset_peak_stats(h, device);
  });
}

// The number of devices the configured backend sees, or -1 (reason in
// gpualloc_torch_last_error()).
GPUALLOC_API int gpualloc_torch_device_count(void) {
  if (Handle("gpualloc_torch_device_count") == nullptr) return -1;
  return Instance().num_devices;
}

// An out-of-memory handler on every device (gpualloc_set_oom_handler with
// GPUALLOC_ALL_DEVICES; NULL removes it). It is called before the
// allocation fails; nonzero retries the request once. 0 or a status.
GPUALLOC_API int gpualloc_torch_set_oom_handler(gpualloc_oom_handler_t handler,
                                                void* user_data) {
  return Checked("gpualloc_torch_set_oom_handler", [&](gpualloc_t* h) {
    return gpualloc_set_oom_handler(h, GPUALLOC_ALL_DEVICES, handler,
                                    user_data);
  });
}

// Sleep and wake (gpualloc.h's gpualloc_sleep says how they behave): the
// calling thread's allocations from now on carry `tag` (0: none), e.g. the
// weights or the KV cache; later the tag's memory is given back and mapped
// again at the same addresses. 0 or a status.
GPUALLOC_API void gpualloc_torch_set_tag(uint32_t tag) { current_tag = tag; }
GPUALLOC_API int gpualloc_torch_sleep(int device, uint32_t tag, int backup) {
  return Checked("gpualloc_torch_sleep", [&](gpualloc_t* h) {
    return gpualloc_sleep(h, device, tag, backup, nullptr);
  });
}
GPUALLOC_API int gpualloc_torch_wake(int device, uint32_t tag) {
  return Checked("gpualloc_torch_wake",
                 [&](gpualloc_t* h) { return gpualloc_wake(h, device, tag); });
}

// The device's snapshot as JSON (docs/REFERENCE.md, "Snapshot JSON"), to be
// released with gpualloc_torch_string_free; NULL on failure.
GPUALLOC_API char* gpualloc_torch_snapshot_json(int device) {
  gpualloc_t* handle = Handle("gpualloc_torch_snapshot_json");
  if (handle == nullptr) return nullptr;
  char* json = nullptr;
  if (gpualloc_snapshot_json(handle, device, &json, nullptr) != GPUALLOC_OK) {
    FailWithLastError();
    return nullptr;
  }
  return json;
}

GPUALLOC_API void gpualloc_torch_string_free(char* text) {
  gpualloc_string_free(text);
}

// The device's snapshot with its allocation history (history=N) as the
// pickle torch.cuda.memory._dump_snapshot writes, for
// https://pytorch.org/memory_viz, written to `path`. 0 or a status.
GPUALLOC_API int gpualloc_torch_snapshot_pickle(int device, const char* path) {
  return Checked("gpualloc_torch_snapshot_pickle", [&](gpualloc_t* h) {
    return gpualloc_snapshot_torch_pickle(h, device, path);
  });
}

// The calling thread's context for the history's events (an op name, a
// Python stack); NULL or "" clears it. Each distinct text is kept for the
// life of the process.
GPUALLOC_API void gpualloc_torch_set_context(const char* context) {
  gpualloc_set_context(context);
}

}  // extern "C"
