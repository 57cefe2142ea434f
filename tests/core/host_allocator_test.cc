// SPDX-License-Identifier: Apache-2.0
// tests/core/host_allocator_test.cc: the pinned host memory pool
// (gpualloc/core/host_allocator.h) on the simulator: growth and reuse, the
// record-stream rule, Trim, the limit, capabilities; and the simulator's
// pinned host memory itself.
#include "gpualloc/core/host_allocator.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/core/shadow_model.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr Stream kCopy(0x100);
constexpr Stream kOther(0x200);

std::shared_ptr<SimBackend> MakeSim(SimMemory memory = SimMemory::kFake) {
  SimOptions o;
  o.memory = memory;
  return *SimBackend::Create(o);
}

std::unique_ptr<Allocator> MakePool(std::shared_ptr<SimBackend> sim,
                                    std::uint64_t limit = 0) {
  Options o;
  o.memory_limit = limit;
  auto pool = CreateHostAllocator(o, sim);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

TEST(SimHostMemory, FakeAddressesAreTheirOwnAndCosted) {
  auto sim = MakeSim();
  EXPECT_TRUE(sim->info().capabilities.host_memory);
  auto a = sim->HostAllocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = sim->HostAllocate(4096);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*a) % 4096, 0u);
  EXPECT_EQ(sim->host_bytes_allocated(), 8192u);
  EXPECT_EQ(sim->live_host_allocations(), 2u);
  EXPECT_EQ(sim->calls(SimOp::kHostAllocate), 2u);
  EXPECT_EQ(sim->modeled_ns(), sim->CallCostNs(SimOp::kHostAllocate, 1000) +
                                   sim->CallCostNs(SimOp::kHostAllocate, 4096));
  // Device memory is untouched by pinned host memory.
  EXPECT_EQ(sim->bytes_held(), 0u);
  EXPECT_TRUE(sim->HostFree(*a).ok());
  EXPECT_EQ(sim->HostFree(*a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sim->HostFree(*b).ok());
  EXPECT_EQ(sim->peak_host_bytes_allocated(), 8192u);
  EXPECT_EQ(sim->HostAllocate(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SimHostMemory, CapacityAndFreeSynchronizes) {
  SimOptions o;
  o.host_memory_bytes = 8 * kMiB;
  auto sim = *SimBackend::Create(o);
  auto a = sim->HostAllocate(6 * kMiB);
  ASSERT_TRUE(a.ok());
  auto b = sim->HostAllocate(4 * kMiB);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("host_memory_bytes"));
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), 4096);
  EXPECT_EQ(sim->pending_work(), 1u);
  EXPECT_TRUE(sim->HostFree(*a).ok());
  EXPECT_EQ(sim->pending_work(), 0u);  // cudaFreeHost synchronizes
  EXPECT_EQ(sim->access_violations(), 0u);
}

TEST(SimHostMemory, HostBackedIsRealAndCopiesAtLinkRate) {
  SimOptions o;
  o.memory = SimMemory::kHostBacked;
  o.total_bytes = 64 * kMiB;
  auto sim = *SimBackend::Create(o);
  auto pinned = sim->HostAllocate(kMiB);
  ASSERT_TRUE(pinned.ok());
  std::memset(*pinned, 0x5a, kMiB);
  auto dev = sim->Allocate(kMiB);
  ASSERT_TRUE(dev.ok());
  sim->ResetCounters();
  ASSERT_TRUE(sim->CopyFromHost(*dev, *pinned, kMiB).ok());
  EXPECT_EQ(sim->modeled_ns(), sim->CallCostNs(SimOp::kCopyFromHost, kMiB));
  EXPECT_EQ(sim->pageable_copies(), 0u);
  std::vector<unsigned char> pageable(kMiB);
  sim->ResetCounters();
  ASSERT_TRUE(sim->CopyToHost(pageable.data(), *dev, kMiB).ok());
  EXPECT_EQ(pageable[12345], 0x5a);
  EXPECT_GT(sim->modeled_ns(), sim->CallCostNs(SimOp::kCopyToHost, kMiB));
  EXPECT_EQ(sim->pageable_copies(), 1u);
  EXPECT_EQ(sim->pageable_copy_bytes(), kMiB);
  EXPECT_TRUE(sim->HostFree(*pinned).ok());
  EXPECT_TRUE(sim->Free(*dev).ok());
}

