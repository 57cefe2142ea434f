// SPDX-License-Identifier: Apache-2.0
// tools/bench/host_offload.cc: the shape of an offload step on the simulator
// (fake memory, manual clock), through the pinned host memory pool against
// HostAllocate / HostFree per request: 8 buffers of 4 to 64 MiB allocated,
// each copied on a copy stream (recorded on it), freed, 20 steps; the copies
// complete between steps. Prints, for each way: the HostAllocate calls, the
// modeled time of the backend calls (and host waits), the peak pinned bytes,
// and the host's wall time per allocate/free operation.
//   build/tools/bench/host_offload
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/host_allocator.h"

namespace gpualloc {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr int kSteps = 20;
constexpr Stream kCopy(0x100);
const std::uint64_t kSizes[] = {4 * kMiB,  64 * kMiB, 16 * kMiB, 8 * kMiB,
                                32 * kMiB, 4 * kMiB,  48 * kMiB, 12 * kMiB};

struct Result {
  std::uint64_t host_allocates = 0;
  std::uint64_t modeled_ns = 0;
  std::uint64_t peak_bytes = 0;
  double ns_per_op = 0;
};

void Check(bool ok) {
  if (!ok) std::abort();
}

Result Direct() {
  auto sim = *SimBackend::Create(SimOptions());
  double wall = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<void*> live;
    for (std::uint64_t bytes : kSizes) {
      const auto t0 = std::chrono::steady_clock::now();
      void* p = *sim->HostAllocate(bytes);
      wall += std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
      sim->Use(kCopy, reinterpret_cast<DeviceAddress>(p), bytes);
      live.push_back(p);
    }
    for (void* p : live) {
      const auto t0 = std::chrono::steady_clock::now();
      Check(sim->HostFree(p).ok());  // waits for the copies
      wall += std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    }
  }
  return {sim->calls(SimOp::kHostAllocate), sim->modeled_ns(),
          sim->peak_host_bytes_allocated(),
          wall / (2.0 * kSteps * std::size(kSizes))};
}

Result Pooled() {
  auto sim = *SimBackend::Create(SimOptions());
  auto pool = *CreateHostAllocator(Options(), sim);
  double wall = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<void*> live;
    for (std::uint64_t bytes : kSizes) {
      const auto t0 = std::chrono::steady_clock::now();
      void* p = *pool->Allocate(bytes);
      wall += std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
      Check(pool->RecordStream(p, kCopy).ok());
      sim->Use(kCopy, reinterpret_cast<DeviceAddress>(p), bytes);
      live.push_back(p);
    }
    for (void* p : live) {
      const auto t0 = std::chrono::steady_clock::now();
      Check(pool->Deallocate(p).ok());
      wall += std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    }
    sim->CompleteStream(kCopy);  // the copies finish during the next step
  }
  Check(sim->hazards() == 0 && pool->GetStats().host_waits == 0);
  return {sim->calls(SimOp::kHostAllocate), sim->modeled_ns(),
          pool->GetStats().peak_bytes_reserved,
          wall / (2.0 * kSteps * std::size(kSizes))};
}

void Print(const char* name, const Result& r) {
  std::printf("%-22s %14llu %14.3f %16.1f %12.0f\n", name,
              static_cast<unsigned long long>(r.host_allocates),
              static_cast<double>(r.modeled_ns) / 1e6,
              static_cast<double>(r.peak_bytes) / static_cast<double>(kMiB),
              r.ns_per_op);
}

}  // namespace
}  // namespace gpualloc

int main() {
  using namespace gpualloc;
  std::printf("offload step: 8 buffers (188 MiB), 20 steps, simulated h200\n");
  std::printf("%-22s %14s %14s %16s %12s\n", "", "HostAllocate", "modeled ms",
              "peak pinned MiB", "host ns/op");
  Print("HostAllocate/HostFree", Direct());
  Print("host pool", Pooled());
  return 0;
}
