// backends/common/capture_mode.h: gpualloc's CaptureMode and "is capturing"
// to and from a vendor's stream-capture enums (CUstreamCaptureMode and
// CUstreamCaptureStatus; hipStreamCaptureMode and hipStreamCaptureStatus),
// shared by the CUDA and HIP backends. Each backend names its enumerators;
// the translation is written once.
#ifndef GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_
#define GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/backend.h"

namespace gpualloc::common {

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

// Internal naming `call` for a mode the vendor answered that gpualloc does not
// know.
template <typename VendorMode>
absl::StatusOr<CaptureMode> FromVendorMode(
    VendorMode mode, const VendorCaptureModes<VendorMode>& modes,
    absl::string_view call) {
  if (mode == modes.global) return CaptureMode::kGlobal;
  if (mode == modes.thread_local_mode) return CaptureMode::kThreadLocal;
  if (mode == modes.relaxed) return CaptureMode::kRelaxed;
  return absl::InternalError(
      absl::StrCat(call, " answered capture mode ", static_cast<int>(mode),
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

// Whether `status` is a capture underway (active or invalidated); Internal
// naming `call` for a status gpualloc does not know.
template <typename VendorStatus>
absl::StatusOr<bool> IsCaptureUnderway(
    VendorStatus status, const VendorCaptureStatuses<VendorStatus>& statuses,
    absl::string_view call) {
  if (status == statuses.none) return false;
  if (status == statuses.active || status == statuses.invalidated) return true;
  return absl::InternalError(
      absl::StrCat(call, " answered capture status ", static_cast<int>(status),
                   ", which is none of none, active, invalidated"));
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_CAPTURE_MODE_H_
