// SPDX-License-Identifier: Apache-2.0
// tools/cuda/device_bench_sizes.cc: gpualloc-device-bench's first table: per
// size, the median microseconds of an allocation and a free through
// cuMemAlloc / cuMemFree, gpualloc's BFC and async allocators, and the
// virtual memory calls (create + map + set access, unmap + release).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
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
#include "tools/cuda/device_bench.h"

namespace gpualloc::device_bench {

std::vector<std::uint64_t> Sizes(const Args& args) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = 256; s <= args.max_size; s *= 8) sizes.push_back(s);
  for (std::uint64_t s : {2 * kMiB, 128 * kMiB, kGiB}) {
    if (s <= args.max_size) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

namespace {

// Times alloc/free pairs; `alloc` returns the pointer or an error.
Pair TimePairs(int reps,
               const std::function<absl::StatusOr<std::uint64_t>()>& alloc,
               const std::function<absl::Status(std::uint64_t)>& free) {
  Pair pair;
  std::vector<double> a_ns, f_ns;
  for (int i = -1; i < reps; ++i) {  // i == -1: warm-up, not timed
    Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::uint64_t> p = alloc();
    const double a = ElapsedNs(t0);
    if (!p.ok()) {
      pair.error = p.status().ToString();
      return pair;
    }
    t0 = Clock::now();
    const absl::Status s = free(*p);
    const double f = ElapsedNs(t0);
    if (!s.ok()) {
      pair.error = s.ToString();
      return pair;
    }
    if (i >= 0) {
      a_ns.push_back(a);
      f_ns.push_back(f);
    }
  }
  pair.first = MedianUs(a_ns);
  pair.second = MedianUs(f_ns);
  return pair;
}

Pair TimeCuMemAlloc(const Bench& b, std::uint64_t size) {
  const CudaDriverApi& d = b.d;
  return TimePairs(
      RepsFor(b.args, size),
      [&]() -> absl::StatusOr<std::uint64_t> {
        CUdeviceptr p = 0;
        const CUresult r = d.cuMemAlloc(&p, size);
        if (r != CUDA_SUCCESS)
          return gpualloc::cuda::CudaError(d, "cuMemAlloc", r);
        return p;
      },
      [&](std::uint64_t p) {
        return gpualloc::cuda::CudaError(d, "cuMemFree", d.cuMemFree(p));
      });
}

Pair TimeAllocator(const Bench& b, gpualloc::Allocator& a, std::uint64_t size) {
  return TimePairs(
      RepsFor(b.args, size),
      [&]() -> absl::StatusOr<std::uint64_t> {
        auto p = a.Allocate(size);
        if (!p.ok()) return p.status();
        return reinterpret_cast<std::uint64_t>(*p);
      },
      [&](std::uint64_t p) {
        return a.Deallocate(reinterpret_cast<void*>(p));
      });
}

// cuMemCreate + cuMemMap + cuMemSetAccess, and cuMemUnmap + cuMemRelease,
// into the reserved range.
Pair TimeVmm(const Bench& b, std::uint64_t size) {
  const std::uint64_t rounded = RoundUp(size, b.gran);
  gpualloc::PhysicalHandle handle = 0;
  CudaBackend& backend = *b.backend;
  const gpualloc::DeviceAddress va = *b.va;
  return TimePairs(
      RepsFor(b.args, size),
      [&]() -> absl::StatusOr<std::uint64_t> {
        auto h = backend.CreatePhysical(rounded);
        if (!h.ok()) return h.status();
        handle = *h;
        if (auto s = backend.Map(va, rounded, handle); !s.ok()) return s;
        if (auto s = backend.SetAccess(va, rounded); !s.ok()) return s;
        return va;
      },
      [&](std::uint64_t p) {
        if (auto s = backend.Unmap(p, rounded); !s.ok()) return s;
        return backend.ReleasePhysical(handle);
      });
}

}  // namespace

// One size's row of the first table; its errors go to b.errors.
std::string SizeRow(Bench& b, std::uint64_t size) {
  const Pair raw = TimeCuMemAlloc(b, size);
  const Pair bfc = TimeAllocator(b, *b.bfc, size);
  Pair pool;
  if (b.async != nullptr) {
    pool = TimeAllocator(b, *b.async, size);
  } else {
    pool.error =
        b.async_error.empty() ? "no stream-ordered pools" : b.async_error;
  }
  Pair vmm;
  if (b.va.ok()) {
    vmm = TimeVmm(b, size);
  } else {
    vmm.error = b.va.status().ToString();
  }
  for (const Pair* p :
       std::initializer_list<const Pair*>{&raw, &bfc, &pool, &vmm}) {
    if (!p->error.empty())
      b.errors.push_back(absl::StrCat(Human(size), ": ", p->error));
  }
  return absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s | %s |",
                         Human(size), Cell(raw.first), Cell(raw.second),
                         Cell(bfc.first), Cell(bfc.second), Cell(pool.first),
                         Cell(pool.second), Cell(vmm.first), Cell(vmm.second));
}

}  // namespace gpualloc::device_bench
