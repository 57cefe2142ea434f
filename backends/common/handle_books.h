// SPDX-License-Identifier: Apache-2.0
// backends/common/handle_books.h: the host-side record of what a vendor
// backend handed out and has not been given back: plain blocks, blocks of its
// stream-ordered pool, events, what OpenIpcHandle mapped, page-locked host
// blocks and blocks of completion counters (virtual memory has its own
// ledger, vmm_ledger.h). The CUDA and HIP
// backends keep one each, so that a call naming something the backend did not
// hand out is answered with InvalidArgument before any vendor call, in one
// wording for both:
//   "<prefix>Free(0x7f00): not an address Allocate returned on device 0, or
//    freed already"
//   "<prefix>RecordEvent(event 0x51): not an event CreateEvent returned on
//    device 0, or destroyed already"
// (the prefix is the backend's: "HIP " for HIP, none for CUDA).
//
// Giving something back (Release*) follows ReleaseTracked (tracked.h): the
// entry leaves the books before the vendor call and comes back when the call
// fails.
//
// Thread safety: all methods are thread-safe (the books' own lock, never held
// across a vendor call).
#ifndef GPUALLOC_BACKENDS_COMMON_HANDLE_BOOKS_H_
#define GPUALLOC_BACKENDS_COMMON_HANDLE_BOOKS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/common/counters.h"
#include "backends/common/tracked.h"
#include "backends/layer.h"
#include "core/lock.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::common {

// A block of completion counters: the host memory the device writes (what
// the vendor frees), the same memory's device address (what the stream calls
// name) and how many counters it holds.
struct CounterRecord {
  void* host = nullptr;
  std::uint64_t device = 0;
  std::size_t count = 0;
};

// `Block` is what the backend keeps for a plain block (its size, or what to
// give back to the vendor).
template <typename Block>
class HandleBooks {
 public:
  // What was still recorded when the books were emptied (TakeAll).
  struct Leftovers {
    std::vector<std::pair<DeviceAddress, Block>> blocks;
    std::vector<DeviceAddress> pool_blocks;
    std::vector<EventHandle> events;
    std::vector<DeviceAddress> opened;
    std::vector<void*> host_blocks;
    std::vector<CounterRecord> counter_blocks;
  };

  // `prefix` starts every message; `ordinal` is the backend's device.
  HandleBooks(std::string prefix, int ordinal)
      : prefix_(std::move(prefix)), ordinal_(ordinal) {}
  HandleBooks(const HandleBooks&) = delete;
  HandleBooks& operator=(const HandleBooks&) = delete;

