// SPDX-License-Identifier: Apache-2.0
// tests/core/modes_test.cc: what the platform and async allocator modes do
// beyond the contract every mode keeps (tests/core/allocator_conformance.h),
// and their randomized runs are random_ops_test's.
//
// Platform runs on the simulator. Async runs on FakePoolBackend below (a small
// stream-ordered pool whose frees become reusable on other streams only once
// the host waited for the freeing stream: enough to check what the allocator
// adds to a pool, call by call, with faults), and on the simulator's pool,
// whose hazard detector checks that memory moving between streams is ordered.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/lock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kGiB;
using testing::kKiB;
using testing::kMiB;
using testing::MakeAllocator;
using testing::MakeSim;

std::string Hex(std::uint64_t address) {
  return absl::StrFormat("%#x", address);
}

bool Mentions(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

Options Mode(AllocatorMode mode, std::uint64_t limit = 0) {
  Options o;
  o.mode = mode;
  o.memory_limit = limit;
  return o;
}

// ---------------------------------------------------------------------------
// A stream-ordered pool with just enough semantics for the async mode:
//  - memory freed on stream S is reusable at once on S (stream order), and on
//    other streams only after the host waited (SynchronizeEvent) for an event
//    recorded on S after the free;
//  - the pool holds `capacity` bytes at most; reserved grows with use and
//    shrinks on PoolTrim;
//  - every call is counted; the next call of an operation can be made to fail.
class FakePoolBackend final : public Backend {
 public:
  struct Wait {
    Stream waiter;
    Stream recorded;  // the stream the event was last recorded on
  };

  explicit FakePoolBackend(std::uint64_t capacity, bool pools = true,
                           bool streams = true)
      : capacity_(capacity) {
    info_.backend = "fakepool";
    info_.name = "Fake Pool GPU";
    info_.ordinal = 3;
    info_.total_bytes = 64 * kGiB;
    info_.min_granularity = 2 * kMiB;
    info_.recommended_granularity = 2 * kMiB;
    info_.allocation_alignment = 256;
    info_.capabilities.streams = streams;
    info_.capabilities.stream_ordered_pools = pools;
  }

  const DeviceInfo& info() const override { return info_; }
  absl::StatusOr<std::uint64_t> FreeBytes() override {
    return info_.total_bytes;
  }
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t) override {
    return absl::InternalError("the async mode must not call Allocate");
  }
  absl::Status Free(DeviceAddress) override {
    return absl::InternalError("the async mode must not call Free");
  }

  absl::StatusOr<EventHandle> CreateEvent() override {
    core::LockGuard lock(&mu_);
    ++create_event_calls;
    const EventHandle e = next_event_++;
    events_[e] = Event{};
    return e;
  }
  absl::Status DestroyEvent(EventHandle event) override {
    core::LockGuard lock(&mu_);
    ++destroy_event_calls;
    if (events_.erase(event) == 0) return absl::InvalidArgumentError("event");
    return absl::OkStatus();
  }
  absl::Status RecordEvent(EventHandle event, Stream stream) override {
    core::LockGuard lock(&mu_);
    ++record_event_calls;
    if (Fail(&fail_record_)) return absl::InternalError("injected record");
    auto it = events_.find(event);
    if (it == events_.end()) return absl::InvalidArgumentError("event");
    it->second = Event{true, stream};
    return absl::OkStatus();
  }
  absl::StatusOr<bool> QueryEvent(EventHandle) override {
    return absl::InternalError("not used by the async mode");
  }
  absl::Status StreamWaitEvent(Stream stream, EventHandle event) override {
    core::LockGuard lock(&mu_);
    ++stream_wait_calls;
    auto it = events_.find(event);
    if (it == events_.end()) return absl::InvalidArgumentError("event");
    waits.push_back(Wait{stream, it->second.stream});
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(EventHandle event) override {
    core::LockGuard lock(&mu_);
    ++synchronize_calls;
    auto it = events_.find(event);
    if (it == events_.end()) return absl::InvalidArgumentError("event");
    // Everything freed on that stream so far has completed.
    if (it->second.recorded) pending_.erase(it->second.stream.handle);
    return absl::OkStatus();
  }

  absl::Status ConfigurePool(const PoolOptions& options) override {
    core::LockGuard lock(&mu_);
    ++configure_calls;
    if (Fail(&fail_configure_)) return absl::InternalError("injected config");
    pool_options = options;
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) override {
    core::LockGuard lock(&mu_);
    ++pool_allocate_calls;
    if (Fail(&fail_allocate_)) return absl::InternalError("injected allocate");
    pending_.erase(stream.handle);  // reusable on its own stream at once
    std::uint64_t blocked = 0;
    for (const auto& [s, b] : pending_) blocked += b;
    if (used_ + blocked + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "fake pool: %d bytes asked, %d used, %d pending on other streams, "
          "capacity %d",
          bytes, used_, blocked, capacity_));
    }
    const DeviceAddress address = next_address_;
    // Addresses 256-aligned and never reused; odd multiples of 256 so that
    // stricter alignments need padding.
    next_address_ += bytes + 2 * kMiB + 256;
    live_[address] = bytes;
    used_ += bytes;
    reserved_ = std::max(reserved_, used_ + blocked);
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    last_allocate_bytes = bytes;
    return address;
  }
  absl::Status PoolFree(DeviceAddress address, Stream stream) override {
    core::LockGuard lock(&mu_);
    ++pool_free_calls;
    if (Fail(&fail_free_)) return absl::InternalError("injected free");
    auto it = live_.find(address);
    if (it == live_.end()) return absl::InvalidArgumentError("pool free");
    used_ -= it->second;
    pending_[stream.handle] += it->second;
    live_.erase(it);
    last_free_stream = stream;
    return absl::OkStatus();
  }
  absl::Status PoolTrim(std::uint64_t keep) override {
    core::LockGuard lock(&mu_);
    ++pool_trim_calls;
    std::uint64_t blocked = 0;
    for (const auto& [s, b] : pending_) blocked += b;
    reserved_ = std::max(used_ + blocked, std::min(reserved_, keep));
    return absl::OkStatus();
  }
  absl::StatusOr<PoolUsage> GetPoolUsage() override {
    core::LockGuard lock(&mu_);
    PoolUsage u;
    u.reserved = reserved_;
    u.peak_reserved = peak_reserved_;
    u.used = used_;
    return u;
  }

  void FailNextRecord() { fail_record_ = true; }
  void FailNextPoolAllocate() { fail_allocate_ = true; }
  void FailNextPoolFree() { fail_free_ = true; }
  void FailNextConfigure() { fail_configure_ = true; }
  std::size_t live_events() const {
    core::LockGuard lock(&mu_);
    return events_.size();
  }
  std::size_t live_allocations() const {
    core::LockGuard lock(&mu_);
    return live_.size();
  }
  std::uint64_t used() const {
    core::LockGuard lock(&mu_);
    return used_;
  }

  // Call counts and what the calls carried; read them between calls.
  int create_event_calls = 0, destroy_event_calls = 0, record_event_calls = 0,
      stream_wait_calls = 0, synchronize_calls = 0, configure_calls = 0,
      pool_allocate_calls = 0, pool_free_calls = 0, pool_trim_calls = 0;
  std::vector<Wait> waits;
  PoolOptions pool_options;
  std::uint64_t last_allocate_bytes = 0;
  Stream last_free_stream;

 private:
  struct Event {
    bool recorded = false;
    Stream stream;
  };
  static bool Fail(bool* flag) { return std::exchange(*flag, false); }

  DeviceInfo info_;
  const std::uint64_t capacity_;
  mutable core::Lock mu_;
  EventHandle next_event_ = 1;
  std::map<EventHandle, Event> events_;
  DeviceAddress next_address_ = 0x100000100;
  std::map<DeviceAddress, std::uint64_t> live_;
  std::map<std::uintptr_t, std::uint64_t> pending_;  // freed, not completed
  std::uint64_t used_ = 0, reserved_ = 0, peak_reserved_ = 0;
  bool fail_record_ = false, fail_allocate_ = false, fail_free_ = false,
       fail_configure_ = false;
};

