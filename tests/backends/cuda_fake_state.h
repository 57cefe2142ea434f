// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_fake_state.h: the fake CUDA driver's model, shared by
// its sources (cuda_fake_driver.cc: devices, contexts, plain memory, events,
// virtual memory, the pool, copies; cuda_fake_sharing.cc: IPC handles,
// shareable handles, host memory, completion counters). Only those two
// include it.
#ifndef GPUALLOC_TESTS_BACKENDS_CUDA_FAKE_STATE_H_
#define GPUALLOC_TESTS_BACKENDS_CUDA_FAKE_STATE_H_

#include <cuda.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tests/backends/cuda_fake_driver.h"
#include "tests/backends/fake_device_bytes.h"

namespace gpualloc::cuda::testing {
namespace fake_internal {

using gpualloc::testing::FakeDeviceBytes;
using gpualloc::testing::FakeRegion;
using gpualloc::testing::FakeRegionKind;

inline constexpr CUdeviceptr kAddressBase = 0x7f0000000000;
inline constexpr CUdeviceptr kReserveBase = 0x200000000000;
// Where mapped host blocks (CU_MEMHOSTALLOC_DEVICEMAP) appear to the device:
// an address of its own, not the host pointer, so that a backend handing the
// host pointer to a stream call is caught.
inline constexpr CUdeviceptr kMappedHostBase = 0x600000000000;

inline std::uint64_t RoundUp(std::uint64_t x, std::uint64_t to) {
  return (x + to - 1) / to * to;
}

// The installed fake (null when none), and the calling thread's context.
FakeCudaDriver* Installed();
CUcontext CurrentContext();
// The entry points cuda_fake_sharing.cc serves, by base name.
void AddSharingEntryPoints(std::map<std::string, void*>* table);

}  // namespace fake_internal

struct FakeCudaDriver::State {
  std::vector<Request> requests;
  std::vector<std::string> calls;
  absl::flat_hash_map<std::string, std::pair<int, CUresult>> failures;
  absl::flat_hash_map<std::string, CUresult> always_failures;
  bool work_pending = false;
  bool initialized = false;
  int context_refs = 0;
  std::uint64_t used = 0;  // device memory in use (granule-rounded)
  CUdeviceptr next_address = fake_internal::kAddressBase;
  CUdeviceptr next_reservation = fake_internal::kReserveBase;
  std::map<CUdeviceptr, std::uint64_t> allocations;
  struct Event {
    bool recorded = false;
    bool done = true;
    // Where and when it was last recorded (`seq` orders records and counter
    // writes).
    std::uintptr_t stream = 0;
    std::uint64_t seq = 0;
  };
  std::map<std::uintptr_t, Event> events;
  std::uintptr_t next_event = 0xe0000;
  std::map<CUdeviceptr, std::uint64_t> reservations;
  struct Handle {
    std::uint64_t bytes = 0;
    int refs = 1;  // cuMemRelease calls it takes (cuMemRetainAllocationHandle
                   // adds one)
    int mappings = 0;
    // The memory behind it: its own id for a created handle, the exporter's
    // for an imported one (which does not count in `used`).
    CUmemGenericAllocationHandle memory = 0;
    bool exportable = false;  // requestedHandleTypes had POSIX_FILE_DESCRIPTOR
    bool released() const { return refs == 0; }
  };
  std::map<CUmemGenericAllocationHandle, Handle> handles;
  CUmemGenericAllocationHandle next_handle = 0x4000;
  struct Mapping {
    std::uint64_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool accessible = false;
  };
  std::map<CUdeviceptr, Mapping> mappings;
  bool pool_created = false;
  std::map<int, std::uint64_t> pool_attributes;
  std::map<CUdeviceptr, std::uint64_t> pool_blocks;  // granule-rounded sizes
  std::uint64_t pool_used = 0, pool_reserved = 0, pool_used_high = 0,
                pool_reserved_high = 0;
  std::map<std::uintptr_t, int> capture_status;  // raw values
  // The bytes behind the addresses, for cuMemcpyDtoH / cuMemcpyHtoD.
  fake_internal::FakeDeviceBytes bytes;

