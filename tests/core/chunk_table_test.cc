// SPDX-License-Identifier: Apache-2.0
// tests/core/chunk_table_test.cc: chunk records and id recycling.
#include "core/bfc/chunk_table.h"

#include "gtest/gtest.h"

namespace gpualloc::core {
namespace {

TEST(ChunkTableTest, NewDeleteRecyclesIds) {
  ChunkTable t;
  const ChunkId a = t.New();
  const ChunkId b = t.New();
  EXPECT_NE(a, b);
  EXPECT_EQ(t.live_count(), 2u);
  t[a].size = 42;
  t.Delete(a);
  EXPECT_FALSE(t.IsLive(a));
  EXPECT_EQ(t.live_count(), 1u);
  const ChunkId c = t.New();
  EXPECT_EQ(c, a);              // recycled
  EXPECT_EQ(t[c].size, 0u);     // and reset
  EXPECT_EQ(t.capacity(), 2u);  // no new record
  EXPECT_TRUE(t.IsLive(b));
}

TEST(ChunkTableTest, NoGrowthInSteadyState) {
  ChunkTable t;
  std::vector<ChunkId> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back(t.New());
  for (ChunkId id : ids) t.Delete(id);  // the free list reaches its size once
  for (ChunkId& id : ids) id = t.New();
  const std::size_t bytes = t.MemoryBytes();
  for (int round = 0; round < 100; ++round) {
    for (ChunkId id : ids) t.Delete(id);
    for (ChunkId& id : ids) id = t.New();
  }
  EXPECT_EQ(t.MemoryBytes(), bytes);
  EXPECT_EQ(t.capacity(), 1000u);
}

}  // namespace
}  // namespace gpualloc::core