// ---------------------------------------------------------------------------
// Platform mode on the simulator.

TEST(PlatformTest, OneBackendCallPerAllocateAndDeallocate) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Mode(AllocatorMode::kPlatform), sim);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 0u);
  std::vector<void*> ptrs;
  for (int i = 1; i <= 10; ++i) {
    auto p = a->Allocate(i * 1000);
    GPUALLOC_ASSERT_OK(p);
    ptrs.push_back(*p);
    EXPECT_EQ(sim->calls(SimOp::kAllocate), static_cast<std::uint64_t>(i));
  }
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    GPUALLOC_ASSERT_OK(a->Deallocate(ptrs[i], Stream(i % 2)));
    EXPECT_EQ(sim->calls(SimOp::kFree), i + 1);
    EXPECT_EQ(sim->live_allocations(), ptrs.size() - i - 1);
  }
  const Stats s = a->GetStats();
  EXPECT_EQ(s.backend_allocs, 10u);
  EXPECT_EQ(s.backend_frees, 10u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.num_allocs, 10u);
}

TEST(PlatformTest, ReservedIsExactlyWhatIsLive) {
  // NVIDIA (256 B device alignment) and AMD (4 KiB: the device accounts
  // whole pages, and so does bytes_reserved).
  for (const std::string profile : {"h100", "mi300x"}) {
    SCOPED_TRACE(profile);
    auto sim = MakeSim(64 * kGiB, false, profile);
    auto a = MakeAllocator(Mode(AllocatorMode::kPlatform), sim);
    ASSERT_NE(a, nullptr);
    std::vector<void*> ptrs;
    for (std::uint64_t bytes :
         {std::uint64_t{1}, std::uint64_t{300}, std::uint64_t{5000}, 3 * kMiB,
          std::uint64_t{0}}) {
      auto p = a->Allocate(bytes);
      GPUALLOC_ASSERT_OK(p);
      ptrs.push_back(*p);
      EXPECT_EQ(a->GetStats().bytes_reserved, sim->bytes_allocated());
    }
    const Stats s = a->GetStats();
    EXPECT_EQ(s.bytes_in_use, 256 + 512 + 5120 + 3 * kMiB + 256);
    EXPECT_EQ(s.bytes_requested, 1 + 300 + 5000 + 3 * kMiB);
    EXPECT_EQ(s.peak_bytes_reserved, s.bytes_reserved);
    for (void* p : ptrs) {
      GPUALLOC_ASSERT_OK(a->Deallocate(p));
      EXPECT_EQ(a->GetStats().bytes_reserved, sim->bytes_allocated());
      GPUALLOC_ASSERT_OK(a->Validate());
    }
    EXPECT_EQ(sim->bytes_allocated(), 0u);
  }
}

TEST(PlatformTest, LimitIsEnforcedAndAFailedRequestChangesNothing) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Mode(AllocatorMode::kPlatform, 4 * kMiB), sim);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(3 * kMiB);
  GPUALLOC_ASSERT_OK(p);
  const Stats before = a->GetStats();
  const std::uint64_t calls = sim->calls(SimOp::kAllocate);

  absl::Status over = a->Allocate(2 * kMiB).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  for (const char* text :
       {"out of memory", "Allocate(2097152 bytes)", "limit 4194304",
        "in use 3145728", "reserved 3145728", "platform allocator", "Hint:"}) {
    EXPECT_TRUE(Mentions(over, text)) << text << " in " << over;
  }
  absl::Status never = a->Allocate(5 * kMiB).status();
  EXPECT_EQ(never.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Mentions(never, "can never succeed")) << never;
  // Padding for the alignment pushes the device request over the limit.
  absl::Status padded =
      a->Allocate(4 * kMiB - 256, Stream(), 2 * kMiB).status();
  EXPECT_EQ(padded.code(), absl::StatusCode::kResourceExhausted) << padded;

  const Stats after = a->GetStats();
  EXPECT_EQ(sim->calls(SimOp::kAllocate), calls);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 3);
  GPUALLOC_EXPECT_OK(a->Validate());
  // The remaining 1 MiB still fits.
  GPUALLOC_EXPECT_OK(a->Allocate(kMiB));
}

