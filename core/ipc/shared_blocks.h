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
// page (core/ipc/counter_page.h). Import: pidfd_getfd of the counter page
// and of each descriptor, then OpenIpcHandle, or ReserveAddress,
// ImportPhysical + Map + ReleasePhysical per mapping, and one SetAccess.
// CloseImport undoes it: CloseIpcHandle, or Unmap + FreeAddress.
//
// Thread safety: none; the facade's lock guards it.
#ifndef GPUALLOC_CORE_IPC_SHARED_BLOCKS_H_
#define GPUALLOC_CORE_IPC_SHARED_BLOCKS_H_

#include <cstdint>
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
  // descriptor and page the exports hold.
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
  // The exporter frees the block at `ptr`. true: an importer still has it
  // open, so it is held (the caller keeps it allocated); false: nobody has
  // it (or it was never exported), its export is dropped and the caller
  // frees it.
  // `stream`: the free's, kept for the release.
  bool HoldOnFree(DeviceAddress ptr, std::uintptr_t stream);
  // The held blocks no importer has open anymore (importers that exited
  // count as closed), with their free's stream: their exports are dropped,
  // and the caller frees them.
  std::vector<std::pair<DeviceAddress, std::uintptr_t>> TakeReleasable();
  bool any_held() const { return bytes_held_ != 0; }

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
    bool held = false;          // freed by the exporter, open in an importer
    std::uintptr_t stream = 0;  // held: the free's stream
  };
  struct Imported {
    SharedKind kind = SharedKind::kIpcHandle;
    DeviceAddress base = 0;   // OpenIpcHandle's address, or the reservation
    std::uint64_t span = 0;   // kMappings: the reservation's size
    std::uint64_t bytes = 0;  // the block's
    CounterPage counter;
    std::uint32_t slot = 0;
  };
  absl::Status ExportPieces(const BlockHolders& holders, BlockDescription* d,
                            std::vector<int>* fds);
  absl::StatusOr<DeviceAddress> MapImported(const BlockDescription& d,
                                            std::uint64_t* span);
  // Undoes an import's backend calls.
  absl::Status Unmap(const Imported& imported);
  // Drops an export; returns the iterator after it.
  absl::btree_map<DeviceAddress, Exported>::iterator Drop(
      absl::btree_map<DeviceAddress, Exported>::iterator it);

  Backend& backend_;
  absl::btree_map<DeviceAddress, Exported> exports_;
  absl::btree_map<DeviceAddress, Imported> imports_;
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
  for (const auto& [ptr, i] : imports_) imported += i.bytes;
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