TEST(SimHostMemory, WithoutTheCapabilityUnimplemented) {
  SimOptions o;
  o.host_memory = false;
  auto sim = *SimBackend::Create(o);
  auto a = sim->HostAllocate(4096);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(a.status().message(), HasSubstr("host_memory"));
  EXPECT_EQ(sim->failed_calls(SimOp::kHostAllocate), 1u);
}

TEST(HostAllocator, NeedsTheCapabilities) {
  SimOptions o;
  o.host_memory = false;
  auto pool = CreateHostAllocator(Options(), *SimBackend::Create(o));
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pool.status().message(), HasSubstr("host_memory"));
  SimOptions no_streams;
  no_streams.streams = false;
  pool = CreateHostAllocator(Options(), *SimBackend::Create(no_streams));
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pool.status().message(), HasSubstr("streams"));
  EXPECT_EQ(CreateHostAllocator(Options(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  Options platform;
  platform.mode = AllocatorMode::kPlatform;
  EXPECT_EQ(CreateHostAllocator(platform, MakeSim()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostAllocator, GrowsInRegionsAndReusesFreedBlocks) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(sim->calls(SimOp::kHostAllocate), 0u);  // lazy
  auto a = pool->Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(sim->calls(SimOp::kHostAllocate), 1u);
  EXPECT_GE(pool->GetStats().bytes_reserved, kHostRegionBytes);
  auto b = pool->Allocate(1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(sim->calls(SimOp::kHostAllocate), 1u);  // same region
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  auto c = pool->Allocate(1000);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);  // best fit, reused at once: no stream used it
  ASSERT_TRUE(pool->Deallocate(*b).ok());
  ASSERT_TRUE(pool->Deallocate(*c).ok());
  EXPECT_TRUE(pool->Validate().ok());
  EXPECT_EQ(pool->GetStats().bytes_in_use, 0u);
  EXPECT_THAT(pool->device().name, HasSubstr("pinned host memory"));
}

// The shape of an offload step: buffers allocated on the host, filled by
// copies on a copy stream (RecordStream), freed; the copies complete before
// the next step.
void OffloadStep(Allocator& pool, SimBackend& sim,
                 const std::vector<std::uint64_t>& sizes) {
  std::vector<void*> live;
  for (std::uint64_t bytes : sizes) {
    auto p = pool.Allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(pool.RecordStream(*p, kCopy).ok());
    sim.Use(kCopy, reinterpret_cast<DeviceAddress>(*p), bytes);
    live.push_back(*p);
  }
  for (void* p : live) ASSERT_TRUE(pool.Deallocate(p).ok());
  sim.CompleteStream(kCopy);
}

TEST(HostAllocator, RepeatedStepMakesNoHostAllocateAfterTheFirst) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  const std::vector<std::uint64_t> sizes = {4 * kMiB,  64 * kMiB, 16 * kMiB,
                                            8 * kMiB,  32 * kMiB, 4 * kMiB,
                                            48 * kMiB, 12 * kMiB};
  OffloadStep(*pool, *sim, sizes);
  const std::uint64_t first = sim->calls(SimOp::kHostAllocate);
  EXPECT_GT(first, 0u);
  for (int step = 1; step < 20; ++step) {
    OffloadStep(*pool, *sim, sizes);
    ASSERT_EQ(sim->calls(SimOp::kHostAllocate), first) << "step " << step;
  }
  EXPECT_EQ(sim->calls(SimOp::kHostFree), 0u);
  EXPECT_EQ(sim->calls(SimOp::kSynchronizeEvent), 0u);
  EXPECT_EQ(pool->GetStats().host_waits, 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(sim->access_violations(), 0u);
  EXPECT_TRUE(pool->Validate().ok());
}

TEST(HostAllocator, ReuseWaitsOnlyForTheRecordedStreams) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(kMiB);
  auto b = pool->Allocate(kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(pool->RecordStream(*a, kCopy).ok());
  ASSERT_TRUE(pool->RecordStream(*b, kOther).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), kMiB);
  sim->Use(kOther, reinterpret_cast<DeviceAddress>(*b), kMiB);
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  ASSERT_TRUE(pool->Deallocate(*b).ok());
  EXPECT_TRUE(pool->Validate().ok());
  sim->CompleteStream(kOther);  // the copy on A is still running
  auto c = pool->Allocate(kMiB);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *b);  // B's block: its event completed
  auto d = pool->Allocate(kMiB);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(*d, *a);  // A's is not reused while its work runs
  EXPECT_EQ(sim->calls(SimOp::kSynchronizeEvent), 0u);
  EXPECT_EQ(pool->GetStats().host_waits, 0u);
  EXPECT_EQ(pool->GetStats().events_recorded, 2u);
  sim->CompleteStream(kCopy);
  auto e = pool->Allocate(kMiB);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, *a);  // now it is
  for (void* p : {*c, *d, *e}) ASSERT_TRUE(pool->Deallocate(p).ok());
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_TRUE(pool->Validate().ok());
}

