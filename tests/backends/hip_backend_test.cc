// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_backend_test.cc: the HIP backend's own logic, driven
// through the fake runtime (tests/backends/hip_fake_runtime.h): start-up
// failures, capabilities as each ROCm release behaves, the hipMemAllocationProp
// layout, fragment placement, memory kinds, virtual-memory rules, error
// mapping, profiles, and the way in through the registry.

#include "backends/hip/hip_backend.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "backends/hip/hip_api.h"
#include "gmock/gmock.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_walk.h"
#include "tests/backends/hip_fake_runtime.h"

namespace gpualloc::hip {
namespace {

using ::testing::ElementsAre;
using testing::FakeHipConfig;
using testing::FakeHipRuntime;
using ::testing::HasSubstr;
using testing::kFakeGiB;
using testing::kFakeKiB;
using testing::kFakeMiB;

constexpr std::uint64_t kKiB = kFakeKiB;
constexpr std::uint64_t kMiB = kFakeMiB;

absl::StatusOr<std::shared_ptr<HipBackend>> Create(
    const FakeHipRuntime& fake, MemoryKind kind = MemoryKind::kCoarse,
    int ordinal = 0) {
  HipBackendOptions options;
  options.ordinal = ordinal;
  options.memory_kind = kind;
  return HipBackend::Create(fake.api(), options);
}

std::string Notes(const HipBackend& b) {
  return absl::StrJoin(b.notes(), "\n");
}

// ------------------------------------------------------------- start-up

TEST(HipBackendTest, InitFailureIsUnavailableNamingLibraryAndError) {
  for (hipError_t error :
       {hipErrorNoDevice, hipErrorInsufficientDriver, hipErrorInvalidValue}) {
    FakeHipConfig config;
    config.init_error = error;
    config.library = "libamdhip64.so.6";
    FakeHipRuntime fake(config);
    auto backend = Create(fake);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable)
        << backend.status();
    EXPECT_THAT(backend.status().message(), HasSubstr("libamdhip64.so.6"));
    EXPECT_THAT(backend.status().message(), HasSubstr("hipInit(0) failed"));
    EXPECT_THAT(backend.status().message(),
                HasSubstr(absl::StrCat("(", static_cast<int>(error), ")")));
  }
}

TEST(HipBackendTest, NoSuchDeviceIsUnavailableANegativeOrdinalInvalid) {
  FakeHipConfig none;
  none.device_count = 0;
  {
    FakeHipRuntime fake(none);
    auto backend = Create(fake);
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(backend.status().message(), HasSubstr("no HIP device"));
    EXPECT_EQ(HipDeviceCountWith(*fake.api()).status().code(),
              absl::StatusCode::kUnavailable);
  }
  FakeHipConfig two;
  two.device_count = 2;
  FakeHipRuntime fake(two);
  EXPECT_EQ(*HipDeviceCountWith(*fake.api()), 2);
  // As the CUDA backend says: the ordinal is well formed, the device absent.
  auto far = Create(fake, MemoryKind::kCoarse, 2);
  EXPECT_EQ(far.status().code(), absl::StatusCode::kUnavailable)
      << far.status();
  EXPECT_THAT(far.status().message(),
              HasSubstr("HIP device 2 does not exist: fake HIP runtime "
                        "reports 2 devices"));
  auto negative = Create(fake, MemoryKind::kCoarse, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto second = Create(fake, MemoryKind::kCoarse, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->info().ordinal, 1);
}

TEST(HipBackendTest, InfoIsAmdsNumbers) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const DeviceInfo& d = (*backend)->info();
  EXPECT_EQ(d.backend, "hip");
  EXPECT_EQ(d.vendor, Vendor::kAmd);
  EXPECT_EQ(d.name, "AMD Instinct MI300X");
  EXPECT_EQ(d.arch_id, "gfx942");  // target features stripped
  EXPECT_EQ(d.total_bytes, 192 * kFakeGiB);
  EXPECT_EQ(d.allocation_alignment, 4 * kKiB);
  EXPECT_THAT(d.page_sizes, ElementsAre(4 * kKiB, 2 * kMiB));
  EXPECT_EQ(d.min_granularity, 4 * kKiB);
  EXPECT_EQ(d.recommended_granularity, 2 * kMiB);
  EXPECT_THAT(d.driver_version, HasSubstr("6.1.40091"));
  EXPECT_THAT(d.driver_version, HasSubstr("fake HIP runtime"));
  EXPECT_EQ((*backend)->profile().name, "mi300x");
  EXPECT_EQ((*backend)->fragment_bytes(), 2 * kMiB);
  EXPECT_THAT(Notes(**backend),
              HasSubstr("gcnArchName \"gfx942:sramecc+:xnack-\""));
}

TEST(HipBackendTest, ProfileFromGcnArchName) {
  struct Case {
    std::string arch;
    std::uint64_t total;
    std::string profile;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"gfx90a:sramecc+:xnack-", 64 * kFakeGiB, "mi250x", "processor gfx90a"},
      {"gfx90a", 64 * kFakeGiB, "mi250x", "processor gfx90a"},
      {"gfx942:sramecc+:xnack-", 192 * kFakeGiB, "mi300x", "processor gfx942"},
      {"gfx1100", 48 * kFakeGiB, "generic-amd", "not in the profile table"},
      {"", 16 * kFakeGiB, "generic-amd", "did not report gcnArchName"},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(t.arch);
    std::string why;
    const ArchProfile& p = ChooseAmdProfile(t.arch, t.total, &why);
    EXPECT_EQ(p.name, t.profile);
    EXPECT_THAT(why, HasSubstr(t.why));
  }
}

