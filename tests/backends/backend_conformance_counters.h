// SPDX-License-Identifier: Apache-2.0
// tests/backends/backend_conformance_counters.h: the conformance cases of
// completion counters (capabilities.completion_counters), part of the suite
// of backend_conformance.h, which includes this file at its end (include that
// one, not this).
//
// Only the default stream is used (on a real device any other handle must be
// a stream the runtime created). The case that checks a write waits for its
// stream's earlier work needs the factory's hold_work / release_work (a
// backend that models device work: the simulator, the CUDA fake); it skips
// elsewhere.
#ifndef GPUALLOC_TESTS_BACKEND_CONFORMANCE_COUNTERS_H_
#define GPUALLOC_TESTS_BACKEND_CONFORMANCE_COUNTERS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_conformance.h"

#define GPUALLOC_COUNTERS_EXPECT_OK(expr)                                    \
  do {                                                                       \
    const absl::Status counters_status_ = (expr);                            \
    EXPECT_TRUE(counters_status_.ok()) << #expr << ": " << counters_status_; \
  } while (0)

namespace gpualloc::testing {
namespace conformance_internal {

// What the caller reads: an acquire load, no call.
inline std::uint64_t ReadCounter(const CounterBlock& block, std::size_t i) {
  return __atomic_load_n(&block.values[i], __ATOMIC_ACQUIRE);
}

}  // namespace conformance_internal

TEST_P(BackendConformanceTest, CounterCallsNeedTheCapability) {
  if (info().capabilities.completion_counters) {
    // The capability needs streams: counters are written by streams.
    EXPECT_TRUE(info().capabilities.streams);
    GTEST_SKIP() << info().name << " has completion counters";
  }
  const absl::Status created = backend_->CreateCounters(1).status();
  EXPECT_TRUE(absl::IsUnimplemented(created)) << created;
  EXPECT_NE(created.message().find("completion_counters"),
            absl::string_view::npos)
      << created;
  EXPECT_TRUE(absl::IsUnimplemented(backend_->DestroyCounters(1)));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->WriteCounter(1, 0, 1, Stream())));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->WaitCounter(1, 0, 1, Stream())));
}

TEST_P(BackendConformanceTest, CountersWriteReadWaitRoundTrip) {
  if (!info().capabilities.completion_counters) {
    GTEST_SKIP() << "no completion counters";
  }
  using conformance_internal::ReadCounter;
  absl::StatusOr<CounterBlock> block = backend_->CreateCounters(4);
  ASSERT_TRUE(block.ok()) << block.status();
  ASSERT_NE(block->handle, 0u);
  ASSERT_NE(block->values, nullptr);
  ASSERT_EQ(block->count, 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(ReadCounter(*block, i), 0u);
  absl::StatusOr<CounterBlock> other = backend_->CreateCounters(1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->handle, block->handle);

  for (std::uint64_t value = 1; value <= 3; ++value) {
    GPUALLOC_COUNTERS_EXPECT_OK(
        backend_->WriteCounter(block->handle, 2, value, Stream()));
  }
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WriteCounter(block->handle, 0, 9, Stream()));
  // An event recorded after the writes completes after them.
  SynchronizeDefaultStream();
  EXPECT_EQ(ReadCounter(*block, 2), 3u);
  EXPECT_EQ(ReadCounter(*block, 0), 9u);
  EXPECT_EQ(ReadCounter(*block, 1), 0u);
  EXPECT_EQ(ReadCounter(*block, 3), 0u);
  EXPECT_EQ(ReadCounter(*other, 0), 0u) << "blocks are apart";
  // Waiting for a written value, or one the counter holds.
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WaitCounter(block->handle, 2, 3, Stream()));
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WaitCounter(block->handle, 1, 0, Stream()));
  // The values are the caller's: a smaller one replaces a larger one.
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WriteCounter(block->handle, 2, 1, Stream()));
  SynchronizeDefaultStream();
  EXPECT_EQ(ReadCounter(*block, 2), 1u);

  GPUALLOC_COUNTERS_EXPECT_OK(backend_->DestroyCounters(block->handle));
  GPUALLOC_COUNTERS_EXPECT_OK(backend_->DestroyCounters(other->handle));
  const absl::Status again = backend_->DestroyCounters(block->handle);
  EXPECT_TRUE(absl::IsInvalidArgument(again)) << again;
  const absl::Status write = backend_->WriteCounter(block->handle, 0, 1, {});
  EXPECT_TRUE(absl::IsInvalidArgument(write)) << write;
}

TEST_P(BackendConformanceTest,
       BadCounterInputIsInvalidArgumentChangingNothing) {
  if (!info().capabilities.completion_counters) {
    GTEST_SKIP() << "no completion counters";
  }
  using conformance_internal::ReadCounter;
  for (std::size_t count : {std::size_t{0}, std::size_t{65537}}) {
    const absl::Status s = backend_->CreateCounters(count).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << count << ": " << s;
  }
  absl::StatusOr<CounterBlock> block = backend_->CreateCounters(2);
  ASSERT_TRUE(block.ok()) << block.status();
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WriteCounter(block->handle, 1, 5, Stream()));
  SynchronizeDefaultStream();
  const CounterHandle unknown = block->handle + 1000;
  const std::uint64_t too_big = std::uint64_t{1} << 63;
  const absl::Status refused[] = {
      backend_->WriteCounter(unknown, 0, 1, Stream()),
      backend_->WaitCounter(unknown, 0, 1, Stream()),
      backend_->DestroyCounters(unknown),
      backend_->WriteCounter(block->handle, 2, 1, Stream()),
      backend_->WaitCounter(block->handle, 2, 1, Stream()),
      backend_->WriteCounter(block->handle, 0, too_big, Stream()),
      backend_->WaitCounter(block->handle, 1, too_big, Stream()),
  };
  for (const absl::Status& s : refused) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_FALSE(s.message().empty());
  }
  SynchronizeDefaultStream();
  EXPECT_EQ(ReadCounter(*block, 0), 0u);
  EXPECT_EQ(ReadCounter(*block, 1), 5u);
  // The block still works, and destroys once.
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WriteCounter(block->handle, 0, too_big - 1, Stream()));
  SynchronizeDefaultStream();
  EXPECT_EQ(ReadCounter(*block, 0), too_big - 1);
  GPUALLOC_COUNTERS_EXPECT_OK(backend_->DestroyCounters(block->handle));
}

TEST_P(BackendConformanceTest, ACounterWriteWaitsForTheStreamsEarlierWork) {
  if (!info().capabilities.completion_counters) {
    GTEST_SKIP() << "no completion counters";
  }
  if (!GetParam().hold_work || !GetParam().release_work) {
    GTEST_SKIP() << GetParam().name << " does not model pending device work";
  }
  using conformance_internal::ReadCounter;
  absl::StatusOr<CounterBlock> block = backend_->CreateCounters(1);
  ASSERT_TRUE(block.ok()) << block.status();
  GetParam().hold_work(*backend_, Stream());
  GPUALLOC_COUNTERS_EXPECT_OK(
      backend_->WriteCounter(block->handle, 0, 7, Stream()));
  EXPECT_EQ(ReadCounter(*block, 0), 0u)
      << "the write landed before the work queued before it completed";
  GetParam().release_work(*backend_, Stream());
  EXPECT_EQ(ReadCounter(*block, 0), 7u)
      << "the work completed, and the write with it";
  GPUALLOC_COUNTERS_EXPECT_OK(backend_->DestroyCounters(block->handle));
}

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_BACKEND_CONFORMANCE_COUNTERS_H_
