// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_sharing_test.cc: the CUDA backend's IPC handles,
// mappings exported as POSIX file descriptors and page-locked host memory,
// against the fake driver (tests/backends/cuda_fake_driver.h): each call's
// success path, the capability probe on and off, requestedHandleTypes, the
// rules checked before any driver call, and driver errors as statuses.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gmock/gmock.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/backends/cuda_fake_driver.h"

namespace gpualloc::cuda {
namespace {

using ::testing::AllOf;
using testing::FakeCudaDriver;
using testing::FakeCudaOptions;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

FakeCudaOptions SmallDevice() {
  FakeCudaOptions o;
  o.total_bytes = kGiB;
  return o;
}

std::shared_ptr<CudaBackend> MakeBackend(
    const std::shared_ptr<FakeCudaDriver>& fake) {
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api = fake->Api();
  EXPECT_TRUE(api.ok()) << api.status();
  if (!api.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<CudaBackend>> backend =
      CudaBackend::Create(*api, 0);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *backend : nullptr;
}

std::string Notes(const CudaBackend& b) {
  return absl::StrJoin(b.notes(), "\n");
}

bool IsOpenFd(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Reserve + CreatePhysical + Map + SetAccess of `bytes`; the handle stays
// the caller's.
struct Mapped {
  DeviceAddress address = 0;
  PhysicalHandle handle = 0;
};
Mapped MapNew(Backend& b, std::uint64_t bytes) {
  Mapped m;
  absl::StatusOr<DeviceAddress> va = b.ReserveAddress(bytes, 0);
  EXPECT_TRUE(va.ok()) << va.status();
  absl::StatusOr<PhysicalHandle> h = b.CreatePhysical(bytes);
  EXPECT_TRUE(h.ok()) << h.status();
  if (!va.ok() || !h.ok()) return m;
  EXPECT_TRUE(b.Map(*va, bytes, *h).ok());
  EXPECT_TRUE(b.SetAccess(*va, bytes).ok());
  m.address = *va;
  m.handle = *h;
  return m;
}

// --- The probe
// ----------------------------------------------------------------

TEST(CudaSharingProbeTest, EveryCapabilityOnWithANoteEach) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->info().capabilities.ipc_handles);
  EXPECT_TRUE(b->info().capabilities.shareable_handles);
  EXPECT_TRUE(b->info().capabilities.host_memory);
  EXPECT_THAT(Notes(*b), AllOf(HasSubstr("ipc_handles on"),
                               HasSubstr("shareable_handles on"),
                               HasSubstr("host_memory on")));
}

TEST(CudaSharingProbeTest, IpcOffWithoutUnifiedAddressing) {
  FakeCudaOptions o = SmallDevice();
  o.unified_addressing = false;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.ipc_handles);
  EXPECT_THAT(Notes(*b), HasSubstr("ipc_handles off: the device does not "
                                   "share a unified address space"));
  // The Backend default answers, naming the capability; no driver call.
  const int before = fake->count("cuIpcGetMemHandle");
  absl::StatusOr<IpcHandle> h = b->GetIpcHandle(0x1000);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(h.status().message(), HasSubstr("ipc_handles"));
  EXPECT_EQ(fake->count("cuIpcGetMemHandle"), before);
}

TEST(CudaSharingProbeTest, IpcOffWhenTheDriverLacksAnEntryPoint) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuIpcCloseMemHandle"};
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.ipc_handles);
  EXPECT_THAT(
      Notes(*b),
      HasSubstr("ipc_handles off: the driver lacks cuIpcCloseMemHandle"));
  EXPECT_EQ(b->api().cuIpcGetMemHandle, nullptr);  // the group goes whole
}

