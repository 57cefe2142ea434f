// SPDX-License-Identifier: Apache-2.0
// gpualloc/rmm.hpp through a stand-in RMM (tests/bindings/rmm_standin, with
// its top naming the RMM file and version each header stands for), on the
// simulator. Built twice: against RMM 25.08's interface
// (device_memory_resource with do_allocate / do_deallocate) and against
// 26.06's (CCCL's resource concepts: allocate(stream_ref, ...),
// allocate_sync); tests/meson.build passes the include directories.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/gpualloc.h"
#include "gpualloc/rmm.hpp"
#include "gtest/gtest.h"

#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
#include <rmm/mr/device/callback_memory_resource.hpp>
#else
#include <rmm/mr/callback_memory_resource.hpp>
#endif

namespace {

using ::testing::HasSubstr;

constexpr std::size_t kMiB = std::size_t{1} << 20;
const cudaStream_t kStream = reinterpret_cast<cudaStream_t>(0x50);

class RmmAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(gpualloc_create_isolated("backend=sim,device_memory=8GiB,"
                                       "preallocate=false,mem_limit=256MiB",
                                       &handle_),
              GPUALLOC_OK)
        << gpualloc_last_error();
  }
  void TearDown() override { gpualloc_destroy(handle_); }

  // The stream of every block in use, from the snapshot JSON.
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
  std::uint64_t NumAllocs() {
    gpualloc_stats_t s{};
    s.struct_size = sizeof(s);
    EXPECT_EQ(gpualloc_get_stats(handle_, 0, &s), GPUALLOC_OK);
    return s.num_allocs;
  }

  gpualloc_t* handle_ = nullptr;
};

// Allocates through RMM's interface of the version compiled against.
void* Allocate(gpualloc::RmmMemoryResource& mr, std::size_t bytes,
               cudaStream_t stream) {
#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
  rmm::mr::device_memory_resource& base = mr;
  return base.allocate(bytes, rmm::cuda_stream_view{stream});
#else
  return mr.allocate(cuda::stream_ref{stream}, bytes);
#endif
}
void Deallocate(gpualloc::RmmMemoryResource& mr, void* p, std::size_t bytes,
                cudaStream_t stream) {
#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
  rmm::mr::device_memory_resource& base = mr;
  base.deallocate(p, bytes, rmm::cuda_stream_view{stream});
#else
  mr.deallocate(cuda::stream_ref{stream}, p, bytes);
#endif
}

TEST_F(RmmAdapterTest, AllocatesAndFreesOnTheStreamItIsGiven) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  void* p = Allocate(mr, 3 * kMiB, kStream);
  ASSERT_NE(p, nullptr);
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(0x50));
  Deallocate(mr, p, 3 * kMiB, kStream);
  // Freed on its own stream: reused there at once.
  void* q = Allocate(mr, 3 * kMiB, kStream);
  EXPECT_EQ(q, p);
  Deallocate(mr, q, 3 * kMiB, kStream);
  EXPECT_TRUE(mr.last_error().empty()) << mr.last_error();
}

TEST_F(RmmAdapterTest, CountsAsStatisticsResourceAdaptorDoes) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  void* a = Allocate(mr, 1000, kStream);
  void* b = Allocate(mr, 3000, kStream);
  Deallocate(mr, a, 1000, kStream);
  const gpualloc::RmmCounter bytes = mr.get_bytes_counter();
  EXPECT_EQ(bytes.value, 3000);
  EXPECT_EQ(bytes.peak, 4000);
  EXPECT_EQ(bytes.total, 4000);
  const gpualloc::RmmCounter allocations = mr.get_allocations_counter();
  EXPECT_EQ(allocations.value, 1);
  EXPECT_EQ(allocations.peak, 2);
  EXPECT_EQ(allocations.total, 2);
  EXPECT_EQ(mr.gpualloc_stats().bytes_requested, 3000u);
  Deallocate(mr, b, 3000, kStream);
  EXPECT_EQ(mr.get_bytes_counter().value, 0);
}

