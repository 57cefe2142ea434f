// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_counters_test.cc: the CUDA backend's completion
// counters against the fake driver (tests/backends/cuda_fake_driver.h): the
// capability probe on and off (entry points, device attributes, the version 1
// attribute of drivers before CUDA 11.7), the calls and flags made, the
// device address handed to the stream calls, writes that wait for pending
// work, bad input that never reaches the driver, driver errors as statuses,
// and cleanup at destruction.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/cuda_fake_driver.h"

namespace gpualloc::cuda {
namespace {

using ::testing::AllOf;
using testing::FakeCudaDriver;
using testing::FakeCudaOptions;
using ::testing::HasSubstr;

constexpr Stream kStream(0x5100);

FakeCudaOptions SmallDevice() {
  FakeCudaOptions o;
  o.total_bytes = std::uint64_t{1} << 30;
  return o;
}

std::shared_ptr<CudaBackend> MakeBackend(
    const std::shared_ptr<FakeCudaDriver>& fake) {
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api = fake->Api();
  EXPECT_TRUE(api.ok()) << api.status();
  if (!api.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<CudaBackend>> backend =
      CudaBackend::Create(*api, 0);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *backend : nullptr;
}

std::string Notes(const CudaBackend& b) {
  return absl::StrJoin(b.notes(), "\n");
}

std::uint64_t Read(const CounterBlock& block, std::size_t index) {
  return __atomic_load_n(&block.values[index], __ATOMIC_ACQUIRE);
}

// --- The probe
// ----------------------------------------------------------------

TEST(CudaCountersProbeTest, OnWithTheEntryPointsAndAttributes) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->info().capabilities.completion_counters);
  EXPECT_THAT(Notes(*b),
              HasSubstr("completion_counters on (cuStreamWriteValue64 / "
                        "cuStreamWaitValue64 into mapped page-locked memory"));
  // The base names are requested, as for every entry point.
  std::vector<std::string> asked;
  for (const FakeCudaDriver::Request& r : fake->requests()) {
    asked.push_back(r.symbol);
  }
  EXPECT_THAT(asked, ::testing::IsSupersetOf({"cuMemHostGetDevicePointer",
                                              "cuStreamWriteValue64",
                                              "cuStreamWaitValue64"}));
}

TEST(CudaCountersProbeTest, OffForEachMissingPiece) {
  struct Case {
    const char* name;
    FakeCudaOptions options;
    const char* why;
  };
  std::vector<Case> cases;
  for (const char* symbol : {"cuStreamWriteValue64", "cuStreamWaitValue64",
                             "cuMemHostGetDevicePointer"}) {
    FakeCudaOptions o = SmallDevice();
    o.missing_symbols = {symbol};
    cases.push_back({symbol, o, symbol});
  }
  {
    FakeCudaOptions o = SmallDevice();
    o.missing_symbols = {"cuMemFreeHost"};
    cases.push_back(
        {"no host memory", o, "the driver lacks cuMemHostAlloc or "});
  }
  {
    FakeCudaOptions o = SmallDevice();
    o.can_map_host_memory = false;
    cases.push_back({"no mapping", o, "CAN_MAP_HOST_MEMORY is 0"});
  }
  {
    FakeCudaOptions o = SmallDevice();
    o.stream_mem_ops_64 = false;
    cases.push_back(
        {"no 64-bit memops", o, "CAN_USE_64_BIT_STREAM_MEM_OPS is 0)"});
  }
  {
    // A driver before CUDA 11.7 gives the version 1 entry points, whose
    // attribute is the _V1 one, off unless the module parameter enables it.
    FakeCudaOptions o = SmallDevice();
    o.driver_version = 11040;
    o.stream_mem_ops_64 = false;
    cases.push_back({"old driver", o, "NVreg_EnableStreamMemOPs=1"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto fake = FakeCudaDriver::Create(c.options);
    auto b = MakeBackend(fake);
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
    EXPECT_EQ(fake->count("cuStreamWriteValue64"), 0);
  }
}

TEST(CudaCountersProbeTest, AnOldDriverWithMemOpsEnabledUsesTheV1Attribute) {
  FakeCudaOptions o = SmallDevice();
  o.driver_version = 11040;  // the fake refuses the v2 attribute here
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->info().capabilities.completion_counters) << Notes(*b);
  EXPECT_THAT(Notes(*b), HasSubstr("cuStreamWaitValue64 version 1"));
}

TEST(CudaCountersProbeTest, AnAttributeTheDriverCannotReadTurnsItOff) {
  FakeCudaOptions o = SmallDevice();
  o.stream_mem_ops_attribute_result = CUDA_ERROR_INVALID_VALUE;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr) << "the backend is made, without the capability";
  EXPECT_FALSE(b->info().capabilities.completion_counters);
  EXPECT_THAT(Notes(*b),
              HasSubstr("completion_counters off: cuDeviceGetAttribute("
                        "CAN_USE_64_BIT_STREAM_MEM_OPS) failed: "
                        "CUDA_ERROR_INVALID_VALUE"));
}

// --- The calls
// ----------------------------------------------------------------

TEST(CudaCountersTest, CreateWriteWaitDestroyMakeTheRightDriverCalls) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<CounterBlock> block = b->CreateCounters(3);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_NE(block->handle, 0u);
  EXPECT_EQ(block->count, 3u);
  EXPECT_EQ(fake->last_host_flags(),
            static_cast<unsigned int>(CU_MEMHOSTALLOC_DEVICEMAP |
                                      CU_MEMHOSTALLOC_PORTABLE));
  EXPECT_EQ(fake->live_mapped_host_blocks(), 1u);
  // The fake fills page-locked memory with 0xa5: the backend zeroed it.
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(Read(*block, i), 0u) << i;

