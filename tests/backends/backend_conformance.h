// SPDX-License-Identifier: Apache-2.0
// tests/backends/backend_conformance.h: the conformance suite every Backend
// passes.
//
// Written once, instantiated per backend (RMM's pattern): a test program
// includes this header and instantiates the suite with factories, e.g.
//
//   INSTANTIATE_TEST_SUITE_P(Sim, BackendConformanceTest,
//       ::testing::Values(BackendFactory{"fake_h200", [] { ... }}),
//       BackendFactoryName);
//
// A factory that answers Unavailable (no driver, no device) skips the suite
// with the reason; any other error fails it. The tests state only what the
// Backend interface promises (gpualloc/core/backend.h), so that the core can
// rely on nothing more. The TEST_P definitions live in this header: include it
// in exactly one test program.
#ifndef GPUALLOC_TESTS_BACKEND_CONFORMANCE_H_
#define GPUALLOC_TESTS_BACKEND_CONFORMANCE_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"

namespace gpualloc::testing {

struct BackendFactory {
  std::string name;  // test-name suffix: letters, digits and underscores
  std::function<absl::StatusOr<std::shared_ptr<Backend>>()> make;
  // Optional, for a backend that models device work (the simulator, a fake
  // driver): hold_work makes the work queued on `stream` so far, or a piece
  // it queues, stay pending until release_work completes it. The counter
  // cases use them to check that a write waits for its stream's earlier
  // work; without them those cases skip.
  std::function<void(Backend&, Stream)> hold_work = nullptr;
  std::function<void(Backend&, Stream)> release_work = nullptr;
};

inline void PrintTo(const BackendFactory& factory, std::ostream* os) {
  *os << factory.name;
}

// For INSTANTIATE_TEST_SUITE_P: names each instance after its factory.
inline std::string BackendFactoryName(
    const ::testing::TestParamInfo<BackendFactory>& info) {
  return info.param.name;
}

namespace conformance_internal {

// A live allocation the test made.
struct Block {
  DeviceAddress address = 0;
  std::uint64_t size = 0;
};

}  // namespace conformance_internal

class BackendConformanceTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  static constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

  void SetUp() override {
    absl::StatusOr<std::shared_ptr<Backend>> made = GetParam().make();
    if (absl::IsUnavailable(made.status())) {
      GTEST_SKIP() << GetParam().name << " unavailable: " << made.status();
    }
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_NE(*made, nullptr);
    backend_ = *std::move(made);
  }

  void TearDown() override {
    // Returns whatever a failed test left behind, so one failure does not
    // cascade into the next test on a shared device.
    if (backend_ == nullptr) return;
    for (const auto& [address, bytes] : mappings_) {
      (void)backend_->Unmap(address, bytes);
    }
    for (PhysicalHandle handle : handles_) {
      (void)backend_->ReleasePhysical(handle);
    }
    for (const auto& [address, bytes] : reservations_) {
      (void)backend_->FreeAddress(address, bytes);
    }
    for (const conformance_internal::Block& block : live_) {
      (void)backend_->Free(block.address);
    }
    for (DeviceAddress address : pool_live_) {
      (void)backend_->PoolFree(address, Stream());
    }
    for (EventHandle event : events_) (void)backend_->DestroyEvent(event);
  }

  const DeviceInfo& info() const { return backend_->info(); }

  std::uint64_t FreeBytes() {
    absl::StatusOr<std::uint64_t> free = backend_->FreeBytes();
    EXPECT_TRUE(free.ok()) << free.status();
    return free.ok() ? *free : 0;
  }

  // Allocates and remembers the block for TearDown; 0 on failure (reported).
  DeviceAddress AllocateOrFail(std::uint64_t bytes) {
    absl::StatusOr<DeviceAddress> address = backend_->Allocate(bytes);
    EXPECT_TRUE(address.ok())
        << "Allocate(" << bytes << "): " << address.status();
    if (!address.ok()) return 0;
    live_.push_back({*address, bytes});
    return *address;
  }

  // Frees a block AllocateOrFail returned and forgets it.
  void FreeOrFail(DeviceAddress address) {
    const absl::Status status = backend_->Free(address);
    EXPECT_TRUE(status.ok()) << "Free(" << address << "): " << status;
    live_.erase(std::remove_if(live_.begin(), live_.end(),
                               [&](const conformance_internal::Block& b) {
                                 return b.address == address;
                               }),
                live_.end());
  }

  // Whether the device can hold `bytes` more now (tests skip when not).
  bool HasRoomFor(std::uint64_t bytes) {
    const std::uint64_t free = FreeBytes();
    return free >= bytes;
  }

  // Whether the device can hold blocks of `sizes`, each followed by a
  // granule of guard, and `extra` bytes more.
  bool HasRoomForBlocks(const std::vector<std::uint64_t>& sizes,
                        std::uint64_t extra = 0) {
    std::uint64_t needed = extra;
    for (std::uint64_t size : sizes) {
      needed += size + info().recommended_granularity;
    }
    return HasRoomFor(needed);
  }

  // AllocateOrFail of each size, in order (0 where one failed).
  std::vector<DeviceAddress> AllocateEachOrFail(
      const std::vector<std::uint64_t>& sizes) {
    std::vector<DeviceAddress> addresses;
    for (std::uint64_t size : sizes) addresses.push_back(AllocateOrFail(size));
    return addresses;
  }

  // Creates an event and remembers it for TearDown; 0 on failure (reported).
  EventHandle CreateEventOrFail() {
    absl::StatusOr<EventHandle> event = backend_->CreateEvent();
    EXPECT_TRUE(event.ok()) << "CreateEvent: " << event.status();
    if (!event.ok()) return 0;
    EXPECT_NE(*event, 0u) << "0 is never an event";
    events_.push_back(*event);
    return *event;
  }

