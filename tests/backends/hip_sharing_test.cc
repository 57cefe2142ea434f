// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_sharing_test.cc: the HIP backend's IPC handles, mappings
// exported as POSIX file descriptors and page-locked host memory, driven
// through the fake runtime (tests/backends/hip_fake_runtime.h): each call's
// success path, the capability probe on and off (ROCm 5.2 has no usable
// virtual memory, so no shareable handles), requestedHandleType, how the
// descriptor reaches hipMemImportFromShareableHandle before and from ROCm
// 7.1, the rules checked before any runtime call, and runtime errors.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "backends/hip/hip_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/hip_fake_runtime.h"

namespace gpualloc::hip {
namespace {

using ::testing::AllOf;
using testing::FakeHipConfig;
using testing::FakeHipRuntime;
using ::testing::HasSubstr;
using testing::kFakeMiB;

constexpr std::uint64_t kMiB = kFakeMiB;

std::shared_ptr<HipBackend> Make(const FakeHipRuntime& fake) {
  absl::StatusOr<std::shared_ptr<HipBackend>> b =
      HipBackend::Create(fake.api(), HipBackendOptions{});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : nullptr;
}

std::string Notes(const HipBackend& b) {
  return absl::StrJoin(b.notes(), "\n");
}

bool IsOpenFd(int fd) { return fcntl(fd, F_GETFD) != -1; }

struct Mapped {
  DeviceAddress address = 0;
  PhysicalHandle handle = 0;
};
Mapped MapNew(Backend& b, std::uint64_t bytes) {
  Mapped m;
  absl::StatusOr<DeviceAddress> va = b.ReserveAddress(bytes, 0);
  absl::StatusOr<PhysicalHandle> h = b.CreatePhysical(bytes);
  EXPECT_TRUE(va.ok() && h.ok());
  if (!va.ok() || !h.ok()) return m;
  EXPECT_TRUE(b.Map(*va, bytes, *h).ok());
  EXPECT_TRUE(b.SetAccess(*va, bytes).ok());
  m.address = *va;
  m.handle = *h;
  return m;
}

// ---------------------------------------------------------------- the probe

TEST(HipSharingProbeTest, Rocm61HasEverything) {
  FakeHipRuntime fake(testing::Rocm61());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->info().capabilities.ipc_handles);
  EXPECT_TRUE(b->info().capabilities.shareable_handles);
  EXPECT_TRUE(b->info().capabilities.host_memory);
  EXPECT_THAT(Notes(*b),
              AllOf(HasSubstr("ipc_handles on"),
                    HasSubstr("shareable_handles on (POSIX file descriptors"),
                    HasSubstr("descriptors imported by address"),
                    HasSubstr("host_memory on")));
  absl::StatusOr<PhysicalHandle> h = b->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(fake.last_create_exportable());
  ASSERT_TRUE(b->ReleasePhysical(*h).ok());
}

TEST(HipSharingProbeTest, Rocm52HasNoShareableHandlesForWantOfVirtualMemory) {
  FakeHipRuntime fake(testing::Rocm52());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.virtual_memory);
  EXPECT_FALSE(b->info().capabilities.shareable_handles);
  EXPECT_TRUE(b->info().capabilities.ipc_handles);
  EXPECT_TRUE(b->info().capabilities.host_memory);
  EXPECT_THAT(Notes(*b), HasSubstr("shareable_handles off: it needs "
                                   "virtual_memory, which is off"));
  absl::StatusOr<int> fd = b->ExportMapping(0x1000);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(fd.status().message(), HasSubstr("shareable_handles"));
}

TEST(HipSharingProbeTest, MissingEntryPointsTurnEachOffNamingThem) {
  FakeHipConfig config;
  config.has_ipc = false;
  config.has_shareable = false;
  config.has_host_memory = false;
  FakeHipRuntime fake(config);
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.ipc_handles);
  EXPECT_FALSE(b->info().capabilities.shareable_handles);
  EXPECT_FALSE(b->info().capabilities.host_memory);
  EXPECT_THAT(
      Notes(*b),
      AllOf(HasSubstr("ipc_handles off: the runtime lacks hipIpcGetMemHandle, "
                      "hipIpcOpenMemHandle, hipIpcCloseMemHandle"),
            HasSubstr("shareable_handles off: the runtime lacks "
                      "hipMemRetainAllocationHandle"),
            HasSubstr("host_memory off: the runtime lacks hipHostMalloc, "
                      "hipHostFree")));
  // CreatePhysical does not ask for descriptors nobody can export.
  absl::StatusOr<PhysicalHandle> h = b->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(fake.last_create_exportable());
  ASSERT_TRUE(b->ReleasePhysical(*h).ok());
  EXPECT_EQ(b->HostAllocate(4096).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(b->GetIpcHandle(0x1000).status().code(),
            absl::StatusCode::kUnimplemented);
}

// ---------------------------------------------------------------- IPC

