// SPDX-License-Identifier: Apache-2.0
// tests/core/random_ops_test.cc: randomized operation sequences in every mode
// against the shared shadow model (tests/core/shadow_model.h), with the
// invariant validator after every operation.
//
// Memory is host-backed, so every live block carries a fill pattern that is
// checked before it is freed: an overlap or a corrupting split would show up.
// Besides allocations, frees and trims, the sequences inject device refusals,
// free on other streams, declare extra streams with RecordStream and try bad
// frees, which must change nothing. With tags, allocations carry one of a
// few tags and tags are put to sleep (with or without a backup) and woken
// at random: a sleeping tag's blocks refuse frees and new allocations, and
// their fill patterns survive a backup (or are written afresh after a Wake
// without one). The seed is printed;
// GPUALLOC_TEST_SEED=<seed> replays a failure.
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/core/allocator_modes.h"
#include "tests/core/shadow_model.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::AllocatorModeSpec;
using testing::kMiB;

// One run: a mode from the shared list (tests/core/allocator_modes.h, front
// caches included) and what varies around it.
struct Config {
  const char* name;
  AllocatorModeSpec mode;
  GrowthPolicy policy = GrowthPolicy::kExact;
  std::uint64_t split_bound = 0;
  bool gc = true;
  const char* profile = "h100";
  std::uint64_t min_block = 0;  // 0: the profile's
  int streams = 1;              // frees and RecordStream on streams 0..n-1
  int tags = 0;                 // allocations tagged 0..n; Sleep and Wake
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

constexpr int kSteps = 8000;
constexpr int kPhase = 1000;

class RandomOpsTest : public ::testing::TestWithParam<Config> {};

TEST_P(RandomOpsTest, ShadowModelAndValidatorAgreeAfterEveryOperation) {
  const Config& config = GetParam();
  const std::uint64_t seed = testing::TestSeed();
  std::cout << "GPUALLOC_TEST_SEED=" << seed << " (" << config.name << ")\n";
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);

  auto sim = testing::MakeSim(128 * kMiB, /*host_backed=*/true, config.profile);
  ASSERT_NE(sim, nullptr);
  // Small enough that the limit is hit often.
  Options o = testing::ModeOptions(config.mode, 64 * kMiB);
  o.growth_policy = config.policy;
  o.max_internal_fragmentation = config.split_bound;
  o.garbage_collection = config.gc;
  o.min_block_size = config.min_block;
  auto a = testing::MakeAllocator(o, sim);
  ASSERT_NE(a, nullptr);
  const std::uint64_t min_block =
      config.min_block != 0 ? config.min_block : 256;
  const SimOp growth = testing::GrowthOp(o);
  testing::ShadowModel shadow(min_block,
                              /*exact_sizes=*/config.split_bound == 0);
  // Front caches on several streams: peaks bounded above, by at most what
  // all caches together hold (4x front_cache).
  if (config.mode.front_cache != 0 && config.streams > 1) {
    shadow.set_peak_slack(4 * config.mode.front_cache);
  }