  void DestroyEventOrFail(EventHandle event) {
    const absl::Status status = backend_->DestroyEvent(event);
    EXPECT_TRUE(status.ok()) << "DestroyEvent(" << event << "): " << status;
    events_.erase(std::remove(events_.begin(), events_.end(), event),
                  events_.end());
  }

  // Host-waits for everything queued on the default stream so far.
  void SynchronizeDefaultStream() {
    const EventHandle event = CreateEventOrFail();
    ASSERT_NE(event, 0u);
    const absl::Status recorded = backend_->RecordEvent(event, Stream());
    ASSERT_TRUE(recorded.ok()) << recorded;
    const absl::Status synced = backend_->SynchronizeEvent(event);
    ASSERT_TRUE(synced.ok()) << synced;
    DestroyEventOrFail(event);
  }

  // --- Virtual memory: each helper reports a failure and remembers what is
  // live for TearDown.
  DeviceAddress ReserveOrFail(std::uint64_t bytes, std::uint64_t alignment) {
    absl::StatusOr<DeviceAddress> address =
        backend_->ReserveAddress(bytes, alignment);
    EXPECT_TRUE(address.ok()) << "ReserveAddress(" << bytes << ", " << alignment
                              << "): " << address.status();
    if (!address.ok()) return 0;
    EXPECT_NE(*address, 0u);
    reservations_.emplace_back(*address, bytes);
    return *address;
  }
  void FreeAddressOrFail(DeviceAddress address, std::uint64_t bytes) {
    const absl::Status status = backend_->FreeAddress(address, bytes);
    EXPECT_TRUE(status.ok()) << "FreeAddress: " << status;
    Forget(&reservations_, {address, bytes});
  }
  PhysicalHandle CreatePhysicalOrFail(std::uint64_t bytes) {
    absl::StatusOr<PhysicalHandle> handle = backend_->CreatePhysical(bytes);
    EXPECT_TRUE(handle.ok())
        << "CreatePhysical(" << bytes << "): " << handle.status();
    if (!handle.ok()) return 0;
    EXPECT_NE(*handle, 0u) << "0 is never a handle";
    handles_.push_back(*handle);
    return *handle;
  }
  void ReleasePhysicalOrFail(PhysicalHandle handle) {
    const absl::Status status = backend_->ReleasePhysical(handle);
    EXPECT_TRUE(status.ok()) << "ReleasePhysical(" << handle << "): " << status;
    handles_.erase(std::remove(handles_.begin(), handles_.end(), handle),
                   handles_.end());
  }
  // Maps and sets access.
  void MapOrFail(DeviceAddress address, std::uint64_t bytes,
                 PhysicalHandle handle) {
    const absl::Status mapped = backend_->Map(address, bytes, handle);
    EXPECT_TRUE(mapped.ok()) << "Map: " << mapped;
    if (!mapped.ok()) return;
    mappings_.emplace_back(address, bytes);
    const absl::Status access = backend_->SetAccess(address, bytes);
    EXPECT_TRUE(access.ok()) << "SetAccess: " << access;
  }
  // Reserves 4 granules and maps, at the start, a handle of one granule
  // (`*first`) and one of two (`*second`) back to back, then sets access
  // over both in one SetAccess.
  // The reservation, or 0 on failure (reported).
  DeviceAddress MapAdjacentHandles(PhysicalHandle* first,
                                   PhysicalHandle* second) {
    const std::uint64_t g = Granule();
    const DeviceAddress r = ReserveOrFail(4 * g, 0);
    *first = CreatePhysicalOrFail(g);
    *second = CreatePhysicalOrFail(2 * g);
    if (r == 0 || *first == 0 || *second == 0) return 0;
    const absl::Status mapped_first = backend_->Map(r, g, *first);
    EXPECT_TRUE(mapped_first.ok()) << "Map: " << mapped_first;
    if (!mapped_first.ok()) return 0;
    mappings_.emplace_back(r, g);
    const absl::Status mapped_second = backend_->Map(r + g, 2 * g, *second);
    EXPECT_TRUE(mapped_second.ok()) << "Map: " << mapped_second;
    if (!mapped_second.ok()) return 0;
    mappings_.emplace_back(r + g, 2 * g);
    const absl::Status access = backend_->SetAccess(r, 3 * g);
    EXPECT_TRUE(access.ok()) << "SetAccess: " << access;
    return access.ok() ? r : 0;
  }
  // Unmaps mappings MapOrFail made that tile [address, address + bytes).
  void UnmapOrFail(DeviceAddress address, std::uint64_t bytes) {
    const absl::Status status = backend_->Unmap(address, bytes);
    EXPECT_TRUE(status.ok()) << "Unmap: " << status;
    mappings_.erase(std::remove_if(mappings_.begin(), mappings_.end(),
                                   [&](const auto& m) {
                                     return m.first >= address &&
                                            m.first < address + bytes;
                                   }),
                    mappings_.end());
  }
  static void Forget(std::vector<std::pair<DeviceAddress, std::uint64_t>>* v,
                     std::pair<DeviceAddress, std::uint64_t> range) {
    v->erase(std::remove(v->begin(), v->end(), range), v->end());
  }
  // The granule the virtual-memory tests map in, and the smallest one.
  std::uint64_t Granule() const { return info().recommended_granularity; }
  std::uint64_t MinGranule() const { return info().min_granularity; }

  std::shared_ptr<Backend> backend_;
  std::vector<conformance_internal::Block> live_;
  std::vector<std::pair<DeviceAddress, std::uint64_t>> reservations_;
  std::vector<PhysicalHandle> handles_;
  std::vector<std::pair<DeviceAddress, std::uint64_t>> mappings_;
  // Only the default stream: on a real device any other handle must be a
  // stream the runtime created.
  std::vector<DeviceAddress> pool_live_;
  std::vector<EventHandle> events_;
};