TEST(CudaSharingProbeTest, ShareableOffWithoutTheAttributeAndNotRequested) {
  FakeCudaOptions o = SmallDevice();
  o.posix_fd_supported = false;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->info().capabilities.virtual_memory);
  EXPECT_FALSE(b->info().capabilities.shareable_handles);
  EXPECT_THAT(Notes(*b),
              HasSubstr("HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0"));
  // CreatePhysical does not ask for descriptors the device cannot give.
  absl::StatusOr<PhysicalHandle> h = b->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(fake->last_requested_handle_types(), 0);
  EXPECT_TRUE(b->ReleasePhysical(*h).ok());
  EXPECT_EQ(b->ExportMapping(0x1000).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(b->ImportPhysical(0, 2 * kMiB).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(CudaSharingProbeTest, ShareableRequestsDescriptorsWhenSupported) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<PhysicalHandle> h = b->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(fake->last_requested_handle_types(),
            static_cast<int>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_TRUE(b->ReleasePhysical(*h).ok());
}

TEST(CudaSharingProbeTest, ShareableOffWhenTheAttributeIsUnknown) {
  FakeCudaOptions o = SmallDevice();
  o.posix_fd_attribute_result = CUDA_ERROR_INVALID_VALUE;  // an old driver
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.shareable_handles);
  EXPECT_THAT(Notes(*b),
              HasSubstr("shareable_handles off: cuDeviceGetAttribute("
                        "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) failed: "
                        "CUDA_ERROR_INVALID_VALUE"));
}

TEST(CudaSharingProbeTest, ShareableOffWithoutVirtualMemory) {
  FakeCudaOptions o = SmallDevice();
  o.vmm_supported = false;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.shareable_handles);
  EXPECT_THAT(Notes(*b), HasSubstr("shareable_handles off: it needs "
                                   "virtual_memory, which is off"));
}

TEST(CudaSharingProbeTest, HostMemoryOffWhenTheDriverLacksIt) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuMemFreeHost"};
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->info().capabilities.host_memory);
  EXPECT_THAT(Notes(*b), HasSubstr("host_memory off: the driver lacks "
                                   "cuMemFreeHost"));
  EXPECT_EQ(b->HostAllocate(4096).status().code(),
            absl::StatusCode::kUnimplemented);
}

// --- IPC handles
// ------------------------------------------------------------------

TEST(CudaIpcTest, OpensInAnotherProcessAndSeesTheBytes) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(4 * kMiB);
  ASSERT_TRUE(base.ok());
  const std::string text = "written by the exporter";
  ASSERT_TRUE(b->CopyFromHost(*base, text.data(), text.size()).ok());
  absl::StatusOr<IpcHandle> handle = b->GetIpcHandle(*base);
  ASSERT_TRUE(handle.ok()) << handle.status();

  fake->SetProcess(1);
  absl::StatusOr<DeviceAddress> opened = b->OpenIpcHandle(*handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_NE(*opened, *base);
  std::string back(text.size(), '\0');
  ASSERT_TRUE(b->CopyToHost(back.data(), *opened, back.size()).ok());
  EXPECT_EQ(back, text);
  EXPECT_EQ(fake->live_opened(), 1u);
  EXPECT_TRUE(b->CloseIpcHandle(*opened).ok());
  EXPECT_EQ(fake->live_opened(), 0u);
  // Closed once: the second close never reaches the driver.
  const int closes = fake->count("cuIpcCloseMemHandle");
  absl::Status again = b->CloseIpcHandle(*opened);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(again.message(), HasSubstr("not an address OpenIpcHandle"));
  EXPECT_EQ(fake->count("cuIpcCloseMemHandle"), closes);
  fake->SetProcess(0);
  EXPECT_TRUE(b->Free(*base).ok());
}

TEST(CudaIpcTest, TheProcessThatMadeAHandleCannotOpenIt) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
  ASSERT_TRUE(base.ok());
  absl::StatusOr<IpcHandle> handle = b->GetIpcHandle(*base);
  ASSERT_TRUE(handle.ok());
  absl::StatusOr<DeviceAddress> opened = b->OpenIpcHandle(*handle);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opened.status().message(),
              AllOf(HasSubstr("cuIpcOpenMemHandle"),
                    HasSubstr("CUDA_ERROR_INVALID_CONTEXT"),
                    HasSubstr("cannot be opened in it")));
  EXPECT_EQ(fake->live_opened(), 0u);
}

