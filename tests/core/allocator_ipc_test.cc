// SPDX-License-Identifier: Apache-2.0
// Allocator::Export / Import / CloseImport on the simulator: two SimBackend
// instances stand for two processes (and fork() makes a real second one).
// Round trips in every region kind with the content checked in host-backed
// memory, the lifetime rule (a freed exported block is held until every
// importer closed it or exited), and the errors.
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

// The bfc mode's region kinds, and the platform mode (each allocation a
// backend allocation of its own).
enum class Kind { kSeparate, kExpandable, kPreallocated, kPlatform };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kSeparate:
      return "separate";
    case Kind::kExpandable:
      return "expandable";
    case Kind::kPreallocated:
      return "preallocated";
    case Kind::kPlatform:
      return "platform";
  }
  return "unknown";
}

// One simulated process: its device and its allocator.
struct Process {
  std::shared_ptr<SimBackend> sim;
  std::unique_ptr<Allocator> a;
};

Process MakeProcess(Kind kind, SimMemory memory = SimMemory::kHostBacked,
                    SimOptions so = {}) {
  so.profile = "h100";
  so.total_bytes = 256 * kMiB;
  so.memory = memory;
  Options o;
  if (kind == Kind::kPlatform) o.mode = AllocatorMode::kPlatform;
  o.memory_limit = 64 * kMiB;
  o.preallocate = kind == Kind::kPreallocated;
  o.expandable = kind == Kind::kExpandable ? Tristate::kOn : Tristate::kOff;
  Process p;
  p.sim = MakeSim(so);
  p.a = MakeAllocator(o, p.sim);
  return p;
}

unsigned char Pattern(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<unsigned char>((offset * 131 + seed * 29 + 7) & 0xff);
}

void Fill(void* p, std::uint64_t bytes, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::uint64_t off = 0; off < bytes; ++off) b[off] = Pattern(seed, off);
}

std::uint64_t Wrong(const void* p, std::uint64_t bytes, std::uint64_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t wrong = 0;
  for (std::uint64_t off = 0; off < bytes; ++off) {
    wrong += b[off] != Pattern(seed, off);
  }
  return wrong;
}

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

class AllocatorIpcTest : public ::testing::TestWithParam<Kind> {};

TEST_P(AllocatorIpcTest, RoundTripSharesTheContent) {
  Process exporter = MakeProcess(GetParam());
  Process importer = MakeProcess(GetParam());
  // A small block first, so that the shared one is not at offset 0.
  auto small = exporter.a->Allocate(1000);
  ASSERT_TRUE(small.ok()) << small.status();
  const std::uint64_t bytes = 3 * kMiB + 512;
  auto block = exporter.a->Allocate(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  Fill(*block, bytes, 1);

  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto again = exporter.a->Export(*block);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *description) << "the same block, the same description";
  EXPECT_GE(exporter.a->GetStats().bytes_exported, bytes);

  auto imported = importer.a->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_GE(imported->bytes, bytes);
  EXPECT_EQ(Wrong(imported->ptr, bytes, 1), 0u);
  Fill(imported->ptr, bytes, 2);
  EXPECT_EQ(Wrong(*block, bytes, 2), 0u) << "the exporter sees the writes";
  EXPECT_EQ(importer.a->GetStats().bytes_imported, imported->bytes);
  GPUALLOC_EXPECT_OK(importer.a->Validate());
  GPUALLOC_EXPECT_OK(exporter.a->Validate());

  GPUALLOC_ASSERT_OK(importer.a->CloseImport(imported->ptr));
  EXPECT_EQ(importer.a->GetStats().bytes_imported, 0u);
  const absl::Status twice = importer.a->CloseImport(imported->ptr);
  EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
  // Nobody has it open: freed at once.
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  const Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_exported, 0u);
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*small));
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

