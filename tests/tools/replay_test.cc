// SPDX-License-Identifier: Apache-2.0
// tests/tools/replay_test.cc: the trace parsers, the replay's numbers on
// hand-made traces with known answers, the no-wait bound, one-stream replays,
// the report's multi-stream and repeat columns, the JSON form, the PyTorch
// baseline and the bundled traces.
#include "tools/replay/replay.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/replay/report.h"

namespace gpualloc::replay {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::string_view kHeader = "seq,action,addr_or_id,size,stream\n";
constexpr absl::string_view kRmm = "Thread,Time,Action,Pointer,Size,Stream\n";

// A preallocated 64 MiB arena (one region) on a small simulated H100: every
// number below is exact.
constexpr absl::string_view kPrealloc =
    "backend=sim,arch=h100,device_memory=1GiB,preallocate=true,mem_limit=64MiB,"
    "expandable=false";

// gMock's string matchers take std::string, not absl::string_view.
std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string TraceDir() { return GPUALLOC_TRACE_DIR; }

Trace MustParse(absl::string_view text) {
  absl::StatusOr<Trace> t = ParseTrace(text, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace{};
}

// The number after "key": in a one-line JSON object (enough for our flat
// fields; the stats object's keys are looked up after "stats").
double JsonNumber(const std::string& json, absl::string_view key,
                  std::size_t from = 0) {
  const std::string k = absl::StrCat("\"", key, "\":");
  std::size_t at = json.find(k, from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << json;
    return -1;
  }
  at += k.size();
  std::size_t end = json.find_first_of(",}]", at);
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(json.substr(at, end - at), &v))
      << key << " in " << json;
  return v;
}

TEST(ParseTrace, ProjectCsv) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1000,0\n"
                                   "1,alloc,1,2000,3\n"
                                   "2,free,0,1000,0\r\n"
                                   "3,free,1,2000,3\n"));
  EXPECT_EQ(t.name, "t");
  ASSERT_EQ(t.ops.size(), 4u);
  EXPECT_EQ(t.num_allocs, 2u);
  EXPECT_EQ(t.num_frees, 2u);
  EXPECT_EQ(t.num_streams, 2u);
  EXPECT_EQ(t.ops[1].kind, TraceOp::Kind::kAlloc);
  EXPECT_EQ(t.ops[1].size, 2000u);
  EXPECT_EQ(t.ops[1].stream, 1u);  // raw 3: the first non-default stream
  EXPECT_EQ(t.ops[2].kind, TraceOp::Kind::kFree);
  EXPECT_EQ(t.ops[2].id, 0u);
  EXPECT_EQ(t.ops[3].id, 1u);
  EXPECT_EQ(t.ops[3].size, 2000u);
}

TEST(ParseTrace, SparseIdsBecomeDense) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,7,10,0\n"
                                   "1,alloc,3,20,0\n"
                                   "2,free,3,20,0\n"));
  EXPECT_EQ(t.ops[0].id, 0u);
  EXPECT_EQ(t.ops[1].id, 1u);
  EXPECT_EQ(t.ops[2].id, 1u);
  EXPECT_EQ(t.num_streams, 1u);
}

TEST(ParseTrace, RmmCsv) {
  Trace t = MustParse(
      absl::StrCat(kRmm,
                   "140,10:00:00.001,allocate,0x7f0000000000,1024,0x0\n"
                   "140,10:00:00.002,allocate failure,0x0,99999999999,0x0\n"
                   "140,10:00:00.003,free,0x7f0000000000,1024,0x0\n"
                   // The pointer comes back: a new allocation.
                   "141,10:00:00.004,allocate,0x7f0000000000,2048,0x5a\n"
                   "141,10:00:00.005,allocate,0x7f0000100000,512,0x0\n"));
  ASSERT_EQ(t.ops.size(), 4u);  // the failure is skipped
  EXPECT_EQ(t.num_allocs, 3u);
  EXPECT_EQ(t.num_frees, 1u);
  EXPECT_EQ(t.num_streams, 2u);
  EXPECT_EQ(t.ops[1].kind, TraceOp::Kind::kFree);
  EXPECT_EQ(t.ops[1].id, 0u);
  EXPECT_EQ(t.ops[2].id, 1u);
  EXPECT_EQ(t.ops[2].size, 2048u);
  EXPECT_EQ(t.ops[2].stream, 1u);
  EXPECT_EQ(t.ops[3].id, 2u);
  // RMM's times, from the first row, in ns.
  EXPECT_TRUE(t.timed);
  EXPECT_EQ(t.ops[0].time_ns, 0u);
  EXPECT_EQ(t.ops[1].time_ns, 2'000'000u);
  EXPECT_EQ(t.ops[3].time_ns, 4'000'000u);
}

