// SPDX-License-Identifier: Apache-2.0
// tools/cuda/device_bench_memory.cc: gpualloc-device-bench's memory checks: a
// pattern written and read back through BFC, pool and mapped memory, Sleep /
// Wake of tagged memory (with and without a backup), and the device memory
// actually usable (free, and the largest single cuMemAlloc that succeeds).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
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
#include "tools/cuda/device_bench.h"

namespace gpualloc::device_bench {

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

namespace {

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

}  // namespace

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

}  // namespace gpualloc::device_bench
