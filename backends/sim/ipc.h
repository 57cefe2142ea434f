// SPDX-License-Identifier: Apache-2.0
// backends/sim/ipc.h: sharing the simulator's memory with another SimBackend,
// which stands for another process (gpualloc/backends/sim_backend.h has the
// contract): IPC handles of plain allocations, and mappings exported as file
// descriptors.
//
// An IpcHandle's 64 bytes hold an IpcRecord: a magic number, the exporter's
// pid, the number of the memfd the exporter keeps open (host-backed memory;
// -1 for fake memory), the size, the exporting instance's id and the
// allocation's address there. In the exporting process the handle is checked
// against a process-wide registry of the handles alive (so a stale handle is
// refused, not mapped); in another process the memfd is fetched with
// pidfd_open + pidfd_getfd (which needs ptrace permission over the exporter)
// and checked against the size. An exported mapping's descriptor is the
// mapping's memfd (host-backed) or, for fake memory, a small memfd holding a
// token (magic, pid, instance, bytes), which ImportPhysical reads back.
//
// Not thread-safe: the backend holds its lock around every use (the registry
// has a lock of its own, shared by every instance).
#ifndef GPUALLOC_BACKENDS_SIM_IPC_H_
#define GPUALLOC_BACKENDS_SIM_IPC_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "backends/sim/placement.h"
#include "backends/sim/virtual_memory.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// What an IpcHandle made by the simulator holds (little-endian, packed into
// the handle's first 48 bytes; the rest is zero).
struct IpcRecord {
  static constexpr std::uint32_t kMagic = 0x50495347;  // "GSIP"
  std::uint32_t magic = kMagic;
  std::uint32_t version = 1;
  std::uint64_t pid = 0;
  std::int64_t fd = -1;
  std::uint64_t size = 0;
  std::uint64_t instance = 0;
  std::uint64_t address = 0;
};

class Ipc {
 public:
  Ipc(SimMemory memory, const DeviceInfo& info, std::uint64_t host_page_size,
      Placement* placement, VirtualMemory* vm);
  // Unmaps what this instance opened; its handles die with it.
  ~Ipc();
  Ipc(const Ipc&) = delete;
  Ipc& operator=(const Ipc&) = delete;

  absl::StatusOr<IpcHandle> GetHandle(DeviceAddress base);
  absl::StatusOr<DeviceAddress> Open(const IpcHandle& handle);
  absl::Status Close(DeviceAddress address);
  // The plain allocation at `base` is being freed: its handle dies.
  void Forget(DeviceAddress base);
  absl::StatusOr<int> ExportMapping(DeviceAddress address);
  absl::StatusOr<PhysicalHandle> ImportPhysical(int fd, std::uint64_t bytes);

  // The size of what Open mapped at `address`, or 0.
  std::uint64_t OpenedSize(DeviceAddress address) const;
  // Whether all of [start, end) lies in one range Open mapped.
  bool Holds(DeviceAddress start, DeviceAddress end) const;
  // The range Open mapped that holds `address` (start, size), or (0, 0).
  std::pair<DeviceAddress, std::uint64_t> RangeOf(DeviceAddress address) const;
  std::uint64_t instance() const { return instance_; }

 private:
  struct Opened {
    std::uint64_t size = 0;
    std::uint64_t length = 0;  // host-backed: the host mapping's length
  };
  absl::Status Invalid(absl::string_view call, absl::string_view why) const;

  const SimMemory memory_;
  const DeviceInfo& info_;
  const std::uint64_t host_page_size_;
  Placement* const placement_;
  VirtualMemory* const vm_;
  const std::uint64_t instance_;
  absl::btree_map<DeviceAddress, Opened> opened_;
  // The plain allocations this instance made handles for: address -> size.
  absl::btree_map<DeviceAddress, std::uint64_t> exported_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_IPC_H_