TEST(ParseTrace, ProjectCsvMayCarryTimes) {
  Trace t = MustParse(
      "seq,action,addr_or_id,size,stream,time_us\n"
      "0,alloc,0,1024,1,100\n"
      "1,alloc,1,1024,2,90\n"  // out of order: taken as no earlier
      "2,free,0,0,1,250\n");
  EXPECT_TRUE(t.timed);
  EXPECT_EQ(t.ops[0].time_ns, 0u);
  EXPECT_EQ(t.ops[1].time_ns, 0u);
  EXPECT_EQ(t.ops[2].time_ns, 150'000u);
  EXPECT_FALSE(MustParse(absl::StrCat(kHeader, "0,alloc,0,1024,0\n")).timed);
  absl::StatusOr<Trace> bad = ParseTrace(
      "seq,action,addr_or_id,size,stream,time_us\n0,alloc,0,1024,1,soon\n",
      "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("t.csv:2: expected a decimal time in microseconds"));
}

struct BadCase {
  std::string text;
  std::string message;  // a substring of the error
};

TEST(ParseTrace, MalformedInputNamesFileLineAndExpectation) {
  const std::string h(kHeader);
  const std::string r(kRmm);
  const std::vector<BadCase> cases = {
      {"", "bad.csv:1: expected header"},
      {"\n\n", "bad.csv:1: expected header"},
      {"seq,action,id,size,stream\n", "bad.csv:1: expected header"},
      {h + "0,alloc,0,10\n", "bad.csv:2: expected 5 fields"},
      {h + "0,alloc,0,10,0,9\n", "bad.csv:2: expected 5 fields"},
      {h + "1,alloc,0,10,0\n", "bad.csv:2: expected seq 0, got \"1\""},
      {h + "0,alloc,0,10,0\n0,alloc,1,10,0\n",
       "bad.csv:3: expected seq 1, got \"0\""},
      {h + "0,alloc,x,10,0\n", "bad.csv:2: expected a decimal id"},
      {h + "0,alloc,0,1x,0\n", "bad.csv:2: expected a decimal size"},
      {h + "0,alloc,0,-5,0\n", "bad.csv:2: expected a decimal size"},
      {h + "0,alloc,0,10,s\n", "bad.csv:2: expected a decimal stream"},
      {h + "0,malloc,0,10,0\n",
       "bad.csv:2: expected action alloc, free, host_alloc or host_free, got "
       "\"malloc\""},
      {h + "0,free,5,10,0\n",
       "bad.csv:2: expected the id of a live allocation, got id 5, unknown"},
      {h + "0,alloc,0,10,0\n1,free,0,10,0\n2,free,0,10,0\n",
       "bad.csv:4: expected the id of a live allocation, got id 0, already "
       "freed"},
      {h + "0,alloc,0,10,0\n1,alloc,0,10,0\n",
       "bad.csv:3: expected a new allocation id, got id 0"},
      {h + "0,alloc,0,10,0\n1,free,0,10,0\n2,alloc,0,10,0\n",
       "bad.csv:4: expected a new allocation id"},
      {r + "1,0.1,allocate,0x10,5\n", "bad.csv:2: expected 6 fields"},
      {r + "1,0.1,reserve,0x10,5,0x0\n",
       "bad.csv:2: expected action allocate, free or \"allocate failure\", "
       "got \"reserve\""},
      {r + "1,0.1,allocate,0xzz,5,0x0\n", "bad.csv:2: expected a pointer"},
      {r + "1,0.1,allocate,0x10,five,0x0\n",
       "bad.csv:2: expected a decimal size"},
      {r + "1,0.1,allocate,0x10,5,stream\n", "bad.csv:2: expected a stream"},
      {r + "1,0.1,free,0x10,5,0x0\n",
       "bad.csv:2: expected the pointer of a live allocation"},
      {r + "1,0.1,allocate,0x10,5,0x0\n1,0.1,allocate,0x10,5,0x0\n",
       "bad.csv:3: expected a pointer not live"},
      // A free's size is its alloc's, or 0.
      {h + "0,alloc,0,10,0\n1,free,0,20,0\n",
       "bad.csv:3: expected size 0 or 10 (the size id 0 was allocated with), "
       "got size 20"},
      {r + "1,0.1,allocate,0x10,5,0x0\n1,0.2,free,0x10,6,0x0\n",
       "bad.csv:3: expected size 0 or 5 (the size \"0x10\" was allocated "
       "with), got size 6"},
      // RMM's Thread and Time are numbers.
      {r + "main,10:00:00.001,allocate,0x10,5,0x0\n",
       "bad.csv:2: expected a numeric thread id in Thread, got \"main\""},
      {r + "1,noon,allocate,0x10,5,0x0\n",
       "bad.csv:2: expected a time in Time"},
      {r + "1,10::00,allocate,0x10,5,0x0\n",
       "bad.csv:2: expected a time in Time"},
      {r + "1,,allocate failure,0x0,5,0x0\n",
       "bad.csv:2: expected a time in Time (digits separated by ':' or '.', "
       "e.g. 10:00:00.001), got \"\""},
      // Control characters are escaped, not echoed.
      {h + std::string("0,al\0loc,0,10,0\n", 16),
       "bad.csv:2: expected action alloc, free, host_alloc or host_free, got "
       "\"al\\x00loc\""},
      {"seq\x01\x1b[31m\n",
       "bad.csv:1: expected header \"seq,action,addr_or_id,size,stream\" or "
       "\"Thread,Time,Action,Pointer,Size,Stream\", got "
       "\"seq\\x01\\x1b[31m\""},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<Trace> t = ParseTrace(c.text, "bad.csv");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(Msg(t.status()), HasSubstr(c.message)) << c.text;
  }
}

// A number that is well formed but too large is a range error: the message
// says so, with the largest value the field takes.
TEST(ParseTrace, NumbersTooLargeAreRangeErrors) {
  const std::string h(kHeader);
  const std::string t = "seq,action,addr_or_id,size,stream,time_us\n";
  const std::string r(kRmm);
  const std::vector<BadCase> cases = {
      {t + "0,alloc,0,10,1,18446744073709551615\n",
       "bad.csv:2: time in microseconds \"18446744073709551615\" out of "
       "range: at most 18446744073709551"},
      {t + "0,alloc,0,10,1,18446744073709552\n",
       "bad.csv:2: time in microseconds \"18446744073709552\" out of range: "
       "at most 18446744073709551"},
      {h + "0,alloc,0,10,99999999999999999999\n",
       "bad.csv:2: stream number \"99999999999999999999\" out of range: at "
       "most 18446744073709551615"},
      {h + "0,alloc,0,99999999999999999999,0\n",
       "bad.csv:2: size in bytes \"99999999999999999999\" out of range: at "
       "most 18446744073709551615"},
      {h + "0,alloc,18446744073709551616,10,0\n",
       "bad.csv:2: id \"18446744073709551616\" out of range: at most "
       "18446744073709551615"},
      {r + "1,0.1,allocate,0x10,99999999999999999999,0x0\n",
       "bad.csv:2: size in bytes \"99999999999999999999\" out of range: at "
       "most 18446744073709551615"},
      {r + "1,0.1,allocate,0x10000000000000000,5,0x0\n",
       "bad.csv:2: pointer \"0x10000000000000000\" out of range: at most "
       "0xffffffffffffffff"},
      {r + "1,0.1,allocate,0x10,5,0x10000000000000000\n",
       "bad.csv:2: stream \"0x10000000000000000\" out of range: at most "
       "0xffffffffffffffff"},
      {r + "1,99999999999999999999.5,allocate,0x10,5,0x0\n",
       "bad.csv:2: time in Time \"99999999999999999999.5\" out of range: at "
       "most 18446744072 seconds"},
      {r + "1,5124095576:1:0.0,allocate,0x10,5,0x0\n",
       "bad.csv:2: time in Time \"5124095576:1:0.0\" out of range"},
      {r + "99999999999999999999,0.1,allocate,0x10,5,0x0\n",
       "bad.csv:2: thread id \"99999999999999999999\" out of range: at most "
       "18446744073709551615"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<Trace> trace = ParseTrace(c.text, "bad.csv");
    ASSERT_FALSE(trace.ok()) << c.text;
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_THAT(Msg(trace.status()), HasSubstr(c.message)) << c.text;
  }
  // The largest values are taken.
  Trace ok = MustParse(t +
                       "0,alloc,18446744073709551615,10,"
                       "18446744073709551615,18446744073709551\n");
  ASSERT_EQ(ok.ops.size(), 1u);
  EXPECT_EQ(ok.ops[0].size, 10u);
}

TEST(ParseTrace, FreeRowsMayCarryTheirAllocsSizeOrZero) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,10,0\n1,alloc,1,20,0\n"
                                   "2,free,0,10,0\n3,free,1,0,0\n"));
  ASSERT_EQ(t.ops.size(), 4u);
  EXPECT_EQ(t.ops[2].size, 10u);
  EXPECT_EQ(t.ops[3].size, 20u);  // 0: its alloc's size
}

TEST(ParseTrace, LeadingUtf8ByteOrderMarkIsSkipped) {
  Trace t =
      MustParse(absl::StrCat("\xEF\xBB\xBF", kHeader, "0,alloc,0,10,0\n"));
  EXPECT_EQ(t.num_allocs, 1u);
  t = MustParse(absl::StrCat("\xEF\xBB\xBF", kRmm,
                             "140,10:00:00.001,allocate,0x10,5,0x0\n"));
  EXPECT_EQ(t.num_allocs, 1u);
  // Only at the start, and only the mark: anything else is still an error.
  EXPECT_FALSE(ParseTrace(absl::StrCat("\xEF\xBB", kHeader), "t").ok());
  EXPECT_FALSE(ParseTrace(absl::StrCat(" \xEF\xBB\xBF", kHeader), "t").ok());
}

TEST(LoadTrace, ADirectoryIsSaidToBeOne) {
  const std::string dir = ::testing::TempDir() + "/gpualloc_replay_trace_dir";
  ::mkdir(dir.c_str(), 0700);
  absl::StatusOr<Trace> t = LoadTrace(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(t.status()), dir + ": is a directory, not a trace file");
  ::rmdir(dir.c_str());
}

TEST(LoadTrace, NamesTheFileInErrorsAndTheStemInTheTrace) {
  const std::string path =
      ::testing::TempDir() + "/gpualloc_replay_bad_trace.csv";
  {
    std::ofstream out(path);
    out << kHeader << "0,alloc,0,10,0\n1,frees,0,10,0\n";
  }
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(Msg(t.status()), StartsWith(path + ":3: expected action"));
  {
    std::ofstream out(path);
    out << kHeader << "0,alloc,0,10,0\n";
  }
  t = LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "gpualloc_replay_bad_trace");
  std::remove(path.c_str());
  EXPECT_EQ(LoadTrace(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(Replay, PreallocatedPeaksAreExact) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1000,0\n"
                                   "1,alloc,1,3000,0\n"
                                   "2,free,0,1000,0\n"
                                   "3,alloc,2,500,0\n"
                                   "4,free,1,3000,0\n"));
  absl::StatusOr<ReplayResult> r = Replay(t, std::string(kPrealloc));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ops, 5u);
  EXPECT_EQ(r->ooms, 0u);
  EXPECT_TRUE(r->failed_ids.empty());
  EXPECT_EQ(r->peak_bytes_requested, 4000u);
  EXPECT_EQ(r->peak_bytes_in_use, 1024u + 3072u);  // 256 B blocks
  EXPECT_EQ(r->peak_bytes_reserved, 64u << 20);
  EXPECT_EQ(r->final_bytes_reserved, 64u << 20);
  EXPECT_DOUBLE_EQ(r->utilization, 4000.0 / (64 << 20));
  EXPECT_EQ(r->backend_allocs, 1u);
  EXPECT_EQ(r->backend_frees, 0u);
  EXPECT_EQ(r->backend_calls, 1u);
  EXPECT_GT(r->modeled_backend_ns, 0u);
  EXPECT_EQ(r->hazards, 0u);
  EXPECT_GT(r->ns_per_op, 0);
  EXPECT_EQ(r->stats.bytes_requested, 500u);
  EXPECT_EQ(r->label, kPrealloc);
  EXPECT_EQ(r->device, "sim h100 1.07 GB");
  // At the peak (after op 1) two blocks sit at the start of one region: the
  // free space is one block, so nothing is fragmented.
  EXPECT_DOUBLE_EQ(r->fragmentation_at_peak, 0);
}