TEST(PlatformTest, AlignmentStricterThanTheDevicePadsInsideTheBlock) {
  // Host-backed: the whole aligned block must be writable.
  auto sim = MakeSim(4 * kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Mode(AllocatorMode::kPlatform), sim);
  ASSERT_NE(a, nullptr);
  // Leaves the device's next address off any 64 KiB boundary.
  auto first = a->Allocate(256);
  GPUALLOC_ASSERT_OK(first);
  for (std::size_t alignment : {512ul, 4 * kKiB, 64 * kKiB, 2 * kMiB}) {
    SCOPED_TRACE(alignment);
    const std::uint64_t reserved = a->GetStats().bytes_reserved;
    const std::uint64_t calls = sim->calls(SimOp::kAllocate);
    auto p = a->Allocate(1000, Stream(), alignment);
    GPUALLOC_ASSERT_OK(p);
    EXPECT_EQ(Addr(*p) % alignment, 0u);
    EXPECT_EQ(sim->calls(SimOp::kAllocate), calls + 1);
    EXPECT_EQ(a->GetStats().bytes_reserved, reserved + 1024 + alignment - 256);
    EXPECT_EQ(a->GetStats().bytes_reserved, sim->bytes_allocated());
    EXPECT_EQ(a->GetStats().bytes_in_use, 256u + 1024);
    std::memset(*p, 0x5a, 1024);
    const Snapshot snap = a->GetSnapshot();
    ASSERT_EQ(snap.regions.size(), 2u);
    bool found = false;
    for (const RegionSnapshot& r : snap.regions) {
      ASSERT_EQ(r.chunks.size(), 1u);
      if (r.chunks[0].address != Addr(*p)) continue;
      found = true;
      EXPECT_EQ(r.size, 1024 + alignment - 256);
      EXPECT_LE(r.base, Addr(*p));
      EXPECT_LE(Addr(*p) + 1024, r.base + r.size);
    }
    EXPECT_TRUE(found);
    GPUALLOC_ASSERT_OK(a->Validate());
    // Freeing frees the device block's base (the sim knows no other address).
    GPUALLOC_ASSERT_OK(a->Deallocate(*p));
    EXPECT_EQ(sim->live_allocations(), 1u);
    EXPECT_EQ(sim->failed_calls(SimOp::kFree), 0u);
  }
  EXPECT_EQ(a->Allocate(64, Stream(), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status too_big = a->Allocate(64, Stream(), 4 * kMiB).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(too_big, "largest supported alignment")) << too_big;
}

TEST(PlatformTest, BackendErrorsPassThroughWithContext) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Mode(AllocatorMode::kPlatform), sim);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(1000);
  GPUALLOC_ASSERT_OK(p);

  sim->FailNthCall(SimOp::kAllocate, 1, absl::InternalError("driver broke"));
  absl::Status broken = a->Allocate(1000).status();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(broken, "driver broke")) << broken;
  EXPECT_TRUE(Mentions(broken, "sim")) << broken;

  sim->FailNthCall(SimOp::kAllocate, 1);  // ResourceExhausted
  absl::Status oom = a->Allocate(1000).status();
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Mentions(oom, "device refused")) << oom;
  EXPECT_EQ(a->GetStats().num_ooms, 1u);

  sim->FailNthCall(SimOp::kFree, 1, absl::InternalError("free broke"));
  absl::Status free_broken = a->Deallocate(*p);
  EXPECT_EQ(free_broken.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(free_broken, Hex(Addr(*p)))) << free_broken;
  // Still live: freeing again works.
  EXPECT_EQ(a->GetStats().bytes_in_use, 1024u);
  GPUALLOC_EXPECT_OK(a->Validate());
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  EXPECT_EQ(a->GetStats().backend_allocs, 1u);
  EXPECT_EQ(a->GetStats().backend_frees, 1u);
}

// One region per live block, exactly its device allocation; nothing cached.
TEST(PlatformTest, SnapshotIsOneRegionPerBlock) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Mode(AllocatorMode::kPlatform, 2 * kGiB), sim);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(kMiB, Stream(5));
  auto q = a->Allocate(100, Stream(6));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(q);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p));
  EXPECT_EQ(a->GetStats().peak_bytes_reserved, kMiB + 256);

  const Snapshot snap = a->GetSnapshot();
  ASSERT_EQ(snap.regions.size(), 1u);
  EXPECT_EQ(snap.regions[0].base, Addr(*q));
  EXPECT_EQ(snap.regions[0].size, 256u);
  ASSERT_EQ(snap.regions[0].chunks.size(), 1u);
  const ChunkSnapshot& c = snap.regions[0].chunks[0];
  EXPECT_EQ(c.address, Addr(*q));
  EXPECT_EQ(c.size, 256u);
  EXPECT_EQ(c.requested, 100u);
  EXPECT_TRUE(c.in_use);
  EXPECT_EQ(c.stream, 6u);
  EXPECT_EQ(snap.stats.bytes_in_use, 256u);

  GPUALLOC_EXPECT_OK(a->Trim());  // nothing cached
  EXPECT_EQ(sim->calls(SimOp::kFree), 1u);
}

// Live blocks go back to the device at destruction; a free the device
// refuses there is tried once more, since nothing could free it later.
TEST(PlatformTest, DestructionTriesARefusedFreeOnceMore) {
  auto sim = MakeSim(80 * kGiB);
  {
    auto a = MakeAllocator(Mode(AllocatorMode::kPlatform), sim);
    ASSERT_NE(a, nullptr);
    GPUALLOC_ASSERT_OK(a->Allocate(kMiB));
    sim->FailNthCall(SimOp::kFree, 1, absl::InternalError("free broke"));
  }
  EXPECT_EQ(sim->bytes_allocated(), 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
}

// ---------------------------------------------------------------------------
// Async mode on the fake pool.

std::unique_ptr<Allocator> MakeAsync(std::shared_ptr<Backend> backend,
                                     std::uint64_t limit = 0) {
  return MakeAllocator(Mode(AllocatorMode::kAsync, limit), std::move(backend));
}

TEST(AsyncTest, CreationFailsClearlyWithoutAPool) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB, /*pools=*/false);
  auto a = CreateAllocator(Mode(AllocatorMode::kAsync), fake);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const char* text : {"fakepool", "device 3", "Fake Pool GPU",
                           "stream_ordered_pools", "allocator=bfc"}) {
    EXPECT_TRUE(Mentions(a.status(), text)) << text << " in " << a.status();
  }
  EXPECT_EQ(fake->configure_calls, 0);
}

