// tests/random_ops_test.cc: randomized operation sequences against a shadow
// model, with the invariant validator after every operation.
//
// Memory is host-backed, so every live block carries a fill pattern that is
// checked before it is freed: an overlap or a corrupting split would show up.
// The seed is printed; GPUALLOC_TEST_SEED=<seed> replays a failure.
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kKiB;
using testing::kMiB;

struct Block {
  std::uint64_t size;
  std::uint64_t alignment;
  unsigned char tag;
};

// Writes (or checks) the pattern at the ends and at a few points inside.
bool Pattern(unsigned char* p, std::uint64_t size, unsigned char tag,
             bool write) {
  auto touch = [&](std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t i = from; i < to && i < size; ++i) {
      const unsigned char want = static_cast<unsigned char>(tag + i * 131);
      if (write) {
        p[i] = want;
      } else if (p[i] != want) {
        return false;
      }
    }
    return true;
  };
  if (size <= 4 * kKiB) return touch(0, size);
  bool ok = touch(0, 256) && touch(size - 256, size);
  for (std::uint64_t at = size / 4; ok && at < size; at += size / 4)
    ok = touch(at, at + 64);
  return ok;
}

struct Config {
  const char* name;
  bool preallocate;
  GrowthPolicy policy;
  std::uint64_t split_bound;
  bool gc;
  const char* profile = "h100";
  std::uint64_t min_block = 0;  // 0: the profile's
};

class RandomOpsTest : public ::testing::TestWithParam<Config> {};

TEST_P(RandomOpsTest, ShadowModelAndValidatorAgreeAfterEveryOperation) {
  const Config& config = GetParam();
  const std::uint64_t seed = testing::TestSeed();
  std::cout << "GPUALLOC_TEST_SEED=" << seed << " (" << config.name << ")\n";
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);

  auto sim = testing::MakeSim(128 * kMiB, /*host_backed=*/true, config.profile);
  Options o;
  o.preallocate = config.preallocate;
  o.memory_limit = 64 * kMiB;  // small enough that the limit is hit often
  o.growth_policy = config.policy;
  o.max_internal_fragmentation = config.split_bound;
  o.garbage_collection = config.gc;
  o.min_block_size = config.min_block;
  auto a = testing::MakeAllocator(o, sim);
  ASSERT_NE(a, nullptr);

  std::map<std::uint64_t, Block> live;  // address -> block (the shadow model)
  std::uint64_t requested = 0;
  int ooms = 0, allocs = 0, frees = 0, trims = 0;
  std::size_t peak_live = 0;
  for (int step = 0; step < 20000; ++step) {
    // Alternate filling phases (mostly allocations, up to out of memory) with
    // draining phases (mostly frees), 1000 steps each.
    const int alloc_percent = (step / 1000) % 2 == 0 ? 65 : 35;
    // Now and then the device refuses one of the next few allocations.
    if (step % 250 == 0) sim->FailNthCall(SimOp::kAllocate, 1 + rng() % 4);
    const int op = static_cast<int>(rng() % 100);
    if (op < alloc_percent || live.empty()) {
      // Log-uniform sizes from 0 B to 16 MiB, sometimes a stricter alignment.
      const std::uint64_t size =
          (rng() % 50 == 0) ? 0 : (rng() % (1ull << (rng() % 25))) + 1;
      const std::uint64_t alignment =
          (rng() % 8 == 0) ? (256ull << (rng() % 10)) : 0;
      auto p = a->Allocate(size, Stream(), alignment);
      if (!p.ok()) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
            << p.status();
        ++ooms;
      } else {
        const std::uint64_t addr = Addr(*p);
        ASSERT_NE(*p, nullptr);
        if (alignment != 0) {
          ASSERT_EQ(addr % alignment, 0u);
        }
        ASSERT_EQ(addr % (config.min_block != 0 ? config.min_block : 256), 0u);
        // No overlap with the neighbours in the model.
        auto next = live.lower_bound(addr);
        if (next != live.end()) {
          ASSERT_GE(next->first, addr + std::max<std::uint64_t>(size, 1));
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + std::max<std::uint64_t>(prev->second.size, 1),
                    addr);
        }
        const unsigned char tag = static_cast<unsigned char>(rng());
        Pattern(static_cast<unsigned char*>(*p), size, tag, true);
        live[addr] = Block{size, alignment, tag};
        requested += size;
        ++allocs;
        peak_live = std::max(peak_live, live.size());
      }
    } else if (op < 97) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      auto* p = reinterpret_cast<unsigned char*>(it->first);
      ASSERT_TRUE(Pattern(p, it->second.size, it->second.tag, false))
          << "block at " << static_cast<void*>(p) << " of " << it->second.size
          << " bytes was overwritten";
      GPUALLOC_ASSERT_OK(a->Deallocate(p));
      requested -= it->second.size;
      live.erase(it);
      ++frees;
    } else {
      GPUALLOC_ASSERT_OK(a->Trim());
      ++trims;
    }
    GPUALLOC_ASSERT_OK(a->Validate());
    const Stats s = a->GetStats();
    ASSERT_EQ(s.bytes_requested, requested);
    ASSERT_LE(s.bytes_reserved, s.bytes_limit);
    ASSERT_EQ(s.num_ooms, static_cast<std::uint64_t>(ooms));
  }
  std::cout << "  " << allocs << " allocations, " << frees << " frees, "
            << trims << " trims, " << ooms << " out-of-memory answers, peak "
            << peak_live << " live blocks, " << a->GetStats().backend_allocs
            << " backend allocations\n";
  // Every path was exercised.
  EXPECT_GT(allocs, 5000);
  EXPECT_GT(frees, 5000);
  EXPECT_GT(ooms, 10);
  EXPECT_GT(peak_live, 50u);
  // Containment: every live block lies inside a region of the snapshot.
  const Snapshot snap = a->GetSnapshot();
  for (const auto& [addr, block] : live) {
    bool inside = false;
    for (const RegionSnapshot& r : snap.regions) {
      inside |= addr >= r.base && addr + block.size <= r.base + r.size;
    }
    ASSERT_TRUE(inside) << addr;
  }
  for (const auto& [addr, block] : live) {
    ASSERT_TRUE(Pattern(reinterpret_cast<unsigned char*>(addr), block.size,
                        block.tag, false));
    GPUALLOC_ASSERT_OK(a->Deallocate(reinterpret_cast<void*>(addr)));
  }
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RandomOpsTest,
    ::testing::Values(
        Config{"preallocate", true, GrowthPolicy::kExact, 0, true},
        Config{"growth_exact", false, GrowthPolicy::kExact, 0, true},
        Config{"growth_doubling", false, GrowthPolicy::kDoubling, 0, true},
        Config{"split_bound_64k", false, GrowthPolicy::kExact, 64 * 1024, true},
        Config{"no_gc", false, GrowthPolicy::kExact, 0, false},
        // AMD: 4 KiB plain-allocation alignment and minimum granularity.
        Config{"mi300x_growth", false, GrowthPolicy::kExact, 0, true, "mi300x"},
        Config{"mi300x_preallocate", true, GrowthPolicy::kExact, 0, true,
               "mi300x"},
        // Other minimum block sizes.
        Config{"min_block_64", false, GrowthPolicy::kExact, 0, true, "h100",
               64},
        Config{"min_block_4k", false, GrowthPolicy::kDoubling, 0, true, "h100",
               4096}),
    [](const ::testing::TestParamInfo<Config>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace gpualloc
