// SPDX-License-Identifier: Apache-2.0
// tests/tools/host_trace_test.cc: the project CSV's host rows (host_alloc,
// host_free): their parsing and its errors, their replay through the host
// allocator beside no host cache, the report's host section and the JSON's
// host object, and that traces without host rows read and report as before.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/replay/replay.h"
#include "tools/replay/report.h"

namespace gpualloc::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kHeader = "seq,action,addr_or_id,size,stream\n";

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Rows without seq: numbered here.
std::string Csv(const std::vector<std::string>& rows) {
  std::string text(kHeader);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    absl::StrAppend(&text, i, ",", rows[i], "\n");
  }
  return text;
}

TEST(HostRows, ParseApartFromTheDeviceRows) {
  absl::StatusOr<Trace> t =
      ParseTrace(Csv({"host_alloc,7,4096,5", "alloc,3,100,0", "alloc,9,200,5",
                      "host_alloc,8,512,0", "free,3,0,0", "host_free,7,0,5",
                      "free,9,200,5", "host_free,8,512,0"}),
                 "t");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ops.size(), 4u);
  ASSERT_EQ(t->host_ops.size(), 4u);
  EXPECT_EQ(t->num_allocs, 2u);
  EXPECT_EQ(t->num_frees, 2u);
  EXPECT_EQ(t->num_host_allocs, 2u);
  EXPECT_EQ(t->num_host_frees, 2u);
  // Device and host ids are dense apart; the streams numbered together.
  EXPECT_EQ(t->ops[0].id, 0u);
  EXPECT_EQ(t->ops[1].id, 1u);
  EXPECT_EQ(t->ops[1].stream, 1u);
  const HostTraceOp& a = t->host_ops[0];
  EXPECT_EQ(a.kind, HostTraceOp::Kind::kAlloc);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(a.size, 4096u);
  EXPECT_EQ(a.stream, 1u);
  EXPECT_EQ(a.before, 0u);
  EXPECT_EQ(t->host_ops[1].id, 1u);
  EXPECT_EQ(t->host_ops[1].before, 2u);
  // A free of size 0 carries its alloc's.
  EXPECT_EQ(t->host_ops[2].kind, HostTraceOp::Kind::kFree);
  EXPECT_EQ(t->host_ops[2].size, 4096u);
  EXPECT_EQ(t->host_ops[2].before, 3u);
  EXPECT_EQ(t->host_ops[3].before, 4u);  // after the last device row
  EXPECT_EQ(t->num_streams, 2u);
}

// A stream only host rows use is not a device stream: the device rows
// replay as one stream, as they would without the host rows.
TEST(HostRows, StreamsOfHostRowsOnlyAreNotCounted) {
  absl::StatusOr<Trace> t =
      ParseTrace(Csv({"host_alloc,0,4096,3", "alloc,1,100,0", "free,1,100,0",
                      "host_free,0,4096,3"}),
                 "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_streams, 1u);
}

TEST(HostRows, BadRowsNameTheLineAndTheKind) {
  struct BadCase {
    std::vector<std::string> rows;
    std::string message;
  };
  const std::vector<BadCase> cases = {
      {{"host_free,4,0,0"},
       "bad.csv:2: expected the id of a live host allocation, got id 4, "
       "unknown"},
      {{"alloc,1,10,0", "host_free,1,10,0"},
       "bad.csv:3: expected the id of a live host allocation, got id 1, a "
       "device allocation (free frees it)"},
      {{"host_alloc,1,10,0", "free,1,10,0"},
       "bad.csv:3: expected the id of a live allocation, got id 1, a host "
       "allocation (host_free frees it)"},
      {{"host_alloc,1,10,0", "host_free,1,10,0", "host_free,1,10,0"},
       "bad.csv:4: expected the id of a live host allocation, got id 1, "
       "already freed"},
      {{"alloc,1,10,0", "host_alloc,1,10,0"},
       "bad.csv:3: expected a new allocation id, got id 1, allocated before"},
      {{"host_alloc,1,10,0", "host_free,1,20,0"},
       "bad.csv:3: expected size 0 or 10 (the size id 1 was allocated "
       "with), got size 20"},
      {{"host_alloc,x,10,0"}, "bad.csv:2: expected a decimal id"},
      {{"host_malloc,1,10,0"},
       "bad.csv:2: expected action alloc, free, host_alloc or host_free, got "
       "\"host_malloc\""},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<Trace> t = ParseTrace(Csv(c.rows), "bad.csv");
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Msg(t.status()), HasSubstr(c.message));
  }
}

