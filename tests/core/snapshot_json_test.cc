// SPDX-License-Identifier: Apache-2.0
// tests/core/snapshot_json_test.cc: the snapshot JSON
// (gpualloc/core/snapshot_json.h): a real allocator's snapshot written and read
// back field for field, the schema's field names, and the reader's errors
// naming the field or offset.
#include "gpualloc/core/snapshot_json.h"

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/stats_fields.h"
#include "gtest/gtest.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::uint64_t kMiB = 1024 * 1024;

// Every Stats field (the rows of gpualloc/core/stats_fields.h).
void ExpectSameStats(const Stats& a, const Stats& b) {
  ForEachStatsField([&](absl::string_view name, auto member, StatsFieldAge) {
    if constexpr (std::is_same_v<decltype(a.*member), const double&>) {
      EXPECT_NEAR(a.*member, b.*member, 1e-8) << name;
    } else {
      EXPECT_EQ(a.*member, b.*member) << name;
    }
  });
}

// An allocator growing on demand with a few live blocks on two streams and a
// free hole between them.
struct Fixture {
  std::unique_ptr<Allocator> allocator;
  Snapshot snapshot;
};
Fixture MakeFragmented() {
  Fixture f;
  auto backend = SimBackend::Create(SimOptions()).value();
  Options options;
  options.preallocate = false;
  f.allocator = CreateAllocator(options, backend).value();
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) {
    blocks.push_back(
        f.allocator
            ->Allocate((i + 1) * kMiB + 100, Stream(i % 2 == 0 ? 0 : 0xabc))
            .value());
  }
  EXPECT_TRUE(f.allocator->Deallocate(blocks[2], Stream()).ok());
  EXPECT_TRUE(f.allocator->Allocate(0, Stream(7)).ok());
  f.snapshot = f.allocator->GetSnapshot();
  return f;
}

TEST(SnapshotJsonTest, RoundTripsARealSnapshot) {
  Fixture f = MakeFragmented();
  const std::string json = SnapshotToJson(f.snapshot, &f.allocator->device());
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameStats(f.snapshot.stats, back->stats);
  ASSERT_EQ(back->regions.size(), f.snapshot.regions.size());
  ASSERT_FALSE(back->regions.empty());
  std::size_t in_use = 0;
  for (std::size_t i = 0; i < back->regions.size(); ++i) {
    const RegionSnapshot& a = f.snapshot.regions[i];
    const RegionSnapshot& b = back->regions[i];
    EXPECT_EQ(a.base, b.base);
    EXPECT_EQ(a.size, b.size);
    ASSERT_EQ(a.chunks.size(), b.chunks.size());
    for (std::size_t j = 0; j < a.chunks.size(); ++j) {
      EXPECT_EQ(a.chunks[j].address, b.chunks[j].address);
      EXPECT_EQ(a.chunks[j].size, b.chunks[j].size);
      EXPECT_EQ(a.chunks[j].requested, b.chunks[j].requested);
      EXPECT_EQ(a.chunks[j].in_use, b.chunks[j].in_use);
      EXPECT_EQ(a.chunks[j].stream, b.chunks[j].stream);
      in_use += b.chunks[j].in_use ? 1 : 0;
    }
  }
  EXPECT_EQ(in_use, 6u);  // 6 + the zero-byte block - the freed one
  // Written again, byte for byte the same.
  EXPECT_EQ(SnapshotToJson(*back, &f.allocator->device()), json);
}

// Tags (Allocator::Sleep): the tag of a chunk and of a tag's pool, and
// whether it sleeps, with the bytes asleep.
TEST(SnapshotJsonTest, RoundTripsTagsAndSleep) {
  auto backend = SimBackend::Create(SimOptions()).value();
  Options options;
  options.preallocate = false;
  std::unique_ptr<Allocator> a = CreateAllocator(options, backend).value();
  void* p = a->Allocate(3 * kMiB, Stream(), 0, /*tag=*/4).value();
  void* q = a->Allocate(kMiB, Stream(), 0, /*tag=*/6).value();
  ASSERT_TRUE(a->Sleep(4).ok());
  const Snapshot s = a->GetSnapshot();
  const std::string json = SnapshotToJson(s, nullptr);
  EXPECT_THAT(json, HasSubstr("\"tag\":4,\"asleep\":true"));
  EXPECT_THAT(json, HasSubstr("\"tag\":6,\"asleep\":false"));
  EXPECT_THAT(json, HasSubstr("\"bytes_sleeping\":4194304"));
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->pools.size(), 2u);
  EXPECT_EQ(back->pools[0].tag, 4u);
  EXPECT_TRUE(back->pools[0].asleep);
  EXPECT_EQ(back->stats.bytes_sleeping, 4 * kMiB);
  EXPECT_EQ(SnapshotToJson(*back, nullptr), json);
  ASSERT_TRUE(a->Wake(4).ok());
  ASSERT_TRUE(a->Deallocate(p).ok());
  ASSERT_TRUE(a->Deallocate(q).ok());
}

