// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_backend.cc: the CUDA driver-API backend over an
// entry-point table.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/common/capture_mode.h"
#include "backends/common/handle_books.h"
#include "backends/common/host_copy.h"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_vmm.h"
#include "core/status_macros.h"

namespace gpualloc::cuda {
namespace {

using internal::Hex;
using internal::PinnedOn;
using internal::ScopedContext;

CUstream ToCuStream(Stream stream) {
  return reinterpret_cast<CUstream>(stream.handle);
}

CUevent ToCuEvent(EventHandle event) {
  return reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(event));
}

constexpr common::VendorCaptureModes<CUstreamCaptureMode> kCaptureModes = {
    CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CU_STREAM_CAPTURE_MODE_RELAXED};
constexpr common::VendorCaptureStatuses<CUstreamCaptureStatus>
    kCaptureStatuses = {CU_STREAM_CAPTURE_STATUS_NONE,
                        CU_STREAM_CAPTURE_STATUS_ACTIVE,
                        CU_STREAM_CAPTURE_STATUS_INVALIDATED};

EventHandle FromCuEvent(CUevent event) {
  return static_cast<EventHandle>(reinterpret_cast<std::uintptr_t>(event));
}

// cuEventCreate of an event without timing (the context current).
absl::StatusOr<EventHandle> NewEvent(const CudaDriverApi& api) {
  CUevent event = nullptr;
  const CUresult r = api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    return CudaError(api, "cuEventCreate(CU_EVENT_DISABLE_TIMING)", r);
  }
  return FromCuEvent(event);
}

}  // namespace

namespace internal {

ScopedContext::ScopedContext(const CudaDriverApi& api, CUcontext context,
                             int ordinal)
    : ScopedCurrent(
          context,
          [&api](CUcontext* current) {
            return CudaError(api, "cuCtxGetCurrent",
                             api.cuCtxGetCurrent(current));
          },
          [&api, ordinal](CUcontext wanted) {
            return CudaError(
                api,
                absl::StrCat("cuCtxSetCurrent(primary context of device ",
                             ordinal, ")"),
                api.cuCtxSetCurrent(wanted));
          }) {}

absl::Status Explain(const CudaDriverApi& api, absl::Status status) {
  if (!absl::IsResourceExhausted(status)) return status;
  std::size_t free = 0, total = 0;
  if (api.cuMemGetInfo(&free, &total) != CUDA_SUCCESS) return status;
  return absl::ResourceExhaustedError(
      absl::StrCat(status.message(), "; the device has ", free, " of ", total,
                   " bytes free"));
}

absl::Status TooBig(absl::string_view call, std::uint64_t bytes,
                    std::uint64_t total_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      call, "(", bytes, " bytes): more than the device's total memory (",
      total_bytes, " bytes)"));
}

}  // namespace internal

class CudaBackend::Impl {
 public:
  Impl(std::shared_ptr<const CudaDriverApi> api, int ordinal)
      : api_(std::move(api)), ordinal_(ordinal), books_("", ordinal) {}

  ~Impl() {
    if (context_ == nullptr) return;  // nothing was retained
    // Best effort: errors are ignored (at process exit the driver may already
    // be shutting down). Returning memory needs the context current; the
    // retain is given back in any case (cuDevicePrimaryCtxRelease needs no
    // current context), also when Init failed after the retain.
    {
      const ScopedContext current = MakeCurrent();
      if (current.status().ok()) ReturnEverything();
    }
    api_->cuDevicePrimaryCtxRelease(device_);
  }

  // What the owner left behind goes back to the device (the destructor's
  // part that needs the context).
  void ReturnEverything() {
    absl::MutexLock lock(&mu_);
    const common::HandleBooks<std::uint64_t>::Leftovers left = books_.TakeAll();
    for (const auto& [address, bytes] : left.blocks) {
      api_->cuMemFree(static_cast<CUdeviceptr>(address));
    }
    if (vmm_ != nullptr) vmm_->ReturnEverything();
    for (EventHandle e : left.events) api_->cuEventDestroy(ToCuEvent(e));
    if (pool_ != nullptr) {
      // Blocks still out are freed on the default stream; cuMemPoolDestroy
      // returns the pool's memory once those frees complete.
      for (DeviceAddress address : left.pool_blocks) {
        api_->cuMemFreeAsync(static_cast<CUdeviceptr>(address), nullptr);
      }
      api_->cuMemPoolDestroy(pool_);
    }
  }