TEST(CudaIpcTest, OnlyTheStartOfAnAllocationHasAHandle) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
  ASSERT_TRUE(base.ok());
  for (DeviceAddress bad : {*base + 256, DeviceAddress{0x1234}}) {
    absl::StatusOr<IpcHandle> h = b->GetIpcHandle(bad);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(h.status().message(), HasSubstr("GetIpcHandle(0x"));
  }
  EXPECT_EQ(fake->count("cuIpcGetMemHandle"), 0);
  ASSERT_TRUE(b->Free(*base).ok());
  EXPECT_EQ(b->GetIpcHandle(*base).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaIpcTest, DriverErrorsNameTheCall) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
  ASSERT_TRUE(base.ok());
  fake->FailNext("cuIpcGetMemHandle", CUDA_ERROR_OUT_OF_MEMORY);
  absl::StatusOr<IpcHandle> h = b->GetIpcHandle(*base);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr("cuIpcGetMemHandle(0x"),
                    HasSubstr("CUDA_ERROR_OUT_OF_MEMORY (2)")));
  h = b->GetIpcHandle(*base);
  ASSERT_TRUE(h.ok());
  fake->SetProcess(1);
  absl::StatusOr<DeviceAddress> opened = b->OpenIpcHandle(*h);
  ASSERT_TRUE(opened.ok());
  // A failed close keeps the books: the retry reaches the driver again.
  fake->FailNext("cuIpcCloseMemHandle", CUDA_ERROR_UNKNOWN);
  absl::Status closed = b->CloseIpcHandle(*opened);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(closed.message(), HasSubstr("cuIpcCloseMemHandle(0x"));
  EXPECT_TRUE(b->CloseIpcHandle(*opened).ok());
  // A garbled handle is the driver's to refuse.
  IpcHandle garbage;
  std::memset(garbage.bytes, 0x5a, sizeof(garbage.bytes));
  EXPECT_EQ(b->OpenIpcHandle(garbage).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaIpcTest, TheDestructorClosesWhatIsStillOpen) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  {
    auto b = MakeBackend(fake);
    ASSERT_NE(b, nullptr);
    absl::StatusOr<DeviceAddress> base = b->Allocate(kMiB);
    ASSERT_TRUE(base.ok());
    absl::StatusOr<IpcHandle> h = b->GetIpcHandle(*base);
    ASSERT_TRUE(h.ok());
    fake->SetProcess(1);
    ASSERT_TRUE(b->OpenIpcHandle(*h).ok());
    fake->SetProcess(0);
  }
  EXPECT_EQ(fake->live_opened(), 0u);
  EXPECT_EQ(fake->used_bytes(), 0u);
}

TEST(CudaIpcTest, AHandleOpenedTwiceGivesTheSameAddressAndCountsTheOpens) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<DeviceAddress> base = b->Allocate(4 * kMiB);
  ASSERT_TRUE(base.ok());
  absl::StatusOr<IpcHandle> handle = b->GetIpcHandle(*base);
  ASSERT_TRUE(handle.ok());
  fake->SetProcess(1);
  absl::StatusOr<DeviceAddress> first = b->OpenIpcHandle(*handle);
  absl::StatusOr<DeviceAddress> second = b->OpenIpcHandle(*handle);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(fake->live_opened(), 1u);
  absl::StatusOr<Backend::AddressRange> range = b->GetAddressRange(*first + 5);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->base, *first);
  EXPECT_EQ(range->bytes, 4 * kMiB);
  // The backend's books count the opens as the driver does: one close
  // each, and the memory goes at the last.
  EXPECT_TRUE(b->CloseIpcHandle(*first).ok());
  EXPECT_EQ(fake->live_opened(), 1u);
  EXPECT_TRUE(b->CloseIpcHandle(*second).ok());
  EXPECT_EQ(fake->live_opened(), 0u);
  const int closes = fake->count("cuIpcCloseMemHandle");
  EXPECT_EQ(b->CloseIpcHandle(*first).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake->count("cuIpcCloseMemHandle"), closes);
  fake->SetProcess(0);
  EXPECT_TRUE(b->Free(*base).ok());
}