  int ooms = 0, allocs = 0, frees = 0, trims = 0, bad_frees = 0;
  int sleeps = 0, wakes = 0, refused = 0;
  std::map<std::uint64_t, Tag> tag_of;  // live tagged blocks
  std::set<Tag> asleep;
  const bool sleeps_here =
      o.mode == AllocatorMode::kBfc && config.mode.expandable;
  auto is_asleep = [&](std::uint64_t address) {
    auto it = tag_of.find(address);
    return it != tag_of.end() && asleep.contains(it->second);
  };
  // Wakes `tag`; without a backup its blocks are written afresh.
  auto wake = [&](Tag tag, bool backed_up) -> absl::Status {
    absl::Status s = a->Wake(tag);
    if (!s.ok()) return s;
    asleep.erase(tag);
    ++wakes;
    if (!backed_up) {
      for (const auto& [address, t] : tag_of) {
        if (t == tag) shadow.Fill(address);
      }
    }
    return s;
  };
  std::map<Tag, bool> backed_up;
  std::size_t peak_live = 0;
  auto random_stream = [&] { return Stream(rng() % config.streams); };
  auto random_live = [&] {
    auto it = shadow.blocks().begin();
    std::advance(it, rng() % shadow.blocks().size());
    return it->first;
  };
  std::vector<std::uint64_t> repeated_sizes(16);
  for (std::uint64_t& s : repeated_sizes) {
    s = (rng() % (1ull << (8 + rng() % 14))) + 1;
  }
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    // Alternate filling phases (mostly allocations, up to out of memory) with
    // draining phases (mostly frees).
    const int alloc_percent = (step / kPhase) % 2 == 0 ? 65 : 35;
    // Now and then the device refuses one of the next few requests.
    if (step % 250 == 0) sim->FailNthCall(growth, 1 + rng() % 4);
    const int op = static_cast<int>(rng() % 100);
    if (op < alloc_percent || shadow.blocks().empty()) {
      // Log-uniform sizes from 0 B to 16 MiB, sometimes a stricter alignment;
      // with front caches, half of them from 16 sizes that repeat.
      std::uint64_t size =
          (rng() % 50 == 0) ? 0 : (rng() % (1ull << (rng() % 25))) + 1;
      if (config.mode.front_cache != 0 && rng() % 2 == 0) {
        size = repeated_sizes[rng() % repeated_sizes.size()];
      }
      const std::uint64_t alignment =
          (rng() % 8 == 0) ? (256ull << (rng() % 10)) : 0;
      const Stream stream = random_stream();
      Tag tag = static_cast<Tag>(rng() % (config.tags + 1));
      if (asleep.contains(tag) && rng() % 8 != 0) tag = 0;  // now and then
      const Stats before = a->GetStats();
      auto p = a->Allocate(size, stream, alignment, tag);
      if (asleep.contains(tag)) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition)
            << p.status();
        ASSERT_EQ(a->GetStats().num_allocs, before.num_allocs);
        ++refused;
      } else if (!p.ok()) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
            << p.status();
        ASSERT_NE(p.status().message().find("out of memory"), std::string::npos)
            << p.status();
        const Stats after = a->GetStats();
        ASSERT_EQ(after.bytes_in_use, before.bytes_in_use);
        ++ooms;
      } else {
        GPUALLOC_ASSERT_OK(shadow.Add(Addr(*p), size, alignment, stream.handle,
                                      static_cast<unsigned char>(rng())));
        shadow.Fill(Addr(*p));
        if (tag != 0) tag_of[Addr(*p)] = tag;
        ++allocs;
        peak_live = std::max(peak_live, shadow.blocks().size());
      }
    } else if (op < 94) {
      std::uint64_t address = random_live();
      if (is_asleep(address) && rng() % 4 != 0) address = random_live();
      if (is_asleep(address)) {  // refused, nothing changes
        const Stats before = a->GetStats();
        ASSERT_EQ(a->Deallocate(reinterpret_cast<void*>(address)).code(),
                  absl::StatusCode::kFailedPrecondition);
        ASSERT_EQ(a->GetStats().bytes_in_use, before.bytes_in_use);
        ++refused;
      } else {
        GPUALLOC_ASSERT_OK(shadow.CheckFill(address));
        GPUALLOC_ASSERT_OK(
            a->Deallocate(reinterpret_cast<void*>(address), random_stream()));
        GPUALLOC_ASSERT_OK(shadow.Remove(address));
        tag_of.erase(address);
        ++frees;
      }
    } else if (op < 96 && config.tags > 0 && rng() % 2 == 0) {
      // Sleep or wake one tag.
      Tag tag = static_cast<Tag>(1 + rng() % config.tags);
      // Tags sleep for short spells.
      if (!asleep.empty() && rng() % 4 != 0) tag = *asleep.begin();
      if (asleep.contains(tag)) {
        absl::Status s = wake(tag, backed_up[tag]);
        // The limit has no room for it: the program frees memory (blocks of
        // tags awake) until it has.
        for (int i = 0; absl::IsResourceExhausted(s) && i < 64; ++i) {
          std::uint64_t victim = random_live();
          if (is_asleep(victim)) continue;
          GPUALLOC_ASSERT_OK(shadow.CheckFill(victim));
          GPUALLOC_ASSERT_OK(a->Deallocate(reinterpret_cast<void*>(victim)));
          GPUALLOC_ASSERT_OK(shadow.Remove(victim));
          tag_of.erase(victim);
          ++frees;
          GPUALLOC_ASSERT_OK(a->Trim());
          s = wake(tag, backed_up[tag]);
          if (shadow.blocks().empty()) break;
        }
        // The limit may have no room for it now.
        if (!s.ok()) {
          ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
        }
      } else {
        const bool backup = rng() % 2 == 0;
        absl::StatusOr<SleepReport> r = a->Sleep(tag, backup);
        if (!sleeps_here) {
          ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
              << r.status();
        } else {
          GPUALLOC_ASSERT_OK(r.status());
          std::uint64_t live = 0;
          for (const auto& [address, t] : tag_of) live += t == tag ? 1 : 0;
          ASSERT_EQ(r->allocations, live);
          ASSERT_EQ(r->bytes_kept, 0u);
          asleep.insert(tag);
          backed_up[tag] = backup;
          ++sleeps;
        }
      }
    } else if (op < 96) {
      GPUALLOC_ASSERT_OK(a->Trim());
      ++trims;
    } else if (op < 98 && config.streams > 1) {
      const std::uint64_t address = random_live();
      const absl::Status s =
          a->RecordStream(reinterpret_cast<void*>(address), random_stream());
      if (is_asleep(address)) {
        ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      } else {
        GPUALLOC_ASSERT_OK(s);
      }
    } else {
      // A bad free, interior or of a block freed lately: a clear Status
      // naming the address, and nothing changes.
      ++bad_frees;
      const Stats before = a->GetStats();
      std::uint64_t address;
      absl::StatusCode code = absl::StatusCode::kInvalidArgument;
      if (rng() % 2 == 0 || shadow.recently_freed().empty()) {
        address = random_live();
        address += shadow.blocks().at(address).size / 2;
      } else {
        address =
            shadow.recently_freed()[rng() % shadow.recently_freed().size()];
        // Freed memory may lie inside a block handed out since.
        if (shadow.Containing(address) == nullptr) {
          code = absl::StatusCode::kFailedPrecondition;
        }
      }
      const absl::Status s =
          a->Deallocate(reinterpret_cast<void*>(address), random_stream());
      // A region returned since makes a freed address a foreign one.
      if (s.code() != code) {
        ASSERT_EQ(code, absl::StatusCode::kFailedPrecondition) << s;
        ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      }
      ASSERT_NE(s.message().find(absl::StrFormat("%#x", address)),
                std::string::npos)
          << s;
      const Stats after = a->GetStats();
      ASSERT_EQ(after.bytes_in_use, before.bytes_in_use);
      ASSERT_EQ(after.backend_frees, before.backend_frees);
      ASSERT_EQ(after.num_allocs, before.num_allocs);
    }
    GPUALLOC_ASSERT_OK(a->Validate());
    const Stats s = a->GetStats();
    GPUALLOC_ASSERT_OK(shadow.CheckStats(s));
    // Every mode, async included: the pool's reserved memory too.
    ASSERT_LE(s.bytes_reserved, s.bytes_limit);
    ASSERT_EQ(s.num_ooms, static_cast<std::uint64_t>(ooms));
    // Platform and async: each live block is one device (or pool)
    // allocation; nothing free is cached.
    if (o.mode != AllocatorMode::kBfc) {
      ASSERT_EQ(s.backend_allocs - s.backend_frees, shadow.blocks().size());
      ASSERT_EQ(s.largest_free_block_bytes, 0u);
      ASSERT_EQ(s.fragmentation, 0.0);
    }
    if (o.mode == AllocatorMode::kPlatform) {
      ASSERT_EQ(sim->live_allocations(), shadow.blocks().size());
      ASSERT_EQ(s.bytes_reserved, sim->bytes_allocated());
    }
  }
  // Every tag awake (freeing untagged blocks while the limit has no room);
  // a fault armed near the end must not fail these wakes.
  sim->ClearFaults();
  while (!asleep.empty()) {
    const Tag tag = *asleep.begin();
    const absl::Status s = wake(tag, backed_up[tag]);
    if (s.ok()) continue;
    ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    std::uint64_t victim = 0;
    for (const auto& [address, block] : shadow.blocks()) {
      if (!is_asleep(address)) victim = address;
    }
    ASSERT_NE(victim, 0u) << s;
    GPUALLOC_ASSERT_OK(a->Deallocate(reinterpret_cast<void*>(victim)));
    GPUALLOC_ASSERT_OK(shadow.Remove(victim));
    tag_of.erase(victim);
    GPUALLOC_ASSERT_OK(a->Trim());
  }
  std::cout << "  " << allocs << " allocations, " << frees << " frees, "
            << sleeps << " sleeps, " << wakes << " wakes, " << refused
            << " refused (tag asleep), " << trims << " trims, " << bad_frees
            << " bad frees, " << ooms << " out-of-memory answers, peak "
            << peak_live << " live blocks, " << a->GetStats().backend_allocs
            << " backend allocations, " << a->GetStats().front_cache_hits
            << " front cache hits\n";
  // Every path was exercised.
  EXPECT_GT(allocs, kSteps / 4);
  EXPECT_GT(frees, kSteps / 4);
  EXPECT_GT(ooms, 10);
  EXPECT_GT(bad_frees, 0);
  EXPECT_GT(peak_live, 50u);
  if (config.mode.front_cache != 0 && config.tags == 0) {
    EXPECT_GT(a->GetStats().front_cache_hits, 30u);
  }
  if (config.tags > 0 && sleeps_here) {
    EXPECT_GT(sleeps, 5);
    EXPECT_GT(refused, 10);
  }
  // Containment: every live block lies inside a block of the snapshot, and
  // in the async and platform modes each is a block of its own.
  const Snapshot snap = a->GetSnapshot();
  if (o.mode != AllocatorMode::kBfc) {
    EXPECT_EQ(snap.regions.size(), shadow.blocks().size());
  }
  for (const auto& [address, block] : shadow.blocks()) {
    bool inside = false;
    for (const RegionSnapshot& r : snap.regions) {
      inside |= address >= r.base && address + block.size <= r.base + r.size;
    }
    ASSERT_TRUE(inside) << address;
  }
  GPUALLOC_ASSERT_OK(shadow.CheckAllFills());
  while (!shadow.blocks().empty()) {
    const std::uint64_t address = shadow.blocks().begin()->first;
    GPUALLOC_ASSERT_OK(a->Deallocate(reinterpret_cast<void*>(address)));
    GPUALLOC_ASSERT_OK(shadow.Remove(address));
  }
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