  // The fake accepts only the block's device address, not the host pointer:
  // the write landing shows the backend passed the right one.
  ASSERT_TRUE(b->WriteCounter(block->handle, 2, 42, kStream).ok());
  EXPECT_EQ(Read(*block, 2), 42u);
  EXPECT_EQ(Read(*block, 1), 0u);
  EXPECT_EQ(fake->last_write_flags(),
            static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_DEFAULT));
  ASSERT_TRUE(b->WaitCounter(block->handle, 2, 42, kStream).ok());
  EXPECT_EQ(fake->last_wait_flags(),
            static_cast<unsigned int>(CU_STREAM_WAIT_VALUE_GEQ));
  EXPECT_EQ(fake->count("cuStreamWriteValue64"), 1);
  EXPECT_EQ(fake->count("cuStreamWaitValue64"), 1);

  ASSERT_TRUE(b->DestroyCounters(block->handle).ok());
  EXPECT_EQ(fake->live_mapped_host_blocks(), 0u);
  EXPECT_EQ(fake->live_host_blocks(), 0u);
}

TEST(CudaCountersTest, AWriteLandsWhenTheWorkBeforeItCompletes) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<CounterBlock> block = b->CreateCounters(1);
  ASSERT_TRUE(block.ok()) << block.status();
  fake->SetWorkPending(true);
  ASSERT_TRUE(b->WriteCounter(block->handle, 0, 1, kStream).ok());
  EXPECT_EQ(Read(*block, 0), 0u);
  EXPECT_EQ(fake->pending_counter_writes(), 1u);
  // An event recorded afterwards on another stream does not land it; one on
  // its stream does, once synchronized.
  absl::StatusOr<EventHandle> other = b->CreateEvent();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(b->RecordEvent(*other, Stream(0x5200)).ok());
  ASSERT_TRUE(b->SynchronizeEvent(*other).ok());
  EXPECT_EQ(Read(*block, 0), 0u);
  absl::StatusOr<EventHandle> after = b->CreateEvent();
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(b->RecordEvent(*after, kStream).ok());
  ASSERT_TRUE(b->SynchronizeEvent(*after).ok());
  EXPECT_EQ(Read(*block, 0), 1u);
  // Freeing the block waits for the device: a queued write lands first.
  ASSERT_TRUE(b->WriteCounter(block->handle, 0, 2, kStream).ok());
  EXPECT_EQ(fake->pending_counter_writes(), 1u);
  ASSERT_TRUE(b->DestroyCounters(block->handle).ok());
  EXPECT_EQ(fake->pending_counter_writes(), 0u);
  ASSERT_TRUE(b->DestroyEvent(*other).ok());
  ASSERT_TRUE(b->DestroyEvent(*after).ok());
}