TEST_P(BackendConformanceTest, InfoIsSane) {
  const DeviceInfo& d = info();
  EXPECT_FALSE(d.backend.empty());
  EXPECT_FALSE(d.name.empty());
  EXPECT_FALSE(d.driver_version.empty());
  EXPECT_GE(d.ordinal, 0);
  EXPECT_GT(d.total_bytes, 0u);
  EXPECT_TRUE(std::has_single_bit(d.min_granularity)) << d.min_granularity;
  EXPECT_TRUE(std::has_single_bit(d.recommended_granularity))
      << d.recommended_granularity;
  EXPECT_LE(d.min_granularity, d.recommended_granularity);
  EXPECT_TRUE(std::has_single_bit(d.allocation_alignment))
      << d.allocation_alignment;
  ASSERT_FALSE(d.page_sizes.empty());
  for (std::size_t i = 0; i < d.page_sizes.size(); ++i) {
    EXPECT_TRUE(std::has_single_bit(d.page_sizes[i])) << d.page_sizes[i];
    if (i > 0) {
      EXPECT_LT(d.page_sizes[i - 1], d.page_sizes[i]) << "index " << i;
    }
  }
  // The backend's own name and VendorName must be printable.
  EXPECT_FALSE(VendorName(d.vendor).empty());
  // Free memory never exceeds the total.
  EXPECT_LE(FreeBytes(), d.total_bytes);
}

TEST_P(BackendConformanceTest, CapabilityFlagsAreConsistent) {
  const Capabilities& c = info().capabilities;
  // Stream-ordered pools allocate and free on streams: they need streams.
  if (c.stream_ordered_pools) {
    EXPECT_TRUE(c.streams);
  }
  // Graph capture records the work of streams: it needs them too.
  if (c.graph_capture) {
    EXPECT_TRUE(c.streams);
  }
  // Virtual memory maps in granules: the granularity must be known.
  if (c.virtual_memory) {
    EXPECT_GT(info().min_granularity, 0u);
    EXPECT_EQ(info().recommended_granularity % info().min_granularity, 0u);
  }
}

TEST_P(BackendConformanceTest, AllocateReturnsAlignedDistinctDisjointBlocks) {
  const std::vector<std::uint64_t> sizes = {
      1,        255,          256,       257,       4095,
      4096,     4097,         65536 + 1, kMiB,      2 * kMiB - 1,
      2 * kMiB, 2 * kMiB + 1, 3 * kMiB,  16 * kMiB, 64 * kMiB};
  std::uint64_t needed = 0;
  for (std::uint64_t size : sizes) {
    needed += size + info().recommended_granularity;
  }
  if (!HasRoomFor(needed))
    GTEST_SKIP() << "device has less than " << needed << " bytes free";

  const std::uint64_t alignment = info().allocation_alignment;
  for (std::uint64_t size : sizes) {
    const DeviceAddress address = AllocateOrFail(size);
    ASSERT_NE(address, 0u) << "size " << size;
    EXPECT_EQ(address % alignment, 0u)
        << "size " << size << " address " << address;
  }
  std::vector<conformance_internal::Block> sorted = live_;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].address + sorted[i - 1].size, sorted[i].address)
        << "blocks of " << sorted[i - 1].size << " and " << sorted[i].size
        << " bytes overlap";
  }
  for (const auto& block : sorted) FreeOrFail(block.address);
  EXPECT_TRUE(live_.empty());
}

TEST_P(BackendConformanceTest, FreeReturnsMemory) {
  const std::uint64_t size = 8 * kMiB;
  if (!HasRoomFor(size)) GTEST_SKIP() << "device is full";
  const std::uint64_t before = FreeBytes();
  const DeviceAddress address = AllocateOrFail(size);
  ASSERT_NE(address, 0u);
  const std::uint64_t during = FreeBytes();
  EXPECT_LE(during + size, before);
  FreeOrFail(address);
  const std::uint64_t after = FreeBytes();
  EXPECT_GE(after, during + size);
  EXPECT_EQ(after, before);
}

