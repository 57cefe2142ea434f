// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_capture.cc: the HIP backend's stream-capture queries
// (hipStreamIsCapturing, hipThreadExchangeStreamCaptureMode), present when
// the runtime has both (capabilities.graph_capture).
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/common/capture_mode.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"

namespace gpualloc::hip {
namespace {

using internal::Hex;
using internal::ToStream;

constexpr common::VendorCaptureModes<hipStreamCaptureMode> kCaptureModes = {
    hipStreamCaptureModeGlobal, hipStreamCaptureModeThreadLocal,
    hipStreamCaptureModeRelaxed};
constexpr common::VendorCaptureStatuses<hipStreamCaptureStatus>
    kCaptureStatuses = {hipStreamCaptureStatusNone,
                        hipStreamCaptureStatusActive,
                        hipStreamCaptureStatusInvalidated};

}  // namespace

absl::StatusOr<bool> HipBackend::IsCapturing(Stream stream) {
  if (!info_.capabilities.graph_capture) {
    return NotSupported("IsCapturing", "graph_capture");
  }
  return OnDevice<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
    const std::string call =
        absl::StrCat("hipStreamIsCapturing(stream ", Hex(stream.handle), ")");
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    const hipError_t e = api_->StreamIsCapturing(ToStream(stream), &status);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, call);
    return common::IsCaptureUnderway(&status, kCaptureStatuses, call);
  });
}

absl::StatusOr<CaptureMode> HipBackend::ExchangeCaptureMode(CaptureMode mode) {
  if (!info_.capabilities.graph_capture) {
    return NotSupported("ExchangeCaptureMode", "graph_capture");
  }
  return OnDevice<absl::StatusOr<CaptureMode>>(
      [&]() -> absl::StatusOr<CaptureMode> {
        hipStreamCaptureMode exchanged =
            common::ToVendorMode(mode, kCaptureModes);
        const hipError_t e = api_->ThreadExchangeStreamCaptureMode(&exchanged);
        if (e != hipSuccess) {
          return HipErrorStatus(*api_, e, "hipThreadExchangeStreamCaptureMode");
        }
        return common::FromVendorMode(&exchanged, kCaptureModes,
                                      "hipThreadExchangeStreamCaptureMode");
      });
}

}  // namespace gpualloc::hip
