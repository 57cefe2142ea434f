// SPDX-License-Identifier: Apache-2.0
// backends/common/capture_mode.h: gpualloc's CaptureMode and "is capturing"
// to and from a vendor's stream-capture enums (CUstreamCaptureMode and
// CUstreamCaptureStatus; hipStreamCaptureMode and hipStreamCaptureStatus),
// shared by the CUDA and HIP backends. Each backend names its enumerators;
// the translation is written once.
#ifndef GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_
#define GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_

#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::common {

// The integer a vendor wrote into an enum object, read as its underlying
// type: a driver newer than the headers may answer a value outside the
// enumerators, and loading that as the enum type is undefined behaviour.
template <typename Enum>
std::underlying_type_t<Enum> RawEnum(const Enum* e) {
  std::underlying_type_t<Enum> v;
  std::memcpy(&v, e, sizeof(v));
  return v;
}

// A vendor's capture modes, in gpualloc's terms.
template <typename VendorMode>
struct VendorCaptureModes {
  VendorMode global;
  VendorMode thread_local_mode;
  VendorMode relaxed;
};

template <typename VendorMode>
VendorMode ToVendorMode(CaptureMode mode,
                        const VendorCaptureModes<VendorMode>& modes) {
  switch (mode) {
    case CaptureMode::kThreadLocal:
      return modes.thread_local_mode;
    case CaptureMode::kRelaxed:
      return modes.relaxed;
    case CaptureMode::kGlobal:
      break;
  }
  return modes.global;
}

// The mode the vendor wrote at `answer`; Internal naming `call` for one
// gpualloc does not know.
template <typename VendorMode>
absl::StatusOr<CaptureMode> FromVendorMode(
    const VendorMode* answer, const VendorCaptureModes<VendorMode>& modes,
    absl::string_view call) {
  using Raw = std::underlying_type_t<VendorMode>;
  const Raw mode = RawEnum(answer);
  if (mode == static_cast<Raw>(modes.global)) return CaptureMode::kGlobal;
  if (mode == static_cast<Raw>(modes.thread_local_mode)) {
    return CaptureMode::kThreadLocal;
  }
  if (mode == static_cast<Raw>(modes.relaxed)) return CaptureMode::kRelaxed;
  return absl::InternalError(
      absl::StrCat(call, " answered capture mode ", static_cast<long>(mode),
                   ", which is none of global, thread-local, relaxed"));
}

// A vendor's capture statuses: not capturing, capturing, and capturing but
// invalidated (still capturing until the capture ends).
template <typename VendorStatus>
struct VendorCaptureStatuses {
  VendorStatus none;
  VendorStatus active;
  VendorStatus invalidated;
};

// Whether the status the vendor wrote at `answer` is a capture underway
// (active or invalidated); Internal naming `call` for a status gpualloc does
// not know.
template <typename VendorStatus>
absl::StatusOr<bool> IsCaptureUnderway(
    const VendorStatus* answer,
    const VendorCaptureStatuses<VendorStatus>& statuses,
    absl::string_view call) {
  using Raw = std::underlying_type_t<VendorStatus>;
  const Raw status = RawEnum(answer);
  if (status == static_cast<Raw>(statuses.none)) return false;
  if (status == static_cast<Raw>(statuses.active) ||
      status == static_cast<Raw>(statuses.invalidated)) {
    return true;
  }
  return absl::InternalError(
      absl::StrCat(call, " answered capture status ", static_cast<long>(status),
                   ", which is none of none, active, invalidated"));
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_
