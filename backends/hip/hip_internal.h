// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_internal.h: what the HIP backend's sources share: handle
// conversions, the current-device switch, the per-call wrapper and the books.
#ifndef GPUALLOC_BACKENDS_HIP_HIP_INTERNAL_H_
#define GPUALLOC_BACKENDS_HIP_HIP_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "backends/common/handle_books.h"
#include "backends/common/scoped_current.h"
#include "backends/common/vmm_ledger.h"
#include "backends/hip/hip_backend.h"
#include "backends/layer.h"
#include "core/lock.h"

namespace gpualloc::hip::internal {

inline void* ToPointer(DeviceAddress address) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
}
inline DeviceAddress ToAddress(const void* pointer) {
  return static_cast<DeviceAddress>(reinterpret_cast<std::uintptr_t>(pointer));
}
inline hipStream_t ToStream(Stream stream) {
  return reinterpret_cast<hipStream_t>(stream.handle);
}
inline hipEvent_t ToEvent(EventHandle event) {
  return reinterpret_cast<hipEvent_t>(static_cast<std::uintptr_t>(event));
}
inline hipMemGenericAllocationHandle_t ToHandle(PhysicalHandle handle) {
  return reinterpret_cast<hipMemGenericAllocationHandle_t>(
      static_cast<std::uintptr_t>(handle));
}
inline std::string Hex(std::uint64_t x) { return absl::StrFormat("%#x", x); }

// Makes `device` current on the calling thread for one backend call and puts
// the thread's previous device back when it goes out of scope: a thread
// working on device 0 that makes gpualloc act on device 1 is still on device 0
// afterwards (its next launches and null-stream calls go where it meant).
class ScopedDevice : public common::ScopedCurrent<int> {
 public:
  ScopedDevice(const HipApi& api, int device);
};

}  // namespace gpualloc::hip::internal

namespace gpualloc::hip {

// The backend's books: what it handed out (plain blocks, pool blocks,
// events; their own lock), and the pool and virtual memory behind `mu`.
class HipBackend::State {
 public:
  struct PlainBlock {
    void* original;  // what the runtime returned; hipFree takes this
    std::uint64_t bytes;
  };

  explicit State(int ordinal) : books("HIP ", ordinal) {}

  common::HandleBooks<PlainBlock> books;
  core::Lock mu;
  hipMemPool_t pool ABSL_GUARDED_BY(mu) = nullptr;
  // Reservations, physical handles and mappings, and the rules on them
  // (made once the device's granularity is known).
  std::unique_ptr<common::VmmLedger> vmm ABSL_GUARDED_BY(mu);
};

template <typename T, typename Body>
T HipBackend::OnDevice(Body&& body) const {
  return common::OnCurrent<T>(internal::ScopedDevice(*api_, ordinal_),
                              std::forward<Body>(body));
}

}  // namespace gpualloc::hip

#endif  // GPUALLOC_BACKENDS_HIP_HIP_INTERNAL_H_
