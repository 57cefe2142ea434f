// SPDX-License-Identifier: Apache-2.0
// core/ipc/shared_blocks.h: the blocks an allocator exported to other
// processes and the memory it imported from them (Allocator::Export,
// Import, CloseImport), with the backend calls each makes. The facade finds
// where a block lives (BlockHolders) and keeps exported blocks allocated
// while importers have them open; this part makes the descriptions, holds
// the exporter's descriptors and the importers' counter pages, and maps and
// unmaps imported memory.
//
// Export of a block of separate regions: one GetIpcHandle of its region's
// base (the backend allocation). Of expandable regions: one ExportMapping
// per whole mapping the block overlaps (the descriptors stay open, named in
// the description, until the block is released). Either way one counter
// page (core/ipc/counter_page.h) holding the export's random token, which
// the description carries too. Import: pidfd_getfd of the counter page (its
// token must match, and the export must be live: a slot is registered
// before anything else the description names is trusted), then of each
// descriptor; then OpenIpcHandle (and GetAddressRange: the block must lie
// inside what was opened), or ReserveAddress, ImportPhysical + Map +
// ReleasePhysical per mapping, and one SetAccess. CloseImport undoes it:
// CloseIpcHandle, or Unmap + FreeAddress (a failed FreeAddress is retried
// by the next CloseImport, without a second Unmap).
//
// An IPC handle opened twice in one process (two imports of one description,
// or of two blocks of one region) gives the same address, as CUDA does, and
// the driver counts the opens: each import makes one OpenIpcHandle and its
// close one CloseIpcHandle, and an imported pointer is counted once however
// often it was imported (its closes are counted down).
//
// Whatever a failed Import could not undo (a handle whose release failed, a
// mapping or reservation that stayed) is kept and retried at every later
// Import and CloseImport and at destruction: nothing leaks.
//
// Thread safety: none; the facade's lock guards it.
#ifndef GPUALLOC_CORE_IPC_SHARED_BLOCKS_H_
#define GPUALLOC_CORE_IPC_SHARED_BLOCKS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/ipc/counter_page.h"
#include "core/ipc/description.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// Where a block lives, as the facade's regions know it.
struct BlockHolders {
  RegionKind kind = RegionKind::kSeparate;
  // kSeparate: the one backend allocation holding the block (base, size);
  // kExpandable: every whole mapping the block overlaps, in address order.
  std::vector<std::pair<DeviceAddress, std::uint64_t>> pieces;
};

class SharedBlocks {
 public:
  explicit SharedBlocks(Backend* backend) : backend_(*backend) {}
  // Closes every import (backend calls; errors ignored) and every
  // descriptor and page the exports hold (their tokens cleared first: no
  // import starts from them afterwards).
  ~SharedBlocks();
  SharedBlocks(const SharedBlocks&) = delete;
  SharedBlocks& operator=(const SharedBlocks&) = delete;

  // The description of the live block at `ptr` of `bytes`: made at the
  // first call (backend calls), the same string afterwards. Errors name the
  // missing capability and the region kind; nothing is kept on error.
  absl::StatusOr<std::string> Export(DeviceAddress ptr, std::uint64_t bytes,
                                     const BlockHolders& holders);
  bool exported(DeviceAddress ptr) const {
    return !exports_.empty() && exports_.contains(ptr);
  }
  // Whether the block at `ptr` is held for importers (freed by the
  // exporter).
  bool HeldNow(DeviceAddress ptr) const {
    auto it = exports_.find(ptr);
    return it != exports_.end() && it->second.held;
  }

  // The exporter frees the block at `ptr` (`stream`: the free's, kept for
  // the release).
  enum class OnFree {
    kNotExported,  // the caller frees it
    kHeld,         // an importer has it open: the caller keeps it allocated
    // Nobody has it open and no import can start from now on: the caller
    // frees it, then Drop (freed) or Reopen (the free failed: the block is
    // live and exported as before).
    kRetired,
  };
  OnFree Free(DeviceAddress ptr, std::uintptr_t stream);
  void Drop(DeviceAddress ptr);
  void Reopen(DeviceAddress ptr);
  // The held blocks no importer has open anymore (importers that exited
  // count as closed), with their free's stream, retired (no import starts
  // from them): the caller frees each and Drops the ones freed; a block
  // whose free failed stays held and comes back at the next call.
  std::vector<std::pair<DeviceAddress, std::uintptr_t>> Releasable();
  bool any_held() const { return bytes_held_ != 0; }
  // ReleaseStream: held blocks freed on `stream` are released on `key`
  // instead (the stream may be destroyed), and whether any was.
  bool NamesStream(std::uintptr_t stream) const;
  void RenameStream(std::uintptr_t stream, std::uintptr_t key);
  // The first exported block (live or held) for which `pred(ptr)` is true,
  // and whether it is held.
  template <typename Pred>
  std::optional<std::pair<DeviceAddress, bool>> FindExport(Pred pred) const {
    for (const auto& [ptr, e] : exports_) {
      if (pred(ptr)) return std::make_pair(ptr, e.held);
    }
    return std::nullopt;
  }