TEST_P(AllocatorIpcTest, FreedBlockIsHeldUntilEveryImporterCloses) {
  Process exporter = MakeProcess(GetParam());
  Process first = MakeProcess(GetParam());
  Process second = MakeProcess(GetParam());
  const std::uint64_t bytes = 2 * kMiB;
  auto block = exporter.a->Allocate(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto one = first.a->Import(*description);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = second.a->Import(*description);
  ASSERT_TRUE(two.ok()) << two.status();

  const std::uint64_t in_use = exporter.a->GetStats().bytes_in_use;
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, bytes);
  EXPECT_EQ(s.bytes_exported, 0u);
  EXPECT_EQ(s.bytes_in_use, in_use) << "held memory stays in use";
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
  // Freed twice is still an error.
  EXPECT_TRUE(absl::IsInvalidArgument(exporter.a->Deallocate(*block)));
  // Not reusable: the same request gets other memory.
  auto other = exporter.a->Allocate(bytes);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*other, *block);
  // Still shared.
  Fill(one->ptr, 4096, 5);
  EXPECT_EQ(Wrong(two->ptr, 4096, 5), 0u);

  GPUALLOC_ASSERT_OK(first.a->CloseImport(one->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Trim());
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, bytes)
      << "one importer still has it";
  GPUALLOC_ASSERT_OK(second.a->CloseImport(two->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Trim());
  s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, in_use - bytes + bytes) << "only `other` is left";
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*other));
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

TEST_P(AllocatorIpcTest, HeldBlockGoesBackAtTheNextDeallocate) {
  Process exporter = MakeProcess(GetParam());
  Process importer = MakeProcess(GetParam());
  auto block = exporter.a->Allocate(kMiB);
  auto spare = exporter.a->Allocate(4096);
  ASSERT_TRUE(block.ok() && spare.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto imported = importer.a->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  GPUALLOC_ASSERT_OK(importer.a->CloseImport(imported->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*spare));
  const Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
}

// The importer runs in a forked child: a real second process, which takes
// the exporter's descriptors with pidfd_getfd. It checks the content, writes
// its own, and closes the import unless `crash`; its exit status says what
// it found (0: all good).
int RunChild(Kind kind, const std::string& description, std::uint64_t bytes,
             bool crash) {
  Process importer = MakeProcess(kind);
  auto imported = importer.a->Import(description);
  if (!imported.ok()) {
    std::fprintf(stderr, "child: %s\n", imported.status().ToString().c_str());
    return 2;
  }
  if (Wrong(imported->ptr, bytes, 7) != 0) return 3;
  Fill(imported->ptr, bytes, 8);
  if (crash) _exit(0);  // with the import open, no destructor run
  if (!importer.a->CloseImport(imported->ptr).ok()) return 4;
  return 0;
}

void ShareWithChild(Kind kind, bool crash) {
  Process exporter = MakeProcess(kind);
  const std::uint64_t bytes = kMiB + 4096;
  auto pad = exporter.a->Allocate(8192);
  auto block = exporter.a->Allocate(bytes);
  ASSERT_TRUE(pad.ok() && block.ok());
  Fill(*block, bytes, 7);
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunChild(kind, *description, bytes, crash));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's check failed";
  EXPECT_EQ(Wrong(*block, bytes, 8), 0u) << "the child's writes are here";
  // Closed, or the importer no longer exists: freed at once either way.
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, 0u);
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*pad));
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

TEST_P(AllocatorIpcTest, ForkedImporterReadsAndWrites) {
  ShareWithChild(GetParam(), /*crash=*/false);
}

TEST_P(AllocatorIpcTest, CrashedImporterHoldsNothingBack) {
  ShareWithChild(GetParam(), /*crash=*/true);
}

TEST_P(AllocatorIpcTest, DestroyedWithExportsAndImportsOpenLeaksNothing) {
  const int before = OpenDescriptors();
  {
    Process exporter = MakeProcess(GetParam());
    Process importer = MakeProcess(GetParam());
    auto block = exporter.a->Allocate(2 * kMiB);
    ASSERT_TRUE(block.ok());
    auto description = exporter.a->Export(*block);
    ASSERT_TRUE(description.ok()) << description.status();
    auto imported = importer.a->Import(*description);
    ASSERT_TRUE(imported.ok()) << imported.status();
    GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));  // held
    importer.a.reset();                                  // closes its import
    EXPECT_EQ(importer.sim->reserved_address_bytes(), 0u);
    exporter.a.reset();
    EXPECT_EQ(exporter.sim->bytes_held(), 0u);
  }
  EXPECT_EQ(OpenDescriptors(), before);
}