TEST(HipIpcTest, OpensInAnotherProcessAndSeesTheBytes) {
  FakeHipRuntime fake(testing::Rocm61());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(4 * kMiB);
  ASSERT_TRUE(base.ok());
  const std::string text = "hip exporter";
  ASSERT_TRUE(b->CopyFromHost(*base, text.data(), text.size()).ok());
  absl::StatusOr<IpcHandle> handle = b->GetIpcHandle(*base);
  ASSERT_TRUE(handle.ok()) << handle.status();
  // The process that made it cannot open it.
  absl::StatusOr<DeviceAddress> same = b->OpenIpcHandle(*handle);
  EXPECT_EQ(same.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(same.status().message(),
              AllOf(HasSubstr("hipErrorInvalidContext"),
                    HasSubstr("cannot be opened in it")));
  fake.SetProcess(1);
  absl::StatusOr<DeviceAddress> opened = b->OpenIpcHandle(*handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::string back(text.size(), '\0');
  ASSERT_TRUE(b->CopyToHost(back.data(), *opened, back.size()).ok());
  EXPECT_EQ(back, text);
  ASSERT_TRUE(b->CloseIpcHandle(*opened).ok());
  const int closes = fake.CountCalls("hipIpcCloseMemHandle");
  EXPECT_EQ(b->CloseIpcHandle(*opened).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.CountCalls("hipIpcCloseMemHandle"), closes);
  fake.SetProcess(0);
  ASSERT_TRUE(b->Free(*base).ok());
}

// Opened twice in one process: the same address, the opens counted (one
// close each); its range is the exporter's allocation.
TEST(HipIpcTest, OpenedTwiceTheSameAddressWithItsRange) {
  FakeHipRuntime fake(testing::Rocm61());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(4 * kMiB);
  ASSERT_TRUE(base.ok());
  absl::StatusOr<IpcHandle> handle = b->GetIpcHandle(*base);
  ASSERT_TRUE(handle.ok()) << handle.status();
  fake.SetProcess(1);
  absl::StatusOr<DeviceAddress> first = b->OpenIpcHandle(*handle);
  absl::StatusOr<DeviceAddress> second = b->OpenIpcHandle(*handle);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
  absl::StatusOr<Backend::AddressRange> range = b->GetAddressRange(*first + 9);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->base, *first);
  EXPECT_EQ(range->bytes, 4 * kMiB);
  ASSERT_TRUE(b->CloseIpcHandle(*first).ok());
  EXPECT_EQ(fake.live_opened(), 1u);
  ASSERT_TRUE(b->CloseIpcHandle(*second).ok());
  EXPECT_EQ(fake.live_opened(), 0u);
  EXPECT_FALSE(b->GetAddressRange(*first).ok()) << "closed: nothing there";
  fake.SetProcess(0);
  ASSERT_TRUE(b->Free(*base).ok());
}

TEST(HipIpcTest, OnlyWhatAllocateReturnedAndErrorsNameTheCall) {
  FakeHipRuntime fake(testing::Rocm61());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
  ASSERT_TRUE(base.ok());
  absl::StatusOr<IpcHandle> h = b->GetIpcHandle(*base + 4096);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("HIP GetIpcHandle(0x"));
  EXPECT_EQ(fake.CountCalls("hipIpcGetMemHandle"), 0);
  fake.FailNext("hipIpcGetMemHandle", hipErrorOutOfMemory);
  h = b->GetIpcHandle(*base);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      h.status().message(),
      AllOf(HasSubstr("hipIpcGetMemHandle(0x"), HasSubstr("on device 0"),
            HasSubstr("hipErrorOutOfMemory (2)")));
}

TEST(HipIpcTest, TheDestructorClosesWhatIsStillOpen) {
  FakeHipRuntime fake(testing::Rocm61());
  {
    auto b = Make(fake);
    ASSERT_NE(b, nullptr);
    absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
    ASSERT_TRUE(base.ok());
    absl::StatusOr<IpcHandle> h = b->GetIpcHandle(*base);
    ASSERT_TRUE(h.ok());
    fake.SetProcess(1);
    ASSERT_TRUE(b->OpenIpcHandle(*h).ok());
  }
  EXPECT_EQ(fake.live_opened(), 0u);
}

// ---------------------------------------------------------------- descriptors

