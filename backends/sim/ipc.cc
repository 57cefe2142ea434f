// SPDX-License-Identifier: Apache-2.0
// backends/sim/ipc.cc: IPC handles and exported mappings of the simulator.
#include "backends/sim/ipc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"
#include "core/ipc/descriptors.h"
#include "core/lock.h"

namespace gpualloc::sim {
namespace {

std::atomic<std::uint64_t> next_instance{1};

// The handles alive in this process: (instance, address) -> size.
struct Registry {
  core::Lock mu;
  absl::btree_map<std::pair<std::uint64_t, DeviceAddress>, std::uint64_t> live
      ABSL_GUARDED_BY(mu);
};
Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

// The size of the live handle's allocation, or 0.
std::uint64_t Registered(std::uint64_t instance, DeviceAddress address) {
  Registry& r = TheRegistry();
  core::LockGuard lock(&r.mu);
  const auto it = r.live.find(std::make_pair(instance, address));
  return it == r.live.end() ? 0 : it->second;
}

// The token of an exported fake mapping.
struct Token {
  static constexpr std::uint64_t kMagic = 0x4e4b4f5450495347;  // "GSIPTOKN"
  std::uint64_t magic = kMagic;
  std::uint64_t pid = 0;
  std::uint64_t instance = 0;
  std::uint64_t bytes = 0;
};

}  // namespace

Ipc::Ipc(SimMemory memory, const DeviceInfo& info, std::uint64_t host_page_size,
         Placement* placement, VirtualMemory* vm)
    : memory_(memory),
      info_(info),
      host_page_size_(host_page_size),
      placement_(placement),
      vm_(vm),
      instance_(next_instance.fetch_add(1)) {}

Ipc::~Ipc() {
  for (const auto& [address, opened] : opened_) {
    if (opened.length != 0) {
      (void)munmap(reinterpret_cast<void*>(address), opened.length);
    }
  }
  Registry& r = TheRegistry();
  core::LockGuard lock(&r.mu);
  for (const auto& [address, size] : exported_)
    r.live.erase(std::make_pair(instance_, address));
}

absl::Status Ipc::Invalid(absl::string_view call, absl::string_view why) const {
  return absl::InvalidArgumentError(
      absl::StrCat(call, " on ", info_.name, ": ", why));
}

absl::StatusOr<IpcHandle> Ipc::GetHandle(DeviceAddress base) {
  const std::string call = absl::StrFormat("GetIpcHandle of %#x", base);
  absl::StatusOr<int> fd = placement_->SharedFd(call, base);
  if (!fd.ok()) return fd.status();
  IpcRecord record;
  record.pid = static_cast<std::uint64_t>(getpid());
  record.fd = *fd;
  record.size = placement_->SizeAt(base);
  record.instance = instance_;
  record.address = base;
  IpcHandle handle;
  static_assert(sizeof(IpcRecord) <= IpcHandle::kBytes);
  std::memcpy(handle.bytes, &record, sizeof(record));
  if (exported_.emplace(base, record.size).second) {
    Registry& r = TheRegistry();
    core::LockGuard lock(&r.mu);
    r.live.emplace(std::make_pair(instance_, base), record.size);
  }
  return handle;
}

void Ipc::Forget(DeviceAddress base) {
  if (exported_.erase(base) == 0) return;
  Registry& r = TheRegistry();
  core::LockGuard lock(&r.mu);
  r.live.erase(std::make_pair(instance_, base));
}

absl::StatusOr<DeviceAddress> Ipc::Open(const IpcHandle& handle) {
  IpcRecord record;
  std::memcpy(&record, handle.bytes, sizeof(record));
  const std::string call = "OpenIpcHandle";
  if (record.magic != IpcRecord::kMagic || record.version != 1 ||
      record.size == 0) {
    return Invalid(call,
                   "not an IPC handle of the simulator (wrong magic number, "
                   "version or size)");
  }
  const bool here = record.pid == static_cast<std::uint64_t>(getpid());
  if (here && record.instance == instance_) {
    return Invalid(call,
                   "the handle was made by this device, which stands for "
                   "this process: CUDA refuses to open a handle in the "
                   "process that made it (open it from another SimBackend)");
  }
  if (here) {
    const std::uint64_t size = Registered(record.instance, record.address);
    if (size == 0) {
      return Invalid(call, absl::StrFormat("the allocation at %#x the handle "
                                           "names was freed, or its device "
                                           "destroyed",
                                           record.address));
    }
    if (size != record.size) {
      return Invalid(call, absl::StrFormat("the handle says %d bytes, and the "
                                           "allocation at %#x has %d",
                                           record.size, record.address, size));
    }
  }
  const bool fake = record.fd < 0;
  if (fake != (memory_ == SimMemory::kFake)) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, " on ", info_.name,
        ": the handle's memory and this device's are not both host-backed "
        "(SimOptions.memory): set SimMemory::kHostBacked on both"));
  }
  if (fake) {
    if (!here) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, " on ", info_.name,
          ": the handle comes from another process, and fake memory has "
          "nothing to share between processes: use SimMemory::kHostBacked"));
    }
    Allocation placed;
    absl::StatusOr<DeviceAddress> address = placement_->Place(
        AlignUp(record.size, info_.allocation_alignment), &placed);
    if (!address.ok()) return address.status();
    opened_.emplace(*address, Opened{record.size, 0});
    return *address;
  }
  absl::StatusOr<int> fd = core::FetchDescriptor(
      call, static_cast<pid_t>(record.pid), static_cast<int>(record.fd));
  if (!fd.ok()) return fd.status();
  const std::uint64_t length = AlignUp(record.size, host_page_size_);
  struct stat st;
  if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) < length) {
    close(*fd);
    return Invalid(
        call, absl::StrFormat("descriptor %d of process %d is not the memory "
                              "of %d bytes the handle names",
                              record.fd, record.pid, record.size));
  }
  void* mapping =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  const int error = errno;
  close(*fd);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s on %s: mmap of %d bytes: %s", call, info_.name,
                        length, std::strerror(error)));
  }
  const DeviceAddress address = reinterpret_cast<std::uintptr_t>(mapping);
  opened_.emplace(address, Opened{record.size, length});
  return address;
}

