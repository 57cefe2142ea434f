// SPDX-License-Identifier: Apache-2.0
// tools/cuda/device_bench.cc: gpualloc-device-bench, the measuring half of
// tools/device-check.sh, on a real NVIDIA GPU.
//
// For sizes 256 B .. 1 GiB it times, on the host, the median microseconds per
// operation of:
//   - cuMemAlloc / cuMemFree (what cudaMalloc / cudaFree call);
//   - gpualloc's BFC allocator on the CUDA backend (steady state: the region
//     exists, so this is the allocator's own cost);
//   - gpualloc's async mode (the backend's stream-ordered pool);
//   - virtual memory: cuMemCreate + cuMemMap + cuMemSetAccess, and
//     cuMemUnmap + cuMemRelease, of the size rounded up to the granularity;
//   - each virtual memory call on its own (cuMemCreate, cuMemMap,
//     cuMemSetAccess, cuMemUnmap, cuMemRelease) and cuMemAlloc / cuMemFree,
//     at 2 MiB, 20 MiB and 1 GiB, next to what the simulator's cost model
//     (SimBackend::CallCostNs, the device's architecture profile) predicts
//     for the same calls, and the ratio ten 2 MiB handles : one 20 MiB;
// and reports the granularity and the alignment observed, and the device
// memory actually usable (free after the allocators were made, and the
// largest single cuMemAlloc that succeeds, found by bisection). It also
// writes and reads back a pattern through BFC, pool and mapped memory, and
// times Sleep / Wake of 1 GiB of tagged memory (with and without a backup).
//
//   gpualloc-device-bench [--out FILE] [--max-size BYTES] [--reps N]
//
// Exit status: 0 with the table on stdout (and in FILE); 2 when there is no
// usable CUDA device (the reason on stderr); 1 on any other failure.
#include "tools/cuda/device_bench.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::device_bench {

std::string Human(std::uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0)
    return absl::StrCat(bytes / kGiB, " GiB");
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", double(bytes) / kGiB);
  if (bytes >= kMiB && bytes % kMiB == 0)
    return absl::StrCat(bytes / kMiB, " MiB");
  if (bytes >= kKiB && bytes % kKiB == 0)
    return absl::StrCat(bytes / kKiB, " KiB");
  return absl::StrCat(bytes, " B");
}

double MedianUs(std::vector<double> ns) {
  if (ns.empty()) return -1;
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2] / 1000.0;
}

std::string Cell(double us) {
  return us < 0 ? std::string("n/a") : absl::StrFormat("%.1f", us);
}

double ElapsedNs(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

void Line(std::string& out, const std::string& s) {
  absl::StrAppend(&out, s, "\n");
}

std::uint64_t RoundUp(std::uint64_t size, std::uint64_t gran) {
  return (size + gran - 1) / gran * gran;
}

int RepsFor(const Args& args, std::uint64_t size) {
  return size >= 256 * kMiB ? std::max(5, args.reps / 4) : args.reps;
}

namespace {

// Device 0's primary context, released at the end of the run.
struct PrimaryContextRelease {
  const CudaDriverApi& d;
  CUdevice device;
  CUcontext context;
  ~PrimaryContextRelease() {
    if (context != nullptr) d.cuDevicePrimaryCtxRelease(device);
  }
};

// The direct driver calls (cuMemAlloc, cuMemsetD8, cuMemcpyDtoH) need a
// current context: device 0's primary context, the one the backend and the
// CUDA runtime use, made current on this thread for the whole run. False
// (with the reason on stderr) when it cannot be.
bool MakePrimaryContextCurrent(const CudaDriverApi& d, CUdevice* device,
                               CUcontext* context) {
  if (CUresult r = d.cuDeviceGet(device, 0); r == CUDA_SUCCESS) {
    r = d.cuDevicePrimaryCtxRetain(context, *device);
    if (r == CUDA_SUCCESS) r = d.cuCtxSetCurrent(*context);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "cannot make the primary context current: %s\n",
                   gpualloc::cuda::CudaError(d, "cuCtxSetCurrent", r)
                       .ToString()
                       .c_str());
      return false;
    }
  }
  return true;
}

