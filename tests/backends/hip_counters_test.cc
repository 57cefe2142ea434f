// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_counters_test.cc: the HIP backend's completion counters,
// driven through the fake runtime (tests/backends/hip_fake_runtime.h): the
// capability probe on and off (entry points, device attributes), the calls,
// flags and device address used, bad input that never reaches the runtime,
// runtime errors as statuses, and cleanup at destruction.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "backends/hip/hip_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/hip_fake_runtime.h"

namespace gpualloc::hip {
namespace {

using ::testing::AllOf;
using testing::FakeHipConfig;
using testing::FakeHipRuntime;
using ::testing::HasSubstr;

constexpr Stream kStream(0x5100);

std::shared_ptr<HipBackend> Make(const FakeHipRuntime& fake) {
  absl::StatusOr<std::shared_ptr<HipBackend>> b =
      HipBackend::Create(fake.api(), HipBackendOptions{});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : nullptr;
}

std::string Notes(const HipBackend& b) {
  return absl::StrJoin(b.notes(), "\n");
}

std::uint64_t Read(const CounterBlock& block, std::size_t index) {
  return __atomic_load_n(&block.values[index], __ATOMIC_ACQUIRE);
}

TEST(HipCountersProbeTest, OnWithTheEntryPointsAndAttributes) {
  for (FakeHipConfig config :
       {testing::Rocm52(), testing::Rocm57(), testing::Rocm61()}) {
    FakeHipRuntime fake(config);
    auto b = Make(fake);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(b->info().capabilities.completion_counters);
    EXPECT_THAT(Notes(*b), HasSubstr("completion_counters on"));
  }
}

TEST(HipCountersProbeTest, OffForEachMissingPiece) {
  struct Case {
    const char* name;
    FakeHipConfig config;
    const char* why;
  };
  FakeHipConfig no_entry_points;
  no_entry_points.has_counters = false;
  FakeHipConfig no_host_memory;
  no_host_memory.has_host_memory = false;
  FakeHipConfig no_mapping;
  no_mapping.can_map_host_memory = 0;
  FakeHipConfig no_wait;
  no_wait.stream_wait_value = 0;
  FakeHipConfig unreadable;
  unreadable.stream_wait_value_error = hipErrorInvalidValue;
  const Case cases[] = {
      {"entry points", no_entry_points,
       "the runtime lacks hipHostGetDevicePointer, hipStreamWriteValue64, "
       "hipStreamWaitValue64"},
      {"host memory", no_host_memory,
       "the runtime lacks hipHostMalloc, hipHostFree"},
      {"mapping", no_mapping, "hipDeviceAttributeCanMapHostMemory is 0"},
      {"wait", no_wait, "hipDeviceAttributeCanUseStreamWaitValue is 0"},
      {"attribute", unreadable,
       "hipDeviceGetAttribute(CanUseStreamWaitValue) failed: "
       "hipErrorInvalidValue"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeHipRuntime fake(c.config);
    auto b = Make(fake);
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->info().capabilities.completion_counters);
    EXPECT_THAT(Notes(*b), AllOf(HasSubstr("completion_counters off: "),
                                 HasSubstr(c.why)));
    const absl::Status s = b->CreateCounters(1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.message(), HasSubstr("completion_counters"));
    EXPECT_EQ(b->WriteCounter(1, 0, 1, kStream).code(),
              absl::StatusCode::kUnimplemented);
    EXPECT_EQ(b->WaitCounter(1, 0, 1, kStream).code(),
              absl::StatusCode::kUnimplemented);
    EXPECT_EQ(b->DestroyCounters(1).code(), absl::StatusCode::kUnimplemented);
  }
}

TEST(HipCountersTest, CreateWriteWaitDestroyMakeTheRightRuntimeCalls) {
  FakeHipRuntime fake(FakeHipConfig{});
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<CounterBlock> block = b->CreateCounters(3);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_NE(block->handle, 0u);
  EXPECT_EQ(block->count, 3u);
  EXPECT_EQ(fake.last_host_flags(),
            unsigned{hipHostMallocMapped | hipHostMallocPortable |
                     hipHostMallocCoherent});
  EXPECT_EQ(fake.live_mapped_host_blocks(), 1u);
  // The fake fills page-locked memory with 0xa5: the backend zeroed it.
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(Read(*block, i), 0u) << i;
  // The fake accepts only the block's device address: the write landing
  // shows the backend passed the right one.
  ASSERT_TRUE(b->WriteCounter(block->handle, 1, 11, kStream).ok());
  EXPECT_EQ(Read(*block, 1), 11u);
  EXPECT_EQ(Read(*block, 2), 0u);
  ASSERT_TRUE(b->WaitCounter(block->handle, 1, 11, kStream).ok());
  EXPECT_EQ(fake.last_wait_flags(), unsigned{hipStreamWaitValueGte});
  EXPECT_EQ(fake.last_wait_mask(), ~std::uint64_t{0});
  // Every call ran on the backend's device.
  for (const char* call : {"hipHostMalloc", "hipHostGetDevicePointer",
                           "hipStreamWriteValue64", "hipStreamWaitValue64"}) {
    EXPECT_THAT(fake.DevicesOf(call), ::testing::Each(0)) << call;
  }
  ASSERT_TRUE(b->DestroyCounters(block->handle).ok());
  EXPECT_EQ(fake.live_mapped_host_blocks(), 0u);
  EXPECT_EQ(fake.live_host_blocks(), 0u);
}

TEST(HipCountersTest, BadInputNeverReachesTheRuntime) {
  FakeHipRuntime fake(FakeHipConfig{});
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  for (std::size_t count : {std::size_t{0}, std::size_t{65537}}) {
    const absl::Status s = b->CreateCounters(count).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(),
                HasSubstr("HIP CreateCounters(" + std::to_string(count) +
                          "): a block holds 1 to 65536 counters"));
  }
  EXPECT_EQ(fake.CountCalls("hipHostMalloc"), 0);
  absl::StatusOr<CounterBlock> block = b->CreateCounters(2);
  ASSERT_TRUE(block.ok()) << block.status();
  absl::Status s = b->WriteCounter(block->handle + 1, 0, 1, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("HIP WriteCounter(counters 0x2): not a "
                                     "block CreateCounters returned"));
  s = b->WaitCounter(block->handle, 5, 1, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("index out of range"));
  s = b->WaitCounter(block->handle, 0, ~std::uint64_t{0}, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("below 2^63"));
  EXPECT_EQ(b->DestroyCounters(block->handle + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.CountCalls("hipStreamWriteValue64"), 0);
  EXPECT_EQ(fake.CountCalls("hipStreamWaitValue64"), 0);
  EXPECT_EQ(fake.CountCalls("hipHostFree"), 0);
  ASSERT_TRUE(b->DestroyCounters(block->handle).ok());
  EXPECT_EQ(b->DestroyCounters(block->handle).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HipCountersTest, RuntimeErrorsBecomeStatusesNamingTheCall) {
  FakeHipConfig config;
  config.host_bytes = 4096;
  FakeHipRuntime fake(config);
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::Status s = b->CreateCounters(1024).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              HasSubstr("hipHostMalloc(8192 bytes, mapped | portable | "
                        "coherent) for 1024 counters on device 0"));
  // No device address: the host block goes back.
  fake.FailNext("hipHostGetDevicePointer", hipErrorNotSupported);
  s = b->CreateCounters(1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("hipHostGetDevicePointer(0x"));
  EXPECT_EQ(fake.live_host_blocks(), 0u);

  absl::StatusOr<CounterBlock> block = b->CreateCounters(1);
  ASSERT_TRUE(block.ok()) << block.status();
  fake.FailNext("hipStreamWriteValue64", hipErrorInvalidValue);
  s = b->WriteCounter(block->handle, 0, 3, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("hipStreamWriteValue64(stream 0x5100, counters "
                              "0x1 index 0 at 0x6"),
                    HasSubstr("value 3) failed: hipErrorInvalidValue")));
  EXPECT_EQ(Read(*block, 0), 0u);
  fake.FailNext("hipStreamWaitValue64", hipErrorLaunchFailure);
  s = b->WaitCounter(block->handle, 0, 0, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("hipStreamWaitValue64(stream 0x5100"));
  // A failed free keeps the block; the retry frees it.
  fake.FailNext("hipHostFree", hipErrorInvalidValue);
  s = b->DestroyCounters(block->handle);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("hipHostFree(0x"));
  EXPECT_TRUE(b->DestroyCounters(block->handle).ok());
}

TEST(HipCountersTest, TheDestructorFreesTheBlocksLeft) {
  FakeHipRuntime fake(FakeHipConfig{});
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->CreateCounters(4).ok());
  ASSERT_TRUE(b->CreateCounters(1).ok());
  EXPECT_EQ(fake.live_mapped_host_blocks(), 2u);
  b.reset();
  EXPECT_EQ(fake.live_mapped_host_blocks(), 0u);
  EXPECT_EQ(fake.live_host_blocks(), 0u);
  EXPECT_EQ(fake.CountCalls("hipHostFree"), 2);
}

}  // namespace
}  // namespace gpualloc::hip