using testing::kAsync;
using testing::kBfcExpandable;
using testing::kBfcExpandableFrontCache;
using testing::kBfcExpandablePreallocated;
using testing::kBfcExpandablePreallocatedFrontCache;
using testing::kBfcPreallocated;
using testing::kBfcPreallocatedFrontCache;
using testing::kBfcSeparate;
using testing::kBfcSeparateFrontCache;
using testing::kPlatform;

constexpr Config kConfigs[] = {
    // BFC over separate regions: the growth policies, the split bound,
    // no garbage collection, AMD's 4 KiB alignment and granularity, a
    // larger minimum block, and frees on three streams.
    {.name = "separate_preallocate", .mode = kBfcPreallocated},
    {.name = "separate_growth_exact", .mode = kBfcSeparate},
    {.name = "separate_growth_doubling",
     .mode = kBfcSeparate,
     .policy = GrowthPolicy::kDoubling,
     .streams = 3},
    {.name = "separate_split_bound_64k",
     .mode = kBfcSeparate,
     .split_bound = 64 * 1024},
    {.name = "separate_no_gc", .mode = kBfcSeparate, .gc = false},
    {.name = "separate_mi300x", .mode = kBfcSeparate, .profile = "mi300x"},
    {.name = "separate_min_block_4k",
     .mode = kBfcSeparate,
     .policy = GrowthPolicy::kDoubling,
     .min_block = 4096},
    // BFC over expandable regions.
    {.name = "expandable_growth", .mode = kBfcExpandable, .streams = 3},
    {.name = "expandable_preallocate", .mode = kBfcExpandablePreallocated},
    {.name = "expandable_mi300x", .mode = kBfcExpandable, .profile = "mi300x"},
    {.name = "expandable_min_block_64",
     .mode = kBfcExpandable,
     .min_block = 64},
    // Tags with Sleep and Wake (separate regions: tags without sleep).
    {.name = "expandable_tags",
     .mode = kBfcExpandable,
     .streams = 3,
     .tags = 2},
    {.name = "expandable_preallocate_tags",
     .mode = kBfcExpandablePreallocated,
     .streams = 1,
     .tags = 3},
    {.name = "separate_tags", .mode = kBfcSeparate, .streams = 3, .tags = 2},
    // Front caches: one stream, three streams, and tags turning them
    // off halfway (the first tagged allocation).
    {.name = "preallocate_front_cache", .mode = kBfcPreallocatedFrontCache},
    {.name = "separate_front_cache",
     .mode = kBfcSeparateFrontCache,
     .streams = 3},
    {.name = "expandable_front_cache",
     .mode = kBfcExpandableFrontCache,
     .streams = 3},
    {.name = "expandable_preallocate_front_cache",
     .mode = kBfcExpandablePreallocatedFrontCache,
     .streams = 3},
    {.name = "expandable_tags_front_cache",
     .mode = kBfcExpandableFrontCache,
     .streams = 3,
     .tags = 2},
    // The platform and async modes, on three streams.
    {.name = "platform_h100", .mode = kPlatform, .streams = 3},
    {.name = "platform_mi300x",
     .mode = kPlatform,
     .profile = "mi300x",
     .streams = 3},
    {.name = "async", .mode = kAsync, .streams = 3},
};

INSTANTIATE_TEST_SUITE_P(Configs, RandomOpsTest, ::testing::ValuesIn(kConfigs),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// Every mode of the shared list runs here.
TEST(RandomOpsModesTest, EveryModeHasAConfiguration) {
  for (const AllocatorModeSpec& mode : testing::kAllModes) {
    bool found = false;
    for (const Config& c : kConfigs)
      found |= std::string(c.mode.name) == mode.name;
    EXPECT_TRUE(found) << mode.name;
  }
}

}  // namespace
}  // namespace gpualloc