TEST(HipBackendTest, WithoutDevicePropertiesTheNameAndMemoryStillCome) {
  FakeHipConfig config;
  config.has_device_properties = false;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->info().name, "AMD Instinct MI300X");
  EXPECT_EQ((*backend)->info().total_bytes, 192 * kFakeGiB);
  EXPECT_EQ((*backend)->profile().name, "generic-amd");
  EXPECT_THAT(Notes(**backend), HasSubstr("no hipGetDeviceProperties"));
}

// ---------------------------------------------------- capabilities by ROCm

TEST(HipBackendTest, Rocm52VirtualMemoryIsOffTheAttributeIsUnknown) {
  FakeHipRuntime fake(testing::Rocm52());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.virtual_memory);
  EXPECT_THAT(Notes(**backend), HasSubstr("virtual_memory off"));
  EXPECT_THAT(Notes(**backend), HasSubstr("hipErrorInvalidValue"));
  EXPECT_TRUE(
      absl::IsUnimplemented((*backend)->ReserveAddress(2 * kMiB, 0).status()));
}

TEST(HipBackendTest, Rocm52ReserveIsANoOpEvenWhenTheAttributeSaysYes) {
  FakeHipConfig config = testing::Rocm52();
  config.vmm_attribute_error = hipSuccess;
  config.vmm_attribute = 1;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.virtual_memory);
  EXPECT_EQ(fake.CountCalls("hipMemAddressReserve"), 1);
  EXPECT_EQ(fake.CountCalls("hipMemAddressFree"), 0);
  EXPECT_THAT(Notes(**backend), HasSubstr("success with a null address"));
  EXPECT_THAT(Notes(**backend), HasSubstr("5.2.21153"));
}

TEST(HipBackendTest, Rocm53To60ReservationIsNull) {
  for (const FakeHipConfig& config : {testing::Rocm57(), testing::Rocm60()}) {
    FakeHipRuntime fake(config);
    auto backend = Create(fake);
    ASSERT_TRUE(backend.ok()) << backend.status();
    SCOPED_TRACE(Notes(**backend));
    EXPECT_FALSE((*backend)->info().capabilities.virtual_memory);
    EXPECT_THAT(Notes(**backend), HasSubstr("success with a null address"));
    EXPECT_THAT(Notes(**backend), HasSubstr("works from 6.1"));
    EXPECT_TRUE((*backend)->info().capabilities.stream_ordered_pools);
  }
}

TEST(HipBackendTest, Rocm61VirtualMemoryIsOnWithTheRuntimesGranularity) {
  FakeHipConfig config = testing::Rocm61();
  config.recommended_granularity = 4 * kMiB;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  SCOPED_TRACE(Notes(**backend));
  EXPECT_TRUE((*backend)->info().capabilities.virtual_memory);
  EXPECT_EQ((*backend)->info().min_granularity, 4 * kKiB);
  EXPECT_EQ((*backend)->info().recommended_granularity, 4 * kMiB);
  // The probe reservation went back.
  EXPECT_EQ(fake.CountCalls("hipMemAddressReserve"), 1);
  EXPECT_EQ(fake.CountCalls("hipMemAddressFree"), 1);
}

TEST(HipBackendTest, VirtualMemoryNeedsTheAttribute) {
  FakeHipConfig config = testing::Rocm61();
  config.vmm_attribute = 0;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.virtual_memory);
  EXPECT_EQ(fake.CountCalls("hipMemAddressReserve"), 0);
  EXPECT_THAT(Notes(**backend),
              HasSubstr("VirtualMemoryManagementSupported is 0"));
}

