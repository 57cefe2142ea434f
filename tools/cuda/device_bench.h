// SPDX-License-Identifier: Apache-2.0
// tools/cuda/device_bench.h: what gpualloc-device-bench's files share: the
// sizes, the arguments, the state the measurements share (Bench), the small
// helpers of the report, and each group of measurements (the per-size table in
// device_bench_sizes.cc, the driver calls one by one in device_bench_calls.cc,
// the memory checks in device_bench_memory.cc). Internal to tools/cuda.
#ifndef GPUALLOC_TOOLS_CUDA_DEVICE_BENCH_H_
#define GPUALLOC_TOOLS_CUDA_DEVICE_BENCH_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/layer.h"

namespace gpualloc::device_bench {

using gpualloc::cuda::CudaBackend;
using gpualloc::cuda::CudaDriverApi;
using Clock = std::chrono::steady_clock;

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

std::string Human(std::uint64_t bytes);
double MedianUs(std::vector<double> ns);
std::string Cell(double us);
double ElapsedNs(Clock::time_point start);

// A pair of timed operations per size: (allocate, free) medians in us.
struct Pair {
  double first = -1;
  double second = -1;
  std::string error;
};

// Extra driver calls for the memory check, resolved from the same library by
// their exported (versioned) names; the backend's table does not need them.
struct MemoryCheckCalls {
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*copy_to_host)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*synchronize)() = nullptr;
  bool ok() const { return memset_d8 && copy_to_host && synchronize; }
};

struct Args {
  std::string out = "device-bench.md";
  std::uint64_t max_size = kGiB;
  int reps = 31;
};

// What the measurements share: the arguments, the driver, the backend and
// its device, the errors so far, the address range the VMM timings map into
// and the allocators under test.
struct Bench {
  Bench(const Args& a, const CudaDriverApi& driver,
        std::shared_ptr<CudaBackend> b)
      : args(a),
        d(driver),
        backend(std::move(b)),
        info(backend->info()),
        gran(info.min_granularity) {}

  const Args& args;
  const CudaDriverApi& d;
  std::shared_ptr<CudaBackend> backend;
  const gpualloc::DeviceInfo& info;
  std::uint64_t gran = 0;
  std::vector<std::string> errors;
  std::uint64_t round_max = 0;
  absl::StatusOr<gpualloc::DeviceAddress> va =
      absl::UnimplementedError("not reserved");
  std::unique_ptr<gpualloc::Allocator> bfc;
  std::unique_ptr<gpualloc::Allocator> async;
  std::string async_error;
};

void Line(std::string& out, const std::string& s);
std::uint64_t RoundUp(std::uint64_t size, std::uint64_t gran);
int RepsFor(const Args& args, std::uint64_t size);

// device_bench_sizes.cc: the sizes of the first table, 256 B .. --max-size.
std::vector<std::uint64_t> Sizes(const Args& args);
// One size's row of the first table; its errors go to b.errors.
std::string SizeRow(Bench& b, std::uint64_t size);

// device_bench_calls.cc:
// The second table (each call on its own, measured and modeled) and the
// ratio line under it (empty when 2 and 20 MiB were not both measured).
struct CallTable {
  std::vector<std::string> rows;
  std::string ratio_line;
};

CallTable TimeCalls(Bench& b);

// device_bench_memory.cc:
MemoryCheckCalls LoadMemoryCheckCalls();
// Sleep and wake of `bytes` of tagged memory (Allocator::Sleep).
std::string SleepWake(const std::shared_ptr<CudaBackend>& backend,
                      const MemoryCheckCalls& calls, std::uint64_t bytes,
                      std::vector<std::string>* errors);
// Memory check through each path, with the largest size measured.
void AppendMemoryCheck(const Bench& b, const MemoryCheckCalls& calls,
                       std::string& out);
// Usable memory, after the allocators have given back what they hold.
void AppendUsableMemory(Bench& b, std::string& out);

}  // namespace gpualloc::device_bench

#endif  // GPUALLOC_TOOLS_CUDA_DEVICE_BENCH_H_