// As gpualloc-replay and gpualloc-tune do at the start of main, before this
// test program allocates anything sizeable.
const bool kFreedMemoryKeptMapped = [] {
  KeepFreedMemoryMapped();
  return true;
}();

// The measured pass comes after an untimed pass over the same trace, on a
// device of its own that is destroyed first: the measured pass touches no
// fresh memory, so the first replay of a process (or of a trace larger than
// any before) is not slower than the same replay run again. The trace is
// larger than any other here: 60000 blocks live at the peak (about 8 GB of
// 4096 sizes), then freed in another order.
TEST(Replay, MeasuredPassIsWarmedUpAndPaysNoPageFaults) {
  // 60000 chunks with Validate() after every operation (debug_checks=2) is
  // quadratic: hours at -O0 under the sanitizers, whose own allocator would
  // make the page-fault count meaningless anyway.
  if (GPUALLOC_DEBUG_CHECKS >= 2) {
    GTEST_SKIP() << "page faults are measured without per-operation "
                    "validation (debug_checks=2 here)";
  }
  ASSERT_TRUE(kFreedMemoryKeptMapped);
  constexpr std::uint64_t kBlocks = 60000;
  const auto Size = [](std::uint64_t i) { return 256 + 64 * (i % 4096); };
  std::string csv(kHeader);
  std::uint64_t seq = 0;
  for (std::uint64_t i = 0; i < kBlocks; ++i) {
    absl::StrAppend(&csv, seq++, ",alloc,", i, ",", Size(i), ",0\n");
  }
  for (std::uint64_t j = 0; j < kBlocks; ++j) {
    const std::uint64_t i = (j * 7919) % kBlocks;  // 7919 is prime
    absl::StrAppend(&csv, seq++, ",free,", i, ",", Size(i), ",0\n");
  }
  const Trace t = MustParse(csv);
  for (const char* config :
       {"arch=h100,device_memory=80GB,preallocate=false,expandable=false",
        "arch=h100,device_memory=80GB,allocator=platform"}) {
    SCOPED_TRACE(config);
    absl::StatusOr<ReplayResult> r = Replay(t, config);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ops, 2 * kBlocks);
    EXPECT_EQ(r->ooms, 0u);
    // A cold measured pass faults in the tables of 60000 chunks: hundreds
    // of pages. A few may remain (the stack, the clock's page).
    EXPECT_LE(r->timed_page_faults, 8u);
    EXPECT_THAT(ToJson(*r), HasSubstr(absl::StrCat("\"timed_page_faults\":",
                                                   r->timed_page_faults)));
  }
}

TEST(Replay, FragmentationIsReadAtThePeakNotAtTheEnd) {
  // a and b fill the front of the arena; a goes, leaving a 1 MiB hole that
  // c (3 MiB) does not fit: at the peak (after op 3, 4 MiB live) the free
  // space is the hole plus a 59 MiB tail. Then everything is freed.
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1048576,0\n"
                                   "1,alloc,1,1048576,0\n"
                                   "2,free,0,1048576,0\n"
                                   "3,alloc,2,3145728,0\n"
                                   "4,free,1,1048576,0\n"
                                   "5,free,2,3145728,0\n"));
  absl::StatusOr<ReplayResult> r = Replay(t, std::string(kPrealloc));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_bytes_requested, 4u << 20);
  EXPECT_NEAR(r->fragmentation_at_peak, 1.0 - 59.0 / 60.0, 1e-12);
  EXPECT_DOUBLE_EQ(r->stats.fragmentation, 0);  // all free again
}

TEST(Replay, OutOfMemoryIsCountedAndItsFreeSkipped) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,3145728,0\n"  // 3 MiB: fits
                                   "1,alloc,1,2097152,0\n"  // 2 MiB: no room
                                   "2,alloc,2,1048576,0\n"  // 1 MiB: fits
                                   "3,free,1,2097152,0\n"   // skipped
                                   "4,alloc,3,8388608,0\n"  // 8 MiB: never
                                   "5,free,0,3145728,0\n"
                                   "6,free,3,8388608,0\n"));  // skipped
  const std::string config =
      "arch=h100,device_memory=1GiB,preallocate=true,mem_limit=4MiB,name=tiny";
  absl::StatusOr<ReplayResult> r = Replay(t, config);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ooms, 2u);
  EXPECT_THAT(r->failed_ids, ElementsAre(1u, 3u));
  EXPECT_EQ(r->ops, 5u);  // 4 Allocate calls, 1 Deallocate
  EXPECT_EQ(r->stats.num_ooms, 2u);
  EXPECT_EQ(r->peak_bytes_requested, 4u << 20);
  EXPECT_EQ(r->label, "tiny");
  EXPECT_EQ(r->device, "sim h100 1.07 GB");  // backend=sim was added
}

// An out-of-memory-heavy trace on four streams: fill phases that ask for up
// to 1.6 times the device's memory, then drain phases, sizes log-uniform from
// 1 B to 256 MiB, each block freed on the stream that allocated it. Generated
// here (a splitmix64 sequence), the same everywhere.
Trace OomHeavyTrace(int num_ops, std::uint64_t device_bytes) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto uniform = [&next]() {
    return static_cast<double>(next() >> 11) * 0x1.0p-53;
  };
  const std::uint64_t eighth = device_bytes / 8;
  Trace t;
  t.name = "oom-heavy";
  t.num_streams = 4;
  struct Live {
    std::uint64_t id, size, stream;
  };
  std::vector<Live> live;
  std::uint64_t live_bytes = 0;
  bool filling = true;
  std::uint64_t high = 10 * eighth, low = 2 * eighth;
  while (static_cast<int>(t.ops.size()) < num_ops) {
    const bool alloc = live.empty() || uniform() < (filling ? 0.8 : 0.2);
    TraceOp op;
    if (alloc) {
      op.kind = TraceOp::Kind::kAlloc;
      op.id = t.num_allocs++;
      op.size = static_cast<std::uint64_t>(std::exp(
          uniform() *
          std::log(static_cast<double>(256ull << 20))));  // 1 B .. 256 MiB
      op.stream = next() % 4;
      live.push_back({op.id, op.size, op.stream});
      live_bytes += op.size;
    } else {
      const std::size_t at = next() % live.size();
      op.kind = TraceOp::Kind::kFree;
      op.id = live[at].id;
      op.size = live[at].size;
      op.stream = live[at].stream;
      live_bytes -= live[at].size;
      live[at] = live.back();
      live.pop_back();
      ++t.num_frees;
    }
    t.ops.push_back(op);
    if (filling && live_bytes >= high) {
      filling = false;
      low = (1 + next() % 4) * eighth;
    } else if (!filling && live_bytes <= low) {
      filling = true;
      high = (7 + next() % 6) * eighth;
    }
  }
  return t;
}

// The validator after every operation (debug_checks=2, the sanitizer run)
// makes each op cost as much as the live blocks: a shorter trace there.
constexpr int kOomHeavyOps = GPUALLOC_DEBUG_CHECKS >= 2 ? 2000 : 20000;

TEST(Replay, OutOfMemoryHeavyMultiStreamTraceReplaysInEveryMode) {
  const Trace t = OomHeavyTrace(kOomHeavyOps, 2ull << 30);
  ASSERT_EQ(t.num_streams, 4u);
  // The defaults preallocate 1.5 GiB; the fill phases ask for up to 3.2 GiB:
  // every configuration runs out of memory, over and over.
  const std::string device = "arch=h100,device_memory=2GiB";
  for (const std::string& config : {
           device,
           device + ",preallocate=false",
           device + ",preallocate=false,expandable=false",
           device + ",expandable=false",
           device + ",allocator=platform",
           device + ",allocator=async",
           device + ",preallocate=false,mem_fraction=0.3",
       }) {
    absl::StatusOr<ReplayResult> r = Replay(t, config);
    if (!r.ok()) {
      ADD_FAILURE() << config << ": " << r.status();
      continue;
    }
    EXPECT_GT(r->ooms, 0u) << config;
    EXPECT_EQ(r->failed_ids.size(), r->ooms) << config;
    EXPECT_EQ(r->hazards, 0u) << config;
  }
}

