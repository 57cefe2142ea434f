// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_threads_test.cc: 2 to 8 threads share one allocator,
// each allocating and freeing on its own stream and freeing blocks the others
// handed over. Checks: no hazard on the simulated device, every invariant at
// the end, nothing lost. .ci/run also runs it under ThreadSanitizer.
#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kGiB;
using testing::kMiB;

struct Block {
  void* p = nullptr;
  std::uint64_t bytes = 0;
  Stream stream;  // where its last use was queued
};

struct Params {
  int threads;
  CrossStreamReuse policy;
  bool preallocate;
};

void PrintTo(const Params& p, std::ostream* os) {
  *os << p.threads << " threads, policy " << static_cast<int>(p.policy)
      << (p.preallocate ? ", preallocate" : ", growth");
}

class AllocatorThreadsTest : public ::testing::TestWithParam<Params> {};

TEST_P(AllocatorThreadsTest, ThreadsOnTheirOwnStreamsShareOneAllocator) {
  const Params params = GetParam();
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  SimOptions so;
  so.profile = "h100";
  so.total_bytes = 4 * kGiB;
  auto sim = testing::MakeSim(so);
  Options o;
  o.memory_limit = 512 * kMiB;
  o.preallocate = params.preallocate;
  o.cross_stream_reuse = params.policy;
  auto allocator = testing::MakeAllocator(o, sim);
  ASSERT_NE(allocator, nullptr);

  std::mutex mailbox_mu;
  std::vector<Block> mailbox;  // blocks one thread hands to another to free
  std::atomic<int> failures{0};
  std::atomic<std::uint64_t> ooms{0};
  constexpr int kOps = 3000;

  auto worker = [&](int t) {
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
    const Stream mine(0x1000 * static_cast<std::uintptr_t>(t + 1));
    std::vector<Block> own;
    for (int i = 0; i < kOps; ++i) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 4 || own.empty()) {
        const std::uint64_t bytes = 1 + rng() % (256 * 1024);
        absl::StatusOr<void*> p = allocator->Allocate(bytes, mine);
        if (!p.ok()) {
          if (!absl::IsResourceExhausted(p.status())) ++failures;
          ++ooms;
          continue;
        }
        sim->Use(mine, Addr(*p), bytes);
        own.push_back({*p, bytes, mine});
      } else if (what < 6) {
        const std::size_t k = rng() % own.size();
        if (!allocator->Deallocate(own[k].p, own[k].stream).ok()) ++failures;
        own[k] = own.back();
        own.pop_back();
      } else if (what < 7) {
        // Hand a block over: another thread frees it (its last use stays on
        // this thread's stream).
        std::lock_guard<std::mutex> lock(mailbox_mu);
        mailbox.push_back(own.back());
        own.pop_back();
      } else if (what < 9) {
        Block b;
        {
          std::lock_guard<std::mutex> lock(mailbox_mu);
          if (mailbox.empty()) continue;
          b = mailbox.back();
          mailbox.pop_back();
        }
        if (!allocator->Deallocate(b.p, b.stream).ok()) ++failures;
      } else {
        sim->CompleteStream(mine);
        (void)allocator->GetStats();
      }
    }
    for (const Block& b : own) {
      if (!allocator->Deallocate(b.p, b.stream).ok()) ++failures;
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < params.threads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  for (const Block& b : mailbox) {
    GPUALLOC_EXPECT_OK(allocator->Deallocate(b.p, b.stream));
  }

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sim->hazards(), 0u);
  for (const SimHazard& h : sim->hazard_log()) ADD_FAILURE() << h.ToString();
  GPUALLOC_EXPECT_OK(allocator->Validate());
  const Stats s = allocator->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  RecordProperty("ooms", static_cast<int>(ooms.load()));
  RecordProperty("events_recorded", static_cast<int>(s.events_recorded));
}

INSTANTIATE_TEST_SUITE_P(
    Threads, AllocatorThreadsTest,
    ::testing::Values(Params{2, CrossStreamReuse::kWhenComplete, true},
                      Params{4, CrossStreamReuse::kStreamWait, false},
                      Params{8, CrossStreamReuse::kWhenComplete, false},
                      Params{8, CrossStreamReuse::kStreamWait, true}),
    [](const ::testing::TestParamInfo<Params>& info) {
      return std::to_string(info.param.threads) + "threads_" +
             (info.param.policy == CrossStreamReuse::kStreamWait
                  ? "StreamWait"
                  : "WhenComplete") +
             (info.param.preallocate ? "_prealloc" : "_growth");
    });

}  // namespace
}  // namespace gpualloc