TEST(HipBackendTest, PoolsOnlyWhenTheAttributeSaysSo) {
  FakeHipConfig config = testing::Rocm61();
  config.pools_attribute = 0;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.stream_ordered_pools);
  EXPECT_TRUE((*backend)->info().capabilities.streams);
  EXPECT_TRUE(absl::IsUnimplemented((*backend)->ConfigurePool(PoolOptions{})));
  EXPECT_EQ(fake.CountCalls("hipMemPoolCreate"), 0);
}

// hipMemCreate reads hipMemAllocationProp in the runtime's layout; the
// backend passes the layout of the runtime it loaded.
TEST(HipBackendTest, AllocationPropLayoutFollowsTheRuntime) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->info().capabilities.virtual_memory);
  auto handle = (*backend)->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE((*backend)->ReleasePhysical(*handle).ok());

  const HipAllocationProp prop(0, 60140091);
  EXPECT_EQ(prop.mirrored(), !kHeadersHaveNewAllocationPropLayout);
  const HipAllocationProp old(0, 50221153);
  EXPECT_FALSE(old.mirrored());
  if (!kHeadersHaveNewAllocationPropLayout) {
    // The headers' own (5.2) layout is what a 6.1 runtime cannot read.
    hipMemAllocationProp headers{};
    headers.type = hipMemAllocationTypePinned;
    headers.location.type = hipMemLocationTypeDevice;
    headers.location.id = 0;
    hipMemGenericAllocationHandle_t h = nullptr;
    EXPECT_EQ(fake.api()->MemCreate(&h, 2 * kMiB, &headers, 0),
              hipErrorInvalidValue);
  }
}

// ------------------------------------------------------------------ pools

TEST(HipBackendTest, PoolNullPointerBefore60IsOutOfMemory) {
  struct Case {
    FakeHipConfig config;
    std::string why;
  };
  FakeHipConfig old = testing::Rocm52();
  old.total_bytes = 64 * kMiB;
  FakeHipConfig now = testing::Rocm61();
  now.total_bytes = 64 * kMiB;
  for (const Case& t : {Case{old, "success with a null pointer"},
                        Case{now, "hipErrorOutOfMemory"}}) {
    FakeHipRuntime fake(t.config);
    auto backend = Create(fake);
    ASSERT_TRUE(backend.ok()) << backend.status();
    ASSERT_TRUE((*backend)->ConfigurePool(PoolOptions{}).ok());
    auto first = (*backend)->PoolAllocate(48 * kMiB, Stream());
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = (*backend)->PoolAllocate(32 * kMiB, Stream());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted)
        << second.status();
    EXPECT_THAT(second.status().message(), HasSubstr(t.why));
    EXPECT_TRUE((*backend)->PoolFree(*first, Stream()).ok());
  }
}

TEST(HipBackendTest, ConfigurePoolSetsThresholdAndReuse) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->PoolAllocate(kMiB, Stream()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  PoolOptions options;
  options.release_threshold = 3 * kFakeGiB;
  options.reuse.opportunistic = false;
  ASSERT_TRUE((*backend)->ConfigurePool(options).ok());
  EXPECT_EQ(fake.pool_attribute(hipMemPoolAttrReleaseThreshold),
            static_cast<std::int64_t>(3 * kFakeGiB));
  EXPECT_EQ(fake.pool_attribute(hipMemPoolReuseAllowOpportunistic), 0);
  EXPECT_EQ(fake.pool_attribute(hipMemPoolReuseFollowEventDependencies), 1);
  EXPECT_EQ(fake.pool_attribute(hipMemPoolReuseAllowInternalDependencies), 1);
  EXPECT_EQ(fake.CountCalls("hipMemPoolCreate"), 1);
  ASSERT_TRUE((*backend)->ConfigurePool(options).ok());
  EXPECT_EQ(fake.CountCalls("hipMemPoolCreate"), 1);  // one pool
  EXPECT_TRUE(absl::IsInvalidArgument((*backend)->PoolFree(0x1234, Stream())));
}

// -------------------------------------------------- fragments and kinds