absl::Status Ipc::Close(DeviceAddress address) {
  const std::string call = absl::StrFormat("CloseIpcHandle of %#x", address);
  auto it = opened_.find(address);
  if (it == opened_.end()) {
    return Invalid(call,
                   "not an address OpenIpcHandle returned on this device, or "
                   "already closed");
  }
  if (it->second.length != 0 &&
      munmap(reinterpret_cast<void*>(address), it->second.length) != 0) {
    return absl::InternalError(absl::StrCat(
        call, " on ", info_.name, ": munmap: ", std::strerror(errno)));
  }
  opened_.erase(it);
  return absl::OkStatus();
}

std::uint64_t Ipc::OpenedSize(DeviceAddress address) const {
  const auto it = opened_.find(address);
  return it == opened_.end() ? 0 : it->second.size;
}

bool Ipc::Holds(DeviceAddress start, DeviceAddress end) const {
  const auto it = Holding(opened_, start);
  return it != opened_.end() && end <= it->first + it->second.size;
}

std::pair<DeviceAddress, std::uint64_t> Ipc::RangeOf(
    DeviceAddress address) const {
  const auto it = Holding(opened_, address);
  if (it == opened_.end()) return {0, 0};
  return {it->first, it->second.size};
}

absl::StatusOr<int> Ipc::ExportMapping(DeviceAddress address) {
  const std::string call = absl::StrFormat("ExportMapping of %#x", address);
  std::uint64_t bytes = 0;
  absl::StatusOr<int> kept = vm_->MappingFd(call, address, &bytes);
  if (!kept.ok()) return kept.status();
  if (*kept >= 0) {
    const int fd = fcntl(*kept, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          call, " on ", info_.name, ": dup: ", std::strerror(errno)));
    }
    return fd;
  }
  // Fake memory: a token naming this instance.
  const int fd = memfd_create("gpualloc-sim-exported", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, " on ", info_.name, ": memfd_create: ", std::strerror(errno)));
  }
  Token token;
  token.pid = static_cast<std::uint64_t>(getpid());
  token.instance = instance_;
  token.bytes = bytes;
  if (pwrite(fd, &token, sizeof(token), 0) !=
      static_cast<ssize_t>(sizeof(token))) {
    const int error = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat(call, " on ", info_.name,
                     ": write of the token: ", std::strerror(error)));
  }
  return fd;
}

absl::StatusOr<PhysicalHandle> Ipc::ImportPhysical(int fd,
                                                   std::uint64_t bytes) {
  const std::string call =
      absl::StrFormat("ImportPhysical of descriptor %d (%d bytes)", fd, bytes);
  if (absl::Status s = vm_->CheckSize(call, bytes); !s.ok()) return s;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return Invalid(call,
                   "not an open descriptor of exported memory (ExportMapping "
                   "of another device)");
  }
  Token token;
  const bool is_token =
      static_cast<std::uint64_t>(st.st_size) == sizeof(Token) &&
      pread(fd, &token, sizeof(token), 0) ==
          static_cast<ssize_t>(sizeof(token)) &&
      token.magic == Token::kMagic;
  if (memory_ == SimMemory::kFake) {
    if (!is_token) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, " on ", info_.name,
          ": fake memory imports only what fake memory exported; "
          "host-backed memory (SimMemory::kHostBacked) shares real memory"));
    }
    if (token.pid != static_cast<std::uint64_t>(getpid())) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, " on ", info_.name,
          ": exported by another process, and fake memory has nothing to "
          "share between processes: use SimMemory::kHostBacked"));
    }
    if (token.instance == instance_) {
      return Invalid(call,
                     "exported by this device, which stands for this "
                     "process: import it from another SimBackend");
    }
    if (token.bytes != bytes) {
      return Invalid(call, absl::StrFormat("the exported mapping has %d bytes",
                                           token.bytes));
    }
    return vm_->Import(call, -1, bytes);
  }
  if (is_token) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, " on ", info_.name,
        ": exported from fake memory, which has no bytes to share: set "
        "SimMemory::kHostBacked on both devices"));
  }
  if (static_cast<std::uint64_t>(st.st_size) != bytes) {
    return Invalid(
        call, absl::StrFormat("the exported memory has %d bytes", st.st_size));
  }
  return vm_->Import(call, fd, bytes);
}

}  // namespace gpualloc::sim
