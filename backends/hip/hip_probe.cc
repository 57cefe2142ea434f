// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_probe.cc: what the HIP backend learns of its device when
// it is created: the architecture profile, the device count, and the probes
// of stream-ordered pools and virtual memory behind info().
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"
#include "core/lock.h"
#include "core/status_macros.h"
#include "gpualloc/arch/profiles.h"

namespace gpualloc::hip {
namespace {

constexpr std::uint64_t kKiB = std::uint64_t{1} << 10;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// hipMallocAsync and hipMallocFromPoolAsync report out of memory as success
// with a null pointer before ROCm 6.0.
constexpr int kPoolNullOnOomUntil = 60000000;
// hipMemAddressReserve: a no-op in 5.2, a null reservation in 5.3-6.0.
constexpr int kVirtualMemoryWorksFrom = 60100000;

absl::string_view ProcessorName(absl::string_view gcn_arch_name) {
  return gcn_arch_name.substr(0, gcn_arch_name.find(':'));
}

}  // namespace

const ArchProfile& ChooseAmdProfile(absl::string_view gcn_arch_name,
                                    std::uint64_t total_bytes,
                                    std::string* why) {
  const absl::string_view processor = ProcessorName(gcn_arch_name);
  absl::StatusOr<const ArchProfile*> found =
      FindArchProfile(Vendor::kAmd, processor, total_bytes);
  const ArchProfile* profile = found.ok() ? *found : nullptr;
  if (profile == nullptr) {
    // Unreachable while the table has generic-amd; never crash on it.
    profile = *FindArchProfile("generic-amd");
  }
  if (why != nullptr) {
    if (gcn_arch_name.empty()) {
      *why = absl::StrCat("profile ", profile->name,
                          ": the runtime did not report gcnArchName");
    } else if (profile->arch_ids.empty()) {
      *why = absl::StrCat("profile ", profile->name, ": gcnArchName \"",
                          gcn_arch_name, "\" (processor ", processor,
                          ") is not in the profile table");
    } else {
      *why = absl::StrCat("profile ", profile->name, " (", profile->description,
                          "): gcnArchName \"", gcn_arch_name, "\" (processor ",
                          processor, "), ", total_bytes, " bytes");
    }
  }
  return *profile;
}

absl::StatusOr<int> HipDeviceCountWith(const HipApi& api) {
  hipError_t e = api.Init(0);
  if (e != hipSuccess) {
    return absl::UnavailableError(absl::StrCat(
        api.library, ": ", HipErrorStatus(api, e, "hipInit(0)").message()));
  }
  int count = 0;
  e = api.GetDeviceCount(&count);
  if (e != hipSuccess || count <= 0) {
    return absl::UnavailableError(absl::StrCat(
        api.library, ": no HIP device: ",
        e != hipSuccess ? HipErrorStatus(api, e, "hipGetDeviceCount").message()
                        : std::string("hipGetDeviceCount found 0 devices")));
  }
  return count;
}

absl::Status HipBackend::Probe() {
  const HipApi& api = *api_;
  GPUALLOC_ASSIGN_OR_RETURN(const int count, HipDeviceCountWith(api));
  if (ordinal_ >= count) {
    return absl::UnavailableError(
        absl::StrCat("HIP device ", ordinal_, " does not exist: ", api.library,
                     " reports ", count, " device", count == 1 ? "" : "s"));
  }
  // The device is current for the probe (the reservation below is made on
  // it); the caller's device is back when Probe returns.
  const internal::ScopedDevice device(api, ordinal_);
  if (!device.status().ok()) return device.status();
  int driver = 0;
  hipError_t e = api.RuntimeGetVersion(&runtime_version_);
  if (e != hipSuccess) return HipErrorStatus(api, e, "hipRuntimeGetVersion");
  e = api.DriverGetVersion(&driver);
  if (e != hipSuccess) return HipErrorStatus(api, e, "hipDriverGetVersion");

  GPUALLOC_ASSIGN_OR_RETURN(const DeviceFacts facts, ReadDeviceFacts());
  DescribeDevice(facts, driver);
  ProbePools();
  ProbeVirtualMemory();
  ProbeSharing();
  ProbeCounters();
  // The virtual-memory books and rules, at the granularity just decided.
  core::LockGuard guard(&state_->mu);
  state_->vmm = std::make_unique<common::VmmLedger>(info_.min_granularity);
  return absl::OkStatus();
}

absl::StatusOr<HipBackend::DeviceFacts> HipBackend::ReadDeviceFacts() {
  // Name, architecture and memory. hipGetDeviceProperties is null when the
  // runtime lacks the compiled headers' layout; the name and memory then
  // come from their own calls and the profile is the generic one.
  const HipApi& api = *api_;
  DeviceFacts facts;
  if (api.GetDeviceProperties != nullptr) {
    hipDeviceProp_t props{};
    const hipError_t e = api.GetDeviceProperties(&props, ordinal_);
    if (e != hipSuccess) {
      return HipErrorStatus(
          api, e, absl::StrCat("hipGetDeviceProperties(", ordinal_, ")"));
    }
    facts.name.assign(props.name, strnlen(props.name, sizeof(props.name)));
    facts.gcn_arch_name.assign(
        props.gcnArchName,
        strnlen(props.gcnArchName, sizeof(props.gcnArchName)));
    facts.total_bytes = props.totalGlobalMem;
  } else {
    notes_.push_back(absl::StrCat(
        api.library,
        " has no hipGetDeviceProperties in the layout gpualloc was compiled "
        "for (HIP ",
        HipVersionText(HIP_VERSION), " headers); the architecture is unknown"));
    char buffer[256] = {};
    hipError_t e = api.DeviceGetName(buffer, sizeof(buffer) - 1, ordinal_);
    if (e != hipSuccess) return HipErrorStatus(api, e, "hipDeviceGetName");
    facts.name = buffer;
    size_t bytes = 0;
    e = api.DeviceTotalMem(&bytes, ordinal_);
    if (e != hipSuccess) return HipErrorStatus(api, e, "hipDeviceTotalMem");
    facts.total_bytes = bytes;
  }
  if (facts.total_bytes == 0) {
    return absl::InternalError(absl::StrCat("HIP device ", ordinal_, " (",
                                            facts.name,
                                            ") reports 0 bytes of memory"));
  }
  return facts;
}

void HipBackend::DescribeDevice(const DeviceFacts& facts, int driver) {
  const HipApi& api = *api_;
  std::string why;
  profile_ = &ChooseAmdProfile(facts.gcn_arch_name, facts.total_bytes, &why);
  notes_.push_back(why);
  info_.profile = std::string(profile_->name);
  info_.profile_reason = why;

  info_.backend = "hip";
  info_.vendor = Vendor::kAmd;
  info_.name =
      facts.name.empty() ? std::string(profile_->description) : facts.name;
  info_.arch_id = std::string(ProcessorName(facts.gcn_arch_name));
  info_.ordinal = ordinal_;
  info_.total_bytes = facts.total_bytes;
  info_.min_granularity = profile_->min_granularity;
  info_.recommended_granularity = profile_->recommended_granularity;
  info_.allocation_alignment = profile_->allocation_alignment;
  info_.page_sizes = {4 * kKiB, 2 * kMiB};
  fragment_ =
      profile_->large_page_size != 0 ? profile_->large_page_size : 2 * kMiB;
  info_.driver_version =
      absl::StrCat("HIP runtime ", HipVersionText(runtime_version_),
                   ", driver ", driver, " (", api.library, ")");
  info_.capabilities.streams = true;
  info_.capabilities.host_accessible = false;
  info_.capabilities.graph_capture =
      api.StreamIsCapturing != nullptr &&
      api.ThreadExchangeStreamCaptureMode != nullptr;
  if (!info_.capabilities.graph_capture) {
    notes_.push_back(
        "graph_capture off: the runtime lacks hipStreamIsCapturing or "
        "hipThreadExchangeStreamCaptureMode");
  }
  info_.capabilities.host_copy = api.Memcpy != nullptr;
  if (!info_.capabilities.host_copy) {
    notes_.push_back("host_copy off: the runtime lacks hipMemcpy");
  }
  notes_.push_back(absl::StrCat(
      "plain allocations: ", MemoryKindName(memory_kind_), "-grained",
      memory_kind_ == MemoryKind::kFine
          ? " (hipExtMallocWithFlags, hipDeviceMallocFinegrained)"
          : " (hipMalloc)",
      "; those of ", fragment_, " bytes or more start on a ", fragment_,
      "-byte fragment boundary"));
}

void HipBackend::ProbePools() {
  const HipApi& api = *api_;
  // Stream-ordered pools: only when the device says so.
  int pools = 0;
  const hipError_t e = api.DeviceGetAttribute(
      &pools, hipDeviceAttributeMemoryPoolsSupported, ordinal_);
  if (e != hipSuccess) {
    notes_.push_back(absl::StrCat(
        "stream_ordered_pools off: ",
        HipErrorStatus(api, e, "hipDeviceGetAttribute(MemoryPoolsSupported)")
            .message()));
  } else if (pools == 0) {
    notes_.push_back(
        "stream_ordered_pools off: hipDeviceAttributeMemoryPoolsSupported is "
        "0");
  } else {
    info_.capabilities.stream_ordered_pools = true;
    notes_.push_back(absl::StrCat(
        "stream_ordered_pools on: hipDeviceAttributeMemoryPoolsSupported is 1",
        runtime_version_ < kPoolNullOnOomUntil
            ? "; this runtime (< 6.0) reports pool out-of-memory as success "
              "with a null pointer, which is taken as out of memory"
            : ""));
  }
}

void HipBackend::ProbeVirtualMemory() {
  const HipApi& api = *api_;
  // Virtual memory: the attribute AND a real reservation.
  int vmm = 0;
  hipError_t e =
      api.DeviceGetAttribute(&vmm, kVirtualMemoryAttribute, ordinal_);
  const bool runtime_new_layout =
      runtime_version_ >= kAllocationPropLayoutChangedIn;
  if (e != hipSuccess) {
    notes_.push_back(absl::StrCat(
        "virtual_memory off: ",
        HipErrorStatus(
            api, e, "hipDeviceGetAttribute(VirtualMemoryManagementSupported)")
            .message()));
  } else if (vmm == 0) {
    notes_.push_back(
        "virtual_memory off: "
        "hipDeviceAttributeVirtualMemoryManagementSupported "
        "is 0");
  } else if (kHeadersHaveNewAllocationPropLayout && !runtime_new_layout) {
    notes_.push_back(absl::StrCat(
        "virtual_memory off: runtime ", HipVersionText(runtime_version_),
        " predates ROCm 5.3's hipMemAllocationProp layout of the HIP ",
        HipVersionText(HIP_VERSION),
        " headers gpualloc was compiled against (and its virtual memory does "
        "not work before 6.1)"));
  } else {
    void* probe = nullptr;
    const std::uint64_t bytes = info_.recommended_granularity;
    e = api.MemAddressReserve(&probe, bytes, 0, nullptr, 0);
    if (e != hipSuccess) {
      notes_.push_back(absl::StrCat(
          "virtual_memory off: the probe ",
          HipErrorStatus(api, e,
                         absl::StrCat("hipMemAddressReserve(", bytes, ")"))
              .message()));
    } else if (probe == nullptr) {
      notes_.push_back(absl::StrCat(
          "virtual_memory off: the device attribute says yes, but "
          "hipMemAddressReserve returned success with a null address "
          "(runtime ",
          HipVersionText(runtime_version_),
          runtime_version_ < kVirtualMemoryWorksFrom
              ? "; ROCm 5.2 does nothing and 5.3-6.0 return null, virtual "
                "memory works from 6.1)"
              : ")"));
    } else {
      (void)api.MemAddressFree(probe, bytes);
      info_.capabilities.virtual_memory = true;
      AdoptRuntimeGranularity();
    }
  }
}

void HipBackend::AdoptRuntimeGranularity() {
  const HipApi& api = *api_;
  // The runtime's own granularity, when it gives sane numbers.
  const HipAllocationProp prop(ordinal_, runtime_version_);
  size_t min = 0;
  size_t recommended = 0;
  const hipError_t e1 = api.MemGetAllocationGranularity(
      &min, prop.pointer(), hipMemAllocationGranularityMinimum);
  const hipError_t e2 = api.MemGetAllocationGranularity(
      &recommended, prop.pointer(), hipMemAllocationGranularityRecommended);
  if (e1 == hipSuccess && e2 == hipSuccess && std::has_single_bit(min) &&
      std::has_single_bit(recommended) && min <= recommended) {
    info_.min_granularity = min;
    info_.recommended_granularity = recommended;
    notes_.push_back(absl::StrCat(
        "virtual_memory on: attribute 1 and a real reservation; "
        "hipMemGetAllocationGranularity: ",
        min, " minimum, ", recommended, " recommended",
        prop.mirrored() ? "; hipMemAllocationProp passed in the ROCm 5.3 "
                          "layout the runtime reads"
                        : ""));
  } else {
    notes_.push_back(absl::StrCat(
        "virtual_memory on: attribute 1 and a real reservation; "
        "hipMemGetAllocationGranularity gave no usable answer, the "
        "profile's granularity stays (",
        info_.min_granularity, " / ", info_.recommended_granularity, ")"));
  }
}

}  // namespace gpualloc::hip