TEST(AsyncTest, ConfiguresThePoolWithTheLimitAsReleaseThreshold) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake, 512 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(fake->configure_calls, 1);
  EXPECT_EQ(fake->pool_options.release_threshold, 512 * kMiB);
  EXPECT_TRUE(fake->pool_options.reuse.follow_event_dependencies);
  EXPECT_TRUE(fake->pool_options.reuse.opportunistic);
  EXPECT_TRUE(fake->pool_options.reuse.internal_dependencies);

  auto broken = std::make_shared<FakePoolBackend>(kGiB);
  broken->FailNextConfigure();
  auto b = CreateAllocator(Mode(AllocatorMode::kAsync), broken);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(b.status(), "injected config")) << b.status();
  EXPECT_TRUE(Mentions(b.status(), "fakepool")) << b.status();
}

TEST(AsyncTest, AllocateAndFreeGoToThePoolOnTheirStreams) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(1000, Stream(7));
  GPUALLOC_ASSERT_OK(p);
  EXPECT_EQ(fake->pool_allocate_calls, 1);
  EXPECT_EQ(fake->last_allocate_bytes, 1024u);
  auto q = a->Allocate(0, Stream(7));
  GPUALLOC_ASSERT_OK(q);
  EXPECT_NE(*q, nullptr);
  EXPECT_NE(*q, *p);
  Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_in_use, 1024u + 256);
  EXPECT_EQ(s.bytes_requested, 1000u);
  EXPECT_EQ(s.bytes_reserved, 1024u + 256);  // the fake pool's view
  EXPECT_EQ(s.backend_allocs, 2u);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(8)));
  EXPECT_EQ(fake->pool_free_calls, 1);
  EXPECT_EQ(fake->last_free_stream, Stream(8));
  s = a->GetStats();
  EXPECT_EQ(s.bytes_in_use, 256u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u + 256);
  EXPECT_EQ(s.backend_frees, 1u);
  // Freed on another stream than its allocation's: stream 8 was made to
  // wait for stream 7's work first (one event), never the host.
  EXPECT_EQ(s.events_recorded, 1u);
  EXPECT_EQ(s.stream_waits, 1u);
  EXPECT_EQ(s.host_waits, 0u);
  ASSERT_EQ(fake->waits.size(), 1u);
  EXPECT_EQ(fake->waits[0].waiter, Stream(8));
  EXPECT_EQ(fake->waits[0].recorded, Stream(7));

  const Snapshot snap = a->GetSnapshot();
  ASSERT_EQ(snap.regions.size(), 1u);
  EXPECT_EQ(snap.regions[0].chunks[0].address, Addr(*q));
  EXPECT_EQ(snap.regions[0].chunks[0].stream, 7u);
  GPUALLOC_EXPECT_OK(a->Validate());

  GPUALLOC_EXPECT_OK(a->Trim());
  EXPECT_EQ(fake->pool_trim_calls, 1);
  GPUALLOC_EXPECT_OK(a->Deallocate(*q, Stream(7)));
  GPUALLOC_EXPECT_OK(a->Deallocate(nullptr));
}

TEST(AsyncTest, RecordStreamMakesTheFreeingStreamWait) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(4096, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(2)));
  GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(3)));
  GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(3)));  // once is enough
  GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(1)));  // the freeing stream
  GPUALLOC_ASSERT_OK(a->Validate());
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  ASSERT_EQ(fake->stream_wait_calls, 2);
  ASSERT_EQ(fake->waits.size(), 2u);
  std::set<std::uintptr_t> waited_for;
  for (const FakePoolBackend::Wait& w : fake->waits) {
    EXPECT_EQ(w.waiter, Stream(1));
    waited_for.insert(w.recorded.handle);
  }
  EXPECT_EQ(waited_for, (std::set<std::uintptr_t>{2, 3}));
  EXPECT_EQ(fake->last_free_stream, Stream(1));
  // One event, reused for both waits.
  EXPECT_EQ(fake->create_event_calls, 1);
  Stats s = a->GetStats();
  EXPECT_EQ(s.events_recorded, 2u);
  EXPECT_EQ(s.stream_waits, 2u);
  EXPECT_EQ(s.host_waits, 0u);

  // Recorded streams die with the allocation: a new one at another address
  // is freed without waits, and the event pool is reused later.
  auto q = a->Allocate(4096, Stream(1));
  GPUALLOC_ASSERT_OK(q);
  GPUALLOC_ASSERT_OK(a->Deallocate(*q, Stream(1)));
  EXPECT_EQ(fake->stream_wait_calls, 2);
  // Freed on stream 6: after the allocation stream (4) and the recorded one
  // (5).
  auto r = a->Allocate(4096, Stream(4));
  GPUALLOC_ASSERT_OK(r);
  GPUALLOC_ASSERT_OK(a->RecordStream(*r, Stream(5)));
  GPUALLOC_ASSERT_OK(a->Deallocate(*r, Stream(6)));
  EXPECT_EQ(fake->stream_wait_calls, 4);
  EXPECT_EQ(fake->create_event_calls, 1);

  absl::Status unknown = a->RecordStream(*r, Stream(2));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(unknown, Hex(Addr(*r)))) << unknown;
  GPUALLOC_EXPECT_OK(a->Validate());
}

