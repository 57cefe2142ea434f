// backends/sim/sim_backend.cc: the simulated device.
//
// Model (see gpualloc/sim_backend.h for the contract):
//  - Capacity is accounted by the request rounded up to the allocation
//    alignment, the way a driver rounds a cuMemAlloc/hipMalloc.
//  - Placement: every address is aligned to the allocation alignment; requests
//    of at least one recommended granule are aligned to the recommended
//    granularity, like a driver that backs them with large pages.
//  - Separate allocations are never contiguous: at least one recommended
//  granule
//    of unused address space follows every allocation, so an allocator that
//    wrongly merges neighbours from different backend allocations is caught.
//  - Fake memory hands out addresses from a deterministic bump pointer in a
//    window of 2^48 bytes per device ordinal starting at 0x7f0000000000
//    (ordinal 0). Addresses are never reused and never dereferenced, so a stale
//    pointer cannot alias a later allocation; no host memory is touched.
//  - Host-backed memory maps each allocation privately and lazily
//    (MAP_NORESERVE). Only the requested bytes are readable and writable; the
//    alignment slack before them and a guard of at least one recommended
//    granule after them are PROT_NONE, so an overrun faults instead of
//    corrupting a neighbour.
//  - Every call is counted; a call that fails (fault injection or a real error)
//    also counts as failed and costs nothing; a successful call adds its
//    modeled cost. A call that fails changes no state other than the counters.
//
// Thread safety: one lock (core::Lock, the project's annotated std::mutex; it
// is also visible to ThreadSanitizer, which Debian's prebuilt absl::Mutex is
// not) guards all mutable state; DeviceInfo and the options are immutable
// after Create.

#include "gpualloc/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/lock.h"
#include "gpualloc/arch.h"
#include "gpualloc/backend.h"

namespace gpualloc {
namespace {

// First fake address of device ordinal 0, and the size of each ordinal's
// window. Fake addresses past the canonical user range are fine: they are
// never dereferenced.
constexpr DeviceAddress kFakeBase = 0x7f00'0000'0000;
constexpr std::uint64_t kFakeWindow = std::uint64_t{1} << 48;
constexpr int kMaxOrdinal = 255;

bool IsPowerOfTwo(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// REQUIRES: `alignment` is a power of two and the result does not overflow.
std::uint64_t AlignUp(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

int OpIndex(SimOp op) {
  const int index = static_cast<int>(op);
  return index >= 0 && index < kNumSimOps ? index : -1;
}

absl::Status InvalidField(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("SimOptions.", field, ": ", problem));
}

}  // namespace

absl::string_view SimOpName(SimOp op) {
  switch (op) {
    case SimOp::kAllocate:
      return "allocate";
    case SimOp::kFree:
      return "free";
    case SimOp::kFreeBytes:
      return "free_bytes";
    case SimOp::kCount:
      break;
  }
  return "invalid";
}

class SimBackend::Impl {
 public:
  Impl(const SimOptions& options, DeviceInfo info)
      : memory_(options.memory),
        cost_ns_(options.cost_ns),
        info_(std::move(info)),
        fake_base_(kFakeBase +
                   static_cast<std::uint64_t>(options.ordinal) * kFakeWindow),
        host_page_size_(static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))),
        next_fake_address_(fake_base_) {}

  ~Impl() {
    core::LockGuard lock(&mu_);
    for (const auto& [address, allocation] : live_) {
      if (allocation.mapping != nullptr) {
        munmap(allocation.mapping, allocation.mapping_length);
      }
    }
  }

  const DeviceInfo& info() const { return info_; }

