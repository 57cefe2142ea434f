// SPDX-License-Identifier: Apache-2.0
// tests/backends/sim_backend_test.cc: the simulated device beyond the
// conformance suite: option validation, placement, accounting, fault injection,
// counters, the two memory kinds, and virtual memory (costs, counters, faults,
// observers, rule messages, fake placement, host mappings, access and unmap
// hazards).

#include "gpualloc/backends/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

std::shared_ptr<SimBackend> Create(const SimOptions& options) {
  absl::StatusOr<std::shared_ptr<SimBackend>> sim = SimBackend::Create(options);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *sim : nullptr;
}

SimOptions Profile(const std::string& name, std::uint64_t total = 0,
                   SimMemory memory = SimMemory::kFake) {
  SimOptions o;
  o.profile = name;
  o.total_bytes = total;
  o.memory = memory;
  return o;
}

// Resident set size of this process, from /proc/self/statm.
std::uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// Whether [address, address + 1) is mapped in this process.
bool IsMapped(DeviceAddress address) {
  const std::uintptr_t page =
      static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(address & ~(page - 1));
  return msync(start, page, MS_ASYNC) == 0 || errno != ENOMEM;
}

TEST(SimOpNameTest, NamesEveryOp) {
  EXPECT_EQ(SimOpName(SimOp::kAllocate), "allocate");
  EXPECT_EQ(SimOpName(SimOp::kFree), "free");
  EXPECT_EQ(SimOpName(SimOp::kFreeBytes), "free_bytes");
  EXPECT_EQ(SimOpName(SimOp::kCreateEvent), "create_event");
  EXPECT_EQ(SimOpName(SimOp::kDestroyEvent), "destroy_event");
  EXPECT_EQ(SimOpName(SimOp::kRecordEvent), "record_event");
  EXPECT_EQ(SimOpName(SimOp::kQueryEvent), "query_event");
  EXPECT_EQ(SimOpName(SimOp::kStreamWaitEvent), "stream_wait_event");
  EXPECT_EQ(SimOpName(SimOp::kSynchronizeEvent), "synchronize_event");
  EXPECT_EQ(SimOpName(SimOp::kPoolAllocate), "pool_allocate");
  EXPECT_EQ(SimOpName(SimOp::kPoolFree), "pool_free");
  EXPECT_EQ(SimOpName(SimOp::kPoolTrim), "pool_trim");
  EXPECT_EQ(SimOpName(SimOp::kConfigurePool), "configure_pool");
  EXPECT_EQ(SimOpName(SimOp::kGetPoolUsage), "get_pool_usage");
  EXPECT_EQ(SimOpName(SimOp::kReserveAddress), "reserve_address");
  EXPECT_EQ(SimOpName(SimOp::kFreeAddress), "free_address");
  EXPECT_EQ(SimOpName(SimOp::kCreatePhysical), "create_physical");
  EXPECT_EQ(SimOpName(SimOp::kReleasePhysical), "release_physical");
  EXPECT_EQ(SimOpName(SimOp::kMap), "map");
  EXPECT_EQ(SimOpName(SimOp::kUnmap), "unmap");
  EXPECT_EQ(SimOpName(SimOp::kSetAccess), "set_access");
  EXPECT_EQ(SimOpName(SimOp::kIsCapturing), "is_capturing");
  EXPECT_EQ(SimOpName(SimOp::kExchangeCaptureMode), "exchange_capture_mode");
  EXPECT_EQ(SimOpName(SimOp::kCopyToHost), "copy_to_host");
  EXPECT_EQ(SimOpName(SimOp::kCopyFromHost), "copy_from_host");
  EXPECT_EQ(SimOpName(SimOp::kHostAllocate), "host_allocate");
  EXPECT_EQ(SimOpName(SimOp::kHostFree), "host_free");
  EXPECT_EQ(SimOpName(SimOp::kGetIpcHandle), "get_ipc_handle");
  EXPECT_EQ(SimOpName(SimOp::kOpenIpcHandle), "open_ipc_handle");
  EXPECT_EQ(SimOpName(SimOp::kCloseIpcHandle), "close_ipc_handle");
  EXPECT_EQ(SimOpName(SimOp::kExportMapping), "export_mapping");
  EXPECT_EQ(SimOpName(SimOp::kImportPhysical), "import_physical");
  EXPECT_EQ(SimOpName(SimOp::kCreateCounters), "create_counters");
  EXPECT_EQ(SimOpName(SimOp::kDestroyCounters), "destroy_counters");
  EXPECT_EQ(SimOpName(SimOp::kWriteCounter), "write_counter");
  EXPECT_EQ(SimOpName(SimOp::kWaitCounter), "wait_counter");
  EXPECT_EQ(SimOpName(SimOp::kCount), "invalid");
  // Every op has a name of its own.
  for (int i = 0; i < kNumSimOps; ++i) {
    for (int j = 0; j < i; ++j) {
      EXPECT_NE(SimOpName(static_cast<SimOp>(i)),
                SimOpName(static_cast<SimOp>(j)));
    }
  }
}

TEST(SimBackendTest, DefaultsDescribeAnH200) {
  auto sim = Create(SimOptions{});
  ASSERT_NE(sim, nullptr);
  const DeviceInfo& d = sim->info();
  EXPECT_EQ(d.backend, "sim");
  EXPECT_EQ(d.vendor, Vendor::kNvidia);
  EXPECT_EQ(d.name, "simulated NVIDIA H200 (h200)");
  EXPECT_EQ(d.arch_id, "sm_90");
  EXPECT_EQ(d.ordinal, 0);
  EXPECT_EQ(d.total_bytes, 143771 * kMiB);
  EXPECT_EQ(d.min_granularity, 2 * kMiB);
  EXPECT_EQ(d.recommended_granularity, 2 * kMiB);
  EXPECT_EQ(d.allocation_alignment, 256u);
  EXPECT_EQ(d.page_sizes, (std::vector<std::uint64_t>{4 * kKiB, 64 * kKiB,
                                                      2 * kMiB, 512 * kMiB}));
  EXPECT_TRUE(d.capabilities.virtual_memory);
  EXPECT_TRUE(d.capabilities.streams);
  EXPECT_TRUE(d.capabilities.stream_ordered_pools);
  EXPECT_TRUE(d.capabilities.completion_counters);
  EXPECT_FALSE(d.capabilities.host_accessible);
  EXPECT_EQ(d.driver_version, "gpualloc-sim");
  absl::StatusOr<std::uint64_t> free = sim->FreeBytes();
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_EQ(*free, d.total_bytes);
  EXPECT_EQ(sim->bytes_allocated(), 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
}

TEST(SimBackendTest, ExplicitFieldsOverrideTheProfile) {
  SimOptions o = Profile("MI300X", 8 * kGiB, SimMemory::kHostBacked);
  o.min_granularity = 64 * kKiB;
  o.recommended_granularity = 4 * kMiB;
  o.allocation_alignment = 8 * kKiB;
  o.ordinal = 3;
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  const DeviceInfo& d = sim->info();
  EXPECT_EQ(d.vendor, Vendor::kAmd);
  EXPECT_EQ(d.name, "simulated AMD Instinct MI300X (mi300x)");
  EXPECT_EQ(d.arch_id, "gfx942");
  EXPECT_EQ(d.ordinal, 3);
  EXPECT_EQ(d.total_bytes, 8 * kGiB);
  EXPECT_EQ(d.min_granularity, 64 * kKiB);
  EXPECT_EQ(d.recommended_granularity, 4 * kMiB);
  EXPECT_EQ(d.allocation_alignment, 8 * kKiB);
  EXPECT_EQ(d.page_sizes, (std::vector<std::uint64_t>{4 * kKiB, 2 * kMiB}));
  EXPECT_TRUE(d.capabilities.host_accessible);
}

TEST(SimBackendTest, GenericProfileTakesAnExplicitTotal) {
  auto sim = Create(Profile("generic-amd", 16 * kGiB));
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(sim->info().name, "simulated generic AMD GPU (generic-amd)");
  EXPECT_EQ(sim->info().arch_id, "");
  EXPECT_EQ(sim->info().total_bytes, 16 * kGiB);
  // A generic device's (vendor, arch id) leads back to its profile.
  absl::StatusOr<const ArchProfile*> p =
      FindArchProfile(sim->info().vendor, sim->info().arch_id);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name, "generic-amd");
}