TEST(HipBackendTest, LargeAllocationsStartOnFragmentBoundaries) {
  FakeHipConfig config;
  config.misalign_large = true;
  FakeHipRuntime fake(config);
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  HipBackend& b = **backend;

  // Small: as asked, on a 4 KiB page.
  auto small = b.Allocate(64 * kKiB);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(*small % (4 * kKiB), 0u);
  EXPECT_EQ(fake.used_bytes(), 64 * kKiB);

  // Large: whole fragments, on a fragment boundary; the runtime's misaligned
  // block went back and a padded one stands behind the address.
  auto large = b.Allocate(3 * kMiB);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(*large % (2 * kMiB), 0u);
  EXPECT_EQ(fake.CountCalls("hipFree"), 1);
  EXPECT_EQ(fake.live_plain(), 2u);
  EXPECT_EQ(fake.used_bytes(), 64 * kKiB + 4 * kMiB + 2 * kMiB);

  ASSERT_TRUE(b.Free(*large).ok());
  ASSERT_TRUE(b.Free(*small).ok());
  EXPECT_EQ(fake.used_bytes(), 0u);
  EXPECT_EQ(fake.live_plain(), 0u);
}

TEST(HipBackendTest, LargeAllocationsRoundToWholeFragments) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto a = (*backend)->Allocate(2 * kMiB + 1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a % (2 * kMiB), 0u);
  EXPECT_EQ(fake.used_bytes(), 4 * kMiB);  // no padding needed
  EXPECT_EQ(fake.CountCalls("hipMalloc"), 1);
  EXPECT_TRUE((*backend)->Free(*a).ok());
}

TEST(HipBackendTest, MemoryKindSelectsTheAllocationCall) {
  {
    FakeHipRuntime fake(testing::Rocm61());
    auto backend = Create(fake, MemoryKind::kCoarse);
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto a = (*backend)->Allocate(kMiB);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(fake.CountCalls("hipMalloc"), 1);
    EXPECT_EQ(fake.CountCalls("hipExtMallocWithFlags"), 0);
    EXPECT_THAT(Notes(**backend), HasSubstr("coarse-grained"));
    EXPECT_TRUE((*backend)->Free(*a).ok());
  }
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake, MemoryKind::kFine);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->memory_kind(), MemoryKind::kFine);
  auto a = (*backend)->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(fake.CountCalls("hipMalloc"), 0);
  EXPECT_EQ(fake.CountCalls("hipExtMallocWithFlags"), 1);
  EXPECT_EQ(fake.plain_flags(*a), hipDeviceMallocFinegrained);
  EXPECT_THAT(Notes(**backend), HasSubstr("fine-grained"));
  EXPECT_TRUE((*backend)->Free(*a).ok());
}

// ---------------------------------------------------------- virtual memory

TEST(HipBackendTest, VirtualMemoryRulesAreCheckedBeforeTheRuntime) {
  FakeHipRuntime fake(testing::Rocm61());
  auto made = Create(fake);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  const std::uint64_t g = 2 * kMiB;
  EXPECT_TRUE(absl::IsInvalidArgument(b.ReserveAddress(1000, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(b.ReserveAddress(g, 3 * g).status()));
  auto base = b.ReserveAddress(4 * g, 0);
  ASSERT_TRUE(base.ok()) << base.status();
  auto h1 = b.CreatePhysical(g);
  auto h2 = b.CreatePhysical(2 * g);
  ASSERT_TRUE(h1.ok() && h2.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b.CreatePhysical(1000).status()));

  const int maps_before = fake.CountCalls("hipMemMap");
  // Part of a handle, outside the reservation, misaligned, unknown handle.
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base, g / 2, *h1)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base + 4 * g, g, *h1)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base + 3 * g, 2 * g, *h2)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base + 1, g, *h1)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base, g, 0x77)));
  EXPECT_EQ(fake.CountCalls("hipMemMap"), maps_before);

  ASSERT_TRUE(b.Map(*base, g, *h1).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b.Map(*base, 2 * g, *h2)));  // overlap
  ASSERT_TRUE(b.Map(*base + g, 2 * g, *h2).ok());
  // Access over both mappings: one call per mapping; over a hole: refused.
  ASSERT_TRUE(b.SetAccess(*base, 3 * g).ok());
  EXPECT_EQ(fake.set_access_calls(), 2);
  EXPECT_TRUE(absl::IsInvalidArgument(b.SetAccess(*base, 4 * g)));
  // Handles may go while mapped; the memory stays until unmapped.
  ASSERT_TRUE(b.ReleasePhysical(*h1).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b.ReleasePhysical(*h1)));
  EXPECT_EQ(fake.used_bytes(), 3 * g);
  // No partial unmap; no freeing of a range with mappings in it.
  EXPECT_TRUE(absl::IsInvalidArgument(b.Unmap(*base + g, g)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.Unmap(*base, 4 * g)));
  EXPECT_TRUE(absl::IsInvalidArgument(b.FreeAddress(*base, 4 * g)));
  ASSERT_TRUE(b.Unmap(*base, 3 * g).ok());
  EXPECT_EQ(fake.live_mappings(), 0u);
  EXPECT_EQ(fake.used_bytes(), 2 * g);  // h2 is still held
  ASSERT_TRUE(b.ReleasePhysical(*h2).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b.FreeAddress(*base, 2 * g)));
  ASSERT_TRUE(b.FreeAddress(*base, 4 * g).ok());
  EXPECT_EQ(fake.used_bytes(), 0u);
}

