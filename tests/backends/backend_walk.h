// SPDX-License-Identifier: Apache-2.0
// tests/backends/backend_walk.h: one call of every Backend operation, in a
// valid order, for backend tests that check what each call leaves behind (the
// calling thread's context or device, say). Wrap it in
// ASSERT_NO_FATAL_FAILURE: a call that must succeed for the walk to go on is
// asserted.
#ifndef GPUALLOC_TESTS_BACKEND_WALK_H_
#define GPUALLOC_TESTS_BACKEND_WALK_H_

#include <cstdint>
#include <functional>

#include "absl/strings/string_view.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"

namespace gpualloc::testing {

// Allocates and frees `plain_bytes`, runs an event through record, query,
// a wait by `other`, synchronize and destroy, a pool block through allocate,
// free, trim and usage, and one granule through reserve, create, map, set
// access, unmap, release and free; `after(name)` follows each call.
inline void CallEveryOperation(
    Backend& b, std::uint64_t plain_bytes, Stream other,
    const std::function<void(absl::string_view)>& after) {
  const std::uint64_t g = b.info().min_granularity;
  EXPECT_TRUE(b.FreeBytes().ok());
  after("FreeBytes");
  auto plain = b.Allocate(plain_bytes);
  ASSERT_TRUE(plain.ok()) << plain.status();
  after("Allocate");
  EXPECT_TRUE(b.Free(*plain).ok());
  after("Free");

  auto event = b.CreateEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  after("CreateEvent");
  EXPECT_TRUE(b.RecordEvent(*event, Stream()).ok());
  after("RecordEvent");
  EXPECT_TRUE(b.QueryEvent(*event).ok());
  after("QueryEvent");
  EXPECT_TRUE(b.StreamWaitEvent(other, *event).ok());
  after("StreamWaitEvent");
  EXPECT_TRUE(b.SynchronizeEvent(*event).ok());
  after("SynchronizeEvent");
  EXPECT_TRUE(b.DestroyEvent(*event).ok());
  after("DestroyEvent");

  EXPECT_TRUE(b.ConfigurePool(PoolOptions()).ok());
  after("ConfigurePool");
  auto block = b.PoolAllocate(std::uint64_t{1} << 20, Stream());
  ASSERT_TRUE(block.ok()) << block.status();
  after("PoolAllocate");
  EXPECT_TRUE(b.PoolFree(*block, Stream()).ok());
  after("PoolFree");
  EXPECT_TRUE(b.PoolTrim(0).ok());
  after("PoolTrim");
  EXPECT_TRUE(b.GetPoolUsage().ok());
  after("GetPoolUsage");

  auto va = b.ReserveAddress(2 * g, 0);
  ASSERT_TRUE(va.ok()) << va.status();
  after("ReserveAddress");
  auto h = b.CreatePhysical(g);
  ASSERT_TRUE(h.ok()) << h.status();
  after("CreatePhysical");
  EXPECT_TRUE(b.Map(*va, g, *h).ok());
  after("Map");
  EXPECT_TRUE(b.SetAccess(*va, g).ok());
  after("SetAccess");
  EXPECT_TRUE(b.Unmap(*va, g).ok());
  after("Unmap");
  EXPECT_TRUE(b.ReleasePhysical(*h).ok());
  after("ReleasePhysical");
  EXPECT_TRUE(b.FreeAddress(*va, 2 * g).ok());
  after("FreeAddress");
}

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_BACKEND_WALK_H_