// Totals need not be granule multiples: real devices report odd MiB counts and
// the configuration string accepts powers of 1000 ("80GB").
TEST(SimBackendTest, TotalNeedNotBeAGranuleMultiple) {
  auto sim = Create(Profile("h100", 80'000'000'000));
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(sim->info().total_bytes, 80'000'000'000u);
}

struct BadOptionsCase {
  std::string name;
  std::function<void(SimOptions&)> mutate;
  std::string field;   // must appear in the message
  std::string detail;  // must appear in the message too
};

class SimOptionsValidationTest
    : public ::testing::TestWithParam<BadOptionsCase> {};

TEST_P(SimOptionsValidationTest, IsInvalidArgumentNamingTheField) {
  SimOptions o;
  GetParam().mutate(o);
  absl::StatusOr<std::shared_ptr<SimBackend>> sim = SimBackend::Create(o);
  ASSERT_TRUE(absl::IsInvalidArgument(sim.status())) << sim.status();
  const absl::string_view message = sim.status().message();
  EXPECT_TRUE(absl::StrContains(message, GetParam().field)) << message;
  EXPECT_TRUE(absl::StrContains(message, GetParam().detail)) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, SimOptionsValidationTest,
    ::testing::Values(
        BadOptionsCase{"unknown_profile",
                       [](SimOptions& o) { o.profile = "b200"; },
                       "SimOptions.profile", "h200, a100"},
        BadOptionsCase{"empty_profile", [](SimOptions& o) { o.profile = ""; },
                       "SimOptions.profile", "generic-amd"},
        BadOptionsCase{"min_granularity_not_power_of_two",
                       [](SimOptions& o) { o.min_granularity = 3 * kMiB; },
                       "SimOptions.min_granularity", "power of two"},
        BadOptionsCase{
            "recommended_granularity_not_power_of_two",
            [](SimOptions& o) { o.recommended_granularity = 3 * kMiB; },
            "SimOptions.recommended_granularity", "power of two"},
        BadOptionsCase{"min_above_recommended",
                       [](SimOptions& o) { o.min_granularity = 4 * kMiB; },
                       "SimOptions.min_granularity",
                       "SimOptions.recommended_granularity"},
        BadOptionsCase{"alignment_not_power_of_two",
                       [](SimOptions& o) { o.allocation_alignment = 384; },
                       "SimOptions.allocation_alignment", "power of two"},
        BadOptionsCase{"generic_without_total",
                       [](SimOptions& o) { o.profile = "generic-nvidia"; },
                       "SimOptions.total_bytes", "generic-nvidia"},
        BadOptionsCase{"total_not_alignment_multiple",
                       [](SimOptions& o) { o.total_bytes = kGiB + 100; },
                       "SimOptions.total_bytes", "multiple"},
        BadOptionsCase{"total_not_alignment_multiple_after_override",
                       [](SimOptions& o) {
                         o.total_bytes = kGiB + 256;
                         o.allocation_alignment = 4 * kKiB;
                       },
                       "SimOptions.total_bytes", "4096"},
        BadOptionsCase{"negative_ordinal",
                       [](SimOptions& o) { o.ordinal = -1; },
                       "SimOptions.ordinal", "-1"},
        BadOptionsCase{"huge_ordinal",
                       [](SimOptions& o) { o.ordinal = 100000; },
                       "SimOptions.ordinal", "100000"},
        BadOptionsCase{
            "bad_memory_kind",
            [](SimOptions& o) { o.memory = static_cast<SimMemory>(7); },
            "SimOptions.memory", "kHostBacked"},
        BadOptionsCase{"host_backed_vmm_granule_below_a_page",
                       [](SimOptions& o) {
                         o.memory = SimMemory::kHostBacked;
                         o.total_bytes = kGiB;
                         o.min_granularity = 1024;
                       },
                       "SimOptions.min_granularity", "host page size"},
        BadOptionsCase{
            "bad_clock",
            [](SimOptions& o) { o.clock = static_cast<SimClock>(5); },
            "SimOptions.clock", "kModeled"}),
    [](const ::testing::TestParamInfo<BadOptionsCase>& info) {
      return info.param.name;
    });

TEST(SimBackendTest, CapacityIsAccountedInAlignmentUnits) {
  auto nvidia = Create(Profile("h100", kGiB));
  auto amd = Create(Profile("mi250x", kGiB));
  ASSERT_NE(nvidia, nullptr);
  ASSERT_NE(amd, nullptr);
  GPUALLOC_ASSERT_OK(nvidia->Allocate(1));
  GPUALLOC_ASSERT_OK(amd->Allocate(1));
  EXPECT_EQ(nvidia->bytes_allocated(), 256u);
  EXPECT_EQ(amd->bytes_allocated(), 4096u);
  GPUALLOC_ASSERT_OK(nvidia->Allocate(257));
  GPUALLOC_ASSERT_OK(amd->Allocate(4097));
  EXPECT_EQ(nvidia->bytes_allocated(), 256u + 512u);
  EXPECT_EQ(amd->bytes_allocated(), 4096u + 8192u);
  EXPECT_EQ(nvidia->live_allocations(), 2u);
  absl::StatusOr<std::uint64_t> free = amd->FreeBytes();
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(*free, kGiB - 3 * 4096);
}

TEST(SimBackendTest, FakeAddressesAreAlignedSpacedAndDeterministic) {
  auto a = Create(Profile("h200"));
  auto b = Create(Profile("h200"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<std::uint64_t> sizes = {
      1, 300, 2 * kMiB - 1, 2 * kMiB, 3 * kMiB, 7, 64 * kMiB};
  DeviceAddress previous_end = 0;
  for (std::uint64_t size : sizes) {
    absl::StatusOr<DeviceAddress> x = a->Allocate(size);
    absl::StatusOr<DeviceAddress> y = b->Allocate(size);
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(*x, *y) << "same options, same addresses";
    EXPECT_GE(*x, 0x7f0000000000u);
    EXPECT_EQ(*x % 256, 0u);
    const std::uint64_t rounded = (size + 255) / 256 * 256;
    if (rounded >= 2 * kMiB) {
      EXPECT_EQ(*x % (2 * kMiB), 0u) << "size " << size;
    }
    if (previous_end != 0) {
      EXPECT_GE(*x, previous_end + 2 * kMiB)
          << "allocations must not be contiguous";
    }
    previous_end = *x + size;
  }
}

TEST(SimBackendTest, FakeAddressesAreNeverReused) {
  auto sim = Create(Profile("mi300x"));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> first = sim->Allocate(kMiB);
  ASSERT_TRUE(first.ok());
  GPUALLOC_ASSERT_OK(sim->Free(*first));
  absl::StatusOr<DeviceAddress> second = sim->Allocate(kMiB);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*first, *second);
}

TEST(SimBackendTest, OrdinalsHaveDisjointFakeAddressSpaces) {
  SimOptions o0 = Profile("h100");
  SimOptions o1 = Profile("h100");
  o1.ordinal = 1;
  auto d0 = Create(o0);
  auto d1 = Create(o1);
  ASSERT_NE(d0, nullptr);
  ASSERT_NE(d1, nullptr);
  absl::StatusOr<DeviceAddress> a0 = d0->Allocate(kMiB);
  absl::StatusOr<DeviceAddress> a1 = d1->Allocate(kMiB);
  ASSERT_TRUE(a0.ok());
  ASSERT_TRUE(a1.ok());
  EXPECT_GE(*a1, *a0 + (std::uint64_t{1} << 40));
}

TEST(SimBackendTest, FakeAddressSpaceExhaustionIsResourceExhausted) {
  // A device larger than the 2^48-byte fake window of one ordinal.
  auto sim = Create(Profile("h100", std::uint64_t{1} << 60));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> half = sim->Allocate(std::uint64_t{1} << 47);
  ASSERT_TRUE(half.ok()) << half.status();
  const std::uint64_t in_use = sim->bytes_allocated();
  absl::StatusOr<DeviceAddress> more = sim->Allocate(std::uint64_t{1} << 47);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_TRUE(absl::StrContains(more.status().message(), "address space"))
      << more.status();
  EXPECT_EQ(sim->bytes_allocated(), in_use);
  EXPECT_EQ(sim->live_allocations(), 1u);
}

TEST(SimBackendTest, OutOfMemoryIsResourceExhaustedWithNumbers) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> all = sim->Allocate(48 * kMiB);
  ASSERT_TRUE(all.ok());
  absl::StatusOr<DeviceAddress> more = sim->Allocate(16 * kMiB + 1);
  ASSERT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  const absl::string_view message = more.status().message();
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat(16 * kMiB + 1)))
      << message;  // the request
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat(48 * kMiB)))
      << message;  // in use
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat(64 * kMiB)))
      << message;  // total
  EXPECT_EQ(sim->bytes_allocated(), 48 * kMiB);
  // Exactly what is left still fits; then nothing does.
  absl::StatusOr<DeviceAddress> rest = sim->Allocate(16 * kMiB);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(absl::IsResourceExhausted(sim->Allocate(1).status()));
  GPUALLOC_ASSERT_OK(sim->Free(*all));
  GPUALLOC_EXPECT_OK(sim->Allocate(1));
}

TEST(SimBackendTest, FreeOfUnknownAddressNamesItInHex) {
  auto sim = Create(Profile("h100", kGiB));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  const absl::Status bad = sim->Free(*a + 256);
  ASSERT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_TRUE(
      absl::StrContains(bad.message(), absl::StrFormat("%#x", *a + 256)))
      << bad;
  EXPECT_EQ(sim->live_allocations(), 1u);
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  const absl::Status twice = sim->Free(*a);
  EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
  EXPECT_TRUE(absl::StrContains(twice.message(), absl::StrFormat("%#x", *a)))
      << twice;
}

TEST(SimBackendTest, FaultOnTheKthAllocateChangesNothing) {
  auto sim = Create(Profile("h100", kGiB));
  ASSERT_NE(sim, nullptr);
  sim->FailNthCall(SimOp::kAllocate, 3, absl::UnavailableError("injected"));
  GPUALLOC_ASSERT_OK(sim->Allocate(kMiB));
  GPUALLOC_ASSERT_OK(sim->Allocate(kMiB));
  const std::uint64_t in_use = sim->bytes_allocated();
  const std::uint64_t ns = sim->modeled_ns();
  absl::StatusOr<DeviceAddress> third = sim->Allocate(kMiB);
  EXPECT_TRUE(absl::IsUnavailable(third.status())) << third.status();
  EXPECT_EQ(third.status().message(), "injected");
  EXPECT_EQ(sim->bytes_allocated(), in_use);
  EXPECT_EQ(sim->live_allocations(), 2u);
  EXPECT_EQ(sim->modeled_ns(), ns) << "a failed call costs nothing";
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kAllocate), 1u);
  // The fault fires once; the next call succeeds.
  GPUALLOC_ASSERT_OK(sim->Allocate(kMiB));
  GPUALLOC_ASSERT_OK(sim->Allocate(kMiB));
  EXPECT_EQ(sim->failed_calls(SimOp::kAllocate), 1u);
  EXPECT_EQ(sim->live_allocations(), 4u);
}

