// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_fake_sharing.cc: the fake CUDA driver's IPC handles,
// shareable handles (memfd descriptors), page-locked host memory and the
// stream memory operations of completion counters.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "tests/backends/cuda_fake_driver.h"
#include "tests/backends/cuda_fake_state.h"

namespace gpualloc::cuda::testing {

FakeCudaDriver::State::~State() {
  for (const auto& [pointer, bytes] : host_blocks) std::free(pointer);
}

namespace fake_internal {
namespace {

// The fake's IPC handle: a tag, the process that made it, the allocation and
// the offset asked for, in the handle's 64 bytes.
constexpr char kIpcTag[8] = {'f', 'a', 'k', 'e', 'i', 'p', 'c', '\0'};
struct FakeIpc {
  char tag[8];
  std::int64_t process;
  std::uint64_t base;
  std::uint64_t offset;
};
static_assert(sizeof(FakeIpc) <= sizeof(CUipcMemHandle));

constexpr std::uint64_t kHostPage = 4096;

#define FAKE_ENTER(name)                                \
  FakeCudaDriver* f = Installed();                      \
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;  \
  absl::MutexLock fake_lock(&f->mu());                  \
  if (CUresult r = f->Enter(name); r != CUDA_SUCCESS) { \
    return r;                                           \
  }                                                     \
  FakeCudaDriver::State& s = f->state();                \
  const FakeCudaOptions& o = f->options();              \
  (void)s;                                              \
  (void)o

#define FAKE_NEED_CONTEXT()                                   \
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;      \
  if (s.context_refs == 0 ||                                  \
      CurrentContext() != FakeCudaDriver::PrimaryContext()) { \
    return CUDA_ERROR_INVALID_CONTEXT;                        \
  }

CUresult FakeIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  FAKE_ENTER("cuIpcGetMemHandle");
  FAKE_NEED_CONTEXT();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Any address inside a plain allocation (cuMemAlloc's only).
  auto it = s.allocations.upper_bound(dptr);
  if (it == s.allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (dptr - it->first >= it->second) return CUDA_ERROR_INVALID_VALUE;
  FakeIpc ipc;
  std::memcpy(ipc.tag, kIpcTag, sizeof(kIpcTag));
  ipc.process = s.process;
  ipc.base = it->first;
  ipc.offset = dptr - it->first;
  *handle = {};
  std::memcpy(handle->reserved, &ipc, sizeof(ipc));
  return CUDA_SUCCESS;
}

CUresult FakeIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle,
                              unsigned int flags) {
  FAKE_ENTER("cuIpcOpenMemHandle");
  FAKE_NEED_CONTEXT();
  if (pdptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeIpc ipc;
  std::memcpy(&ipc, handle.reserved, sizeof(ipc));
  if (std::memcmp(ipc.tag, kIpcTag, sizeof(kIpcTag)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The real driver refuses the process that made the handle.
  if (ipc.process == s.process) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = s.allocations.find(ipc.base);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  // Opened here already: the same address, one more open.
  for (auto& [at, opened] : s.opened) {
    if (opened.process == s.process && opened.source == ipc.base &&
        opened.source_offset == ipc.offset) {
      ++opened.opens;
      *pdptr = at;
      return CUDA_SUCCESS;
    }
  }
  const std::uint64_t bytes = it->second - ipc.offset;
  const CUdeviceptr at = s.NewAddress(bytes, o.min_granularity);
  s.opened[at] = {bytes, ipc.base, ipc.offset, s.process, 1};
  *pdptr = at;
  return CUDA_SUCCESS;
}

CUresult FakeIpcCloseMemHandle(CUdeviceptr dptr) {
  FAKE_ENTER("cuIpcCloseMemHandle");
  FAKE_NEED_CONTEXT();
  auto it = s.opened.find(dptr);
  if (it == s.opened.end()) return CUDA_ERROR_INVALID_VALUE;
  // The memory is unmapped at the last close.
  if (--it->second.opens == 0) s.opened.erase(it);
  return CUDA_SUCCESS;
}

// What holds `dptr`: a plain allocation, an opened one, a pool block or a
// mapping (its start and size).
CUresult FakeMemGetAddressRange(CUdeviceptr* pbase, size_t* psize,
                                CUdeviceptr dptr) {
  FAKE_ENTER("cuMemGetAddressRange");
  FAKE_NEED_CONTEXT();
  const auto find = [&](const auto& map, auto size) -> bool {
    auto it = map.upper_bound(dptr);
    if (it == map.begin()) return false;
    --it;
    if (dptr - it->first >= size(it->second)) return false;
    if (pbase != nullptr) *pbase = it->first;
    if (psize != nullptr) *psize = size(it->second);
    return true;
  };
  const auto plain = [](std::uint64_t n) { return n; };
  if (find(s.allocations, plain) || find(s.pool_blocks, plain) ||
      find(s.opened,
           [](const FakeCudaDriver::State::Opened& x) { return x.bytes; }) ||
      find(s.mappings,
           [](const FakeCudaDriver::State::Mapping& x) { return x.bytes; })) {
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult FakeMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                       void* addr) {
  FAKE_ENTER("cuMemRetainAllocationHandle");
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto at =
      static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(addr));
  auto m = s.mappings.upper_bound(at);
  if (m == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --m;
  if (at - m->first >= m->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  ++s.handles.at(m->second.handle).refs;
  *handle = m->second.handle;
  return CUDA_SUCCESS;
}

CUresult FakeMemExportToShareableHandle(void* shareable,
                                        CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType type,
                                        unsigned long long flags) {
  FAKE_ENTER("cuMemExportToShareableHandle");
  auto it = s.handles.find(handle);
  if (shareable == nullptr || flags != 0 || it == s.handles.end() ||
      it->second.released() ||
      type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Memory created without requestedHandleTypes cannot be exported.
  if (!it->second.exportable) return CUDA_ERROR_INVALID_VALUE;
  const int fd = memfd_create("gpualloc-fake-cuda-export", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stat st = {};
  fstat(fd, &st);
  s.exports[st.st_ino] = it->second.memory;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult FakeMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                          void* os_handle,
                                          CUmemAllocationHandleType type) {
  FAKE_ENTER("cuMemImportFromShareableHandle");
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // CUDA takes the descriptor's value as the pointer.
  const int fd = static_cast<int>(reinterpret_cast<std::uintptr_t>(os_handle));
  struct stat st = {};
  if (fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto e = s.exports.find(st.st_ino);
  if (e == s.exports.end()) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.memories.find(e->second);
  if (m == s.memories.end()) return CUDA_ERROR_INVALID_VALUE;  // gone
  ++m->second.refs;
  *handle = s.next_handle += 0x10;
  FakeCudaDriver::State::Handle h;
  h.bytes = m->second.bytes;
  h.memory = e->second;
  h.exportable = true;
  s.handles[*handle] = h;
  return CUDA_SUCCESS;
}

CUresult FakeMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  FAKE_ENTER("cuMemHostAlloc");
  FAKE_NEED_CONTEXT();
  constexpr unsigned int kKnown = CU_MEMHOSTALLOC_PORTABLE |
                                  CU_MEMHOSTALLOC_DEVICEMAP |
                                  CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || bytes == 0 || (flags & ~kKnown) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.last_host_flags = flags;
  if (bytes > o.host_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::uint64_t rounded = RoundUp(bytes, kHostPage);
  void* p = std::aligned_alloc(kHostPage, rounded);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  // The driver does not zero page-locked memory.
  std::memset(p, 0xa5, rounded);
  s.host_blocks[p] = rounded;
  if ((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0) {
    s.mapped_host[p] = s.next_mapped;
    s.mapped_device[s.next_mapped] = p;
    s.next_mapped += rounded + kHostPage;
  }
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult FakeMemFreeHost(void* p) {
  FAKE_ENTER("cuMemFreeHost");
  FAKE_NEED_CONTEXT();
  auto it = s.host_blocks.find(p);
  if (it == s.host_blocks.end()) return CUDA_ERROR_INVALID_VALUE;
  // It waits for the device: whatever was pending completes first.
  for (auto& [id, e] : s.events) e.done = true;
  LandCounterWrites(s, [](const auto&) { return true; });
  if (auto m = s.mapped_host.find(p); m != s.mapped_host.end()) {
    s.mapped_device.erase(m->second);
    s.mapped_host.erase(m);
  }
  std::free(p);
  s.host_blocks.erase(it);
  return CUDA_SUCCESS;
}

CUresult FakeMemHostGetDevicePointer(CUdeviceptr* dptr, void* p,
                                     unsigned int flags) {
  FAKE_ENTER("cuMemHostGetDevicePointer");
  FAKE_NEED_CONTEXT();
  if (dptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // A pointer inside a block made with CU_MEMHOSTALLOC_DEVICEMAP.
  auto it = s.host_blocks.upper_bound(p);
  if (it == s.host_blocks.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  const auto offset = static_cast<std::uint64_t>(static_cast<char*>(p) -
                                                 static_cast<char*>(it->first));
  auto m = s.mapped_host.find(it->first);
  if (offset >= it->second || m == s.mapped_host.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *dptr = m->second + offset;
  return CUDA_SUCCESS;
}

CUresult FakeStreamWriteValue64(CUstream stream, CUdeviceptr addr,
                                cuuint64_t value, unsigned int flags) {
  FAKE_ENTER("cuStreamWriteValue64");
  FAKE_NEED_CONTEXT();
  if ((flags & ~static_cast<unsigned int>(
                   CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::uint64_t* at = s.MappedSlot(addr);
  if (at == nullptr) return CUDA_ERROR_INVALID_VALUE;
  s.last_write_flags = flags;
  if (s.work_pending) {
    s.pending_writes.push_back(
        {reinterpret_cast<std::uintptr_t>(stream), ++s.seq, at, value});
  } else {
    __atomic_store_n(at, value, __ATOMIC_RELEASE);
  }
  return CUDA_SUCCESS;
}

CUresult FakeStreamWaitValue64(CUstream, CUdeviceptr addr, cuuint64_t,
                               unsigned int flags) {
  FAKE_ENTER("cuStreamWaitValue64");
  FAKE_NEED_CONTEXT();
  constexpr unsigned int kKnown =
      CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_EQ |
      CU_STREAM_WAIT_VALUE_AND | CU_STREAM_WAIT_VALUE_NOR |
      CU_STREAM_WAIT_VALUE_FLUSH;
  if ((flags & ~kKnown) != 0 || s.MappedSlot(addr) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.last_wait_flags = flags;
  return CUDA_SUCCESS;
}

#undef FAKE_ENTER
#undef FAKE_NEED_CONTEXT

}  // namespace

void AddSharingEntryPoints(std::map<std::string, void*>* table) {
  (*table)["cuIpcGetMemHandle"] = reinterpret_cast<void*>(&FakeIpcGetMemHandle);
  (*table)["cuIpcOpenMemHandle"] =
      reinterpret_cast<void*>(&FakeIpcOpenMemHandle);
  (*table)["cuIpcCloseMemHandle"] =
      reinterpret_cast<void*>(&FakeIpcCloseMemHandle);
  (*table)["cuMemGetAddressRange"] =
      reinterpret_cast<void*>(&FakeMemGetAddressRange);
  (*table)["cuMemRetainAllocationHandle"] =
      reinterpret_cast<void*>(&FakeMemRetainAllocationHandle);
  (*table)["cuMemExportToShareableHandle"] =
      reinterpret_cast<void*>(&FakeMemExportToShareableHandle);
  (*table)["cuMemImportFromShareableHandle"] =
      reinterpret_cast<void*>(&FakeMemImportFromShareableHandle);
  (*table)["cuMemHostAlloc"] = reinterpret_cast<void*>(&FakeMemHostAlloc);
  (*table)["cuMemFreeHost"] = reinterpret_cast<void*>(&FakeMemFreeHost);
  (*table)["cuMemHostGetDevicePointer"] =
      reinterpret_cast<void*>(&FakeMemHostGetDevicePointer);
  (*table)["cuStreamWriteValue64"] =
      reinterpret_cast<void*>(&FakeStreamWriteValue64);
  (*table)["cuStreamWaitValue64"] =
      reinterpret_cast<void*>(&FakeStreamWaitValue64);
}

}  // namespace fake_internal
}  // namespace gpualloc::cuda::testing