// A free whose ordering event (or pool free) fails is accepted: the block
// is held back, never handed back unordered, and freed at a later call.
TEST(AsyncTest, AFailedFreeIsHeldBackAndDoneLater) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(4096, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(2)));
  fake->FailNextRecord();
  ::testing::internal::CaptureStderr();
  GPUALLOC_EXPECT_OK(a->Deallocate(*p, Stream(1)));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(Hex(Addr(*p))),
            std::string::npos);
  EXPECT_EQ(fake->pool_free_calls, 0);
  EXPECT_EQ(a->GetStats().bytes_in_use, 0u);
  EXPECT_EQ(fake->live_allocations(), 1u);  // held back
  GPUALLOC_EXPECT_OK(a->Validate());
  // The next call retries; the pool's free fails this time: still held
  // back. (That call, a second free of the block, is a double free, as for
  // any freed block.)
  fake->FailNextPoolFree();
  EXPECT_EQ(a->Deallocate(*p, Stream(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fake->live_allocations(), 1u);
  GPUALLOC_EXPECT_OK(a->Validate());
  // The one after gets it through.
  auto q = a->Allocate(4096, Stream(1));
  GPUALLOC_ASSERT_OK(q);
  EXPECT_EQ(fake->live_allocations(), 1u);  // q only
  GPUALLOC_EXPECT_OK(a->Deallocate(*q, Stream(1)));
  EXPECT_EQ(fake->live_allocations(), 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AsyncTest, OutOfMemoryWaitsForPendingFreesThenRetries) {
  auto fake = std::make_shared<FakePoolBackend>(8 * kMiB);
  auto a = MakeAsync(fake, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(6 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  // Same stream: reusable at once, no wait.
  auto q = a->Allocate(6 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(q);
  EXPECT_EQ(a->GetStats().host_waits, 0u);
  GPUALLOC_ASSERT_OK(a->Deallocate(*q, Stream(1)));
  // Another stream: the pool refuses until the host waited for stream 1.
  auto r = a->Allocate(6 * kMiB, Stream(2));
  GPUALLOC_ASSERT_OK(r);
  EXPECT_EQ(fake->pool_allocate_calls, 4);  // one refused, one retried
  EXPECT_EQ(fake->synchronize_calls, 1);
  Stats s = a->GetStats();
  EXPECT_EQ(s.host_waits, 1u);
  EXPECT_EQ(s.events_recorded, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  GPUALLOC_EXPECT_OK(a->Validate());

  // Nothing freed since the wait: no wait, no retry, an OOM report.
  const int calls = fake->pool_allocate_calls;
  absl::Status oom = a->Allocate(6 * kMiB, Stream(3)).status();
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  for (const char* text : {"out of memory", "async allocator", "fake pool",
                           "in use 6291456", "limit 67108864", "Hint:"}) {
    EXPECT_TRUE(Mentions(oom, text)) << text << " in " << oom;
  }
  EXPECT_EQ(fake->pool_allocate_calls, calls + 1);
  s = a->GetStats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.host_waits, 1u);
  EXPECT_EQ(s.bytes_in_use, 6 * kMiB);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AsyncTest, WithoutGarbageCollectionOutOfMemoryDoesNotWait) {
  auto fake = std::make_shared<FakePoolBackend>(8 * kMiB);
  Options o = Mode(AllocatorMode::kAsync, 64 * kMiB);
  o.garbage_collection = false;
  auto a = MakeAllocator(o, fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(6 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  EXPECT_EQ(a->Allocate(6 * kMiB, Stream(2)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fake->synchronize_calls, 0);
  EXPECT_EQ(a->GetStats().num_ooms, 1u);
}

TEST(AsyncTest, WithoutEventsRecordStreamFailsAndOutOfMemoryDoesNotWait) {
  auto fake = std::make_shared<FakePoolBackend>(8 * kMiB, /*pools=*/true,
                                                /*streams=*/false);
  auto a = MakeAsync(fake, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(6 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  const absl::Status recorded = a->RecordStream(*p, Stream(2));
  EXPECT_EQ(recorded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(recorded, "streams capability")) << recorded;
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  EXPECT_EQ(a->Allocate(6 * kMiB, Stream(2)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fake->create_event_calls, 0);
  EXPECT_EQ(fake->record_event_calls, 0);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AsyncTest, LimitIsEnforcedOnBytesInUse) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake, 4 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(3 * kMiB);
  GPUALLOC_ASSERT_OK(p);
  const int calls = fake->pool_allocate_calls;
  absl::Status over = a->Allocate(2 * kMiB).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Mentions(over, "the limit is reached")) << over;
  EXPECT_TRUE(Mentions(over, "in use 3145728")) << over;
  EXPECT_EQ(a->Allocate(5 * kMiB).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fake->pool_allocate_calls, calls);
  EXPECT_EQ(a->GetStats().num_ooms, 2u);
  EXPECT_EQ(a->GetStats().bytes_in_use, 3 * kMiB);
  // Freed memory counts against the limit no more.
  GPUALLOC_ASSERT_OK(a->Deallocate(*p));
  GPUALLOC_EXPECT_OK(a->Allocate(4 * kMiB));
  GPUALLOC_EXPECT_OK(a->Validate());
}

// The pool's reserved memory stays within the limit, not only the live
// bytes. Here the pool's unused memory was freed on another stream whose
// work is pending: the pool cannot return it, so the allocator waits for
// that stream (garbage collection), lets the pool return it, and serves the
// request within the limit.
TEST(AsyncTest, PendingFreesGoBackBeforeThePoolPassesTheLimit) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake, 8 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p1 = a->Allocate(4 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p1);
  auto p2 = a->Allocate(2 * kMiB, Stream(2));
  GPUALLOC_ASSERT_OK(p2);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p1, Stream(1)));  // pending on stream 1
  EXPECT_EQ(a->GetStats().bytes_reserved, 6 * kMiB);
  auto q = a->Allocate(4 * kMiB, Stream(2));
  GPUALLOC_ASSERT_OK(q);
  Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 6 * kMiB);
  EXPECT_LE(s.peak_bytes_reserved, 8 * kMiB);
  EXPECT_EQ(s.bytes_in_use, 6 * kMiB);
  EXPECT_EQ(s.host_waits, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(fake->synchronize_calls, 1);
  GPUALLOC_EXPECT_OK(a->Validate());
  GPUALLOC_ASSERT_OK(a->Deallocate(*q, Stream(2)));
  GPUALLOC_ASSERT_OK(a->Deallocate(*p2, Stream(2)));
}

// A stricter alignment pads the pool request; the block inside is aligned.
TEST(AsyncTest, AlignmentPadsThePoolRequest) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(8192, Stream(1), 64 * kKiB);
  GPUALLOC_ASSERT_OK(p);
  EXPECT_EQ(Addr(*p) % (64 * kKiB), 0u);
  EXPECT_EQ(fake->last_allocate_bytes, 8192 + 64 * kKiB - 256);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  EXPECT_EQ(fake->pool_free_calls, 1);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AsyncTest, DestructorReturnsLiveMemoryAndDestroysEvents) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  {
    auto a = MakeAsync(fake);
    ASSERT_NE(a, nullptr);
    auto p = a->Allocate(1000, Stream(1));
    GPUALLOC_ASSERT_OK(p);
    GPUALLOC_ASSERT_OK(a->RecordStream(*p, Stream(2)));
    GPUALLOC_ASSERT_OK(a->Allocate(1000, Stream(3)));
    auto r = a->Allocate(1000, Stream(1));
    GPUALLOC_ASSERT_OK(r);
    GPUALLOC_ASSERT_OK(a->RecordStream(*r, Stream(4)));
    GPUALLOC_ASSERT_OK(a->Deallocate(*r, Stream(1)));
    EXPECT_EQ(fake->live_events(), 1u);
  }
  EXPECT_EQ(fake->live_allocations(), 0u);
  EXPECT_EQ(fake->used(), 0u);
  EXPECT_EQ(fake->live_events(), 0u);
  EXPECT_EQ(fake->stream_wait_calls, 2);  // the recorded stream, at the end too
}

TEST(AsyncTest, PeakReservedFollowsThePoolAndResets) {
  auto fake = std::make_shared<FakePoolBackend>(kGiB);
  auto a = MakeAsync(fake);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p));
  Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 8 * kMiB);  // the pool keeps it
  EXPECT_EQ(s.peak_bytes_reserved, 8 * kMiB);
  GPUALLOC_ASSERT_OK(a->Trim());  // keeps the free pending on stream 0
  EXPECT_EQ(a->GetStats().bytes_reserved, 8 * kMiB);
  // Allocating on stream 0 reuses the pending memory; now the rest can go.
  auto q = a->Allocate(kMiB);
  GPUALLOC_ASSERT_OK(q);
  GPUALLOC_ASSERT_OK(a->Trim());
  s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, kMiB);
  EXPECT_EQ(s.peak_bytes_reserved, 8 * kMiB);
  a->ResetPeakStats();
  s = a->GetStats();
  EXPECT_EQ(s.peak_bytes_reserved, kMiB);
  EXPECT_EQ(s.peak_bytes_in_use, kMiB);
  auto r = a->Allocate(2 * kMiB);
  GPUALLOC_ASSERT_OK(r);
  GPUALLOC_ASSERT_OK(a->Deallocate(*r));
  GPUALLOC_ASSERT_OK(a->Deallocate(*q));
  GPUALLOC_ASSERT_OK(a->Allocate(256));
  GPUALLOC_ASSERT_OK(a->Trim());
  s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 256u);
  EXPECT_EQ(s.peak_bytes_reserved, 3 * kMiB);  // seen before the trim
}

