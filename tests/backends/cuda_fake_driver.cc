// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_fake_driver.cc: the fake CUDA driver's model and entry
// points.
#include "tests/backends/cuda_fake_driver.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "tests/backends/cuda_fake_state.h"
#include "tests/backends/fake_device_bytes.h"

namespace gpualloc::cuda::testing {
namespace {

using gpualloc::testing::FakeDeviceBytes;
using gpualloc::testing::FakeRegion;
using gpualloc::testing::FakeRegionKind;

const CUcontext kPrimaryContext = reinterpret_cast<CUcontext>(0xc0ffee00);
const CUcontext kForeignContext = reinterpret_cast<CUcontext>(0xf0e1d200);
const CUmemoryPool kPool = reinterpret_cast<CUmemoryPool>(0x9001000);

absl::Mutex g_install_mu;
FakeCudaDriver* g_fake = nullptr;  // the installed fake
thread_local CUcontext t_current = nullptr;
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

}  // namespace

namespace fake_internal {
FakeCudaDriver* Installed() {
  absl::MutexLock lock(&g_install_mu);
  return g_fake;
}
CUcontext CurrentContext() { return t_current; }
}  // namespace fake_internal

namespace {
using fake_internal::Installed;
using fake_internal::kAddressBase;
using fake_internal::kReserveBase;
using fake_internal::RoundUp;

}  // namespace

std::shared_ptr<FakeCudaDriver> FakeCudaDriver::Create(
    FakeCudaOptions options) {
  std::shared_ptr<FakeCudaDriver> fake(new FakeCudaDriver(std::move(options)));
  fake->self_ = fake;
  absl::MutexLock lock(&g_install_mu);
  g_fake = fake.get();
  return fake;
}

FakeCudaDriver::FakeCudaDriver(FakeCudaOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {}

FakeCudaDriver::~FakeCudaDriver() {
  absl::MutexLock lock(&g_install_mu);
  if (g_fake == this) g_fake = nullptr;
}

CUresult FakeCudaDriver::Enter(const char* function) {
  State& s = *state_;
  s.calls.push_back(function);
  if (auto always = s.always_failures.find(function);
      always != s.always_failures.end()) {
    return always->second;
  }
  auto it = s.failures.find(function);
  if (it != s.failures.end() && --it->second.first == 0) {
    const CUresult r = it->second.second;
    s.failures.erase(it);
    return r;
  }
  return CUDA_SUCCESS;
}

void FakeCudaDriver::FailNext(const std::string& function, CUresult result,
                              int k) {
  absl::MutexLock lock(&mu_);
  state_->failures[function] = {k, result};
}

void FakeCudaDriver::FailAlways(const std::string& function, CUresult result) {
  absl::MutexLock lock(&mu_);
  state_->always_failures[function] = result;
}

void FakeCudaDriver::StopFailing(const std::string& function) {
  absl::MutexLock lock(&mu_);
  state_->always_failures.erase(function);
}

void FakeCudaDriver::SetWorkPending(bool pending) {
  absl::MutexLock lock(&mu_);
  state_->work_pending = pending;
}

void FakeCudaDriver::CompletePendingWork() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : state_->events) e.done = true;
  fake_internal::LandCounterWrites(*state_, [](const auto&) { return true; });
}

std::size_t FakeCudaDriver::pending_counter_writes() const {
  absl::MutexLock lock(&mu_);
  return state_->pending_writes.size();
}
std::size_t FakeCudaDriver::live_mapped_host_blocks() const {
  absl::MutexLock lock(&mu_);
  return state_->mapped_host.size();
}
unsigned int FakeCudaDriver::last_write_flags() const {
  absl::MutexLock lock(&mu_);
  return state_->last_write_flags;
}
unsigned int FakeCudaDriver::last_wait_flags() const {
  absl::MutexLock lock(&mu_);
  return state_->last_wait_flags;
}

void FakeCudaDriver::SetProcess(int process) {
  absl::MutexLock lock(&mu_);
  state_->process = process;
}