TEST_F(RmmAdapterTest, CallbackMemoryResourceReachesGpualloc) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  rmm::mr::callback_memory_resource callbacks{
      gpualloc::RmmAllocateCallback, gpualloc::RmmDeallocateCallback, &mr, &mr};
  const std::uint64_t before = NumAllocs();
#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
  void* p = callbacks.allocate(kMiB, rmm::cuda_stream_view{kStream});
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(0x50));
  callbacks.deallocate(p, kMiB, rmm::cuda_stream_view{kStream});
#else
  void* p = callbacks.allocate(cuda::stream_ref{kStream}, kMiB);
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(0x50));
  callbacks.deallocate(cuda::stream_ref{kStream}, p, kMiB);
#endif
  EXPECT_EQ(NumAllocs(), before + 1);
  EXPECT_EQ(mr.get_bytes_counter().total, static_cast<std::int64_t>(kMiB));
}

TEST_F(RmmAdapterTest, EqualityFollowsTheSharedState) {
  gpualloc::RmmMemoryResource a{handle_, 0};
  gpualloc::RmmMemoryResource b{handle_, 0};
#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
#else
  const gpualloc::RmmMemoryResource copy = a;
  EXPECT_TRUE(copy == a);
  EXPECT_FALSE(a == b);
#endif
}

#if !GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
static_assert(cuda::mr::resource_with<gpualloc::RmmMemoryResource,
                                      cuda::mr::device_accessible>,
              "a resource of RMM 26.06 (CCCL's concepts)");

TEST_F(RmmAdapterTest, AllocateSyncUsesTheDefaultStream) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  void* p = mr.allocate_sync(kMiB);
  EXPECT_THAT(InUseStreams(), ::testing::ElementsAre(0));
  mr.deallocate_sync(p, kMiB);
  EXPECT_EQ(mr.get_allocations_counter().value, 0);
}

TEST_F(RmmAdapterTest, RefusesAnAlignmentRmmRefuses) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  try {
    mr.allocate(cuda::stream_ref{kStream}, kMiB, 3);
    FAIL() << "alignment 3 passed";
  } catch (const rmm::bad_alloc& e) {
    EXPECT_THAT(e.what(), HasSubstr("alignment 3"));
  }
}
#endif

TEST_F(RmmAdapterTest, OutOfMemoryIsRmmsOutOfMemoryWithTheReport) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  try {
    Allocate(mr, 512 * kMiB, kStream);
    FAIL() << "an allocation over the limit passed";
  } catch (const rmm::out_of_memory& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of memory"));
    EXPECT_THAT(e.what(), HasSubstr("limit"));
  }
  EXPECT_EQ(mr.get_allocations_counter().total, 0);
}

TEST_F(RmmAdapterTest, AFailedFreeChangesNothingAndIsKept) {
  gpualloc::RmmMemoryResource mr{handle_, 0};
  void* p = Allocate(mr, kMiB, kStream);
  char* foreign = static_cast<char*>(p) + 256;
  Deallocate(mr, foreign, kMiB, kStream);  // cannot throw
  EXPECT_THAT(mr.last_error(), HasSubstr("0x"));
  EXPECT_EQ(mr.get_allocations_counter().value, 1);
  Deallocate(mr, p, kMiB, kStream);
  EXPECT_EQ(mr.get_allocations_counter().value, 0);
}

TEST_F(RmmAdapterTest, BadConstructionNamesWhatWasGiven) {
  try {
    gpualloc::RmmMemoryResource mr{nullptr, 0};
    FAIL() << "a null allocator passed";
  } catch (const rmm::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NULL"));
  }
  try {
    gpualloc::RmmMemoryResource mr{handle_, -2};
    FAIL() << "device -2 passed";
  } catch (const rmm::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device -2"));
  }
}

}  // namespace
