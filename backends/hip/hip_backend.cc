// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_backend.cc: the HIP/ROCm backend (hip_backend.h).
//
// Every call into the runtime goes through the entry-point table. The backend
// keeps its own books of what it handed out (plain blocks, events, pool
// blocks, reservations, physical handles, mappings), so that bad input is
// answered with InvalidArgument before any runtime call, as the Backend
// interface promises, instead of whatever the runtime does with a stray
// pointer.

#include "backends/hip/hip_backend.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/hip/hip_internal.h"
#include "core/lock.h"
#include "core/status_macros.h"
#include "gpualloc/arch/profiles.h"

namespace gpualloc::hip {
namespace {

using internal::Hex;
using internal::ToAddress;
using internal::ToEvent;
using internal::ToHandle;
using internal::ToPointer;
using internal::ToStream;

constexpr std::uint64_t kKiB = std::uint64_t{1} << 10;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// hipMallocAsync and hipMallocFromPoolAsync report out of memory as success
// with a null pointer before ROCm 6.0.
constexpr int kPoolNullOnOomUntil = 60000000;
// hipMemAddressReserve: a no-op in 5.2, a null reservation in 5.3-6.0.
constexpr int kVirtualMemoryWorksFrom = 60100000;

std::uint64_t RoundUp(std::uint64_t x, std::uint64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

absl::string_view ProcessorName(absl::string_view gcn_arch_name) {
  return gcn_arch_name.substr(0, gcn_arch_name.find(':'));
}

}  // namespace

absl::Status HipErrorStatus(const HipApi& api, hipError_t error,
                            absl::string_view call) {
  const char* name =
      api.GetErrorName != nullptr ? api.GetErrorName(error) : nullptr;
  const std::string message =
      absl::StrCat(call, " failed: ", name != nullptr ? name : "hipError", " (",
                   static_cast<int>(error), ")");
  switch (error) {
    case hipErrorOutOfMemory:
      return absl::ResourceExhaustedError(message);
    case hipErrorInvalidValue:
      return absl::InvalidArgumentError(message);
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorNotInitialized:
      return absl::UnavailableError(message);
    case hipErrorNotSupported:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

internal::ScopedDevice::ScopedDevice(const HipApi& api, int device)
    : ScopedCurrent(
          device,
          [&api](int* current) {
            const hipError_t e = api.GetDevice(current);
            return e == hipSuccess ? absl::OkStatus()
                                   : HipErrorStatus(api, e, "hipGetDevice");
          },
          [&api](int wanted) {
            const hipError_t e = api.SetDevice(wanted);
            return e == hipSuccess
                       ? absl::OkStatus()
                       : HipErrorStatus(
                             api, e,
                             absl::StrCat("hipSetDevice(", wanted, ")"));
          }) {}

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

// ----------------------------------------------------------------- creation

HipBackend::HipBackend(std::shared_ptr<const HipApi> api,
                       const HipBackendOptions& o)
    : api_(std::move(api)),
      ordinal_(o.ordinal),
      memory_kind_(o.memory_kind),
      state_(std::make_unique<State>(o.ordinal)) {}

HipBackend::~HipBackend() {
  // What the owner left behind goes back to the device; errors have nowhere
  // to go here.
  const internal::ScopedDevice device(*api_, ordinal_);
  if (!device.status().ok()) return;
  const common::HandleBooks<State::PlainBlock>::Leftovers left =
      state_->books.TakeAll();
  for (const auto& [address, block] : left.blocks) {
    (void)api_->Free(block.original);
  }
  for (EventHandle event : left.events) {
    (void)api_->EventDestroy(ToEvent(event));
  }
  core::LockGuard guard(&state_->mu);
  if (state_->vmm != nullptr) {
    for (const common::VmmLedger::Mapping& m : state_->vmm->mappings()) {
      (void)api_->MemUnmap(ToPointer(m.address), m.bytes);
    }
    for (PhysicalHandle handle : state_->vmm->handles()) {
      (void)api_->MemRelease(ToHandle(handle));
    }
    for (const common::VmmLedger::Reservation& r :
         state_->vmm->reservations()) {
      (void)api_->MemAddressFree(ToPointer(r.address), r.bytes);
    }
  }
  if (state_->pool != nullptr) {
    for (DeviceAddress address : left.pool_blocks) {
      (void)api_->FreeAsync(ToPointer(address), nullptr);
    }
    (void)api_->MemPoolDestroy(state_->pool);
  }
}

absl::StatusOr<std::shared_ptr<HipBackend>> HipBackend::Create(
    std::shared_ptr<const HipApi> api, const HipBackendOptions& options) {
  if (api == nullptr) {
    return absl::InvalidArgumentError("HipBackend::Create: no HIP runtime");
  }
  if (options.ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HIP device ordinal ", options.ordinal, " is negative"));
  }
  std::shared_ptr<HipBackend> backend(new HipBackend(std::move(api), options));
  GPUALLOC_RETURN_IF_ERROR(backend->Probe());
  return backend;
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

// ------------------------------------------------------------ plain memory

absl::StatusOr<std::uint64_t> HipBackend::FreeBytes() {
  return OnDevice<absl::StatusOr<std::uint64_t>>(
      [&]() -> absl::StatusOr<std::uint64_t> {
        size_t free = 0;
        size_t total = 0;
        const hipError_t e = api_->MemGetInfo(&free, &total);
        if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemGetInfo");
        return std::min<std::uint64_t>(free, info_.total_bytes);
      });
}

absl::StatusOr<DeviceAddress> HipBackend::Allocate(std::uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        "HIP Allocate(0): a plain allocation needs at least one byte");
  }
  if (bytes > info_.total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HIP Allocate(", bytes, "): more than device ", ordinal_,
                     "'s ", info_.total_bytes, " bytes"));
  }
  return OnDevice<absl::StatusOr<DeviceAddress>>(
      [&] { return AllocateOnDevice(bytes); });
}

absl::StatusOr<DeviceAddress> HipBackend::AllocateOnDevice(
    std::uint64_t bytes) {
  hipError_t e = hipSuccess;
  const bool fine = memory_kind_ == MemoryKind::kFine;
  const auto raw = [&](std::uint64_t size, void** out) {
    *out = nullptr;
    return fine
               ? api_->ExtMallocWithFlags(out, size, hipDeviceMallocFinegrained)
               : api_->Malloc(out, size);
  };
  const auto fail = [&](hipError_t error, std::uint64_t size) {
    const std::string call = fine
                                 ? absl::StrCat("hipExtMallocWithFlags(", size,
                                                ", hipDeviceMallocFinegrained)")
                                 : absl::StrCat("hipMalloc(", size, ")");
    absl::Status s = HipErrorStatus(*api_, error, call);
    if (absl::IsResourceExhausted(s)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HIP device ", ordinal_, " is out of memory for ", bytes,
                       " bytes: ", s.message()));
    }
    return s;
  };

  const bool large = bytes >= fragment_;
  const std::uint64_t size = large ? RoundUp(bytes, fragment_) : bytes;
  void* pointer = nullptr;
  e = raw(size, &pointer);
  if (e != hipSuccess) return fail(e, size);
  if (pointer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HIP device ", ordinal_, ": allocating ", size,
                     " bytes returned success with a null pointer"));
  }
  State::PlainBlock block{pointer, size};
  DeviceAddress address = ToAddress(pointer);
  if (large && address % fragment_ != 0) {
    // Not on a fragment boundary: take one fragment more and start inside
    // it; Free returns the original pointer.
    e = api_->Free(pointer);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipFree");
    const std::uint64_t padded = size + fragment_;
    e = raw(padded, &pointer);
    if (e != hipSuccess) return fail(e, padded);
    if (pointer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HIP device ", ordinal_, ": allocating ", padded,
                       " bytes returned success with a null pointer"));
    }
    block = State::PlainBlock{pointer, padded};
    address = RoundUp(ToAddress(pointer), fragment_);
  }
  state_->books.AddBlock(address, block);
  return address;
}

