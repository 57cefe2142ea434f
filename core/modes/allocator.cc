// SPDX-License-Identifier: Apache-2.0
// core/modes/allocator.cc: the Allocator interface's shared parts: mode names,
// CreateAllocator (which builds the facade of Options::mode), and Sleep /
// Wake in the modes that keep no memory.
#include "gpualloc/core/allocator.h"

#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/bfc/bfc_allocator.h"
#include "core/modes/modes.h"

namespace gpualloc {

// Sleep and wake in the modes that keep no memory.
absl::StatusOr<SleepReport> Allocator::Sleep(Tag tag, bool) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Sleep(tag %d): sleeping memory needs allocator mode bfc with "
      "expandable regions; this allocator runs in mode %s",
      tag, AllocatorModeName(options().mode)));
}
absl::Status Allocator::Wake(Tag tag) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Wake(tag %d): sleeping memory needs allocator mode bfc with "
      "expandable regions; this allocator runs in mode %s",
      tag, AllocatorModeName(options().mode)));
}

absl::string_view AllocatorModeName(AllocatorMode mode) {
  switch (mode) {
    case AllocatorMode::kBfc:
      return "bfc";
    case AllocatorMode::kPlatform:
      return "platform";
    case AllocatorMode::kAsync:
      return "async";
  }
  return "invalid";
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateAllocator(
    const Options& options, std::shared_ptr<Backend> backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateAllocator: backend is null");
  }
  GPUALLOC_ASSIGN_OR_RETURN(core::ResolvedOptions resolved,
                            core::ResolveOptions(options, backend->info()));
  return core::CreateResolvedAllocator(std::move(resolved), std::move(backend));
}

namespace core {

absl::StatusOr<std::unique_ptr<Allocator>> CreateResolvedAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend) {
  switch (resolved.options.mode) {
    case AllocatorMode::kBfc:
      break;
    case AllocatorMode::kPlatform:
      return CreatePlatformAllocator(std::move(resolved), std::move(backend));
    case AllocatorMode::kAsync:
      return CreateAsyncAllocator(std::move(resolved), std::move(backend));
  }
  return std::unique_ptr<Allocator>(
      new BfcAllocator(std::move(resolved), std::move(backend)));
}

}  // namespace core

}  // namespace gpualloc
