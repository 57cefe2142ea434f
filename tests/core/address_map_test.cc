// SPDX-License-Identifier: Apache-2.0
// tests/core/address_map_test.cc: the open-addressing address -> chunk id map.
#include "core/address_map.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/bfc/chunk_table.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

// Every key in `expected` maps to its id, and the sizes agree.
void ExpectSameContents(
    const AddressMap& map,
    const std::unordered_map<std::uint64_t, ChunkId>& expected) {
  ASSERT_EQ(map.size(), expected.size());
  for (const auto& [address, id] : expected) {
    ASSERT_EQ(map.Find(address), id) << "address " << address;
  }
}

// The map's hash is Fibonacci hashing: home = (address * kGolden) >> (64 -
// log2(capacity)). Since kGolden is odd it is invertible mod 2^64, so we can
// build addresses whose products have chosen top bits, i.e. addresses that
// share a home slot at every capacity up to 2^kFixedBits. Should the hash
// change, these are just ordinary keys and the tests below still check
// correctness; they only lose their collision pressure.
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr int kFixedBits = 20;

constexpr std::uint64_t InverseMod2To64(std::uint64_t odd) {
  std::uint64_t inv = odd;  // correct to 3 bits; each step doubles that
  for (int i = 0; i < 6; ++i) inv *= 2 - odd * inv;
  return inv;
}
constexpr std::uint64_t kGoldenInverse = InverseMod2To64(kGolden);
static_assert(kGolden * kGoldenInverse == 1);

// An address whose hash product has top kFixedBits bits `prefix` and low bits
// `low` (low < 2^(64 - kFixedBits)); never 0.
std::uint64_t AddressWithHashPrefix(std::uint64_t prefix, std::uint64_t low) {
  const std::uint64_t product = (prefix << (64 - kFixedBits)) | low;
  const std::uint64_t address = product * kGoldenInverse;
  return address == 0 ? kGoldenInverse : address;  // product 1 instead of 0
}

constexpr std::uint64_t kLastPrefix = (std::uint64_t{1} << kFixedBits) - 1;

TEST(AddressMapTest, EngineeredKeysShareHomeSlots) {
  // Sanity check of the helper (not of the map): the products have the
  // requested top bits.
  for (std::uint64_t low : {1ull, 2ull, 12345ull, (1ull << 44) - 1}) {
    EXPECT_EQ((AddressWithHashPrefix(kLastPrefix, low) * kGolden) >>
                  (64 - kFixedBits),
              kLastPrefix);
    EXPECT_EQ((AddressWithHashPrefix(0, low) * kGolden) >> (64 - kFixedBits),
              0u);
  }
}

TEST(AddressMapTest, EmptyMap) {
  AddressMap m;
  EXPECT_EQ(m.size(), 0u);
  EXPECT_GT(m.MemoryBytes(), 0u);
  EXPECT_EQ(m.Find(0x1000), kNoChunk);
  EXPECT_EQ(m.Find(1), kNoChunk);
  EXPECT_EQ(m.Find(UINT64_MAX), kNoChunk);
  EXPECT_EQ(m.Erase(0x1000), kNoChunk);
  EXPECT_EQ(m.size(), 0u);
}

TEST(AddressMapTest, InsertFindErase) {
  AddressMap m;
  m.Insert(0x1000, 7);
  m.Insert(0x2000, 8);
  m.Insert(UINT64_MAX, 9);
  m.Insert(1, 0);  // id 0 is a valid id
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m.Find(0x1000), 7u);
  EXPECT_EQ(m.Find(0x2000), 8u);
  EXPECT_EQ(m.Find(UINT64_MAX), 9u);
  EXPECT_EQ(m.Find(1), 0u);
  EXPECT_EQ(m.Find(0x3000), kNoChunk);

  EXPECT_EQ(m.Erase(0x1000), 7u);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.Find(0x1000), kNoChunk);
  EXPECT_EQ(m.Find(0x2000), 8u);
  EXPECT_EQ(m.Erase(0x1000), kNoChunk);  // already gone
  EXPECT_EQ(m.size(), 3u);

  // Re-insert the erased address with a new id.
  m.Insert(0x1000, 70);
  EXPECT_EQ(m.Find(0x1000), 70u);
  EXPECT_EQ(m.Erase(UINT64_MAX), 9u);
  EXPECT_EQ(m.Erase(1), 0u);
  EXPECT_EQ(m.Erase(0x2000), 8u);
  EXPECT_EQ(m.Erase(0x1000), 70u);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.Find(0x1000), kNoChunk);
}

