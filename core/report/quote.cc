// SPDX-License-Identifier: Apache-2.0
// core/report/quote.cc: see quote.h.
#include "core/report/quote.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpualloc::core {

std::string QuoteInput(absl::string_view text) {
  if (text.size() <= kMaxQuotedInput) {
    return absl::StrCat("\"", absl::CEscape(text), "\"");
  }
  return absl::StrCat("\"", absl::CEscape(text.substr(0, kMaxQuotedInput)),
                      "...\" (", text.size(), " bytes)");
}

std::string ClipInput(absl::string_view text) {
  if (text.size() <= kMaxQuotedInput) return absl::CEscape(text);
  return absl::StrCat(absl::CEscape(text.substr(0, kMaxQuotedInput)), "... (",
                      text.size(), " bytes)");
}

}  // namespace gpualloc::core