void FakeCudaDriver::SetCaptureStatus(std::uintptr_t stream, int status) {
  absl::MutexLock lock(&mu_);
  state_->capture_status[stream] = status;
}

CUcontext FakeCudaDriver::PrimaryContext() { return kPrimaryContext; }
CUcontext FakeCudaDriver::ForeignContext() { return kForeignContext; }
CUcontext FakeCudaDriver::ThreadContext() { return t_current; }
void FakeCudaDriver::SetThreadContext(CUcontext context) {
  t_current = context;
}

std::vector<FakeCudaDriver::Request> FakeCudaDriver::requests() const {
  absl::MutexLock lock(&mu_);
  return state_->requests;
}
std::vector<std::string> FakeCudaDriver::calls() const {
  absl::MutexLock lock(&mu_);
  return state_->calls;
}
int FakeCudaDriver::count(const std::string& function) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const std::string& c : state_->calls) n += c == function;
  return n;
}
int FakeCudaDriver::count_prefix(const std::string& prefix) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const std::string& c : state_->calls) {
    n += absl::StartsWith(c, prefix);
  }
  return n;
}
std::uint64_t FakeCudaDriver::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return state_->used;
}
int FakeCudaDriver::primary_context_refs() const {
  absl::MutexLock lock(&mu_);
  return state_->context_refs;
}
int FakeCudaDriver::live_events() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(state_->events.size());
}
std::size_t FakeCudaDriver::live_mappings() const {
  absl::MutexLock lock(&mu_);
  return state_->mappings.size();
}
std::size_t FakeCudaDriver::live_handles() const {
  absl::MutexLock lock(&mu_);
  return state_->handles.size();
}
int FakeCudaDriver::last_requested_handle_types() const {
  absl::MutexLock lock(&mu_);
  return state_->last_requested_handle_types;
}
std::size_t FakeCudaDriver::live_opened() const {
  absl::MutexLock lock(&mu_);
  return state_->opened.size();
}
std::size_t FakeCudaDriver::live_host_blocks() const {
  absl::MutexLock lock(&mu_);
  return state_->host_blocks.size();
}
unsigned int FakeCudaDriver::last_host_flags() const {
  absl::MutexLock lock(&mu_);
  return state_->last_host_flags;
}
std::size_t FakeCudaDriver::live_reservations() const {
  absl::MutexLock lock(&mu_);
  return state_->reservations.size();
}
std::uint64_t FakeCudaDriver::pool_attribute(
    CUmemPool_attribute attribute) const {
  absl::MutexLock lock(&mu_);
  auto it = state_->pool_attributes.find(attribute);
  return it == state_->pool_attributes.end() ? 0 : it->second;
}