// A trace naming many streams, each block handed to the stream 8 later
// (a chain of orderings across all of them): the replay's cost follows the
// trace, not the square of its streams (4x the streams took 21x the time,
// and 50,000 streams ran past a minute). Four times the streams must take
// less than eight times as long (the best of two runs each).
std::string ManyStreams(int streams) {
  std::string text(kHeader);
  int seq = 0, id = 0;
  std::vector<int> live;
  for (int s = 1; s <= streams; ++s) {
    absl::StrAppend(&text, seq++, ",alloc,", id, ",", 4096 * (1 + s % 7), ",",
                    s, "\n");
    live.push_back(id++);
    if (live.size() > 8) {
      const int freed = live.front();
      live.erase(live.begin());
      absl::StrAppend(&text, seq++, ",free,", freed, ",0,", s, "\n");
    }
  }
  for (int freed : live) {
    absl::StrAppend(&text, seq++, ",free,", freed, ",0,", streams, "\n");
  }
  return text;
}

TEST(Replay, CostFollowsTheTraceNotTheSquareOfItsStreams) {
  const int small = GPUALLOC_DEBUG_CHECKS >= 2 ? 3000 : 12000;
  const auto seconds = [](const Trace& t) {
    double best = 1e9;
    for (int run = 0; run < 2; ++run) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<ReplayResult> r = Replay(t, "backend=sim");
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) {
        EXPECT_EQ(r->hazards, 0u);
      }
      EXPECT_TRUE(NoWaitBound(t, ReplayOptions{}).has_value());
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count());
    }
    return best;
  };
  const double one = seconds(MustParse(ManyStreams(small)));
  const double four = seconds(MustParse(ManyStreams(4 * small)));
  EXPECT_LT(four, 8 * one + 0.05) << small << " streams: " << one << " s; "
                                  << 4 * small << " streams: " << four << " s";
}

TEST(Replay, OutOfMemoryHeavyTraceRepeats) {
  const Trace t = OomHeavyTrace(kOomHeavyOps / 4, 2ull << 30);
  ReplayOptions options;
  options.repeat = 2;
  for (const std::string& config :
       {std::string("arch=h100,device_memory=2GiB,preallocate=false"),
        std::string("arch=h100,device_memory=2GiB,allocator=async")}) {
    absl::StatusOr<ReplayResult> r = Replay(t, config, options);
    ASSERT_TRUE(r.ok()) << config << ": " << r.status();
    ASSERT_EQ(r->repetitions.size(), 2u);
    EXPECT_GT(r->repetitions[1].ooms, 0u) << config;
    EXPECT_EQ(r->repetitions[0].ooms + r->repetitions[1].ooms, r->ooms);
    EXPECT_EQ(r->hazards, 0u) << config;
    EXPECT_EQ(r->stats.bytes_in_use, 0u) << config;  // the drain freed all
  }
}