void RoundTrip(FakeHipConfig config) {
  FakeHipRuntime fake(config);
  auto exporter = Make(fake);
  ASSERT_NE(exporter, nullptr);
  ASSERT_TRUE(exporter->info().capabilities.shareable_handles);
  const std::uint64_t bytes = 4 * kMiB;
  Mapped m = MapNew(*exporter, bytes);
  const std::string text = "exported mapping";
  ASSERT_TRUE(exporter->CopyFromHost(m.address, text.data(), text.size()).ok());
  ASSERT_TRUE(exporter->ReleasePhysical(m.handle).ok());
  const std::uint64_t used = fake.used_bytes();
  absl::StatusOr<int> fd = exporter->ExportMapping(m.address);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(fake.CountCalls("hipMemRelease"), 2);  // ours, and the retained

  fake.SetProcess(1);
  auto importer = Make(fake);
  ASSERT_NE(importer, nullptr);
  absl::StatusOr<PhysicalHandle> imported =
      importer->ImportPhysical(*fd, bytes);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_TRUE(IsOpenFd(*fd));  // still the caller's
  EXPECT_EQ(fake.used_bytes(), used);
  absl::StatusOr<DeviceAddress> va = importer->ReserveAddress(bytes, 0);
  ASSERT_TRUE(va.ok());
  ASSERT_TRUE(importer->Map(*va, bytes, *imported).ok());
  ASSERT_TRUE(importer->SetAccess(*va, bytes).ok());
  std::string back(text.size(), '\0');
  ASSERT_TRUE(importer->CopyToHost(back.data(), *va, back.size()).ok());
  EXPECT_EQ(back, text);
  EXPECT_EQ(close(*fd), 0);
  ASSERT_TRUE(exporter->Unmap(m.address, bytes).ok());
  EXPECT_EQ(fake.used_bytes(), used);
  ASSERT_TRUE(importer->Unmap(*va, bytes).ok());
  ASSERT_TRUE(importer->ReleasePhysical(*imported).ok());
  EXPECT_EQ(fake.used_bytes(), used - bytes);
  EXPECT_EQ(fake.live_handles(), 0u);
}

TEST(HipShareableTest, RoundTripPassingTheDescriptorByAddress) {
  RoundTrip(testing::Rocm61());
}

TEST(HipShareableTest, RoundTripPassingTheDescriptorByValueFromRocm71) {
  FakeHipConfig config = testing::Rocm61();
  config.runtime_version = 70100000;
  config.driver_version = 70100000;
  RoundTrip(config);
}

TEST(HipShareableTest, RulesAndErrors) {
  FakeHipRuntime fake(testing::Rocm61());
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  Mapped m = MapNew(*b, 4 * kMiB);
  absl::StatusOr<int> fd = b->ExportMapping(m.address + 2 * kMiB);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fd.status().message(), HasSubstr("HIP ExportMapping(0x"));
  EXPECT_THAT(b->ImportPhysical(-3, 2 * kMiB).status().message(),
              HasSubstr("not a file descriptor"));
  EXPECT_EQ(b->ImportPhysical(0, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.CountCalls("hipMemRetainAllocationHandle"), 0);
  EXPECT_EQ(fake.CountCalls("hipMemImportFromShareableHandle"), 0);

  fake.FailNext("hipMemExportToShareableHandle", hipErrorNotSupported);
  fd = b->ExportMapping(m.address);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(fd.status().message(),
              AllOf(HasSubstr("hipMemExportToShareableHandle(0x"),
                    HasSubstr("hipErrorNotSupported")));
  // The retained handle went back: releasing ours and unmapping frees all.
  ASSERT_TRUE(b->Unmap(m.address, 4 * kMiB).ok());
  ASSERT_TRUE(b->ReleasePhysical(m.handle).ok());
  EXPECT_EQ(fake.live_handles(), 0u);

  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  absl::StatusOr<PhysicalHandle> h = b->ImportPhysical(devnull, 2 * kMiB);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(),
              HasSubstr("hipMemImportFromShareableHandle(fd "));
  EXPECT_TRUE(IsOpenFd(devnull));
  close(devnull);
}

// ---------------------------------------------------------------- host memory

TEST(HipHostMemoryTest, PortablePageAlignedAndBooked) {
  FakeHipConfig config;
  config.host_bytes = 8 * kMiB;
  FakeHipRuntime fake(config);
  auto b = Make(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<void*> p = b->HostAllocate(kMiB + 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*p) % 4096, 0u);
  EXPECT_EQ(fake.last_host_flags(), unsigned{hipHostMallocPortable});
  std::memset(*p, 1, kMiB + 1);
  int local = 0;
  EXPECT_THAT(b->HostFree(&local).message(), HasSubstr("HIP HostFree(0x"));
  EXPECT_EQ(fake.CountCalls("hipHostFree"), 0);
  ASSERT_TRUE(b->HostFree(*p).ok());
  EXPECT_EQ(b->HostFree(*p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.CountCalls("hipHostFree"), 1);

  absl::StatusOr<void*> big = b->HostAllocate(16 * kMiB);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(),
              HasSubstr("hipHostMalloc(16777216 bytes, portable) on device 0"));
  EXPECT_EQ(b->HostAllocate(0).status().code(),
            absl::StatusCode::kInvalidArgument);

  p = b->HostAllocate(kMiB);
  ASSERT_TRUE(p.ok());
  fake.FailNext("hipHostFree", hipErrorInvalidValue);
  EXPECT_EQ(b->HostFree(*p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(b->HostFree(*p).ok());  // still booked after the failure
  ASSERT_TRUE(b->HostAllocate(kMiB).ok());
  b.reset();  // the destructor frees what is left
  EXPECT_EQ(fake.live_host_blocks(), 0u);
}

}  // namespace
}  // namespace gpualloc::hip