void AppendDeviceLines(const Bench& b, std::string& out) {
  const gpualloc::DeviceInfo& info = b.info;
  const CudaDriverApi& d = b.d;
  Line(out, "# gpualloc device check");
  Line(out, "");
  Line(out,
       absl::StrFormat("- device: %s (%s), %s total, CUDA driver %s (entry "
                       "points for CUDA %s)",
                       info.name, info.arch_id, Human(info.total_bytes),
                       info.driver_version,
                       gpualloc::cuda::CudaVersionString(d.requested_version)));
  Line(out, absl::StrFormat("- profile: %s; %s",
                            b.backend->profile_choice().profile->name,
                            b.backend->profile_choice().reason));
  Line(out, absl::StrFormat(
                "- capabilities: virtual memory %s, stream-ordered pools %s%s",
                info.capabilities.virtual_memory ? "yes" : "no",
                info.capabilities.stream_ordered_pools ? "yes" : "no",
                d.missing.empty() ? ""
                                  : absl::StrCat(" (missing entry points: ",
                                                 d.missing.size(), ")")));
  Line(out,
       absl::StrFormat(
           "- granularity (cuMemGetAllocationGranularity): minimum %s, "
           "recommended %s",
           Human(info.min_granularity), Human(info.recommended_granularity)));
}

// Alignment observed: the lowest set bit over 64 small cuMemAllocs, and the
// spacing between consecutive ones.
void AppendAlignment(const Bench& b, std::string& out) {
  const CudaDriverApi& d = b.d;
  std::vector<CUdeviceptr> ptrs;
  std::uint64_t lowest = ~std::uint64_t{0};
  std::uint64_t min_gap = ~std::uint64_t{0};
  for (int i = 0; i < 64; ++i) {
    CUdeviceptr p = 0;
    if (d.cuMemAlloc(&p, 256) != CUDA_SUCCESS) break;
    lowest = std::min<std::uint64_t>(lowest, p & (~p + 1));
    if (!ptrs.empty()) {
      const std::uint64_t gap =
          p > ptrs.back() ? p - ptrs.back() : ptrs.back() - p;
      min_gap = std::min(min_gap, gap);
    }
    ptrs.push_back(p);
  }
  for (CUdeviceptr p : ptrs) d.cuMemFree(p);
  Line(
      out,
      absl::StrFormat(
          "- alignment observed: 64 cuMemAlloc(256 B) were aligned to at least "
          "%s, the closest two %s apart (promised: %s)",
          Human(lowest), Human(min_gap), Human(b.info.allocation_alignment)));
}

// The allocators under test. False (with the reason on stderr) when the BFC
// one cannot be made; the async one is left null with its reason.
bool MakeAllocators(Bench& b) {
  gpualloc::Options bfc_options;
  bfc_options.preallocate = false;
  bfc_options.memory_limit = std::max<std::uint64_t>(4 * b.args.max_size, kGiB);
  bfc_options.name = "bench-bfc";
  absl::StatusOr<std::unique_ptr<gpualloc::Allocator>> bfc =
      gpualloc::CreateAllocator(bfc_options, b.backend);
  if (!bfc.ok()) {
    std::fprintf(stderr, "BFC allocator: %s\n",
                 bfc.status().ToString().c_str());
    return false;
  }
  b.bfc = *std::move(bfc);
  if (b.info.capabilities.stream_ordered_pools) {
    gpualloc::Options o = bfc_options;
    o.mode = gpualloc::AllocatorMode::kAsync;
    o.name = "bench-async";
    auto a = gpualloc::CreateAllocator(o, b.backend);
    if (a.ok()) {
      b.async = *std::move(a);
    } else {
      b.async_error = a.status().ToString();
    }
  }
  return true;
}