TEST(AddressMapTest, EraseOfAbsentKeyChangesNothing) {
  AddressMap m;
  std::unordered_map<std::uint64_t, ChunkId> expected;
  // A long cluster at the last home slot that wraps around into slot 0, plus
  // keys at home 0, so absent keys with the same homes probe through it.
  for (std::uint64_t i = 1; i <= 20; ++i) {
    const std::uint64_t a = AddressWithHashPrefix(kLastPrefix, i);
    const std::uint64_t b = AddressWithHashPrefix(0, i);
    m.Insert(a, static_cast<ChunkId>(i));
    m.Insert(b, static_cast<ChunkId>(100 + i));
    expected[a] = static_cast<ChunkId>(i);
    expected[b] = static_cast<ChunkId>(100 + i);
  }
  for (std::uint64_t i = 0; i < 200; ++i) {
    m.Insert(0x10000 * (i + 1), static_cast<ChunkId>(1000 + i));
    expected[0x10000 * (i + 1)] = static_cast<ChunkId>(1000 + i);
  }
  const std::size_t bytes = m.MemoryBytes();
  const std::vector<std::uint64_t> absent = {
      AddressWithHashPrefix(kLastPrefix, 21),
      AddressWithHashPrefix(kLastPrefix, 1000),
      AddressWithHashPrefix(0, 21),
      AddressWithHashPrefix(1, 5),
      0x10000 * 201,
      0x10000 + 1,
      UINT64_MAX,
      0,
  };
  for (std::uint64_t a : absent) {
    ASSERT_EQ(expected.count(a), 0u);
    EXPECT_EQ(m.Erase(a), kNoChunk) << a;
    EXPECT_EQ(m.Find(a), kNoChunk) << a;
    EXPECT_EQ(m.MemoryBytes(), bytes);
    ExpectSameContents(m, expected);
  }
}

TEST(AddressMapTest, AddressZeroIsNeverFound) {
  AddressMap m;
  EXPECT_EQ(m.Find(0), kNoChunk);
  EXPECT_EQ(m.Erase(0), kNoChunk);
  // Fill well past the minimum capacity, so that empty slots (address 0) are
  // everywhere: none of them may read as a hit for address 0.
  for (std::uint64_t i = 1; i <= 1000; ++i) {
    m.Insert(i * 4096, static_cast<ChunkId>(i));
  }
  EXPECT_EQ(m.Find(0), kNoChunk);
  EXPECT_EQ(m.Erase(0), kNoChunk);
  EXPECT_EQ(m.size(), 1000u);
  for (std::uint64_t i = 1; i <= 1000; ++i) {
    ASSERT_EQ(m.Find(i * 4096), static_cast<ChunkId>(i));
  }
  for (std::uint64_t i = 1; i <= 1000; ++i) {
    ASSERT_EQ(m.Erase(i * 4096), static_cast<ChunkId>(i));
  }
  EXPECT_EQ(m.Find(0), kNoChunk);
  EXPECT_EQ(m.Erase(0), kNoChunk);
  EXPECT_EQ(m.size(), 0u);
}

#if GPUALLOC_DEBUG_CHECKS >= 1 && GTEST_HAS_DEATH_TEST
TEST(AddressMapDeathTest, InsertOfAddressZeroIsABug) {
  AddressMap m;
  EXPECT_DEATH(m.Insert(0, 1), "internal check failed");
}

TEST(AddressMapDeathTest, DuplicateInsertIsABug) {
  AddressMap m;
  m.Insert(0x1000, 1);
  EXPECT_DEATH(m.Insert(0x1000, 2), "internal check failed");
}
#endif

TEST(AddressMapTest, GrowsThroughManyRehashes) {
  AddressMap m;
  constexpr std::uint64_t kCount = 1 << 17;  // from 64 slots: 12 doublings
  std::size_t rehashes = 0;
  std::size_t bytes = m.MemoryBytes();
  for (std::uint64_t i = 0; i < kCount; ++i) {
    // Aligned addresses, as a backend hands out; a multiplicative step spreads
    // them over the address space.
    const std::uint64_t address = 0x7f0000000000ull + i * 0x200;
    m.Insert(address, static_cast<ChunkId>(i));
    ASSERT_EQ(m.size(), i + 1);
    if (m.MemoryBytes() != bytes) {
      ASSERT_GT(m.MemoryBytes(), bytes);
      bytes = m.MemoryBytes();
      ++rehashes;
      // Everything inserted so far survived the rehash.
      for (std::uint64_t k = 0; k <= i; ++k) {
        ASSERT_EQ(m.Find(0x7f0000000000ull + k * 0x200),
                  static_cast<ChunkId>(k))
            << "after rehash " << rehashes << " at size " << i + 1;
      }
    }
  }
  EXPECT_GE(rehashes, 10u);
  EXPECT_EQ(m.Find(0x7f0000000000ull + kCount * 0x200), kNoChunk);
  // Erase every other entry, then the rest.
  for (std::uint64_t i = 0; i < kCount; i += 2) {
    ASSERT_EQ(m.Erase(0x7f0000000000ull + i * 0x200), static_cast<ChunkId>(i));
  }
  EXPECT_EQ(m.size(), kCount / 2);
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(m.Find(0x7f0000000000ull + i * 0x200),
              i % 2 == 0 ? kNoChunk : static_cast<ChunkId>(i));
  }
  for (std::uint64_t i = 1; i < kCount; i += 2) {
    ASSERT_EQ(m.Erase(0x7f0000000000ull + i * 0x200), static_cast<ChunkId>(i));
  }
  EXPECT_EQ(m.size(), 0u);
}

