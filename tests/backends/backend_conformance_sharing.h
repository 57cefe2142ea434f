// SPDX-License-Identifier: Apache-2.0
// tests/backends/backend_conformance_sharing.h: the conformance cases of
// sharing memory with other processes (capabilities.ipc_handles and
// shareable_handles), part of the suite of backend_conformance.h, which
// includes this file at its end (include that one, not this).
#ifndef GPUALLOC_TESTS_BACKEND_CONFORMANCE_SHARING_H_
#define GPUALLOC_TESTS_BACKEND_CONFORMANCE_SHARING_H_

#include <unistd.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_conformance.h"

namespace gpualloc::testing {

// --- Sharing memory with other processes (capabilities.ipc_handles,
// shareable_handles) ---------------------------------------------------------
// A second backend made by the same factory stands for the other process
// where the backend allows it (the simulator: each instance is a process);
// a backend that counts two instances in one process as one process skips
// the round trips here (its own tests cover them across processes).

#define GPUALLOC_CONFORMANCE_EXPECT_OK(expr)         \
  do {                                               \
    const absl::Status conformance_status_ = (expr); \
    EXPECT_TRUE(conformance_status_.ok())            \
        << #expr << ": " << conformance_status_;     \
  } while (0)

TEST_P(BackendConformanceTest, SharingCallsNeedTheirCapabilities) {
  const Capabilities& caps = info().capabilities;
  if (caps.ipc_handles && caps.shareable_handles) {
    GTEST_SKIP() << info().name << " shares memory both ways";
  }
  if (!caps.ipc_handles) {
    const absl::StatusOr<IpcHandle> handle = backend_->GetIpcHandle(kMiB);
    EXPECT_TRUE(absl::IsUnimplemented(handle.status())) << handle.status();
    EXPECT_NE(handle.status().message().find("ipc_handles"),
              absl::string_view::npos)
        << handle.status();
    EXPECT_TRUE(
        absl::IsUnimplemented(backend_->OpenIpcHandle(IpcHandle{}).status()));
    EXPECT_TRUE(absl::IsUnimplemented(backend_->CloseIpcHandle(kMiB)));
  }
  if (!caps.shareable_handles) {
    const absl::StatusOr<int> fd = backend_->ExportMapping(kMiB);
    EXPECT_TRUE(absl::IsUnimplemented(fd.status())) << fd.status();
    EXPECT_NE(fd.status().message().find("shareable_handles"),
              absl::string_view::npos)
        << fd.status();
    EXPECT_TRUE(
        absl::IsUnimplemented(backend_->ImportPhysical(0, kMiB).status()));
  }
}

TEST_P(BackendConformanceTest, IpcHandleOpensInAnotherInstance) {
  if (!info().capabilities.ipc_handles) GTEST_SKIP() << "no IPC handles";
  if (!HasRoomFor(4 * kMiB)) GTEST_SKIP() << "device is full";
  const std::uint64_t bytes = kMiB + 4096;
  const DeviceAddress a = AllocateOrFail(bytes);
  ASSERT_NE(a, 0u);
  const bool host = info().capabilities.host_accessible;
  if (host) {
    auto* p = reinterpret_cast<unsigned char*>(a);
    for (std::uint64_t off = 0; off < bytes; ++off)
      p[off] = CopyPattern(3, off);
  }
  absl::StatusOr<IpcHandle> handle = backend_->GetIpcHandle(a);
  ASSERT_TRUE(handle.ok()) << handle.status();
  // Not the start of an allocation.
  EXPECT_FALSE(backend_->GetIpcHandle(a + 256).ok());
  // The process that made the handle cannot open it.
  EXPECT_FALSE(backend_->OpenIpcHandle(*handle).ok());
  if (info().backend != "sim") {
    // A vendor's second instance is this process, which its driver refuses
    // (and a fake made a second time replaces the first one's runtime). The
    // fakes model a second process with a switch of their own: the
    // cuda_sharing and hip_sharing tests open handles through it.
    GTEST_SKIP() << "a second " << info().backend
                 << " instance would be this process";
  }
  absl::StatusOr<std::shared_ptr<Backend>> other = GetParam().make();
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<DeviceAddress> opened = (*other)->OpenIpcHandle(*handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  if (host) {
    auto* q = reinterpret_cast<unsigned char*>(*opened);
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < bytes; ++off) {
      wrong += q[off] != CopyPattern(3, off);
    }
    EXPECT_EQ(wrong, 0u) << "the opened memory shows the exporter's bytes";
    q[5] = 0xa5;  // and the exporter sees the importer's writes
    EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[5], 0xa5);
  }
  GPUALLOC_CONFORMANCE_EXPECT_OK((*other)->CloseIpcHandle(*opened));
  // Closed twice, or an address it never opened.
  EXPECT_FALSE((*other)->CloseIpcHandle(*opened).ok());
  FreeOrFail(a);
  // The allocation is gone: its handle no longer opens (where the backend
  // can tell).
  if (info().backend == "sim") {
    EXPECT_FALSE((*other)->OpenIpcHandle(*handle).ok());
  }
}

