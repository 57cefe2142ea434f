// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_profile.cc: the architecture profile of an NVIDIA
// device, chosen by its name, compute capability and memory size.
#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"

namespace gpualloc::cuda {
namespace {

// Profiles chosen by the device's name: the marketing name NVIDIA's driver
// reports ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200")
// contains the product as a word (the Grace Hopper "NVIDIA GH200 480GB" does
// not name the H200).
struct NamedProfile {
  absl::string_view token;    // searched in the device name, case-insensitive
  absl::string_view profile;  // ArchProfile::name
};
constexpr NamedProfile kNamedProfiles[] = {
    {"H200", "h200"},
    {"H100", "h100"},
    {"A100", "a100"},
};

// `word` in `text` with no letter or digit on either side ("GH200" does not
// name the H200; "A100-SXM4-80GB" names the A100).
bool ContainsWord(absl::string_view text, absl::string_view word) {
  for (std::size_t at = text.find(word); at != absl::string_view::npos;
       at = text.find(word, at + 1)) {
    const std::size_t end = at + word.size();
    const bool starts = at == 0 || !absl::ascii_isalnum(text[at - 1]);
    const bool ends = end == text.size() || !absl::ascii_isalnum(text[end]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

std::string ArchIdFor(int major, int minor) {
  return absl::StrCat("sm_", major, minor);
}

ProfileChoice ChooseNvidiaProfile(absl::string_view device_name, int major,
                                  int minor, std::uint64_t total_bytes) {
  const std::string arch_id = ArchIdFor(major, minor);
  const std::string upper = absl::AsciiStrToUpper(device_name);
  std::string name_note;
  for (const NamedProfile& named : kNamedProfiles) {
    if (!ContainsWord(upper, named.token)) continue;
    absl::StatusOr<const ArchProfile*> p = FindArchProfile(named.profile);
    if (!p.ok()) break;
    const bool arch_agrees =
        std::find((*p)->arch_ids.begin(), (*p)->arch_ids.end(), arch_id) !=
        (*p)->arch_ids.end();
    if (arch_agrees) {
      return {*p,
              absl::StrCat("the device name \"", device_name, "\" names the ",
                           named.token, " (", arch_id, ")")};
    }
    name_note = absl::StrCat("the device name \"", device_name, "\" names the ",
                             named.token, " but its compute capability ", major,
                             ".", minor, " is not that profile's; ");
    break;
  }
  absl::StatusOr<const ArchProfile*> by_arch =
      FindArchProfile(Vendor::kNvidia, arch_id, total_bytes);
  if (!by_arch.ok()) {  // the table always has generic-nvidia
    return {nullptr, std::string(by_arch.status().message())};
  }
  const ArchProfile* p = *by_arch;
  if (name_note.empty()) {
    name_note = absl::StrCat("no profile names \"", device_name, "\"; ");
  }
  if (p->arch_ids.empty()) {
    return {p, absl::StrCat(name_note, "no profile lists ", arch_id,
                            " (compute capability ", major, ".", minor,
                            "): the generic NVIDIA profile")};
  }
  return {p, absl::StrCat(name_note, "chosen by architecture ", arch_id,
                          " and the closest memory size (", total_bytes >> 20,
                          " MiB)")};
}

}  // namespace gpualloc::cuda