TEST(HostAllocator, TrimReturnsFreeRegions) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(16 * kMiB);
  auto b = pool->Allocate(kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(pool->RecordStream(*b, kCopy).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*b), kMiB);
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  ASSERT_TRUE(pool->Deallocate(*b).ok());
  const std::uint64_t reserved = pool->GetStats().bytes_reserved;
  EXPECT_EQ(sim->host_bytes_allocated(), reserved);
  // b's block is held while its copy runs: its region stays.
  ASSERT_TRUE(pool->Trim().ok());
  EXPECT_GT(pool->GetStats().bytes_reserved, 0u);
  EXPECT_LT(pool->GetStats().bytes_reserved, reserved);
  EXPECT_EQ(sim->hazards(), 0u);
  sim->CompleteStream(kCopy);
  ASSERT_TRUE(pool->Trim().ok());
  EXPECT_EQ(pool->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->host_bytes_allocated(), 0u);
  EXPECT_EQ(sim->calls(SimOp::kHostFree), sim->calls(SimOp::kHostAllocate));
  EXPECT_TRUE(pool->Validate().ok());
}

TEST(HostAllocator, LimitAndOutOfMemory) {
  auto sim = MakeSim();
  auto pool = MakePool(sim, 8 * kMiB);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->GetStats().bytes_limit, 8 * kMiB);
  auto big = pool->Allocate(9 * kMiB);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("host pool"));
  // Its hint names its own setting, with its value.
  EXPECT_THAT(big.status().message(),
              HasSubstr("raise host_memory_limit (GPUALLOC_HOST_MEMORY_LIMIT, "
                        "now 8.00 MiB)"));
  EXPECT_THAT(big.status().message(),
              ::testing::Not(HasSubstr("mem_fraction")));
  EXPECT_THAT(big.status().message(),
              ::testing::Not(HasSubstr("memory_fraction")));
  EXPECT_EQ(pool->GetStats().num_ooms, 1u);
  EXPECT_EQ(sim->calls(SimOp::kHostAllocate), 0u);
  // Above the machine's memory: the limit asked for is taken as is.
  Options huge;
  huge.memory_limit = DefaultHostMemoryLimit() + kHostRegionBytes;
  auto p = CreateHostAllocator(huge, sim);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->GetStats().bytes_limit, huge.memory_limit);
  EXPECT_GT(DefaultHostMemoryLimit(), 0u);
  EXPECT_EQ(DefaultHostMemoryLimit() % kHostRegionBytes, 0u);
  // A device stream or a tag on Allocate is refused.
  EXPECT_EQ(pool->Allocate(kMiB, kCopy).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Allocate(kMiB, Stream(), 0, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostAllocator, AtTheLimitTheHostWaitsForHeldBlocks) {
  auto sim = MakeSim();
  auto pool = MakePool(sim, 4 * kMiB);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(4 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(pool->RecordStream(*a, kCopy).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), 4 * kMiB);
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  // Pending, and no room to grow: the host waits, once.
  auto b = pool->Allocate(4 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(pool->GetStats().host_waits, 1u);
  EXPECT_GE(sim->calls(SimOp::kSynchronizeEvent), 1u);
  EXPECT_EQ(sim->pending_work(), 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  // A second free of a held block is refused, nothing changed.
  ASSERT_TRUE(pool->RecordStream(*b, kCopy).ok());
  ASSERT_TRUE(pool->Deallocate(*b).ok());
  EXPECT_EQ(pool->Deallocate(*b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->RecordStream(*b, kCopy).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool->Validate().ok());
}

// A query of an unrelated held block's event that fails once leaves that
// block held (asked again later); the allocation is served.
TEST(HostAllocator, AFailedQueryOfAHeldBlockDoesNotFailAllocate) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool->RecordStream(*a, kCopy).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), kMiB);
  ASSERT_TRUE(pool->Deallocate(*a).ok());  // held for the copy
  sim->FailNthCall(SimOp::kQueryEvent, 1);
  auto b = pool->Allocate(2 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(sim->failed_calls(SimOp::kQueryEvent), 1u);
  sim->CompleteAll();
  auto c = pool->Allocate(kMiB);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, *a) << "asked again, complete, reused";
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_TRUE(pool->Validate().ok());
}

// Destroyed while a held block's wait fails: its event is destroyed anyway.
TEST(HostAllocator, DestroyedWhileAWaitFailsLeaksNoEvent) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool->RecordStream(*a, kCopy).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), kMiB);
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  EXPECT_EQ(sim->live_events(), 1u);
  sim->FailNthCall(SimOp::kSynchronizeEvent, 1);
  pool.reset();
  EXPECT_EQ(sim->failed_calls(SimOp::kSynchronizeEvent), 1u);
  EXPECT_EQ(sim->live_events(), 0u);
  EXPECT_EQ(sim->host_bytes_allocated(), 0u);
}