// How the regions are made (Snapshot::region_kind), and the chunks of a tag
// asleep: marked asleep, so that the chunks awake add up to bytes_reserved.
TEST(SnapshotJsonTest, RegionKindAndChunksAsleep) {
  auto backend = SimBackend::Create(SimOptions()).value();
  Options options;
  options.preallocate = false;
  options.expandable = Tristate::kOn;
  std::unique_ptr<Allocator> a = CreateAllocator(options, backend).value();
  void* untagged = a->Allocate(8 * kMiB).value();
  void* p = a->Allocate(64 * kMiB, Stream(), 0, /*tag=*/4).value();
  ASSERT_TRUE(a->Sleep(4).ok());
  const Snapshot s = a->GetSnapshot();
  EXPECT_EQ(s.region_kind, RegionKind::kExpandable);
  const std::string json = SnapshotToJson(s, nullptr);
  EXPECT_THAT(json, HasSubstr(",\"region_kind\":\"expandable\",\"regions\":"));
  EXPECT_THAT(json, HasSubstr(",\"tag\":4,\"asleep\":true}"));
  EXPECT_THAT(json, HasSubstr("\"tag\":4,\"asleep\":true,"
                              "\"bytes_sleeping\":67108864"));
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->region_kind, RegionKind::kExpandable);
  std::uint64_t awake = 0, asleep = 0;
  for (const RegionSnapshot& r : back->regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      (c.asleep ? asleep : awake) += c.size;
    }
  }
  EXPECT_EQ(awake, back->stats.bytes_reserved);
  EXPECT_EQ(asleep, 64 * kMiB);
  ASSERT_EQ(back->pools.size(), 1u);
  EXPECT_EQ(back->pools[0].bytes_sleeping, 64 * kMiB);
  EXPECT_EQ(back->pools[0].bytes_reserved, 0u);
  EXPECT_EQ(SnapshotToJson(*back, nullptr), json);
  ASSERT_TRUE(a->Wake(4).ok());
  ASSERT_TRUE(a->Deallocate(p).ok());
  ASSERT_TRUE(a->Deallocate(untagged).ok());

  options.expandable = Tristate::kOff;
  std::unique_ptr<Allocator> b = CreateAllocator(options, backend).value();
  void* q = b->Allocate(kMiB).value();
  const Snapshot separate = b->GetSnapshot();
  EXPECT_EQ(separate.region_kind, RegionKind::kSeparate);
  const std::string separate_json = SnapshotToJson(separate, nullptr);
  EXPECT_THAT(separate_json, HasSubstr(",\"region_kind\":\"separate\","));
  EXPECT_EQ(SnapshotFromJson(separate_json)->region_kind,
            RegionKind::kSeparate);
  ASSERT_TRUE(b->Deallocate(q).ok());

  // An older document without the field: expandable when its history maps
  // or unmaps, else separate.
  auto without = [](std::string doc) {
    const std::string field = "\"region_kind\":\"expandable\",";
    const std::size_t at = doc.find(field);
    EXPECT_NE(at, std::string::npos);
    if (at != std::string::npos) doc.erase(at, field.size());
    return doc;
  };
  EXPECT_EQ(SnapshotFromJson(without(json))->region_kind,
            RegionKind::kSeparate);
  Snapshot mapped = s;
  mapped.history.push_back(
      HistoryEvent{HistoryAction::kSegmentMap, 1 << 21, 1 << 21, 0, 0, ""});
  mapped.history_recorded = 1;
  EXPECT_EQ(SnapshotFromJson(without(SnapshotToJson(mapped)))->region_kind,
            RegionKind::kExpandable);
  std::string bad = json;
  bad.replace(bad.find("\"expandable\""), 12, "\"elastic\"");
  absl::StatusOr<Snapshot> wrong = SnapshotFromJson(bad);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("region_kind: expected \"separate\" or "
                        "\"expandable\", got \"elastic\""));
}