// Two imports of one description, and imports of two blocks of one region,
// in one context: the driver hands out one address per allocation and
// counts the opens, and so does the importer.
TEST(CudaIpcTest, TwoImportsInOneContextShareTheOpenedAllocation) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  std::shared_ptr<CudaBackend> exporting = MakeBackend(fake);
  fake->SetProcess(1);
  std::shared_ptr<CudaBackend> importing = MakeBackend(fake);
  fake->SetProcess(0);
  ASSERT_NE(exporting, nullptr);
  ASSERT_NE(importing, nullptr);
  Options o;
  o.expandable = Tristate::kOff;  // blocks shared through IPC handles
  o.preallocate = false;
  o.memory_limit = 256 * kMiB;
  absl::StatusOr<std::unique_ptr<Allocator>> exporter =
      CreateAllocator(o, exporting);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  fake->SetProcess(1);
  absl::StatusOr<std::unique_ptr<Allocator>> importer =
      CreateAllocator(o, importing);
  ASSERT_TRUE(importer.ok()) << importer.status();
  fake->SetProcess(0);

  // Two blocks of one region, each with its text.
  absl::StatusOr<void*> a = (*exporter)->Allocate(256 * 1024);
  absl::StatusOr<void*> b = (*exporter)->Allocate(256 * 1024);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*exporter)->GetStats().backend_allocs, 1u) << "one region";
  const std::string text_a = "block a", text_b = "block b";
  const auto at = [](void* p) {
    return static_cast<DeviceAddress>(reinterpret_cast<std::uintptr_t>(p));
  };
  ASSERT_TRUE(exporting->CopyFromHost(at(*a), text_a.data(), 7).ok());
  ASSERT_TRUE(exporting->CopyFromHost(at(*b), text_b.data(), 7).ok());
  absl::StatusOr<std::string> da = (*exporter)->Export(*a);
  absl::StatusOr<std::string> db = (*exporter)->Export(*b);
  ASSERT_TRUE(da.ok() && db.ok());

  fake->SetProcess(1);
  absl::StatusOr<ImportedBlock> a1 = (*importer)->Import(*da);
  absl::StatusOr<ImportedBlock> a2 = (*importer)->Import(*da);
  absl::StatusOr<ImportedBlock> b1 = (*importer)->Import(*db);
  ASSERT_TRUE(a1.ok()) << a1.status();
  ASSERT_TRUE(a2.ok()) << a2.status();
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(a1->ptr, a2->ptr) << "the driver's address, twice";
  EXPECT_NE(a1->ptr, b1->ptr);
  EXPECT_EQ(fake->live_opened(), 1u) << "one allocation opened, 3 opens";
  EXPECT_EQ((*importer)->GetStats().bytes_imported, a1->bytes + b1->bytes);
  EXPECT_TRUE((*importer)->Validate().ok()) << (*importer)->Validate();
  const auto read = [&](void* p) {
    std::string back(7, '\0');
    EXPECT_TRUE(importing->CopyToHost(back.data(), at(p), 7).ok());
    return back;
  };
  EXPECT_EQ(read(a1->ptr), text_a);
  EXPECT_EQ(read(b1->ptr), text_b);

  // Each close gives back one open; the memory stays until the last.
  ASSERT_TRUE((*importer)->CloseImport(a1->ptr).ok());
  EXPECT_EQ((*importer)->GetStats().bytes_imported, a2->bytes + b1->bytes);
  EXPECT_EQ(read(a2->ptr), text_a);
  ASSERT_TRUE((*importer)->CloseImport(a2->ptr).ok());
  EXPECT_EQ((*importer)->GetStats().bytes_imported, b1->bytes);
  const absl::Status third = (*importer)->CloseImport(a1->ptr);
  EXPECT_EQ(third.code(), absl::StatusCode::kInvalidArgument) << third;
  EXPECT_EQ(read(b1->ptr), text_b) << "the other block is still mapped";
  EXPECT_EQ(fake->live_opened(), 1u);
  ASSERT_TRUE((*importer)->CloseImport(b1->ptr).ok());
  EXPECT_EQ(fake->live_opened(), 0u);
  EXPECT_EQ((*importer)->GetStats().bytes_imported, 0u);
  EXPECT_TRUE((*importer)->Validate().ok());

  // Every importer closed: the exporter frees both at once.
  fake->SetProcess(0);
  ASSERT_TRUE((*exporter)->Deallocate(*a).ok());
  ASSERT_TRUE((*exporter)->Deallocate(*b).ok());
  const Stats s = (*exporter)->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  fake->SetProcess(1);
  importer->reset();
  fake->SetProcess(0);
}