TEST_P(BackendConformanceTest, FreeOfUnknownAddressIsInvalidArgument) {
  const std::uint64_t size = 4 * kMiB;
  if (!HasRoomFor(size)) GTEST_SKIP() << "device is full";
  const DeviceAddress address = AllocateOrFail(size);
  ASSERT_NE(address, 0u);
  const std::uint64_t free = FreeBytes();

  const std::vector<DeviceAddress> unknown = {
      address + info().allocation_alignment,  // interior
      address + size / 2,                     // interior
      address - info().allocation_alignment,  // just before
      0,
  };
  for (DeviceAddress bad : unknown) {
    const absl::Status status = backend_->Free(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad << ": " << status;
    EXPECT_EQ(FreeBytes(), free) << bad;
  }
  // The real allocation is intact and still frees once.
  FreeOrFail(address);
  const std::uint64_t after_free = FreeBytes();
  const absl::Status twice = backend_->Free(address);
  EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
  EXPECT_EQ(FreeBytes(), after_free);
}

TEST_P(BackendConformanceTest, AllocateZeroIsInvalidArgument) {
  const std::uint64_t free = FreeBytes();
  const absl::StatusOr<DeviceAddress> zero = backend_->Allocate(0);
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
  EXPECT_EQ(FreeBytes(), free);
}

TEST_P(BackendConformanceTest, AllocateBeyondFreeMemoryIsResourceExhausted) {
  const std::uint64_t size = 2 * kMiB;
  if (!HasRoomFor(size)) GTEST_SKIP() << "device is full";
  const DeviceAddress held = AllocateOrFail(size);
  ASSERT_NE(held, 0u);
  const std::uint64_t free = FreeBytes();
  const std::vector<std::uint64_t> too_big = {
      free + 1,
      info().total_bytes + 1,
      info().total_bytes * 2,
      std::numeric_limits<std::uint64_t>::max(),
      std::numeric_limits<std::uint64_t>::max() - info().allocation_alignment +
          2,
  };
  for (std::uint64_t bytes : too_big) {
    const absl::StatusOr<DeviceAddress> result = backend_->Allocate(bytes);
    EXPECT_TRUE(absl::IsResourceExhausted(result.status()))
        << bytes << ": " << result.status();
    if (result.ok()) live_.push_back({*result, bytes});
    EXPECT_EQ(FreeBytes(), free) << bytes;
  }
  // What was live before stays live and frees normally.
  FreeOrFail(held);
}

TEST_P(BackendConformanceTest, AllocateAfterFreeOfEverythingSucceeds) {
  const std::uint64_t size = 32 * kMiB;
  if (!HasRoomFor(2 * size)) GTEST_SKIP() << "device is full";
  const std::uint64_t before = FreeBytes();
  for (int round = 0; round < 8; ++round) {
    const DeviceAddress a = AllocateOrFail(size);
    const DeviceAddress b = AllocateOrFail(size / 2);
    ASSERT_NE(a, 0u);
    ASSERT_NE(b, 0u);
    FreeOrFail(b);
    FreeOrFail(a);
  }
  EXPECT_EQ(FreeBytes(), before);
}

TEST_P(BackendConformanceTest, HostAccessibleMemoryHoldsAPattern) {
  if (!info().capabilities.host_accessible) {
    GTEST_SKIP() << info().name << " is not host accessible";
  }
  const std::vector<std::uint64_t> sizes = {1,        256,      4096 + 3,
                                            kMiB - 1, 2 * kMiB, 5 * kMiB + 7};
  if (!HasRoomForBlocks(sizes)) GTEST_SKIP() << "device is full";
  const std::vector<DeviceAddress> addresses = AllocateEachOrFail(sizes);
  ASSERT_EQ(std::count(addresses.begin(), addresses.end(), 0u), 0);
  auto pattern = [](std::size_t block, std::uint64_t offset) {
    return static_cast<unsigned char>((offset * 131 + block * 29 + 7) & 0xff);
  };
  // Write every block first, then check every block: an overlap shows up as
  // a block overwritten by a later one.
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto* bytes = reinterpret_cast<unsigned char*>(addresses[i]);
    for (std::uint64_t off = 0; off < sizes[i]; ++off)
      bytes[off] = pattern(i, off);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(addresses[i]);
    std::uint64_t mismatches = 0;
    for (std::uint64_t off = 0; off < sizes[i]; ++off) {
      mismatches += bytes[off] != pattern(i, off);
    }
    EXPECT_EQ(mismatches, 0u)
        << "block " << i << " of " << sizes[i] << " bytes";
  }
  for (DeviceAddress address : addresses) FreeOrFail(address);
}

TEST_P(BackendConformanceTest, ConcurrentAllocateAndFreeKeepAccounting) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 64;
  const std::uint64_t size = 64 * 1024;
  if (!HasRoomFor(kThreads * 4 * (size + info().recommended_granularity))) {
    GTEST_SKIP() << "device is full";
  }
  const std::uint64_t before = FreeBytes();
  std::vector<std::vector<std::string>> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        DeviceAddress held[4] = {};
        for (int i = 0; i < 4; ++i) {
          absl::StatusOr<DeviceAddress> a = backend_->Allocate(size * (i + 1));
          if (!a.ok()) {
            errors[t].push_back(a.status().ToString());
            continue;
          }
          held[i] = *a;
        }
        for (DeviceAddress address : held) {
          if (address == 0) continue;
          absl::Status s = backend_->Free(address);
          if (!s.ok()) errors[t].push_back(s.ToString());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t].size()
                                   << " errors, first " << errors[t].front();
  }
  EXPECT_EQ(FreeBytes(), before);
}

TEST_P(BackendConformanceTest, EventCallsNeedTheStreamsCapability) {
  if (info().capabilities.streams) {
    GTEST_SKIP() << info().name << " has streams";
  }
  EXPECT_TRUE(absl::IsUnimplemented(backend_->CreateEvent().status()));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->RecordEvent(1, Stream())));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->QueryEvent(1).status()));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->StreamWaitEvent(Stream(), 1)));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->SynchronizeEvent(1)));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->DestroyEvent(1)));
}

TEST_P(BackendConformanceTest, NeverRecordedEventQueriesComplete) {
  if (!info().capabilities.streams) GTEST_SKIP() << "no streams";
  const EventHandle event = CreateEventOrFail();
  ASSERT_NE(event, 0u);
  const absl::StatusOr<bool> done = backend_->QueryEvent(event);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  // Waiting for it, on the host or on a stream, returns at once.
  EXPECT_TRUE(backend_->StreamWaitEvent(Stream(), event).ok());
  EXPECT_TRUE(backend_->SynchronizeEvent(event).ok());
  DestroyEventOrFail(event);
}

TEST_P(BackendConformanceTest, RecordedAndSynchronizedEventQueriesComplete) {
  if (!info().capabilities.streams) GTEST_SKIP() << "no streams";
  const EventHandle event = CreateEventOrFail();
  const EventHandle other = CreateEventOrFail();
  ASSERT_NE(event, 0u);
  ASSERT_NE(other, 0u);
  EXPECT_NE(event, other);
  for (int round = 0; round < 3; ++round) {  // an event is recorded many times
    const absl::Status recorded = backend_->RecordEvent(event, Stream());
    ASSERT_TRUE(recorded.ok()) << recorded;
    const absl::Status waited = backend_->StreamWaitEvent(Stream(), event);
    EXPECT_TRUE(waited.ok()) << waited;
    const absl::Status synced = backend_->SynchronizeEvent(event);
    ASSERT_TRUE(synced.ok()) << synced;
    const absl::StatusOr<bool> done = backend_->QueryEvent(event);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(*done) << "round " << round;
  }
  DestroyEventOrFail(event);
  DestroyEventOrFail(other);
}