TEST(Replay, RepeatRunsTheTraceAgainUnderNewIds) {
  // OutOfMemoryIsCountedAndItsFreeSkipped's trace twice: the second pass's
  // ids are the first's plus 4, and it fails the same two allocations.
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,3145728,0\n"
                                   "1,alloc,1,2097152,0\n"
                                   "2,alloc,2,1048576,0\n"
                                   "3,free,1,2097152,0\n"
                                   "4,alloc,3,8388608,0\n"
                                   "5,free,0,3145728,0\n"
                                   "6,free,3,8388608,0\n"));
  ReplayOptions options;
  options.repeat = 2;
  absl::StatusOr<ReplayResult> r =
      Replay(t, "arch=h100,device_memory=1GiB,preallocate=true,mem_limit=4MiB",
             options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->failed_ids, ElementsAre(1u, 3u, 5u, 7u));
  EXPECT_EQ(r->ooms, 4u);
  // 5 calls per pass as before, plus the drain's free of id 2 (and 6).
  EXPECT_EQ(r->ops, 12u);
  ASSERT_EQ(r->repetitions.size(), 2u);
  EXPECT_EQ(r->repetitions[0].ops, 6u);
  EXPECT_EQ(r->repetitions[1].ooms, 2u);
  EXPECT_EQ(r->repetitions[1].peak_bytes_requested, 4u << 20);
  EXPECT_EQ(r->stats.bytes_in_use, 0u);
  EXPECT_EQ(r->stats.num_ooms, 4u);
  EXPECT_EQ(r->repeat, 2u);
  options.repeat = 0;
  EXPECT_EQ(Replay(t, "", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Replay, RepeatedBundledTracePassesAreAlikeAndAddUp) {
  absl::StatusOr<Trace> t =
      LoadTrace(TraceDir() + "/torch-cs336-medium_1024_inference.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> configs = {
      "arch=h100,preallocate=false,expandable=false",
      "arch=h100,allocator=platform"};
  // Expandable regions under the per-op validator (debug_checks=2) take
  // long; the main run covers them.
  if (GPUALLOC_DEBUG_CHECKS < 2)
    configs.push_back("arch=h100,preallocate=false");
  for (const std::string& config : configs) {
    ReplayOptions options;
    options.repeat = 3;
    absl::StatusOr<ReplayResult> r = Replay(*t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->repetitions.size(), 3u);
    std::uint64_t calls = 0, allocs = 0, frees = 0, ops = 0, ns = 0;
    for (const ReplayRepetition& p : r->repetitions) {
      EXPECT_EQ(p.peak_bytes_in_use, r->repetitions[0].peak_bytes_in_use)
          << config;
      EXPECT_EQ(p.peak_bytes_requested, r->peak_bytes_requested) << config;
      EXPECT_LE(p.peak_bytes_reserved, r->peak_bytes_reserved) << config;
      calls += p.backend_calls;
      allocs += p.backend_allocs;
      frees += p.backend_frees;
      ops += p.ops;
      ns += p.modeled_backend_ns;
    }
    EXPECT_EQ(r->peak_bytes_in_use, r->repetitions[0].peak_bytes_in_use);
    EXPECT_EQ(calls, r->backend_calls) << config;
    EXPECT_EQ(allocs, r->backend_allocs) << config;
    EXPECT_EQ(frees, r->backend_frees) << config;
    EXPECT_EQ(ops, r->ops) << config;
    EXPECT_EQ(ns, r->modeled_backend_ns) << config;
    // One pass alone: the first pass's figures are its.
    absl::StatusOr<ReplayResult> once = Replay(*t, config);
    ASSERT_TRUE(once.ok()) << once.status();
    EXPECT_EQ(r->repetitions[0].peak_bytes_in_use, once->peak_bytes_in_use);
    EXPECT_EQ(r->repetitions[0].peak_bytes_reserved, once->peak_bytes_reserved);
    const std::string json = ToJson(*r);
    const std::size_t reps = json.find("\"repetitions\":[{");
    ASSERT_NE(reps, std::string::npos) << json;
    std::size_t entries = 0;
    for (std::size_t at = reps;
         (at = json.find("{\"ops\":", at)) != std::string::npos; ++at) {
      ++entries;
    }
    EXPECT_EQ(entries, 3u);
    EXPECT_EQ(JsonNumber(json, "repeat"), 3);
  }
}

// A repeated step makes no device call once warm: on one stream from pass 2
// on in every growing configuration, and no growth below the limit means no
// unmapping either.
TEST(Replay, ARepeatedSingleStreamStepMakesNoDeviceCall) {
  absl::StatusOr<Trace> t =
      LoadTrace(TraceDir() + "/torch-cs336-medium_1024_inference.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> configs = {
      "arch=h100,preallocate=false,expandable=false,mem_fraction=0.95"};
  if (GPUALLOC_DEBUG_CHECKS < 2)
    configs.push_back("arch=h100,preallocate=false,mem_fraction=0.95");
  for (const std::string& config : configs) {
    ReplayOptions options;
    options.repeat = 3;
    absl::StatusOr<ReplayResult> r = Replay(*t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    for (std::size_t pass = 1; pass < r->repetitions.size(); ++pass) {
      const ReplayRepetition& p = r->repetitions[pass];
      EXPECT_EQ(p.backend_allocs, 0u) << config << " pass " << pass + 1;
      EXPECT_EQ(p.backend_frees, 0u) << config << " pass " << pass + 1;
      EXPECT_EQ(p.host_waits, 0u) << config << " pass " << pass + 1;
    }
  }
}

// A multi-stream step repeated reaches its steady peak by the second pass:
// what completed merges back as soon as the allocator learns it, so the
// next pass finds the memory whole and grows no further.
TEST(Replay, ARepeatedMultiStreamStepHoldsItsSecondPassPeak) {
  absl::StatusOr<Trace> t = LoadTrace(TraceDir() + "/gen-fsdp.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> configs = {
      "arch=h100,preallocate=false,expandable=false,mem_fraction=0.95"};
  if (GPUALLOC_DEBUG_CHECKS < 2)
    configs.push_back("arch=h100,preallocate=false,mem_fraction=0.95");
  for (const std::string& config : configs) {
    ReplayOptions options;
    options.repeat = 4;
    absl::StatusOr<ReplayResult> r = Replay(*t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->repetitions.size(), 4u);
    EXPECT_EQ(r->hazards, 0u) << config;
    EXPECT_EQ(r->host_waits, 0u) << config;
    for (std::size_t pass = 2; pass < r->repetitions.size(); ++pass) {
      const ReplayRepetition& p = r->repetitions[pass];
      EXPECT_EQ(p.peak_bytes_reserved, r->repetitions[1].peak_bytes_reserved)
          << config << " pass " << pass + 1;
      EXPECT_EQ(p.backend_allocs, 0u) << config << " pass " << pass + 1;
      EXPECT_EQ(p.backend_frees, 0u) << config << " pass " << pass + 1;
    }
    // Calls to learn completion stay within 25 per 100 frees (the stream
    // order spends 20, plus a burst of 32, plus one marker per wait).
    EXPECT_LE(r->completion_calls * 100,
              r->frees * 25 + 100 * (32 + r->stream_waits))
        << config;
  }
}

TEST(Replay, CompleteEveryIsTheDeviceProgressModel) {
  // Blocks freed on one stream and wanted on another: the sooner the queued
  // work completes, the sooner the memory is reusable there.
  std::string text(kHeader);
  int seq = 0;
  for (int i = 0; i < 400; ++i) {
    absl::StrAppend(&text, seq++, ",alloc,", i, ",", 1 << 20, ",", i % 4, "\n");
    if (i >= 4) {
      absl::StrAppend(&text, seq++, ",free,", i - 4, ",0,", (i - 4) % 4, "\n");
    }
  }
  Trace t = MustParse(text);
  const std::string config = "arch=h100,device_memory=1GiB,preallocate=false";
  std::vector<std::uint64_t> reserved;
  for (std::uint64_t every : {1, 64, 0}) {
    ReplayOptions options;
    options.complete_every = every;
    absl::StatusOr<ReplayResult> r = Replay(t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->complete_every, every);
    EXPECT_EQ(r->hazards, 0u) << every;
    EXPECT_EQ(JsonNumber(ToJson(*r), "complete_every"),
              static_cast<double>(every));
    reserved.push_back(r->peak_bytes_reserved);
  }
  EXPECT_LE(reserved[0], reserved[1]);
  EXPECT_LE(reserved[1], reserved[2]);
  EXPECT_LT(reserved[0], reserved[2]);
}

// The timestamp model: the host calls at the trace's times, each use runs
// work_us. Stream 1's block is freed 10 us after its use started and stream
// 2 wants it 10 us later, under a limit that holds one block: with short work
// the event query finds it complete, with long work the host must wait.
TEST(Replay, WorkUsIsTheTimestampProgressModel) {
  Trace t = MustParse(
      "seq,action,addr_or_id,size,stream,time_us\n"
      "0,alloc,0,2097152,1,0\n"
      "1,free,0,0,1,10\n"
      "2,alloc,1,2097152,2,20\n"
      "3,free,1,0,2,30\n"
      "4,alloc,2,2097152,1,40\n"
      "5,free,2,0,1,50\n");
  // (Host waits, not stream waits, out of memory: what they count is how
  // long the work runs.)
  const std::string config =
      "arch=h100,preallocate=false,mem_limit=2MiB,cross_stream=when_complete";
  std::vector<std::uint64_t> waits;
  for (std::uint64_t work_us : {5, 1000}) {
    ReplayOptions options;
    options.work_us = work_us;
    absl::StatusOr<ReplayResult> r = Replay(t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->progress_model, "timestamps");
    EXPECT_EQ(r->work_us, work_us);
    EXPECT_EQ(r->ooms, 0u);
    EXPECT_EQ(r->hazards, 0u);
    waits.push_back(r->host_waits);
  }
  EXPECT_EQ(waits[0], 0u);
  EXPECT_EQ(waits[1], 2u);
  // Without times, or without work_us, the ops model runs.
  absl::StatusOr<ReplayResult> ops = Replay(t, config);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(ops->progress_model, "ops");
  EXPECT_THAT(ToJson(*ops), HasSubstr("\"progress_model\":\"ops\""));
}

TEST(Replay, PlatformModeCallsTheBackendPerAllocation) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1000,0\n"
                                   "1,alloc,1,2000,0\n"
                                   "2,free,0,1000,0\n"
                                   "3,alloc,2,3000,0\n"));
  absl::StatusOr<ReplayResult> r =
      Replay(t, "allocator=platform,arch=h100,device_memory=1GiB");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->backend_allocs, 3u);
  EXPECT_EQ(r->backend_frees, 1u);
  EXPECT_EQ(r->peak_bytes_requested, 5000u);  // 2000 + 3000
}

TEST(Replay, TheEnvironmentIsNotRead) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1000,0\n"
                                   "1,alloc,1,1000,0\n"));
  ASSERT_EQ(setenv("GPUALLOC_ALLOCATOR", "platform", 1), 0);
  absl::StatusOr<ReplayResult> r = Replay(t, "");
  unsetenv("GPUALLOC_ALLOCATOR");
  ASSERT_TRUE(r.ok()) << r.status();
  // Not platform (one backend call per block): the defaults, as an explicit
  // bfc configuration gives them.
  absl::StatusOr<ReplayResult> bfc = Replay(t, "allocator=bfc");
  ASSERT_TRUE(bfc.ok()) << bfc.status();
  EXPECT_EQ(r->backend_allocs, bfc->backend_allocs);
  EXPECT_EQ(r->peak_bytes_reserved, bfc->peak_bytes_reserved);
  EXPECT_EQ(r->label, "defaults");
  EXPECT_THAT(r->device, StartsWith("sim h200 "));
}

TEST(Replay, ConfigurationErrorsAreReturned) {
  Trace t = MustParse(absl::StrCat(kHeader, "0,alloc,0,1000,0\n"));
  absl::StatusOr<ReplayResult> r = Replay(t, "allocator=bogus");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("bogus"));
  EXPECT_FALSE(Replay(t, "arch=nosuchgpu").ok());
}

TEST(Replay, MultiStreamTraceFeedsTheHazardDetector) {
  std::string text(kHeader);
  int seq = 0;
  for (int i = 0; i < 200; ++i) {
    absl::StrAppend(&text, seq++, ",alloc,", i, ",", 65536 * (1 + i % 7), ",",
                    i % 3, "\n");
    if (i >= 2) {
      absl::StrAppend(&text, seq++, ",free,", i - 2, ",0,", (i - 2) % 3, "\n");
    }
  }
  Trace t = MustParse(text);
  EXPECT_EQ(t.num_streams, 3u);
  absl::StatusOr<ReplayResult> r = Replay(t, std::string(kPrealloc));
  ASSERT_TRUE(r.ok()) << r.status();
  // The allocator never hands out memory another stream may still use; with
  // memory to spare its markers are only the budgeted ones that tell it
  // early when frees completed (at most 25 calls per 100 frees, and a burst
  // of 32).
  EXPECT_EQ(r->hazards, 0u);
  EXPECT_EQ(r->frees, 198u);
  EXPECT_LE(r->completion_calls * 100, 198u * 25 + 100 * 32);
  // In a 2 MiB pool the streams must reuse each other's memory: events
  // (counted among the backend calls) say when that is safe.
  r = Replay(t,
             "backend=sim,arch=h100,device_memory=1GiB,preallocate=true,"
             "mem_limit=2MiB,expandable=false");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hazards, 0u);
  EXPECT_EQ(r->ooms, 0u);
  EXPECT_GT(r->events_recorded, 0u);
  EXPECT_GT(r->backend_calls, r->backend_allocs);
}