  absl::StatusOr<ImportedBlock> Import(absl::string_view description);
  absl::Status CloseImport(DeviceAddress ptr);

  std::uint64_t bytes_exported() const { return bytes_exported_; }
  std::uint64_t bytes_held() const { return bytes_held_; }
  std::uint64_t bytes_imported() const { return bytes_imported_; }
  bool empty() const { return exports_.empty() && imports_.empty(); }
  // The byte counts agree with the tables; `in_use(ptr)` answers each
  // exported block's size in the allocator (0: not allocated there).
  template <typename InUse>
  absl::Status Validate(InUse in_use) const;

 private:
  struct Exported {
    std::string description;
    std::uint64_t bytes = 0;
    std::vector<int> fds;  // ExportMapping's descriptors, kept open
    CounterPage counter;
    ExportToken token{};
    bool held = false;          // freed by the exporter, open in an importer
    std::uintptr_t stream = 0;  // held: the free's stream
  };
  struct Imported {
    SharedKind kind = SharedKind::kIpcHandle;
    DeviceAddress base = 0;   // OpenIpcHandle's address, or the reservation
    std::uint64_t span = 0;   // kMappings: the reservation's size
    std::uint64_t bytes = 0;  // the block's
    ExportToken token{};
    CounterPage counter;
    // One slot per Import of this pointer not yet closed (kIpcHandle: each
    // made one OpenIpcHandle).
    std::vector<std::uint32_t> slots;
    // kMappings: Unmap done, FreeAddress failed (the next CloseImport
    // makes only the FreeAddress; the import stays open until it works).
    bool unmapped = false;
  };
  // What a failed Import could not undo, retried later (Mop).
  struct Leftover {
    DeviceAddress opened = 0;    // kIpcHandle: still to close
    DeviceAddress reserved = 0;  // kMappings: the reservation still to free
    std::uint64_t span = 0;
    std::uint64_t mapped = 0;             // of it still mapped, from its start
    std::vector<PhysicalHandle> handles;  // still to release
  };
  absl::Status ExportPieces(const BlockHolders& holders, BlockDescription* d,
                            std::vector<int>* fds);
  // Maps what `d` names; what it cannot undo on failure goes to leftovers_.
  absl::StatusOr<DeviceAddress> MapImported(const BlockDescription& d,
                                            std::uint64_t* span);
  // Undoes what it can of `l`: whether all of it is done.
  bool Clean(Leftover& l);
  // Cleans every leftover it can.
  void Mop();
  // Undoes an import's backend calls (for the destructor).
  void UnmapAll(Imported& imported);
  // Drops an export; returns the iterator after it.
  absl::btree_map<DeviceAddress, Exported>::iterator Drop(
      absl::btree_map<DeviceAddress, Exported>::iterator it);

  Backend& backend_;
  absl::btree_map<DeviceAddress, Exported> exports_;
  absl::btree_map<DeviceAddress, Imported> imports_;
  std::vector<Leftover> leftovers_;
  std::uint64_t bytes_exported_ = 0;
  std::uint64_t bytes_held_ = 0;
  std::uint64_t bytes_imported_ = 0;
};

template <typename InUse>
absl::Status SharedBlocks::Validate(InUse in_use) const {
  std::uint64_t exported = 0, held = 0, imported = 0;
  for (const auto& [ptr, e] : exports_) {
    (e.held ? held : exported) += e.bytes;
    if (in_use(ptr) != e.bytes) {
      return absl::InternalError(absl::StrFormat(
          "invariant X1 broken: the exported block at %#x of %d bytes is "
          "not allocated as such (%d)",
          ptr, e.bytes, in_use(ptr)));
    }
  }
  for (const auto& [ptr, i] : imports_) {
    imported += i.bytes;
    if (i.slots.empty()) {
      return absl::InternalError(absl::StrFormat(
          "invariant X3 broken: the import at %#x holds no importer slot",
          ptr));
    }
  }
  if (exported != bytes_exported_ || held != bytes_held_ ||
      imported != bytes_imported_) {
    return absl::InternalError(absl::StrFormat(
        "invariant X2 broken: exported %d / held %d / imported %d bytes in "
        "the tables, %d / %d / %d counted",
        exported, held, imported, bytes_exported_, bytes_held_,
        bytes_imported_));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_IPC_SHARED_BLOCKS_H_
