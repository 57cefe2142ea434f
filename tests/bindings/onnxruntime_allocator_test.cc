// SPDX-License-Identifier: Apache-2.0
// gpualloc/onnxruntime.h's OrtAllocator through a stand-in ONNX Runtime C
// API (tests/bindings/onnxruntime_standin/c, from ONNX Runtime 1.24's
// onnxruntime_c_api.h), on the simulator: registered with an environment,
// used for tensors (Alloc, Free), on a sync stream (AllocOnStream), for
// initializers (Reserve), and read through AllocatorGetStats.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/gpualloc.h"
#include "gpualloc/onnxruntime.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

constexpr std::size_t kMiB = std::size_t{1} << 20;

class OnnxRuntimeAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    ASSERT_NE(api_, nullptr);
    ASSERT_EQ(api_->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "test", &env_),
              nullptr);
    ASSERT_EQ(gpualloc_create_isolated("backend=sim,device_memory=8GiB,"
                                       "preallocate=false,mem_limit=256MiB",
                                       &handle_),
              GPUALLOC_OK)
        << gpualloc_last_error();
    ASSERT_EQ(
        gpualloc::OnnxRuntimeAllocator::Create(api_, handle_, 0, &allocator_),
        nullptr);
    ASSERT_EQ(api_->RegisterAllocator(env_, allocator_), nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(api_->UnregisterAllocator(env_, allocator_->Info(allocator_)),
              nullptr);
    gpualloc::OnnxRuntimeAllocator::Destroy(allocator_);
    api_->ReleaseEnv(env_);
    gpualloc_destroy(handle_);
  }

  std::vector<std::uint64_t> InUseStreams() {
    char* json = nullptr;
    EXPECT_EQ(gpualloc_snapshot_json(handle_, 0, &json, nullptr), GPUALLOC_OK);
    std::vector<std::uint64_t> streams;
    const char kKey[] = "\"state\":\"in_use\",\"stream\":";
    for (const char* s = json; (s = std::strstr(s, kKey)) != nullptr;) {
      s += sizeof(kKey) - 1;
      streams.push_back(std::stoull(s));
    }
    gpualloc_string_free(json);
    return streams;
  }
  std::map<std::string, std::string> Stats() {
    OrtKeyValuePairs* kvps = nullptr;
    EXPECT_EQ(api_->AllocatorGetStats(allocator_, &kvps), nullptr);
    const char* const* keys = nullptr;
    const char* const* values = nullptr;
    size_t n = 0;
    api_->GetKeyValuePairs(kvps, &keys, &values, &n);
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < n; ++i) out[keys[i]] = values[i];
    api_->ReleaseKeyValuePairs(kvps);
    return out;
  }

  const OrtApi* api_ = nullptr;
  OrtEnv* env_ = nullptr;
  gpualloc_t* handle_ = nullptr;
  gpualloc::OnnxRuntimeAllocator* allocator_ = nullptr;
};

TEST_F(OnnxRuntimeAllocatorTest, DescribesItselfAsCudaDeviceMemory) {
  const OrtMemoryInfo* info = allocator_->Info(allocator_);
  const char* name = nullptr;
  int id = -1;
  ASSERT_EQ(api_->MemoryInfoGetName(info, &name), nullptr);
  ASSERT_EQ(api_->MemoryInfoGetId(info, &id), nullptr);
  EXPECT_STREQ(name, "Cuda");
  EXPECT_EQ(id, 0);
  EXPECT_EQ(allocator_->version, static_cast<uint32_t>(ORT_API_VERSION));
}

TEST_F(OnnxRuntimeAllocatorTest, TensorsAllocateAndFreeOnTheDefaultStream) {
  const int64_t shape[] = {1024, 1024};
  OrtValue* tensor = nullptr;
  ASSERT_EQ(
      api_->CreateTensorAsOrtValue(
          allocator_, shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &tensor),
      nullptr);
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(0));
  EXPECT_EQ(Stats()["InUse"], std::to_string(4 * kMiB));
  api_->ReleaseValue(tensor);
  EXPECT_EQ(Stats()["InUse"], "0");
}