TEST_P(BackendConformanceTest, DestroyedEventIsAnError) {
  if (!info().capabilities.streams) GTEST_SKIP() << "no streams";
  const EventHandle event = CreateEventOrFail();
  ASSERT_NE(event, 0u);
  DestroyEventOrFail(event);
  EXPECT_FALSE(backend_->QueryEvent(event).ok());
  EXPECT_FALSE(backend_->RecordEvent(event, Stream()).ok());
  EXPECT_FALSE(backend_->SynchronizeEvent(event).ok());
  EXPECT_FALSE(backend_->DestroyEvent(event).ok());
}

TEST_P(BackendConformanceTest, CaptureCallsNeedTheGraphCaptureCapability) {
  if (info().capabilities.graph_capture) {
    GTEST_SKIP() << "the backend has graph capture";
  }
  EXPECT_TRUE(absl::IsUnimplemented(backend_->IsCapturing(Stream()).status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      backend_->ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
}

TEST_P(BackendConformanceTest,
       FreshStreamIsNotCapturingAndModeExchangeRestores) {
  if (!info().capabilities.graph_capture) GTEST_SKIP() << "no graph capture";
  absl::StatusOr<bool> capturing = backend_->IsCapturing(Stream());
  ASSERT_TRUE(capturing.ok()) << capturing.status();
  EXPECT_FALSE(*capturing);
  absl::StatusOr<CaptureMode> previous =
      backend_->ExchangeCaptureMode(CaptureMode::kRelaxed);
  ASSERT_TRUE(previous.ok()) << previous.status();
  // Put the previous mode back; the exchange answers the one it replaced.
  absl::StatusOr<CaptureMode> relaxed =
      backend_->ExchangeCaptureMode(*previous);
  ASSERT_TRUE(relaxed.ok()) << relaxed.status();
  EXPECT_EQ(*relaxed, CaptureMode::kRelaxed);
}

TEST_P(BackendConformanceTest, PoolCallsNeedTheStreamOrderedPoolsCapability) {
  if (info().capabilities.stream_ordered_pools) {
    GTEST_SKIP() << info().name << " has stream-ordered pools";
  }
  EXPECT_TRUE(absl::IsUnimplemented(backend_->ConfigurePool(PoolOptions{})));
  EXPECT_TRUE(
      absl::IsUnimplemented(backend_->PoolAllocate(kMiB, Stream()).status()));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->PoolTrim(0)));
  EXPECT_TRUE(absl::IsUnimplemented(backend_->GetPoolUsage().status()));
}

TEST_P(BackendConformanceTest, PoolAllocateFreeUsageAndTrim) {
  if (!info().capabilities.stream_ordered_pools) GTEST_SKIP() << "no pools";
  const std::uint64_t size = 4 * kMiB;
  if (!HasRoomFor(4 * size)) GTEST_SKIP() << "device is full";
  ASSERT_TRUE(backend_->ConfigurePool(PoolOptions{}).ok());
  const std::uint64_t free_before = FreeBytes();

  std::vector<DeviceAddress> blocks;
  for (std::uint64_t bytes : {size, std::uint64_t{1}, size / 2 + 1}) {
    absl::StatusOr<DeviceAddress> address =
        backend_->PoolAllocate(bytes, Stream());
    ASSERT_TRUE(address.ok()) << bytes << ": " << address.status();
    ASSERT_NE(*address, 0u);
    EXPECT_EQ(*address % 256, 0u) << bytes;
    pool_live_.push_back(*address);
    blocks.push_back(*address);
  }
  std::vector<DeviceAddress> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());

  absl::StatusOr<PoolUsage> during = backend_->GetPoolUsage();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_GE(during->used, size + 1 + size / 2 + 1);
  EXPECT_GE(during->reserved, during->used);
  EXPECT_GE(during->peak_used, during->used);
  EXPECT_GE(during->peak_reserved, during->reserved);
  EXPECT_LE(FreeBytes() + size, free_before) << "the pool takes device memory";

  for (DeviceAddress address : blocks) {
    const absl::Status freed = backend_->PoolFree(address, Stream());
    EXPECT_TRUE(freed.ok()) << freed;
  }
  pool_live_.clear();
  SynchronizeDefaultStream();
  ASSERT_TRUE(backend_->PoolTrim(0).ok());
  absl::StatusOr<PoolUsage> after = backend_->GetPoolUsage();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->used, 0u);
  EXPECT_EQ(after->reserved, 0u);
  EXPECT_GE(after->peak_used, during->used);
  EXPECT_GE(after->peak_reserved, during->reserved);
}

TEST_P(BackendConformanceTest, PoolAllocateBeyondTheDeviceIsResourceExhausted) {
  if (!info().capabilities.stream_ordered_pools) GTEST_SKIP() << "no pools";
  ASSERT_TRUE(backend_->ConfigurePool(PoolOptions{}).ok());
  for (std::uint64_t bytes : {info().total_bytes + 1, info().total_bytes * 2,
                              std::numeric_limits<std::uint64_t>::max()}) {
    const absl::StatusOr<DeviceAddress> result =
        backend_->PoolAllocate(bytes, Stream());
    EXPECT_TRUE(absl::IsResourceExhausted(result.status()))
        << bytes << ": " << result.status();
    if (result.ok()) pool_live_.push_back(*result);
  }
  // The pool still works.
  absl::StatusOr<DeviceAddress> small = backend_->PoolAllocate(256, Stream());
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(backend_->PoolFree(*small, Stream()).ok());
}

// --- Virtual memory ----------------------------------------------------------