// A limit within a region of 2^64 cannot be rounded up to whole regions:
// refused naming the setting, not wrapped to nothing.
TEST(HostAllocator, ALimitNearTwoToTheSixtyFourIsRefusedByName) {
  auto sim = MakeSim();
  constexpr std::uint64_t kLargest =
      UINT64_MAX / kHostRegionBytes * kHostRegionBytes;
  for (std::uint64_t limit : {UINT64_MAX, kLargest + 1}) {
    Options o;
    o.memory_limit = limit;
    auto p = CreateHostAllocator(o, sim);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr("host_memory_limit"));
    EXPECT_THAT(p.status().message(), HasSubstr(std::to_string(kLargest)));
  }
  Options o;
  o.memory_limit = kLargest;
  auto p = CreateHostAllocator(o, sim);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->GetStats().bytes_limit, kLargest);
  auto block = (*p)->Allocate(kMiB);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_TRUE((*p)->Deallocate(*block).ok());
}

TEST(HostAllocator, ReleaseStreamRecordsItsLastEventThere) {
  auto sim = MakeSim();
  auto pool = MakePool(sim);
  ASSERT_NE(pool, nullptr);
  auto a = pool->Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool->RecordStream(*a, kCopy).ok());
  sim->Use(kCopy, reinterpret_cast<DeviceAddress>(*a), kMiB);
  ASSERT_TRUE(pool->ReleaseStream(kCopy).ok());
  EXPECT_EQ(sim->calls(SimOp::kRecordEvent), 1u);
  sim->DestroyStream(kCopy);
  ASSERT_TRUE(pool->Deallocate(*a).ok());
  EXPECT_EQ(sim->calls(SimOp::kRecordEvent), 1u);  // never named again
  EXPECT_EQ(sim->calls_on_destroyed_streams(), 0u);
  auto b = pool->Allocate(kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*b, *a);  // the released stream's copy still runs
  sim->CompleteAll();
  auto c = pool->Allocate(kMiB);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);
  EXPECT_EQ(pool->ReleaseStream(kHostStream).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_TRUE(pool->Validate().ok());
}

