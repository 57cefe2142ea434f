// SPDX-License-Identifier: Apache-2.0
// tests/core/free_bins_test.cc: best fit over the free bins (intrusive treaps).
#include "core/bfc/free_bins.h"

#include <map>
#include <random>
#include <utility>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

class FreeBinsTest : public ::testing::Test {
 protected:
  ChunkId Add(std::uint64_t size, std::uint64_t address) {
    const ChunkId id = table_.New();
    table_[id].size = size;
    table_[id].address = address;
    bins_.Insert(id);
    return id;
  }
  std::uint64_t SizeOf(ChunkId id) {
    return id == kNoChunk ? 0 : table_[id].size;
  }

  ChunkTable table_;
  FreeBins bins_{&table_};
};

TEST_F(FreeBinsTest, EmptyFindsNothing) {
  EXPECT_EQ(bins_.FindBestFit(256), kNoChunk);
  EXPECT_EQ(bins_.Largest(), kNoChunk);
  EXPECT_TRUE(bins_.Validate().ok());
}

TEST_F(FreeBinsTest, SmallestFittingLowestAddressOnTies) {
  const ChunkId a = Add(1024, 0x9000);
  const ChunkId b = Add(1024, 0x1000);
  const ChunkId c = Add(768, 0x5000);
  const ChunkId d = Add(4096, 0x7000);
  EXPECT_EQ(bins_.FindBestFit(512), c);   // 768 is the smallest that fits
  EXPECT_EQ(bins_.FindBestFit(769), b);   // 1024 at the lower address
  EXPECT_EQ(bins_.FindBestFit(1025), d);  // from a higher class
  EXPECT_EQ(bins_.FindBestFit(4097), kNoChunk);
  EXPECT_EQ(bins_.Largest(), d);
  bins_.Remove(b);
  EXPECT_FALSE(bins_.Contains(b));
  EXPECT_TRUE(bins_.Contains(a));
  EXPECT_EQ(bins_.FindBestFit(769), a);
  EXPECT_EQ(bins_.size(), 3u);
  EXPECT_TRUE(bins_.Validate().ok()) << bins_.Validate();
}

TEST_F(FreeBinsTest, SameClassSmallerEntryIsSkipped) {
  // 1160 and 1270 share a class; a request of 1200 must skip 1160.
  ASSERT_EQ(SizeClass(1160), SizeClass(1270));
  Add(1160, 0x1000);
  const ChunkId b = Add(1270, 0x2000);
  EXPECT_EQ(bins_.FindBestFit(1200), b);
  EXPECT_EQ(bins_.FindBestFit(1271), kNoChunk);
}

TEST_F(FreeBinsTest, ValidateCatchesAChunkInTheWrongClass) {
  const ChunkId a = Add(1024, 0x1000);
  table_[a].size = 1 << 20;  // changed behind the index's back
  const absl::Status s = bins_.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("B1"), std::string::npos) << s;
}

TEST_F(FreeBinsTest, TryRekeyInPlaceOnlyWhenOrderAndClassHold) {
  const ChunkId a = Add(1024, 0x1000);
  const ChunkId b = Add(1100, 0x2000);
  const ChunkId c = Add(1120, 0x3000);
  ASSERT_EQ(SizeClass(1024), SizeClass(1120));
  // b may grow up to c's key and shrink down to a's, exclusive.
  EXPECT_TRUE(bins_.TryRekey(b, 1110, 0x2000));
  EXPECT_TRUE(bins_.TryRekey(b, 1030, 0x2000));
  EXPECT_FALSE(bins_.TryRekey(b, 1120, 0x4000));  // would pass c
  EXPECT_FALSE(bins_.TryRekey(b, 1000, 0x2000));  // would pass a
  EXPECT_FALSE(bins_.TryRekey(c, 4096, 0x3000));  // another size class
  EXPECT_EQ(table_[b].size, 1030u);
  EXPECT_TRUE(bins_.Validate().ok()) << bins_.Validate();
  // Rekey falls back to remove + insert and keeps every invariant.
  bins_.Rekey(b, 1120, 0x4000);
  bins_.Rekey(c, 4096, 0x3000);
  EXPECT_TRUE(bins_.Validate().ok()) << bins_.Validate();
  EXPECT_EQ(bins_.FindBestFit(1025), b);
  EXPECT_EQ(bins_.Largest(), c);
  EXPECT_EQ(bins_.FindBestFit(1), a);
}

TEST_F(FreeBinsTest, RandomRekeysMatchBruteForce) {
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  std::map<ChunkId, std::pair<std::uint64_t, std::uint64_t>>
      model;  // id -> key
  std::uint64_t next_addr = 0x100000;
  for (int i = 0; i < 500; ++i) {
    const std::uint64_t size = 256 * (1 + rng() % 64);
    model[Add(size, next_addr)] = {size, next_addr};
    next_addr += 0x100000;
  }
  for (int step = 0; step < 20000; ++step) {
    auto it = model.begin();
    std::advance(it, rng() % model.size());
    // Small moves (often in place) and large ones (class changes).
    const std::uint64_t size =
        rng() % 2 ? std::max<std::uint64_t>(
                        256, it->second.first + 256 * (rng() % 5) - 512)
                  : 256 * (1 + rng() % 64);
    const std::uint64_t address = it->second.second + (rng() % 3) * 256;
    bool clash = false;
    for (const auto& [id, key] : model)
      clash |= id != it->first && key == std::make_pair(size, address);
    if (clash) continue;
    bins_.Rekey(it->first, size, address);
    it->second = {size, address};
    if (step % 500 == 0) {
      ASSERT_TRUE(bins_.Validate().ok()) << bins_.Validate();
      const std::uint64_t want = 256 * (1 + rng() % 64);
      ChunkId best = kNoChunk;
      for (const auto& [id, key] : model) {
        if (key.first >= want && (best == kNoChunk || key < model[best]))
          best = id;
      }
      ASSERT_EQ(bins_.FindBestFit(want), best) << want;
    }
  }
  EXPECT_TRUE(bins_.Validate().ok()) << bins_.Validate();
}

TEST_F(FreeBinsTest, MatchesBruteForceOnRandomContents) {
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  std::map<std::pair<std::uint64_t, std::uint64_t>, ChunkId>
      model;  // (size, addr)
  std::uint64_t next_addr = 0x100000;
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 3;
    if (op == 0 || model.empty()) {
      // Many equal sizes, so ties on size are common.
      const std::uint64_t size = 256 * (1 + rng() % (1u << (rng() % 12)));
      model[{size, next_addr}] = Add(size, next_addr);
      next_addr += 256 * (1 + rng() % 64);
    } else if (op == 1) {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      bins_.Remove(it->second);
      table_.Delete(it->second);
      model.erase(it);
    } else {
      const std::uint64_t want = 256 * (1 + rng() % (1u << (rng() % 12)));
      auto it = model.lower_bound({want, 0});
      const ChunkId got = bins_.FindBestFit(want);
      ASSERT_EQ(got, it == model.end() ? kNoChunk : it->second) << want;
    }
    ASSERT_EQ(bins_.size(), model.size());
    if (step % 1000 == 0) {
      ASSERT_TRUE(bins_.Validate().ok()) << bins_.Validate();
    }
  }
  if (!model.empty()) {
    EXPECT_EQ(bins_.Largest(), std::prev(model.end())->second);
  }
  EXPECT_TRUE(bins_.Validate().ok()) << bins_.Validate();
}

}  // namespace
}  // namespace gpualloc::core
