// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_probe.cc: how the CUDA backend is created: cuInit, the
// device, its facts and architecture profile, the primary context, the
// granularity and the sharing and host-memory capabilities behind info().
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_vmm.h"
#include "core/status_macros.h"

namespace gpualloc::cuda {

using internal::PinnedOn;

absl::Status CudaBackend::Impl::Init() {
  GPUALLOC_RETURN_IF_ERROR(FindDevice());
  GPUALLOC_ASSIGN_OR_RETURN(const DeviceFacts facts, ReadDeviceFacts());
  choice_ = ChooseNvidiaProfile(facts.name, facts.major, facts.minor,
                                facts.total_bytes);
  if (choice_.profile == nullptr) {
    return absl::InternalError(absl::StrCat(
        "no architecture profile for \"", facts.name, "\": ", choice_.reason));
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
    ProbeSharing();
    ProbeCounters();
    absl::MutexLock lock(&mu_);
    vmm_ = std::make_unique<CudaVmm>(api_, device_, context_, ordinal_,
                                     info_.total_bytes, info_.min_granularity,
                                     info_.capabilities.shareable_handles);
    return absl::OkStatus();
  });
}

// cuInit, and device `ordinal_` (Unavailable when the driver lacks it).
absl::Status CudaBackend::Impl::FindDevice() {
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

// The device's name, attributes and memory.
absl::StatusOr<CudaBackend::Impl::DeviceFacts>
CudaBackend::Impl::ReadDeviceFacts() const {
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
      return CudaError(api, absl::StrCat("cuDeviceGetAttribute(", a.name, ")"),
                       r);
    }
  }
  std::size_t total = 0;
  r = api.cuDeviceTotalMem(&total, device_);
  if (r != CUDA_SUCCESS) return CudaError(api, "cuDeviceTotalMem", r);
  facts.total_bytes = total;
  return facts;
}

// info() from the facts and the chosen profile (the context current).
void CudaBackend::Impl::DescribeDevice(const DeviceFacts& facts) {
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
  info_.capabilities.stream_ordered_pools = api.has_pools() && facts.pools != 0;
  info_.capabilities.virtual_memory =
      api.has_virtual_memory() && facts.vmm != 0;
  info_.capabilities.graph_capture = api.has_capture();
  info_.capabilities.host_copy = api.has_host_copy();
}

namespace {

// "<group> (<what is missing>)" for a capability whose entry points did not
// resolve: the first of `names` in api.missing, else the group.
std::string MissingEntryPoints(const CudaDriverApi& api,
                               std::initializer_list<absl::string_view> names) {
  for (const std::string& m : api.missing) {
    for (absl::string_view name : names) {
      if (absl::StartsWith(m, absl::StrCat(name, " "))) {
        return absl::StrCat("the driver lacks ", m);
      }
    }
  }
  return absl::StrCat("the driver lacks ", *names.begin());
}

// An attribute the sharing capabilities depend on: its value, or why it could
// not be read (an older driver does not know it).
absl::StatusOr<int> ReadAttribute(const CudaDriverApi& api, CUdevice device,
                                  CUdevice_attribute attribute,
                                  absl::string_view name) {
  int value = 0;
  const CUresult r = api.cuDeviceGetAttribute(&value, attribute, device);
  if (r != CUDA_SUCCESS) {
    return CudaError(api, absl::StrCat("cuDeviceGetAttribute(", name, ")"), r);
  }
  return value;
}

}  // namespace

void CudaBackend::Impl::ProbeSharing() {
  const CudaDriverApi& api = *api_;
  Capabilities& c = info_.capabilities;
  // IPC handles need unified addressing, and exist on Linux only.
  std::string ipc_why;
#ifdef __linux__
  if (!api.has_ipc()) {
    ipc_why = MissingEntryPoints(
        api, {"cuIpcGetMemHandle", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle",
              "cuMemGetAddressRange"});
  } else if (absl::StatusOr<int> unified = ReadAttribute(
                 api, device_, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
                 "UNIFIED_ADDRESSING");
             !unified.ok()) {
    ipc_why = std::string(unified.status().message());
  } else if (*unified == 0) {
    ipc_why =
        "the device does not share a unified address space "
        "(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING is 0)";
  }
#else
  ipc_why = "CUDA IPC handles exist on Linux only";
#endif
  c.ipc_handles = ipc_why.empty();
  notes_.push_back(ipc_why.empty()
                       ? "ipc_handles on (cuIpcGetMemHandle, unified "
                         "addressing)"
                       : absl::StrCat("ipc_handles off: ", ipc_why));

  std::string share_why;
  if (!c.virtual_memory) {
    share_why = "it needs virtual_memory, which is off";
  } else if (!api.has_shareable_handles()) {
    share_why = MissingEntryPoints(
        api, {"cuMemRetainAllocationHandle", "cuMemExportToShareableHandle",
              "cuMemImportFromShareableHandle"});
  } else if (
      absl::StatusOr<int> fd = ReadAttribute(
          api, device_,
          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
          "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED");
      !fd.ok()) {
    share_why = std::string(fd.status().message());
  } else if (*fd == 0) {
    share_why =
        "the device cannot export memory as a POSIX file descriptor "
        "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is "
        "0)";
  }
  c.shareable_handles = share_why.empty();
  notes_.push_back(share_why.empty()
                       ? "shareable_handles on (POSIX file descriptors; "
                         "CreatePhysical requests them)"
                       : absl::StrCat("shareable_handles off: ", share_why));

  c.host_memory = api.has_host_memory();
  notes_.push_back(
      c.host_memory
          ? "host_memory on (cuMemHostAlloc, CU_MEMHOSTALLOC_PORTABLE)"
          : absl::StrCat(
                "host_memory off: ",
                MissingEntryPoints(api, {"cuMemHostAlloc", "cuMemFreeHost"})));
}

// The driver's minimum and recommended granularity (virtual memory on; the
// context current): powers of two, the minimum dividing the recommended.
absl::Status CudaBackend::Impl::ReadGranularity() {
  const CudaDriverApi& api = *api_;
  const CUmemAllocationProp prop = PinnedOn(device_);
  std::size_t minimum = 0, recommended = 0;
  CUresult r = api.cuMemGetAllocationGranularity(
      &minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) {
    r = api.cuMemGetAllocationGranularity(&recommended, &prop,
                                          CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  }
  if (r != CUDA_SUCCESS) {
    return CudaError(api, "cuMemGetAllocationGranularity", r);
  }
  const auto power_of_two = [](std::size_t x) {
    return x != 0 && (x & (x - 1)) == 0;
  };
  if (!power_of_two(minimum) || !power_of_two(recommended) ||
      recommended % minimum != 0) {
    return absl::InternalError(
        absl::StrCat("cuMemGetAllocationGranularity reported minimum ", minimum,
                     " and recommended ", recommended,
                     " bytes: not powers of two with the minimum dividing the "
                     "recommended"));
  }
  info_.min_granularity = minimum;
  info_.recommended_granularity = recommended;
  return absl::OkStatus();
}

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

}  // namespace gpualloc::cuda