// One step: a staging buffer on copy stream 1 around device work on both
// streams; enough device rows that the ops model completes the copy
// stream's work before the next step.
std::vector<std::string> Step(int step, int* id) {
  const int staging = (*id)++;
  std::vector<std::string> rows = {
      absl::StrCat("host_alloc,", staging, ",1048576,1")};
  for (int i = 0; i < 4; ++i) {
    const int a = (*id)++;
    rows.push_back(absl::StrCat("alloc,", a, ",", 1 << 20, ",", i % 2));
    rows.push_back(absl::StrCat("free,", a, ",0,", i % 2));
  }
  rows.push_back(absl::StrCat("host_free,", staging, ",0,1"));
  (void)step;
  return rows;
}

// The offloaded state for the whole run, then `steps` steps.
Trace Steps(int steps) {
  int id = 1;
  std::vector<std::string> rows = {"host_alloc,0,4194304,1"};
  for (int s = 0; s < steps; ++s) {
    for (std::string& r : Step(s, &id)) rows.push_back(std::move(r));
  }
  rows.push_back("host_free,0,0,1");
  absl::StatusOr<Trace> t = ParseTrace(Csv(rows), "steps");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace{};
}

constexpr absl::string_view kConfig = "arch=h100,preallocate=false";

ReplayOptions EveryFewOps() {
  ReplayOptions o;
  o.complete_every = 4;
  return o;
}

TEST(HostReplay, ThePoolAllocatesInTheFirstStepOnly) {
  const Trace one = Steps(1), three = Steps(3);
  absl::StatusOr<ReplayResult> a =
      Replay(one, std::string(kConfig), EveryFewOps());
  absl::StatusOr<ReplayResult> b =
      Replay(three, std::string(kConfig), EveryFewOps());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(a->host.has_value());
  ASSERT_TRUE(b->host.has_value());
  // Steps 2 and 3 reuse the first step's staging: no more host calls.
  EXPECT_EQ(a->host->pool.host_allocs, 2u);
  EXPECT_EQ(b->host->pool.host_allocs, a->host->pool.host_allocs);
  EXPECT_EQ(b->host->pool.host_frees, 0u);
  EXPECT_EQ(b->host->pool.host_waits, 0u);
  EXPECT_EQ(b->host->pool.ops, 2 * three.num_host_allocs);
  EXPECT_EQ(b->host->peak_bytes_requested, 5u << 20);
  EXPECT_GE(b->host->pool.peak_bytes_reserved, 5u << 20);
  EXPECT_GE(b->host->pool.peak_bytes_in_use, 5u << 20);
  // Without a cache every host row is a call.
  EXPECT_EQ(b->host->no_cache.host_allocs, three.num_host_allocs);
  EXPECT_EQ(b->host->no_cache.host_frees, three.num_host_frees);
  // The pool pins more at first (regions of 2 MiB and more, doubling), but
  // pays it once: a few steps more and not caching costs more.
  absl::StatusOr<ReplayResult> c =
      Replay(Steps(12), std::string(kConfig), EveryFewOps());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host->pool.host_allocs, a->host->pool.host_allocs);
  EXPECT_GT(c->host->no_cache.modeled_ns, c->host->pool.modeled_ns);
  EXPECT_EQ(b->hazards, 0u);
  for (const HostFigures* h : {&b->host->pool, &b->host->no_cache}) {
    EXPECT_EQ(h->hazards, 0u);
    EXPECT_EQ(h->access_violations, 0u);
  }
}

TEST(HostReplay, NoHostAllocationsFromTheSecondPassOn) {
  const Trace t = Steps(2);
  ReplayOptions o = EveryFewOps();
  o.repeat = 3;
  absl::StatusOr<ReplayResult> r = Replay(t, std::string(kConfig), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->host.has_value());
  const HostFigures& pool = r->host->pool;
  ASSERT_EQ(pool.repetitions.size(), 3u);
  EXPECT_GT(pool.repetitions[0].host_allocs, 0u);
  EXPECT_EQ(pool.repetitions[1].host_allocs, 0u);
  EXPECT_EQ(pool.repetitions[2].host_allocs, 0u);
  const HostFigures& none = r->host->no_cache;
  ASSERT_EQ(none.repetitions.size(), 3u);
  for (const HostPassFigures& p : none.repetitions) {
    EXPECT_EQ(p.host_allocs, t.num_host_allocs);
    EXPECT_EQ(p.host_frees, t.num_host_allocs);
  }
  // The report shows the last pass's calls, marked.
  ReportOptions report;
  report.repeat = 3;
  const std::string text = FormatHostReport({*r}, report);
  EXPECT_THAT(text, HasSubstr("host a/f*"));
  EXPECT_THAT(text, HasSubstr("no host cache"));
}