// ---------------------------------------------------------------------------
// Async mode on the simulator's pool.

std::shared_ptr<SimBackend> MakePoolSim(std::uint64_t total,
                                        bool pools = true) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = total;
  o.stream_ordered_pools = pools;
  return MakeSim(o);
}

void ExpectNoHazards(const SimBackend& sim) {
  EXPECT_EQ(sim.hazards(), 0u);
  for (const SimHazard& h : sim.hazard_log()) ADD_FAILURE() << h.ToString();
}

TEST(AsyncSimTest, CreationFailsWhenTheSimHasNoPool) {
  auto sim = MakePoolSim(kGiB, /*pools=*/false);
  ASSERT_NE(sim, nullptr);
  auto a = CreateAllocator(Mode(AllocatorMode::kAsync), sim);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(a.status(), "backend sim")) << a.status();
  EXPECT_TRUE(Mentions(a.status(), "stream_ordered_pools")) << a.status();
  EXPECT_TRUE(Mentions(a.status(), "allocator=bfc")) << a.status();
  EXPECT_EQ(sim->calls(SimOp::kConfigurePool), 0u);
}

TEST(AsyncSimTest, OnePoolCallPerAllocateAndDeallocate) {
  auto sim = MakePoolSim(kGiB);
  auto a = MakeAsync(sim);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(sim->calls(SimOp::kConfigurePool), 1u);
  std::vector<void*> ptrs;
  for (int i = 1; i <= 8; ++i) {
    auto p = a->Allocate(i * 1000, Stream(1));
    GPUALLOC_ASSERT_OK(p);
    ptrs.push_back(*p);
    EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), static_cast<std::uint64_t>(i));
  }
  for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p, Stream(1)));
  EXPECT_EQ(sim->calls(SimOp::kPoolFree), 8u);
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 0u);  // never a plain allocation
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.backend_allocs, 8u);
  EXPECT_EQ(s.backend_frees, 8u);
  EXPECT_EQ(s.bytes_reserved, 2 * kMiB);  // one granule, kept by the pool
  EXPECT_EQ(s.peak_bytes_reserved, 2 * kMiB);
  EXPECT_EQ(s.events_recorded + s.stream_waits + s.host_waits, 0u);
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->calls(SimOp::kPoolTrim), 1u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

// Work on a second stream, declared with RecordStream, is waited for before
// the memory goes back: reusing it at once on the freeing stream is safe.
// Without the declaration the detector flags the same sequence.
TEST(AsyncSimTest, RecordStreamOrdersTheFreeAfterTheOtherStream) {
  for (bool record : {true, false}) {
    SCOPED_TRACE(record ? "with RecordStream" : "without RecordStream");
    auto sim = MakePoolSim(kGiB);
    auto a = MakeAsync(sim);
    ASSERT_NE(a, nullptr);
    const Stream s1(1), s2(2);
    auto p = a->Allocate(kMiB, s1);
    GPUALLOC_ASSERT_OK(p);
    sim->Use(s1, Addr(*p), kMiB);
    if (record) GPUALLOC_ASSERT_OK(a->RecordStream(*p, s2));
    // The program's own hand-over from s1 to s2 (here: s1 finished).
    sim->CompleteStream(s1);
    sim->Use(s2, Addr(*p), kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(*p, s1));
    auto q = a->Allocate(kMiB, s1);  // same stream: reused at once
    GPUALLOC_ASSERT_OK(q);
    ASSERT_EQ(*q, *p);
    sim->Use(s1, Addr(*q), kMiB);
    const Stats s = a->GetStats();
    if (record) {
      ExpectNoHazards(*sim);
      EXPECT_EQ(sim->calls(SimOp::kStreamWaitEvent), 1u);
      EXPECT_EQ(s.stream_waits, 1u);
      EXPECT_EQ(s.events_recorded, 1u);
    } else {
      EXPECT_GT(sim->hazards(), 0u);
      EXPECT_EQ(sim->calls(SimOp::kStreamWaitEvent), 0u);
    }
    GPUALLOC_EXPECT_OK(a->Deallocate(*q, s1));
  }
}

