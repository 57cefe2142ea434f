// gpualloc/sim_backend.h: a simulated device, the backend every CPU test and
// tool uses.
//
// The simulator models what an allocator can observe of a GPU: capacity,
// granularity, alignment, page sizes and capabilities (from an architecture
// profile or given explicitly); addresses that are either fake (nothing
// touched, so a 192 GiB device costs no host memory) or backed by host memory
// (so tests can write and check fill patterns); fault injection (fail the k-th
// call of an operation); and a counter of every call with a modeled cost per
// call.
//
// Guarantees the allocator tests rely on: fake addresses are deterministic and
// never reused (a stale pointer cannot alias a later allocation), and separate
// allocations are never contiguous (a guard of at least one granule follows
// each; host-backed guards are PROT_NONE, so an overrun faults).
//
// Thread safety: all methods are thread-safe.
#ifndef GPUALLOC_SIM_BACKEND_H_
#define GPUALLOC_SIM_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/backend.h"

namespace gpualloc {

// The operations the simulator counts, costs and can make fail.
enum class SimOp : int { kAllocate = 0, kFree, kFreeBytes, kCount };
inline constexpr int kNumSimOps = static_cast<int>(SimOp::kCount);
absl::string_view SimOpName(SimOp op);

enum class SimMemory {
  kFake,        // addresses are numbers only; nothing is allocated on the host
  kHostBacked,  // addresses point at host memory the caller may read and write
};

struct SimOptions {
  // Architecture profile whose numbers fill every field left at 0 below.
  std::string profile = "h200";
  std::uint64_t total_bytes = 0;
  std::uint64_t min_granularity = 0;
  std::uint64_t recommended_granularity = 0;
  std::uint64_t allocation_alignment = 0;
  SimMemory memory = SimMemory::kFake;
  // Modeled device-side cost of one call, in nanoseconds. cudaMalloc and
  // cudaFree synchronize the whole device; the defaults are typical host-side
  // figures for a large allocation on a Hopper GPU.
  std::array<std::uint64_t, kNumSimOps> cost_ns = {
      /*kAllocate=*/50'000, /*kFree=*/30'000, /*kFreeBytes=*/1'000};
  int ordinal = 0;
};

class SimBackend final : public Backend {
 public:
  // InvalidArgument when the options are inconsistent (unknown profile,
  // granularity not a power of two, total not a multiple of the allocation
  // alignment...).
  static absl::StatusOr<std::shared_ptr<SimBackend>> Create(
      const SimOptions& options);
  ~SimBackend() override;

  const DeviceInfo& info() const override;
  absl::StatusOr<std::uint64_t> FreeBytes() override;
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) override;
  absl::Status Free(DeviceAddress address) override;

  // Fault injection: the k-th call of `op` from now on (k = 1: the next one; 0
  // clears the pending fault; an OK status is turned into Internal)
  // fails with `status` instead of doing its work. One pending fault per op;
  // a new one replaces it. The failed call is counted but costs nothing.
  void FailNthCall(SimOp op, std::uint64_t k,
                   absl::Status status = absl::ResourceExhaustedError(
                       "simulated fault injected by the test"));
  void ClearFaults();

  // Counters since creation (or the last ResetCounters).
  std::uint64_t calls(SimOp op) const;
  std::uint64_t failed_calls(SimOp op) const;
  std::uint64_t modeled_ns() const;  // sum of cost_ns over successful calls
  void ResetCounters();

  // Device memory currently handed out, and how many allocations hold it.
  std::uint64_t bytes_allocated() const;
  std::uint64_t live_allocations() const;

 private:
  class Impl;
  explicit SimBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpualloc

#endif  // GPUALLOC_SIM_BACKEND_H_