// ----------------------------------------------------------- error mapping

TEST(HipBackendTest, ErrorMapping) {
  FakeHipRuntime fake(testing::Rocm61());
  const std::shared_ptr<const HipApi> api = fake.api();
  struct Case {
    hipError_t error;
    absl::StatusCode code;
    std::string text;
  };
  const std::vector<Case> cases = {
      {hipErrorOutOfMemory, absl::StatusCode::kResourceExhausted,
       "hipErrorOutOfMemory (2)"},
      {hipErrorInvalidValue, absl::StatusCode::kInvalidArgument,
       "hipErrorInvalidValue (1)"},
      {hipErrorNoDevice, absl::StatusCode::kUnavailable,
       "hipErrorNoDevice (100)"},
      {hipErrorInsufficientDriver, absl::StatusCode::kUnavailable,
       "hipErrorInsufficientDriver (35)"},
      {hipErrorNotInitialized, absl::StatusCode::kUnavailable,
       "hipErrorNotInitialized (3)"},
      {hipErrorNotSupported, absl::StatusCode::kUnimplemented,
       "hipErrorNotSupported (801)"},
      {hipErrorLaunchFailure, absl::StatusCode::kInternal,
       "hipErrorLaunchFailure (719)"},
  };
  for (const Case& t : cases) {
    const absl::Status s =
        HipErrorStatus(*api, t.error, "hipMemMap(0x1000, 2)");
    EXPECT_EQ(s.code(), t.code) << s;
    EXPECT_EQ(s.message(), "hipMemMap(0x1000, 2) failed: " + t.text) << s;
  }
}

TEST(HipBackendTest, RuntimeErrorsComeBackMappedAndNamed) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  fake.FailNext("hipMalloc", hipErrorOutOfMemory);
  auto a = (*backend)->Allocate(4096);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a.status().message(), HasSubstr("out of memory for 4096 bytes"));
  EXPECT_THAT(a.status().message(),
              HasSubstr("hipMalloc(4096) failed: hipErrorOutOfMemory (2)"));
  fake.FailNext("hipMalloc", hipErrorLaunchFailure);
  a = (*backend)->Allocate(4096);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(a.status().message(), HasSubstr("hipErrorLaunchFailure"));
  fake.FailNext("hipEventCreateWithFlags", hipErrorNotSupported);
  EXPECT_EQ((*backend)->CreateEvent().status().code(),
            absl::StatusCode::kUnimplemented);
  // Nothing leaked, nothing recorded.
  EXPECT_EQ(fake.live_plain(), 0u);
}

TEST(HipBackendTest, StaleEventsNeverReachTheRuntime) {
  FakeHipRuntime fake(testing::Rocm61());
  auto backend = Create(fake);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto event = (*backend)->CreateEvent();
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*backend)->DestroyEvent(*event).ok());
  const int queries = fake.CountCalls("hipEventQuery");
  EXPECT_TRUE(absl::IsInvalidArgument((*backend)->QueryEvent(*event).status()));
  EXPECT_EQ(fake.CountCalls("hipEventQuery"), queries);
}

// ---------------------------------------------------------- graph capture