TEST(Replay, ABlockFreedOnAnotherStreamIsAHandoverNotAHazard) {
  // Each block is allocated on stream 1 and 2 in turn and freed on the other
  // one (a producer and a consumer); the memory is reused at once.
  std::string text(kHeader);
  int seq = 0;
  for (int i = 0; i < 300; ++i) {
    absl::StrAppend(&text, seq++, ",alloc,", i, ",", 1 << 20, ",", 1 + i % 2,
                    "\n");
    absl::StrAppend(&text, seq++, ",free,", i, ",0,", 2 - i % 2, "\n");
  }
  Trace t = MustParse(text);
  for (const std::string& config :
       {std::string(kPrealloc), std::string("arch=h100,preallocate=false"),
        std::string("arch=h100,allocator=async")}) {
    absl::StatusOr<ReplayResult> r = Replay(t, config);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->hazards, 0u) << config;
    EXPECT_EQ(r->ooms, 0u) << config;
  }
}

TEST(Replay, TimelineRecordsBlocksRegionsAndSamples) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,1048576,0\n"
                                   "1,alloc,1,40000000,0\n"
                                   "2,free,0,1048576,0\n"
                                   "3,free,1,40000000,0\n"
                                   "4,alloc,2,1000,0\n"));
  ReplayOptions options;
  options.record_timeline = true;
  std::vector<std::uint64_t> progress;
  options.progress = [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_EQ(total, 5u);
    progress.push_back(done);
  };
  absl::StatusOr<ReplayResult> r =
      Replay(t, "arch=h100,device_memory=1GiB,preallocate=false", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(progress.back(), 5u);
  const Timeline& tl = r->timeline;
  EXPECT_EQ(tl.num_ops, 5u);
  ASSERT_EQ(tl.blocks.size(), 3u);
  EXPECT_EQ(tl.blocks[0].alloc_op, 0u);
  EXPECT_EQ(tl.blocks[0].free_op, 2u);
  EXPECT_EQ(tl.blocks[1].size, 40000000u);
  EXPECT_EQ(tl.blocks[1].free_op, 3u);
  EXPECT_EQ(tl.blocks[2].free_op, 5u);  // never freed
  EXPECT_NE(tl.blocks[0].address, tl.blocks[1].address);
  ASSERT_FALSE(tl.regions.empty());
  EXPECT_EQ(tl.regions[0].from_op, 0u);
  std::uint64_t first_region_bytes = 0;
  for (const TimelineRegion& region : tl.regions) {
    EXPECT_LE(region.from_op, region.to_op);
    if (region.from_op == 0) first_region_bytes += region.size;
  }
  EXPECT_GE(first_region_bytes, 1048576u);
  ASSERT_EQ(tl.sample_ops.size(), 5u);  // fewer ops than samples: all
  EXPECT_EQ(tl.sample_reserved.size(), 5u);
  EXPECT_EQ(tl.sample_in_use.size(), 5u);
  EXPECT_EQ(tl.sample_in_use[0], 1048576u);
  EXPECT_EQ(tl.sample_reserved.back(), r->final_bytes_reserved);
}