TEST(SimBackendTest, FaultOnFreeLeavesTheAllocationLive) {
  auto sim = Create(Profile("mi300x", kGiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  sim->FailNthCall(SimOp::kFree, 1);
  const absl::Status failed = sim->Free(*a);
  EXPECT_TRUE(absl::IsResourceExhausted(failed)) << failed;
  EXPECT_EQ(sim->live_allocations(), 1u);
  EXPECT_EQ(sim->bytes_allocated(), kMiB);
  EXPECT_TRUE(IsMapped(*a));
  std::memset(reinterpret_cast<void*>(*a), 0x5a, kMiB);  // still usable
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  EXPECT_EQ(sim->live_allocations(), 0u);
  EXPECT_EQ(sim->calls(SimOp::kFree), 2u);
  EXPECT_EQ(sim->failed_calls(SimOp::kFree), 1u);
}

TEST(SimBackendTest, FaultOnFreeBytes) {
  auto sim = Create(Profile("h200"));
  ASSERT_NE(sim, nullptr);
  sim->FailNthCall(SimOp::kFreeBytes, 2, absl::InternalError("driver gone"));
  GPUALLOC_ASSERT_OK(sim->FreeBytes());
  EXPECT_TRUE(absl::IsInternal(sim->FreeBytes().status()));
  GPUALLOC_ASSERT_OK(sim->FreeBytes());
  EXPECT_EQ(sim->calls(SimOp::kFreeBytes), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kFreeBytes), 1u);
}

TEST(SimBackendTest, FaultsCountOnlyTheirOwnOpAndCanBeReplacedOrCleared) {
  auto sim = Create(Profile("h200"));
  ASSERT_NE(sim, nullptr);
  sim->FailNthCall(SimOp::kAllocate, 2);
  // Calls of other ops do not advance the countdown.
  GPUALLOC_ASSERT_OK(sim->FreeBytes());
  GPUALLOC_ASSERT_OK(sim->Allocate(1));
  GPUALLOC_ASSERT_OK(sim->FreeBytes());
  // A new fault replaces the pending one.
  sim->FailNthCall(SimOp::kAllocate, 3);
  GPUALLOC_ASSERT_OK(sim->Allocate(1));
  GPUALLOC_ASSERT_OK(sim->Allocate(1));
  EXPECT_FALSE(sim->Allocate(1).ok());
  // Cleared faults never fire; k = 0 clears one op's fault.
  sim->FailNthCall(SimOp::kAllocate, 1);
  sim->ClearFaults();
  GPUALLOC_ASSERT_OK(sim->Allocate(1));
  sim->FailNthCall(SimOp::kFree, 1);
  sim->FailNthCall(SimOp::kFree, 0);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(1);
  ASSERT_TRUE(a.ok());
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  // An OK status cannot be injected as a failure.
  sim->FailNthCall(SimOp::kAllocate, 1, absl::OkStatus());
  EXPECT_TRUE(absl::IsInternal(sim->Allocate(1).status()));
}

TEST(SimBackendTest, CountersAndModeledCost) {
  SimOptions o = Profile("h100", kGiB);
  o.cost_ns = {1000, 100, 10};
  o.cost_ns_per_mib = {};  // per call only
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  absl::StatusOr<DeviceAddress> b = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  GPUALLOC_ASSERT_OK(sim->FreeBytes());
  // Failures: counted, no cost.
  EXPECT_FALSE(sim->Allocate(0).ok());
  EXPECT_FALSE(sim->Allocate(2 * kGiB).ok());
  EXPECT_FALSE(sim->Free(*a).ok());
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 4u);
  EXPECT_EQ(sim->failed_calls(SimOp::kAllocate), 2u);
  EXPECT_EQ(sim->calls(SimOp::kFree), 2u);
  EXPECT_EQ(sim->failed_calls(SimOp::kFree), 1u);
  EXPECT_EQ(sim->calls(SimOp::kFreeBytes), 1u);
  EXPECT_EQ(sim->failed_calls(SimOp::kFreeBytes), 0u);
  EXPECT_EQ(sim->modeled_ns(), 2 * 1000u + 100u + 10u);

  // ResetCounters zeroes the counters, not the device state or the faults.
  sim->FailNthCall(SimOp::kFree, 1);
  sim->ResetCounters();
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 0u);
  EXPECT_EQ(sim->failed_calls(SimOp::kAllocate), 0u);
  EXPECT_EQ(sim->modeled_ns(), 0u);
  EXPECT_EQ(sim->live_allocations(), 1u);
  EXPECT_FALSE(sim->Free(*b).ok());
  GPUALLOC_ASSERT_OK(sim->Free(*b));
  EXPECT_EQ(sim->calls(SimOp::kFree), 2u);
  EXPECT_EQ(sim->modeled_ns(), 100u);
}

TEST(SimBackendTest, FakeAddressesCostNoHostMemory) {
  auto sim = Create(Profile("mi300x"));
  ASSERT_NE(sim, nullptr);
  ASSERT_EQ(sim->info().total_bytes, 192 * kGiB);
  const std::uint64_t resident_before = ResidentBytes();
  std::vector<DeviceAddress> held;
  absl::StatusOr<DeviceAddress> big = sim->Allocate(100 * kGiB);
  ASSERT_TRUE(big.ok()) << big.status();
  held.push_back(*big);
  for (int i = 0; i < 25; ++i) {
    absl::StatusOr<DeviceAddress> a = sim->Allocate(2 * kGiB);
    ASSERT_TRUE(a.ok()) << a.status();
    held.push_back(*a);
  }
  EXPECT_EQ(sim->bytes_allocated(), 150 * kGiB);
  const std::uint64_t resident_after = ResidentBytes();
  EXPECT_LT(resident_after, resident_before + 64 * kMiB)
      << "150 GiB of fake device memory touched host memory";
  for (DeviceAddress a : held) GPUALLOC_ASSERT_OK(sim->Free(a));
  EXPECT_EQ(sim->bytes_allocated(), 0u);
}

TEST(SimBackendTest, HostBackedMemoryHoldsAPatternAndIsAligned) {
  auto sim = Create(Profile("h100", 256 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  EXPECT_TRUE(sim->info().capabilities.host_accessible);
  const std::vector<std::uint64_t> sizes = {100, 4096, 2 * kMiB, 6 * kMiB + 3};
  std::vector<DeviceAddress> addresses;
  for (std::uint64_t size : sizes) {
    absl::StatusOr<DeviceAddress> a = sim->Allocate(size);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*a % 256, 0u);
    if (size >= 2 * kMiB) {
      EXPECT_EQ(*a % (2 * kMiB), 0u) << size;
    }
    addresses.push_back(*a);
    std::memset(reinterpret_cast<void*>(*a), static_cast<int>(size & 0xff),
                size);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(addresses[i]);
    const unsigned char expected = static_cast<unsigned char>(sizes[i] & 0xff);
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < sizes[i]; ++off) {
      wrong += bytes[off] != expected;
    }
    EXPECT_EQ(wrong, 0u) << "block of " << sizes[i] << " bytes";
  }
  for (DeviceAddress a : addresses) {
    GPUALLOC_ASSERT_OK(sim->Free(a));
    EXPECT_FALSE(IsMapped(a)) << "Free must unmap " << a;
  }
}

TEST(SimBackendTest, FakeMemoryHasNoHostCopy) {
  auto sim = Create(Profile("h100", 256 * kMiB));
  ASSERT_NE(sim, nullptr);
  EXPECT_FALSE(sim->info().capabilities.host_copy);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(4096);
  ASSERT_TRUE(a.ok()) << a.status();
  unsigned char host[16] = {};
  const absl::Status to = sim->CopyToHost(host, *a, sizeof(host));
  EXPECT_TRUE(absl::IsUnimplemented(to)) << to;
  EXPECT_TRUE(absl::StrContains(to.message(), "kFake")) << to;
  EXPECT_TRUE(absl::StrContains(to.message(), "CopyToHost")) << to;
  const absl::Status from = sim->CopyFromHost(*a, host, sizeof(host));
  EXPECT_TRUE(absl::IsUnimplemented(from)) << from;
  EXPECT_TRUE(absl::StrContains(from.message(), "CopyFromHost")) << from;
  // Counted as failed calls, at no cost.
  EXPECT_EQ(sim->calls(SimOp::kCopyToHost), 1u);
  EXPECT_EQ(sim->failed_calls(SimOp::kCopyToHost), 1u);
  EXPECT_EQ(sim->failed_calls(SimOp::kCopyFromHost), 1u);
}

TEST(SimBackendTest, HostCopiesAreCheckedCountedAndCosted) {
  auto sim = Create(Profile("h100", 256 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  EXPECT_TRUE(sim->info().capabilities.host_copy);
  // The cost model: 10 us per call plus 1 MiB / 50 GB/s per MiB.
  EXPECT_EQ(sim->CallCostNs(SimOp::kCopyToHost, 0), 10'000u);
  EXPECT_EQ(sim->CallCostNs(SimOp::kCopyFromHost, kMiB), 10'000u + 20'972u);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<unsigned char> out(kMiB), in(kMiB, 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<unsigned char>(i * 7 + 1);
  }
  const std::uint64_t before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->CopyFromHost(*a, out.data(), kMiB));
  // The device memory holds the bytes (host-backed: readable directly).
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(*a), out.data(), kMiB),
            0);
  GPUALLOC_ASSERT_OK(sim->CopyToHost(in.data(), *a, kMiB));
  EXPECT_EQ(in, out);
  // Pageable host memory (a std::vector, not HostAllocate's): staged, at
  // SimOptions::pageable_copy_ns_per_mib instead of the link's rate.
  EXPECT_EQ(sim->modeled_ns() - before, 2 * (10'000u + 41'943u));
  EXPECT_EQ(sim->pageable_copies(), 2u);
  EXPECT_EQ(sim->calls(SimOp::kCopyToHost), 1u);
  EXPECT_EQ(sim->calls(SimOp::kCopyFromHost), 1u);

  // Past the end of the allocation, and outside any: InvalidArgument naming
  // the address; nothing copied.
  const absl::Status past = sim->CopyToHost(in.data(), *a + 16, kMiB);
  EXPECT_TRUE(absl::IsInvalidArgument(past)) << past;
  EXPECT_TRUE(
      absl::StrContains(past.message(), absl::StrFormat("%#x", *a + 16)))
      << past;
  EXPECT_TRUE(absl::IsInvalidArgument(sim->CopyFromHost(16, out.data(), 1)));
  const DeviceAddress top = ~DeviceAddress{0} - 8;
  EXPECT_TRUE(absl::IsInvalidArgument(sim->CopyToHost(in.data(), top, 64)));
  // Reserved, but only partly mapped with access set: FailedPrecondition.
  const std::uint64_t g = sim->info().recommended_granularity;
  absl::StatusOr<DeviceAddress> r = sim->ReserveAddress(2 * g, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<PhysicalHandle> h = sim->CreatePhysical(g);
  ASSERT_TRUE(h.ok()) << h.status();
  GPUALLOC_ASSERT_OK(sim->Map(*r, g, *h));
  const absl::Status no_access = sim->CopyFromHost(*r, out.data(), 64);
  EXPECT_TRUE(absl::IsFailedPrecondition(no_access)) << no_access;
  EXPECT_TRUE(absl::StrContains(no_access.message(), "SetAccess")) << no_access;
  GPUALLOC_ASSERT_OK(sim->SetAccess(*r, g));
  GPUALLOC_EXPECT_OK(sim->CopyFromHost(*r + g - 64, out.data(), 64));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      sim->CopyFromHost(*r + g - 64, out.data(), 128)));
  // A null host pointer: InvalidArgument; 0 bytes: nothing, but a call.
  EXPECT_TRUE(absl::IsInvalidArgument(sim->CopyToHost(nullptr, *a, 1)));
  GPUALLOC_EXPECT_OK(sim->CopyToHost(nullptr, 16, 0));
  EXPECT_EQ(sim->failed_calls(SimOp::kCopyToHost), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kCopyFromHost), 3u);
  // Fault injection reaches them like every call.
  sim->FailNthCall(SimOp::kCopyToHost, 1, absl::InternalError("injected"));
  EXPECT_TRUE(absl::IsInternal(sim->CopyToHost(in.data(), *a, 1)));
  GPUALLOC_ASSERT_OK(sim->Unmap(*r, g));
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(*h));
  GPUALLOC_ASSERT_OK(sim->FreeAddress(*r, 2 * g));
  GPUALLOC_ASSERT_OK(sim->Free(*a));
}

