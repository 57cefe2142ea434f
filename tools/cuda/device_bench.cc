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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/allocator.h"
#include "gpualloc/backend.h"
#include "gpualloc/sim_backend.h"

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
  std::shared_ptr<CudaBackend> backend = *made;
  const CudaDriverApi& d = **api;
  // The direct driver calls below (cuMemAlloc, cuMemsetD8, cuMemcpyDtoH) need
  // a current context: device 0's primary context, the one the backend and
  // the CUDA runtime use, made current on this thread for the whole run.
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (CUresult r = d.cuDeviceGet(&device, 0); r == CUDA_SUCCESS) {
    r = d.cuDevicePrimaryCtxRetain(&context, device);
    if (r == CUDA_SUCCESS) r = d.cuCtxSetCurrent(context);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "cannot make the primary context current: %s\n",
                   gpualloc::cuda::CudaError(d, "cuCtxSetCurrent", r)
                       .ToString()
                       .c_str());
      return 1;
    }
  }
  struct Release {
    const CudaDriverApi& d;
    CUdevice device;
    CUcontext context;
    ~Release() {
      if (context != nullptr) d.cuDevicePrimaryCtxRelease(device);
    }
  } release{d, device, context};
  const gpualloc::DeviceInfo& info = backend->info();
  const std::uint64_t gran = info.min_granularity;
  std::string out;
  auto line = [&out](const std::string& s) { absl::StrAppend(&out, s, "\n"); };

  line("# gpualloc device check");
  line("");
  line(absl::StrFormat(
      "- device: %s (%s), %s total, CUDA driver %s (entry points for CUDA %s)",
      info.name, info.arch_id, Human(info.total_bytes), info.driver_version,
      gpualloc::cuda::CudaVersionString(d.requested_version)));
  line(absl::StrFormat("- profile: %s; %s",
                       backend->profile_choice().profile->name,
                       backend->profile_choice().reason));
  line(absl::StrFormat(
      "- capabilities: virtual memory %s, stream-ordered pools %s%s",
      info.capabilities.virtual_memory ? "yes" : "no",
      info.capabilities.stream_ordered_pools ? "yes" : "no",
      d.missing.empty()
          ? ""
          : absl::StrCat(" (missing entry points: ", d.missing.size(), ")")));
  line(absl::StrFormat(
      "- granularity (cuMemGetAllocationGranularity): minimum %s, "
      "recommended %s",
      Human(info.min_granularity), Human(info.recommended_granularity)));

  // Alignment observed: the lowest set bit over 64 small cuMemAllocs, and the
  // spacing between consecutive ones.
  {
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
    line(absl::StrFormat(
        "- alignment observed: 64 cuMemAlloc(256 B) were aligned to at least "
        "%s, the closest two %s apart (promised: %s)",
        Human(lowest), Human(min_gap), Human(info.allocation_alignment)));
  }

  // The allocators under test.
  gpualloc::Options bfc_options;
  bfc_options.preallocate = false;
  bfc_options.memory_limit = std::max<std::uint64_t>(4 * args.max_size, kGiB);
  bfc_options.name = "bench-bfc";
  absl::StatusOr<std::unique_ptr<gpualloc::Allocator>> bfc =
      gpualloc::CreateAllocator(bfc_options, backend);
  if (!bfc.ok()) {
    std::fprintf(stderr, "BFC allocator: %s\n",
                 bfc.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<gpualloc::Allocator> async;
  std::string async_error;
  if (info.capabilities.stream_ordered_pools) {
    gpualloc::Options o = bfc_options;
    o.mode = gpualloc::AllocatorMode::kAsync;
    o.name = "bench-async";
    auto a = gpualloc::CreateAllocator(o, backend);
    if (a.ok()) {
      async = *std::move(a);
    } else {
      async_error = a.status().ToString();
    }
  }

  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = 256; s <= args.max_size; s *= 8) sizes.push_back(s);
  for (std::uint64_t s : {2 * kMiB, 128 * kMiB, kGiB}) {
    if (s <= args.max_size) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  auto reps_for = [&](std::uint64_t size) {
    return size >= 256 * kMiB ? std::max(5, args.reps / 4) : args.reps;
  };

  // Times alloc/free pairs; `alloc` returns the pointer or an error.
  auto time_pairs =
      [&](std::uint64_t size,
          const std::function<absl::StatusOr<std::uint64_t>()>& alloc,
          const std::function<absl::Status(std::uint64_t)>& free) {
        Pair pair;
        std::vector<double> a_ns, f_ns;
        const int reps = reps_for(size);
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
      };

  std::vector<std::string> errors;
  std::vector<std::string> rows;
  // A reservation for the VMM timings, reused by every size.
  const std::uint64_t round_max = (args.max_size + gran - 1) / gran * gran;
  absl::StatusOr<gpualloc::DeviceAddress> va =
      info.capabilities.virtual_memory
          ? backend->ReserveAddress(round_max, 0)
          : absl::StatusOr<gpualloc::DeviceAddress>(
                absl::UnimplementedError("no virtual memory"));
  for (std::uint64_t size : sizes) {
    const Pair raw = time_pairs(
        size,
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
    const Pair b = time_pairs(
        size,
        [&]() -> absl::StatusOr<std::uint64_t> {
          auto p = (*bfc)->Allocate(size);
          if (!p.ok()) return p.status();
          return reinterpret_cast<std::uint64_t>(*p);
        },
        [&](std::uint64_t p) {
          return (*bfc)->Deallocate(reinterpret_cast<void*>(p));
        });
    Pair pool;
    if (async != nullptr) {
      pool = time_pairs(
          size,
          [&]() -> absl::StatusOr<std::uint64_t> {
            auto p = async->Allocate(size);
            if (!p.ok()) return p.status();
            return reinterpret_cast<std::uint64_t>(*p);
          },
          [&](std::uint64_t p) {
            return async->Deallocate(reinterpret_cast<void*>(p));
          });
    } else {
      pool.error =
          async_error.empty() ? "no stream-ordered pools" : async_error;
    }
    Pair vmm;
    if (va.ok()) {
      const std::uint64_t rounded = (size + gran - 1) / gran * gran;
      gpualloc::PhysicalHandle handle = 0;
      vmm = time_pairs(
          size,
          [&]() -> absl::StatusOr<std::uint64_t> {
            auto h = backend->CreatePhysical(rounded);
            if (!h.ok()) return h.status();
            handle = *h;
            if (auto s = backend->Map(*va, rounded, handle); !s.ok()) return s;
            if (auto s = backend->SetAccess(*va, rounded); !s.ok()) return s;
            return *va;
          },
          [&](std::uint64_t p) {
            if (auto s = backend->Unmap(p, rounded); !s.ok()) return s;
            return backend->ReleasePhysical(handle);
          });
    } else {
      vmm.error = va.status().ToString();
    }
    for (const Pair* p :
         std::initializer_list<const Pair*>{&raw, &b, &pool, &vmm}) {
      if (!p->error.empty())
        errors.push_back(absl::StrCat(Human(size), ": ", p->error));
    }
    rows.push_back(
        absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s | %s |",
                        Human(size), Cell(raw.first), Cell(raw.second),
                        Cell(b.first), Cell(b.second), Cell(pool.first),
                        Cell(pool.second), Cell(vmm.first), Cell(vmm.second)));
  }

  // Each call on its own, measured and modeled.
  std::vector<std::string> call_rows;
  std::string ratio_line;
  {
    gpualloc::SimOptions model_options;
    model_options.profile =
        std::string(backend->profile_choice().profile->name);
    model_options.total_bytes = 1024 * kGiB;  // any size: only costs are read
    absl::StatusOr<std::shared_ptr<gpualloc::SimBackend>> model =
        gpualloc::SimBackend::Create(model_options);
    if (!model.ok()) {
      errors.push_back(absl::StrCat("cost model: ", model.status().ToString()));
    }
    auto modeled_us = [&](gpualloc::SimOp op, std::uint64_t bytes) {
      return model.ok() ? double((*model)->CallCostNs(op, bytes)) / 1000.0
                        : -1.0;
    };
    struct CallRow {
      const char* name;
      gpualloc::SimOp op;
    };
    const CallRow calls[] = {
        {"cuMemCreate", gpualloc::SimOp::kCreatePhysical},
        {"cuMemMap", gpualloc::SimOp::kMap},
        {"cuMemSetAccess", gpualloc::SimOp::kSetAccess},
        {"cuMemUnmap", gpualloc::SimOp::kUnmap},
        {"cuMemRelease", gpualloc::SimOp::kReleasePhysical},
        {"cuMemAlloc", gpualloc::SimOp::kAllocate},
        {"cuMemFree", gpualloc::SimOp::kFree}};
    constexpr int kCalls = sizeof(calls) / sizeof(calls[0]);
    std::vector<std::uint64_t> call_sizes;
    for (std::uint64_t s : {2 * kMiB, 20 * kMiB, kGiB}) {
      if (s <= args.max_size) call_sizes.push_back(s);
    }
    // measured[size][call], median us (-1: not measured).
    std::vector<std::vector<double>> measured(call_sizes.size(),
                                              std::vector<double>(kCalls, -1));
    for (std::size_t z = 0; z < call_sizes.size(); ++z) {
      const std::uint64_t size = (call_sizes[z] + gran - 1) / gran * gran;
      std::vector<std::vector<double>> ns(kCalls);
      const int reps = reps_for(size);
      std::string error;
      for (int i = -1; i < reps && error.empty(); ++i) {  // -1: warm-up
        double t[kCalls] = {};
        if (va.ok()) {
          Clock::time_point t0 = Clock::now();
          absl::StatusOr<gpualloc::PhysicalHandle> h =
              backend->CreatePhysical(size);
          t[0] = ElapsedNs(t0);
          if (!h.ok()) {
            error = h.status().ToString();
            break;
          }
          absl::Status s;
          t0 = Clock::now();
          s = backend->Map(*va, size, *h);
          t[1] = ElapsedNs(t0);
          if (s.ok()) {
            t0 = Clock::now();
            s = backend->SetAccess(*va, size);
            t[2] = ElapsedNs(t0);
            t0 = Clock::now();
            const absl::Status u = backend->Unmap(*va, size);
            t[3] = ElapsedNs(t0);
            if (s.ok()) s = u;
          }
          t0 = Clock::now();
          const absl::Status r = backend->ReleasePhysical(*h);
          t[4] = ElapsedNs(t0);
          if (s.ok()) s = r;
          if (!s.ok()) {
            error = s.ToString();
            break;
          }
        }
        CUdeviceptr p = 0;
        Clock::time_point t0 = Clock::now();
        CUresult r = d.cuMemAlloc(&p, size);
        t[5] = ElapsedNs(t0);
        if (r != CUDA_SUCCESS) {
          error = gpualloc::cuda::CudaError(d, "cuMemAlloc", r).ToString();
          break;
        }
        t0 = Clock::now();
        r = d.cuMemFree(p);
        t[6] = ElapsedNs(t0);
        if (r != CUDA_SUCCESS) {
          error = gpualloc::cuda::CudaError(d, "cuMemFree", r).ToString();
          break;
        }
        if (i < 0) continue;
        for (int c = va.ok() ? 0 : 5; c < kCalls; ++c) ns[c].push_back(t[c]);
      }
      if (!error.empty()) {
        errors.push_back(absl::StrCat("calls at ", Human(size), ": ", error));
      }
      for (int c = 0; c < kCalls; ++c) measured[z][c] = MedianUs(ns[c]);
    }
    std::string header = "| call |";
    std::string rule = "|---|";
    for (std::uint64_t size : call_sizes) {
      absl::StrAppend(&header, " ", Human(size), " measured | ", Human(size),
                      " model |");
      absl::StrAppend(&rule, "---:|---:|");
    }
    call_rows.push_back(header);
    call_rows.push_back(rule);
    for (int c = 0; c < kCalls; ++c) {
      std::string row = absl::StrCat("| ", calls[c].name, " |");
      for (std::size_t z = 0; z < call_sizes.size(); ++z) {
        const std::uint64_t size = (call_sizes[z] + gran - 1) / gran * gran;
        absl::StrAppend(&row, " ", Cell(measured[z][c]), " | ",
                        Cell(modeled_us(calls[c].op, size)), " |");
      }
      call_rows.push_back(row);
    }
    // Ten 2 MiB handles vs one 20 MiB handle: create + map + set access.
    if (call_sizes.size() >= 2 && call_sizes[0] == 2 * kMiB &&
        call_sizes[1] == 20 * kMiB) {
      auto grow = [&](std::size_t z, bool use_model) {
        double sum = 0;
        for (int c = 0; c < 3; ++c) {
          const double us = use_model ? modeled_us(calls[c].op, call_sizes[z])
                                      : measured[z][c];
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
            use_model ? modeled_us(calls[1].op, 2 * kMiB) : measured[0][1];
        const double large =
            use_model ? modeled_us(calls[1].op, 20 * kMiB) : measured[1][1];
        return small < 0 || large <= 0
                   ? std::string("n/a")
                   : absl::StrFormat("%.1fx", 10 * small / large);
      };
      ratio_line = absl::StrFormat(
          "- ten 2 MiB handles vs one 20 MiB: create+map+access %s measured, "
          "%s modeled; cuMemMap alone %s measured, %s modeled",
          ratio(false), ratio(true), map_ratio(false), map_ratio(true));
    }
  }

  // Memory check through each path, with the largest size measured.
  const MemoryCheckCalls calls = LoadMemoryCheckCalls();
  {
    const std::uint64_t size =
        std::min<std::uint64_t>(args.max_size, 64 * kMiB);
    std::string bfc_check = "n/a", pool_check = "n/a", vmm_check = "n/a";
    if (auto p = (*bfc)->Allocate(size); p.ok()) {
      bfc_check =
          CheckMemory(calls, reinterpret_cast<std::uint64_t>(*p), size, 0x5a);
      (void)(*bfc)->Deallocate(*p);
    }
    if (async != nullptr) {
      if (auto p = async->Allocate(size); p.ok()) {
        pool_check =
            CheckMemory(calls, reinterpret_cast<std::uint64_t>(*p), size, 0xa5);
        (void)async->Deallocate(*p);
      }
    }
    if (va.ok()) {
      const std::uint64_t rounded = (size + gran - 1) / gran * gran;
      if (auto h = backend->CreatePhysical(rounded); h.ok()) {
        if (backend->Map(*va, rounded, *h).ok() &&
            backend->SetAccess(*va, rounded).ok()) {
          vmm_check = CheckMemory(calls, *va, rounded, 0x3c);
          (void)backend->Unmap(*va, rounded);
        }
        (void)backend->ReleasePhysical(*h);
      }
    }
    line(absl::StrFormat(
        "- write/read-back check (%s): BFC %s, pool %s, mapped %s", Human(size),
        bfc_check, pool_check, vmm_check));
  }
  if (info.capabilities.virtual_memory) {
    const std::uint64_t size = std::min<std::uint64_t>(args.max_size, kGiB);
    line(absl::StrFormat("- sleep/wake of %s of tagged memory: %s", Human(size),
                         SleepWake(backend, calls, size, &errors)));
  }

  line("");
  line("Median host microseconds per operation (" + absl::StrCat(args.reps) +
       " repetitions, fewer from 256 MiB; "
       "BFC and pool in steady state; VMM sizes rounded up to the "
       "granularity):");
  line("");
  line(
      "| size | cuMemAlloc | cuMemFree | BFC alloc | BFC free | pool alloc | "
      "pool free | VMM create+map+access | VMM unmap+release |");
  line("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const std::string& r : rows) line(r);

  line("");
  line(absl::StrCat(
      "Each call on its own: median host microseconds (", args.reps,
      " repetitions, fewer at 1 GiB), next to the simulator's cost model for "
      "profile ",
      backend->profile_choice().profile->name,
      " (SimBackend::CallCostNs; cuMemFree's model leaves out its wait, and "
      "nothing is pending here):"));
  line("");
  for (const std::string& r : call_rows) line(r);
  if (!ratio_line.empty()) {
    line("");
    line(ratio_line);
  }

  const gpualloc::Stats bs = (*bfc)->GetStats();
  line("");
  line(absl::StrFormat(
      "- BFC: %d backend allocations, %d backend frees, peak reserved %s "
      "(expandable regions %s)",
      bs.backend_allocs, bs.backend_frees, Human(bs.peak_bytes_reserved),
      info.capabilities.virtual_memory ? "available" : "unavailable"));

  // Usable memory, after the allocators have given back what they hold.
  (void)(*bfc)->Trim();
  if (async != nullptr) (void)async->Trim();
  if (va.ok()) (void)backend->FreeAddress(*va, round_max);
  absl::StatusOr<std::uint64_t> free = backend->FreeBytes();
  std::uint64_t lo = 0, hi = free.ok() ? *free : info.total_bytes;
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
  line(absl::StrFormat(
      "- usable memory: %s free (cuMemGetInfo) after the allocators were made "
      "and trimmed; the largest single cuMemAlloc that succeeds is %s (%.1f%% "
      "of the %s total)",
      free.ok() ? Human(*free) : std::string(free.status().message()),
      Human(lo), 100.0 * double(lo) / double(info.total_bytes),
      Human(info.total_bytes)));
  if (!errors.empty()) {
    line("");
    line("Errors:");
    for (const std::string& e : errors) line("- " + e);
  }

  std::fputs(out.c_str(), stdout);
  std::ofstream file(args.out);
  file << out;
  if (!file) {
    std::fprintf(stderr, "cannot write %s\n", args.out.c_str());
    return 1;
  }
  return errors.empty() ? 0 : 1;
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
