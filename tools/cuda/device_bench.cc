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
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace {

using gpualloc::cuda::CudaBackend;
using gpualloc::cuda::CudaDriverApi;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = 1024 * kKiB;
constexpr std::uint64_t kGiB = 1024 * kMiB;

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

MemoryCheckCalls LoadMemoryCheckCalls() {
  MemoryCheckCalls c;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return c;
  c.memset_d8 =
      reinterpret_cast<decltype(c.memset_d8)>(dlsym(lib, "cuMemsetD8_v2"));
  c.copy_to_host =
      reinterpret_cast<decltype(c.copy_to_host)>(dlsym(lib, "cuMemcpyDtoH_v2"));
  c.synchronize =
      reinterpret_cast<decltype(c.synchronize)>(dlsym(lib, "cuCtxSynchronize"));
  return c;
}

// Reads the first and last KiB of [ptr, ptr + bytes) back, expecting `value`.
std::string VerifyMemory(const MemoryCheckCalls& c, std::uint64_t ptr,
                         std::uint64_t bytes, unsigned char value) {
  const std::uint64_t n = std::min<std::uint64_t>(bytes, kKiB);
  std::vector<unsigned char> host(n);
  for (std::uint64_t at : {std::uint64_t{0}, bytes - n}) {
    if (c.copy_to_host(host.data(), ptr + at, n) != CUDA_SUCCESS) {
      return "cuMemcpyDtoH failed";
    }
    for (unsigned char b : host) {
      if (b != value) return "MISMATCH";
    }
  }
  return "ok";
}

// Writes a byte to [ptr, ptr + bytes) and reads the first and last KiB back.
std::string CheckMemory(const MemoryCheckCalls& c, std::uint64_t ptr,
                        std::uint64_t bytes, unsigned char value) {
  if (!c.ok()) return "skipped (cuMemsetD8/cuMemcpyDtoH not found)";
  if (c.memset_d8(ptr, value, bytes) != CUDA_SUCCESS)
    return "cuMemsetD8 failed";
  if (c.synchronize() != CUDA_SUCCESS) return "cuCtxSynchronize failed";
  return VerifyMemory(c, ptr, bytes, value);
}

// Sleep and wake of `bytes` of tagged memory (Allocator::Sleep): the host
// time of each call, the device memory cuMemGetInfo reports free before and
// after the sleep, and, with a host backup, the content after the wake.
std::string SleepWake(const std::shared_ptr<CudaBackend>& backend,
                      const MemoryCheckCalls& calls, std::uint64_t bytes,
                      std::vector<std::string>* errors) {
  gpualloc::Options o;
  o.preallocate = false;
  o.expandable = gpualloc::Tristate::kOn;
  o.name = "bench-sleep";
  auto a = gpualloc::CreateAllocator(o, backend);
  if (!a.ok()) return absl::StrCat("n/a: ", a.status().ToString());
  auto p = (*a)->Allocate(bytes, gpualloc::Stream(), 0, /*tag=*/1);
  if (!p.ok()) return absl::StrCat("n/a: ", p.status().ToString());
  const std::uint64_t ptr = reinterpret_cast<std::uintptr_t>(*p);
  auto free_bytes = [&]() -> std::int64_t {
    absl::StatusOr<std::uint64_t> f = backend->FreeBytes();
    return f.ok() ? static_cast<std::int64_t>(*f) : -1;
  };
  double us[4] = {-1, -1, -1, -1};
  auto timed = [&](absl::Status status) {
    if (!status.ok()) errors->push_back("sleep/wake: " + status.ToString());
    return status.ok();
  };
  std::string content = "n/a";
  const std::int64_t before = free_bytes();
  std::int64_t after = -1;
  Clock::time_point t = Clock::now();
  bool ok = timed((*a)->Sleep(1).status());
  us[0] = ElapsedNs(t) / 1000;
  after = free_bytes();
  t = Clock::now();
  ok = ok && timed((*a)->Wake(1));
  us[1] = ElapsedNs(t) / 1000;
  if (ok && CheckMemory(calls, ptr, bytes, 0x6b) == "ok") {
    t = Clock::now();
    ok = timed((*a)->Sleep(1, /*backup=*/true).status());
    us[2] = ElapsedNs(t) / 1000;
    t = Clock::now();
    ok = ok && timed((*a)->Wake(1));
    us[3] = ElapsedNs(t) / 1000;
    content = ok ? VerifyMemory(calls, ptr, bytes, 0x6b) : "n/a";
    if (content != "ok" && ok) errors->push_back("sleep/wake: " + content);
  }
  (void)(*a)->Deallocate(*p);
  return absl::StrFormat(
      "Sleep %s us (device memory free %s -> %s), Wake %s us; with a host "
      "backup: Sleep %s us, Wake %s us, content after the wake %s",
      Cell(us[0]), before < 0 ? "?" : Human(before),
      after < 0 ? "?" : Human(after), Cell(us[1]), Cell(us[2]), Cell(us[3]),
      content);
}

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

void Line(std::string& out, const std::string& s) {
  absl::StrAppend(&out, s, "\n");
}

std::uint64_t RoundUp(std::uint64_t size, std::uint64_t gran) {
  return (size + gran - 1) / gran * gran;
}

int RepsFor(const Args& args, std::uint64_t size) {
  return size >= 256 * kMiB ? std::max(5, args.reps / 4) : args.reps;
}

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

// The driver calls timed one by one, with the simulator's operation for each.
struct CallRow {
  const char* name;
  gpualloc::SimOp op;
};
constexpr CallRow kCallRows[] = {
    {"cuMemCreate", gpualloc::SimOp::kCreatePhysical},
    {"cuMemMap", gpualloc::SimOp::kMap},
    {"cuMemSetAccess", gpualloc::SimOp::kSetAccess},
    {"cuMemUnmap", gpualloc::SimOp::kUnmap},
    {"cuMemRelease", gpualloc::SimOp::kReleasePhysical},
    {"cuMemAlloc", gpualloc::SimOp::kAllocate},
    {"cuMemFree", gpualloc::SimOp::kFree}};
constexpr int kCalls = sizeof(kCallRows) / sizeof(kCallRows[0]);

// The simulator's cost model for the device's profile.
struct CostModel {
  absl::StatusOr<std::shared_ptr<gpualloc::SimBackend>> model;
  double Us(gpualloc::SimOp op, std::uint64_t bytes) const {
    return model.ok() ? double((*model)->CallCostNs(op, bytes)) / 1000.0 : -1.0;
  }
};

CostModel MakeCostModel(Bench& b) {
  gpualloc::SimOptions model_options;
  model_options.profile =
      std::string(b.backend->profile_choice().profile->name);
  model_options.total_bytes = 1024 * kGiB;  // any size: only costs are read
  CostModel m{gpualloc::SimBackend::Create(model_options)};
  if (!m.model.ok()) {
    b.errors.push_back(
        absl::StrCat("cost model: ", m.model.status().ToString()));
  }
  return m;
}

// The VMM calls of one repetition at `size`, each timed into t[0..4]; an
// error stops the repetition.
absl::Status TimeVmmCalls(const Bench& b, std::uint64_t size, double* t) {
  CudaBackend& backend = *b.backend;
  const gpualloc::DeviceAddress va = *b.va;
  Clock::time_point t0 = Clock::now();
  absl::StatusOr<gpualloc::PhysicalHandle> h = backend.CreatePhysical(size);
  t[0] = ElapsedNs(t0);
  if (!h.ok()) return h.status();
  absl::Status s;
  t0 = Clock::now();
  s = backend.Map(va, size, *h);
  t[1] = ElapsedNs(t0);
  if (s.ok()) {
    t0 = Clock::now();
    s = backend.SetAccess(va, size);
    t[2] = ElapsedNs(t0);
    t0 = Clock::now();
    const absl::Status u = backend.Unmap(va, size);
    t[3] = ElapsedNs(t0);
    if (s.ok()) s = u;
  }
  t0 = Clock::now();
  const absl::Status r = backend.ReleasePhysical(*h);
  t[4] = ElapsedNs(t0);
  if (s.ok()) s = r;
  return s;
}

// cuMemAlloc and cuMemFree of one repetition at `size`, timed into t[5..6].
std::string TimeAllocCalls(const Bench& b, std::uint64_t size, double* t) {
  const CudaDriverApi& d = b.d;
  CUdeviceptr p = 0;
  Clock::time_point t0 = Clock::now();
  CUresult r = d.cuMemAlloc(&p, size);
  t[5] = ElapsedNs(t0);
  if (r != CUDA_SUCCESS) {
    return gpualloc::cuda::CudaError(d, "cuMemAlloc", r).ToString();
  }
  t0 = Clock::now();
  r = d.cuMemFree(p);
  t[6] = ElapsedNs(t0);
  if (r != CUDA_SUCCESS) {
    return gpualloc::cuda::CudaError(d, "cuMemFree", r).ToString();
  }
  return "";
}

// Each call's median us at `size` (already rounded to the granularity; -1:
// not measured); an error goes to b.errors.
std::vector<double> MeasureCalls(Bench& b, std::uint64_t size) {
  std::vector<std::vector<double>> ns(kCalls);
  const int reps = RepsFor(b.args, size);
  std::string error;
  for (int i = -1; i < reps && error.empty(); ++i) {  // -1: warm-up
    double t[kCalls] = {};
    if (b.va.ok()) {
      const absl::Status s = TimeVmmCalls(b, size, t);
      if (!s.ok()) {
        error = s.ToString();
        break;
      }
    }
    error = TimeAllocCalls(b, size, t);
    if (!error.empty()) break;
    if (i < 0) continue;
    for (int c = b.va.ok() ? 0 : 5; c < kCalls; ++c) ns[c].push_back(t[c]);
  }
  if (!error.empty()) {
    b.errors.push_back(absl::StrCat("calls at ", Human(size), ": ", error));
  }
  std::vector<double> measured(kCalls, -1);
  for (int c = 0; c < kCalls; ++c) measured[c] = MedianUs(ns[c]);
  return measured;
}

// Ten 2 MiB handles vs one 20 MiB handle: create + map + set access, and
// cuMemMap alone. `measured` is by size (2 MiB, 20 MiB) and call.
std::string RatioLine(const std::vector<std::vector<double>>& measured,
                      const std::vector<std::uint64_t>& call_sizes,
                      const CostModel& model) {
  auto grow = [&](std::size_t z, bool use_model) {
    double sum = 0;
    for (int c = 0; c < 3; ++c) {
      const double us =
          use_model ? model.Us(kCallRows[c].op, call_sizes[z]) : measured[z][c];
      if (us < 0) return -1.0;
      sum += us;
    }
    return sum;
  };
  auto ratio = [&](bool use_model) {
    const double small = grow(0, use_model), large = grow(1, use_model);
    return small < 0 || large <= 0
               ? std::string("n/a")
               : absl::StrFormat("%.1fx", 10 * small / large);
  };
  auto map_ratio = [&](bool use_model) {
    const double small =
        use_model ? model.Us(kCallRows[1].op, 2 * kMiB) : measured[0][1];
    const double large =
        use_model ? model.Us(kCallRows[1].op, 20 * kMiB) : measured[1][1];
    return small < 0 || large <= 0
               ? std::string("n/a")
               : absl::StrFormat("%.1fx", 10 * small / large);
  };
  return absl::StrFormat(
      "- ten 2 MiB handles vs one 20 MiB: create+map+access %s measured, "
      "%s modeled; cuMemMap alone %s measured, %s modeled",
      ratio(false), ratio(true), map_ratio(false), map_ratio(true));
}

// The second table (each call on its own, measured and modeled) and the
// ratio line under it (empty when 2 and 20 MiB were not both measured).
struct CallTable {
  std::vector<std::string> rows;
  std::string ratio_line;
};

CallTable TimeCalls(Bench& b) {
  CallTable table;
  const CostModel model = MakeCostModel(b);
  std::vector<std::uint64_t> call_sizes;
  for (std::uint64_t s : {2 * kMiB, 20 * kMiB, kGiB}) {
    if (s <= b.args.max_size) call_sizes.push_back(s);
  }
  // measured[size][call], median us (-1: not measured).
  std::vector<std::vector<double>> measured;
  for (std::uint64_t s : call_sizes) {
    measured.push_back(MeasureCalls(b, RoundUp(s, b.gran)));
  }
  std::string header = "| call |";
  std::string rule = "|---|";
  for (std::uint64_t size : call_sizes) {
    absl::StrAppend(&header, " ", Human(size), " measured | ", Human(size),
                    " model |");
    absl::StrAppend(&rule, "---:|---:|");
  }
  table.rows.push_back(header);
  table.rows.push_back(rule);
  for (int c = 0; c < kCalls; ++c) {
    std::string row = absl::StrCat("| ", kCallRows[c].name, " |");
    for (std::size_t z = 0; z < call_sizes.size(); ++z) {
      const std::uint64_t size = RoundUp(call_sizes[z], b.gran);
      absl::StrAppend(&row, " ", Cell(measured[z][c]), " | ",
                      Cell(model.Us(kCallRows[c].op, size)), " |");
    }
    table.rows.push_back(row);
  }
  if (call_sizes.size() >= 2 && call_sizes[0] == 2 * kMiB &&
      call_sizes[1] == 20 * kMiB) {
    table.ratio_line = RatioLine(measured, call_sizes, model);
  }
  return table;
}

// Memory check through each path, with the largest size measured.
void AppendMemoryCheck(const Bench& b, const MemoryCheckCalls& calls,
                       std::string& out) {
  const std::uint64_t size =
      std::min<std::uint64_t>(b.args.max_size, 64 * kMiB);
  std::string bfc_check = "n/a", pool_check = "n/a", vmm_check = "n/a";
  if (auto p = b.bfc->Allocate(size); p.ok()) {
    bfc_check =
        CheckMemory(calls, reinterpret_cast<std::uint64_t>(*p), size, 0x5a);
    (void)b.bfc->Deallocate(*p);
  }
  if (b.async != nullptr) {
    if (auto p = b.async->Allocate(size); p.ok()) {
      pool_check =
          CheckMemory(calls, reinterpret_cast<std::uint64_t>(*p), size, 0xa5);
      (void)b.async->Deallocate(*p);
    }
  }
  if (b.va.ok()) {
    const std::uint64_t rounded = RoundUp(size, b.gran);
    if (auto h = b.backend->CreatePhysical(rounded); h.ok()) {
      if (b.backend->Map(*b.va, rounded, *h).ok() &&
          b.backend->SetAccess(*b.va, rounded).ok()) {
        vmm_check = CheckMemory(calls, *b.va, rounded, 0x3c);
        (void)b.backend->Unmap(*b.va, rounded);
      }
      (void)b.backend->ReleasePhysical(*h);
    }
  }
  Line(out, absl::StrFormat(
                "- write/read-back check (%s): BFC %s, pool %s, mapped %s",
                Human(size), bfc_check, pool_check, vmm_check));
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

// Usable memory, after the allocators have given back what they hold.
void AppendUsableMemory(Bench& b, std::string& out) {
  const CudaDriverApi& d = b.d;
  (void)b.bfc->Trim();
  if (b.async != nullptr) (void)b.async->Trim();
  if (b.va.ok()) (void)b.backend->FreeAddress(*b.va, b.round_max);
  absl::StatusOr<std::uint64_t> free = b.backend->FreeBytes();
  std::uint64_t lo = 0, hi = free.ok() ? *free : b.info.total_bytes;
  // Largest single cuMemAlloc, to 2 MiB.
  while (hi - lo > 2 * kMiB) {
    const std::uint64_t mid = (lo + (hi - lo) / 2) / (2 * kMiB) * (2 * kMiB);
    if (mid <= lo) break;
    CUdeviceptr p = 0;
    if (d.cuMemAlloc(&p, mid) == CUDA_SUCCESS) {
      d.cuMemFree(p);
      lo = mid;
    } else {
      hi = mid;
    }
  }
  Line(out, absl::StrFormat(
                "- usable memory: %s free (cuMemGetInfo) after the allocators "
                "were made "
                "and trimmed; the largest single cuMemAlloc that succeeds is "
                "%s (%.1f%% "
                "of the %s total)",
                free.ok() ? Human(*free) : std::string(free.status().message()),
                Human(lo), 100.0 * double(lo) / double(b.info.total_bytes),
                Human(b.info.total_bytes)));
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

int main(int argc, char** argv) {
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