absl::Status HipBackend::Free(DeviceAddress address) {
  return state_->books.ReleaseBlock(address, [&](const State::PlainBlock& b) {
    return OnDevice<absl::Status>([&] {
      const hipError_t e = api_->Free(b.original);
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipFree(", Hex(address), ")"));
    });
  });
}

// ------------------------------------------------------------------ events

absl::StatusOr<EventHandle> HipBackend::CreateEvent() {
  return OnDevice<absl::StatusOr<EventHandle>>(
      [&]() -> absl::StatusOr<EventHandle> {
        hipEvent_t event = nullptr;
        const hipError_t e =
            api_->EventCreateWithFlags(&event, hipEventDisableTiming);
        if (e != hipSuccess) {
          return HipErrorStatus(
              *api_, e, "hipEventCreateWithFlags(hipEventDisableTiming)");
        }
        if (event == nullptr) {
          return absl::InternalError(
              "hipEventCreateWithFlags returned success with a null event");
        }
        const EventHandle handle = ToAddress(event);
        state_->books.AddEvent(handle);
        return handle;
      });
}

absl::Status HipBackend::DestroyEvent(EventHandle event) {
  return state_->books.ReleaseEvent(event, [&] {
    return OnDevice<absl::Status>([&] {
      const hipError_t e = api_->EventDestroy(ToEvent(event));
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipEventDestroy(", Hex(event), ")"));
    });
  });
}