TEST_P(AllocatorIpcTest, FakeMemorySharesBetweenInstancesOfOneProcess) {
  Process exporter = MakeProcess(GetParam(), SimMemory::kFake);
  Process importer = MakeProcess(GetParam(), SimMemory::kFake);
  auto block = exporter.a->Allocate(kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto imported = importer.a->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->bytes, exporter.a->GetStats().bytes_exported);
  GPUALLOC_EXPECT_OK(importer.a->CloseImport(imported->ptr));
  GPUALLOC_EXPECT_OK(exporter.a->Deallocate(*block));
}

TEST_P(AllocatorIpcTest, GarbledDescriptionsAreRefused) {
  Process exporter = MakeProcess(GetParam());
  Process importer = MakeProcess(GetParam());
  auto block = exporter.a->Allocate(kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  const auto refused = [&](const std::string& d, absl::string_view why) {
    auto r = importer.a->Import(d);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_NE(r.status().message().find(why), absl::string_view::npos)
        << r.status();
  };
  refused("", "shorter than any description");
  refused(description->substr(0, description->size() - 1), "bytes");
  refused(*description + "x", "bytes");
  std::string magic = *description;
  magic[0] = 'G';
  refused(magic, "does not start with");
  std::string version = *description;
  version[8] = 9;
  refused(version, "version 9");
  std::string garbled = *description;
  garbled[40] ^= 0x10;
  refused(garbled, "checksum");
  // Its own description is no import.
  auto own = exporter.a->Import(*description);
  EXPECT_TRUE(absl::IsInvalidArgument(own.status())) << own.status();
  EXPECT_EQ(importer.a->GetStats().bytes_imported, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Deallocate(*block));
}

TEST_P(AllocatorIpcTest, UnknownPointersAreRefused) {
  Process p = MakeProcess(GetParam());
  auto block = p.a->Allocate(kMiB);
  ASSERT_TRUE(block.ok());
  void* inside = static_cast<char*>(*block) + 256;
  auto exported = p.a->Export(inside);
  EXPECT_TRUE(absl::IsInvalidArgument(exported.status())) << exported.status();
  const absl::Status closed = p.a->CloseImport(*block);
  EXPECT_TRUE(absl::IsInvalidArgument(closed)) << closed;
  GPUALLOC_ASSERT_OK(p.a->Deallocate(*block));
  auto freed = p.a->Export(*block);
  EXPECT_TRUE(absl::IsInvalidArgument(freed.status())) << freed.status();
  GPUALLOC_EXPECT_OK(p.a->Validate());
}

TEST_P(AllocatorIpcTest, BackendWithoutTheCapabilityIsNamed) {
  SimOptions so;
  so.ipc_handles = false;
  so.shareable_handles = false;
  Process p = MakeProcess(GetParam(), SimMemory::kHostBacked, so);
  auto block = p.a->Allocate(kMiB);
  ASSERT_TRUE(block.ok());
  auto exported = p.a->Export(*block);
  EXPECT_TRUE(absl::IsUnimplemented(exported.status())) << exported.status();
  const absl::string_view want = GetParam() == Kind::kExpandable
                                     ? "expandable_segments=true needs "
                                       "shareable handles"
                                     : "ipc_handles";
  EXPECT_NE(exported.status().message().find(want), absl::string_view::npos)
      << exported.status();
  EXPECT_EQ(p.a->GetStats().bytes_exported, 0u);
  GPUALLOC_EXPECT_OK(p.a->Deallocate(*block));
}

INSTANTIATE_TEST_SUITE_P(Kinds, AllocatorIpcTest,
                         ::testing::Values(Kind::kSeparate, Kind::kExpandable,
                                           Kind::kPreallocated,
                                           Kind::kPlatform),
                         KindName);

TEST(AllocatorIpcModesTest, AsyncModeSaysWhy) {
  Options o;
  o.mode = AllocatorMode::kAsync;
  auto a = MakeAllocator(o, MakeSim(SimOptions{}));
  auto block = a->Allocate(kMiB);
  ASSERT_TRUE(block.ok());
  auto exported = a->Export(*block);
  EXPECT_TRUE(absl::IsUnimplemented(exported.status())) << exported.status();
  EXPECT_NE(exported.status().message().find("async"), absl::string_view::npos)
      << exported.status();
  EXPECT_TRUE(absl::IsUnimplemented(a->Import("x").status()));
  EXPECT_TRUE(absl::IsUnimplemented(a->CloseImport(*block)));
  GPUALLOC_EXPECT_OK(a->Deallocate(*block));
}

}  // namespace
}  // namespace gpualloc::testing