// --- The entry points
// ---------------------------------------------------------
namespace {

// Enters `name` on the installed fake with its lock held; returns early with
// an injected failure. Binds `f` (the fake), `s` (its state) and `o` (its
// options).
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

// Calls that need the primary context current on the calling thread.
#define FAKE_NEED_CONTEXT()                                  \
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;     \
  if (s.context_refs == 0 || t_current != kPrimaryContext) { \
    return CUDA_ERROR_INVALID_CONTEXT;                       \
  }

struct ErrorName {
  CUresult code;
  const char* name;
};
constexpr ErrorName kErrorNames[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
};

CUresult FakeGetErrorName(CUresult error, const char** name) {
  FakeCudaDriver* f = Installed();
  if (f == nullptr || !f->options().error_names) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (const ErrorName& e : kErrorNames) {
    if (e.code == error) {
      *name = e.name;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult FakeInit(unsigned int) {
  FAKE_ENTER("cuInit");
  if (o.init_result != CUDA_SUCCESS) return o.init_result;
  s.initialized = true;
  return CUDA_SUCCESS;
}

CUresult FakeDriverGetVersion(int* version) {
  FAKE_ENTER("cuDriverGetVersion");
  *version = o.driver_version;
  return CUDA_SUCCESS;
}

CUresult FakeDeviceGetCount(int* count) {
  FAKE_ENTER("cuDeviceGetCount");
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = o.device_count;
  return CUDA_SUCCESS;
}

CUresult FakeDeviceGet(CUdevice* device, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= o.device_count)
    return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult FakeDeviceGetName(char* name, int len, CUdevice) {
  FAKE_ENTER("cuDeviceGetName");
  std::strncpy(name, o.name.c_str(), static_cast<std::size_t>(len));
  return CUDA_SUCCESS;
}

CUresult FakeDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                CUdevice) {
  FAKE_ENTER("cuDeviceGetAttribute");
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = o.major;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = o.minor;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = o.vmm_supported;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = o.pools_supported;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *value = o.unified_addressing;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      if (o.posix_fd_attribute_result != CUDA_SUCCESS) {
        return o.posix_fd_attribute_result;
      }
      *value = o.posix_fd_supported;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *value = o.can_map_host_memory;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
      // A driver older than CUDA 11.7 does not know the attribute.
      if (o.driver_version < 11070) return CUDA_ERROR_INVALID_VALUE;
      [[fallthrough]];
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
      if (o.stream_mem_ops_attribute_result != CUDA_SUCCESS) {
        return o.stream_mem_ops_attribute_result;
      }
      *value = o.stream_mem_ops_64;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult FakeDeviceTotalMem(size_t* bytes, CUdevice) {
  FAKE_ENTER("cuDeviceTotalMem");
  *bytes = o.total_bytes;
  return CUDA_SUCCESS;
}

CUresult FakePrimaryCtxRetain(CUcontext* context, CUdevice) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain");
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  ++s.context_refs;
  *context = kPrimaryContext;
  return CUDA_SUCCESS;
}

CUresult FakePrimaryCtxRelease(CUdevice) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease");
  if (s.context_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --s.context_refs;
  return CUDA_SUCCESS;
}

CUresult FakeCtxGetCurrent(CUcontext* context) {
  FAKE_ENTER("cuCtxGetCurrent");
  *context = t_current;
  return CUDA_SUCCESS;
}

CUresult FakeCtxSetCurrent(CUcontext context) {
  FAKE_ENTER("cuCtxSetCurrent");
  if (context != nullptr && context != kPrimaryContext &&
      context != kForeignContext) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  t_current = context;
  return CUDA_SUCCESS;
}

CUresult FakeMemGetInfo(size_t* free, size_t* total) {
  FAKE_ENTER("cuMemGetInfo");
  FAKE_NEED_CONTEXT();
  *free = o.total_bytes - s.used;
  *total = o.total_bytes;
  return CUDA_SUCCESS;
}

CUresult FakeMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  FAKE_ENTER("cuMemAlloc");
  FAKE_NEED_CONTEXT();
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::uint64_t rounded = RoundUp(bytes, o.min_granularity);
  if (rounded > o.total_bytes - s.used) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = s.NewAddress(bytes, o.min_granularity);
  s.allocations[*ptr] = rounded;
  s.used += rounded;
  return CUDA_SUCCESS;
}

CUresult FakeMemFree(CUdeviceptr ptr) {
  FAKE_ENTER("cuMemFree");
  FAKE_NEED_CONTEXT();
  auto it = s.allocations.find(ptr);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  s.used -= it->second;
  s.allocations.erase(it);
  s.bytes.Drop({FakeRegionKind::kAllocation, ptr});
  // cuMemFree synchronizes the device.
  for (auto& [id, e] : s.events) e.done = true;
  fake_internal::LandCounterWrites(s, [](const auto&) { return true; });
  return CUDA_SUCCESS;
}

CUresult FakeEventCreate(CUevent* event, unsigned int) {
  FAKE_ENTER("cuEventCreate");
  FAKE_NEED_CONTEXT();
  const std::uintptr_t id = s.next_event += 0x10;
  s.events[id] = {};
  *event = reinterpret_cast<CUevent>(id);
  return CUDA_SUCCESS;
}

CUresult FakeEventDestroy(CUevent event) {
  FAKE_ENTER("cuEventDestroy");
  return s.events.erase(reinterpret_cast<std::uintptr_t>(event)) == 1
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_HANDLE;
}

CUresult FakeEventRecord(CUevent event, CUstream stream) {
  FAKE_ENTER("cuEventRecord");
  FAKE_NEED_CONTEXT();
  auto it = s.events.find(reinterpret_cast<std::uintptr_t>(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  it->second.recorded = true;
  it->second.done = !s.work_pending;
  it->second.stream = reinterpret_cast<std::uintptr_t>(stream);
  it->second.seq = ++s.seq;
  return CUDA_SUCCESS;
}

CUresult FakeEventQuery(CUevent event) {
  FAKE_ENTER("cuEventQuery");
  auto it = s.events.find(reinterpret_cast<std::uintptr_t>(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  return it->second.done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult FakeEventSynchronize(CUevent event) {
  FAKE_ENTER("cuEventSynchronize");
  auto it = s.events.find(reinterpret_cast<std::uintptr_t>(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  it->second.done = true;
  // The counter writes queued on its stream before it have landed too.
  if (it->second.recorded) {
    const FakeCudaDriver::State::Event& e = it->second;
    fake_internal::LandCounterWrites(s, [&](const auto& w) {
      return w.stream == e.stream && w.seq < e.seq;
    });
  }
  return CUDA_SUCCESS;
}

CUresult FakeStreamWaitEvent(CUstream, CUevent event, unsigned int flags) {
  FAKE_ENTER("cuStreamWaitEvent");
  FAKE_NEED_CONTEXT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return s.events.contains(reinterpret_cast<std::uintptr_t>(event))
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_HANDLE;
}

CUresult FakeStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  FAKE_ENTER("cuStreamIsCapturing");
  FAKE_NEED_CONTEXT();
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = s.capture_status.find(reinterpret_cast<std::uintptr_t>(stream));
  const int raw = it == s.capture_status.end()
                      ? static_cast<int>(CU_STREAM_CAPTURE_STATUS_NONE)
                      : it->second;
  static_assert(sizeof(*status) == sizeof(raw));
  std::memcpy(status, &raw, sizeof(raw));  // even a value the enum lacks
  return CUDA_SUCCESS;
}

CUresult FakeThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKE_ENTER("cuThreadExchangeStreamCaptureMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}

// --- Virtual memory
// -----------------------------------------------------------
bool ValidProp(const CUmemAllocationProp* prop, const FakeCudaOptions& o) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         prop->location.id >= 0 && prop->location.id < o.device_count;
}

CUresult FakeMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop,
    CUmemAllocationGranularity_flags flag) {
  FAKE_ENTER("cuMemGetAllocationGranularity");
  if (!ValidProp(prop, o)) return CUDA_ERROR_INVALID_VALUE;
  *granularity = flag == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                     ? o.recommended_granularity
                     : o.min_granularity;
  return CUDA_SUCCESS;
}

CUresult FakeMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                               CUdeviceptr addr, unsigned long long flags) {
  FAKE_ENTER("cuMemAddressReserve");
  FAKE_NEED_CONTEXT();
  if (size == 0 || size % o.min_granularity != 0 || addr != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment == 0) alignment = o.min_granularity;
  s.next_reservation = RoundUp(s.next_reservation, alignment);
  *ptr = s.next_reservation;
  s.next_reservation += size + o.min_granularity;
  s.reservations[*ptr] = size;
  return CUDA_SUCCESS;
}

CUresult FakeMemAddressFree(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER("cuMemAddressFree");
  FAKE_NEED_CONTEXT();
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult FakeMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                       const CUmemAllocationProp* prop,
                       unsigned long long flags) {
  FAKE_ENTER("cuMemCreate");
  FAKE_NEED_CONTEXT();
  if (!ValidProp(prop, o) || flags != 0 || size == 0 ||
      size % o.min_granularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (size > o.total_bytes - s.used) return CUDA_ERROR_OUT_OF_MEMORY;
  const bool exportable = (prop->requestedHandleTypes &
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  s.last_requested_handle_types = static_cast<int>(prop->requestedHandleTypes);
  // A device that cannot export descriptors refuses memory asking for them.
  if (exportable && !o.posix_fd_supported) return CUDA_ERROR_NOT_SUPPORTED;
  s.used += size;
  *handle = s.next_handle += 0x10;
  FakeCudaDriver::State::Handle h;
  h.bytes = size;
  h.memory = *handle;
  h.exportable = exportable;
  s.handles[*handle] = h;
  s.memories[*handle] = {size, 1};
  return CUDA_SUCCESS;
}

CUresult FakeMemRelease(CUmemGenericAllocationHandle handle) {
  FAKE_ENTER("cuMemRelease");
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.released()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  --it->second.refs;
  s.MaybeFreeHandle(handle);
  return CUDA_SUCCESS;
}

CUresult FakeMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle,
                    unsigned long long flags) {
  FAKE_ENTER("cuMemMap");
  FAKE_NEED_CONTEXT();
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.released() || flags != 0 ||
      offset != 0 || size != h->second.bytes || ptr % o.min_granularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto r = s.reservations.upper_bound(ptr);
  if (r == s.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.mappings.upper_bound(ptr);
  if (m != s.mappings.begin() &&
      std::prev(m)->first + std::prev(m)->second.bytes > ptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (m != s.mappings.end() && m->first < ptr + size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.mappings[ptr] = {size, handle, false};
  ++h->second.mappings;
  return CUDA_SUCCESS;
}

CUresult FakeMemUnmap(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER("cuMemUnmap");
  FAKE_NEED_CONTEXT();
  // The strictest reading of the contract: exactly one whole mapping.
  auto m = s.mappings.find(ptr);
  if (m == s.mappings.end() || m->second.bytes != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUmemGenericAllocationHandle handle = m->second.handle;
  s.mappings.erase(m);
  --s.handles[handle].mappings;
  s.MaybeFreeHandle(handle);
  return CUDA_SUCCESS;
}

CUresult FakeMemSetAccess(CUdeviceptr ptr, size_t size,
                          const CUmemAccessDesc* desc, size_t count) {
  FAKE_ENTER("cuMemSetAccess");
  FAKE_NEED_CONTEXT();
  if (desc == nullptr || count != 1 ||
      desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Every byte mapped, no hole.
  CUdeviceptr at = ptr;
  auto m = s.mappings.upper_bound(at);
  if (m != s.mappings.begin()) --m;
  std::vector<CUdeviceptr> touched;
  while (at < ptr + size) {
    if (m == s.mappings.end() || m->first > at ||
        m->first + m->second.bytes <= at) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    touched.push_back(m->first);
    at = m->first + m->second.bytes;
    ++m;
  }
  for (CUdeviceptr t : touched) s.mappings[t].accessible = true;
  return CUDA_SUCCESS;
}

// --- The pool
// -------------------------------------------------------------------
CUresult FakeMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  FAKE_ENTER("cuMemPoolCreate");
  FAKE_NEED_CONTEXT();
  if (props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s.pool_created) return CUDA_ERROR_NOT_SUPPORTED;  // one is enough here
  s.pool_created = true;
  *pool = kPool;
  return CUDA_SUCCESS;
}

CUresult FakeMemPoolDestroy(CUmemoryPool pool) {
  FAKE_ENTER("cuMemPoolDestroy");
  if (pool != kPool || !s.pool_created) return CUDA_ERROR_INVALID_VALUE;
  s.pool_created = false;
  // Memory of blocks never freed is released only once they are freed, which
  // can no longer happen here: it stays used (leaked).
  s.used -= s.pool_reserved - s.pool_used;
  s.pool_reserved = s.pool_used = 0;
  s.pool_blocks.clear();
  return CUDA_SUCCESS;
}

CUresult FakeMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                 void* value) {
  FAKE_ENTER("cuMemPoolSetAttribute");
  if (pool != kPool || !s.pool_created) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      s.pool_attributes[attr] = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      s.pool_attributes[attr] =
          static_cast<std::uint64_t>(*static_cast<int*>(value));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult FakeMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                 void* value) {
  FAKE_ENTER("cuMemPoolGetAttribute");
  if (pool != kPool || !s.pool_created) return CUDA_ERROR_INVALID_VALUE;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = s.pool_reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = s.pool_used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *out = s.pool_reserved_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *out = s.pool_used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult FakeMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FAKE_ENTER("cuMemPoolTrimTo");
  if (pool != kPool || !s.pool_created) return CUDA_ERROR_INVALID_VALUE;
  const std::uint64_t floor = std::max<std::uint64_t>(
      s.pool_used, RoundUp(keep, o.recommended_granularity));
  if (s.pool_reserved > floor) {
    s.used -= s.pool_reserved - floor;
    s.pool_reserved = floor;
  }
  return CUDA_SUCCESS;
}

CUresult FakeMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t bytes,
                                   CUmemoryPool pool, CUstream) {
  FAKE_ENTER("cuMemAllocFromPoolAsync");
  FAKE_NEED_CONTEXT();
  if (pool != kPool || !s.pool_created || bytes == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Every block takes whole granules; the pool grows by what it lacks.
  const std::uint64_t rounded = RoundUp(bytes, o.recommended_granularity);
  const std::uint64_t idle = s.pool_reserved - s.pool_used;
  if (rounded > idle) {
    const std::uint64_t grow = rounded - idle;
    if (grow > o.total_bytes - s.used) return CUDA_ERROR_OUT_OF_MEMORY;
    s.used += grow;
    s.pool_reserved += grow;
  }
  s.pool_used += rounded;
  s.pool_used_high = std::max(s.pool_used_high, s.pool_used);
  s.pool_reserved_high = std::max(s.pool_reserved_high, s.pool_reserved);
  *ptr = s.NewAddress(bytes, o.recommended_granularity);
  s.pool_blocks[*ptr] = rounded;
  return CUDA_SUCCESS;
}

CUresult FakeMemFreeAsync(CUdeviceptr ptr, CUstream) {
  FAKE_ENTER("cuMemFreeAsync");
  FAKE_NEED_CONTEXT();
  auto it = s.pool_blocks.find(ptr);
  if (it == s.pool_blocks.end()) return CUDA_ERROR_INVALID_VALUE;
  s.pool_used -= it->second;
  s.pool_blocks.erase(it);
  s.bytes.Drop({FakeRegionKind::kAllocation, ptr});
  return CUDA_SUCCESS;
}

// --- Copies between device and host memory
// ----------------------------------------
// cuMemcpyDtoH (`to_host` set) or cuMemcpyHtoD (`from_host` set) of
// [address, address + bytes).
CUresult FakeCopy(const char* name, CUdeviceptr address, size_t bytes,
                  void* to_host, const void* from_host) {
  FAKE_ENTER(name);
  FAKE_NEED_CONTEXT();
  if (to_host == nullptr && from_host == nullptr && bytes != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return s.bytes.Copy(address, bytes, to_host, from_host,
                      [&](std::uint64_t at) { return s.CopyRegion(at); })
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}
CUresult FakeMemcpyDtoH(void* host, CUdeviceptr source, size_t bytes) {
  return FakeCopy("cuMemcpyDtoH", source, bytes, host, nullptr);
}
CUresult FakeMemcpyHtoD(CUdeviceptr destination, const void* host,
                        size_t bytes) {
  return FakeCopy("cuMemcpyHtoD", destination, bytes, nullptr, host);
}

#undef FAKE_ENTER
#undef FAKE_NEED_CONTEXT

// Base name -> entry point.
const std::map<std::string, void*>& EntryPoints() {
  static auto* const kTable = new std::map<std::string, void*>{
      {"cuGetErrorName", reinterpret_cast<void*>(&FakeGetErrorName)},
      {"cuInit", reinterpret_cast<void*>(&FakeInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&FakeDriverGetVersion)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&FakeDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(&FakeDeviceGet)},
      {"cuDeviceGetName", reinterpret_cast<void*>(&FakeDeviceGetName)},
      {"cuDeviceGetAttribute",
       reinterpret_cast<void*>(&FakeDeviceGetAttribute)},
      {"cuDeviceTotalMem", reinterpret_cast<void*>(&FakeDeviceTotalMem)},
      {"cuDevicePrimaryCtxRetain",
       reinterpret_cast<void*>(&FakePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease",
       reinterpret_cast<void*>(&FakePrimaryCtxRelease)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&FakeCtxGetCurrent)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&FakeCtxSetCurrent)},
      {"cuMemGetInfo", reinterpret_cast<void*>(&FakeMemGetInfo)},
      {"cuMemAlloc", reinterpret_cast<void*>(&FakeMemAlloc)},
      {"cuMemFree", reinterpret_cast<void*>(&FakeMemFree)},
      {"cuEventCreate", reinterpret_cast<void*>(&FakeEventCreate)},
      {"cuEventDestroy", reinterpret_cast<void*>(&FakeEventDestroy)},
      {"cuEventRecord", reinterpret_cast<void*>(&FakeEventRecord)},
      {"cuEventQuery", reinterpret_cast<void*>(&FakeEventQuery)},
      {"cuEventSynchronize", reinterpret_cast<void*>(&FakeEventSynchronize)},
      {"cuStreamWaitEvent", reinterpret_cast<void*>(&FakeStreamWaitEvent)},
      {"cuMemGetAllocationGranularity",
       reinterpret_cast<void*>(&FakeMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&FakeMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&FakeMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&FakeMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&FakeMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&FakeMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&FakeMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&FakeMemSetAccess)},
      {"cuMemPoolCreate", reinterpret_cast<void*>(&FakeMemPoolCreate)},
      {"cuMemPoolDestroy", reinterpret_cast<void*>(&FakeMemPoolDestroy)},
      {"cuMemPoolSetAttribute",
       reinterpret_cast<void*>(&FakeMemPoolSetAttribute)},
      {"cuMemPoolGetAttribute",
       reinterpret_cast<void*>(&FakeMemPoolGetAttribute)},
      {"cuMemPoolTrimTo", reinterpret_cast<void*>(&FakeMemPoolTrimTo)},
      {"cuMemAllocFromPoolAsync",
       reinterpret_cast<void*>(&FakeMemAllocFromPoolAsync)},
      {"cuMemFreeAsync", reinterpret_cast<void*>(&FakeMemFreeAsync)},
      {"cuStreamIsCapturing", reinterpret_cast<void*>(&FakeStreamIsCapturing)},
      {"cuThreadExchangeStreamCaptureMode",
       reinterpret_cast<void*>(&FakeThreadExchangeStreamCaptureMode)},
      {"cuMemcpyDtoH", reinterpret_cast<void*>(&FakeMemcpyDtoH)},
      {"cuMemcpyHtoD", reinterpret_cast<void*>(&FakeMemcpyHtoD)},
  };
  static const bool kSharing = [] {
    fake_internal::AddSharingEntryPoints(kTable);
    return true;
  }();
  (void)kSharing;
  return *kTable;
}

}  // namespace

ProcAddressResolver FakeCudaDriver::Resolver() {
  return [this](const char* symbol, void** pfn, int version,
                cuuint64_t flags) -> CUresult {
    {
      absl::MutexLock lock(&mu_);
      state_->requests.push_back({symbol, version, flags});
    }
    *pfn = nullptr;
    // The real driver refuses versions newer than itself.
    if (version > options_.driver_version) return CUDA_ERROR_INVALID_VALUE;
    if (options_.missing_symbols.contains(symbol)) return CUDA_SUCCESS;
    auto it = EntryPoints().find(symbol);
    if (it != EntryPoints().end()) *pfn = it->second;
    return CUDA_SUCCESS;
  };
}

absl::StatusOr<std::shared_ptr<const CudaDriverApi>> FakeCudaDriver::Api() {
  api_.source = "fake driver";
  absl::Status status = ResolveEntryPoints(Resolver(), &api_);
  if (!status.ok()) return status;
  // The table's owner is the fake itself (aliasing), so it stays alive as
  // long as a backend uses the table. Callers hold the fake in a shared_ptr.
  return std::shared_ptr<const CudaDriverApi>(self_.lock(), &api_);
}

}  // namespace gpualloc::cuda::testing