// The regions drawn alive after an op add up to the bytes reserved then. With
// expandable regions a mapped run grows and shrinks in place; keeping one
// record per run at its largest size drew 1.80 GiB of reserved memory on the
// OPT-125m trace, whose peak reserved is 1.67 GiB. The addresses used over
// the whole run do span more than the peak: free pieces are unmapped and
// memory is mapped again elsewhere in the range.
TEST(ReplayTimeline, RegionsAliveAddUpToTheBytesReservedThen) {
  absl::StatusOr<Trace> t =
      LoadTrace(TraceDir() + "/torch-opt125m-zo-finetune.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ReplayOptions options;
  options.record_timeline = true;
  for (const char* config : {"arch=h100,preallocate=false",
                             "arch=h100,preallocate=false,expandable=false"}) {
    SCOPED_TRACE(config);
    absl::StatusOr<ReplayResult> r = Replay(*t, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    const Timeline& tl = r->timeline;
    EXPECT_EQ(tl.mode, "bfc");
    EXPECT_EQ(tl.expandable, std::string(config).find("expandable=false") ==
                                 std::string::npos);
    ASSERT_FALSE(tl.sample_ops.empty());
    std::uint64_t most = 0;
    for (std::size_t k = 0; k < tl.sample_ops.size(); ++k) {
      const std::uint64_t op = tl.sample_ops[k];
      std::uint64_t alive = 0;
      for (const TimelineRegion& region : tl.regions) {
        if (region.from_op <= op && op < region.to_op) alive += region.size;
      }
      ASSERT_EQ(alive, tl.sample_reserved[k]) << "after op " << op;
      most = std::max(most, alive);
    }
    EXPECT_LE(most, r->peak_bytes_reserved);
    std::set<std::uint64_t> bases;
    std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
    for (const TimelineRegion& region : tl.regions) {
      bases.insert(region.base);
      lo = std::min(lo, region.base);
      hi = std::max(hi, region.base + region.size);
    }
    EXPECT_GE(bases.size(), 1u);
    if (tl.expandable) {
      // One reserved range: the span of the addresses ever mapped is at
      // least the peak, and more where memory unmapped under pressure left
      // holes (what the picture's caption explains).
      EXPECT_GE(hi - lo, r->peak_bytes_reserved);
    }
  }
}

// The no-wait bound on a trace small enough to follow by hand, in bytes, two
// streams (1 and 0), the ops model completing all work after every 4 steps:
//   step  op                     live  pending          live + pending
//   1     alloc a 100 on s1       100  -                100
//   2     free a on s1              0  s1 100           100
//   3     alloc b 30 on s0         30  s1 100           130 (not s1's)
//   4     alloc c 90 on s1        120  s1 10            130 (90 of s1's)
//         -- all work completes --
//   5     free b on s0             90  -                 90 (s0 queued
//                                                        nothing since)
//   6     alloc d 50 on s1        140  -                140
//   7     free c on s0 (handed    50  s0 90            140 (s0's use of c)
//         over from s1)
//   8     alloc e 40 on s1         90  s0 90            180 (not s0's)
// The bound is 180; the peak requested 140. Taking no pending bytes back on
// their own stream would give 220 at step 4; a free on a stream with no work
// since the completion counted as pending, 210 at step 8; a handover not
// pending on the freeing stream, 140.
constexpr absl::string_view kBoundTrace =
    "0,alloc,0,100,1\n"
    "1,free,0,100,1\n"
    "2,alloc,1,30,0\n"
    "3,alloc,2,90,1\n"
    "4,free,1,30,0\n"
    "5,alloc,3,50,1\n"
    "6,free,2,90,0\n"
    "7,alloc,4,40,1\n";

TEST(NoWaitBound, OpsModelByHand) {
  const Trace t = MustParse(absl::StrCat(kHeader, kBoundTrace));
  ReplayOptions options;
  options.complete_every = 4;
  EXPECT_EQ(NoWaitBound(t, options), 180u);
  // Nothing ever completes: b's free is pending on s0 (30), d takes s1's
  // last 10, so step 8 holds 90 live + 30 + 90 pending on s0.
  options.complete_every = 0;
  EXPECT_EQ(NoWaitBound(t, options), 210u);
  // Everything completes after every step: no byte is ever pending when an
  // allocation comes, and the bound is the peak requested.
  options.complete_every = 1;
  EXPECT_EQ(NoWaitBound(t, options), 140u);
  // Twice, every 4 steps over the whole run: the drain frees d and e (steps 9
  // and 10, nothing pending), pass 2 is pass 1 shifted by two steps, so b's
  // free (step 15) is pending and d (step 16) is 140 + 30; then as before,
  // 180 at step 18.
  options.complete_every = 4;
  options.repeat = 2;
  EXPECT_EQ(NoWaitBound(t, options), 180u);
}

// The timestamp model: a use takes work_us; the host calls at the times.
//   t=0  alloc a 100 on s1 (its use runs to t=w), t=5 free a on s1,
//   t=6  alloc b 60 on s2, t=20 free b on s2, t=21 alloc c 100 on s2.
// w=10: a's bytes are pending until t=10, so at t=6 100 + 60 = 160; b's use
// ends at 16, complete by its free at 20. w=1: a's use ended before its free,
// nothing is ever pending: 100. The ops model on the same trace: nothing
// completes within 64 steps, b's 60 pending on s2 go to c, 100 + 100 = 200.
TEST(NoWaitBound, TimestampModelByHand) {
  const Trace t = MustParse(
      "seq,action,addr_or_id,size,stream,time_us\n"
      "0,alloc,0,100,1,0\n"
      "1,free,0,100,1,5\n"
      "2,alloc,1,60,2,6\n"
      "3,free,1,60,2,20\n"
      "4,alloc,2,100,2,21\n");
  ReplayOptions options;
  options.work_us = 10;
  EXPECT_EQ(NoWaitBound(t, options), 160u);
  options.work_us = 1;
  EXPECT_EQ(NoWaitBound(t, options), 100u);
  options.work_us = 0;
  EXPECT_EQ(NoWaitBound(t, options), 200u);
}

TEST(NoWaitBound, OnlyForMultiStreamTracesAndInEveryResult) {
  const Trace one = MustParse(absl::StrCat(kHeader,
                                           "0,alloc,0,1000,0\n"
                                           "1,free,0,1000,0\n"));
  EXPECT_EQ(NoWaitBound(one, {}), std::nullopt);
  const Trace two = MustParse(absl::StrCat(kHeader, kBoundTrace));
  ReplayOptions options;
  options.complete_every = 4;
  options.one_stream = true;
  EXPECT_EQ(NoWaitBound(two, options), std::nullopt);
  options.one_stream = false;
  // Every configuration carries the same bound; one stream carries none.
  for (const char* config : {"arch=h100,preallocate=false",
                             "arch=h100,preallocate=false,expandable=false"}) {
    absl::StatusOr<ReplayResult> r = Replay(two, config, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->nowait_bound_bytes, 180u) << config;
    EXPECT_THAT(ToJson(*r), HasSubstr("\"nowait_bound_bytes\":180,"));
  }
  absl::StatusOr<ReplayResult> r = Replay(one, "arch=h100,preallocate=false");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nowait_bound_bytes, std::nullopt);
  EXPECT_THAT(ToJson(*r), HasSubstr("\"nowait_bound_bytes\":null,"));
}

// The bundled generated traces: the bound lies between the peak requested and
// the peak reserved of an allocator that made no stream and no host wait
// (cross_stream=stream_wait: no wait with memory to spare).
TEST(NoWaitBound, BundledMultiStreamTracesBetweenRequestedAndReserved) {
  for (const char* name : {"gen-prefetch", "gen-fsdp", "gen-serve"}) {
    absl::StatusOr<Trace> t = LoadTrace(TraceDir() + "/" + name + ".csv");
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<ReplayResult> r =
        Replay(*t,
               "arch=h100,preallocate=false,expandable=false,"
               "cross_stream=stream_wait");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    ASSERT_TRUE(r->nowait_bound_bytes.has_value()) << name;
    EXPECT_GE(*r->nowait_bound_bytes, r->peak_bytes_requested) << name;
    EXPECT_EQ(r->host_waits + r->stream_waits, 0u) << name;
    EXPECT_LE(*r->nowait_bound_bytes, r->peak_bytes_reserved) << name;
  }
}

// Many streams freeing what others then want: with the work never
// completing, the streams cost memory that one stream does not.
std::string StreamsTraceText(bool all_on_stream_0) {
  std::string text(kHeader);
  int seq = 0;
  for (int i = 0; i < 400; ++i) {
    const int stream = all_on_stream_0 ? 0 : i % 4;
    absl::StrAppend(&text, seq++, ",alloc,", i, ",", 1 << 20, ",", stream,
                    "\n");
    if (i >= 4) {
      const int freeing = all_on_stream_0 ? 0 : (i - 4) % 4;
      absl::StrAppend(&text, seq++, ",free,", i - 4, ",0,", freeing, "\n");
    }
  }
  return text;
}

TEST(OneStream, ReplaysAsTheTraceRewrittenToStream0) {
  const Trace t = MustParse(StreamsTraceText(false));
  const Trace rewritten = MustParse(StreamsTraceText(true));
  const Trace merged = OneStream(t);
  EXPECT_EQ(merged.num_streams, 1u);
  EXPECT_EQ(merged.name, t.name);
  ASSERT_EQ(merged.ops.size(), rewritten.ops.size());
  for (std::size_t i = 0; i < merged.ops.size(); ++i) {
    EXPECT_EQ(merged.ops[i].stream, 0u) << i;
  }
  const std::string config = "arch=h100,device_memory=1GiB,preallocate=false";
  ReplayOptions options;
  options.complete_every = 0;
  absl::StatusOr<ReplayResult> streams = Replay(t, config, options);
  ASSERT_TRUE(streams.ok()) << streams.status();
  absl::StatusOr<ReplayResult> by_hand = Replay(rewritten, config, options);
  ASSERT_TRUE(by_hand.ok()) << by_hand.status();
  options.one_stream = true;
  absl::StatusOr<ReplayResult> one = Replay(t, config, options);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->one_stream);
  EXPECT_FALSE(streams->one_stream);
  EXPECT_EQ(one->peak_bytes_reserved, by_hand->peak_bytes_reserved);
  EXPECT_EQ(one->peak_bytes_requested, by_hand->peak_bytes_requested);
  EXPECT_EQ(one->backend_allocs, by_hand->backend_allocs);
  EXPECT_EQ(one->progress_model, "");
  EXPECT_EQ(one->nowait_bound_bytes, std::nullopt);
  // The streams do cost memory here, so the flag is seen to act.
  EXPECT_LT(one->peak_bytes_reserved, streams->peak_bytes_reserved);
  const std::string json = ToJson(*one);
  EXPECT_THAT(json, HasSubstr("\"one_stream\":true,"));
  EXPECT_THAT(json, HasSubstr("\"one_stream_peak_bytes_reserved\":null"));
  EXPECT_THAT(ToJson(*streams), HasSubstr("\"one_stream\":false,"));
}

// The header row of FormatReplayReport's table.
std::string HeaderRow(const std::string& report) {
  for (absl::string_view line : absl::StrSplit(report, '\n')) {
    if (absl::StartsWith(line, "  config")) return std::string(line);
  }
  return "";
}

TEST(Report, RepeatShowsTheFirstAndTheLastPassPeakReserved) {
  const Trace t = MustParse(absl::StrCat(kHeader, kBoundTrace));
  ReplayOptions options;
  options.repeat = 3;
  absl::StatusOr<ReplayResult> r =
      Replay(t, "name=grow,arch=h100,preallocate=false", options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->repetitions.size(), 3u);
  // Different figures in the two columns, to tell them apart.
  r->repetitions.front().peak_bytes_reserved = 1ull << 30;
  r->repetitions.back().peak_bytes_reserved = 3ull << 29;
  ReportOptions report_options;
  report_options.repeat = 3;
  const std::string report = FormatReplayReport({*r}, report_options);
  const std::string header = HeaderRow(report);
  EXPECT_THAT(header, HasSubstr("  pass 1 peak  pass 3 peak  "));
  // (Legend names are padded to the longest shown.)
  EXPECT_THAT(report, ContainsRegex("\n  pass 1 peak +peak reserved during the "
                                    "first pass\n"));
  EXPECT_THAT(report, ContainsRegex("\n  pass 3 peak +peak reserved during the "
                                    "last pass"));
  // The row: peak reserved, then pass 1's and pass 3's.
  EXPECT_THAT(report, HasSubstr("  1.000 GiB    1.500 GiB  "));
  // One pass: no such columns.
  r = Replay(t, "name=grow,arch=h100,preallocate=false");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string once = FormatReplayReport({*r}, {});
  EXPECT_THAT(once, Not(HasSubstr("pass 1 peak")));
  EXPECT_THAT(once, Not(HasSubstr("pass ")));
}