  absl::Status Init() {
    GPUALLOC_RETURN_IF_ERROR(FindDevice());
    GPUALLOC_ASSIGN_OR_RETURN(const DeviceFacts facts, ReadDeviceFacts());
    choice_ = ChooseNvidiaProfile(facts.name, facts.major, facts.minor,
                                  facts.total_bytes);
    if (choice_.profile == nullptr) {
      return absl::InternalError(absl::StrCat("no architecture profile for \"",
                                              facts.name,
                                              "\": ", choice_.reason));
    }
    info_.profile = std::string(choice_.profile->name);
    info_.profile_reason = choice_.reason;

    CUcontext context = nullptr;
    const CUresult r = api_->cuDevicePrimaryCtxRetain(&context, device_);
    if (r != CUDA_SUCCESS) {
      return CudaError(*api_, "cuDevicePrimaryCtxRetain", r);
    }
    context_ = context;
    return InContext<absl::Status>([&]() -> absl::Status {
      DescribeDevice(facts);
      if (info_.capabilities.virtual_memory) {
        GPUALLOC_RETURN_IF_ERROR(ReadGranularity());
      }
      absl::MutexLock lock(&mu_);
      vmm_ =
          std::make_unique<CudaVmm>(api_, device_, context_, ordinal_,
                                    info_.total_bytes, info_.min_granularity);
      return absl::OkStatus();
    });
  }

