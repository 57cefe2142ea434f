// core/backend.cc: the vendor-neutral parts of the Backend interface.

#include "gpualloc/backend.h"

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

}  // namespace gpualloc
