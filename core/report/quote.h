// SPDX-License-Identifier: Apache-2.0
// core/report/quote.h: user input as a message quotes it. Control characters
// and quotes become C escapes, and long text is cut to its first
// kMaxQuotedInput bytes, "...", and its whole length, so that one bad value
// (a 100 KB configuration entry, a 5 MB JSON string) cannot flood a terminal
// or a log: every warning and error quotes input through these.
#ifndef GPUALLOC_CORE_REPORT_QUOTE_H_
#define GPUALLOC_CORE_REPORT_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "core/layer.h"

namespace gpualloc::core {

inline constexpr std::size_t kMaxQuotedInput = 80;

// "text" (escaped), or "first 80 bytes..." (N bytes).
std::string QuoteInput(absl::string_view text);
// The same without the quotes: for a name the message does not quote
// (a variable's, a key's).
std::string ClipInput(absl::string_view text);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_REPORT_QUOTE_H_
