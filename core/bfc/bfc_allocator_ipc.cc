// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator_ipc.cc: the BFC facade's side of sharing blocks
// with other processes (Allocator::Export, Import, CloseImport): which
// region or mappings hold a block, and the lifetime rule (an exported block
// freed while an importer has it open stays allocated until every importer
// has closed it). The descriptions and backend calls are core/ipc's.
#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/bfc/bfc_allocator.h"

namespace gpualloc::core {

std::uint64_t BfcAllocator::BlockSize(DeviceAddress address) const {
  if (pools_.Owns(address)) return pools_.AllocatedSize(address);
  if (tags_.pools().Owns(address)) return tags_.pools().AllocatedSize(address);
  return core_.AllocatedSize(address);
}

absl::Status BfcAllocator::TryReleaseHeld() {
  absl::Status status;
  for (const auto& [address, stream] : shared_.Releasable()) {
    // A free that fails (a tag's memory asleep) leaves the block held: it
    // comes back at the next call.
    const absl::Status freed = FreeBlock(address, Stream(stream));
    if (freed.ok()) {
      shared_.Drop(address);
    } else {
      status.Update(absl::Status(
          freed.code(),
          absl::StrFormat("releasing the block at %#x held for importers "
                          "(they all closed it; it stays held and is "
                          "released at a later call): %s",
                          address, freed.message())));
    }
  }
  return status;
}

absl::StatusOr<std::string> BfcAllocator::Export(void* ptr) {
  const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
  LockGuard lock(&mu_);
  // Frees take the pool-aware path from now on, which sees exports (the
  // front caches, which would take a freed block back without the lock,
  // go).
  EnablePoolPaths();
  if (shared_.any_held()) ReleaseHeld();
  if (shared_.exported(address) && !shared_.HeldNow(address)) {
    return shared_.Export(address, 0, {});
  }
  const std::uint64_t bytes = BlockSize(address);
  if (bytes == 0 || shared_.HeldNow(address)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Export of %p: not a live allocation of this allocator (an address "
        "Allocate returned and Deallocate did not take back)",
        ptr));
  }
  if (tags_.pools().Owns(address)) {
    GPUALLOC_RETURN_IF_ERROR(tags_.CheckAwake(address, "Export"));
  }
  BlockHolders holders;
  holders.kind =
      resolved_.expandable ? RegionKind::kExpandable : RegionKind::kSeparate;
  holders.pieces = source_->Holders(address, bytes);
  absl::StatusOr<std::string> description =
      shared_.Export(address, bytes, holders);
  MaybeValidate();
  return description;
}

absl::StatusOr<ImportedBlock> BfcAllocator::Import(
    absl::string_view description) {
  LockGuard lock(&mu_);
  return shared_.Import(description);
}

absl::Status BfcAllocator::CloseImport(void* ptr) {
  LockGuard lock(&mu_);
  return shared_.CloseImport(reinterpret_cast<std::uintptr_t>(ptr));
}

}  // namespace gpualloc::core