TEST(AddressMapTest, MultiplesOfALargePowerOfTwo) {
  // Addresses that differ only in their high bits (1 GiB, 2^40 and 2^56
  // strides, e.g. one region per device) must still spread and round-trip.
  for (int shift : {30, 40, 56}) {
    SCOPED_TRACE("stride 2^" + std::to_string(shift));
    AddressMap m;
    const std::uint64_t count = shift == 56 ? 255 : 4000;
    for (std::uint64_t i = 1; i <= count; ++i) {
      m.Insert(i << shift, static_cast<ChunkId>(i));
    }
    EXPECT_EQ(m.size(), count);
    for (std::uint64_t i = 1; i <= count; ++i) {
      ASSERT_EQ(m.Find(i << shift), static_cast<ChunkId>(i));
    }
    for (std::uint64_t i = 1; i <= count; i += 3) {
      ASSERT_EQ(m.Erase(i << shift), static_cast<ChunkId>(i));
    }
    for (std::uint64_t i = 1; i <= count; ++i) {
      ASSERT_EQ(m.Find(i << shift),
                (i - 1) % 3 == 0 ? kNoChunk : static_cast<ChunkId>(i));
    }
  }
}

TEST(AddressMapTest, BackwardShiftAcrossTheWrapAround) {
  // Two clusters: one homed at the last slot (it wraps into slot 0 onward) and
  // one homed at slot 0, interleaved in insertion order. Erasing from the front
  // of the wrapped run must pull members across the end of the table.
  AddressMap m;
  std::unordered_map<std::uint64_t, ChunkId> expected;
  std::vector<std::uint64_t> keys;
  for (std::uint64_t i = 1; i <= 24; ++i) {
    keys.push_back(AddressWithHashPrefix(kLastPrefix, i));
    keys.push_back(AddressWithHashPrefix(0, i));
    keys.push_back(AddressWithHashPrefix(1, i));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    m.Insert(keys[i], static_cast<ChunkId>(i));
    expected[keys[i]] = static_cast<ChunkId>(i);
  }
  ExpectSameContents(m, expected);
  // Erase in several orders: first-inserted first, last first, middle out.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < keys.size(); i += 3) order.push_back(i);
  for (std::size_t i = keys.size(); i-- > 0;) {
    if (i % 3 != 0) order.push_back(i);
  }
  for (std::size_t i : order) {
    ASSERT_EQ(m.Erase(keys[i]), static_cast<ChunkId>(i));
    expected.erase(keys[i]);
    ExpectSameContents(m, expected);
    // Absent members of the same clusters stay absent.
    ASSERT_EQ(m.Find(AddressWithHashPrefix(kLastPrefix, 999)), kNoChunk);
    ASSERT_EQ(m.Find(AddressWithHashPrefix(0, 999)), kNoChunk);
  }
  EXPECT_EQ(m.size(), 0u);
}

// Draws keys from a few pools chosen to collide: multiples of 2^40, keys homed
// at the last slot / slot 0 / near slot 0 (wrap-around clusters), a dense run
// of 256-byte aligned addresses, and random 64-bit values.
class KeySource {
 public:
  explicit KeySource(std::mt19937_64& rng) : rng_(rng) {}

  std::uint64_t Next() {
    std::uint64_t key = 0;
    while (key == 0) key = Draw();
    return key;
  }

 private:
  std::uint64_t Draw() {
    const std::uint64_t r = rng_();
    const std::uint64_t small = (r >> 8) % 600;  // pools are small: reuse keys
    switch (r % 8) {
      case 0:
        return (small + 1) << 40;
      case 1:
      case 2:
        return AddressWithHashPrefix(kLastPrefix, small + 1);
      case 3:
        return AddressWithHashPrefix(0, small + 1);
      case 4:
        // Home 1 at 64 slots, 2 at 128, ...: a cluster just after slot 0's.
        return AddressWithHashPrefix(std::uint64_t{1} << (kFixedBits - 7),
                                     small + 1);
      case 5:
        return 0x7f0000000000ull + small * 256;
      default:
        return rng_();
    }
  }