TEST(HipBackendTest, CaptureStatusAndModeTranslate) {
  FakeHipRuntime fake(testing::Rocm61());
  auto made = Create(fake);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  EXPECT_TRUE(b.info().capabilities.graph_capture);
  fake.SetCaptureStatus(0x10, hipStreamCaptureStatusActive);
  fake.SetCaptureStatus(0x20, hipStreamCaptureStatusInvalidated);
  fake.SetCaptureStatus(0x30, 7);  // no hipStreamCaptureStatus
  for (const auto& [stream, capturing] :
       std::vector<std::pair<std::uintptr_t, bool>>{
           {0, false}, {0x10, true}, {0x20, true}, {0x40, false}}) {
    absl::StatusOr<bool> answer = b.IsCapturing(Stream(stream));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, capturing) << stream;
  }
  absl::StatusOr<bool> unknown = b.IsCapturing(Stream(0x30));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(unknown.status().message(), HasSubstr("capture status 7"));
  fake.FailNext("hipStreamIsCapturing", hipErrorInvalidValue);
  absl::StatusOr<bool> failed = b.IsCapturing(Stream(0x10));
  EXPECT_TRUE(absl::IsInvalidArgument(failed.status())) << failed.status();
  EXPECT_THAT(failed.status().message(),
              HasSubstr("hipStreamIsCapturing(stream 0x10) failed: "
                        "hipErrorInvalidValue"));

  // The runtime's mode goes round: each exchange answers the one before.
  const std::vector<std::pair<CaptureMode, CaptureMode>> exchanges = {
      {CaptureMode::kRelaxed, CaptureMode::kGlobal},
      {CaptureMode::kThreadLocal, CaptureMode::kRelaxed},
      {CaptureMode::kGlobal, CaptureMode::kThreadLocal}};
  for (const auto& [set, previous] : exchanges) {
    absl::StatusOr<CaptureMode> answer = b.ExchangeCaptureMode(set);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, previous);
  }
  fake.FailNext("hipThreadExchangeStreamCaptureMode", hipErrorNotSupported);
  EXPECT_TRUE(absl::IsUnimplemented(
      b.ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
}

TEST(HipBackendTest, WithoutTheCaptureEntryPointsCaptureIsOff) {
  FakeHipConfig config = testing::Rocm61();
  config.has_capture = false;
  FakeHipRuntime fake(config);
  auto made = Create(fake);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  EXPECT_FALSE(b.info().capabilities.graph_capture);
  EXPECT_THAT(Notes(b), HasSubstr("graph_capture off"));
  EXPECT_TRUE(absl::IsUnimplemented(b.IsCapturing(Stream()).status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      b.ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
  EXPECT_EQ(fake.CountCalls("hipStreamIsCapturing"), 0);
}

// ------------------------------------------- copies between device and host

TEST(HipBackendTest, HostCopiesUseHipMemcpyOnTheBackendsDevice) {
  FakeHipConfig config = testing::Rocm61();
  config.device_count = 2;
  FakeHipRuntime fake(config);
  auto made = Create(fake, MemoryKind::kCoarse, /*ordinal=*/1);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  EXPECT_TRUE(b.info().capabilities.host_copy);
  absl::StatusOr<DeviceAddress> a = b.Allocate(3 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<unsigned char> out(3 * kMiB), in(3 * kMiB, 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<unsigned char>(i * 13 + 5);
  }
  fake.SetCurrentDevice(0);
  EXPECT_TRUE(b.CopyFromHost(*a, out.data(), out.size()).ok());
  EXPECT_TRUE(b.CopyToHost(in.data(), *a, in.size()).ok());
  EXPECT_EQ(in, out);
  // On the backend's device, and the caller's put back.
  EXPECT_THAT(fake.DevicesOf("hipMemcpy"), ElementsAre(1, 1));
  EXPECT_EQ(fake.CurrentDevice(), 0);

  // 0 bytes and a null host pointer never reach the runtime.
  EXPECT_TRUE(b.CopyFromHost(*a, nullptr, 0).ok());
  const absl::Status null_host = b.CopyToHost(nullptr, *a, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(null_host)) << null_host;
  EXPECT_THAT(null_host.message(), HasSubstr("null"));
  EXPECT_EQ(fake.CountCalls("hipMemcpy"), 2);

  // Runtime errors translate, naming the call, the address and the size.
  fake.FailNext("hipMemcpy", hipErrorLaunchFailure);
  const absl::Status failed = b.CopyToHost(in.data(), *a, 16);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_THAT(failed.message(),
              HasSubstr(absl::StrCat("hipMemcpy(", absl::StrFormat("%#x", *a),
                                     ", 16 bytes, hipMemcpyDeviceToHost) "
                                     "failed: hipErrorLaunchFailure")));
  fake.FailNext("hipMemcpy", hipErrorOutOfMemory);
  EXPECT_TRUE(absl::IsResourceExhausted(b.CopyFromHost(*a, out.data(), 16)));
  // The fake answers hipErrorInvalidValue for a range it did not hand out.
  EXPECT_TRUE(absl::IsInvalidArgument(b.CopyFromHost(16, out.data(), 16)));
  EXPECT_TRUE(b.Free(*a).ok());
}

TEST(HipBackendTest, WithoutHipMemcpyHostCopyIsOff) {
  FakeHipConfig config = testing::Rocm61();
  config.has_memcpy = false;
  FakeHipRuntime fake(config);
  auto made = Create(fake);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  EXPECT_FALSE(b.info().capabilities.host_copy);
  EXPECT_THAT(Notes(b), HasSubstr("host_copy off"));
  unsigned char host[16] = {};
  EXPECT_TRUE(absl::IsUnimplemented(b.CopyToHost(host, 0x1000, 16)));
  EXPECT_TRUE(absl::IsUnimplemented(b.CopyFromHost(0x1000, host, 16)));
  EXPECT_EQ(fake.CountCalls("hipMemcpy"), 0);
}

// ------------------------------------------------------- the current device

FakeHipConfig TwoDevices() {
  FakeHipConfig config = testing::Rocm61();
  config.device_count = 2;
  return config;
}

// A null stream means the current device's: calls that take a stream must run
// with the backend's device current, whatever device the caller is on.
TEST(HipBackendTest, StreamCallsRunOnTheBackendsDevice) {
  FakeHipRuntime fake(TwoDevices());
  auto made = Create(fake, MemoryKind::kCoarse, /*ordinal=*/1);
  ASSERT_TRUE(made.ok()) << made.status();
  HipBackend& b = **made;
  ASSERT_TRUE(b.ConfigurePool(PoolOptions()).ok());
  auto event = b.CreateEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  auto block = b.PoolAllocate(kMiB, Stream());
  ASSERT_TRUE(block.ok()) << block.status();

  // The caller works on device 0 before each call.
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.RecordEvent(*event, Stream()).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.StreamWaitEvent(Stream(), *event).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.QueryEvent(*event).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.SynchronizeEvent(*event).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.PoolFree(*block, Stream()).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.DestroyEvent(*event).ok());
  fake.SetCurrentDevice(0);
  ASSERT_TRUE(b.IsCapturing(Stream()).ok());
  for (const char* call :
       {"hipStreamIsCapturing", "hipEventRecord", "hipStreamWaitEvent",
        "hipEventQuery", "hipEventSynchronize", "hipFreeAsync",
        "hipEventDestroy", "hipMallocFromPoolAsync",
        "hipEventCreateWithFlags"}) {
    EXPECT_THAT(fake.DevicesOf(call), ElementsAre(1)) << call;
  }
  EXPECT_EQ(fake.CurrentDevice(), 0);
}

// Every call, creation and destruction included, leaves the calling thread on
// the device it was on: a framework thread working on device 0 that makes
// gpualloc grow on device 1 must not launch its next kernels on device 1.
TEST(HipBackendTest, CallsLeaveTheThreadsDeviceAsTheyFoundIt) {
  for (int mine : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("the caller is on device ", mine));
    FakeHipRuntime fake(TwoDevices());
    fake.SetCurrentDevice(mine);
    const auto kept = [&](absl::string_view step) {
      EXPECT_EQ(fake.CurrentDevice(), mine) << "after " << step;
    };
    {
      auto made = Create(fake, MemoryKind::kCoarse, /*ordinal=*/1);
      ASSERT_TRUE(made.ok()) << made.status();
      kept("Create");
      HipBackend& b = **made;
      ASSERT_NO_FATAL_FAILURE(
          gpualloc::testing::CallEveryOperation(b, 4 * kMiB, Stream(7), kept));
      fake.FailNext("hipMalloc", hipErrorOutOfMemory);
      EXPECT_FALSE(b.Allocate(4096).ok());
      kept("a failed Allocate");
      ASSERT_TRUE(b.Allocate(4096).ok());  // left for the destructor
    }
    kept("destruction");
    EXPECT_EQ(fake.live_plain(), 0u);
    // Everything that depends on the current device ran on device 1.
    for (const char* call :
         {"hipMalloc", "hipFree", "hipMemGetInfo", "hipEventCreateWithFlags",
          "hipEventRecord", "hipStreamWaitEvent", "hipEventDestroy",
          "hipMemPoolCreate", "hipMallocFromPoolAsync", "hipFreeAsync",
          "hipMemAddressReserve", "hipMemCreate", "hipMemMap", "hipMemUnmap",
          "hipMemSetAccess", "hipMemRelease", "hipMemAddressFree"}) {
      for (int device : fake.DevicesOf(call)) {
        EXPECT_EQ(device, 1) << call;
      }
      EXPECT_FALSE(fake.DevicesOf(call).empty()) << call;
    }
  }
}

TEST(HipBackendTest, TheCurrentDeviceIsPerThread) {
  FakeHipRuntime fake(TwoDevices());
  auto made = Create(fake, MemoryKind::kCoarse, /*ordinal=*/1);
  ASSERT_TRUE(made.ok()) << made.status();
  fake.SetCurrentDevice(1);
  absl::StatusOr<DeviceAddress> a;
  int worker_after = -1;
  std::thread([&] {
    // A new thread starts on device 0 and is still there afterwards.
    a = (*made)->Allocate(4096);
    worker_after = fake.CurrentDevice();
  }).join();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(worker_after, 0);
  EXPECT_EQ(fake.CurrentDevice(), 1);
  EXPECT_THAT(fake.DevicesOf("hipMalloc"), ElementsAre(1));
  EXPECT_TRUE((*made)->Free(*a).ok());
}

// A free the runtime refuses leaves the block (event) the backend's, so that
// the state is as before the call: a retry, or the destructor, frees it.
TEST(HipBackendTest, AFailedFreeKeepsTrackOfTheMemory) {
  FakeHipRuntime fake(TwoDevices());
  {
    auto made = Create(fake, MemoryKind::kCoarse, /*ordinal=*/1);
    ASSERT_TRUE(made.ok()) << made.status();
    HipBackend& b = **made;

    auto plain = b.Allocate(4096);
    ASSERT_TRUE(plain.ok());
    fake.FailNext("hipFree", hipErrorLaunchFailure);
    absl::Status s = b.Free(*plain);
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("hipFree("));
    EXPECT_EQ(fake.live_plain(), 1u);
    // The device cannot be made current: refused the same way.
    fake.SetCurrentDevice(0);
    fake.FailNext("hipSetDevice", hipErrorLaunchFailure);
    s = b.Free(*plain);
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("hipSetDevice(1)"));
    EXPECT_TRUE(b.Free(*plain).ok());
    EXPECT_EQ(fake.live_plain(), 0u);

    ASSERT_TRUE(b.ConfigurePool(PoolOptions()).ok());
    auto block = b.PoolAllocate(kMiB, Stream(3));
    ASSERT_TRUE(block.ok()) << block.status();
    fake.FailNext("hipFreeAsync", hipErrorLaunchFailure);
    s = b.PoolFree(*block, Stream(3));
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("hipFreeAsync("));
    EXPECT_TRUE(b.PoolFree(*block, Stream(3)).ok());
    EXPECT_TRUE(absl::IsInvalidArgument(b.PoolFree(*block, Stream(3))));

    auto event = b.CreateEvent();
    ASSERT_TRUE(event.ok());
    fake.FailNext("hipEventDestroy", hipErrorLaunchFailure);
    s = b.DestroyEvent(*event);
    EXPECT_TRUE(absl::IsInternal(s)) << s;
    EXPECT_TRUE(b.RecordEvent(*event, Stream()).ok());  // still usable
    // Left for the destructor this time.
    auto kept = b.Allocate(8192);
    ASSERT_TRUE(kept.ok());
    fake.FailNext("hipFree", hipErrorLaunchFailure);
    EXPECT_FALSE(b.Free(*kept).ok());
  }
  EXPECT_EQ(fake.live_plain(), 0u);
  EXPECT_EQ(fake.CountCalls("hipEventDestroy"), 2);
}

TEST(HipBackendTest, VersionText) {
  EXPECT_EQ(HipVersionText(50221153), "5.2.21153");
  EXPECT_EQ(HipVersionText(60140091), "6.1.40091");
  EXPECT_THAT(HipVersionText(0), HasSubstr("unknown"));
}

// --------------------------------------------------------------- registry

TEST(HipBackendTest, RegistryReachesTheHipBackend) {
  auto config = ResolveConfig("backend=hip", MapEnvironment({}));
  ASSERT_TRUE(config.ok()) << config.status();
  auto backend = CreateBackend(*config, 0);
  if (backend.ok()) {
    EXPECT_EQ((*backend)->info().backend, "hip");  // a machine with a GPU
    return;
  }
  // No AMD GPU (or no ROCm) here: Unavailable with the reason, never "not in
  // this build".
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable)
      << backend.status();
  EXPECT_THAT(backend.status().message(), HasSubstr("libamdhip64"));
  EXPECT_THAT(backend.status().message(), ::testing::Not(HasSubstr("build")));
}

}  // namespace
}  // namespace gpualloc::hip