  // cuInit, and device `ordinal_` (Unavailable when the driver lacks it).
  absl::Status FindDevice() {
    const CudaDriverApi& api = *api_;
    CUresult r = api.cuInit(0);
    if (r != CUDA_SUCCESS) return CudaError(api, "cuInit(0)", r);
    int count = 0;
    r = api.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) return CudaError(api, "cuDeviceGetCount", r);
    if (ordinal_ >= count) {
      return absl::UnavailableError(absl::StrCat(
          "CUDA device ", ordinal_, " does not exist: the driver sees ", count,
          " device", count == 1 ? "" : "s"));
    }
    r = api.cuDeviceGet(&device_, ordinal_);
    if (r != CUDA_SUCCESS) {
      return CudaError(api, absl::StrCat("cuDeviceGet(", ordinal_, ")"), r);
    }
    return absl::OkStatus();
  }

  // What the driver says of the device before a profile is chosen.
  struct DeviceFacts {
    std::string name;
    int major = 0, minor = 0, vmm = 0, pools = 0;
    std::uint64_t total_bytes = 0;
  };

  // The device's name, attributes and memory.
  absl::StatusOr<DeviceFacts> ReadDeviceFacts() const {
    const CudaDriverApi& api = *api_;
    DeviceFacts facts;
    char name[256] = {};
    CUresult r = api.cuDeviceGetName(name, sizeof(name) - 1, device_);
    if (r != CUDA_SUCCESS) return CudaError(api, "cuDeviceGetName", r);
    facts.name = name;
    const struct {
      CUdevice_attribute attribute;
      int* value;
      absl::string_view name;
    } attributes[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &facts.major,
         "COMPUTE_CAPABILITY_MAJOR"},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &facts.minor,
         "COMPUTE_CAPABILITY_MINOR"},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &facts.vmm,
         "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"},
        {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, &facts.pools,
         "MEMORY_POOLS_SUPPORTED"},
    };
    for (const auto& a : attributes) {
      r = api.cuDeviceGetAttribute(a.value, a.attribute, device_);
      if (r != CUDA_SUCCESS) {
        return CudaError(api,
                         absl::StrCat("cuDeviceGetAttribute(", a.name, ")"), r);
      }
    }
    std::size_t total = 0;
    r = api.cuDeviceTotalMem(&total, device_);
    if (r != CUDA_SUCCESS) return CudaError(api, "cuDeviceTotalMem", r);
    facts.total_bytes = total;
    return facts;
  }

  // info() from the facts and the chosen profile (the context current).
  void DescribeDevice(const DeviceFacts& facts) {
    const CudaDriverApi& api = *api_;
    const ArchProfile& profile = *choice_.profile;
    info_.backend = "cuda";
    info_.vendor = Vendor::kNvidia;
    info_.name = facts.name;
    info_.arch_id = ArchIdFor(facts.major, facts.minor);
    info_.ordinal = ordinal_;
    info_.total_bytes = facts.total_bytes;
    info_.min_granularity = profile.min_granularity;
    info_.recommended_granularity = profile.recommended_granularity;
    info_.allocation_alignment = profile.allocation_alignment;
    info_.page_sizes = profile.page_sizes;
    info_.driver_version = CudaVersionString(api.driver_version);
    info_.capabilities.streams = true;
    info_.capabilities.host_accessible = false;
    info_.capabilities.stream_ordered_pools =
        api.has_pools() && facts.pools != 0;
    info_.capabilities.virtual_memory =
        api.has_virtual_memory() && facts.vmm != 0;
    info_.capabilities.graph_capture = api.has_capture();
    info_.capabilities.host_copy = api.has_host_copy();
  }

  // The driver's minimum and recommended granularity (virtual memory on; the
  // context current): powers of two, the minimum dividing the recommended.
  absl::Status ReadGranularity() {
    const CudaDriverApi& api = *api_;
    const CUmemAllocationProp prop = PinnedOn(device_);
    std::size_t minimum = 0, recommended = 0;
    CUresult r = api.cuMemGetAllocationGranularity(
        &minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r == CUDA_SUCCESS) {
      r = api.cuMemGetAllocationGranularity(
          &recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    }
    if (r != CUDA_SUCCESS) {
      return CudaError(api, "cuMemGetAllocationGranularity", r);
    }
    const auto power_of_two = [](std::size_t x) {
      return x != 0 && (x & (x - 1)) == 0;
    };
    if (!power_of_two(minimum) || !power_of_two(recommended) ||
        recommended % minimum != 0) {
      return absl::InternalError(absl::StrCat(
          "cuMemGetAllocationGranularity reported minimum ", minimum,
          " and recommended ", recommended,
          " bytes: not powers of two with the minimum dividing the "
          "recommended"));
    }
    info_.min_granularity = minimum;
    info_.recommended_granularity = recommended;
    return absl::OkStatus();
  }

  const DeviceInfo& info() const { return info_; }
  const ProfileChoice& choice() const { return choice_; }
  const CudaDriverApi& api() const { return *api_; }
  // Set once by Init, before the backend is handed out.
  CudaVmm& vmm() ABSL_NO_THREAD_SAFETY_ANALYSIS { return *vmm_; }

  // The primary context, current on the calling thread until the returned
  // guard goes out of scope (check its status()).
  ScopedContext MakeCurrent() const {
    return ScopedContext(*api_, context_, ordinal_);
  }

  // The per-call wrapper: runs `body` with the primary context current, or
  // answers why it could not be made current.
  template <typename T, typename Body>
  T InContext(Body&& body) const {
    return internal::InContext<T>(*api_, context_, ordinal_,
                                  std::forward<Body>(body));
  }

  absl::Status Explain(absl::Status status) const {
    return internal::Explain(*api_, std::move(status));
  }
  absl::Status TooBig(absl::string_view call, std::uint64_t bytes) const {
    return internal::TooBig(call, bytes, info_.total_bytes);
  }

  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate(0 bytes)");
    if (bytes > info_.total_bytes) return TooBig("Allocate", bytes);
    return InContext<absl::StatusOr<DeviceAddress>>(
        [&]() -> absl::StatusOr<DeviceAddress> {
          CUdeviceptr ptr = 0;
          const CUresult r = api_->cuMemAlloc(&ptr, bytes);
          if (r != CUDA_SUCCESS) {
            return Explain(CudaError(
                *api_, absl::StrCat("cuMemAlloc(", bytes, " bytes)"), r));
          }
          books_.AddBlock(ptr, bytes);
          return static_cast<DeviceAddress>(ptr);
        });
  }

  absl::Status Free(DeviceAddress address) {
    return books_.ReleaseBlock(address, [&](std::uint64_t) {
      return InContext<absl::Status>([&] {
        return CudaError(*api_, absl::StrCat("cuMemFree(", Hex(address), ")"),
                         api_->cuMemFree(static_cast<CUdeviceptr>(address)));
      });
    });
  }

  // --- Events ---------------------------------------------------------------
  absl::StatusOr<EventHandle> CreateEvent() {
    absl::StatusOr<EventHandle> event =
        InContext<absl::StatusOr<EventHandle>>([&] { return NewEvent(*api_); });
    if (event.ok()) books_.AddEvent(*event);
    return event;
  }

  absl::Status DestroyEvent(EventHandle event) {
    return books_.ReleaseEvent(event, [&] {
      return InContext<absl::Status>([&] {
        return CudaError(*api_,
                         absl::StrCat("cuEventDestroy(", Hex(event), ")"),
                         api_->cuEventDestroy(ToCuEvent(event)));
      });
    });
  }

  absl::Status RecordEvent(EventHandle event, Stream stream) {
    GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("RecordEvent", event));
    return InContext<absl::Status>([&]() -> absl::Status {
      return CudaError(
          *api_,
          absl::StrCat("cuEventRecord(", Hex(event), ", stream ",
                       Hex(stream.handle), ")"),
          api_->cuEventRecord(ToCuEvent(event), ToCuStream(stream)));
    });
  }

  absl::StatusOr<bool> QueryEvent(EventHandle event) {
    GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("QueryEvent", event));
    return InContext<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
      const CUresult r = api_->cuEventQuery(ToCuEvent(event));
      if (r == CUDA_SUCCESS) return true;
      if (r == CUDA_ERROR_NOT_READY) return false;
      return CudaError(*api_, absl::StrCat("cuEventQuery(", Hex(event), ")"),
                       r);
    });
  }

  absl::Status StreamWaitEvent(Stream stream, EventHandle event) {
    GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("StreamWaitEvent", event));
    return InContext<absl::Status>([&]() -> absl::Status {
      return CudaError(
          *api_,
          absl::StrCat("cuStreamWaitEvent(stream ", Hex(stream.handle), ", ",
                       Hex(event), ")"),
          api_->cuStreamWaitEvent(ToCuStream(stream), ToCuEvent(event), 0));
    });
  }

  absl::Status SynchronizeEvent(EventHandle event) {
    GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("SynchronizeEvent", event));
    return InContext<absl::Status>([&]() -> absl::Status {
      return CudaError(*api_,
                       absl::StrCat("cuEventSynchronize(", Hex(event), ")"),
                       api_->cuEventSynchronize(ToCuEvent(event)));
    });
  }

  // --- Graph capture
  // ----------------------------------------------------------
  absl::StatusOr<bool> IsCapturing(Stream stream) {
    return InContext<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
      const std::string call =
          absl::StrCat("cuStreamIsCapturing(stream ", Hex(stream.handle), ")");
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      const CUresult r = api_->cuStreamIsCapturing(ToCuStream(stream), &status);
      if (r != CUDA_SUCCESS) return CudaError(*api_, call, r);
      return common::IsCaptureUnderway(&status, kCaptureStatuses, call);
    });
  }

  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode) {
    return InContext<absl::StatusOr<CaptureMode>>(
        [&]() -> absl::StatusOr<CaptureMode> {
          CUstreamCaptureMode exchanged =
              common::ToVendorMode(mode, kCaptureModes);
          const CUresult r =
              api_->cuThreadExchangeStreamCaptureMode(&exchanged);
          if (r != CUDA_SUCCESS) {
            return CudaError(*api_, "cuThreadExchangeStreamCaptureMode", r);
          }
          return common::FromVendorMode(&exchanged, kCaptureModes,
                                        "cuThreadExchangeStreamCaptureMode");
        });
  }

  // --- Copies between device and host memory -------------------------------
  // cuMemcpyDtoH or cuMemcpyHtoD (`call`, made by `copy`) of `bytes` at
  // `device`. A copy of 0 bytes, or one with a null host pointer, never
  // reaches the driver.
  template <typename Copy>
  absl::Status HostCopy(absl::string_view call, DeviceAddress device,
                        const void* host, std::uint64_t bytes,
                        Copy copy) const {
    if (bytes == 0 || host == nullptr) {
      return common::CheckHostPointer(call, device, host, bytes);
    }
    return InContext<absl::Status>([&] {
      return CudaError(
          *api_, absl::StrCat(call, "(", Hex(device), ", ", bytes, " bytes)"),
          copy());
    });
  }

  // --- The stream-ordered pool
  // ------------------------------------------------
  absl::StatusOr<CUmemoryPool> Pool() {
    absl::MutexLock lock(&mu_);
    if (pool_ != nullptr) return pool_;
    return InContext<absl::StatusOr<CUmemoryPool>>(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<CUmemoryPool> {
          CUmemPoolProps props = {};
          props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
          props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
          props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
          props.location.id = device_;
          CUmemoryPool pool = nullptr;
          const CUresult r = api_->cuMemPoolCreate(&pool, &props);
          if (r != CUDA_SUCCESS) return CudaError(*api_, "cuMemPoolCreate", r);
          pool_ = pool;
          return pool_;
        });
  }

  absl::Status ConfigurePool(const PoolOptions& options) {
    GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
    cuuint64_t threshold = options.release_threshold;
    CUresult r = api_->cuMemPoolSetAttribute(
        pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (r != CUDA_SUCCESS) {
      return CudaError(*api_,
                       absl::StrCat("cuMemPoolSetAttribute(RELEASE_THRESHOLD, ",
                                    threshold, ")"),
                       r);
    }
    const struct {
      CUmemPool_attribute attribute;
      bool on;
      absl::string_view name;
    } reuse[] = {
        {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
         options.reuse.follow_event_dependencies,
         "REUSE_FOLLOW_EVENT_DEPENDENCIES"},
        {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, options.reuse.opportunistic,
         "REUSE_ALLOW_OPPORTUNISTIC"},
        {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
         options.reuse.internal_dependencies,
         "REUSE_ALLOW_INTERNAL_DEPENDENCIES"},
    };
    for (const auto& rule : reuse) {
      int value = rule.on ? 1 : 0;
      r = api_->cuMemPoolSetAttribute(pool, rule.attribute, &value);
      if (r != CUDA_SUCCESS) {
        return CudaError(
            *api_,
            absl::StrCat("cuMemPoolSetAttribute(", rule.name, ", ", value, ")"),
            r);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) {
    if (bytes == 0) return absl::InvalidArgumentError("PoolAllocate(0 bytes)");
    if (bytes > info_.total_bytes) return TooBig("PoolAllocate", bytes);
    GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
    return InContext<absl::StatusOr<DeviceAddress>>(
        [&]() -> absl::StatusOr<DeviceAddress> {
          CUdeviceptr ptr = 0;
          const CUresult r = api_->cuMemAllocFromPoolAsync(&ptr, bytes, pool,
                                                           ToCuStream(stream));
          if (r != CUDA_SUCCESS) {
            return Explain(CudaError(
                *api_,
                absl::StrCat("cuMemAllocFromPoolAsync(", bytes,
                             " bytes, stream ", Hex(stream.handle), ")"),
                r));
          }
          books_.AddPoolBlock(ptr);
          return static_cast<DeviceAddress>(ptr);
        });
  }

  absl::Status PoolFree(DeviceAddress address, Stream stream) {
    return books_.ReleasePoolBlock(address, [&] {
      return InContext<absl::Status>([&] {
        return CudaError(*api_,
                         absl::StrCat("cuMemFreeAsync(", Hex(address),
                                      ", stream ", Hex(stream.handle), ")"),
                         api_->cuMemFreeAsync(static_cast<CUdeviceptr>(address),
                                              ToCuStream(stream)));
      });
    });
  }

  absl::Status PoolTrim(std::uint64_t keep_bytes) {
    GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
    return InContext<absl::Status>([&]() -> absl::Status {
      return CudaError(*api_,
                       absl::StrCat("cuMemPoolTrimTo(", keep_bytes, " bytes)"),
                       api_->cuMemPoolTrimTo(pool, keep_bytes));
    });
  }

  absl::StatusOr<PoolUsage> GetPoolUsage() {
    GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
    PoolUsage usage;
    const struct {
      CUmemPool_attribute attribute;
      std::uint64_t* value;
      absl::string_view name;
    } fields[] = {
        {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &usage.reserved,
         "RESERVED_MEM_CURRENT"},
        {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &usage.used, "USED_MEM_CURRENT"},
        {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &usage.peak_reserved,
         "RESERVED_MEM_HIGH"},
        {CU_MEMPOOL_ATTR_USED_MEM_HIGH, &usage.peak_used, "USED_MEM_HIGH"},
    };
    for (const auto& f : fields) {
      cuuint64_t value = 0;
      const CUresult r = api_->cuMemPoolGetAttribute(pool, f.attribute, &value);
      if (r != CUDA_SUCCESS) {
        return CudaError(
            *api_, absl::StrCat("cuMemPoolGetAttribute(", f.name, ")"), r);
      }
      *f.value = value;
    }
    return usage;
  }

 private:
  const std::shared_ptr<const CudaDriverApi> api_;
  const int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;  // the primary context, retained
  DeviceInfo info_;
  ProfileChoice choice_;

  // Plain allocations (and their sizes), pool blocks and events handed out.
  common::HandleBooks<std::uint64_t> books_;

  absl::Mutex mu_;
  CUmemoryPool pool_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Virtual memory, once the granularity is known (Init).
  std::unique_ptr<CudaVmm> vmm_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::shared_ptr<CudaBackend>> CudaBackend::Create(
    std::shared_ptr<const CudaDriverApi> api, int ordinal) {
  if (api == nullptr) {
    return absl::InvalidArgumentError("CudaBackend::Create: no driver table");
  }
  if (ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ordinal ", ordinal, " is negative"));
  }
  const std::string source = api->source;
  auto impl = std::make_unique<Impl>(std::move(api), ordinal);
  if (absl::Status s = impl->Init(); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("backend=cuda (", source, ", device ", ordinal,
                               "): ", s.message()));
  }
  return std::shared_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

const DeviceInfo& CudaBackend::info() const { return impl_->info(); }
const ProfileChoice& CudaBackend::profile_choice() const {
  return impl_->choice();
}
const CudaDriverApi& CudaBackend::api() const { return impl_->api(); }

absl::StatusOr<std::uint64_t> CudaBackend::FreeBytes() {
  const CudaDriverApi& api = impl_->api();
  return impl_->InContext<absl::StatusOr<std::uint64_t>>(
      [&]() -> absl::StatusOr<std::uint64_t> {
        std::size_t free = 0, total = 0;
        const CUresult r = api.cuMemGetInfo(&free, &total);
        if (r != CUDA_SUCCESS) return CudaError(api, "cuMemGetInfo", r);
        return free;
      });
}
absl::StatusOr<DeviceAddress> CudaBackend::Allocate(std::uint64_t bytes) {
  return impl_->Allocate(bytes);
}
absl::Status CudaBackend::Free(DeviceAddress address) {
  return impl_->Free(address);
}

absl::StatusOr<EventHandle> CudaBackend::CreateEvent() {
  return impl_->CreateEvent();
}
absl::Status CudaBackend::DestroyEvent(EventHandle event) {
  return impl_->DestroyEvent(event);
}
absl::Status CudaBackend::RecordEvent(EventHandle event, Stream stream) {
  return impl_->RecordEvent(event, stream);
}
absl::StatusOr<bool> CudaBackend::QueryEvent(EventHandle event) {
  return impl_->QueryEvent(event);
}
absl::Status CudaBackend::StreamWaitEvent(Stream stream, EventHandle event) {
  return impl_->StreamWaitEvent(stream, event);
}
absl::Status CudaBackend::SynchronizeEvent(EventHandle event) {
  return impl_->SynchronizeEvent(event);
}

absl::StatusOr<bool> CudaBackend::IsCapturing(Stream stream) {
  if (!info().capabilities.graph_capture) return Backend::IsCapturing(stream);
  return impl_->IsCapturing(stream);
}
absl::StatusOr<CaptureMode> CudaBackend::ExchangeCaptureMode(CaptureMode mode) {
  if (!info().capabilities.graph_capture) {
    return Backend::ExchangeCaptureMode(mode);
  }
  return impl_->ExchangeCaptureMode(mode);
}

absl::Status CudaBackend::ConfigurePool(const PoolOptions& options) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::ConfigurePool(options);
  return impl_->ConfigurePool(options);
}
absl::StatusOr<DeviceAddress> CudaBackend::PoolAllocate(std::uint64_t bytes,
                                                        Stream stream) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolAllocate(bytes, stream);
  return impl_->PoolAllocate(bytes, stream);
}
absl::Status CudaBackend::PoolFree(DeviceAddress address, Stream stream) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolFree(address, stream);
  return impl_->PoolFree(address, stream);
}
absl::Status CudaBackend::PoolTrim(std::uint64_t keep_bytes) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolTrim(keep_bytes);
  return impl_->PoolTrim(keep_bytes);
}
absl::StatusOr<PoolUsage> CudaBackend::GetPoolUsage() {
  if (!info().capabilities.stream_ordered_pools) return Backend::GetPoolUsage();
  return impl_->GetPoolUsage();
}

