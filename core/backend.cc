// core/backend.cc: the vendor-neutral parts of the Backend interface.

#include "gpualloc/backend.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpualloc {

absl::string_view VendorName(Vendor vendor) {
  switch (vendor) {
    case Vendor::kNvidia:
      return "nvidia";
    case Vendor::kAmd:
      return "amd";
    case Vendor::kUnknown:
      break;
  }
  return "unknown";
}

absl::Status Backend::NotSupported(absl::string_view operation) const {
  const DeviceInfo& device = info();
  return absl::UnimplementedError(
      absl::StrCat(operation, " is not supported by the ", device.backend,
                   " backend on ", device.name));
}

}  // namespace gpualloc
