// SPDX-License-Identifier: Apache-2.0
// core/ipc/shared_blocks.cc: exports, imports and their backend calls; the
// modes' defaults of Allocator::Export, Import and CloseImport.
#include "core/ipc/shared_blocks.h"

#include <unistd.h>

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/ipc/descriptors.h"
#include "core/status_macros.h"

namespace gpualloc {

absl::Status Allocator::SharingUnsupported(absl::string_view call) const {
  return absl::UnimplementedError(absl::StrFormat(
      "%s: sharing blocks with other processes needs allocator mode bfc or "
      "platform; this allocator runs in mode %s, whose memory the device's "
      "stream-ordered pool owns",
      call, AllocatorModeName(options().mode)));
}
absl::StatusOr<std::string> Allocator::Export(void*) {
  return SharingUnsupported("Export");
}
absl::StatusOr<ImportedBlock> Allocator::Import(absl::string_view) {
  return SharingUnsupported("Import");
}
absl::Status Allocator::CloseImport(void*) {
  return SharingUnsupported("CloseImport");
}

namespace core {
namespace {

// Closes descriptors it holds when it goes.
struct Descriptors {
  std::vector<int> fds;
  ~Descriptors() {
    for (int fd : fds) (void)close(fd);
  }
};

}  // namespace

SharedBlocks::~SharedBlocks() {
  for (auto& [ptr, imported] : imports_) {
    (void)Unmap(imported);
    imported.counter.Unregister(imported.slot, getpid());
  }
  for (auto& [ptr, exported] : exports_) {
    for (int fd : exported.fds) (void)close(fd);
  }
}

absl::Status SharedBlocks::ExportPieces(const BlockHolders& holders,
                                        BlockDescription* d,
                                        std::vector<int>* fds) {
  const Capabilities& caps = backend_.info().capabilities;
  if (holders.kind == RegionKind::kSeparate) {
    if (!caps.ipc_handles) {
      return absl::UnimplementedError(absl::StrCat(
          "Export: separate regions (expandable_segments=false) share a "
          "block through its region's IPC handle, and backend ",
          backend_.info().backend, " (", backend_.info().name,
          ") has no ipc_handles capability"));
    }
    d->kind = SharedKind::kIpcHandle;
    absl::StatusOr<IpcHandle> handle =
        backend_.GetIpcHandle(holders.pieces.front().first);
    if (!handle.ok()) {
      return absl::Status(handle.status().code(),
                          absl::StrCat("Export: GetIpcHandle of the region: ",
                                       handle.status().message()));
    }
    d->handle = *handle;
    return absl::OkStatus();
  }
  if (!caps.shareable_handles) {
    return absl::UnimplementedError(absl::StrCat(
        "Export: expandable_segments=true needs shareable handles (physical "
        "memory exported as file descriptors), and backend ",
        backend_.info().backend, " (", backend_.info().name,
        ") has no shareable_handles capability; set "
        "expandable_segments=false to share blocks through IPC handles"));
  }
  d->kind = SharedKind::kMappings;
  for (const auto& [address, bytes] : holders.pieces) {
    absl::StatusOr<int> fd = backend_.ExportMapping(address);
    if (!fd.ok()) {
      return absl::Status(
          fd.status().code(),
          absl::StrFormat("Export: ExportMapping of the mapping at %#x: %s",
                          address, fd.status().message()));
    }
    fds->push_back(*fd);
    d->mappings.push_back({*fd, bytes});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SharedBlocks::Export(DeviceAddress ptr,
                                                 std::uint64_t bytes,
                                                 const BlockHolders& holders) {
  if (auto it = exports_.find(ptr); it != exports_.end()) {
    return it->second.description;
  }
  if (holders.pieces.empty()) {
    return absl::InternalError("Export: no region holds the block");
  }
  BlockDescription d;
  d.pid = static_cast<std::uint64_t>(getpid());
  d.backend = backend_.info().backend;
  d.ordinal = static_cast<std::uint32_t>(backend_.info().ordinal);
  d.bytes = bytes;
  d.offset = ptr - holders.pieces.front().first;
  Descriptors fds;
  GPUALLOC_RETURN_IF_ERROR(ExportPieces(holders, &d, &fds.fds));
  absl::StatusOr<CounterPage> counter = CounterPage::Create();
  if (!counter.ok()) return counter.status();
  d.counter_fd = counter->fd();
  Exported exported;
  exported.description = EncodeDescription(d);
  exported.bytes = bytes;
  exported.fds = std::exchange(fds.fds, {});
  exported.counter = *std::move(counter);
  const std::string description = exported.description;
  exports_.emplace(ptr, std::move(exported));
  bytes_exported_ += bytes;
  return description;
}

absl::btree_map<DeviceAddress, SharedBlocks::Exported>::iterator
SharedBlocks::Drop(absl::btree_map<DeviceAddress, Exported>::iterator it) {
  (it->second.held ? bytes_held_ : bytes_exported_) -= it->second.bytes;
  for (int fd : it->second.fds) (void)close(fd);
  return exports_.erase(it);  // (a btree's erase moves the others)
}

bool SharedBlocks::HoldOnFree(DeviceAddress ptr, std::uintptr_t stream) {
  auto it = exports_.find(ptr);
  if (it == exports_.end()) return false;
  if (it->second.counter.Live() == 0) {
    Drop(it);
    return false;
  }
  it->second.held = true;
  it->second.stream = stream;
  bytes_exported_ -= it->second.bytes;
  bytes_held_ += it->second.bytes;
  return true;
}

std::vector<std::pair<DeviceAddress, std::uintptr_t>>
SharedBlocks::TakeReleasable() {
  std::vector<std::pair<DeviceAddress, std::uintptr_t>> released;
  if (bytes_held_ == 0) return released;
  for (auto it = exports_.begin(); it != exports_.end();) {
    if (it->second.held && it->second.counter.Live() == 0) {
      released.emplace_back(it->first, it->second.stream);
      it = Drop(it);
    } else {
      ++it;
    }
  }
  return released;
}

absl::StatusOr<DeviceAddress> SharedBlocks::MapImported(
    const BlockDescription& d, std::uint64_t* span) {
  if (d.kind == SharedKind::kIpcHandle) {
    *span = 0;
    return backend_.OpenIpcHandle(d.handle);
  }
  Descriptors fds;
  std::uint64_t total = 0;
  for (const DescribedMapping& m : d.mappings) {
    absl::StatusOr<int> fd = FetchDescriptor("Import: the exporter's mapping",
                                             static_cast<pid_t>(d.pid), m.fd);
    if (!fd.ok()) return fd.status();
    fds.fds.push_back(*fd);
    total += m.bytes;
  }
  absl::StatusOr<DeviceAddress> base = backend_.ReserveAddress(total, 0);
  if (!base.ok()) return base.status();
  std::uint64_t mapped = 0;
  absl::Status status;
  for (std::size_t i = 0; i < d.mappings.size() && status.ok(); ++i) {
    const std::uint64_t bytes = d.mappings[i].bytes;
    absl::StatusOr<PhysicalHandle> handle =
        backend_.ImportPhysical(fds.fds[i], bytes);
    if (!handle.ok()) {
      status = handle.status();
      break;
    }
    status = backend_.Map(*base + mapped, bytes, *handle);
    // The mapping keeps the memory (PyTorch releases right after mapping).
    const absl::Status released = backend_.ReleasePhysical(*handle);
    if (status.ok()) mapped += bytes;
    if (status.ok()) status = released;
  }
  if (status.ok()) status = backend_.SetAccess(*base, total);
  if (!status.ok()) {
    if (mapped != 0) (void)backend_.Unmap(*base, mapped);
    (void)backend_.FreeAddress(*base, total);
    return status;
  }
  *span = total;
  return *base;
}

absl::StatusOr<ImportedBlock> SharedBlocks::Import(
    absl::string_view description) {
  absl::StatusOr<BlockDescription> d = DecodeDescription(description);
  if (!d.ok()) return d.status();
  if (d->backend != backend_.info().backend) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Import: the block was exported by a %s backend, and this allocator "
        "runs on a %s backend",
        d->backend, backend_.info().backend));
  }
  for (const auto& [ptr, exported] : exports_) {
    if (exported.description == description) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Import: the block at %#x was exported by this allocator: use its "
          "pointer, not an import",
          ptr));
    }
  }
  absl::StatusOr<int> counter_fd =
      FetchDescriptor("Import: the importers' counter page",
                      static_cast<pid_t>(d->pid), d->counter_fd);
  if (!counter_fd.ok()) return counter_fd.status();
  Descriptors owned;
  owned.fds.push_back(*counter_fd);
  absl::StatusOr<CounterPage> counter = CounterPage::Open(*counter_fd);
  if (!counter.ok()) return counter.status();
  absl::StatusOr<std::uint32_t> slot = counter->Register(getpid());
  if (!slot.ok()) return slot.status();
  Imported imported;
  imported.kind = d->kind;
  imported.bytes = d->bytes;
  absl::StatusOr<DeviceAddress> base = MapImported(*d, &imported.span);
  if (!base.ok()) {
    counter->Unregister(*slot, getpid());
    return base.status();
  }
  imported.base = *base;
  imported.counter = *std::move(counter);
  imported.slot = *slot;
  const DeviceAddress ptr = *base + d->offset;
  imports_.emplace(ptr, std::move(imported));
  bytes_imported_ += d->bytes;
  return ImportedBlock{
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)), d->bytes};
}

absl::Status SharedBlocks::Unmap(const Imported& imported) {
  if (imported.kind == SharedKind::kIpcHandle) {
    return backend_.CloseIpcHandle(imported.base);
  }
  GPUALLOC_RETURN_IF_ERROR(backend_.Unmap(imported.base, imported.span));
  return backend_.FreeAddress(imported.base, imported.span);
}

absl::Status SharedBlocks::CloseImport(DeviceAddress ptr) {
  auto it = imports_.find(ptr);
  if (it == imports_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CloseImport of %#x: not a pointer Import returned here, or closed "
        "already",
        ptr));
  }
  GPUALLOC_RETURN_IF_ERROR(Unmap(it->second));
  it->second.counter.Unregister(it->second.slot, getpid());
  bytes_imported_ -= it->second.bytes;
  imports_.erase(it);
  return absl::OkStatus();
}

}  // namespace core
}  // namespace gpualloc
