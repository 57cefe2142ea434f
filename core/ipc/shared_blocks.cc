// SPDX-License-Identifier: Apache-2.0
// core/ipc/shared_blocks.cc: exports, imports and their backend calls; the
// modes' defaults of Allocator::Export, Import and CloseImport.
#include "core/ipc/shared_blocks.h"

#include <unistd.h>

#include <iterator>
#include <utility>
#include <vector>

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
    UnmapAll(imported);
    for (std::uint32_t slot : imported.slots) {
      imported.counter.Unregister(slot, getpid());
    }
  }
  Mop();
  for (auto& [ptr, exported] : exports_) {
    exported.counter.Retire();
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
  absl::StatusOr<ExportToken> token = NewExportToken();
  if (!token.ok()) return token.status();
  d.token = *token;
  absl::StatusOr<CounterPage> counter = CounterPage::Create(*token);
  if (!counter.ok()) return counter.status();
  d.counter_fd = counter->fd();
  Exported exported;
  exported.description = EncodeDescription(d);
  exported.bytes = bytes;
  exported.fds = std::exchange(fds.fds, {});
  exported.counter = *std::move(counter);
  exported.token = *token;
  const std::string description = exported.description;
  exports_.emplace(ptr, std::move(exported));
  bytes_exported_ += bytes;
  return description;
}

absl::btree_map<DeviceAddress, SharedBlocks::Exported>::iterator
SharedBlocks::Drop(absl::btree_map<DeviceAddress, Exported>::iterator it) {
  (it->second.held ? bytes_held_ : bytes_exported_) -= it->second.bytes;
  it->second.counter.Retire();
  for (int fd : it->second.fds) (void)close(fd);
  return exports_.erase(it);  // (a btree's erase moves the others)
}

SharedBlocks::OnFree SharedBlocks::Free(DeviceAddress ptr,
                                        std::uintptr_t stream) {
  auto it = exports_.find(ptr);
  if (it == exports_.end()) return OnFree::kNotExported;
  if (it->second.counter.TryRetire()) return OnFree::kRetired;
  it->second.held = true;
  it->second.stream = stream;
  bytes_exported_ -= it->second.bytes;
  bytes_held_ += it->second.bytes;
  return OnFree::kHeld;
}

void SharedBlocks::Drop(DeviceAddress ptr) {
  auto it = exports_.find(ptr);
  if (it != exports_.end()) Drop(it);
}

void SharedBlocks::Reopen(DeviceAddress ptr) {
  auto it = exports_.find(ptr);
  if (it == exports_.end() || it->second.held) return;
  it->second.counter.Reopen(it->second.token);
}

std::vector<std::pair<DeviceAddress, std::uintptr_t>>
SharedBlocks::Releasable() {
  std::vector<std::pair<DeviceAddress, std::uintptr_t>> released;
  if (bytes_held_ == 0) return released;
  for (auto& [ptr, e] : exports_) {
    if (e.held && e.counter.TryRetire()) released.emplace_back(ptr, e.stream);
  }
  return released;
}

bool SharedBlocks::NamesStream(std::uintptr_t stream) const {
  if (bytes_held_ == 0) return false;
  for (const auto& [ptr, e] : exports_) {
    if (e.held && e.stream == stream) return true;
  }
  return false;
}

void SharedBlocks::RenameStream(std::uintptr_t stream, std::uintptr_t key) {
  if (bytes_held_ == 0) return;
  for (auto& [ptr, e] : exports_) {
    if (e.held && e.stream == stream) e.stream = key;
  }
}

bool SharedBlocks::Clean(Leftover& l) {
  if (l.opened != 0) {
    if (!backend_.CloseIpcHandle(l.opened).ok()) return false;
    l.opened = 0;
  }
  if (l.mapped != 0) {
    if (!backend_.Unmap(l.reserved, l.mapped).ok()) return false;
    l.mapped = 0;
  }
  for (auto it = l.handles.begin(); it != l.handles.end();) {
    it = backend_.ReleasePhysical(*it).ok() ? l.handles.erase(it) : it + 1;
  }
  if (!l.handles.empty()) return false;
  if (l.reserved != 0) {
    if (!backend_.FreeAddress(l.reserved, l.span).ok()) return false;
    l.reserved = 0;
  }
  return true;
}

void SharedBlocks::Mop() {
  for (auto it = leftovers_.begin(); it != leftovers_.end();) {
    it = Clean(*it) ? leftovers_.erase(it) : it + 1;
  }
}

