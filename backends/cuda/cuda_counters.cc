// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_counters.cc: the CUDA backend's completion counters: a
// block of mapped page-locked host memory (cuMemHostAlloc with
// CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, its device address
// from cuMemHostGetDevicePointer), written by cuStreamWriteValue64 and waited
// for by cuStreamWaitValue64 (CU_STREAM_WAIT_VALUE_GEQ), freed by
// cuMemFreeHost; and the probe that turns the capability on.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/common/counters.h"
#include "backends/common/handle_books.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_internal.h"

namespace gpualloc::cuda {
namespace {

using common::CounterRecord;
using internal::ToCuStream;

// The entry points resolve to their version 2 (CU_DEVICE_ATTRIBUTE_CAN_USE_
// 64_BIT_STREAM_MEM_OPS) from CUDA 11.7 on; an older driver gives the
// version 1 ones, whose attribute is the _V1 one.
constexpr int kStreamMemOpsV2Since = 11070;

// "cuStreamWriteValue64(stream 0x1, counters 0x2 index 3 at 0x7f.., value 4)"
std::string MemOpCall(absl::string_view call, Stream stream,
                      CounterHandle handle, std::size_t index,
                      std::uint64_t address, std::uint64_t value) {
  return absl::StrFormat(
      "%s(stream %#x, counters %#x index %d at %#x, value %d)", call,
      stream.handle, handle, index, address, value);
}

}  // namespace

void CudaBackend::Impl::ProbeCounters() {
  const CudaDriverApi& api = *api_;
  Capabilities& c = info_.capabilities;
  const bool v2 = api.requested_version >= kStreamMemOpsV2Since;
  const CUdevice_attribute mem_ops =
      v2 ? CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
         : CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1;
  const char* mem_ops_name =
      v2 ? "CAN_USE_64_BIT_STREAM_MEM_OPS" : "CAN_USE_64_BIT_STREAM_MEM_OPS_V1";
  std::string why;
  const auto attribute = [&](CUdevice_attribute a,
                             const char* name) -> absl::StatusOr<int> {
    int value = 0;
    const CUresult r = api.cuDeviceGetAttribute(&value, a, device_);
    if (r != CUDA_SUCCESS) {
      return CudaError(api, absl::StrCat("cuDeviceGetAttribute(", name, ")"),
                       r);
    }
    return value;
  };
  if (!c.streams) {
    why = "it needs streams, which are off";
  } else if (!api.has_host_memory()) {
    why = "the driver lacks cuMemHostAlloc or cuMemFreeHost";
  } else if (!api.has_counters()) {
    // The first of the group the driver said it lacks.
    std::string lacking = "cuStreamWriteValue64";
    for (const std::string& m : api.missing) {
      if (absl::StartsWith(m, "cuMemHostGetDevicePointer ") ||
          absl::StartsWith(m, "cuStreamWriteValue64 ") ||
          absl::StartsWith(m, "cuStreamWaitValue64 ")) {
        lacking = m;
        break;
      }
    }
    why = absl::StrCat("the driver lacks ", lacking);
  } else if (absl::StatusOr<int> map =
                 attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
                           "CAN_MAP_HOST_MEMORY");
             !map.ok()) {
    why = std::string(map.status().message());
  } else if (*map == 0) {
    why =
        "the device cannot map host memory "
        "(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is 0)";
  } else if (absl::StatusOr<int> ops = attribute(mem_ops, mem_ops_name);
             !ops.ok()) {
    why = std::string(ops.status().message());
  } else if (*ops == 0) {
    why = absl::StrCat(
        "the device has no 64-bit stream memory operations "
        "(CU_DEVICE_ATTRIBUTE_",
        mem_ops_name, " is 0",
        v2 ? ")"
           : "; drivers before CUDA 11.7 enable them with the nvidia module's "
             "NVreg_EnableStreamMemOPs=1)");
  }
  c.completion_counters = why.empty();
  notes_.push_back(
      why.empty()
          ? absl::StrCat("completion_counters on (cuStreamWriteValue64 / "
                         "cuStreamWaitValue64",
                         v2 ? "" : " version 1",
                         " into mapped page-locked memory, CU_MEMHOSTALLOC_"
                         "DEVICEMAP)")
          : absl::StrCat("completion_counters off: ", why));
}