TEST(SimBackendTest, AHostCopyDuringACaptureIsAViolation) {
  auto sim = Create(Profile("h100", 256 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(4096);
  ASSERT_TRUE(a.ok()) << a.status();
  unsigned char host[16] = {};
  GPUALLOC_ASSERT_OK(sim->BeginCapture(Stream(0x10)));
  // Even in the relaxed mode: a synchronous copy waits for the device.
  GPUALLOC_ASSERT_OK(sim->ExchangeCaptureMode(CaptureMode::kRelaxed));
  const absl::Status copy = sim->CopyToHost(host, *a, sizeof(host));
  EXPECT_TRUE(absl::IsFailedPrecondition(copy)) << copy;
  EXPECT_TRUE(absl::StrContains(copy.message(), "CopyToHost")) << copy;
  EXPECT_TRUE(
      absl::IsFailedPrecondition(sim->CopyFromHost(*a, host, sizeof(host))));
  EXPECT_EQ(sim->capture_violations(), 2u);
  EXPECT_FALSE(sim->EndCapture(Stream(0x10)).ok());
  GPUALLOC_EXPECT_OK(sim->CopyToHost(host, *a, sizeof(host)));
  GPUALLOC_ASSERT_OK(sim->Free(*a));
}

TEST(SimBackendTest, HostBackedMmapFailureIsResourceExhausted) {
  // A device bigger than the host's address space: mmap must fail.
  auto sim =
      Create(Profile("h100", std::uint64_t{1} << 62, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(std::uint64_t{1} << 61);
  EXPECT_TRUE(absl::IsResourceExhausted(a.status())) << a.status();
  EXPECT_EQ(sim->bytes_allocated(), 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
  GPUALLOC_EXPECT_OK(sim->Allocate(kMiB));
}

TEST(SimBackendTest, DestructorUnmapsLiveHostBackedMemory) {
  auto sim = Create(Profile("mi250x", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(3 * kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(IsMapped(*a));
  sim.reset();
  EXPECT_FALSE(IsMapped(*a));
}

TEST(SimBackendDeathTest, HostBackedOverrunFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto sim = Create(Profile("mi300x", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(64 * kKiB);
  ASSERT_TRUE(a.ok());
  volatile unsigned char* bytes = reinterpret_cast<unsigned char*>(*a);
  bytes[64 * kKiB - 1] = 1;  // the last byte is fine
  EXPECT_DEATH(bytes[64 * kKiB] = 1, "");
}

// --- Virtual memory ----------------------------------------------------------

// Reserves, creates, maps and sets access, asserting each step.
struct VmmRange {
  DeviceAddress address = 0;
  PhysicalHandle handle = 0;
};

VmmRange MapNew(SimBackend& sim, std::uint64_t reserve, std::uint64_t map) {
  VmmRange r;
  absl::StatusOr<DeviceAddress> address = sim.ReserveAddress(reserve, 0);
  EXPECT_TRUE(address.ok()) << address.status();
  absl::StatusOr<PhysicalHandle> handle = sim.CreatePhysical(map);
  EXPECT_TRUE(handle.ok()) << handle.status();
  if (!address.ok() || !handle.ok()) return r;
  r.address = *address;
  r.handle = *handle;
  GPUALLOC_EXPECT_OK(sim.Map(r.address, map, r.handle));
  GPUALLOC_EXPECT_OK(sim.SetAccess(r.address, map));
  return r;
}

TEST(SimVmmTest, CallsAreCountedAndCostTheirModeledTime) {
  SimOptions o = Profile("h100", kGiB);
  o.cost_ns[static_cast<int>(SimOp::kReserveAddress)] = 1;
  o.cost_ns[static_cast<int>(SimOp::kFreeAddress)] = 10;
  o.cost_ns[static_cast<int>(SimOp::kCreatePhysical)] = 100;
  o.cost_ns[static_cast<int>(SimOp::kReleasePhysical)] = 1'000;
  o.cost_ns[static_cast<int>(SimOp::kMap)] = 10'000;
  o.cost_ns[static_cast<int>(SimOp::kUnmap)] = 100'000;
  o.cost_ns[static_cast<int>(SimOp::kSetAccess)] = 1'000'000;
  o.cost_ns_per_mib = {};  // per call only
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  const VmmRange r = MapNew(*sim, 4 * kMiB, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 2 * kMiB));
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(r.handle));
  GPUALLOC_ASSERT_OK(sim->FreeAddress(r.address, 4 * kMiB));
  EXPECT_EQ(sim->modeled_ns(), 1'111'111u);
  // Failed calls count, and cost nothing.
  EXPECT_FALSE(sim->ReleasePhysical(r.handle).ok());
  EXPECT_FALSE(sim->Map(r.address, 2 * kMiB, r.handle).ok());
  EXPECT_FALSE(sim->SetAccess(r.address, 2 * kMiB).ok());
  EXPECT_EQ(sim->modeled_ns(), 1'111'111u);
  for (SimOp op : {SimOp::kReserveAddress, SimOp::kFreeAddress,
                   SimOp::kCreatePhysical, SimOp::kUnmap}) {
    EXPECT_EQ(sim->calls(op), 1u) << SimOpName(op);
    EXPECT_EQ(sim->failed_calls(op), 0u) << SimOpName(op);
  }
  for (SimOp op : {SimOp::kReleasePhysical, SimOp::kMap, SimOp::kSetAccess}) {
    EXPECT_EQ(sim->calls(op), 2u) << SimOpName(op);
    EXPECT_EQ(sim->failed_calls(op), 1u) << SimOpName(op);
  }
}

TEST(SimVmmTest, DefaultCostsAreTensOfMicrosecondsForTheHeavyCalls) {
  auto sim = Create(Profile("h100"));
  ASSERT_NE(sim, nullptr);
  auto cost = [&](SimOp op) { return sim->CallCostNs(op, 2 * kMiB); };
  for (SimOp op : {SimOp::kCreatePhysical, SimOp::kReleasePhysical,
                   SimOp::kUnmap, SimOp::kSetAccess}) {
    EXPECT_GE(cost(op), 10'000u) << SimOpName(op);
    EXPECT_LT(cost(op), 100'000u) << SimOpName(op);
  }
  for (SimOp op : {SimOp::kReserveAddress, SimOp::kFreeAddress, SimOp::kMap}) {
    EXPECT_GT(cost(op), 0u) << SimOpName(op);
  }
}

// --- The cost model ----------------------------------------------------------

constexpr SimOp kSizedOps[] = {
    SimOp::kAllocate,        SimOp::kFree, SimOp::kCreatePhysical,
    SimOp::kReleasePhysical, SimOp::kMap,  SimOp::kUnmap,
    SimOp::kSetAccess};

TEST(SimCostModelTest, SizedCallsCostPerCallPlusPerByte) {
  for (const char* profile : {"h100", "h200", "a100", "mi300x", "mi250x"}) {
    auto sim = Create(Profile(profile));
    ASSERT_NE(sim, nullptr);
    for (SimOp op : kSizedOps) {
      const std::uint64_t base = sim->CallCostNs(op, 0);
      const std::uint64_t two = sim->CallCostNs(op, 2 * kMiB);
      const std::uint64_t twenty = sim->CallCostNs(op, 20 * kMiB);
      const std::uint64_t gib = sim->CallCostNs(op, kGiB);
      EXPECT_GT(base, 0u) << profile << " " << SimOpName(op);
      EXPECT_LT(base, two) << profile << " " << SimOpName(op);
      EXPECT_LT(two, twenty) << profile << " " << SimOpName(op);
      EXPECT_LT(twenty, gib) << profile << " " << SimOpName(op);
      // Linear in the bytes: the per-byte part of 20 MiB is ten times that
      // of 2 MiB (to rounding).
      const std::uint64_t d2 = two - base, d20 = twenty - base;
      EXPECT_LE(d20 > 10 * d2 ? d20 - 10 * d2 : 10 * d2 - d20, 10u)
          << profile << " " << SimOpName(op);
    }
    // Address space is per call only.
    EXPECT_EQ(sim->CallCostNs(SimOp::kReserveAddress, kGiB),
              sim->CallCostNs(SimOp::kReserveAddress, 2 * kMiB));
  }
}

TEST(SimCostModelTest, OneTwentyMiBHandleMapsCheaperThanTenOfTwoMiB) {
  // PyTorch's expandable segments grow by 20 MiB handles because mapping ten
  // 2 MiB pages costs about ten times one 20 MiB handle.
  for (const char* profile : {"h100", "mi300x"}) {
    auto sim = Create(Profile(profile, 4 * kGiB));
    ASSERT_NE(sim, nullptr);
    auto grow = [&](std::uint64_t handle_bytes, int handles) {
      absl::StatusOr<DeviceAddress> va =
          sim->ReserveAddress(handle_bytes * handles, 0);
      EXPECT_TRUE(va.ok());
      const std::uint64_t reserved = sim->modeled_ns();
      for (int i = 0; i < handles; ++i) {
        const DeviceAddress at = *va + i * handle_bytes;
        absl::StatusOr<PhysicalHandle> h = sim->CreatePhysical(handle_bytes);
        EXPECT_TRUE(h.ok());
        GPUALLOC_EXPECT_OK(sim->Map(at, handle_bytes, *h));
        GPUALLOC_EXPECT_OK(sim->SetAccess(at, handle_bytes));
        GPUALLOC_EXPECT_OK(sim->ReleasePhysical(*h));
      }
      const std::uint64_t mapped = sim->modeled_ns() - reserved;
      GPUALLOC_EXPECT_OK(sim->Unmap(*va, handle_bytes * handles));
      GPUALLOC_EXPECT_OK(sim->FreeAddress(*va, handle_bytes * handles));
      return mapped;
    };
    const std::uint64_t ten_small = grow(2 * kMiB, 10);
    const std::uint64_t one_large = grow(20 * kMiB, 1);
    EXPECT_GT(ten_small, 3 * one_large) << profile;
    // cuMemMap alone: about ten times.
    const std::uint64_t map_small = 10 * sim->CallCostNs(SimOp::kMap, 2 * kMiB);
    const std::uint64_t map_large = sim->CallCostNs(SimOp::kMap, 20 * kMiB);
    EXPECT_GT(map_small, 7 * map_large) << profile;
    EXPECT_LE(map_small, 10 * map_large) << profile;
  }
}

TEST(SimCostModelTest, CallsChargeTheBytesTheyHandle) {
  auto sim = Create(Profile("h100", 4 * kGiB));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> va = sim->ReserveAddress(64 * kMiB, 0);
  ASSERT_TRUE(va.ok());
  auto delta = [&](auto&& call) {
    const std::uint64_t before = sim->modeled_ns();
    call();
    return sim->modeled_ns() - before;
  };
  PhysicalHandle h = 0;
  EXPECT_EQ(delta([&] {
              absl::StatusOr<PhysicalHandle> made =
                  sim->CreatePhysical(20 * kMiB);
              ASSERT_TRUE(made.ok());
              h = *made;
            }),
            sim->CallCostNs(SimOp::kCreatePhysical, 20 * kMiB));
  EXPECT_EQ(delta([&] { GPUALLOC_EXPECT_OK(sim->Map(*va, 20 * kMiB, h)); }),
            sim->CallCostNs(SimOp::kMap, 20 * kMiB));
  EXPECT_EQ(delta([&] { GPUALLOC_EXPECT_OK(sim->SetAccess(*va, 20 * kMiB)); }),
            sim->CallCostNs(SimOp::kSetAccess, 20 * kMiB));
  EXPECT_EQ(delta([&] { GPUALLOC_EXPECT_OK(sim->Unmap(*va, 20 * kMiB)); }),
            sim->CallCostNs(SimOp::kUnmap, 20 * kMiB));
  EXPECT_EQ(delta([&] { GPUALLOC_EXPECT_OK(sim->ReleasePhysical(h)); }),
            sim->CallCostNs(SimOp::kReleasePhysical, 20 * kMiB));
  DeviceAddress a = 0;
  EXPECT_EQ(delta([&] {
              absl::StatusOr<DeviceAddress> got = sim->Allocate(kGiB);
              ASSERT_TRUE(got.ok());
              a = *got;
            }),
            sim->CallCostNs(SimOp::kAllocate, kGiB));
  // Nothing pending: Free costs its call alone.
  EXPECT_EQ(delta([&] { GPUALLOC_EXPECT_OK(sim->Free(a)); }),
            sim->CallCostNs(SimOp::kFree, kGiB));
  // A 1 GiB cudaMalloc costs more than a 2 MiB one, by more than the call.
  EXPECT_GT(sim->CallCostNs(SimOp::kAllocate, kGiB),
            2 * sim->CallCostNs(SimOp::kAllocate, 2 * kMiB));
}

TEST(SimCostModelTest, RocmVirtualMemoryCallsCostMoreThanCudas) {
  auto h100 = Create(Profile("h100"));
  auto mi300x = Create(Profile("mi300x"));
  auto mi250x = Create(Profile("mi250x"));
  ASSERT_NE(h100, nullptr);
  ASSERT_NE(mi300x, nullptr);
  ASSERT_NE(mi250x, nullptr);
  for (SimOp op : kSizedOps) {
    for (std::uint64_t bytes : {2 * kMiB, 20 * kMiB, kGiB}) {
      EXPECT_GT(mi300x->CallCostNs(op, bytes), h100->CallCostNs(op, bytes))
          << SimOpName(op) << " " << bytes;
      EXPECT_EQ(mi250x->CallCostNs(op, bytes), mi300x->CallCostNs(op, bytes))
          << SimOpName(op) << " " << bytes;
    }
  }
  auto h200 = Create(Profile("h200"));
  ASSERT_NE(h200, nullptr);
  EXPECT_EQ(h200->CallCostNs(SimOp::kMap, 20 * kMiB),
            h100->CallCostNs(SimOp::kMap, 20 * kMiB));
}

// The NVIDIA model reproduces what tools/device-check.sh measured once on one
// H200 (docs/MEASUREMENTS.md, "The cost model against an H200"): median host
// time of create+map+access and of unmap+release at 2 MiB and 1 GiB, within 3%.
TEST(SimCostModelTest, NvidiaModelReproducesTheH200Measurement) {
  struct Point {
    std::uint64_t bytes;
    std::uint64_t map_ns;    // cuMemCreate + cuMemMap + cuMemSetAccess
    std::uint64_t unmap_ns;  // cuMemUnmap + cuMemRelease
  };
  constexpr Point kMeasured[] = {{2 * kMiB, 43'000, 31'000},
                                 {kGiB, 97'000, 287'000}};
  auto near = [](std::uint64_t modeled, std::uint64_t measured) {
    const std::uint64_t diff =
        modeled > measured ? modeled - measured : measured - modeled;
    return 100 * diff <= 3 * measured;
  };
  for (const char* profile : {"h200", "h100", "a100"}) {
    auto sim = Create(Profile(profile));
    ASSERT_NE(sim, nullptr);
    for (const Point& p : kMeasured) {
      const std::uint64_t map =
          sim->CallCostNs(SimOp::kCreatePhysical, p.bytes) +
          sim->CallCostNs(SimOp::kMap, p.bytes) +
          sim->CallCostNs(SimOp::kSetAccess, p.bytes);
      const std::uint64_t unmap =
          sim->CallCostNs(SimOp::kUnmap, p.bytes) +
          sim->CallCostNs(SimOp::kReleasePhysical, p.bytes);
      EXPECT_TRUE(near(map, p.map_ns))
          << profile << " " << p.bytes << " B create+map+access: modeled "
          << map << " ns, measured " << p.map_ns;
      EXPECT_TRUE(near(unmap, p.unmap_ns))
          << profile << " " << p.bytes << " B unmap+release: modeled " << unmap
          << " ns, measured " << p.unmap_ns;
    }
  }
}

// AMD's figures are estimates: twice NVIDIA's, per call and per MiB, for
// every sized call (docs/REFERENCE.md, "Cost model").
TEST(SimCostModelTest, AmdEstimatesAreTwiceNvidias) {
  auto h200 = Create(Profile("h200"));
  auto mi300x = Create(Profile("mi300x"));
  ASSERT_NE(h200, nullptr);
  ASSERT_NE(mi300x, nullptr);
  for (SimOp op : kSizedOps) {
    for (std::uint64_t bytes : {std::uint64_t{0}, 2 * kMiB, kGiB}) {
      EXPECT_EQ(mi300x->CallCostNs(op, bytes), 2 * h200->CallCostNs(op, bytes))
          << SimOpName(op) << " " << bytes;
    }
  }
}

TEST(SimCostModelTest, OptionsOverrideTheProfilePerEntry) {
  SimOptions o = Profile("h100");
  o.cost_ns[static_cast<int>(SimOp::kMap)] = 7;
  o.cost_ns_per_mib[static_cast<int>(SimOp::kMap)] = 1'000;
  const std::uint64_t huge = std::uint64_t{1} << 30;
  o.cost_ns_per_mib[static_cast<int>(SimOp::kSetAccess)] = huge;
  auto sim = Create(o);
  auto plain = Create(Profile("h100"));
  ASSERT_NE(sim, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(sim->CallCostNs(SimOp::kMap, 3 * kMiB), 7u + 3'000u);
  EXPECT_EQ(sim->CallCostNs(SimOp::kMap, kMiB / 2), 7u + 500u);
  EXPECT_EQ(sim->CallCostNs(SimOp::kUnmap, 3 * kMiB),
            plain->CallCostNs(SimOp::kUnmap, 3 * kMiB));
  // Huge sizes saturate instead of wrapping.
  EXPECT_EQ(sim->CallCostNs(SimOp::kSetAccess, ~std::uint64_t{0}),
            ~std::uint64_t{0});
  EXPECT_GT(sim->CallCostNs(SimOp::kMap, ~std::uint64_t{0}),
            sim->CallCostNs(SimOp::kMap, kGiB));
}

TEST(SimCostModelTest, HostWaitCostsTheRemainingWorkOnTheModeledClock) {
  SimOptions o = Profile("h100", 4 * kGiB);
  o.clock = SimClock::kModeled;
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  absl::StatusOr<DeviceAddress> b = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  const Stream s1(1), s2(2);
  absl::StatusOr<EventHandle> e = sim->CreateEvent();
  ASSERT_TRUE(e.ok());
  sim->Use(s1, *a, kMiB, 300'000);
  sim->Use(s1, *a, kMiB, 200'000);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(*e, s1));
  sim->Use(s2, *b, kMiB, 900'000);
  sim->AdvanceClock(100'000);  // 400 us of s1's work remain
  std::uint64_t before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(*e));
  EXPECT_EQ(sim->modeled_ns() - before,
            400'000u + sim->CallCostNs(SimOp::kSynchronizeEvent, 0));
  EXPECT_EQ(sim->now_ns(), 500'000u);
  // Waiting again for completed work costs the call alone.
  before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(*e));
  EXPECT_EQ(sim->modeled_ns() - before,
            sim->CallCostNs(SimOp::kSynchronizeEvent, 0));
  // Free synchronizes the device: it waits for s2's 900 us piece, 400 us
  // of which remain.
  before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  EXPECT_GE(sim->modeled_ns() - before, 400'000u);
  EXPECT_EQ(sim->modeled_ns() - before,
            400'000u + sim->CallCostNs(SimOp::kFree, kMiB));
  EXPECT_EQ(sim->now_ns(), 900'000u);
  GPUALLOC_ASSERT_OK(sim->Free(*b));
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(*e));
}

TEST(SimCostModelTest, HostWaitCostsAnEstimatePerPendingPieceOnTheManualClock) {
  SimOptions o = Profile("h100", 4 * kGiB);
  o.clock = SimClock::kManual;
  o.host_wait_ns_per_piece = 1'000;
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  absl::StatusOr<DeviceAddress> b = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  const Stream s1(1), s2(2);
  absl::StatusOr<EventHandle> e = sim->CreateEvent();
  ASSERT_TRUE(e.ok());
  for (int i = 0; i < 3; ++i) sim->Use(s1, *a, kMiB);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(*e, s1));
  for (int i = 0; i < 5; ++i) sim->Use(s2, *b, kMiB);
  std::uint64_t before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(*e));
  EXPECT_EQ(sim->modeled_ns() - before,
            3 * 1'000u + sim->CallCostNs(SimOp::kSynchronizeEvent, 0));
  // Free waits for everything: s2's five pieces (streams run side by side,
  // so the longest queue sets the wait).
  sim->Use(s1, *a, kMiB);
  before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  EXPECT_EQ(sim->modeled_ns() - before,
            5 * 1'000u + sim->CallCostNs(SimOp::kFree, kMiB));
  EXPECT_EQ(sim->pending_work(), 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  GPUALLOC_ASSERT_OK(sim->Free(*b));
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(*e));
}

TEST(SimCostModelTest, ManualWaitEstimateDefaultsToWorkNs) {
  SimOptions o = Profile("h100", 4 * kGiB);
  o.work_ns = 7'000;
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  sim->Use(Stream(1), *a, kMiB);
  sim->Use(Stream(1), *a, kMiB);
  const std::uint64_t before = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  EXPECT_EQ(sim->modeled_ns() - before,
            2 * 7'000u + sim->CallCostNs(SimOp::kFree, kMiB));
}

TEST(SimVmmTest, WithoutTheCapabilityEveryCallIsUnimplementedAndCounted) {
  SimOptions o = Profile("h200");
  o.virtual_memory = false;
  auto sim = Create(o);
  ASSERT_NE(sim, nullptr);
  EXPECT_FALSE(sim->info().capabilities.virtual_memory);
  const std::vector<absl::Status> statuses = {
      sim->ReserveAddress(2 * kMiB, 0).status(),
      sim->FreeAddress(2 * kMiB, 2 * kMiB),
      sim->CreatePhysical(2 * kMiB).status(),
      sim->ReleasePhysical(1),
      sim->Map(2 * kMiB, 2 * kMiB, 1),
      sim->Unmap(2 * kMiB, 2 * kMiB),
      sim->SetAccess(2 * kMiB, 2 * kMiB)};
  for (const absl::Status& status : statuses) {
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "virtual_memory"))
        << status;
  }
  for (SimOp op : {SimOp::kReserveAddress, SimOp::kFreeAddress,
                   SimOp::kCreatePhysical, SimOp::kReleasePhysical, SimOp::kMap,
                   SimOp::kUnmap, SimOp::kSetAccess}) {
    EXPECT_EQ(sim->calls(op), 1u) << SimOpName(op);
    EXPECT_EQ(sim->failed_calls(op), 1u) << SimOpName(op);
  }
  EXPECT_EQ(sim->modeled_ns(), 0u);
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

// One op's fault: the call fails with the injected status, changes nothing,
// and the same call then succeeds.
struct VmmFaultState {
  DeviceAddress reservation = 0;  // 8 MiB; [0, 2 MiB) mapped and accessible
  PhysicalHandle spare = 0;       // 2 MiB, not mapped
  DeviceAddress extra = 0;        // what `prepare` made
};

struct VmmFaultCase {
  std::string name;
  SimOp op;
  // Brings the device to the state the call needs (not under the fault).
  std::function<absl::Status(SimBackend&, VmmFaultState&)> prepare;
  std::function<absl::Status(SimBackend&, VmmFaultState&)> call;
};

class SimVmmFaultTest : public ::testing::TestWithParam<VmmFaultCase> {};

TEST_P(SimVmmFaultTest, FailsOnceAndChangesNothing) {
  for (SimMemory memory : {SimMemory::kFake, SimMemory::kHostBacked}) {
    auto sim = Create(Profile("mi300x", 256 * kMiB, memory));
    ASSERT_NE(sim, nullptr);
    const VmmRange r = MapNew(*sim, 8 * kMiB, 2 * kMiB);
    absl::StatusOr<PhysicalHandle> spare = sim->CreatePhysical(2 * kMiB);
    ASSERT_TRUE(spare.ok());
    VmmFaultState state{r.address, *spare, 0};
    if (GetParam().prepare) {
      GPUALLOC_ASSERT_OK(GetParam().prepare(*sim, state));
    }
    const std::uint64_t mapped = sim->mapped_bytes();
    const std::uint64_t physical = sim->physical_bytes();
    const std::uint64_t reserved = sim->reserved_address_bytes();
    const std::uint64_t free = *sim->FreeBytes();
    const bool accessible = sim->IsAccessible(r.address, 8 * kMiB);
    const std::uint64_t ns = sim->modeled_ns();
    sim->FailNthCall(GetParam().op, 1, absl::DataLossError("injected"));
    const absl::Status failed = GetParam().call(*sim, state);
    EXPECT_EQ(sim->modeled_ns(), ns) << "a failed call costs nothing";
    EXPECT_TRUE(absl::IsDataLoss(failed)) << failed;
    EXPECT_EQ(failed.message(), "injected");
    EXPECT_EQ(sim->mapped_bytes(), mapped);
    EXPECT_EQ(sim->physical_bytes(), physical);
    EXPECT_EQ(sim->reserved_address_bytes(), reserved);
    EXPECT_EQ(*sim->FreeBytes(), free);
    EXPECT_EQ(sim->IsAccessible(r.address, 8 * kMiB), accessible);
    EXPECT_TRUE(sim->IsAccessible(r.address, 2 * kMiB));
    EXPECT_EQ(sim->failed_calls(GetParam().op), 1u);
    if (memory == SimMemory::kHostBacked) {
      // The mapped memory is still there and writable.
      std::memset(reinterpret_cast<void*>(r.address), 0x3c, 2 * kMiB);
    }
    const absl::Status again = GetParam().call(*sim, state);
    EXPECT_TRUE(again.ok()) << again;
    EXPECT_EQ(sim->failed_calls(GetParam().op), 1u);
    EXPECT_GT(sim->modeled_ns(), ns);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryOp, SimVmmFaultTest,
    ::testing::Values(
        VmmFaultCase{"reserve", SimOp::kReserveAddress, nullptr,
                     [](SimBackend& sim, VmmFaultState&) {
                       return sim.ReserveAddress(2 * kMiB, 0).status();
                     }},
        VmmFaultCase{"free_address", SimOp::kFreeAddress,
                     [](SimBackend& sim, VmmFaultState& s) {
                       absl::StatusOr<DeviceAddress> a =
                           sim.ReserveAddress(4 * kMiB, 0);
                       if (a.ok()) s.extra = *a;
                       return a.status();
                     },
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.FreeAddress(s.extra, 4 * kMiB);
                     }},
        VmmFaultCase{"create", SimOp::kCreatePhysical, nullptr,
                     [](SimBackend& sim, VmmFaultState&) {
                       return sim.CreatePhysical(2 * kMiB).status();
                     }},
        VmmFaultCase{"release", SimOp::kReleasePhysical, nullptr,
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.ReleasePhysical(s.spare);
                     }},
        VmmFaultCase{"map", SimOp::kMap, nullptr,
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.Map(s.reservation + 2 * kMiB, 2 * kMiB,
                                      s.spare);
                     }},
        VmmFaultCase{"set_access", SimOp::kSetAccess,
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.Map(s.reservation + 2 * kMiB, 2 * kMiB,
                                      s.spare);
                     },
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.SetAccess(s.reservation + 2 * kMiB, 2 * kMiB);
                     }},
        VmmFaultCase{"unmap", SimOp::kUnmap,
                     [](SimBackend& sim, VmmFaultState& s) {
                       absl::Status mapped =
                           sim.Map(s.reservation + 4 * kMiB, 2 * kMiB, s.spare);
                       if (!mapped.ok()) return mapped;
                       return sim.SetAccess(s.reservation + 4 * kMiB, 2 * kMiB);
                     },
                     [](SimBackend& sim, VmmFaultState& s) {
                       return sim.Unmap(s.reservation + 4 * kMiB, 2 * kMiB);
                     }}),
    [](const ::testing::TestParamInfo<VmmFaultCase>& info) {
      return info.param.name;
    });

TEST(SimVmmTest, ObserversFollowEveryStep) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> r = sim->ReserveAddress(16 * kMiB, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(sim->reserved_address_bytes(), 16 * kMiB);
  absl::StatusOr<PhysicalHandle> a = sim->CreatePhysical(2 * kMiB);
  absl::StatusOr<PhysicalHandle> b = sim->CreatePhysical(4 * kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(sim->physical_bytes(), 6 * kMiB);
  EXPECT_EQ(*sim->FreeBytes(), 58 * kMiB);
  EXPECT_EQ(sim->bytes_allocated(), 0u) << "plain allocations only";
  EXPECT_EQ(sim->mapped_bytes(), 0u);

  GPUALLOC_ASSERT_OK(sim->Map(*r, 2 * kMiB, *a));
  GPUALLOC_ASSERT_OK(sim->Map(*r + 2 * kMiB, 4 * kMiB, *b));
  EXPECT_EQ(sim->mapped_bytes(), 6 * kMiB);
  EXPECT_FALSE(sim->IsAccessible(*r, 2 * kMiB)) << "mapped, no access yet";
  GPUALLOC_ASSERT_OK(sim->SetAccess(*r + 2 * kMiB, 2 * kMiB));  // part of b
  EXPECT_TRUE(sim->IsAccessible(*r + 2 * kMiB, 2 * kMiB));
  EXPECT_TRUE(sim->IsAccessible(*r + 3 * kMiB, 1));
  EXPECT_FALSE(sim->IsAccessible(*r + 2 * kMiB, 4 * kMiB));
  GPUALLOC_ASSERT_OK(sim->SetAccess(*r, 6 * kMiB));  // both mappings
  EXPECT_TRUE(sim->IsAccessible(*r, 6 * kMiB));
  EXPECT_TRUE(sim->IsAccessible(*r + 1, 6 * kMiB - 1));
  EXPECT_FALSE(sim->IsAccessible(*r, 6 * kMiB + 1));
  EXPECT_FALSE(sim->IsAccessible(*r, 0)) << "an empty range";
  EXPECT_FALSE(sim->IsAccessible(*r - 1, 2));

  // Released while mapped: still physical memory, still accessible.
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(*a));
  EXPECT_EQ(sim->physical_bytes(), 6 * kMiB);
  EXPECT_TRUE(sim->IsAccessible(*r, 2 * kMiB));
  GPUALLOC_ASSERT_OK(sim->Unmap(*r, 2 * kMiB));
  EXPECT_EQ(sim->physical_bytes(), 4 * kMiB) << "a's last mapping went";
  EXPECT_EQ(sim->mapped_bytes(), 4 * kMiB);
  EXPECT_FALSE(sim->IsAccessible(*r, 1));
  EXPECT_TRUE(sim->IsAccessible(*r + 2 * kMiB, 4 * kMiB));
  GPUALLOC_ASSERT_OK(sim->Unmap(*r + 2 * kMiB, 4 * kMiB));
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_EQ(sim->physical_bytes(), 4 * kMiB) << "b is not released";
  EXPECT_FALSE(sim->IsAccessible(*r + 2 * kMiB, 1));
  // Mapped again, access must be set again.
  GPUALLOC_ASSERT_OK(sim->Map(*r + 8 * kMiB, 4 * kMiB, *b));
  EXPECT_FALSE(sim->IsAccessible(*r + 8 * kMiB, 4 * kMiB));
  GPUALLOC_ASSERT_OK(sim->Unmap(*r + 8 * kMiB, 4 * kMiB));
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(*b));
  EXPECT_EQ(sim->physical_bytes(), 0u);
  GPUALLOC_ASSERT_OK(sim->FreeAddress(*r, 16 * kMiB));
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
  EXPECT_EQ(*sim->FreeBytes(), 64 * kMiB);

  // Plain allocations are not virtual memory.
  absl::StatusOr<DeviceAddress> plain = sim->Allocate(kMiB);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(sim->IsAccessible(*plain, kMiB));
}

TEST(SimVmmTest, AHandleMayBeMappedTwice) {
  auto sim = Create(Profile("h100", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  const VmmRange r = MapNew(*sim, 8 * kMiB, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->Map(r.address + 4 * kMiB, 2 * kMiB, r.handle));
  GPUALLOC_ASSERT_OK(sim->SetAccess(r.address + 4 * kMiB, 2 * kMiB));
  EXPECT_EQ(sim->mapped_bytes(), 4 * kMiB);
  EXPECT_EQ(sim->physical_bytes(), 2 * kMiB);
  // Both views show the same memory.
  auto* first = reinterpret_cast<unsigned char*>(r.address);
  auto* second = reinterpret_cast<unsigned char*>(r.address + 4 * kMiB);
  first[12345] = 0xa7;
  EXPECT_EQ(second[12345], 0xa7);
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(r.handle));
  GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 2 * kMiB));
  EXPECT_EQ(sim->physical_bytes(), 2 * kMiB) << "one mapping is left";
  EXPECT_EQ(second[12345], 0xa7);
  GPUALLOC_ASSERT_OK(sim->Unmap(r.address + 4 * kMiB, 2 * kMiB));
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(*sim->FreeBytes(), 64 * kMiB);
}

// Each broken rule is InvalidArgument naming the rule and the values.
TEST(SimVmmTest, RuleViolationsNameTheRuleAndTheValues) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> r = sim->ReserveAddress(8 * kMiB, 0);
  absl::StatusOr<PhysicalHandle> h = sim->CreatePhysical(4 * kMiB);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(h.ok());
  const DeviceAddress a = *r;
  auto hex = [](std::uint64_t x) { return absl::StrFormat("%#x", x); };
  struct Case {
    std::string what;
    absl::Status status;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {"reserve size",
       sim->ReserveAddress(kMiB, 0).status(),
       {"ReserveAddress", "1048576", "minimum granularity", "2097152"}},
      {"reserve alignment",
       sim->ReserveAddress(2 * kMiB, 6 * kMiB).status(),
       {"alignment", "power of two"}},
      {"reserve small alignment",
       sim->ReserveAddress(2 * kMiB, kMiB).status(),
       {"alignment", "minimum granularity"}},
      {"create size",
       sim->CreatePhysical(3 * kMiB).status(),
       {"CreatePhysical", "3145728", "minimum granularity"}},
      {"map address",
       sim->Map(a + kMiB, 4 * kMiB, *h),
       {"Map", hex(a + kMiB), "not a multiple"}},
      {"map unknown handle",
       sim->Map(a, 4 * kMiB, 99),
       {"handle 99", "no such physical handle"}},
      {"map part", sim->Map(a, 2 * kMiB, *h), {"whole handle", "4194304"}},
      {"map outside",
       sim->Map(a + 6 * kMiB, 4 * kMiB, *h),
       {"past the end of the reservation", hex(a), hex(a + 8 * kMiB)}},
      {"map nowhere",
       sim->Map(2 * kMiB, 4 * kMiB, *h),
       {"not inside a reservation", hex(2 * kMiB)}},
      {"unmap nothing",
       sim->Unmap(a, 2 * kMiB),
       {"Unmap", "nothing is mapped", hex(a)}},
      {"set access unmapped",
       sim->SetAccess(a, 2 * kMiB),
       {"SetAccess", "not mapped", hex(a)}},
      {"release unknown",
       sim->ReleasePhysical(77),
       {"handle 77", "no such physical handle"}},
      {"free inside",
       sim->FreeAddress(a + 2 * kMiB, 6 * kMiB),
       {"FreeAddress", "inside the reservation", "whole reservation"}},
      {"free part",
       sim->FreeAddress(a, 2 * kMiB),
       {"8388608", "whole reservation"}},
      {"free wrap",
       sim->FreeAddress(~std::uint64_t{0} - 2 * kMiB + 1, 4 * kMiB),
       {"wraps"}},
  };
  GPUALLOC_ASSERT_OK(sim->Map(a + 2 * kMiB, 4 * kMiB, *h));
  cases.push_back({"map over",
                   sim->Map(a, 4 * kMiB, *h),
                   {"overlaps the mapping", hex(a + 2 * kMiB)}});
  cases.push_back({"unmap partial",
                   sim->Unmap(a + 2 * kMiB, 2 * kMiB),
                   {"ends inside the mapping", "no partial unmap"}});
  cases.push_back({"unmap interior",
                   sim->Unmap(a + 4 * kMiB, 2 * kMiB),
                   {"inside the mapping", "no partial unmap"}});
  cases.push_back({"unmap hole",
                   sim->Unmap(a + 2 * kMiB, 6 * kMiB),
                   {"not mapped", hex(a + 6 * kMiB), hex(a + 8 * kMiB)}});
  cases.push_back({"set access hole",
                   sim->SetAccess(a, 6 * kMiB),
                   {"not mapped", hex(a), hex(a + 2 * kMiB)}});
  cases.push_back({"free mapped",
                   sim->FreeAddress(a, 8 * kMiB),
                   {"still in it", "unmap it first"}});
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(*h));
  cases.push_back({"release twice",
                   sim->ReleasePhysical(*h),
                   {"already released", "mapping"}});
  cases.push_back(
      {"map released", sim->Map(a + 6 * kMiB, 4 * kMiB, *h), {"released"}});
  for (const Case& c : cases) {
    EXPECT_TRUE(absl::IsInvalidArgument(c.status))
        << c.what << ": " << c.status;
    for (const std::string& m : c.mentions) {
      EXPECT_TRUE(absl::StrContains(c.status.message(), m))
          << c.what << ": '" << m << "' not in: " << c.status;
    }
    EXPECT_TRUE(absl::StrContains(c.status.message(), sim->info().name))
        << c.what;
  }
  EXPECT_EQ(sim->mapped_bytes(), 4 * kMiB);
  EXPECT_EQ(sim->physical_bytes(), 4 * kMiB);
  EXPECT_EQ(sim->reserved_address_bytes(), 8 * kMiB);
}

TEST(SimVmmTest, CreatePhysicalOutOfMemoryGivesTheNumbers) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->Allocate(16 * kMiB));
  GPUALLOC_ASSERT_OK(sim->CreatePhysical(32 * kMiB));
  const absl::StatusOr<PhysicalHandle> more = sim->CreatePhysical(32 * kMiB);
  ASSERT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  for (std::uint64_t n : {32 * kMiB, 48 * kMiB, 64 * kMiB, 16 * kMiB}) {
    EXPECT_TRUE(absl::StrContains(more.status().message(), absl::StrCat(n)))
        << n << ": " << more.status();
  }
  EXPECT_EQ(sim->physical_bytes(), 32 * kMiB);
  // Plain allocations see the handle's memory as taken, and name it.
  const absl::StatusOr<DeviceAddress> plain = sim->Allocate(32 * kMiB);
  ASSERT_TRUE(absl::IsResourceExhausted(plain.status()));
  EXPECT_TRUE(absl::StrContains(plain.status().message(),
                                "33554432 by physical memory handles"))
      << plain.status();
  GPUALLOC_EXPECT_OK(sim->CreatePhysical(16 * kMiB));
}

TEST(SimVmmTest, FakeReservationsAreDeterministicDisjointAndNeverReused) {
  auto x = Create(Profile("h200"));
  auto y = Create(Profile("h200"));
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  std::vector<std::pair<DeviceAddress, std::uint64_t>> ranges;
  for (std::uint64_t size : {2 * kMiB, 64 * kMiB, 4 * kMiB}) {
    absl::StatusOr<DeviceAddress> plain_x = x->Allocate(size);
    absl::StatusOr<DeviceAddress> plain_y = y->Allocate(size);
    absl::StatusOr<DeviceAddress> reserved_x =
        x->ReserveAddress(size, 32 * kMiB);
    absl::StatusOr<DeviceAddress> reserved_y =
        y->ReserveAddress(size, 32 * kMiB);
    ASSERT_TRUE(plain_x.ok() && reserved_x.ok());
    ASSERT_TRUE(plain_y.ok() && reserved_y.ok());
    EXPECT_EQ(*plain_x, *plain_y);
    EXPECT_EQ(*reserved_x, *reserved_y) << "same calls, same addresses";
    EXPECT_EQ(*reserved_x % (32 * kMiB), 0u);
    ranges.emplace_back(*plain_x, size);
    ranges.emplace_back(*reserved_x, size);
  }
  // Freed and reserved again: a new address.
  const auto [last, last_size] = ranges.back();
  GPUALLOC_ASSERT_OK(x->FreeAddress(last, last_size));
  absl::StatusOr<DeviceAddress> again = x->ReserveAddress(last_size, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, last);
  ranges.emplace_back(*again, last_size);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LT(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first)
        << "ranges touch or overlap at " << ranges[i].first;
  }
  // All inside ordinal 0's window.
  EXPECT_GE(ranges.front().first, 0x7f0000000000u);
  EXPECT_LE(ranges.back().first + ranges.back().second,
            0x7f0000000000u + (std::uint64_t{1} << 48));
}

TEST(SimVmmTest, FakeAddressSpaceIsSharedWithPlainAllocations) {
  auto sim = Create(Profile("h100", std::uint64_t{1} << 60));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> half =
      sim->ReserveAddress(std::uint64_t{1} << 47, 0);
  ASSERT_TRUE(half.ok()) << half.status();
  const absl::StatusOr<DeviceAddress> plain =
      sim->Allocate(std::uint64_t{1} << 47);
  EXPECT_TRUE(absl::IsResourceExhausted(plain.status())) << plain.status();
  const absl::StatusOr<DeviceAddress> more =
      sim->ReserveAddress(std::uint64_t{1} << 47, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_TRUE(absl::StrContains(more.status().message(), "address space"))
      << more.status();
  EXPECT_EQ(sim->reserved_address_bytes(), std::uint64_t{1} << 47);
  GPUALLOC_EXPECT_OK(sim->Allocate(kGiB));
  GPUALLOC_EXPECT_OK(sim->ReserveAddress(kGiB, 0));
}

TEST(SimVmmTest, HostBackedReservationsAreRealMappings) {
  auto sim = Create(Profile("mi300x", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  absl::StatusOr<DeviceAddress> r = sim->ReserveAddress(8 * kMiB, 16 * kMiB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r % (16 * kMiB), 0u);
  EXPECT_TRUE(IsMapped(*r));
  EXPECT_TRUE(IsMapped(*r + 8 * kMiB - 1));
  // Memory of an AMD-sized 4 KiB granule, mapped in the middle.
  absl::StatusOr<PhysicalHandle> h = sim->CreatePhysical(4 * kKiB);
  ASSERT_TRUE(h.ok());
  GPUALLOC_ASSERT_OK(sim->Map(*r + 12 * kKiB, 4 * kKiB, *h));
  GPUALLOC_ASSERT_OK(sim->SetAccess(*r + 12 * kKiB, 4 * kKiB));
  std::memset(reinterpret_cast<void*>(*r + 12 * kKiB), 0x11, 4 * kKiB);
  GPUALLOC_ASSERT_OK(sim->Unmap(*r + 12 * kKiB, 4 * kKiB));
  EXPECT_TRUE(IsMapped(*r + 12 * kKiB)) << "back to reserved";
  GPUALLOC_ASSERT_OK(sim->ReleasePhysical(*h));
  GPUALLOC_ASSERT_OK(sim->FreeAddress(*r, 8 * kMiB));
  EXPECT_FALSE(IsMapped(*r));
  EXPECT_FALSE(IsMapped(*r + 8 * kMiB - 1));
}

TEST(SimVmmTest, HostBackedReserveBeyondTheHostIsResourceExhausted) {
  auto sim = Create(Profile("h100", kGiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  const absl::StatusOr<DeviceAddress> r =
      sim->ReserveAddress(std::uint64_t{1} << 62, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
}

TEST(SimVmmTest, DestructorUnmapsAndClosesEverything) {
  auto sim = Create(Profile("h100", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  const VmmRange r = MapNew(*sim, 8 * kMiB, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->CreatePhysical(2 * kMiB));  // never mapped
  EXPECT_TRUE(IsMapped(r.address));
  sim.reset();
  EXPECT_FALSE(IsMapped(r.address));
  EXPECT_FALSE(IsMapped(r.address + 8 * kMiB - 1));
}

TEST(SimVmmDeathTest, HostBackedMemoryFaultsWithoutAccessAndAfterUnmap) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto sim = Create(Profile("h100", 64 * kMiB, SimMemory::kHostBacked));
  ASSERT_NE(sim, nullptr);
  const VmmRange r = MapNew(*sim, 8 * kMiB, 2 * kMiB);
  volatile unsigned char* bytes = reinterpret_cast<unsigned char*>(r.address);
  bytes[2 * kMiB - 1] = 1;
  EXPECT_DEATH(bytes[2 * kMiB] = 1, "") << "reserved, not mapped";
  absl::StatusOr<PhysicalHandle> h = sim->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(h.ok());
  GPUALLOC_ASSERT_OK(sim->Map(r.address + 4 * kMiB, 2 * kMiB, *h));
  EXPECT_DEATH(bytes[4 * kMiB] = 1, "") << "mapped, no access";
  GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 2 * kMiB));
  EXPECT_DEATH(bytes[0] = 1, "") << "unmapped";
}

// --- Virtual memory and the work/hazard detector ----------------------------

TEST(SimVmmHazardTest, UseOfInaccessibleMemoryIsAnAccessViolation) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  const Stream s(7);
  absl::StatusOr<DeviceAddress> r = sim->ReserveAddress(8 * kMiB, 0);
  absl::StatusOr<PhysicalHandle> a = sim->CreatePhysical(2 * kMiB);
  absl::StatusOr<PhysicalHandle> b = sim->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(r.ok() && a.ok() && b.ok());
  sim->Use(s, *r, 256);  // reserved only
  EXPECT_EQ(sim->access_violations(), 1u);
  GPUALLOC_ASSERT_OK(sim->Map(*r, 2 * kMiB, *a));
  GPUALLOC_ASSERT_OK(sim->Map(*r + 2 * kMiB, 2 * kMiB, *b));
  sim->Use(s, *r, 256);  // mapped, no access
  EXPECT_EQ(sim->access_violations(), 2u);
  GPUALLOC_ASSERT_OK(sim->SetAccess(*r, 4 * kMiB));
  sim->Use(s, *r + 2 * kMiB - 128, 256);  // across two mappings
  sim->Use(s, *r, 4 * kMiB);
  EXPECT_EQ(sim->access_violations(), 2u);
  sim->Use(s, *r + 4 * kMiB - 128, 256);  // runs off the end
  EXPECT_EQ(sim->access_violations(), 3u);

  // Plain allocations and pool blocks are usable; freed ones are not.
  absl::StatusOr<DeviceAddress> plain = sim->Allocate(1000);
  absl::StatusOr<DeviceAddress> pooled = sim->PoolAllocate(1000, s);
  ASSERT_TRUE(plain.ok() && pooled.ok());
  sim->Use(s, *plain, 1000);
  sim->Use(s, *pooled, 1000);
  EXPECT_EQ(sim->access_violations(), 3u);
  GPUALLOC_ASSERT_OK(sim->Free(*plain));
  sim->Use(s, *plain, 1000);
  sim->Use(s, 0x1000, 16);
  EXPECT_EQ(sim->access_violations(), 5u);
  EXPECT_EQ(sim->hazards(), 0u) << "counted apart from stream hazards";

  const std::vector<SimHazard> log = sim->access_violation_log();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0].kind, SimHazardKind::kInaccessible);
  EXPECT_EQ(log[0].stream, s);
  EXPECT_EQ(log[0].address, *r);
  EXPECT_EQ(log[0].bytes, 256u);
  EXPECT_TRUE(absl::StrContains(log[0].ToString(), "access violation"))
      << log[0].ToString();
  EXPECT_EQ(log[4].address, 0x1000u);
}

TEST(SimVmmHazardTest, UnmapWhileWorkStillUsesTheMemoryIsAHazard) {
  for (SimClock clock : {SimClock::kManual, SimClock::kModeled}) {
    SimOptions o = Profile("h100", 64 * kMiB);
    o.clock = clock;
    auto sim = Create(o);
    ASSERT_NE(sim, nullptr);
    const Stream s(3);
    const VmmRange r = MapNew(*sim, 8 * kMiB, 4 * kMiB);
    sim->Use(s, r.address + kMiB, 4096);
    GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 4 * kMiB));
    ASSERT_EQ(sim->hazards(), 1u);
    const std::vector<SimHazard> log = sim->hazard_log();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].kind, SimHazardKind::kUnmapInUse);
    EXPECT_EQ(log[0].other, s);
    EXPECT_EQ(log[0].address, r.address + kMiB);
    EXPECT_EQ(log[0].bytes, 4096u);
    EXPECT_TRUE(absl::StrContains(log[0].ToString(), "Unmap"))
        << log[0].ToString();
    EXPECT_EQ(sim->access_violations(), 0u);

    // After the work completes, unmapping is fine; work elsewhere does not
    // matter.
    GPUALLOC_ASSERT_OK(sim->Map(r.address, 4 * kMiB, r.handle));
    GPUALLOC_ASSERT_OK(sim->SetAccess(r.address, 4 * kMiB));
    sim->Use(s, r.address, 4 * kMiB);
    sim->CompleteStream(s);
    absl::StatusOr<DeviceAddress> plain = sim->Allocate(kMiB);
    ASSERT_TRUE(plain.ok());
    sim->Use(Stream(4), *plain, kMiB);
    GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 4 * kMiB));
    EXPECT_EQ(sim->hazards(), 1u);
    EXPECT_EQ(sim->access_violations(), 0u);
  }
}

TEST(SimVmmHazardTest, UnmapCountsEachStreamStillUsingTheRange) {
  auto sim = Create(Profile("h100", 64 * kMiB));
  ASSERT_NE(sim, nullptr);
  const VmmRange r = MapNew(*sim, 8 * kMiB, 2 * kMiB);
  sim->Use(Stream(1), r.address, 256);
  sim->Use(Stream(2), r.address + kMiB, 256);
  sim->Use(Stream(5), r.address + kMiB, 256);
  sim->CompleteStream(Stream(5));
  GPUALLOC_ASSERT_OK(sim->Unmap(r.address, 2 * kMiB));
  EXPECT_EQ(sim->hazards(), 2u + 1u)
      << "streams 1 and 2, plus 5 racing 2 on the same bytes";
}

}  // namespace
}  // namespace gpualloc::testing
