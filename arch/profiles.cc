// SPDX-License-Identifier: Apache-2.0
// arch/profiles.cc: the architecture profile table and its lookups.
//
// One row per product or fallback. Every row names the public sources of its
// numbers, both in a comment and in ArchProfile::sources, so a report can show
// where a tuning decision came from. `description` holds the marketing name the
// simulator prints ("simulated NVIDIA H200 (h200)").
//
// The table is built once, on first use, into a heap array that is never
// destroyed: pointers returned by the lookups stay valid for the whole program,
// including during static destruction.

#include "gpualloc/arch/profiles.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpualloc {
namespace {

constexpr std::uint64_t kKiB = std::uint64_t{1} << 10;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

DriverCosts NvidiaCosts();
DriverCosts AmdCosts();

// Numbers shared by every NVIDIA row (sm_80 and sm_90 alike).
//  - Granularity: cuMemGetAllocationGranularity reports 2 MiB for both the
//    minimum and the recommended granularity of pinned device memory (CUDA
//    Driver API reference; vAttention, Prabhu et al. 2024, section 6: "CUDA
//    supports only 2MB" physical pages for cuMemCreate).
//  - Alignment: "any address of a variable residing in global memory or
//    returned by one of the memory allocation routines from the driver or
//    runtime API is always aligned to at least 256 bytes" (CUDA C++
//    Programming Guide, Device Memory Accesses).
//  - Pages: the GMMU maps 4 KiB, 64 KiB ("big"), 2 MiB ("huge") and, from
//    Ampere on, 512 MiB pages (NVIDIA open-gpu-kernel-modules,
//    kernel-open/nvidia-uvm: UVM_PAGE_SIZE_4K/64K/2M/512M). Large allocations
//    prefer 2 MiB boundaries, the page size the driver uses for device memory.
ArchProfile NvidiaProfile() {
  ArchProfile p;
  p.vendor = Vendor::kNvidia;
  p.min_granularity = 2 * kMiB;
  p.recommended_granularity = 2 * kMiB;
  p.allocation_alignment = 256;
  p.page_sizes = {4 * kKiB, 64 * kKiB, 2 * kMiB, 512 * kMiB};
  p.min_block_size = 256;
  p.large_page_size = 2 * kMiB;
  p.costs = NvidiaCosts();
  return p;
}

// Numbers shared by every AMD row (CDNA2 gfx90a and CDNA3 gfx942).
//  - Granularity: hipMemGetAllocationGranularity and rocminfo ("Alloc
//    Granule: 4KB", "Alloc Recommended Granule: 2048KB") report 4 KiB minimum
//    and 2 MiB recommended; virtual memory is functional from ROCm 6.1 (ROCm
//    release notes; HIP virtual memory management guide).
//  - Alignment: ROCr rounds every device allocation up to whole 4 KiB pages;
//    requests under 2 MiB are carved out of 2 MiB blocks (ROCr
//    runtime/hsa-runtime/core/runtime/amd_memory_region.cpp, KFD).
//  - Pages: 4 KiB base pages; the amdgpu driver groups contiguous pages into
//    2 MiB fragments by default (amdgpu.vm_fragment_size = 9, i.e. 4 KiB << 9;
//    Linux drivers/gpu/drm/amd/amdgpu/amdgpu_vm.c). 4 KiB TLB entries cost
//    about 15% on MI300A (LLNL, El Capitan early-access notes), so large
//    allocations prefer 2 MiB fragment boundaries.
ArchProfile AmdProfile() {
  ArchProfile p;
  p.vendor = Vendor::kAmd;
  p.min_granularity = 4 * kKiB;
  p.recommended_granularity = 2 * kMiB;
  p.allocation_alignment = 4 * kKiB;
  p.page_sizes = {4 * kKiB, 2 * kMiB};
  p.min_block_size = 256;
  p.large_page_size = 2 * kMiB;
  p.costs = AmdCosts();
  return p;
}

// Modeled driver-call costs, NVIDIA (H100, H200 and A100 alike: the work is
// the driver's and the GMMU's, the same on sm_80 and sm_90). Host time per
// call plus a part that grows with the bytes ("/MiB").
//  - Virtual memory calls: fitted to what tools/device-check.sh measured once
//    on one H200 (driver 580, CUDA 13.0, in a virtual machine; median of 31
//    host timings): create+map+access 43 us at 2 MiB and 97 us at 1 GiB,
//    unmap+release 31 us and 287 us. Two points per group give its per-call
//    part and its slope: create+map+access 42.9 us + 0.0528 us/MiB,
//    unmap+release 30.5 us + 0.2505 us/MiB. Only the groups were measured,
//    so each group is split among its calls in proportion to the shares of
//    the estimates this model had before (per call cuMemCreate 38, cuMemMap
//    9.8, cuMemSetAccess 29 us; cuMemUnmap 29, cuMemRelease 19.6 us; per MiB
//    1, 0.1, 0.5 us; 0.5, 0.2 us), rounded to 100 ns per call and 1 ns per
//    MiB. The model's sums are then 43.0 and 97.2 us, 31.0 and 287.5 us.
//    The split within a group is an estimate; so is any size between the
//    two measured ones (device-check.sh also prints 20 MiB, not recorded).
//  - Shape: PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp,
//    expandable segments) grows its large pool by 20 MiB handles rather than
//    ten 2 MiB ones because mapping ten separately created 2 MiB pages costs
//    about ten times as much as mapping one 20 MiB handle: at these sizes the
//    per-call part dominates. Here ten 2 MiB cuMemMap calls cost 9.9 times
//    one of 20 MiB, and ten 2 MiB create+map+access 9.8 times.
//  - cuMemAddressReserve/Free: 5 us per call (the driver's address tree
//    only). Estimates, not measured.
//  - cuMemAlloc / cuMemFree: 50 us and 30 us per call (typical host cost of
//    a large cudaMalloc on Hopper; cudaFree also synchronizes the device,
//    costed apart as the wait): estimates, not measured. Their per-MiB parts
//    are the fitted slopes of create+map+access (53 ns/MiB) and
//    unmap+release (251 ns/MiB), the work they do inside: derived from the
//    measurement, not measured on these calls themselves.
//  - Completion counters, all estimates until tools/device-check.sh
//    (gpualloc-counter-check) measures them: cuStreamWriteValue64 and
//    cuStreamWaitValue64 enqueue one stream memory operation each, the host
//    work of an event record, so each costs what the simulator's cost model
//    gives cuEventRecord and cuStreamWaitEvent (2 us). A block is mapped
//    page-locked host memory: cuMemHostAlloc costs what the model gives
//    HostAllocate (50 us per call plus 200 us per MiB: faulting in and
//    page-locking the pages), cuMemFreeHost what it gives HostFree (30 us
//    plus 20 us per MiB; the device synchronization it makes is costed
//    apart, as a host wait). A counter read is a load: no call.
DriverCosts NvidiaCosts() {
  DriverCosts c;
  c.allocate = {50'000, 53};
  c.free = {30'000, 251};
  c.reserve_address = {5'000, 0};
  c.free_address = {5'000, 0};
  c.create_physical = {21'200, 33};
  c.release_physical = {12'300, 72};
  c.map = {5'500, 3};
  c.unmap = {18'200, 179};
  c.set_access = {16'200, 17};
  c.create_counters = {50'000, 200'000};
  c.destroy_counters = {30'000, 20'000};
  c.write_counter = {2'000, 0};
  c.wait_counter = {2'000, 0};
  c.counter_sources =
      "estimates, not measured: cuStreamWriteValue64 and cuStreamWaitValue64 "
      "at the host cost of an event record and a stream wait (2 us); a block "
      "at the cost of pinned host memory (cuMemHostAlloc 50 us + 200 us/MiB, "
      "cuMemFreeHost 30 us + 20 us/MiB)";
  c.sources =
      "create, map, set-access, unmap, release: fitted to one H200 "
      "measurement (tools/device-check.sh: create+map+access 43 us at 2 MiB, "
      "97 us at 1 GiB; unmap+release 31 and 287 us), split among the calls "
      "by the earlier estimates' shares; PyTorch CUDACachingAllocator "
      "expandable segments (ten 2 MiB maps cost about ten times one 20 MiB "
      "map); cuMemAlloc and cuMemFree: per-call estimates plus the fitted "
      "per-MiB slopes of create+map+access and unmap+release; address "
      "reservation: estimate";
  return c;
}

// Modeled driver-call costs, AMD (MI300X and MI250X alike). No published
// per-call figures for hipMalloc, hipMemCreate, hipMemMap or hipMemSetAccess
// were found and none was measured: every number here is an estimate, twice
// NVIDIA's per call and per MiB (address reservation aside: a runtime-side
// address tree, like CUDA's), scaled from the NVIDIA terms as fitted to the
// H200 measurement. Why slower: each ROCm virtual memory call goes through
// the HIP runtime, ROCr and a KFD ioctl (hipMemCreate allocates through KFD
// like hipMalloc; hipMemMap and hipMemSetAccess map the buffer into the GPU
// page tables through KFD, 4 KiB PTEs grouped into 2 MiB fragments), and
// virtual memory only became functional in ROCm 6.1. Why scaled rather than
// kept: the earlier AMD figures had no basis of their own beyond "twice
// NVIDIA's", and their per-MiB parts doubled NVIDIA guesses that the H200
// measurement showed to be about 30 times (create+map+access) and 3 times
// (unmap+release) too high.
// Completion counters: the same estimates as NVIDIA's (hipStreamWriteValue64
// and hipStreamWaitValue64 at the host cost of an event record, 2 us; a block
// at the cost of pinned host memory, hipHostMalloc 50 us + 200 us/MiB,
// hipHostFree 30 us + 20 us/MiB): the simulator's event and host-memory
// figures are the same for both vendors, and no ROCm figure was found or
// measured.
DriverCosts AmdCosts() {
  DriverCosts c;
  c.allocate = {100'000, 106};
  c.free = {60'000, 502};
  c.reserve_address = {5'000, 0};
  c.free_address = {5'000, 0};
  c.create_physical = {42'400, 66};
  c.release_physical = {24'600, 144};
  c.map = {11'000, 6};
  c.unmap = {36'400, 358};
  c.set_access = {32'400, 34};
  c.create_counters = {50'000, 200'000};
  c.destroy_counters = {30'000, 20'000};
  c.write_counter = {2'000, 0};
  c.wait_counter = {2'000, 0};
  c.counter_sources =
      "estimates, not measured: hipStreamWriteValue64 and "
      "hipStreamWaitValue64 at the host cost of an event record and a stream "
      "wait (2 us, as NVIDIA's); a block at the cost of pinned host memory "
      "(hipHostMalloc 50 us + 200 us/MiB, hipHostFree 30 us + 20 us/MiB)";
  c.sources =
      "estimates: twice the NVIDIA figures as fitted to one H200 measurement "
      "(HIP -> ROCr -> KFD ioctl per virtual memory call; no published or "
      "measured per-call figure for ROCm)";
  return c;
}

constexpr absl::string_view kNvidiaSources =
    "CUDA Driver API cuMemGetAllocationGranularity (2 MiB min/recommended); "
    "vAttention (Prabhu et al. 2024) section 6; CUDA C++ Programming Guide "
    "(256 B alignment); NVIDIA open-gpu-kernel-modules nvidia-uvm page sizes "
    "(4K/64K/2M/512M)";
constexpr absl::string_view kAmdSources =
    "rocminfo and hipMemGetAllocationGranularity (4 KiB min, 2 MiB "
    "recommended, ROCm >= 6.1); ROCr amd_memory_region (4 KiB rounding, 2 MiB "
    "blocks); amdgpu vm_fragment_size default 9 (2 MiB fragments)";

std::vector<ArchProfile> BuildProfiles() {
  std::vector<ArchProfile> profiles;

  // NVIDIA H100 80GB HBM3 (SXM5), Hopper, compute capability 9.0.
  // Memory: nvidia-smi reports "81559MiB" total (NVIDIA H100 datasheet: 80 GB).
  {
    ArchProfile p = NvidiaProfile();
    p.name = "h100";
    p.description = "NVIDIA H100 80GB HBM3";
    p.arch_ids = {"sm_90"};
    p.memory_bytes = 81559 * kMiB;
    p.sources = kNvidiaSources;
    profiles.push_back(std::move(p));
  }
  // NVIDIA H200 (SXM), Hopper, compute capability 9.0.
  // Memory: 141 GB HBM3e (NVIDIA H200 datasheet); nvidia-smi reports
  // "143771MiB" total.
  {
    ArchProfile p = NvidiaProfile();
    p.name = "h200";
    p.description = "NVIDIA H200";
    p.arch_ids = {"sm_90"};
    p.memory_bytes = 143771 * kMiB;
    p.sources = kNvidiaSources;
    profiles.push_back(std::move(p));
  }
  // NVIDIA A100 80GB (SXM4), Ampere, compute capability 8.0.
  // Memory: nvidia-smi reports "81920MiB" total (NVIDIA A100 datasheet: 80 GB;
  // the 40 GB part reports 40960MiB and maps here too, closest by memory).
  {
    ArchProfile p = NvidiaProfile();
    p.name = "a100";
    p.description = "NVIDIA A100 80GB";
    p.arch_ids = {"sm_80"};
    p.memory_bytes = 81920 * kMiB;
    p.sources = kNvidiaSources;
    profiles.push_back(std::move(p));
  }
  // AMD Instinct MI250X, CDNA2, gfx90a. Each of the two graphics compute dies
  // (GCDs) is its own device with 64 GiB of HBM2e (AMD Instinct MI250X
  // datasheet: 128 GB per module; ROCm docs: one GCD per HIP device).
  {
    ArchProfile p = AmdProfile();
    p.name = "mi250x";
    p.description = "AMD Instinct MI250X (one GCD)";
    p.arch_ids = {"gfx90a"};
    p.memory_bytes = 64 * kGiB;
    p.sources = kAmdSources;
    profiles.push_back(std::move(p));
  }
  // AMD Instinct MI300X, CDNA3, gfx942. 192 GiB HBM3 and 256 MiB Infinity
  // Cache (AMD Instinct MI300X datasheet; ROCm docs, MI300 microarchitecture).
  {
    ArchProfile p = AmdProfile();
    p.name = "mi300x";
    p.description = "AMD Instinct MI300X";
    p.arch_ids = {"gfx942"};
    p.memory_bytes = 192 * kGiB;
    p.sources = kAmdSources;
    profiles.push_back(std::move(p));
  }
  // Fallback for an NVIDIA architecture not in the table: the shared NVIDIA
  // numbers above (same sources); the memory size comes from the device.
  {
    ArchProfile p = NvidiaProfile();
    p.name = "generic-nvidia";
    p.description = "generic NVIDIA GPU";
    p.sources = kNvidiaSources;
    profiles.push_back(std::move(p));
  }
  // Fallback for an AMD architecture not in the table: the shared AMD numbers
  // above (same sources); the memory size comes from the device.
  {
    ArchProfile p = AmdProfile();
    p.name = "generic-amd";
    p.description = "generic AMD GPU";
    p.sources = kAmdSources;
    profiles.push_back(std::move(p));
  }
  return profiles;
}

// The table, built on first use and never destroyed.
const std::vector<ArchProfile>& Profiles() {
  static const std::vector<ArchProfile>* const profiles =
      new std::vector<ArchProfile>(BuildProfiles());
  return *profiles;
}

// AMD devices report their architecture with target features, e.g.
// "gfx90a:sramecc+:xnack-" (hipDeviceProp_t::gcnArchName); the profile table
// keys on the processor name alone.
absl::string_view ProcessorName(absl::string_view arch_id) {
  return arch_id.substr(0, arch_id.find(':'));
}

std::uint64_t Distance(std::uint64_t a, std::uint64_t b) {
  return a > b ? a - b : b - a;
}

}  // namespace

absl::Span<const ArchProfile> AllArchProfiles() { return Profiles(); }

absl::string_view VendorName(Vendor vendor) {
  switch (vendor) {
    case Vendor::kNvidia:
      return "nvidia";
    case Vendor::kAmd:
      return "amd";
    case Vendor::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<const ArchProfile*> FindArchProfile(absl::string_view name) {
  for (const ArchProfile& profile : Profiles()) {
    if (absl::EqualsIgnoreCase(profile.name, name)) return &profile;
  }
  std::vector<absl::string_view> names;
  for (const ArchProfile& profile : Profiles()) names.push_back(profile.name);
  // (At most 80 bytes of the name quoted, as every message quotes input.)
  const std::string shown =
      name.size() <= 80 ? absl::CEscape(name)
                        : absl::StrCat(absl::CEscape(name.substr(0, 80)),
                                       "... (", name.size(), " bytes)");
  return absl::NotFoundError(
      absl::StrCat("unknown architecture profile \"", shown,
                   "\"; valid names: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<const ArchProfile*> FindArchProfile(Vendor vendor,
                                                   absl::string_view arch_id,
                                                   std::uint64_t memory_bytes) {
  if (vendor == Vendor::kUnknown) {
    return absl::NotFoundError(absl::StrCat(
        "no architecture profile for a device of unknown vendor (arch id \"",
        arch_id, "\")"));
  }
  const absl::string_view processor = ProcessorName(arch_id);
  const ArchProfile* best = nullptr;
  for (const ArchProfile& profile : Profiles()) {
    if (profile.vendor != vendor) continue;
    const bool matches =
        std::any_of(profile.arch_ids.begin(), profile.arch_ids.end(),
                    [&](absl::string_view id) {
                      return absl::EqualsIgnoreCase(id, processor);
                    });
    if (!matches) continue;
    // Without a memory size the first listed product wins; otherwise the
    // closest memory size, the first listed on ties.
    if (best == nullptr ||
        (memory_bytes != 0 && Distance(profile.memory_bytes, memory_bytes) <
                                  Distance(best->memory_bytes, memory_bytes))) {
      best = &profile;
    }
  }
  if (best != nullptr) return best;
  for (const ArchProfile& profile : Profiles()) {
    if (profile.vendor == vendor && profile.arch_ids.empty()) return &profile;
  }
  return absl::NotFoundError(
      absl::StrCat("no generic architecture profile for ", VendorName(vendor)));
}

}  // namespace gpualloc