absl::StatusOr<DeviceAddress> SharedBlocks::MapImported(
    const BlockDescription& d, std::uint64_t* span) {
  if (d.kind == SharedKind::kIpcHandle) {
    *span = 0;
    absl::StatusOr<DeviceAddress> opened = backend_.OpenIpcHandle(d.handle);
    if (!opened.ok()) return opened.status();
    // The block must lie inside what the handle opened: a description is
    // only checksummed, and an edited one must not reach past it.
    absl::StatusOr<Backend::AddressRange> range =
        backend_.GetAddressRange(*opened);
    absl::Status refused;
    if (!range.ok()) {
      refused = absl::Status(
          range.status().code(),
          absl::StrCat("Import: GetAddressRange of what the IPC handle "
                       "opened (the block's bounds cannot be checked): ",
                       range.status().message()));
    } else {
      const std::uint64_t from = *opened - range->base;
      const std::uint64_t room = range->base <= *opened && from < range->bytes
                                     ? range->bytes - from
                                     : 0;
      if (d.offset >= room || d.bytes > room - d.offset) {
        refused = absl::InvalidArgumentError(absl::StrFormat(
            "Import: the description is not valid: its block [%d, +%d) runs "
            "past the %d bytes of the allocation its IPC handle opened (an "
            "edited description)",
            d.offset, d.bytes, room));
      }
    }
    if (!refused.ok()) {
      Leftover l;
      l.opened = *opened;
      if (!Clean(l)) leftovers_.push_back(std::move(l));
      return refused;
    }
    return *opened;
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
  Leftover undo;
  undo.reserved = *base;
  undo.span = total;
  absl::Status status;
  for (std::size_t i = 0; i < d.mappings.size() && status.ok(); ++i) {
    const std::uint64_t bytes = d.mappings[i].bytes;
    absl::StatusOr<PhysicalHandle> handle =
        backend_.ImportPhysical(fds.fds[i], bytes);
    if (!handle.ok()) {
      status = handle.status();
      break;
    }
    status = backend_.Map(*base + undo.mapped, bytes, *handle);
    if (status.ok()) undo.mapped += bytes;
    // The mapping keeps the memory (PyTorch releases right after mapping).
    const absl::Status released = backend_.ReleasePhysical(*handle);
    if (!released.ok()) {
      undo.handles.push_back(*handle);  // released on the way out
      status.Update(released);
    }
  }
  if (status.ok()) status = backend_.SetAccess(*base, total);
  if (!status.ok()) {
    if (!Clean(undo)) leftovers_.push_back(std::move(undo));
    return status;
  }
  *span = total;
  return *base;
}

absl::StatusOr<ImportedBlock> SharedBlocks::Import(
    absl::string_view description) {
  Mop();
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
  // The counter page first: its token says that the description is the
  // export's and that the export is live, and the slot keeps it live while
  // the rest of what the description names is fetched.
  absl::StatusOr<int> counter_fd =
      FetchDescriptor("Import: the importers' counter page",
                      static_cast<pid_t>(d->pid), d->counter_fd);
  if (!counter_fd.ok()) return counter_fd.status();
  Descriptors owned;
  owned.fds.push_back(*counter_fd);
  absl::StatusOr<CounterPage> counter =
      CounterPage::Open(*counter_fd, d->token);
  if (!counter.ok()) return counter.status();
  absl::StatusOr<std::uint32_t> slot = counter->Register(getpid(), d->token);
  if (!slot.ok()) return slot.status();
  std::uint64_t span = 0;
  absl::StatusOr<DeviceAddress> base = MapImported(*d, &span);
  if (!base.ok()) {
    counter->Unregister(*slot, getpid());
    return base.status();
  }
  const DeviceAddress ptr = *base + d->offset;
  const ImportedBlock block{
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)), d->bytes};
  if (auto it = imports_.find(ptr); it != imports_.end()) {
    // The handle was open here already (the driver gave the same address
    // and counts the open): one more import of the same block.
    Imported& same = it->second;
    if (same.kind == d->kind && same.base == *base && same.bytes == d->bytes &&
        same.token == d->token && !same.unmapped) {
      same.slots.push_back(*slot);
      return block;
    }
    Leftover l;
    l.opened = d->kind == SharedKind::kIpcHandle ? *base : 0;
    if (!Clean(l)) leftovers_.push_back(std::move(l));
    counter->Unregister(*slot, getpid());
    return absl::InvalidArgumentError(absl::StrFormat(
        "Import: the block opens at %#x, where another import of %d bytes "
        "is (close it first)",
        ptr, same.bytes));
  }
  Imported imported;
  imported.kind = d->kind;
  imported.base = *base;
  imported.span = span;
  imported.bytes = d->bytes;
  imported.token = d->token;
  imported.counter = *std::move(counter);
  imported.slots.push_back(*slot);
  imports_.emplace(ptr, std::move(imported));
  bytes_imported_ += d->bytes;
  return block;
}

void SharedBlocks::UnmapAll(Imported& imported) {
  if (imported.kind == SharedKind::kIpcHandle) {
    for (std::size_t i = 0; i < imported.slots.size(); ++i) {
      (void)backend_.CloseIpcHandle(imported.base);
    }
    return;
  }
  if (!imported.unmapped) {
    (void)backend_.Unmap(imported.base, imported.span);
  }
  (void)backend_.FreeAddress(imported.base, imported.span);
}

absl::Status SharedBlocks::CloseImport(DeviceAddress ptr) {
  Mop();
  auto it = imports_.find(ptr);
  if (it == imports_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CloseImport of %#x: not a pointer Import returned here, or closed "
        "already",
        ptr));
  }
  Imported& imported = it->second;
  if (imported.kind == SharedKind::kIpcHandle) {
    // One open per import: the driver unmaps at the last close.
    GPUALLOC_RETURN_IF_ERROR(backend_.CloseIpcHandle(imported.base));
    imported.counter.Unregister(imported.slots.back(), getpid());
    imported.slots.pop_back();
    if (!imported.slots.empty()) return absl::OkStatus();
  } else {
    if (!imported.unmapped) {
      GPUALLOC_RETURN_IF_ERROR(backend_.Unmap(imported.base, imported.span));
      imported.unmapped = true;
    }
    // A failure leaves the reservation for the next CloseImport, which
    // makes only this call; the import stays open (counted, its slot held)
    // until one succeeds.
    GPUALLOC_RETURN_IF_ERROR(
        backend_.FreeAddress(imported.base, imported.span));
    for (std::uint32_t slot : imported.slots) {
      imported.counter.Unregister(slot, getpid());
    }
  }
  bytes_imported_ -= imported.bytes;
  imports_.erase(it);
  return absl::OkStatus();
}

}  // namespace core
}  // namespace gpualloc
