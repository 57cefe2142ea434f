// SPDX-License-Identifier: Apache-2.0
// core/config/key_modes.h: the modes column of the configuration key table
// (core/config/config_keys.h, kKeys): which allocator modes read each key, and
// for a key the other modes refuse, the words of the refusal.
// core::CheckOptions (core/config/options.cc) makes the one check from it, for
// Options given by a program and for those a configuration resolved to
// (DeviceRegistry::Create and so the C API check them at creation), and the
// runtime layer restates its message with the keys or variables that set each
// value.
#ifndef GPUALLOC_CORE_KEY_MODES_H_
#define GPUALLOC_CORE_KEY_MODES_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

// A set of allocator modes: bit ModeBit(mode) per mode.
using ModeSet = std::uint32_t;
constexpr ModeSet ModeBit(AllocatorMode mode) {
  return ModeSet{1} << static_cast<unsigned>(mode);
}
inline constexpr ModeSet kAllModes = ModeBit(AllocatorMode::kBfc) |
                                     ModeBit(AllocatorMode::kPlatform) |
                                     ModeBit(AllocatorMode::kAsync);

// A key that only the modes in `modes` read and that the others refuse when
// its value asks for what only those modes have.
struct ModeRefusal {
  absl::string_view key;    // "history"
  absl::string_view field;  // its Options field: "history"
  ModeSet modes;            // the modes that read it
  // The value in C++ terms ("10", "kOn") when it asks for what only those
  // modes have; empty when it does not (off, auto), which every mode takes.
  std::string (*asks)(const Options& options);
  // What the key turns on ("the allocation history"); empty when the key's
  // name says it.
  absl::string_view feature;
  // Why another mode cannot ("records none"), after the mode's name.
  absl::string_view lacks;
  // What the key's default means ("no history").
  absl::string_view reset;
};

// The keys of the table that some modes refuse, in the table's order.
absl::Span<const ModeRefusal> ModeRefusals();

// "allocator=bfc", "allocator=bfc or allocator=async".
std::string ModeSetName(ModeSet modes);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_KEY_MODES_H_
