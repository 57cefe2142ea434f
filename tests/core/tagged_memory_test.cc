// SPDX-License-Identifier: Apache-2.0
// The tags' memory as a component (core/bfc/tagged_memory.h): the checks, Sleep
// and Wake over a stand-in RegionSource, turning back on a device error, the
// free blocks' return, and invariant S1. sleep_wake_test.cc tests Sleep and
// Wake through the facade on the simulator.
#include "core/bfc/tagged_memory.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/bfc/private_pools.h"
#include "core/regions/region_source.h"
#include "core/streams/oracle.h"
#include "gmock/gmock.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using ::testing::HasSubstr;
using testing::kMiB;

constexpr std::uint64_t kSlab = 2 * kMiB;
constexpr std::uintptr_t kStream = 0x100;

// Mappings that sleep and wake in a map; the Sleep or Wake calls numbered
// (from 1) in `fail` fail.
class StandInSource final : public RegionSource {
 public:
  explicit StandInSource(bool can_sleep = true) : can_sleep_(can_sleep) {}
  absl::Status Preallocate() override { return absl::OkStatus(); }
  bool GrowsAfterPreallocation() const override { return true; }
  absl::Status Grow(std::uint64_t, Stream) override { return absl::OkStatus(); }
  absl::Status ReleaseFree() override { return absl::OkStatus(); }
  bool HasFreeToRelease() const override { return false; }
  absl::Status Validate(bool) const override { return absl::OkStatus(); }
  std::vector<std::pair<DeviceAddress, std::uint64_t>> Holders(
      DeviceAddress, std::uint64_t) const override {
    return {};
  }
  bool CanSleep() const override { return can_sleep_; }
  absl::Status Sleep(DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t* done) override {
    return Change(address, bytes, /*sleep=*/true, done);
  }
  absl::Status Wake(DeviceAddress address, std::uint64_t bytes,
                    std::uint64_t* done) override {
    return Change(address, bytes, /*sleep=*/false, done);
  }
  std::uint64_t sleeping_bytes() const override {
    std::uint64_t n = 0;
    for (const auto& [base, bytes] : asleep_) n += bytes;
    return n;
  }
  std::uint64_t SleepingWithin(DeviceAddress address,
                               std::uint64_t bytes) const override {
    std::uint64_t n = 0;
    for (const auto& [base, size] : asleep_) {
      if (base >= address && base + size <= address + bytes) n += size;
    }
    return n;
  }
  std::uint64_t backend_allocs() const override { return 0; }
  std::uint64_t backend_frees() const override { return 0; }

  int calls = 0;
  std::set<int> fail;

 private:
  absl::Status Change(DeviceAddress address, std::uint64_t bytes, bool sleep,
                      std::uint64_t* done) {
    *done = 0;
    if (fail.contains(++calls))
      return absl::InternalError("the device said no");
    if (sleep) {
      asleep_[address] = bytes;
    } else {
      asleep_.erase(address);
    }
    *done = bytes;
    return absl::OkStatus();
  }

  const bool can_sleep_;
  std::map<DeviceAddress, std::uint64_t> asleep_;
};

// Slabs at fresh addresses, never contiguous; returned ones are recorded.
class StandInSlabs final : public SlabSource {
 public:
  absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                         std::uintptr_t) override {
    const DeviceAddress base = next_;
    next_ += *bytes + kSlab;  // a gap: no two slabs touch
    return base;
  }
  bool Contiguous(DeviceAddress, DeviceAddress) const override { return false; }
  void ReturnSlab(DeviceAddress base,
                  absl::Span<const std::uintptr_t>) override {
    returned.push_back(base);
  }
  std::vector<DeviceAddress> returned;

 private:
  DeviceAddress next_ = 0x10000000;
};

class TaggedMemoryTest : public ::testing::Test {
 protected:
  void TearDown() override { GPUALLOC_EXPECT_OK(tags_.Validate(source_)); }

  // A block of `bytes` with `tag` (its pool made on first use).
  DeviceAddress Alloc(Tag tag, std::uint64_t bytes) {
    if (!tags_.pools().Has(tag)) tags_.pools().Create(0x8000 + tag, tag);
    absl::StatusOr<DeviceAddress> a = tags_.pools().Allocate(
        tag, bytes, bytes, 256, kStream, &oracle_, slabs_);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.value_or(0);
  }

  std::shared_ptr<SimBackend> sim_ = testing::MakeSim(64 * kMiB);
  StandInSource source_;
  StandInSlabs slabs_;
  AllComplete oracle_;
  TaggedMemory tags_{BfcConfig{256, 0}, kSlab, *sim_, /*history=*/nullptr};
};

TEST_F(TaggedMemoryTest, SleepableOnlyWithATagAndSleepingMemory) {
  EXPECT_EQ(tags_.CheckSleepable("Sleep", 0, false, source_).code(),
            absl::StatusCode::kInvalidArgument);
  StandInSource cannot(/*can_sleep=*/false);
  EXPECT_THAT(tags_.CheckSleepable("Sleep", 7, false, cannot).message(),
              HasSubstr("expandable regions"));
  // The fake simulator has no bytes behind its addresses: no backups.
  EXPECT_THAT(tags_.CheckSleepable("Sleep", 7, true, source_).message(),
              HasSubstr("host_copy"));
  GPUALLOC_EXPECT_OK(tags_.CheckSleepable("Wake", 7, false, source_));
}