TEST(Report, NoWaitBoundAndOneStreamPeakColumns) {
  const Trace multi = MustParse(absl::StrCat(kHeader, kBoundTrace));
  const Trace single = MustParse(absl::StrCat(kHeader, "0,alloc,0,1000,0\n"));
  ReplayOptions options;
  options.complete_every = 4;
  absl::StatusOr<ReplayResult> a = Replay(multi, "name=m", options);
  absl::StatusOr<ReplayResult> b = Replay(single, "name=s", options);
  ASSERT_TRUE(a.ok() && b.ok());
  b->trace = "single";
  const std::string report = FormatReplayReport({*a, *b}, {});
  EXPECT_THAT(HeaderRow(report),
              HasSubstr("  peak requested  no-wait bound  peak reserved  "));
  EXPECT_THAT(report,
              ContainsRegex("\n  no-wait bound +multi-stream traces: "));
  // The single-stream row has none.
  std::vector<std::string> cells;
  for (absl::string_view line : absl::StrSplit(report, '\n')) {
    if (absl::StartsWith(line, "  s ")) {
      cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    }
  }
  ASSERT_GE(cells.size(), 6u);
  // s, ops, ooms, the peak requested (number, unit), the bound.
  EXPECT_EQ(cells[5], "-");
  EXPECT_THAT(report, Not(HasSubstr("one-stream peak")));
  // Single-stream traces alone: no bound column.
  EXPECT_THAT(FormatReplayReport({*b}, {}), Not(HasSubstr("no-wait bound")));
  // With the one-stream replay's figure, its column, "-" where none.
  a->one_stream_peak_bytes_reserved = 1ull << 30;
  const std::string compared = FormatReplayReport({*a, *b}, {});
  EXPECT_THAT(HeaderRow(compared),
              HasSubstr("  peak reserved  one-stream peak  "));
  EXPECT_THAT(compared,
              ContainsRegex("\n  one-stream peak +peak reserved of the "
                            "same replay with every stream mapped"));
  // Replayed as one stream, the trace's heading says so.
  options.one_stream = true;
  absl::StatusOr<ReplayResult> one = Replay(multi, "name=m", options);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(FormatReplayReport({*one}, {}),
              HasSubstr("\nt (every stream replayed as stream 0)\n"));
}

TEST(ToJson, HasEveryFieldWithItsMeaning) {
  Trace t = MustParse(absl::StrCat(kHeader,
                                   "0,alloc,0,3145728,0\n"
                                   "1,alloc,1,2097152,0\n"
                                   "2,free,1,2097152,0\n"));
  t.name = "we\"ird\\name";
  absl::StatusOr<ReplayResult> r =
      Replay(t, "arch=h100,device_memory=1GiB,preallocate=true,mem_limit=4MiB");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string json = ToJson(*r);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_THAT(json, HasSubstr(R"("trace":"we\"ird\\name")"));
  EXPECT_THAT(json, HasSubstr(R"("failed_ids":[1])"));
  for (absl::string_view key : {"config",
                                "label",
                                "device",
                                "ops",
                                "frees",
                                "ooms",
                                "peak_bytes_in_use",
                                "peak_bytes_requested",
                                "peak_bytes_reserved",
                                "final_bytes_reserved",
                                "utilization",
                                "fragmentation_at_peak",
                                "largest_free_block_bytes",
                                "backend_allocs",
                                "backend_frees",
                                "backend_calls",
                                "modeled_backend_ns",
                                "events_recorded",
                                "host_waits",
                                "stream_waits",
                                "completion_calls",
                                "stream_waits_per_100_frees",
                                "completion_calls_per_100_frees",
                                "hazards",
                                "ns_per_op",
                                "timed_page_faults",
                                "repeat",
                                "complete_every",
                                "progress_model",
                                "work_us",
                                "nowait_bound_bytes",
                                "one_stream",
                                "one_stream_peak_bytes_reserved",
                                "repetitions"}) {
    EXPECT_THAT(json, HasSubstr(absl::StrCat("\"", key, "\":"))) << key;
  }
  EXPECT_EQ(JsonNumber(json, "ops"), 2);
  EXPECT_EQ(JsonNumber(json, "ooms"), 1);
  EXPECT_EQ(JsonNumber(json, "peak_bytes_requested"), 3145728);
  EXPECT_EQ(JsonNumber(json, "peak_bytes_reserved"), 4194304);
  EXPECT_DOUBLE_EQ(JsonNumber(json, "utilization"), 0.75);
  const std::size_t stats = json.find("\"stats\":{");
  ASSERT_NE(stats, std::string::npos);
  for (absl::string_view key :
       {"num_allocs", "bytes_in_use", "peak_bytes_in_use", "largest_alloc_size",
        "bytes_limit", "bytes_reserved", "peak_bytes_reserved",
        "largest_free_block_bytes", "bytes_requested", "peak_bytes_requested",
        "fragmentation", "num_ooms", "backend_allocs", "backend_frees",
        "events_recorded", "stream_waits", "host_waits"}) {
    EXPECT_NE(json.find(absl::StrCat("\"", key, "\":"), stats),
              std::string::npos)
        << key;
  }
  EXPECT_EQ(JsonNumber(json, "num_allocs", stats), 1);
  EXPECT_EQ(JsonNumber(json, "bytes_limit", stats), 4194304);
  EXPECT_EQ(JsonNumber(json, "num_ooms", stats), 1);
}

TEST(LoadBaseline, ReadsTheBundledTable) {
  auto b = LoadBaseline(TraceDir() + "/SOURCES.md");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->size(), 4u);
  EXPECT_EQ(b->at("torch-cs336-medium_128_training"), 7234872410u);  // 6.738
  EXPECT_EQ(b->at("torch-opt125m-zo-finetune"), 1898375545u);        // 1.768
  EXPECT_TRUE(b->contains("torch-cs336-medium_1024_training"));
  EXPECT_TRUE(b->contains("torch-cs336-medium_1024_inference"));
}

TEST(LoadBaseline, ErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "/gpualloc_baseline.md";
  {
    std::ofstream out(path);
    out << "# nothing here\n";
  }
  EXPECT_THAT(Msg(LoadBaseline(path).status()),
              HasSubstr(path + ": expected a table"));
  {
    std::ofstream out(path);
    out << "| trace | PyTorch peak reserved | x |\n|---|---|---|\n"
        << "| a | 6.7 GB | 1% |\n";
  }
  EXPECT_THAT(Msg(LoadBaseline(path).status()),
              HasSubstr(path + ":3: expected a size"));
  std::remove(path.c_str());
}

TEST(BundledTraces, EachLoadsWithOneOpPerRow) {
  for (const char* name :
       {"torch-cs336-medium_128_training", "torch-cs336-medium_1024_training",
        "torch-cs336-medium_1024_inference", "torch-opt125m-zo-finetune"}) {
    const std::string path = TraceDir() + "/" + name + ".csv";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::size_t rows = 0;
    for (std::string line; std::getline(in, line);) ++rows;
    absl::StatusOr<Trace> t = LoadTrace(path);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->name, name);
    EXPECT_EQ(t->ops.size(), rows - 1) << name;
    EXPECT_EQ(t->num_allocs + t->num_frees, t->ops.size());
    EXPECT_EQ(t->num_streams, 1u);
  }
}

// The generated multi-stream traces (gpualloc-gen): blocks handed from one
// stream to another, several streams allocating at once; the allocator never
// hands out memory another stream may still use.
TEST(BundledTraces, GeneratedMultiStreamTracesReplayWithoutHazards) {
  for (const auto& [name, streams] :
       std::vector<std::pair<std::string, std::uint64_t>>{
           {"gen-prefetch", 3}, {"gen-fsdp", 3}, {"gen-serve", 4}}) {
    absl::StatusOr<Trace> t = LoadTrace(TraceDir() + "/" + name + ".csv");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->num_streams, streams) << name;
    EXPECT_EQ(t->num_allocs, t->num_frees) << name;
    absl::StatusOr<ReplayResult> r =
        Replay(*t, "arch=h100,preallocate=false,expandable=false");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->ooms, 0u) << name;
    EXPECT_EQ(r->hazards, 0u) << name;
    EXPECT_GT(r->events_recorded, 0u) << name;
    EXPECT_EQ(r->stats.bytes_in_use, 0u) << name;
  }
}

}  // namespace
}  // namespace gpualloc::replay
