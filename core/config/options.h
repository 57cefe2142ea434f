// SPDX-License-Identifier: Apache-2.0
// core/config/options.h: checks allocator Options against a device and fills in
// defaults.
#ifndef GPUALLOC_CORE_OPTIONS_H_
#define GPUALLOC_CORE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

// Options with every "take the default" resolved for one device.
struct ResolvedOptions {
  Options options;
  const ArchProfile* profile = nullptr;  // null when the device matches none
  std::uint64_t limit = 0;               // bytes; a multiple of granularity
  std::uint64_t granularity = 0;         // region sizes are multiples of this
  std::uint64_t min_block_size = 0;
  // Options.size_divisions, checked: 0 (off) or a power of two 2..64.
  std::uint32_t size_divisions = 0;
  // Options.history, checked: entries, 0 (off) to kMaxHistory, bfc only.
  std::uint64_t history = 0;
  // Options.front_cache for bfc mode without history, else 0 (no fronts).
  std::uint64_t front_cache = 0;
  std::uint64_t max_alignment = 0;  // largest alignment Allocate accepts
  // Expandable regions resolved for this device (Options.expandable).
  bool expandable = false;
  // Big-page placement threshold and alignment; 0 for none.
  std::uint64_t large_page = 0;
  // The pinned host memory pool's allocator (CreateHostAllocator): its limit
  // is the host_memory_limit setting, which its out-of-memory hints name.
  bool host_pool = false;
};

// InvalidArgument naming the offending field and value; the device is only
// read (info), never called. Every error about the options (not the device)
// carries an OptionsProblem (below).
absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options,
                                               const DeviceInfo& device);

// The limit Allocator::SetLimit(bytes) asks for, rounded down to `unit`:
// InvalidArgument when that leaves nothing or exceeds the device's total
// memory.
absl::StatusOr<std::uint64_t> NewLimit(std::uint64_t bytes, std::uint64_t unit,
                                       const DeviceInfo& device);

// SetLimit's refusal in a mode that caches nothing: the live allocations
// hold `held` bytes, more than the new `limit`.
absl::Status LiveAboveNewLimit(std::uint64_t limit, std::uint64_t held,
                               absl::string_view mode);

// The checks of ResolveOptions that need no device: values out of range and
// settings that belong to another mode (size_divisions with
// allocator=platform). ResolveOptions makes them first.
absl::Status CheckOptions(const Options& options);

// ---------------------------------------------------- restating the errors
//
// An option error names the Options fields ("Options.growth_granularity=4096
// is not a multiple of ..."). When the options came from a configuration,
// the user set keys and variables, not fields: the runtime layer renders the
// same problem with the key or variable that set each field and its value as
// written (`GPUALLOC_GRANULARITY="4KiB" is not a multiple of ...`). So each
// error carries its problem as a payload of the status.

// One field an error is about.
struct OptionsField {
  std::string field;  // "growth_granularity"
  // The value the check used, in C++ terms ("4096", "kOn", "0.75").
  std::string value;
  // Empty when `value` is the field's own; else where it came from because
  // the field was left to its default ("the profile's", "the device's").
  std::string derived;
};

struct OptionsProblem {
  std::vector<OptionsField> fields;  // the one at fault first
  // The message, with placeholders for the fields: {N} is field N with its
  // value ("Options.growth_granularity=4096"), {nameN} the name to change
  // ("Options.growth_granularity"), {resetN} how to return it to its default
  // ("set Options.growth_granularity to 0"). Every message says why and how
  // to fix it.
  std::string text;
};

// The problem an error of ResolveOptions or CheckOptions carries; nullopt for
// any other status.
std::optional<OptionsProblem> OptionsProblemOf(const absl::Status& status);

// `problem.text` with each placeholder replaced by what `subject`, `name` and
// `reset` return for the field's index.
std::string RenderOptionsProblem(
    const OptionsProblem& problem,
    const std::function<std::string(std::size_t)>& subject,
    const std::function<std::string(std::size_t)>& name,
    const std::function<std::string(std::size_t)>& reset);

// The configuration key of an Options field ("growth_granularity" ->
// "granularity"); empty for a field without one (trim_before_growth).
absl::string_view ConfigKeyOfField(absl::string_view field);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_OPTIONS_H_