TEST_F(TaggedMemoryTest, SleepGivesTheTagsSlabsBackAndWakeMapsThem) {
  const DeviceAddress a = Alloc(7, 4096);
  Alloc(8, 4096);  // another tag stays awake
  absl::StatusOr<SleepReport> report =
      tags_.Sleep(7, /*backup=*/false, /*order=*/nullptr, source_);
  GPUALLOC_ASSERT_OK(report.status());
  EXPECT_EQ(report->allocations, 1u);
  EXPECT_EQ(report->bytes_in_use, 4096u);
  EXPECT_EQ(report->bytes_released, kSlab);
  EXPECT_TRUE(tags_.asleep(7));
  EXPECT_FALSE(tags_.asleep(8));
  EXPECT_TRUE(tags_.any_asleep());
  EXPECT_EQ(tags_.SleepingBytesOf(7, source_), kSlab);
  EXPECT_EQ(tags_.SleepingBytesOf(8, source_), 0u);
  GPUALLOC_EXPECT_OK(tags_.Validate(source_));

  // Asleep: no allocation, free or record with the tag, no second Sleep.
  EXPECT_THAT(tags_.CheckAllocate(7, 100).message(), HasSubstr("asleep"));
  GPUALLOC_EXPECT_OK(tags_.CheckAllocate(8, 100));
  EXPECT_THAT(tags_.CheckAwake(a, "Deallocate").message(),
              HasSubstr("Deallocate"));
  EXPECT_THAT(tags_.Sleep(7, false, nullptr, source_).status().message(),
              HasSubstr("asleep already"));

  GPUALLOC_ASSERT_OK(tags_.Wake(7, source_));
  EXPECT_FALSE(tags_.asleep(7));
  EXPECT_EQ(source_.sleeping_bytes(), 0u);
  GPUALLOC_EXPECT_OK(tags_.CheckAwake(a, "Deallocate"));
}

TEST_F(TaggedMemoryTest, ATagWithNoMemoryOnlyTurnsAsleep) {
  absl::StatusOr<SleepReport> report = tags_.Sleep(9, false, nullptr, source_);
  GPUALLOC_ASSERT_OK(report.status());
  EXPECT_EQ(report->allocations, 0u);
  EXPECT_TRUE(tags_.asleep(9));
  GPUALLOC_ASSERT_OK(tags_.Wake(9, source_));
  EXPECT_EQ(source_.calls, 0);
}

TEST_F(TaggedMemoryTest, ASleepThatFailsHalfWayIsTurnedBack) {
  Alloc(7, kSlab);
  Alloc(7, kSlab);  // a second slab
  ASSERT_EQ(tags_.pools().Slabs(7).size(), 2u);
  source_.fail = {2};  // the second slab's Sleep
  absl::StatusOr<SleepReport> report = tags_.Sleep(7, false, nullptr, source_);
  EXPECT_THAT(report.status().message(), HasSubstr("the device said no"));
  EXPECT_THAT(report.status().message(), HasSubstr("mapped again"));
  EXPECT_FALSE(tags_.asleep(7));
  EXPECT_EQ(source_.sleeping_bytes(), 0u);
}

TEST_F(TaggedMemoryTest, ATagLeftHalfAsleepStaysAsleepUntilWake) {
  Alloc(7, kSlab);
  Alloc(7, kSlab);
  // The second slab's Sleep fails, and so does waking the first again.
  source_.fail = {2, 3};
  absl::StatusOr<SleepReport> report = tags_.Sleep(7, false, nullptr, source_);
  EXPECT_THAT(report.status().message(), HasSubstr("left asleep"));
  EXPECT_TRUE(tags_.asleep(7));
  EXPECT_EQ(source_.sleeping_bytes(), kSlab);
  GPUALLOC_EXPECT_OK(tags_.Validate(source_));  // S1 holds: the tag is asleep
  source_.fail.clear();
  GPUALLOC_ASSERT_OK(tags_.Wake(7, source_));
  EXPECT_FALSE(tags_.asleep(7));
  EXPECT_EQ(source_.sleeping_bytes(), 0u);
}

TEST_F(TaggedMemoryTest, ValidateNamesS1ForMemoryAsleepOfATagAwake) {
  Alloc(7, 4096);
  const auto [base, bytes] = tags_.pools().Slabs(7).front();
  std::uint64_t done = 0;
  GPUALLOC_ASSERT_OK(source_.Sleep(base, bytes, &done));
  EXPECT_THAT(tags_.Validate(source_).message(), HasSubstr("invariant S1"));
  GPUALLOC_ASSERT_OK(source_.Wake(base, bytes, &done));
}

TEST_F(TaggedMemoryTest, FreeSlabsGoBackUnlessTheTagSleeps) {
  const DeviceAddress a = Alloc(7, 4096);
  const DeviceAddress b = Alloc(8, 4096);
  GPUALLOC_ASSERT_OK(tags_.pools().Deallocate(a, kStream, 0, &oracle_, slabs_));
  GPUALLOC_ASSERT_OK(tags_.pools().Deallocate(b, kStream, 0, &oracle_, slabs_));
  GPUALLOC_ASSERT_OK(tags_.Sleep(8, false, nullptr, source_).status());
  tags_.ReturnFree(/*order=*/nullptr, oracle_, slabs_);
  ASSERT_EQ(slabs_.returned.size(), 1u);  // tag 7's; tag 8 keeps its memory
  EXPECT_TRUE(tags_.pools().Slabs(7).empty());
  EXPECT_EQ(tags_.pools().Slabs(8).size(), 1u);
  GPUALLOC_ASSERT_OK(tags_.Wake(8, source_));
}

}  // namespace
}  // namespace gpualloc::core