TEST_P(BackendConformanceTest, VirtualMemoryCallsNeedTheCapability) {
  if (info().capabilities.virtual_memory) {
    GTEST_SKIP() << info().name << " has virtual memory";
  }
  const std::uint64_t g = Granule();
  const std::vector<absl::Status> statuses = {
      backend_->ReserveAddress(g, 0).status(),
      backend_->FreeAddress(g, g),
      backend_->CreatePhysical(g).status(),
      backend_->ReleasePhysical(1),
      backend_->Map(g, g, 1),
      backend_->Unmap(g, g),
      backend_->SetAccess(g, g)};
  for (const absl::Status& status : statuses) {
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
    EXPECT_NE(status.message().find(info().backend), std::string::npos)
        << "names the backend: " << status;
    EXPECT_NE(status.message().find("virtual_memory"), std::string::npos)
        << status;
  }
}

TEST_P(BackendConformanceTest, VirtualMemoryRoundTrip) {
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  const std::uint64_t g = Granule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";
  const std::uint64_t free_before = FreeBytes();

  const DeviceAddress any = ReserveOrFail(4 * g, 0);
  ASSERT_NE(any, 0u);
  EXPECT_EQ(any % MinGranule(), 0u);
  const DeviceAddress aligned = ReserveOrFail(2 * g, 4 * g);
  ASSERT_NE(aligned, 0u);
  EXPECT_EQ(aligned % (4 * g), 0u);
  EXPECT_TRUE(aligned + 2 * g <= any || any + 4 * g <= aligned)
      << "reservations overlap";

  const PhysicalHandle a = CreatePhysicalOrFail(g);
  const PhysicalHandle b = CreatePhysicalOrFail(2 * g);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  EXPECT_NE(a, b);
  MapOrFail(any, g, a);
  MapOrFail(any + g, 2 * g, b);
  // Access again over both mappings at once.
  const absl::Status access = backend_->SetAccess(any, 3 * g);
  EXPECT_TRUE(access.ok()) << access;
  UnmapOrFail(any, 3 * g);  // two whole mappings in one call
  // A handle maps again after its mapping went, elsewhere.
  MapOrFail(aligned, g, a);
  UnmapOrFail(aligned, g);
  ReleasePhysicalOrFail(a);
  ReleasePhysicalOrFail(b);
  FreeAddressOrFail(aligned, 2 * g);
  FreeAddressOrFail(any, 4 * g);
  EXPECT_EQ(FreeBytes(), free_before);
}

TEST_P(BackendConformanceTest, VirtualMemoryRuleViolationsChangeNothing) {
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  const std::uint64_t g = Granule();
  const std::uint64_t m = MinGranule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";

  const DeviceAddress r = ReserveOrFail(4 * g, 0);
  const PhysicalHandle one = CreatePhysicalOrFail(g);
  const PhysicalHandle two = CreatePhysicalOrFail(2 * g);
  ASSERT_NE(r, 0u);
  ASSERT_NE(one, 0u);
  ASSERT_NE(two, 0u);
  // A reservation given back: nothing may be mapped there any more.
  const DeviceAddress gone = ReserveOrFail(g, 0);
  ASSERT_NE(gone, 0u);
  FreeAddressOrFail(gone, g);
  const std::uint64_t free = FreeBytes();

  auto expect_invalid = [&](const std::string& what, absl::Status status) {
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << what << ": " << status;
    EXPECT_EQ(FreeBytes(), free) << what;
  };
  // Before anything is mapped.
  expect_invalid("reserve 0 bytes", backend_->ReserveAddress(0, 0).status());
  expect_invalid("reserve alignment not a power of two",
                 backend_->ReserveAddress(g, 3 * m).status());
  expect_invalid("create 0 bytes", backend_->CreatePhysical(0).status());
  expect_invalid("release handle 0", backend_->ReleasePhysical(0));
  expect_invalid("map handle 0", backend_->Map(r, g, 0));
  expect_invalid("map a part of a handle", backend_->Map(r, g, two));
  expect_invalid("map more than a handle", backend_->Map(r, 2 * g, one));
  expect_invalid("map past the reservation",
                 backend_->Map(r + 3 * g, 2 * g, two));
  expect_invalid("map into a freed reservation", backend_->Map(gone, g, one));
  expect_invalid("unmap what is not mapped", backend_->Unmap(r, g));
  expect_invalid("set access on what is not mapped", backend_->SetAccess(r, g));
  if (m > 1) {
    expect_invalid("reserve a size off the granularity",
                   backend_->ReserveAddress(g + m / 2, 0).status());
    expect_invalid("reserve alignment below the granularity",
                   backend_->ReserveAddress(g, m / 2).status());
    expect_invalid("create a size off the granularity",
                   backend_->CreatePhysical(g + m / 2).status());
    expect_invalid("map at an address off the granularity",
                   backend_->Map(r + m / 2, g, one));
  }

  // [r, r + g) holds `one`, [r + g, r + 3g) holds `two`, [r + 3g, r + 4g)
  // nothing.
  MapOrFail(r, g, one);
  MapOrFail(r + g, 2 * g, two);
  const std::uint64_t mapped_free = FreeBytes();
  EXPECT_EQ(mapped_free, free);
  expect_invalid("map over a mapping", backend_->Map(r, g, one));
  expect_invalid("map overlapping a mapping's end",
                 backend_->Map(r + 2 * g, g, one));
  expect_invalid("unmap part of a mapping", backend_->Unmap(r, 2 * g));
  expect_invalid("unmap from inside a mapping", backend_->Unmap(r + 2 * g, g));
  expect_invalid("unmap with a hole", backend_->Unmap(r, 4 * g));
  expect_invalid("unmap an unmapped tail", backend_->Unmap(r + 3 * g, g));
  expect_invalid("set access with a hole", backend_->SetAccess(r, 4 * g));
  expect_invalid("free a reservation with mappings",
                 backend_->FreeAddress(r, 4 * g));
  expect_invalid("free part of a reservation", backend_->FreeAddress(r, 2 * g));
  expect_invalid("free from inside a reservation",
                 backend_->FreeAddress(r + g, 3 * g));
  expect_invalid("free a freed reservation", backend_->FreeAddress(gone, g));

  // Everything still works.
  const absl::Status access = backend_->SetAccess(r + g, 2 * g);
  EXPECT_TRUE(access.ok()) << access;
  UnmapOrFail(r, 3 * g);
  ReleasePhysicalOrFail(one);
  ReleasePhysicalOrFail(two);
  const std::uint64_t released_free = FreeBytes();
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->ReleasePhysical(one)))
      << "double release";
  EXPECT_EQ(FreeBytes(), released_free);
  FreeAddressOrFail(r, 4 * g);
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->FreeAddress(r, 4 * g)))
      << "double free of a reservation";
}