TEST(CudaCountersTest, BadInputNeverReachesTheDriver) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  for (std::size_t count : {std::size_t{0}, std::size_t{65537}}) {
    const absl::Status s = b->CreateCounters(count).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("a block holds 1 to 65536 counters"));
  }
  EXPECT_EQ(fake->count("cuMemHostAlloc"), 0);
  absl::StatusOr<CounterBlock> block = b->CreateCounters(2);
  ASSERT_TRUE(block.ok()) << block.status();
  const CounterHandle unknown = block->handle + 7;
  absl::Status s = b->WriteCounter(unknown, 0, 1, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("WriteCounter(counters 0x8): not a block "
                                     "CreateCounters returned on device 0"));
  s = b->WaitCounter(block->handle, 2, 1, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("WaitCounter(counters 0x1, index 2, value 1): index "
                        "out of range: the block holds 2 counters"));
  s = b->WriteCounter(block->handle, 1, std::uint64_t{1} << 63, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("values must be below 2^63"));
  s = b->DestroyCounters(unknown);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake->count("cuStreamWriteValue64"), 0);
  EXPECT_EQ(fake->count("cuStreamWaitValue64"), 0);
  EXPECT_EQ(fake->count("cuMemFreeHost"), 0);
  EXPECT_EQ(Read(*block, 0), 0u);
  EXPECT_EQ(Read(*block, 1), 0u);
  ASSERT_TRUE(b->DestroyCounters(block->handle).ok());
  // Destroyed: the handle is unknown from now on, and never handed out again.
  s = b->DestroyCounters(block->handle);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CounterBlock> next = b->CreateCounters(1);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->handle, block->handle);
}

TEST(CudaCountersTest, DriverErrorsBecomeStatusesNamingTheCall) {
  FakeCudaOptions o = SmallDevice();
  o.host_bytes = 4096;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::Status s = b->CreateCounters(1024).status();  // 8 KiB
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("cuMemHostAlloc(8192 bytes, devicemap | "
                              "portable) for 1024 counters on device 0"),
                    HasSubstr("CUDA_ERROR_OUT_OF_MEMORY")));
  // No device address: the host block goes back.
  fake->FailNext("cuMemHostGetDevicePointer", CUDA_ERROR_NOT_SUPPORTED);
  s = b->CreateCounters(1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("cuMemHostGetDevicePointer(0x"));
  EXPECT_EQ(fake->live_host_blocks(), 0u);

  absl::StatusOr<CounterBlock> block = b->CreateCounters(1);
  ASSERT_TRUE(block.ok()) << block.status();
  fake->FailNext("cuStreamWriteValue64", CUDA_ERROR_INVALID_HANDLE);
  s = b->WriteCounter(block->handle, 0, 3, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("cuStreamWriteValue64(stream 0x5100, counters "
                              "0x1 index 0 at 0x6"),
                    HasSubstr("value 3) failed: CUDA_ERROR_INVALID_HANDLE")));
  EXPECT_EQ(Read(*block, 0), 0u);
  fake->FailNext("cuStreamWaitValue64", CUDA_ERROR_UNKNOWN);
  s = b->WaitCounter(block->handle, 0, 3, kStream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cuStreamWaitValue64(stream 0x5100"));
  // A failed free keeps the block; the retry frees it.
  fake->FailNext("cuMemFreeHost", CUDA_ERROR_INVALID_CONTEXT);
  s = b->DestroyCounters(block->handle);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cuMemFreeHost(0x"));
  ASSERT_TRUE(b->WriteCounter(block->handle, 0, 4, kStream).ok());
  EXPECT_EQ(Read(*block, 0), 4u);
  EXPECT_TRUE(b->DestroyCounters(block->handle).ok());
}

TEST(CudaCountersTest, TheDestructorFreesTheBlocksLeft) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  {
    auto b = MakeBackend(fake);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->CreateCounters(4).ok());
    ASSERT_TRUE(b->CreateCounters(1).ok());
    EXPECT_EQ(fake->live_mapped_host_blocks(), 2u);
  }
  EXPECT_EQ(fake->live_mapped_host_blocks(), 0u);
  EXPECT_EQ(fake->live_host_blocks(), 0u);
  EXPECT_EQ(fake->count("cuMemFreeHost"), 2);
}

}  // namespace
}  // namespace gpualloc::cuda