  // --- Sharing and host memory (cuda_fake_sharing.cc) ---
  // Physical memory by its id (the creating handle): size and the handles
  // referring to it.
  struct Memory {
    std::uint64_t bytes = 0;
    int refs = 0;
  };
  std::map<CUmemGenericAllocationHandle, Memory> memories;
  int last_requested_handle_types = -1;  // cuMemCreate's, -1 before one
  // The fake process making the calls now (SetProcess); IPC handles carry
  // the one that made them.
  int process = 0;
  // Allocations opened through IPC handles: where their bytes live. A
  // handle opened again by the same process gives the same address and
  // counts the open, as the driver does; each close counts one down.
  struct Opened {
    std::uint64_t bytes = 0;
    CUdeviceptr source = 0;  // the exporter's allocation
    std::uint64_t source_offset = 0;
    int process = 0;  // the process that opened it
    int opens = 1;
  };
  std::map<CUdeviceptr, Opened> opened;
  // Descriptors cuMemExportToShareableHandle made (memfds), by inode: the
  // memory they stand for.
  std::map<std::uint64_t, CUmemGenericAllocationHandle> exports;
  // cuMemHostAlloc's blocks (real memory) and flags.
  std::map<void*, std::uint64_t> host_blocks;
  unsigned int last_host_flags = 0;
  // The blocks made with CU_MEMHOSTALLOC_DEVICEMAP: their device address
  // (cuMemHostGetDevicePointer), and back.
  std::map<void*, CUdeviceptr> mapped_host;
  std::map<CUdeviceptr, void*> mapped_device;
  CUdeviceptr next_mapped = fake_internal::kMappedHostBase;
  // cuStreamWriteValue64 writes made while work is pending (SetWorkPending),
  // in queue order: they land at CompletePendingWork, at a synchronization
  // of an event recorded after them on their stream, or when the device
  // synchronizes (cuMemFree, cuMemFreeHost).
  struct CounterWrite {
    std::uintptr_t stream = 0;
    std::uint64_t seq = 0;
    std::uint64_t* at = nullptr;
    std::uint64_t value = 0;
  };
  std::vector<CounterWrite> pending_writes;
  std::uint64_t seq = 0;
  // The flags of the last cuStreamWriteValue64 and cuStreamWaitValue64.
  unsigned int last_write_flags = ~0u;
  unsigned int last_wait_flags = ~0u;
  // Where the device address `at` of a mapped host block points on the host
  // (8 bytes, aligned), or null.
  std::uint64_t* MappedSlot(CUdeviceptr at) const {
    auto it = mapped_device.upper_bound(at);
    if (it == mapped_device.begin() || at % 8 != 0) return nullptr;
    --it;
    const std::uint64_t bytes = host_blocks.at(it->second);
    if (at + 8 > it->first + bytes) return nullptr;
    return reinterpret_cast<std::uint64_t*>(static_cast<char*>(it->second) +
                                            (at - it->first));
  }

  CUdeviceptr NewAddress(std::uint64_t bytes, std::uint64_t granule) {
    const CUdeviceptr at = next_address;
    next_address +=
        fake_internal::RoundUp(bytes, granule) + granule;  // a guard granule
    return at;
  }
  // Forgets a handle once it is released and unmapped; its memory goes once
  // no handle (created or imported) refers to it.
  void MaybeFreeHandle(CUmemGenericAllocationHandle h) {
    auto it = handles.find(h);
    if (it != handles.end() && it->second.released() &&
        it->second.mappings == 0) {
      const CUmemGenericAllocationHandle memory = it->second.memory;
      handles.erase(it);
      auto m = memories.find(memory);
      if (m != memories.end() && --m->second.refs == 0) {
        used -= m->second.bytes;
        memories.erase(m);
        bytes.Drop({fake_internal::FakeRegionKind::kPhysical, memory});
      }
    }
  }
  // Where a copy may touch `address`: a plain allocation, a pool block, or
  // a mapping with access set (its handle's bytes).
  std::optional<fake_internal::FakeRegion> CopyRegion(
      CUdeviceptr address) const {
    const auto size = [](std::uint64_t n) { return n; };
    if (auto r = fake_internal::FakeDeviceBytes::In(allocations, address, size))
      return r;
    if (auto r = fake_internal::FakeDeviceBytes::In(pool_blocks, address, size))
      return r;
    auto r = fake_internal::FakeDeviceBytes::In(
        mappings, address,
        [](const Mapping& m) { return m.accessible ? m.bytes : 0; });
    if (r) {
      const CUmemGenericAllocationHandle h = mappings.at(r->key.second).handle;
      r->key = {fake_internal::FakeRegionKind::kPhysical, handles.at(h).memory};
      return r;
    }
    // An allocation of another (fake) process, opened here: its bytes.
    r = fake_internal::FakeDeviceBytes::In(
        opened, address, [](const Opened& o) { return o.bytes; });
    if (r) {
      const Opened& o = opened.at(r->key.second);
      r->key = {fake_internal::FakeRegionKind::kAllocation, o.source};
      r->offset += o.source_offset;
    }
    return r;
  }
  ~State();
};

namespace fake_internal {
// Lands the queued counter writes `due` accepts, in queue order (the fake's
// lock held).
template <typename Due>
void LandCounterWrites(FakeCudaDriver::State& s, Due due) {
  std::vector<FakeCudaDriver::State::CounterWrite> kept;
  for (const FakeCudaDriver::State::CounterWrite& w : s.pending_writes) {
    if (due(w)) {
      __atomic_store_n(w.at, w.value, __ATOMIC_RELEASE);
    } else {
      kept.push_back(w);
    }
  }
  s.pending_writes = std::move(kept);
}
}  // namespace fake_internal

}  // namespace gpualloc::cuda::testing

#endif  // GPUALLOC_TESTS_BACKENDS_CUDA_FAKE_STATE_H_