  absl::StatusOr<std::uint64_t> FreeBytes() {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFreeBytes); !fault.ok()) {
      return fault;
    }
    return EndCall(
        SimOp::kFreeBytes,
        absl::StatusOr<std::uint64_t>(info_.total_bytes - bytes_allocated_));
  }

  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kAllocate); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kAllocate, AllocateLocked(bytes));
  }

  absl::Status Free(DeviceAddress address) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFree); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kFree, FreeLocked(address));
  }

  void FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
    const int index = OpIndex(op);
    if (index < 0) return;
    if (status.ok()) {
      status = absl::InternalError(
          "FailNthCall was given an OK status to fail with");
    }
    core::LockGuard lock(&mu_);
    faults_[index] = Fault{k, std::move(status)};
  }

  void ClearFaults() {
    core::LockGuard lock(&mu_);
    faults_ = {};
  }

  std::uint64_t calls(SimOp op) const {
    const int index = OpIndex(op);
    core::LockGuard lock(&mu_);
    return index < 0 ? 0 : calls_[index];
  }
  std::uint64_t failed_calls(SimOp op) const {
    const int index = OpIndex(op);
    core::LockGuard lock(&mu_);
    return index < 0 ? 0 : failed_calls_[index];
  }
  std::uint64_t modeled_ns() const {
    core::LockGuard lock(&mu_);
    return modeled_ns_;
  }
  void ResetCounters() {
    core::LockGuard lock(&mu_);
    calls_ = {};
    failed_calls_ = {};
    modeled_ns_ = 0;
  }
  std::uint64_t bytes_allocated() const {
    core::LockGuard lock(&mu_);
    return bytes_allocated_;
  }
  std::uint64_t live_allocations() const {
    core::LockGuard lock(&mu_);
    return live_.size();
  }

 private:
  struct Allocation {
    std::uint64_t size = 0;   // accounted: rounded up to the alignment
    void* mapping = nullptr;  // host-backed only: the whole mapping
    std::uint64_t mapping_length = 0;
  };
  // A pending fault: the `countdown`-th call fails with `status`; 0 is none.
  struct Fault {
    std::uint64_t countdown = 0;
    absl::Status status;
  };

  // Counts a call of `op` and fires its pending fault when it is due.
  absl::Status BeginCall(SimOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int index = OpIndex(op);
    ++calls_[index];
    Fault& fault = faults_[index];
    if (fault.countdown == 0 || --fault.countdown != 0) return absl::OkStatus();
    ++failed_calls_[index];
    return std::exchange(fault.status, absl::OkStatus());
  }

  // Counts the outcome of a call of `op` and passes `result` through.
  template <typename T>
  T EndCall(SimOp op, T result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int index = OpIndex(op);
    if (result.ok()) {
      modeled_ns_ += cost_ns_[index];
    } else {
      ++failed_calls_[index];
    }
    return result;
  }

  absl::StatusOr<DeviceAddress> AllocateLocked(std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Allocate of 0 bytes on ", info_.name,
                       ": the size must be positive"));
    }
    // total_bytes and bytes_allocated_ are multiples of the alignment, so a
    // request that fits also fits once rounded, and rounding cannot overflow.
    const std::uint64_t free = info_.total_bytes - bytes_allocated_;
    if (bytes > free) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "out of memory on %s: requested %d bytes, %d of %d bytes in use "
          "(%d free)",
          info_.name, bytes, bytes_allocated_, info_.total_bytes, free));
    }
    const std::uint64_t size = AlignUp(bytes, info_.allocation_alignment);
    std::uint64_t placement = info_.allocation_alignment;
    if (size >= info_.recommended_granularity &&
        info_.recommended_granularity > placement) {
      placement = info_.recommended_granularity;
    }
    const std::uint64_t guard = info_.recommended_granularity;

    Allocation allocation;
    allocation.size = size;
    DeviceAddress address = 0;
    if (memory_ == SimMemory::kFake) {
      address = AlignUp(next_fake_address_, placement);
      const std::uint64_t window_end = fake_base_ + kFakeWindow;
      if (address > window_end || size > window_end - address ||
          guard > window_end - address - size) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "fake address space of %s exhausted after %#x (%d bytes per "
            "device; addresses are never reused)",
            info_.name, next_fake_address_, kFakeWindow));
      }
      next_fake_address_ = address + size + guard;
    } else {
      const std::uint64_t page = host_page_size_;
      const std::uint64_t slack = placement > page ? placement - page : 0;
      const std::uint64_t accessible = AlignUp(size, page);
      const std::uint64_t length = slack + accessible + AlignUp(guard, page);
      void* mapping = mmap(nullptr, length, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mapping == MAP_FAILED) {
        const int error = errno;
        return absl::ResourceExhaustedError(absl::StrFormat(
            "host-backed allocation of %d bytes on %s failed: mmap of %d "
            "bytes: %s",
            bytes, info_.name, length, std::strerror(error)));
      }
      address = AlignUp(reinterpret_cast<std::uintptr_t>(mapping), placement);
      if (mprotect(reinterpret_cast<void*>(address), accessible,
                   PROT_READ | PROT_WRITE) != 0) {
        const int error = errno;
        munmap(mapping, length);
        return absl::ResourceExhaustedError(absl::StrFormat(
            "host-backed allocation of %d bytes on %s failed: mprotect: %s",
            bytes, info_.name, std::strerror(error)));
      }
      allocation.mapping = mapping;
      allocation.mapping_length = length;
    }
    live_.emplace(address, allocation);
    bytes_allocated_ += size;
    return address;
  }

  absl::Status FreeLocked(DeviceAddress address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = live_.find(address);
    if (it == live_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Free of %#x on %s: not an address this device allocated, or "
          "already freed",
          address, info_.name));
    }
    const Allocation& allocation = it->second;
    if (allocation.mapping != nullptr &&
        munmap(allocation.mapping, allocation.mapping_length) != 0) {
      const int error = errno;
      return absl::InternalError(
          absl::StrFormat("Free of %#x on %s: munmap: %s", address, info_.name,
                          std::strerror(error)));
    }
    bytes_allocated_ -= allocation.size;
    live_.erase(it);
    return absl::OkStatus();
  }

  const SimMemory memory_;
  const std::array<std::uint64_t, kNumSimOps> cost_ns_;
  const DeviceInfo info_;
  const DeviceAddress fake_base_;
  const std::uint64_t host_page_size_;

  mutable core::Lock mu_;
  DeviceAddress next_fake_address_ ABSL_GUARDED_BY(mu_);
  std::uint64_t bytes_allocated_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<DeviceAddress, Allocation> live_ ABSL_GUARDED_BY(mu_);
  std::array<Fault, kNumSimOps> faults_ ABSL_GUARDED_BY(mu_);
  std::array<std::uint64_t, kNumSimOps> calls_ ABSL_GUARDED_BY(mu_) = {};
  std::array<std::uint64_t, kNumSimOps> failed_calls_ ABSL_GUARDED_BY(mu_) = {};
  std::uint64_t modeled_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::shared_ptr<SimBackend>> SimBackend::Create(
    const SimOptions& options) {
  absl::StatusOr<const ArchProfile*> found = FindArchProfile(options.profile);
  if (!found.ok()) {
    return InvalidField("profile", found.status().message());
  }
  const ArchProfile& profile = **found;

  DeviceInfo info;
  info.backend = "sim";
  info.vendor = profile.vendor;
  info.name =
      absl::StrCat("simulated ", profile.description, " (", profile.name, ")");
  info.arch_id = profile.arch_ids.empty() ? std::string()
                                          : std::string(profile.arch_ids[0]);
  info.ordinal = options.ordinal;
  info.total_bytes =
      options.total_bytes != 0 ? options.total_bytes : profile.memory_bytes;
  info.min_granularity = options.min_granularity != 0 ? options.min_granularity
                                                      : profile.min_granularity;
  info.recommended_granularity = options.recommended_granularity != 0
                                     ? options.recommended_granularity
                                     : profile.recommended_granularity;
  info.allocation_alignment = options.allocation_alignment != 0
                                  ? options.allocation_alignment
                                  : profile.allocation_alignment;
  info.page_sizes = profile.page_sizes;
  info.capabilities.virtual_memory = false;
  info.capabilities.streams = false;
  info.capabilities.stream_ordered_pools = false;
  info.capabilities.host_accessible = options.memory == SimMemory::kHostBacked;
  info.driver_version = "gpualloc-sim";

  if (options.memory != SimMemory::kFake &&
      options.memory != SimMemory::kHostBacked) {
    return InvalidField("memory", "neither kFake nor kHostBacked");
  }
  if (options.ordinal < 0 || options.ordinal > kMaxOrdinal) {
    return InvalidField(
        "ordinal",
        absl::StrCat(options.ordinal, " is outside [0, ", kMaxOrdinal, "]"));
  }
  if (!IsPowerOfTwo(info.min_granularity)) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity, " is not a power of two"));
  }
  if (!IsPowerOfTwo(info.recommended_granularity)) {
    return InvalidField(
        "recommended_granularity",
        absl::StrCat(info.recommended_granularity, " is not a power of two"));
  }
  if (info.min_granularity > info.recommended_granularity) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity,
                     " exceeds SimOptions.recommended_granularity (",
                     info.recommended_granularity, ")"));
  }
  if (!IsPowerOfTwo(info.allocation_alignment)) {
    return InvalidField(
        "allocation_alignment",
        absl::StrCat(info.allocation_alignment, " is not a power of two"));
  }
  if (info.total_bytes == 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat("must be given: profile ", profile.name,
                     " has no memory size (generic profiles take it from "
                     "the device)"));
  }
  // Real devices report totals that are not granule multiples (an H200 shows
  // 143771 MiB, an odd number of 2 MiB granules), so the total only has to be
  // a whole number of plain-allocation units: then the device can be filled
  // exactly and capacity checks cannot overflow.
  if (info.total_bytes % info.allocation_alignment != 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat(info.total_bytes,
                     " is not a multiple of the allocation alignment (",
                     info.allocation_alignment, ")"));
  }

  auto impl = std::make_unique<Impl>(options, std::move(info));
  return std::shared_ptr<SimBackend>(new SimBackend(std::move(impl)));
}

SimBackend::SimBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimBackend::~SimBackend() = default;

const DeviceInfo& SimBackend::info() const { return impl_->info(); }
absl::StatusOr<std::uint64_t> SimBackend::FreeBytes() {
  return impl_->FreeBytes();
}
absl::StatusOr<DeviceAddress> SimBackend::Allocate(std::uint64_t bytes) {
  return impl_->Allocate(bytes);
}
absl::Status SimBackend::Free(DeviceAddress address) {
  return impl_->Free(address);
}
void SimBackend::FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
  impl_->FailNthCall(op, k, std::move(status));
}
void SimBackend::ClearFaults() { impl_->ClearFaults(); }
std::uint64_t SimBackend::calls(SimOp op) const { return impl_->calls(op); }
std::uint64_t SimBackend::failed_calls(SimOp op) const {
  return impl_->failed_calls(op);
}
std::uint64_t SimBackend::modeled_ns() const { return impl_->modeled_ns(); }
void SimBackend::ResetCounters() { impl_->ResetCounters(); }
std::uint64_t SimBackend::bytes_allocated() const {
  return impl_->bytes_allocated();
}
std::uint64_t SimBackend::live_allocations() const {
  return impl_->live_allocations();
}

}  // namespace gpualloc