// The device figures do not depend on the host rows.
TEST(HostReplay, DeviceFiguresAreThoseOfTheTraceWithoutHostRows) {
  Trace with = Steps(3);
  Trace without = with;
  without.host_ops.clear();
  without.num_host_allocs = without.num_host_frees = 0;
  absl::StatusOr<ReplayResult> a = Replay(with, std::string(kConfig));
  absl::StatusOr<ReplayResult> b = Replay(without, std::string(kConfig));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->host.has_value());
  EXPECT_FALSE(b->host.has_value());
  EXPECT_EQ(a->ops, b->ops);
  EXPECT_EQ(a->peak_bytes_reserved, b->peak_bytes_reserved);
  EXPECT_EQ(a->backend_calls, b->backend_calls);
  EXPECT_EQ(a->modeled_backend_ns, b->modeled_backend_ns);
  EXPECT_EQ(a->events_recorded, b->events_recorded);
  EXPECT_EQ(a->host_waits, b->host_waits);
  EXPECT_EQ(a->nowait_bound_bytes, b->nowait_bound_bytes);
  // The JSON gains the host object at its end, and only with host rows.
  const std::string json = ToJson(*a);
  EXPECT_THAT(json, HasSubstr(",\"host\":{\"peak_bytes_requested\":5242880,"
                              "\"pool\":{\"ops\":"));
  EXPECT_THAT(json, HasSubstr("\"no_host_cache\":{\"ops\":"));
  EXPECT_TRUE(absl::EndsWith(json, "]}}}"));
  EXPECT_THAT(ToJson(*b), Not(HasSubstr("\"host\":")));
  EXPECT_EQ(FormatHostReport({*b}, ReportOptions()), "");
  const std::string text = FormatHostReport({*a, *b}, ReportOptions());
  EXPECT_THAT(text, HasSubstr("steps (host rows: peak requested 0.005 GiB)"));
  EXPECT_THAT(text, HasSubstr("  no host cache "));
}

// The reference models replay the device rows only.
TEST(HostReplay, ReferenceModelsHaveNoHostFigures) {
  ReplayOptions o;
  o.reference = "pytorch";
  absl::StatusOr<ReplayResult> r = Replay(Steps(1), std::string(kConfig), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->host.has_value());
}

// The bundled prefetch trace (gpualloc-gen's): its host rows replay with no
// hazard, the pool pinning in the first step only where no host cache pins
// each row, and holding about what the rows hold live.
TEST(HostReplay, BundledPrefetchTrace) {
  absl::StatusOr<Trace> t =
      LoadTrace(std::string(GPUALLOC_TRACE_DIR) + "/gen-prefetch.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_host_allocs, 592u);
  absl::StatusOr<ReplayResult> r = Replay(*t, std::string(kConfig));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->host.has_value());
  const HostFigures& pool = r->host->pool;
  const HostFigures& none = r->host->no_cache;
  EXPECT_EQ(none.host_allocs, t->num_host_allocs);
  EXPECT_EQ(none.host_frees, t->num_host_frees);
  // 16 steps: the pool pins in the first only, each region the size of the
  // request it grew for, so what it holds is what the rows hold live.
  EXPECT_LT(pool.host_allocs, t->num_host_allocs / 4);
  EXPECT_LE(static_cast<double>(pool.peak_bytes_reserved),
            1.05 * static_cast<double>(r->host->peak_bytes_requested));
  EXPECT_EQ(pool.host_waits, 0u);
  EXPECT_GE(pool.peak_bytes_reserved, r->host->peak_bytes_requested);
  EXPECT_LT(pool.modeled_ns, none.modeled_ns);
  for (const HostFigures* h : {&pool, &none}) {
    EXPECT_EQ(h->hazards, 0u);
    EXPECT_EQ(h->access_violations, 0u);
  }
}

}  // namespace
}  // namespace gpualloc::replay