  // InvalidArgument: `call` named `address`, which `handed_out_by` did not
  // return (or which was given back already).
  absl::Status NotHandedOut(absl::string_view call, DeviceAddress address,
                            absl::string_view handed_out_by) const {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix_, call, "(", Hex(address), "): not an address ", handed_out_by,
        " returned on device ", ordinal_, ", or freed already"));
  }
  // InvalidArgument: `call` named an event CreateEvent did not return (or
  // one destroyed already).
  absl::Status UnknownEvent(absl::string_view call, EventHandle event) const {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, call, "(event ", Hex(event),
                     "): not an event CreateEvent returned on device ",
                     ordinal_, ", or destroyed already"));
  }

  // --- Plain blocks (Allocate / Free) ---
  void AddBlock(DeviceAddress address, Block block) {
    core::LockGuard guard(&mu_);
    blocks_.insert_or_assign(address, std::move(block));
  }
  // Free of `address`: `release(const Block&)` makes the vendor call.
  template <typename Release>
  absl::Status ReleaseBlock(DeviceAddress address, Release release) {
    return ReleaseTracked<core::LockGuard>(
        &mu_, &blocks_, address,
        [&] { return NotHandedOut("Free", address, "Allocate"); },
        [&](const auto& node) { return release(node.mapped()); });
  }

  // OK when `address` is the start of a block Allocate returned and not
  // freed; `call` names the asking call ("GetIpcHandle").
  absl::Status CheckBlock(absl::string_view call, DeviceAddress address) const {
    core::LockGuard guard(&mu_);
    if (blocks_.contains(address)) return absl::OkStatus();
    return NotHandedOut(call, address, "Allocate");
  }
  // The block's record, for a call that needs what the backend keeps of it.
  // InvalidArgument as CheckBlock.
  absl::StatusOr<Block> FindBlock(absl::string_view call,
                                  DeviceAddress address) const {
    core::LockGuard guard(&mu_);
    auto it = blocks_.find(address);
    if (it != blocks_.end()) return it->second;
    return NotHandedOut(call, address, "Allocate");
  }

  // --- Allocations of other processes (OpenIpcHandle / CloseIpcHandle) ---
  // A handle opened again in one context gives the same address and the
  // driver counts the opens (cuIpcOpenMemHandle): so do the books, one
  // CloseIpcHandle per open.
  void AddOpened(DeviceAddress address) {
    core::LockGuard guard(&mu_);
    ++opened_[address];
  }
  // CloseIpcHandle of `address`: `release()` makes the vendor call. The
  // open is counted down before the call and back up when it fails.
  template <typename Release>
  absl::Status ReleaseOpened(DeviceAddress address, Release release) {
    {
      core::LockGuard guard(&mu_);
      auto it = opened_.find(address);
      if (it == opened_.end()) {
        return NotHandedOut("CloseIpcHandle", address, "OpenIpcHandle");
      }
      if (--it->second == 0) opened_.erase(it);
    }
    absl::Status status = release();
    if (!status.ok()) {
      core::LockGuard guard(&mu_);
      ++opened_[address];
    }
    return status;
  }

  // --- Page-locked host memory (HostAllocate / HostFree) ---
  void AddHostBlock(void* pointer, std::uint64_t bytes) {
    core::LockGuard guard(&mu_);
    host_blocks_.insert_or_assign(pointer, bytes);
  }
  // HostFree of `pointer`: `release()` makes the vendor call. A pointer
  // HostAllocate did not return is InvalidArgument without one.
  template <typename Release>
  absl::Status ReleaseHostBlock(void* pointer, Release release) {
    return ReleaseTracked<core::LockGuard>(
        &mu_, &host_blocks_, pointer,
        [&] {
          return absl::InvalidArgumentError(
              absl::StrCat(prefix_, "HostFree(", absl::StrFormat("%p", pointer),
                           "): not a pointer HostAllocate returned on device ",
                           ordinal_, ", or freed already"));
        },
        [&](const auto&) { return release(); });
  }
  std::size_t host_block_count() const {
    core::LockGuard guard(&mu_);
    return host_blocks_.size();
  }

  // --- Pool blocks (PoolAllocate / PoolFree) ---
  void AddPoolBlock(DeviceAddress address) {
    core::LockGuard guard(&mu_);
    pool_blocks_.insert(address);
  }
  // PoolFree of `address`: `release()` makes the vendor call.
  template <typename Release>
  absl::Status ReleasePoolBlock(DeviceAddress address, Release release) {
    return ReleaseTracked<core::LockGuard>(
        &mu_, &pool_blocks_, address,
        [&] { return NotHandedOut("PoolFree", address, "PoolAllocate"); },
        [&](const auto&) { return release(); });
  }

  // --- Events (CreateEvent / DestroyEvent and the calls naming one) ---
  void AddEvent(EventHandle event) {
    core::LockGuard guard(&mu_);
    events_.insert(event);
  }
  // OK when `event` is one CreateEvent returned and not destroyed.
  absl::Status CheckEvent(absl::string_view call, EventHandle event) const {
    core::LockGuard guard(&mu_);
    if (events_.contains(event)) return absl::OkStatus();
    return UnknownEvent(call, event);
  }
  // DestroyEvent of `event`: `release()` makes the vendor call.
  template <typename Release>
  absl::Status ReleaseEvent(EventHandle event, Release release) {
    return ReleaseTracked<core::LockGuard>(
        &mu_, &events_, event,
        [&] { return UnknownEvent("DestroyEvent", event); },
        [&](const auto&) { return release(); });
  }

  // --- Completion counters (CreateCounters / DestroyCounters) ---
  // Records a block and answers its handle: a number of the books' own,
  // never 0 and never reused (a stale handle cannot name a later block).
  CounterHandle AddCounters(const CounterRecord& record) {
    core::LockGuard guard(&mu_);
    const CounterHandle handle = ++last_counters_;
    counters_.insert_or_assign(handle, record);
    return handle;
  }
  // The block `call` (WriteCounter, WaitCounter) names, once the index and
  // the value pass the checks of counters.h; InvalidArgument otherwise.
  absl::StatusOr<CounterRecord> FindCounter(absl::string_view call,
                                            CounterHandle handle,
                                            std::size_t index,
                                            std::uint64_t value) const {
    core::LockGuard guard(&mu_);
    auto it = counters_.find(handle);
    if (it == counters_.end()) {
      return UnknownCounters(prefix_, call, handle, ordinal_);
    }
    if (absl::Status s = CheckCounterAccess(prefix_, call, handle, index, value,
                                            it->second.count);
        !s.ok()) {
      return s;
    }
    return it->second;
  }
  // DestroyCounters of `handle`: `release(const CounterRecord&)` makes the
  // vendor call.
  template <typename Release>
  absl::Status ReleaseCounters(CounterHandle handle, Release release) {
    return ReleaseTracked<core::LockGuard>(
        &mu_, &counters_, handle,
        [&] {
          return UnknownCounters(prefix_, "DestroyCounters", handle, ordinal_);
        },
        [&](const auto& node) { return release(node.mapped()); });
  }
  std::size_t counter_block_count() const {
    core::LockGuard guard(&mu_);
    return counters_.size();
  }

  // Empties the books and answers what they held (a destructor giving
  // everything back).
  Leftovers TakeAll() {
    core::LockGuard guard(&mu_);
    Leftovers out;
    for (auto& [address, block] : blocks_) {
      out.blocks.emplace_back(address, std::move(block));
    }
    out.pool_blocks.assign(pool_blocks_.begin(), pool_blocks_.end());
    out.events.assign(events_.begin(), events_.end());
    for (const auto& [address, opens] : opened_) {
      out.opened.insert(out.opened.end(), opens, address);
    }
    for (const auto& [pointer, bytes] : host_blocks_) {
      out.host_blocks.push_back(pointer);
    }
    for (const auto& [handle, record] : counters_) {
      out.counter_blocks.push_back(record);
    }
    counters_.clear();
    opened_.clear();
    host_blocks_.clear();
    blocks_.clear();
    pool_blocks_.clear();
    events_.clear();
    return out;
  }

 private:
  static std::string Hex(std::uint64_t x) { return absl::StrFormat("%#x", x); }

  const std::string prefix_;
  const int ordinal_;
  mutable core::Lock mu_;
  absl::flat_hash_map<DeviceAddress, Block> blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<DeviceAddress> pool_blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<EventHandle> events_ ABSL_GUARDED_BY(mu_);
  // Address -> opens not yet closed.
  absl::flat_hash_map<DeviceAddress, int> opened_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, std::uint64_t> host_blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CounterHandle, CounterRecord> counters_
      ABSL_GUARDED_BY(mu_);
  CounterHandle last_counters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_HANDLE_BOOKS_H_
