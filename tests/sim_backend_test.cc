// tests/sim_backend_test.cc: the simulated device beyond the conformance suite:
// option validation, placement, accounting, fault injection, counters and the
// two memory kinds.

#include "gpualloc/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpualloc/arch.h"
#include "gpualloc/backend.h"
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

}  // namespace
}  // namespace gpualloc::testing