TEST(SnapshotJsonTest, WritesTheDocumentedFields) {
  Fixture f = MakeFragmented();
  const std::string json = SnapshotToJson(f.snapshot, &f.allocator->device());
  EXPECT_THAT(json, StartsWith("{\"format\":\"gpualloc-snapshot\","
                               "\"version\":1,\"device\":{\"ordinal\":0,"
                               "\"backend\":\"sim\""));
  for (const char* field :
       {"\"total_bytes\":", "\"stats\":{\"num_allocs\":7,",
        "\"bytes_in_use\":", "\"peak_bytes_reserved\":", "\"fragmentation\":",
        "\"host_waits\":", "\"regions\":[{\"base\":",
        "\"chunks\":[{\"address\":", "\"requested\":1048676,",
        "\"state\":\"in_use\"", "\"state\":\"free\"", "\"stream\":2748"}) {
    EXPECT_THAT(json, HasSubstr(field));
  }
  // No device given: no device object.
  EXPECT_THAT(SnapshotToJson(f.snapshot), Not(HasSubstr("\"device\"")));
  EXPECT_EQ(json.find('\n'), std::string::npos);
}

TEST(SnapshotJsonTest, AnEmptySnapshot) {
  const std::string json = SnapshotToJson(Snapshot());
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->regions.empty());
  EXPECT_EQ(back->stats.num_allocs, 0u);
}

// Every row of gpualloc/core/stats_fields.h is written under its name and read
// back; a document without a later row reads (as 0), one without a row of the
// first format does not.
TEST(SnapshotJsonTest, EveryStatsFieldRoundTrips) {
  Snapshot snapshot;
  std::uint64_t next = 1000;
  ForEachStatsField([&](absl::string_view, auto member, StatsFieldAge) {
    using T = std::remove_reference_t<decltype(snapshot.stats.*member)>;
    if constexpr (std::is_same_v<T, double>) {
      snapshot.stats.*member = 0.25;
    } else {
      snapshot.stats.*member = next++;
    }
  });
  const std::string json = SnapshotToJson(snapshot);
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameStats(back->stats, snapshot.stats);
  const std::size_t stats = json.find("\"stats\":{");
  const std::size_t stats_end = json.find('}', stats);
  ASSERT_NE(stats_end, std::string::npos);
  ForEachStatsField(
      [&](absl::string_view name, auto member, StatsFieldAge age) {
        const std::string key = absl::StrCat("\"", name, "\":");
        const std::size_t at = json.find(key, stats);
        ASSERT_LT(at, stats_end) << name << " missing from " << json;
        // The row removed, and its comma.
        const std::size_t end = json.find_first_of(",}", at);
        std::string without = json;
        if (json[end] == ',') {
          without.erase(at, end + 1 - at);
        } else {
          without.erase(at - 1, end - at + 1);
        }
        const absl::StatusOr<Snapshot> old = SnapshotFromJson(without);
        if (age == StatsFieldAge::kAdded) {
          ASSERT_TRUE(old.ok()) << name << ": " << old.status();
          EXPECT_EQ(old->stats.*member, 0u) << name;
        } else {
          ASSERT_FALSE(old.ok()) << name;
          EXPECT_THAT(old.status().message(),
                      HasSubstr(absl::StrCat("stats.", name)));
        }
      });
}

TEST(SnapshotJsonTest, SkipsUnknownFieldsAndWhitespace) {
  std::string json = SnapshotToJson(MakeFragmented().snapshot);
  // A later version's extra fields, of every JSON kind, and pretty-printing.
  json.insert(1,
              "\n  \"extra\" : {\"a\": [1, -2.5e3, true, false, null, "
              "\"\\u00e9\\n\"]},\n  ");
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->regions.empty());
}

