// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_counters.cc: the HIP backend's completion counters: a block
// of mapped, coherent page-locked host memory (hipHostMalloc with
// hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent, its
// device address from hipHostGetDevicePointer), written by
// hipStreamWriteValue64 and waited for by hipStreamWaitValue64
// (hipStreamWaitValueGte, every bit of the mask), freed by hipHostFree; and
// the probe that turns the capability on.
//
// Coherent (fine-grained) memory, so that the host sees the device's writes
// without a cache flush; ROCm's hipStreamWaitValueGte compares signed 64-bit
// values, which agree with an unsigned >= below 2^63 (checked before the
// call, backends/common/counters.h).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/common/counters.h"
#include "backends/common/handle_books.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"

namespace gpualloc::hip {
namespace {

using common::CounterRecord;
using internal::ToAddress;
using internal::ToPointer;
using internal::ToStream;

constexpr unsigned int kCounterHostFlags =
    hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent;

// "hipStreamWriteValue64(stream 0x1, counters 0x2 index 3 at 0x7f.., value 4)"
std::string MemOpCall(absl::string_view call, Stream stream,
                      CounterHandle handle, std::size_t index,
                      std::uint64_t address, std::uint64_t value) {
  return absl::StrFormat(
      "%s(stream %#x, counters %#x index %d at %#x, value %d)", call,
      stream.handle, handle, index, address, value);
}

}  // namespace

void HipBackend::ProbeCounters() {
  const HipApi& api = *api_;
  Capabilities& c = info_.capabilities;
  std::string why;
  const auto attribute = [&](hipDeviceAttribute_t a,
                             const char* name) -> absl::StatusOr<int> {
    int value = 0;
    const hipError_t e = api.DeviceGetAttribute(&value, a, ordinal_);
    if (e != hipSuccess) {
      return HipErrorStatus(api, e,
                            absl::StrCat("hipDeviceGetAttribute(", name, ")"));
    }
    return value;
  };
  std::vector<const char*> lacking;
  for (const auto& [name, present] :
       std::initializer_list<std::pair<const char*, bool>>{
           {"hipHostMalloc", api.HostMalloc != nullptr},
           {"hipHostFree", api.HostFree != nullptr},
           {"hipHostGetDevicePointer", api.HostGetDevicePointer != nullptr},
           {"hipStreamWriteValue64", api.StreamWriteValue64 != nullptr},
           {"hipStreamWaitValue64", api.StreamWaitValue64 != nullptr}}) {
    if (!present) lacking.push_back(name);
  }
  if (!c.streams) {
    why = "it needs streams, which are off";
  } else if (!lacking.empty()) {
    why = absl::StrCat("the runtime lacks ", absl::StrJoin(lacking, ", "));
  } else if (absl::StatusOr<int> map = attribute(
                 hipDeviceAttributeCanMapHostMemory, "CanMapHostMemory");
             !map.ok()) {
    why = std::string(map.status().message());
  } else if (*map == 0) {
    why =
        "the device cannot map host memory "
        "(hipDeviceAttributeCanMapHostMemory is 0)";
  } else if (absl::StatusOr<int> wait =
                 attribute(hipDeviceAttributeCanUseStreamWaitValue,
                           "CanUseStreamWaitValue");
             !wait.ok()) {
    why = std::string(wait.status().message());
  } else if (*wait == 0) {
    why =
        "the device cannot wait for a value on a stream "
        "(hipDeviceAttributeCanUseStreamWaitValue is 0)";
  }
  c.completion_counters = why.empty();
  notes_.push_back(
      why.empty() ? "completion_counters on (hipStreamWriteValue64 / "
                    "hipStreamWaitValue64 into mapped, coherent page-locked "
                    "memory)"
                  : absl::StrCat("completion_counters off: ", why));
}

absl::StatusOr<CounterBlock> HipBackend::CreateCounters(std::size_t count) {
  if (!info_.capabilities.completion_counters) {
    return Backend::CreateCounters(count);
  }
  if (absl::Status s = common::CheckCounterCount("HIP ", count); !s.ok()) {
    return s;
  }
  const std::size_t bytes = count * sizeof(std::uint64_t);
  return OnDevice<absl::StatusOr<CounterBlock>>(
      [&]() -> absl::StatusOr<CounterBlock> {
        void* host = nullptr;
        hipError_t e = api_->HostMalloc(&host, bytes, kCounterHostFlags);
        if (e != hipSuccess) {
          return HipErrorStatus(
              *api_, e,
              absl::StrCat("hipHostMalloc(", bytes,
                           " bytes, mapped | portable | coherent) for ", count,
                           " counters on device ", ordinal_));
        }
        if (host == nullptr) {
          return absl::InternalError(
              absl::StrCat("hipHostMalloc(", bytes,
                           " bytes) returned success and no memory"));
        }
        void* device = nullptr;
        e = api_->HostGetDevicePointer(&device, host, 0);
        if (e != hipSuccess || device == nullptr) {
          (void)api_->HostFree(host);
          if (e == hipSuccess) {
            return absl::InternalError(absl::StrFormat(
                "hipHostGetDevicePointer(%p) returned success and no address",
                host));
          }
          return HipErrorStatus(
              *api_, e, absl::StrFormat("hipHostGetDevicePointer(%p)", host));
        }
        // Page-locked memory comes uninitialized; the device has not seen it
        // yet, so plain stores will do.
        std::memset(host, 0, bytes);
        CounterRecord record;
        record.host = host;
        record.device = ToAddress(device);
        record.count = count;
        CounterBlock block;
        block.handle = state_->books.AddCounters(record);
        block.values = static_cast<const std::uint64_t*>(host);
        block.count = count;
        return block;
      });
}

absl::Status HipBackend::DestroyCounters(CounterHandle handle) {
  if (!info_.capabilities.completion_counters) {
    return Backend::DestroyCounters(handle);
  }
  return state_->books.ReleaseCounters(
      handle, [&](const CounterRecord& record) {
        return OnDevice<absl::Status>([&] {
          const hipError_t e = api_->HostFree(record.host);
          if (e == hipSuccess) return absl::OkStatus();
          return HipErrorStatus(
              *api_, e,
              absl::StrFormat("hipHostFree(%p) of counters %#x on device %d",
                              record.host, handle, ordinal_));
        });
      });
}

absl::Status HipBackend::WriteCounter(CounterHandle handle, std::size_t index,
                                      std::uint64_t value, Stream stream) {
  if (!info_.capabilities.completion_counters) {
    return Backend::WriteCounter(handle, index, value, stream);
  }
  absl::StatusOr<CounterRecord> record =
      state_->books.FindCounter("WriteCounter", handle, index, value);
  if (!record.ok()) return record.status();
  const std::uint64_t address = record->device + index * sizeof(std::uint64_t);
  return OnDevice<absl::Status>([&] {
    // Ordered after the work queued on the stream before it.
    const hipError_t e = api_->StreamWriteValue64(ToStream(stream),
                                                  ToPointer(address), value, 0);
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e,
                          MemOpCall("hipStreamWriteValue64", stream, handle,
                                    index, address, value));
  });
}

absl::Status HipBackend::WaitCounter(CounterHandle handle, std::size_t index,
                                     std::uint64_t value, Stream stream) {
  if (!info_.capabilities.completion_counters) {
    return Backend::WaitCounter(handle, index, value, stream);
  }
  absl::StatusOr<CounterRecord> record =
      state_->books.FindCounter("WaitCounter", handle, index, value);
  if (!record.ok()) return record.status();
  const std::uint64_t address = record->device + index * sizeof(std::uint64_t);
  return OnDevice<absl::Status>([&] {
    const hipError_t e =
        api_->StreamWaitValue64(ToStream(stream), ToPointer(address), value,
                                hipStreamWaitValueGte, ~std::uint64_t{0});
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e,
                          MemOpCall("hipStreamWaitValue64", stream, handle,
                                    index, address, value));
  });
}

}  // namespace gpualloc::hip