// --- Mappings as file descriptors
// ------------------------------------------------

TEST(CudaShareableTest, ExportAfterReleaseImportElsewhereSharesTheBytes) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto exporter = MakeBackend(fake);
  ASSERT_NE(exporter, nullptr);
  const std::uint64_t bytes = 4 * kMiB;
  Mapped m = MapNew(*exporter, bytes);
  const std::string text = "mapped memory, exported";
  ASSERT_TRUE(exporter->CopyFromHost(m.address, text.data(), text.size()).ok());
  // The allocator releases its handle as soon as it has mapped it.
  ASSERT_TRUE(exporter->ReleasePhysical(m.handle).ok());
  const std::uint64_t used = fake->used_bytes();

  absl::StatusOr<int> fd = exporter->ExportMapping(m.address);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(IsOpenFd(*fd));
  // Retained and released again: the mapping still holds the only reference.
  EXPECT_EQ(fake->count("cuMemRetainAllocationHandle"), 1);
  EXPECT_EQ(fake->live_handles(), 1u);

  // "Another process": a second backend over the same fake.
  fake->SetProcess(1);
  auto importer = MakeBackend(fake);
  ASSERT_NE(importer, nullptr);
  absl::StatusOr<PhysicalHandle> imported =
      importer->ImportPhysical(*fd, bytes);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_TRUE(IsOpenFd(*fd));  // ImportPhysical does not take the descriptor
  EXPECT_EQ(fake->used_bytes(), used);  // no new device memory
  absl::StatusOr<DeviceAddress> va = importer->ReserveAddress(bytes, 0);
  ASSERT_TRUE(va.ok());
  ASSERT_TRUE(importer->Map(*va, bytes, *imported).ok());
  ASSERT_TRUE(importer->SetAccess(*va, bytes).ok());
  std::string back(text.size(), '\0');
  ASSERT_TRUE(importer->CopyToHost(back.data(), *va, back.size()).ok());
  EXPECT_EQ(back, text);
  EXPECT_EQ(close(*fd), 0);

  // The memory stays until both sides let go.
  ASSERT_TRUE(exporter->Unmap(m.address, bytes).ok());
  EXPECT_EQ(fake->used_bytes(), used);
  ASSERT_TRUE(importer->Unmap(*va, bytes).ok());
  ASSERT_TRUE(importer->ReleasePhysical(*imported).ok());
  EXPECT_EQ(fake->used_bytes(), used - bytes);
  ASSERT_TRUE(importer->FreeAddress(*va, bytes).ok());
  ASSERT_TRUE(exporter->FreeAddress(m.address, bytes).ok());
}

