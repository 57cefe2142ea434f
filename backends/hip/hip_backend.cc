// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_backend.cc: the HIP/ROCm backend (hip_backend.h): its
// creation and teardown, plain memory and events. The device probe is in
// hip_probe.cc, the stream-ordered pool in hip_pool.cc, virtual memory in
// hip_vmm.cc, graph capture in hip_capture.cc and host copies in hip_copy.cc.
//
// Every call into the runtime goes through the entry-point table. The backend
// keeps its own books of what it handed out (plain blocks, events, pool
// blocks, reservations, physical handles, mappings), so that bad input is
// answered with InvalidArgument before any runtime call, as the Backend
// interface promises, instead of whatever the runtime does with a stray
// pointer.

#include "backends/hip/hip_backend.h"

#include <algorithm>
#include <cstdint>
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

namespace gpualloc::hip {
namespace {

using internal::Hex;
using internal::ToAddress;
using internal::ToEvent;
using internal::ToHandle;
using internal::ToPointer;
using internal::ToStream;

std::uint64_t RoundUp(std::uint64_t x, std::uint64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
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
    case hipErrorInvalidContext:
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
  for (DeviceAddress address : left.opened) {
    (void)api_->IpcCloseMemHandle(ToPointer(address));
  }
  for (void* pointer : left.host_blocks) (void)api_->HostFree(pointer);
  for (const auto& counters : left.counter_blocks) {
    (void)api_->HostFree(counters.host);
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

}  // namespace gpualloc::hip