absl::Status HipBackend::RecordEvent(EventHandle event, Stream stream) {
  GPUALLOC_RETURN_IF_ERROR(state_->books.CheckEvent("RecordEvent", event));
  return OnDevice<absl::Status>([&] {
    const hipError_t e = api_->EventRecord(ToEvent(event), ToStream(stream));
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e,
                          absl::StrCat("hipEventRecord(", Hex(event),
                                       ", stream ", Hex(stream.handle), ")"));
  });
}

absl::StatusOr<bool> HipBackend::QueryEvent(EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(state_->books.CheckEvent("QueryEvent", event));
  return OnDevice<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
    const hipError_t e = api_->EventQuery(ToEvent(event));
    if (e == hipSuccess) return true;
    if (e == hipErrorNotReady) return false;
    return HipErrorStatus(*api_, e, "hipEventQuery");
  });
}

absl::Status HipBackend::StreamWaitEvent(Stream stream, EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(state_->books.CheckEvent("StreamWaitEvent", event));
  return OnDevice<absl::Status>([&] {
    const hipError_t e =
        api_->StreamWaitEvent(ToStream(stream), ToEvent(event), 0);
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e, "hipStreamWaitEvent");
  });
}

absl::Status HipBackend::SynchronizeEvent(EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(state_->books.CheckEvent("SynchronizeEvent", event));
  return OnDevice<absl::Status>([&] {
    const hipError_t e = api_->EventSynchronize(ToEvent(event));
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e, "hipEventSynchronize");
  });
}

// ------------------------------------------------------------------- pools

absl::Status HipBackend::ConfigurePool(const PoolOptions& options) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("ConfigurePool", "stream_ordered_pools");
  }
  return OnDevice<absl::Status>([&] { return ConfigurePoolOnDevice(options); });
}

absl::Status HipBackend::ConfigurePoolOnDevice(const PoolOptions& options) {
  core::LockGuard guard(&state_->mu);
  hipError_t e = hipSuccess;
  if (state_->pool == nullptr) {
    // Our own pool, so that its attributes and trimming do not touch the
    // device's default pool other code in the process may use.
    hipMemPoolProps props{};
    props.allocType = hipMemAllocationTypePinned;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = ordinal_;
    hipMemPool_t pool = nullptr;
    e = api_->MemPoolCreate(&pool, &props);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemPoolCreate");
    state_->pool = pool;
  }
  std::uint64_t threshold = options.release_threshold;
  e = api_->MemPoolSetAttribute(state_->pool, hipMemPoolAttrReleaseThreshold,
                                &threshold);
  if (e != hipSuccess) {
    return HipErrorStatus(*api_, e, "hipMemPoolSetAttribute(ReleaseThreshold)");
  }
  const std::pair<hipMemPoolAttr, bool> reuse[] = {
      {hipMemPoolReuseFollowEventDependencies,
       options.reuse.follow_event_dependencies},
      {hipMemPoolReuseAllowOpportunistic, options.reuse.opportunistic},
      {hipMemPoolReuseAllowInternalDependencies,
       options.reuse.internal_dependencies},
  };
  for (const auto& [attribute, on] : reuse) {
    int value = on ? 1 : 0;
    e = api_->MemPoolSetAttribute(state_->pool, attribute, &value);
    if (e != hipSuccess) {
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipMemPoolSetAttribute(",
                                         static_cast<int>(attribute), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAddress> HipBackend::PoolAllocate(std::uint64_t bytes,
                                                       Stream stream) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolAllocate", "stream_ordered_pools");
  }
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        "HIP PoolAllocate(0): a pool allocation needs at least one byte");
  }
  hipMemPool_t pool = nullptr;
  {
    core::LockGuard guard(&state_->mu);
    pool = state_->pool;
  }
  if (pool == nullptr) {
    return absl::FailedPreconditionError(
        "HIP PoolAllocate before ConfigurePool: configure the pool first");
  }
  if (bytes > info_.total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HIP PoolAllocate(", bytes, "): more than device ",
                     ordinal_, "'s ", info_.total_bytes, " bytes"));
  }
  return OnDevice<absl::StatusOr<DeviceAddress>>(
      [&] { return PoolAllocateOnDevice(bytes, pool, stream); });
}