absl::StatusOr<DeviceAddress> CudaBackend::ReserveAddress(
    std::uint64_t bytes, std::uint64_t alignment) {
  if (!info().capabilities.virtual_memory)
    return Backend::ReserveAddress(bytes, alignment);
  return impl_->vmm().ReserveAddress(bytes, alignment);
}
absl::Status CudaBackend::FreeAddress(DeviceAddress address,
                                      std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::FreeAddress(address, bytes);
  return impl_->vmm().FreeAddress(address, bytes);
}
absl::StatusOr<PhysicalHandle> CudaBackend::CreatePhysical(
    std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::CreatePhysical(bytes);
  return impl_->vmm().CreatePhysical(bytes);
}
absl::Status CudaBackend::ReleasePhysical(PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory)
    return Backend::ReleasePhysical(handle);
  return impl_->vmm().ReleasePhysical(handle);
}
absl::Status CudaBackend::Map(DeviceAddress address, std::uint64_t bytes,
                              PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory)
    return Backend::Map(address, bytes, handle);
  return impl_->vmm().Map(address, bytes, handle);
}
absl::Status CudaBackend::Unmap(DeviceAddress address, std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::Unmap(address, bytes);
  return impl_->vmm().Unmap(address, bytes);
}
absl::Status CudaBackend::SetAccess(DeviceAddress address,
                                    std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::SetAccess(address, bytes);
  return impl_->vmm().SetAccess(address, bytes);
}

absl::Status CudaBackend::CopyToHost(void* host, DeviceAddress source,
                                     std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return Backend::CopyToHost(host, source, bytes);
  }
  return impl_->HostCopy("cuMemcpyDtoH", source, host, bytes, [&] {
    return api().cuMemcpyDtoH(host, static_cast<CUdeviceptr>(source), bytes);
  });
}
absl::Status CudaBackend::CopyFromHost(DeviceAddress destination,
                                       const void* host, std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return Backend::CopyFromHost(destination, host, bytes);
  }
  return impl_->HostCopy("cuMemcpyHtoD", destination, host, bytes, [&] {
    return api().cuMemcpyHtoD(static_cast<CUdeviceptr>(destination), host,
                              bytes);
  });
}

}  // namespace gpualloc::cuda