// The device (here mostly held by someone else) cannot give the pool a new
// segment while a segment's free is pending; waiting for the freeing stream
// lets the pool return that segment and the retry succeeds.
TEST(AsyncSimTest, OutOfMemoryWaitsForPendingFreesAndRetries) {
  auto sim = MakePoolSim(96 * kMiB);
  auto a = MakeAsync(sim, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto elsewhere = sim->Allocate(40 * kMiB);  // another user of the device
  GPUALLOC_ASSERT_OK(elsewhere);
  auto p = a->Allocate(30 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  sim->Use(Stream(1), Addr(*p), 30 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  auto q = a->Allocate(32 * kMiB, Stream(2));
  GPUALLOC_ASSERT_OK(q);
  Stats s = a->GetStats();
  EXPECT_EQ(s.host_waits, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(sim->calls(SimOp::kSynchronizeEvent), 1u);
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), 3u);
  EXPECT_EQ(s.bytes_reserved, 32 * kMiB);
  EXPECT_EQ(s.peak_bytes_reserved, 32 * kMiB);
  sim->Use(Stream(2), Addr(*q), 32 * kMiB);
  ExpectNoHazards(*sim);

  // Nothing pending: a request the device cannot hold fails at once.
  absl::Status oom = a->Allocate(30 * kMiB, Stream(3)).status();
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
  EXPECT_TRUE(Mentions(oom, "out of memory")) << oom;
  EXPECT_TRUE(Mentions(oom, "the device refused more memory")) << oom;
  EXPECT_TRUE(Mentions(oom, "reserved 33554432")) << oom;
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), 4u);
  s = a->GetStats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.host_waits, 1u);
  GPUALLOC_EXPECT_OK(a->Validate());
  GPUALLOC_EXPECT_OK(a->Deallocate(*q, Stream(2)));
  GPUALLOC_EXPECT_OK(sim->Free(*elsewhere));
}

// The pool's reserved memory stays within the limit, not only the live
// bytes: a new segment that would pass it makes room first by trimming what
// the pool keeps unused. A loop the pool serves from its memory, with room
// for a segment under the limit, then costs no trim and no host wait.
TEST(AsyncSimTest, ReservedStaysWithinTheLimit) {
  auto sim = MakePoolSim(kGiB);
  auto a = MakeAsync(sim, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(30 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  auto q = a->Allocate(40 * kMiB, Stream(1));  // 30 + 40 would pass 64
  GPUALLOC_ASSERT_OK(q);
  Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 40 * kMiB);
  EXPECT_LE(s.peak_bytes_reserved, 64 * kMiB);
  EXPECT_EQ(s.host_waits, 0u);
  EXPECT_EQ(sim->calls(SimOp::kPoolTrim), 1u);
  GPUALLOC_ASSERT_OK(a->Deallocate(*q, Stream(1)));
  const std::uint64_t allocs = sim->calls(SimOp::kPoolAllocate);
  for (int i = 0; i < 20; ++i) {
    auto r = a->Allocate(20 * kMiB, Stream(1));
    GPUALLOC_ASSERT_OK(r);
    sim->Use(Stream(1), Addr(*r), 20 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(*r, Stream(1)));
  }
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), allocs + 20);
  EXPECT_EQ(sim->calls(SimOp::kPoolTrim), 1u);
  EXPECT_EQ(sim->calls(SimOp::kSynchronizeEvent), 0u);
  s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 40 * kMiB);
  EXPECT_LE(s.peak_bytes_reserved, 64 * kMiB);
  EXPECT_EQ(s.num_ooms, 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
  ExpectNoHazards(*sim);
}

// With room to spare under the limit, allocations cost one pool call each:
// the allocator asks the pool for its usage only when what it may have grown
// since it last asked comes near the limit.
TEST(AsyncSimTest, FarBelowTheLimitAllocationsAskThePoolNothingMore) {
  auto sim = MakePoolSim(8 * kGiB);
  auto a = MakeAsync(sim, 4 * kGiB);
  ASSERT_NE(a, nullptr);
  const std::uint64_t reads = sim->calls(SimOp::kGetPoolUsage);
  for (int i = 0; i < 100; ++i) {
    auto r = a->Allocate(8 * kMiB, Stream(1));
    GPUALLOC_ASSERT_OK(r);
    GPUALLOC_ASSERT_OK(a->Deallocate(*r, Stream(1)));
  }
  EXPECT_EQ(sim->calls(SimOp::kGetPoolUsage), reads);
  EXPECT_EQ(sim->calls(SimOp::kPoolTrim), 0u);
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), 100u);
}

// Memory freed on a stream whose work is pending cannot be trimmed: with
// garbage collection the allocator waits for it first, then trims; without,
// the request is out of memory, saying why, and nothing changes.
TEST(AsyncSimTest, PendingFreesAreWaitedForBeforeThePoolPassesTheLimit) {
  for (bool gc : {true, false}) {
    SCOPED_TRACE(gc ? "gc=true" : "gc=false");
    auto sim = MakePoolSim(kGiB);
    Options o = Mode(AllocatorMode::kAsync, 64 * kMiB);
    o.garbage_collection = gc;
    auto a = MakeAllocator(o, sim);
    ASSERT_NE(a, nullptr);
    auto p = a->Allocate(30 * kMiB, Stream(1));
    GPUALLOC_ASSERT_OK(p);
    sim->Use(Stream(1), Addr(*p), 30 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
    const std::uint64_t allocs = sim->calls(SimOp::kPoolAllocate);
    auto q = a->Allocate(40 * kMiB, Stream(2));
    Stats s = a->GetStats();
    EXPECT_LE(s.bytes_reserved, 64 * kMiB);
    EXPECT_LE(s.peak_bytes_reserved, 64 * kMiB);
    if (gc) {
      GPUALLOC_ASSERT_OK(q);
      EXPECT_EQ(s.bytes_reserved, 40 * kMiB);
      EXPECT_EQ(s.host_waits, 1u);
      sim->Use(Stream(2), Addr(*q), 40 * kMiB);
      ExpectNoHazards(*sim);
    } else {
      ASSERT_EQ(q.status().code(), absl::StatusCode::kResourceExhausted)
          << q.status();
      for (const char* text :
           {"out of memory", "reserved 31457280", "limit 67108864",
            "41943040 more", "freed on streams whose work", "Hint:"}) {
        EXPECT_TRUE(Mentions(q.status(), text)) << text << " in " << q.status();
      }
      EXPECT_EQ(s.bytes_reserved, 30 * kMiB);
      EXPECT_EQ(s.host_waits, 0u);
      EXPECT_EQ(s.num_ooms, 1u);
      EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), allocs);
    }
    GPUALLOC_EXPECT_OK(a->Validate());
  }
}