absl::StatusOr<DeviceAddress> HipBackend::PoolAllocateOnDevice(
    std::uint64_t bytes, hipMemPool_t pool, Stream stream) {
  void* pointer = nullptr;
  const hipError_t e =
      api_->MallocFromPoolAsync(&pointer, bytes, pool, ToStream(stream));
  if (e != hipSuccess) {
    absl::Status s = HipErrorStatus(
        *api_, e, absl::StrCat("hipMallocFromPoolAsync(", bytes, ")"));
    if (absl::IsResourceExhausted(s)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HIP device ", ordinal_, " pool is out of memory for ",
                       bytes, " bytes: ", s.message()));
    }
    return s;
  }
  if (pointer == nullptr) {
    // ROCm before 6.0 says out of memory this way.
    return absl::ResourceExhaustedError(absl::StrCat(
        "HIP device ", ordinal_, " pool is out of memory for ", bytes,
        " bytes: hipMallocFromPoolAsync returned success with a null pointer "
        "(runtime ",
        HipVersionText(runtime_version_), ")"));
  }
  state_->books.AddPoolBlock(ToAddress(pointer));
  return ToAddress(pointer);
}

absl::Status HipBackend::PoolFree(DeviceAddress address, Stream stream) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolFree", "stream_ordered_pools");
  }
  return state_->books.ReleasePoolBlock(address, [&] {
    // A null stream is the current device's: this device's.
    return OnDevice<absl::Status>([&] {
      const hipError_t e =
          api_->FreeAsync(ToPointer(address), ToStream(stream));
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipFreeAsync(", Hex(address),
                                         ", stream ", Hex(stream.handle), ")"));
    });
  });
}

absl::Status HipBackend::PoolTrim(std::uint64_t keep_bytes) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolTrim", "stream_ordered_pools");
  }
  return OnDevice<absl::Status>([&] {
    core::LockGuard guard(&state_->mu);
    if (state_->pool == nullptr) return absl::OkStatus();  // nothing held
    const hipError_t e = api_->MemPoolTrimTo(state_->pool, keep_bytes);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemPoolTrimTo");
    return absl::OkStatus();
  });
}

absl::StatusOr<PoolUsage> HipBackend::GetPoolUsage() {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("GetPoolUsage", "stream_ordered_pools");
  }
  return OnDevice<absl::StatusOr<PoolUsage>>(
      [&] { return PoolUsageOnDevice(); });
}

absl::StatusOr<PoolUsage> HipBackend::PoolUsageOnDevice() {
  core::LockGuard guard(&state_->mu);
  PoolUsage usage;
  if (state_->pool == nullptr) return usage;
  const std::pair<hipMemPoolAttr, std::uint64_t*> attributes[] = {
      {hipMemPoolAttrReservedMemCurrent, &usage.reserved},
      {hipMemPoolAttrUsedMemCurrent, &usage.used},
      {hipMemPoolAttrReservedMemHigh, &usage.peak_reserved},
      {hipMemPoolAttrUsedMemHigh, &usage.peak_used},
  };
  for (const auto& [attribute, out] : attributes) {
    std::uint64_t value = 0;
    const hipError_t e =
        api_->MemPoolGetAttribute(state_->pool, attribute, &value);
    if (e != hipSuccess) {
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipMemPoolGetAttribute(",
                                         static_cast<int>(attribute), ")"));
    }
    *out = value;
  }
  return usage;
}

}  // namespace gpualloc::hip