TEST_P(BackendConformanceTest, PhysicalMemoryCountsAgainstFreeBytes) {
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  const std::uint64_t g = Granule();
  if (!HasRoomFor(8 * g)) GTEST_SKIP() << "device is full";
  const std::uint64_t before = FreeBytes();

  const PhysicalHandle handle = CreatePhysicalOrFail(4 * g);
  ASSERT_NE(handle, 0u);
  EXPECT_LE(FreeBytes() + 4 * g, before);
  const DeviceAddress r = ReserveOrFail(4 * g, 0);
  ASSERT_NE(r, 0u);
  MapOrFail(r, 4 * g, handle);
  EXPECT_LE(FreeBytes() + 4 * g, before) << "mapping takes nothing more";
  UnmapOrFail(r, 4 * g);
  EXPECT_LE(FreeBytes() + 4 * g, before) << "the handle still holds it";
  ReleasePhysicalOrFail(handle);
  EXPECT_EQ(FreeBytes(), before);
  FreeAddressOrFail(r, 4 * g);

  // More than the device has: ResourceExhausted, and nothing changes.
  const std::uint64_t m = MinGranule();
  const std::uint64_t too_big = (info().total_bytes / m + 1) * m;
  const absl::StatusOr<PhysicalHandle> huge = backend_->CreatePhysical(too_big);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  if (huge.ok()) handles_.push_back(*huge);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_P(BackendConformanceTest, ReleaseWhileMappedKeepsMemoryUntilUnmap) {
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  const std::uint64_t g = Granule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";
  const std::uint64_t before = FreeBytes();
  const PhysicalHandle handle = CreatePhysicalOrFail(2 * g);
  const DeviceAddress r = ReserveOrFail(4 * g, 0);
  ASSERT_NE(handle, 0u);
  ASSERT_NE(r, 0u);
  MapOrFail(r, 2 * g, handle);
  ReleasePhysicalOrFail(handle);
  EXPECT_LE(FreeBytes() + 2 * g, before) << "still mapped, still in use";
  const std::uint64_t held = FreeBytes();
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->ReleasePhysical(handle)))
      << "released twice";
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->Map(r + 2 * g, 2 * g, handle)))
      << "a released handle maps no more";
  EXPECT_EQ(FreeBytes(), held);
  if (info().capabilities.host_accessible) {
    auto* bytes = reinterpret_cast<unsigned char*>(r);
    for (std::uint64_t off = 0; off < 2 * g; off += 4096) {
      bytes[off] = static_cast<unsigned char>(off / 4096 * 7 + 1);
    }
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < 2 * g; off += 4096) {
      wrong += bytes[off] != static_cast<unsigned char>(off / 4096 * 7 + 1);
    }
    EXPECT_EQ(wrong, 0u) << "memory of a released handle stays usable";
  }
  UnmapOrFail(r, 2 * g);
  EXPECT_EQ(FreeBytes(), before) << "the last mapping gave it back";
  FreeAddressOrFail(r, 4 * g);
}

TEST_P(BackendConformanceTest, HostAccessiblePatternThroughAdjacentMappings) {
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  if (!info().capabilities.host_accessible) {
    GTEST_SKIP() << info().name << " is not host accessible";
  }
  const std::uint64_t g = Granule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";
  PhysicalHandle first = 0, second = 0;
  const DeviceAddress r = MapAdjacentHandles(&first, &second);
  ASSERT_NE(r, 0u);

  auto pattern = [](std::uint64_t offset) {
    return static_cast<unsigned char>((offset * 131 + offset / 4099 + 7) &
                                      0xff);
  };
  // One pass of writes across the boundary between the two mappings.
  auto* bytes = reinterpret_cast<unsigned char*>(r);
  for (std::uint64_t off = 0; off < 3 * g; ++off) bytes[off] = pattern(off);
  // The first handle released while mapped: its data stays.
  ReleasePhysicalOrFail(first);
  std::uint64_t wrong = 0;
  for (std::uint64_t off = 0; off < 3 * g; ++off) {
    wrong += bytes[off] != pattern(off);
  }
  EXPECT_EQ(wrong, 0u);

  // The second handle keeps its contents when mapped again elsewhere.
  UnmapOrFail(r, 3 * g);
  MapOrFail(r + 2 * g, 2 * g, second);
  const auto* again = reinterpret_cast<const unsigned char*>(r + 2 * g);
  wrong = 0;
  for (std::uint64_t off = 0; off < 2 * g; ++off) {
    wrong += again[off] != pattern(g + off);
  }
  EXPECT_EQ(wrong, 0u) << "physical memory survives unmap and map";
  UnmapOrFail(r + 2 * g, 2 * g);
  ReleasePhysicalOrFail(second);
  FreeAddressOrFail(r, 4 * g);
}

// --- Copies between device and host memory (capabilities.host_copy) -------

// A byte of the pattern the copy tests write: `seed` tells blocks apart.
inline unsigned char CopyPattern(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<unsigned char>(
      (offset * 131 + offset / 4099 + seed * 29 + 7) & 0xff);
}

TEST_P(BackendConformanceTest, HostCopyCallsNeedTheCapability) {
  if (info().capabilities.host_copy) {
    GTEST_SKIP() << info().name << " copies to and from host memory";
  }
  unsigned char host[16] = {};
  EXPECT_TRUE(
      absl::IsUnimplemented(backend_->CopyToHost(host, kMiB, sizeof(host))));
  EXPECT_TRUE(
      absl::IsUnimplemented(backend_->CopyFromHost(kMiB, host, sizeof(host))));
}