TEST(SnapshotJsonTest, ErrorsNameTheFieldOrOffset) {
  const std::string good = SnapshotToJson(MakeFragmented().snapshot);
  struct Case {
    std::string json;
    std::string message;
  };
  auto replace = [&good](const std::string& from, const std::string& to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return s;
  };
  const std::vector<Case> cases = {
      {"", "expected a value at byte 0"},
      {"[]", "the document: expected an object"},
      {good.substr(0, good.size() - 1), "end of text"},
      {good + "x", "expected end of the document"},
      {replace("gpualloc-snapshot", "pytorch"), "format: expected"},
      {replace("\"version\":1", "\"version\":2"), "version: expected 1"},
      {replace("\"stats\"", "\"statz\""), "stats: expected a field (missing)"},
      {replace("\"bytes_in_use\":", "\"bytes_in_use\":-"),
       "stats.bytes_in_use: expected an unsigned 64-bit integer"},
      {replace("\"base\":",
               "\"base\":\"0x\","
               "\"b\":"),
       "regions[0].base: expected a number"},
      {replace("\"state\":\"free\"", "\"state\":\"busy\""),
       ".state: expected \"in_use\" or \"free\", got \"busy\""},
      {replace("\"requested\":", "\"requested\":18446744073709551616,\"r\":"),
       "regions[0].chunks[0].requested: expected an unsigned 64-bit integer"},
      {std::string(100, '[') + std::string(100, ']'), "less nesting"},
      // Long values are quoted cut, with their length.
      {replace("gpualloc-snapshot", std::string(5'000'000, 'x')),
       "xxx...\" (5000000 bytes)"},
      {replace("\"state\":\"free\"",
               "\"state\":\"" + std::string(100'000, 'b') + "\""),
       "(100000 bytes)"},
      {replace("\"requested\":",
               "\"requested\":" + std::string(5000, '9') + ",\"r\":"),
       "(5000 bytes)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Snapshot> s = SnapshotFromJson(c.json);
    ASSERT_FALSE(s.ok()) << c.json.substr(0, 200);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(c.message))
        << c.json.substr(0, 200);
    EXPECT_LT(s.status().message().size(), 400u) << c.json.substr(0, 200);
  }
}

}  // namespace
}  // namespace gpualloc

namespace gpualloc {
namespace {

// The allocation history (Options::history) is written and read back event
// for event; a document without it (an older file) still loads.
TEST(SnapshotJsonHistoryTest, RoundTripsTheHistory) {
  auto backend = SimBackend::Create(SimOptions()).value();
  Options options;
  options.preallocate = false;
  options.history = 16;
  options.expandable = Tristate::kOff;
  auto allocator = CreateAllocator(options, backend).value();
  SetThreadContext("step \"1\"\n");
  void* p = allocator->Allocate(kMiB, Stream(0xabc)).value();
  SetThreadContext("");
  ASSERT_TRUE(allocator->Deallocate(p, Stream(0xabc)).ok());
  const Snapshot s = allocator->GetSnapshot();
  ASSERT_EQ(s.history.size(), 4u);
  const std::string json = SnapshotToJson(s);
  EXPECT_THAT(json, HasSubstr(",\"history\":{\"recorded\":4,\"dropped\":0,"
                              "\"events\":[{\"action\":\"segment_alloc\","));
  absl::StatusOr<Snapshot> back = SnapshotFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->history_recorded, 4u);
  EXPECT_EQ(back->history_dropped, 0u);
  ASSERT_EQ(back->history.size(), s.history.size());
  for (std::size_t i = 0; i < s.history.size(); ++i) {
    EXPECT_EQ(back->history[i].action, s.history[i].action);
    EXPECT_EQ(back->history[i].address, s.history[i].address);
    EXPECT_EQ(back->history[i].size, s.history[i].size);
    EXPECT_EQ(back->history[i].stream, s.history[i].stream);
    EXPECT_EQ(back->history[i].time_ns, s.history[i].time_ns);
    EXPECT_EQ(back->history[i].context, s.history[i].context);
  }
  EXPECT_EQ(back->history[1].context, "step \"1\"\n");

  // Without history: no "history" field, and an old document loads.
  Snapshot none = s;
  none.history.clear();
  none.history_recorded = none.history_dropped = 0;
  const std::string old = SnapshotToJson(none);
  EXPECT_THAT(old, Not(HasSubstr("history")));
  absl::StatusOr<Snapshot> loaded = SnapshotFromJson(old);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->history.empty());

  std::string bad = json;
  bad.replace(bad.find("\"free_requested\""), 16, "\"freed\"");
  absl::StatusOr<Snapshot> wrong = SnapshotFromJson(bad);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("history.events[2].action: expected an action"));
}

}  // namespace
}  // namespace gpualloc