TEST(CudaShareableTest, ImportedMemoryDoesNotCountAgainstCapacity) {
  FakeCudaOptions o = SmallDevice();
  o.total_bytes = 64 * kMiB;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  Mapped m = MapNew(*b, 32 * kMiB);
  absl::StatusOr<int> fd = b->ExportMapping(m.address);
  ASSERT_TRUE(fd.ok());
  // More than this device has: refused for CreatePhysical, taken for an
  // import (the exporter's device holds the memory; cuMemImportFrom-
  // ShareableHandle takes no size, and neither does the fake).
  EXPECT_EQ(b->CreatePhysical(128 * kMiB).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::StatusOr<PhysicalHandle> imported = b->ImportPhysical(*fd, 128 * kMiB);
  EXPECT_TRUE(imported.ok()) << imported.status();
  close(*fd);
  ASSERT_TRUE(b->ReleasePhysical(*imported).ok());
  ASSERT_TRUE(b->Unmap(m.address, 32 * kMiB).ok());
  ASSERT_TRUE(b->ReleasePhysical(m.handle).ok());
}

TEST(CudaShareableTest, RulesCheckedBeforeTheDriver) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  Mapped m = MapNew(*b, 4 * kMiB);
  // Not the start of a mapping; nothing mapped at all.
  for (DeviceAddress bad : {m.address + 2 * kMiB, DeviceAddress{0x1000}}) {
    absl::StatusOr<int> fd = b->ExportMapping(bad);
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(fd.status().message(),
                HasSubstr("not the start of a mapping Map made on device 0"));
  }
  // Sizes off the granularity, and negative descriptors.
  EXPECT_EQ(b->ImportPhysical(0, 12345).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b->ImportPhysical(-1, 2 * kMiB).status().message(),
              HasSubstr("not a file descriptor"));
  EXPECT_EQ(fake->count("cuMemRetainAllocationHandle"), 0);
  EXPECT_EQ(fake->count("cuMemImportFromShareableHandle"), 0);
  // A descriptor the driver never made is its to refuse.
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  absl::StatusOr<PhysicalHandle> h = b->ImportPhysical(devnull, 2 * kMiB);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr("cuMemImportFromShareableHandle(fd "),
                    HasSubstr("CUDA_ERROR_INVALID_VALUE")));
  EXPECT_TRUE(IsOpenFd(devnull));
  close(devnull);
  ASSERT_TRUE(b->Unmap(m.address, 4 * kMiB).ok());
  ASSERT_TRUE(b->ReleasePhysical(m.handle).ok());
}

TEST(CudaShareableTest, AFailedExportStillReleasesTheRetainedHandle) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  Mapped m = MapNew(*b, 2 * kMiB);
  ASSERT_TRUE(b->ReleasePhysical(m.handle).ok());
  fake->FailNext("cuMemExportToShareableHandle", CUDA_ERROR_NOT_SUPPORTED);
  absl::StatusOr<int> fd = b->ExportMapping(m.address);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(fd.status().message(),
              AllOf(HasSubstr("cuMemExportToShareableHandle(0x"),
                    HasSubstr("CUDA_ERROR_NOT_SUPPORTED")));
  // Retained, then released: unmapping returns the memory.
  EXPECT_EQ(fake->count("cuMemRelease"), 2);
  ASSERT_TRUE(b->Unmap(m.address, 2 * kMiB).ok());
  EXPECT_EQ(fake->live_handles(), 0u);

  Mapped n = MapNew(*b, 2 * kMiB);
  fake->FailNext("cuMemRetainAllocationHandle", CUDA_ERROR_INVALID_VALUE);
  fd = b->ExportMapping(n.address);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fd.status().message(),
              HasSubstr("cuMemRetainAllocationHandle(0x"));
  // A release that fails after the export closes the descriptor it made.
  fake->FailNext("cuMemRelease", CUDA_ERROR_UNKNOWN);
  fd = b->ExportMapping(n.address);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(fd.status().message(), HasSubstr("retained at 0x"));
  ASSERT_TRUE(b->Unmap(n.address, 2 * kMiB).ok());
  ASSERT_TRUE(b->ReleasePhysical(n.handle).ok());
}