void AppendTables(const Bench& b, const std::vector<std::string>& rows,
                  const CallTable& calls, std::string& out) {
  Line(out, "");
  Line(out, "Median host microseconds per operation (" +
                absl::StrCat(b.args.reps) +
                " repetitions, fewer from 256 MiB; "
                "BFC and pool in steady state; VMM sizes rounded up to the "
                "granularity):");
  Line(out, "");
  Line(out,
       "| size | cuMemAlloc | cuMemFree | BFC alloc | BFC free | pool alloc | "
       "pool free | VMM create+map+access | VMM unmap+release |");
  Line(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const std::string& r : rows) Line(out, r);

  Line(out, "");
  Line(out, absl::StrCat("Each call on its own: median host microseconds (",
                         b.args.reps,
                         " repetitions, fewer at 1 GiB), next to the "
                         "simulator's cost model for "
                         "profile ",
                         b.backend->profile_choice().profile->name,
                         " (SimBackend::CallCostNs; cuMemFree's model leaves "
                         "out its wait, and "
                         "nothing is pending here):"));
  Line(out, "");
  for (const std::string& r : calls.rows) Line(out, r);
  if (!calls.ratio_line.empty()) {
    Line(out, "");
    Line(out, calls.ratio_line);
  }

  const gpualloc::Stats bs = b.bfc->GetStats();
  Line(out, "");
  Line(out,
       absl::StrFormat(
           "- BFC: %d backend allocations, %d backend frees, peak reserved %s "
           "(expandable regions %s)",
           bs.backend_allocs, bs.backend_frees, Human(bs.peak_bytes_reserved),
           b.info.capabilities.virtual_memory ? "available" : "unavailable"));
}

// Every measurement after the allocators were made, in order, into the
// report.
void Measure(Bench& b, std::string& out) {
  std::vector<std::string> rows;
  // A reservation for the VMM timings, reused by every size.
  b.round_max = RoundUp(b.args.max_size, b.gran);
  b.va = b.info.capabilities.virtual_memory
             ? b.backend->ReserveAddress(b.round_max, 0)
             : absl::StatusOr<gpualloc::DeviceAddress>(
                   absl::UnimplementedError("no virtual memory"));
  for (std::uint64_t size : Sizes(b.args)) rows.push_back(SizeRow(b, size));
  const CallTable calls = TimeCalls(b);
  const MemoryCheckCalls check_calls = LoadMemoryCheckCalls();
  AppendMemoryCheck(b, check_calls, out);
  if (b.info.capabilities.virtual_memory) {
    const std::uint64_t size = std::min<std::uint64_t>(b.args.max_size, kGiB);
    Line(out,
         absl::StrFormat("- sleep/wake of %s of tagged memory: %s", Human(size),
                         SleepWake(b.backend, check_calls, size, &b.errors)));
  }
  AppendTables(b, rows, calls, out);
  AppendUsableMemory(b, out);
  if (!b.errors.empty()) {
    Line(out, "");
    Line(out, "Errors:");
    for (const std::string& e : b.errors) Line(out, "- " + e);
  }
}

int Run(const Args& args) {
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api =
      gpualloc::cuda::SharedCudaDriver();
  if (!api.ok()) {
    std::fprintf(stderr, "no CUDA device: %s\n",
                 std::string(api.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::shared_ptr<CudaBackend>> made =
      CudaBackend::Create(*api, 0);
  if (!made.ok()) {
    std::fprintf(stderr, "no CUDA device: %s\n",
                 std::string(made.status().message()).c_str());
    return absl::IsUnavailable(made.status()) ? 2 : 1;
  }
  const CudaDriverApi& d = **api;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (!MakePrimaryContextCurrent(d, &device, &context)) return 1;
  PrimaryContextRelease release{d, device, context};
  Bench b(args, d, *made);
  std::string out;
  AppendDeviceLines(b, out);
  AppendAlignment(b, out);
  if (!MakeAllocators(b)) return 1;
  Measure(b, out);

  std::fputs(out.c_str(), stdout);
  std::ofstream file(args.out);
  file << out;
  if (!file) {
    std::fprintf(stderr, "cannot write %s\n", args.out.c_str());
    return 1;
  }
  return b.errors.empty() ? 0 : 1;
}

}  // namespace

}  // namespace gpualloc::device_bench

int main(int argc, char** argv) {
  using gpualloc::device_bench::Args;
  using gpualloc::device_bench::Run;
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      args.out = argv[++i];
    } else if (a == "--max-size" && i + 1 < argc) {
      args.max_size = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--reps" && i + 1 < argc) {
      args.reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: gpualloc-device-bench [--out FILE] [--max-size "
                   "BYTES] [--reps N]\n");
      return a == "--help" ? 0 : 1;
    }
  }
  if (args.max_size < 256 || args.reps < 1) {
    std::fprintf(stderr, "--max-size must be >= 256 and --reps >= 1\n");
    return 1;
  }
  return Run(args);
}