absl::StatusOr<CounterBlock> CudaBackend::Impl::CreateCounters(
    std::size_t count) {
  if (absl::Status s = common::CheckCounterCount("", count); !s.ok()) return s;
  const std::size_t bytes = count * sizeof(std::uint64_t);
  return InContext<absl::StatusOr<CounterBlock>>(
      [&]() -> absl::StatusOr<CounterBlock> {
        void* host = nullptr;
        CUresult r = api_->cuMemHostAlloc(
            &host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
        if (r != CUDA_SUCCESS) {
          return CudaError(
              *api_,
              absl::StrCat("cuMemHostAlloc(", bytes,
                           " bytes, devicemap | portable) for ", count,
                           " counters on device ", info_.ordinal),
              r);
        }
        if (host == nullptr) {
          return absl::InternalError(
              absl::StrCat("cuMemHostAlloc(", bytes,
                           " bytes) returned success and no memory"));
        }
        CUdeviceptr device = 0;
        r = api_->cuMemHostGetDevicePointer(&device, host, 0);
        if (r != CUDA_SUCCESS) {
          api_->cuMemFreeHost(host);
          return CudaError(
              *api_, absl::StrFormat("cuMemHostGetDevicePointer(%p)", host), r);
        }
        // Page-locked memory comes uninitialized; the device has not seen it
        // yet, so plain stores will do.
        std::memset(host, 0, bytes);
        CounterRecord record;
        record.host = host;
        record.device = static_cast<std::uint64_t>(device);
        record.count = count;
        CounterBlock block;
        block.handle = books_.AddCounters(record);
        block.values = static_cast<const std::uint64_t*>(host);
        block.count = count;
        return block;
      });
}

absl::Status CudaBackend::Impl::DestroyCounters(CounterHandle handle) {
  return books_.ReleaseCounters(handle, [&](const CounterRecord& record) {
    return InContext<absl::Status>([&] {
      return CudaError(*api_,
                       absl::StrFormat("cuMemFreeHost(%p) of counters %#x on "
                                       "device %d",
                                       record.host, handle, info_.ordinal),
                       api_->cuMemFreeHost(record.host));
    });
  });
}

absl::Status CudaBackend::Impl::WriteCounter(CounterHandle handle,
                                             std::size_t index,
                                             std::uint64_t value,
                                             Stream stream) {
  absl::StatusOr<CounterRecord> record =
      books_.FindCounter("WriteCounter", handle, index, value);
  if (!record.ok()) return record.status();
  const std::uint64_t address = record->device + index * sizeof(std::uint64_t);
  return InContext<absl::Status>([&] {
    // The default flags keep the write ordered after the stream's earlier
    // work and its memory writes (no CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER).
    return CudaError(*api_,
                     MemOpCall("cuStreamWriteValue64", stream, handle, index,
                               address, value),
                     api_->cuStreamWriteValue64(
                         ToCuStream(stream), static_cast<CUdeviceptr>(address),
                         value, CU_STREAM_WRITE_VALUE_DEFAULT));
  });
}

absl::Status CudaBackend::Impl::WaitCounter(CounterHandle handle,
                                            std::size_t index,
                                            std::uint64_t value,
                                            Stream stream) {
  absl::StatusOr<CounterRecord> record =
      books_.FindCounter("WaitCounter", handle, index, value);
  if (!record.ok()) return record.status();
  const std::uint64_t address = record->device + index * sizeof(std::uint64_t);
  return InContext<absl::Status>([&] {
    // GEQ waits until (int64_t)(*address - value) >= 0: for values below
    // 2^63 (checked above) that is *address >= value.
    return CudaError(
        *api_,
        MemOpCall("cuStreamWaitValue64", stream, handle, index, address, value),
        api_->cuStreamWaitValue64(ToCuStream(stream),
                                  static_cast<CUdeviceptr>(address), value,
                                  CU_STREAM_WAIT_VALUE_GEQ));
  });
}

// --- CudaBackend's calls
// ------------------------------------------------------

absl::StatusOr<CounterBlock> CudaBackend::CreateCounters(std::size_t count) {
  if (!info().capabilities.completion_counters) {
    return Backend::CreateCounters(count);
  }
  return impl_->CreateCounters(count);
}
absl::Status CudaBackend::DestroyCounters(CounterHandle handle) {
  if (!info().capabilities.completion_counters) {
    return Backend::DestroyCounters(handle);
  }
  return impl_->DestroyCounters(handle);
}
absl::Status CudaBackend::WriteCounter(CounterHandle handle, std::size_t index,
                                       std::uint64_t value, Stream stream) {
  if (!info().capabilities.completion_counters) {
    return Backend::WriteCounter(handle, index, value, stream);
  }
  return impl_->WriteCounter(handle, index, value, stream);
}
absl::Status CudaBackend::WaitCounter(CounterHandle handle, std::size_t index,
                                      std::uint64_t value, Stream stream) {
  if (!info().capabilities.completion_counters) {
    return Backend::WaitCounter(handle, index, value, stream);
  }
  return impl_->WaitCounter(handle, index, value, stream);
}

}  // namespace gpualloc::cuda