// The pool keeps what the limit allows cached at synchronization points:
// SetLimit moves its release threshold with the limit.
TEST(AsyncSimTest, SetLimitMovesThePoolsReleaseThreshold) {
  auto sim = MakePoolSim(kGiB);
  auto a = MakeAsync(sim, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  GPUALLOC_ASSERT_OK(a->SetLimit(512 * kMiB));
  EXPECT_EQ(sim->calls(SimOp::kConfigurePool), 2u);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    auto p = a->Allocate(32 * kMiB, Stream(1));
    GPUALLOC_ASSERT_OK(p);
    blocks.push_back(*p);
  }
  for (void* p : blocks) GPUALLOC_ASSERT_OK(a->Deallocate(p, Stream(1)));
  // A synchronization point: the pool trims to its release threshold.
  auto e = sim->CreateEvent();
  GPUALLOC_ASSERT_OK(e);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(*e, Stream(1)));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(*e));
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(*e));
  auto usage = sim->GetPoolUsage();
  GPUALLOC_ASSERT_OK(usage);
  EXPECT_EQ(usage->reserved, 256 * kMiB) << "trimmed to the old limit";
  // Lower again: trimmed at once, and the threshold follows.
  GPUALLOC_ASSERT_OK(a->SetLimit(64 * kMiB));
  EXPECT_EQ(sim->calls(SimOp::kConfigurePool), 3u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

// The destructor gives live blocks back to the pool; one the pool refuses
// is tried again, so nothing stays allocated there.
TEST(AsyncSimTest, TheDestructorRetriesARefusedPoolFree) {
  auto sim = MakePoolSim(kGiB);
  {
    auto a = MakeAsync(sim, 64 * kMiB);
    ASSERT_NE(a, nullptr);
    GPUALLOC_ASSERT_OK(a->Allocate(8 * kMiB, Stream(1)));
    sim->FailNthCall(SimOp::kPoolFree, 1);
  }
  EXPECT_EQ(sim->failed_calls(SimOp::kPoolFree), 1u);
  auto usage = sim->GetPoolUsage();
  GPUALLOC_ASSERT_OK(usage);
  EXPECT_EQ(usage->used, 0u) << "a live block stayed allocated in the pool";
}

// Out-of-memory hints name the setting the user sets, its variable and its
// value now: mem_limit when one was set (never the fraction then), else
// mem_fraction; never a C++ field.
TEST(OutOfMemoryHints, NameTheSettingAndItsValue) {
  for (AllocatorMode mode :
       {AllocatorMode::kBfc, AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    SCOPED_TRACE(std::string(AllocatorModeName(mode)));
    auto sim = MakePoolSim(kGiB);
    Options o = Mode(mode, 64 * kMiB);
    o.preallocate = false;
    auto a = MakeAllocator(o, sim);
    ASSERT_NE(a, nullptr);
    auto too_large = a->Allocate(128 * kMiB);
    auto first = a->Allocate(40 * kMiB);
    GPUALLOC_ASSERT_OK(first);
    auto at_limit = a->Allocate(40 * kMiB);
    for (const absl::Status& s : {too_large.status(), at_limit.status()}) {
      ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_TRUE(Mentions(s, "raise mem_limit (GPUALLOC_MEM_LIMIT, now 64"))
          << s;
      for (const char* wrong :
           {"0.75", "memory_fraction", "memory_limit", "mem_fraction"}) {
        EXPECT_FALSE(Mentions(s, wrong)) << wrong << " in " << s;
      }
    }
    GPUALLOC_ASSERT_OK(a->Deallocate(*first));

    Options f = Mode(mode);
    f.memory_fraction = 0.5;
    auto b = MakeAllocator(f, sim);
    ASSERT_NE(b, nullptr);
    auto huge = b->Allocate(kGiB);
    ASSERT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(Mentions(huge.status(),
                         "raise mem_fraction (GPUALLOC_MEM_FRACTION, now 0.5) "
                         "or set mem_limit (GPUALLOC_MEM_LIMIT)"))
        << huge.status();
  }
}

// A pool whose free memory lies in pieces of partly used segments cannot
// hold a request that needs a new segment, and trimming cannot return those
// pieces: out of memory, since the pool would pass the limit, and nothing
// changes.
TEST(AsyncSimTest, AFragmentedPoolAtTheLimitIsOutOfMemory) {
  auto sim = MakePoolSim(kGiB);
  auto a = MakeAsync(sim, 64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto p = a->Allocate(40 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(p);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, Stream(1)));
  auto b = a->Allocate(20 * kMiB, Stream(1));  // in the 40 MiB segment
  GPUALLOC_ASSERT_OK(b);
  const std::uint64_t allocs = sim->calls(SimOp::kPoolAllocate);
  auto c = a->Allocate(30 * kMiB, Stream(1));  // 50 live; 40 + 30 > 64
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted)
      << c.status();
  EXPECT_TRUE(Mentions(c.status(), "reserved 41943040")) << c.status();
  EXPECT_TRUE(Mentions(c.status(), "pass the limit")) << c.status();
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 40 * kMiB);
  EXPECT_EQ(s.bytes_in_use, 20 * kMiB);
  EXPECT_LE(s.peak_bytes_reserved, 64 * kMiB);
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), allocs);
  // A request whose new segment would fit goes ahead (here the pool serves
  // it from the segment's free piece).
  auto d = a->Allocate(10 * kMiB, Stream(1));
  GPUALLOC_ASSERT_OK(d);
  EXPECT_EQ(a->GetStats().bytes_reserved, 40 * kMiB);
  GPUALLOC_EXPECT_OK(a->Validate());
}

}  // namespace
}  // namespace gpualloc