// Random allocations, record-streams, frees and completions on two copy
// streams, with the host's own use of each block it receives as work on a
// stream of its own (completed at once: the host is synchronous): the
// hazard detector flags any block handed out while a copy still uses it.
TEST(HostAllocator, RandomSequenceHasNoHazards) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    auto sim = MakeSim();
    auto pool = MakePool(sim, 64 * kMiB);
    ASSERT_NE(pool, nullptr);
    testing::ShadowModel model(pool->device().allocation_alignment >= 256
                                   ? 256
                                   : pool->device().allocation_alignment,
                               /*exact_sizes=*/false);
    constexpr Stream kHostUse(0x300);
    const Stream streams[] = {kCopy, kOther};
    std::mt19937 rng(seed);
    struct Live {
      void* ptr;
      std::uint64_t bytes;
    };
    std::vector<Live> live;
    std::uint64_t ooms = 0, allocs = 0;
    for (int op = 0; op < 3000; ++op) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 4 || live.empty()) {
        const std::uint64_t bytes =
            rng() % 2 ? 1 + rng() % 65536 : 1 + rng() % (12 * kMiB);
        auto p = pool->Allocate(bytes);
        if (!p.ok()) {
          ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
              << p.status();
          ++ooms;
        } else {
          const auto address = reinterpret_cast<std::uint64_t>(*p);
          ASSERT_TRUE(model.Add(address, bytes).ok());
          sim->Use(kHostUse, address, bytes);
          sim->CompleteStream(kHostUse);
          live.push_back({*p, bytes});
          ++allocs;
        }
      } else if (what < 7) {
        const Live& l = live[rng() % live.size()];
        const Stream s = streams[rng() % 2];
        ASSERT_TRUE(pool->RecordStream(l.ptr, s).ok());
        // The program orders its own copies of one buffer (a copy on the
        // other stream may still touch it): only the pool's reuse is
        // checked.
        for (Stream other : streams) sim->OrderStreams(s, other);
        sim->Use(s, reinterpret_cast<DeviceAddress>(l.ptr), l.bytes);
      } else if (what < 9) {
        const std::size_t i = rng() % live.size();
        ASSERT_TRUE(pool->Deallocate(live[i].ptr).ok());
        ASSERT_TRUE(
            model.Remove(reinterpret_cast<std::uint64_t>(live[i].ptr)).ok());
        live[i] = live.back();
        live.pop_back();
      } else {
        sim->CompleteStream(streams[rng() % 2]);
      }
      ASSERT_TRUE(pool->Validate().ok()) << "op " << op;
      ASSERT_EQ(sim->hazards(), 0u)
          << "op " << op << ": " << sim->hazard_log()[0].ToString();
      ASSERT_EQ(sim->access_violations(), 0u) << "op " << op;
      const Stats stats = pool->GetStats();
      ASSERT_EQ(stats.num_allocs, allocs) << "op " << op;
      // Held blocks still count until their copies are known complete.
      ASSERT_GE(stats.bytes_requested, model.bytes_requested());
      ASSERT_GE(stats.bytes_in_use, model.bytes_in_use());
      ASSERT_LE(stats.bytes_reserved, 64 * kMiB);
    }
    for (const Live& l : live) ASSERT_TRUE(pool->Deallocate(l.ptr).ok());
    sim->CompleteAll();
    ASSERT_TRUE(pool->Trim().ok());
    EXPECT_EQ(pool->GetStats().bytes_in_use, 0u);
    EXPECT_EQ(pool->GetStats().bytes_reserved, 0u);
    EXPECT_EQ(sim->hazards(), 0u);
    EXPECT_GT(pool->GetStats().events_recorded, 0u);
    EXPECT_GT(ooms + pool->GetStats().host_waits, 0u);
  }
}

}  // namespace
}  // namespace gpualloc