TEST_F(OnnxRuntimeAllocatorTest, AllocOnStreamAllocatesAndFreesOnThatStream) {
  const OrtEpDevice* const* devices = nullptr;
  size_t n = 0;
  ASSERT_EQ(api_->GetEpDevices(env_, &devices, &n), nullptr);
  OrtSyncStream* stream = nullptr;
  ASSERT_EQ(api_->CreateSyncStreamForEpDevice(devices[0], nullptr, &stream),
            nullptr);
  const auto native =
      reinterpret_cast<std::uint64_t>(api_->SyncStream_GetHandle(stream));
  void* p = allocator_->AllocOnStream(allocator_, 2 * kMiB, stream);
  ASSERT_NE(p, nullptr);
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(native));
  allocator_->Free(allocator_, p);
  // Freed on its stream (Free gives none): reused there at once, with no
  // event recorded.
  void* q = allocator_->AllocOnStream(allocator_, 2 * kMiB, stream);
  EXPECT_EQ(q, p);
  allocator_->Free(allocator_, q);
  gpualloc_stats_t s{};
  s.struct_size = sizeof(s);
  ASSERT_EQ(gpualloc_get_stats(handle_, 0, &s), GPUALLOC_OK);
  EXPECT_EQ(s.events_recorded, 0u);
  api_->ReleaseSyncStream(stream);
}

TEST_F(OnnxRuntimeAllocatorTest, StatsCarryOrtsKeys) {
  void* initializer = allocator_->Reserve(allocator_, 3 * kMiB);
  void* activation = allocator_->Alloc(allocator_, kMiB);
  std::map<std::string, std::string> stats = Stats();
  EXPECT_EQ(stats["Limit"], std::to_string(256 * kMiB));
  EXPECT_EQ(stats["InUse"], std::to_string(4 * kMiB));
  EXPECT_EQ(stats["MaxInUse"], std::to_string(4 * kMiB));
  EXPECT_EQ(stats["NumAllocs"], "2");
  EXPECT_EQ(stats["NumReserves"], "1");
  EXPECT_EQ(stats["MaxAllocSize"], std::to_string(3 * kMiB));
  EXPECT_NE(stats["TotalAllocated"], "0");
  EXPECT_NE(stats["NumArenaExtensions"], "0");
  EXPECT_EQ(stats.count("NumArenaShrinkages"), 1u);
  allocator_->Free(allocator_, activation);
  allocator_->Free(allocator_, initializer);
}

TEST_F(OnnxRuntimeAllocatorTest, OutOfMemoryAnswersNullWithTheReport) {
  const int64_t shape[] = {512 * 1024 * 1024};
  OrtValue* tensor = nullptr;
  OrtStatus* status = api_->CreateTensorAsOrtValue(
      allocator_, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, &tensor);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(api_->GetErrorCode(status), ORT_FAIL);
  api_->ReleaseStatus(status);
  EXPECT_THAT(gpualloc_last_error(), HasSubstr("out of memory"));
}

TEST_F(OnnxRuntimeAllocatorTest, AFailedFreeChangesNothing) {
  void* p = allocator_->Alloc(allocator_, kMiB);
  allocator_->Free(allocator_, static_cast<char*>(p) + 256);  // not a block
  EXPECT_THAT(gpualloc_last_error(), HasSubstr("0x"));
  EXPECT_EQ(Stats()["InUse"], std::to_string(kMiB));
  allocator_->Free(allocator_, p);
  EXPECT_EQ(Stats()["InUse"], "0");
}

TEST_F(OnnxRuntimeAllocatorTest, CreateNamesTheBadArgument) {
  gpualloc::OnnxRuntimeAllocator* other = nullptr;
  OrtStatus* status =
      gpualloc::OnnxRuntimeAllocator::Create(api_, nullptr, 0, &other);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(api_->GetErrorCode(status), ORT_INVALID_ARGUMENT);
  EXPECT_THAT(api_->GetErrorMessage(status), HasSubstr("handle is NULL"));
  api_->ReleaseStatus(status);
  status = gpualloc::OnnxRuntimeAllocator::Create(api_, handle_, -1, &other);
  ASSERT_NE(status, nullptr);
  EXPECT_THAT(api_->GetErrorMessage(status), HasSubstr("device -1"));
  api_->ReleaseStatus(status);
  EXPECT_EQ(other, nullptr);
  // A second allocator for the same device is refused by ORT itself.
  ASSERT_EQ(gpualloc::OnnxRuntimeAllocator::Create(api_, handle_, 0, &other),
            nullptr);
  status = api_->RegisterAllocator(env_, other);
  ASSERT_NE(status, nullptr);
  api_->ReleaseStatus(status);
  gpualloc::OnnxRuntimeAllocator::Destroy(other);
}

}  // namespace