TEST_P(BackendConformanceTest, ExportedMappingImportsInAnotherInstance) {
  if (!info().capabilities.shareable_handles) {
    GTEST_SKIP() << "no shareable handles";
  }
  const std::uint64_t g = Granule();
  if (!HasRoomFor(4 * g)) GTEST_SKIP() << "device is full";
  PhysicalHandle first = 0, second = 0;
  const DeviceAddress r = MapAdjacentHandles(&first, &second);
  ASSERT_NE(r, 0u);
  const bool host = info().capabilities.host_accessible;
  if (host) {
    auto* p = reinterpret_cast<unsigned char*>(r + g);
    for (std::uint64_t off = 0; off < 2 * g; off += 4099) {
      p[off] = CopyPattern(4, off);
    }
  }
  // After the handle's release: the mapping keeps the memory.
  ReleasePhysicalOrFail(second);
  absl::StatusOr<int> fd = backend_->ExportMapping(r + g);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_FALSE(backend_->ExportMapping(r + g + g).ok()) << "inside a mapping";
  if (info().backend != "sim") {
    // As for IPC handles: the vendors' second instance would be this
    // process; cuda_sharing and hip_sharing import through the fakes' own
    // second process.
    close(*fd);
    GTEST_SKIP() << "a second " << info().backend
                 << " instance would be this process";
  }
  absl::StatusOr<std::shared_ptr<Backend>> other = GetParam().make();
  ASSERT_TRUE(other.ok()) << other.status();
  Backend& b = **other;
  absl::StatusOr<PhysicalHandle> imported = b.ImportPhysical(*fd, 2 * g);
  ASSERT_TRUE(imported.ok()) << imported.status();
  close(*fd);  // ImportPhysical does not own it
  absl::StatusOr<DeviceAddress> at = b.ReserveAddress(2 * g, 0);
  ASSERT_TRUE(at.ok()) << at.status();
  GPUALLOC_CONFORMANCE_EXPECT_OK(b.Map(*at, 2 * g, *imported));
  GPUALLOC_CONFORMANCE_EXPECT_OK(b.SetAccess(*at, 2 * g));
  GPUALLOC_CONFORMANCE_EXPECT_OK(b.ReleasePhysical(*imported));
  if (host) {
    auto* q = reinterpret_cast<unsigned char*>(*at);
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < 2 * g; off += 4099) {
      wrong += q[off] != CopyPattern(4, off);
    }
    EXPECT_EQ(wrong, 0u) << "the imported memory shows the exporter's bytes";
    q[7] = 0x5a;
    EXPECT_EQ(reinterpret_cast<unsigned char*>(r + g)[7], 0x5a);
  }
  GPUALLOC_CONFORMANCE_EXPECT_OK(b.Unmap(*at, 2 * g));
  GPUALLOC_CONFORMANCE_EXPECT_OK(b.FreeAddress(*at, 2 * g));
  UnmapOrFail(r, 3 * g);
  ReleasePhysicalOrFail(first);
  FreeAddressOrFail(r, 4 * g);
}

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_BACKEND_CONFORMANCE_SHARING_H_