  std::mt19937_64& rng_;
};

TEST(AddressMapTest, RandomizedAgainstUnorderedMap) {
  const std::uint64_t seed = gpualloc::testing::TestSeed();
  SCOPED_TRACE("GPUALLOC_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  KeySource keys(rng);
  AddressMap m;
  std::unordered_map<std::uint64_t, ChunkId> expected;
  std::vector<std::uint64_t> live;  // the keys of `expected`, for sampling
  std::unordered_map<std::uint64_t, std::size_t> live_index;
  ChunkId next_id = 0;

  const auto insert = [&](std::uint64_t key) {
    if (expected.count(key) != 0) return;
    const ChunkId id = next_id++;
    m.Insert(key, id);
    expected[key] = id;
    live_index[key] = live.size();
    live.push_back(key);
  };
  const auto erase_at = [&](std::size_t index) {
    const std::uint64_t key = live[index];
    ASSERT_EQ(m.Erase(key), expected.at(key)) << "key " << key;
    expected.erase(key);
    live_index[live.back()] = index;
    live[index] = live.back();
    live.pop_back();
    live_index.erase(key);
  };

  constexpr int kPhases = 40;
  for (int phase = 0; phase < kPhases; ++phase) {
    SCOPED_TRACE("phase " + std::to_string(phase));
    // Alternate growth phases with erase-heavy phases; every fourth phase
    // drains the map completely, so it runs empty at large capacity too.
    const bool erase_heavy = phase % 2 == 1;
    const bool drain = phase % 4 == 3;
    const int ops = 2000 + static_cast<int>(rng() % 3000);
    for (int op = 0; op < ops; ++op) {
      const std::uint64_t r = rng() % 100;
      const int erase_pct = erase_heavy ? 75 : 30;
      if (r < static_cast<std::uint64_t>(erase_pct) && !live.empty()) {
        erase_at(rng() % live.size());
      } else if (r < 90) {
        insert(keys.Next());
      } else {
        // Lookups and erases of keys that may be absent.
        const std::uint64_t key = keys.Next();
        const auto it = expected.find(key);
        const ChunkId want = it == expected.end() ? kNoChunk : it->second;
        ASSERT_EQ(m.Find(key), want) << "key " << key;
        if (want == kNoChunk) {
          ASSERT_EQ(m.Erase(key), kNoChunk) << "key " << key;
        }
      }
      if (HasFatalFailure()) return;
      ASSERT_EQ(m.size(), expected.size());
    }
    if (drain) {
      while (!live.empty()) {
        erase_at(rng() % live.size());
        if (HasFatalFailure()) return;
      }
    }
    ExpectSameContents(m, expected);
    if (HasFatalFailure()) return;
    ASSERT_EQ(m.Find(0), kNoChunk);
  }
  while (!live.empty()) {
    erase_at(rng() % live.size());
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(m.size(), 0u);
}

TEST(AddressMapTest, MemoryGrowsWithEntriesNotWithKeyMagnitude) {
  constexpr std::uint64_t kCount = 5000;
  AddressMap small_keys;
  AddressMap huge_keys;
  for (std::uint64_t i = 1; i <= kCount; ++i) {
    small_keys.Insert(i, static_cast<ChunkId>(i));
    huge_keys.Insert(UINT64_MAX - i * (std::uint64_t{1} << 44),
                     static_cast<ChunkId>(i));
  }
  // Same number of entries, same footprint, however far apart the keys are.
  EXPECT_EQ(small_keys.MemoryBytes(), huge_keys.MemoryBytes());
  // The footprint is proportional to the entry count (load factor at most
  // 1/2, at least 1/4 after a doubling): well under a few words per entry,
  // whereas the keys span ~2^64 bytes.
  EXPECT_LE(huge_keys.MemoryBytes(), kCount * 64);
  EXPECT_GE(huge_keys.MemoryBytes(), kCount * 2 * sizeof(std::uint64_t));

  // More entries, more memory.
  AddressMap few;
  for (std::uint64_t i = 1; i <= 100; ++i) {
    few.Insert(i << 50, static_cast<ChunkId>(i));
  }
  EXPECT_LT(few.MemoryBytes(), small_keys.MemoryBytes());
  EXPECT_LE(few.MemoryBytes(), 100 * 64);
}

}  // namespace
}  // namespace gpualloc::core