TEST_P(BackendConformanceTest, HostCopyRoundTripsAPattern) {
  if (!info().capabilities.host_copy) GTEST_SKIP() << "no host copy";
  const std::vector<std::uint64_t> sizes = {1, 256, 4096 + 3, kMiB + 5};
  if (!HasRoomForBlocks(sizes, 2 * kMiB)) GTEST_SKIP() << "device is full";
  std::vector<DeviceAddress> addresses = AllocateEachOrFail(sizes);
  ASSERT_EQ(std::count(addresses.begin(), addresses.end(), 0u), 0);
  if (info().capabilities.stream_ordered_pools) {
    const absl::Status configured = backend_->ConfigurePool(PoolOptions{});
    ASSERT_TRUE(configured.ok()) << configured;
    absl::StatusOr<DeviceAddress> block =
        backend_->PoolAllocate(kMiB, Stream());
    ASSERT_TRUE(block.ok()) << block.status();
    pool_live_.push_back(*block);
    addresses.push_back(*block);
  }
  const auto size_of = [&](std::size_t i) {
    return i < sizes.size() ? sizes[i] : kMiB;
  };
  // Write every block first, then read every block back: an overlap shows
  // up as a block overwritten by a later one.
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    std::vector<unsigned char> out(size_of(i));
    for (std::uint64_t off = 0; off < out.size(); ++off) {
      out[off] = CopyPattern(i, off);
    }
    const absl::Status s =
        backend_->CopyFromHost(addresses[i], out.data(), out.size());
    ASSERT_TRUE(s.ok()) << "block " << i << ": " << s;
  }
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    std::vector<unsigned char> in(size_of(i), 0);
    const absl::Status s =
        backend_->CopyToHost(in.data(), addresses[i], in.size());
    ASSERT_TRUE(s.ok()) << "block " << i << ": " << s;
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < in.size(); ++off) {
      wrong += in[off] != CopyPattern(i, off);
    }
    EXPECT_EQ(wrong, 0u) << "block " << i << " of " << in.size() << " bytes";
  }
  // Part of a block, from inside it.
  const DeviceAddress last = addresses[sizes.size() - 1];
  std::vector<unsigned char> part(1000, 0);
  ASSERT_TRUE(backend_->CopyToHost(part.data(), last + 4097, part.size()).ok());
  for (std::uint64_t off = 0; off < part.size(); ++off) {
    ASSERT_EQ(part[off], CopyPattern(sizes.size() - 1, 4097 + off)) << off;
  }
  if (info().capabilities.stream_ordered_pools) {
    ASSERT_TRUE(backend_->PoolFree(addresses.back(), Stream()).ok());
    pool_live_.clear();
  }
}

TEST_P(BackendConformanceTest, HostCopyThroughAdjacentMappings) {
  if (!info().capabilities.host_copy) GTEST_SKIP() << "no host copy";
  if (!info().capabilities.virtual_memory) GTEST_SKIP() << "no VMM";
  const std::uint64_t g = Granule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";
  PhysicalHandle first = 0, second = 0;
  const DeviceAddress r = MapAdjacentHandles(&first, &second);
  ASSERT_NE(r, 0u);

  // One copy each way across the boundary between the two mappings.
  std::vector<unsigned char> out(3 * g);
  for (std::uint64_t off = 0; off < out.size(); ++off) {
    out[off] = CopyPattern(1, off);
  }
  const absl::Status written = backend_->CopyFromHost(r, out.data(), 3 * g);
  ASSERT_TRUE(written.ok()) << written;
  std::vector<unsigned char> in(3 * g, 0);
  const absl::Status read = backend_->CopyToHost(in.data(), r, 3 * g);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(in == out) << "the pattern did not come back";

  UnmapOrFail(r, 3 * g);
  ReleasePhysicalOrFail(first);
  ReleasePhysicalOrFail(second);
  FreeAddressOrFail(r, 4 * g);
}

TEST_P(BackendConformanceTest, HostCopyEdgeCases) {
  if (!info().capabilities.host_copy) GTEST_SKIP() << "no host copy";
  if (!HasRoomFor(2 * kMiB)) GTEST_SKIP() << "device is full";
  const DeviceAddress a = AllocateOrFail(4096);
  ASSERT_NE(a, 0u);
  unsigned char host[64] = {};
  // 0 bytes does nothing, whatever the host pointer.
  EXPECT_TRUE(backend_->CopyToHost(host, a, 0).ok());
  EXPECT_TRUE(backend_->CopyFromHost(a, host, 0).ok());
  EXPECT_TRUE(backend_->CopyToHost(nullptr, a, 0).ok());
  EXPECT_TRUE(backend_->CopyFromHost(a, nullptr, 0).ok());
  // A null host pointer with bytes to copy.
  const absl::Status to_null = backend_->CopyToHost(nullptr, a, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(to_null)) << to_null;
  const absl::Status from_null = backend_->CopyFromHost(a, nullptr, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(from_null)) << from_null;
  // An address outside any allocation (the first pages are never device
  // memory).
  const DeviceAddress nowhere = 4096;
  EXPECT_FALSE(backend_->CopyToHost(host, nowhere, sizeof(host)).ok());
  EXPECT_FALSE(backend_->CopyFromHost(nowhere, host, sizeof(host)).ok());
  FreeOrFail(a);
}

}  // namespace gpualloc::testing

// Sharing memory with other processes, and completion counters: the cases
// of their own files.
#include "tests/backends/backend_conformance_counters.h"
#include "tests/backends/backend_conformance_sharing.h"

#endif  // GPUALLOC_TESTS_BACKEND_CONFORMANCE_H_
