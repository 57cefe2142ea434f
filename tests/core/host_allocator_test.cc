// SPDX-License-Identifier: Apache-2.0
// tests/core/host_allocator_test.cc: the pinned host memory pool
// (gpualloc/core/host_allocator.h) on the simulator: growth and reuse, the
// record-stream rule, Trim, the limit, capabilities; and the simulator's
// pinned host memory itself.
#include "gpualloc/core/host_allocator.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace gpualloc