TEST(CudaShareableTest, ImportFailureLeavesTheBooksAlone) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  Mapped m = MapNew(*b, 2 * kMiB);
  absl::StatusOr<int> fd = b->ExportMapping(m.address);
  ASSERT_TRUE(fd.ok());
  fake->FailNext("cuMemImportFromShareableHandle", CUDA_ERROR_OUT_OF_MEMORY);
  absl::StatusOr<PhysicalHandle> h = b->ImportPhysical(*fd, 2 * kMiB);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fake->live_handles(), 1u);
  h = b->ImportPhysical(*fd, 2 * kMiB);
  ASSERT_TRUE(h.ok());
  close(*fd);
  ASSERT_TRUE(b->ReleasePhysical(*h).ok());
  // Released once: the second release is the ledger's to refuse.
  EXPECT_EQ(b->ReleasePhysical(*h).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(b->Unmap(m.address, 2 * kMiB).ok());
  ASSERT_TRUE(b->ReleasePhysical(m.handle).ok());
}

// --- Host memory
// --------------------------------------------------------------------

TEST(CudaHostMemoryTest, AllocatesPortablePageAlignedMemory) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<void*> p = b->HostAllocate(3 * kMiB + 5);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*p) % 4096, 0u);
  EXPECT_EQ(fake->last_host_flags(), CU_MEMHOSTALLOC_PORTABLE);
  std::memset(*p, 0xab, 3 * kMiB + 5);  // really host memory
  EXPECT_EQ(fake->live_host_blocks(), 1u);
  EXPECT_TRUE(b->HostFree(*p).ok());
  EXPECT_EQ(fake->live_host_blocks(), 0u);
}

TEST(CudaHostMemoryTest, UnknownPointersNeverReachTheDriver) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  int local = 0;
  for (void* bad : {static_cast<void*>(&local), static_cast<void*>(nullptr)}) {
    absl::Status s = b->HostFree(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr("not a pointer HostAllocate returned on device 0"));
  }
  absl::StatusOr<void*> p = b->HostAllocate(4096);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(b->HostFree(*p).ok());
  EXPECT_EQ(b->HostFree(*p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake->count("cuMemFreeHost"), 1);
  EXPECT_EQ(b->HostAllocate(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaHostMemoryTest, OutOfHostMemoryAndFailedFrees) {
  FakeCudaOptions o = SmallDevice();
  o.host_bytes = 8 * kMiB;
  auto fake = FakeCudaDriver::Create(o);
  auto b = MakeBackend(fake);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<void*> p = b->HostAllocate(16 * kMiB);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("cuMemHostAlloc(16777216 bytes, portable) on "
                              "device 0"),
                    HasSubstr("CUDA_ERROR_OUT_OF_MEMORY")));
  p = b->HostAllocate(kMiB);
  ASSERT_TRUE(p.ok());
  // A failed free keeps the pointer in the books; the retry frees it.
  fake->FailNext("cuMemFreeHost", CUDA_ERROR_INVALID_CONTEXT);
  absl::Status s = b->HostFree(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cuMemFreeHost(0x"));
  EXPECT_TRUE(b->HostFree(*p).ok());
}

TEST(CudaHostMemoryTest, TheDestructorFreesWhatIsLeft) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  {
    auto b = MakeBackend(fake);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->HostAllocate(kMiB).ok());
    ASSERT_TRUE(b->HostAllocate(kMiB).ok());
  }
  EXPECT_EQ(fake->live_host_blocks(), 0u);
}

}  // namespace
}  // namespace gpualloc::cuda
