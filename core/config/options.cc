// SPDX-License-Identifier: Apache-2.0
// core/config/options.cc: validation and defaults of allocator Options.
//
// Every error about the options is an OptionsProblem (core/config/options.h):
// the fields involved and a message with placeholders for them. The status's
// message renders it with the fields' C++ names; the problem rides along as
// a payload, so that the runtime layer can render it again with the
// configuration keys and variables the user set.
#include "core/config/options.h"

#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/bfc/size_class.h"
#include "core/config/key_modes.h"
#include "core/report/format_bytes.h"
#include "core/report/quote.h"
#include "core/status_macros.h"

namespace gpualloc::core {
namespace {

constexpr absl::string_view kProblemPayload = "gpualloc.dev/OptionsProblem";

// Each Options field a problem can name: its configuration key and the value
// that takes its default, in C++ terms.
struct FieldInfo {
  absl::string_view field;
  absl::string_view key;
  absl::string_view default_value;
};
constexpr FieldInfo kFields[] = {
    {"mode", "allocator", "AllocatorMode::kBfc"},
    {"preallocate", "preallocate", "true"},
    {"memory_fraction", "mem_fraction", "0.75"},
    {"memory_limit", "mem_limit", "0"},
    {"expandable", "expandable", "Tristate::kAuto"},
    {"arch", "arch", "\"auto\""},
    {"garbage_collection", "gc", "true"},
    {"gc_threshold", "gc_threshold", "0"},
    {"cross_stream_reuse", "cross_stream", "CrossStreamReuse::kBeforeGrowth"},
    {"growth_policy", "growth", "GrowthPolicy::kExact"},
    {"growth_granularity", "granularity", "0"},
    {"min_block_size", "min_block", "0"},
    {"max_internal_fragmentation", "split_bound", "0"},
    {"size_divisions", "size_divisions", "0"},
    {"history", "history", "0"},
    {"front_cache", "front_cache", "0"},
    {"name", "name", "\"\""},
    {"trim_before_growth", "", "true"},
    {"large_page_placement", "", "true"},
};

const FieldInfo* FindField(absl::string_view field) {
  for (const FieldInfo& f : kFields) {
    if (f.field == field) return &f;
  }
  return nullptr;
}

// The problem as an InvalidArgument: the message in C++ terms, the problem
// as a payload ("field\tvalue\tderived" lines, then the text).
absl::Status Problem(std::vector<OptionsField> fields, std::string text) {
  OptionsProblem problem{std::move(fields), std::move(text)};
  const std::string message = RenderOptionsProblem(
      problem,
      [&](std::size_t i) {
        const OptionsField& f = problem.fields[i];
        if (f.derived.empty())
          return absl::StrCat("Options.", f.field, "=", f.value);
        return absl::StrCat(f.derived, " ", f.field, "=", f.value, " (Options.",
                            f.field, " left to its default)");
      },
      [&](std::size_t i) {
        return absl::StrCat("Options.", problem.fields[i].field);
      },
      [&](std::size_t i) {
        const FieldInfo* info = FindField(problem.fields[i].field);
        return absl::StrCat(
            "set Options.", problem.fields[i].field, " to ",
            info != nullptr ? info->default_value : "its default");
      });
  absl::Status status = absl::InvalidArgumentError(message);
  std::string payload;
  for (const OptionsField& f : problem.fields) {
    absl::StrAppend(&payload, f.field, "\t", f.value, "\t", f.derived, "\n");
  }
  absl::StrAppend(&payload, problem.text);
  status.SetPayload(kProblemPayload, absl::Cord(payload));
  return status;
}

OptionsField Own(absl::string_view field, absl::string_view value) {
  return OptionsField{std::string(field), std::string(value), ""};
}

std::string Bytes(std::uint64_t bytes) {
  return bytes < 1024
             ? absl::StrCat(bytes, " bytes")
             : absl::StrCat(bytes, " bytes (", FormatBytes(bytes), ")");
}

std::string ModeValue(AllocatorMode mode) {
  const absl::string_view name = AllocatorModeName(mode);
  std::string k(name);
  if (!k.empty()) k[0] = absl::ascii_toupper(static_cast<unsigned char>(k[0]));
  return absl::StrCat("k", k, " (allocator=", name, ")");
}

std::string Fraction(double f) { return absl::StrFormat("%g", f); }

// The shortest plain decimal (no exponent, which the configuration does not
// take) of at most 12 places that is at least `f`, for a fix: 1.4e-05 ->
// "0.000015".
std::string FractionAtLeast(double f) {
  for (int places = 1; places <= 12; ++places) {
    const double scale = std::pow(10.0, places);
    const double up = std::ceil(f * scale) / scale;
    if (up <= f * 1.1 || places == 12) {
      std::string text = absl::StrFormat("%.*f", places, up);
      while (text.back() == '0') text.pop_back();
      if (text.back() == '.') text.pop_back();
      return text;
    }
  }
  return Fraction(f);
}

// A setting that belongs to other allocator modes than options.mode, with a
// value that asks for what only they have: the modes column of the key table
// (core/config/key_modes.h), one message for every such key.
absl::Status CheckModes(const Options& options) {
  for (const ModeRefusal& r : ModeRefusals()) {
    if ((r.modes & ModeBit(options.mode)) != 0) continue;
    const std::string value = r.asks(options);
    if (value.empty()) continue;
    return Problem(
        {Own(r.field, value), Own("mode", ModeValue(options.mode))},
        absl::StrCat("{0}", r.feature.empty() ? "" : ": ", r.feature,
                     " belongs to ", ModeSetName(r.modes), ", but {1} ",
                     r.lacks, "; {reset0} (", r.reset, "), or {reset1}"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RenderOptionsProblem(
    const OptionsProblem& problem,
    const std::function<std::string(std::size_t)>& subject,
    const std::function<std::string(std::size_t)>& name,
    const std::function<std::string(std::size_t)>& reset) {
  std::string out;
  absl::string_view text = problem.text;
  while (!text.empty()) {
    const std::size_t open = text.find('{');
    const std::size_t close =
        open == absl::string_view::npos ? open : text.find('}', open);
    if (close == absl::string_view::npos) {
      out.append(text.data(), text.size());
      break;
    }
    out.append(text.data(), open);
    absl::string_view tag = text.substr(open + 1, close - open - 1);
    text.remove_prefix(close + 1);
    const std::function<std::string(std::size_t)>* render = &subject;
    if (absl::ConsumePrefix(&tag, "name")) {
      render = &name;
    } else if (absl::ConsumePrefix(&tag, "reset")) {
      render = &reset;
    }
    std::size_t i = 0;
    if (!absl::SimpleAtoi(tag, &i) || i >= problem.fields.size()) {
      absl::StrAppend(&out, "{", tag, "}");
      continue;
    }
    out += (*render)(i);
  }
  return out;
}

std::optional<OptionsProblem> OptionsProblemOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kProblemPayload);
  if (!payload.has_value()) return std::nullopt;
  OptionsProblem problem;
  const std::string text(*payload);
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  problem.text = std::string(lines.back());
  lines.pop_back();
  for (absl::string_view line : lines) {
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() != 3) return std::nullopt;
    problem.fields.push_back(OptionsField{parts[0], parts[1], parts[2]});
  }
  return problem;
}

absl::string_view ConfigKeyOfField(absl::string_view field) {
  const FieldInfo* info = FindField(field);
  return info != nullptr ? info->key : absl::string_view();
}

absl::Status CheckOptions(const Options& options) {
  if (options.min_block_size != 0 &&
      (!std::has_single_bit(options.min_block_size) ||
       options.min_block_size < 16)) {
    return Problem(
        {Own("min_block_size", absl::StrCat(options.min_block_size))},
        "{0} is not a power of two of at least 16 bytes; set "
        "{name0} to one (every current profile has 256), or "
        "{reset0} to take the profile's");
  }
  if (options.memory_limit == 0) {
    const double f = options.memory_fraction;
    if (!std::isfinite(f) || f <= 0 || f > 1) {
      return Problem({Own("memory_fraction", Fraction(f))},
                     "{0} is not in (0, 1]; set {name0} to a fraction of the "
                     "device's total memory in (0, 1], e.g. 0.75");
    }
  }
  if (options.size_divisions != 0 &&
      (!std::has_single_bit(options.size_divisions) ||
       options.size_divisions < 2 || options.size_divisions > 64)) {
    return Problem(
        {Own("size_divisions", absl::StrCat(options.size_divisions))},
        "{0} is not 0 (off) or a power of two from 2 to 64; set {name0} to "
        "one of those (4 rounds each size up to a quarter of its power of "
        "two), or {reset0}");
  }
  if (options.history > kMaxHistory) {
    return Problem(
        {Own("history", absl::StrCat(options.history))},
        absl::StrCat("{0} is more than the largest history, ", kMaxHistory,
                     " events; set {name0} to at most that, or "
                     "{reset0} (no history)"));
  }
  const double t = options.gc_threshold;
  if (!std::isfinite(t) || t < 0 || t >= 1) {
    return Problem({Own("gc_threshold", Fraction(t))},
                   "{0} is not 0 (off) or a fraction in (0, 1); set {name0} "
                   "to a fraction of the limit in (0, 1), e.g. 0.8, or "
                   "{reset0} (off)");
  }
  GPUALLOC_RETURN_IF_ERROR(CheckModes(options));
  if (t != 0 && !options.trim_before_growth) {
    return Problem(
        {Own("gc_threshold", Fraction(t)), Own("trim_before_growth", "false")},
        "{0} gives free memory back before growth, which {1} "
        "turns off; {reset1}, or {reset0} (off)");
  }
  return absl::OkStatus();
}

namespace {

// The architecture profile: the one options.arch names, else the one the
// backend matched the device to, else the one its vendor and numbers match
// (null when none does: the device's numbers then).
absl::StatusOr<const ArchProfile*> ResolveProfile(const Options& options,
                                                  const DeviceInfo& device) {
  if ((options.arch.empty() || options.arch == "auto") &&
      !device.profile.empty()) {
    auto found = FindArchProfile(device.profile);
    if (!found.ok()) {
      return absl::InternalError(absl::StrFormat(
          "backend %s matched device %s to profile \"%s\", which does not "
          "exist: %s",
          device.backend, device.name, device.profile,
          found.status().message()));
    }
    return *found;
  } else if (options.arch.empty() || options.arch == "auto") {
    auto found =
        FindArchProfile(device.vendor, device.arch_id, device.total_bytes);
    return found.ok() ? *found
                      : nullptr;  // unknown vendor: the device's numbers
  }
  auto found = FindArchProfile(options.arch);
  if (!found.ok()) {
    return Problem({Own("arch", QuoteInput(options.arch))},
                   absl::StrCat("{0}: ", found.status().message(),
                                "; set {name0} to \"auto\" or a profile "
                                "name, or {reset0}"));
  }
  return *found;
}

// r->min_block_size, checked against the device's allocation alignment;
// *field names it for later problems.
absl::Status ResolveMinBlock(const Options& options, const DeviceInfo& device,
                             ResolvedOptions* r, OptionsField* field) {
  r->min_block_size = options.min_block_size != 0 ? options.min_block_size
                      : r->profile != nullptr     ? r->profile->min_block_size
                                                  : 256;
  *field = OptionsField{"min_block_size", absl::StrCat(r->min_block_size),
                        options.min_block_size != 0 ? ""
                        : r->profile != nullptr     ? "the profile's"
                                                    : "the default"};
  if (device.allocation_alignment != 0 &&
      device.allocation_alignment % r->min_block_size != 0 &&
      r->min_block_size % device.allocation_alignment != 0) {
    return Problem(
        {*field},
        absl::StrCat("{0} is incompatible with the device's allocation "
                     "alignment, ",
                     Bytes(device.allocation_alignment),
                     ": one must divide the other; set {name0} to a power of "
                     "two that divides ",
                     device.allocation_alignment,
                     " or is a multiple of it, or {reset0} to take the "
                     "profile's"));
  }
  return absl::OkStatus();
}

// r->granularity: the option, else the larger of the device's and the
// profile's recommended granularity, else 2 MiB; checked against the minimum
// block and the device's minimum granularity. *field names it.
absl::Status ResolveGranularity(const Options& options,
                                const DeviceInfo& device,
                                const OptionsField& min_block,
                                ResolvedOptions* r, OptionsField* field) {
  std::uint64_t granularity = options.growth_granularity;
  std::string granularity_from;
  if (granularity == 0) {
    granularity = device.recommended_granularity;
    granularity_from = "the device's";
    if (r->profile != nullptr &&
        r->profile->recommended_granularity > granularity) {
      granularity = r->profile->recommended_granularity;
      granularity_from = "the profile's";
    }
  }
  if (granularity == 0) {
    granularity = std::uint64_t{2} << 20;
    granularity_from = "the default";
  }
  *field = OptionsField{"growth_granularity", absl::StrCat(granularity),
                        granularity_from};
  if (granularity % r->min_block_size != 0) {
    return Problem(
        {*field, min_block},
        absl::StrCat("{0} is not a multiple of {1}: region sizes are whole "
                     "minimum blocks; set {name0} to a multiple of ",
                     Bytes(r->min_block_size),
                     ", or {name1} to a power of two "
                     "that divides ",
                     granularity));
  }
  if (device.min_granularity != 0 &&
      granularity % device.min_granularity != 0) {
    return Problem(
        {*field},
        absl::StrCat("{0} is not a multiple of the device's minimum "
                     "granularity, ",
                     Bytes(device.min_granularity),
                     "; set {name0} to a multiple of ", device.min_granularity,
                     " bytes, or {reset0} to take the profile's"));
  }
  r->granularity = granularity;
  return absl::OkStatus();
}

// A limit that rounds down to no granule at all (`limit` bytes before
// rounding, from `limit_field`): what to raise or lower.
absl::Status LimitBelowOneGranule(const Options& options,
                                  const DeviceInfo& device, std::uint64_t limit,
                                  std::uint64_t granularity,
                                  const OptionsField& limit_field,
                                  const OptionsField& growth_granularity) {
  if (granularity > device.total_bytes) {
    const std::uint64_t smallest =
        device.min_granularity != 0 ? device.min_granularity : 16;
    return Problem(
        {limit_field, growth_granularity},
        absl::StrCat(
            "{0} makes a limit of ", Bytes(limit),
            ", smaller than one growth granule, {1}, which is more than "
            "the device's whole memory, ",
            Bytes(device.total_bytes), "; ",
            smallest > device.total_bytes
                ? absl::StrCat("the device's smallest granule, ",
                               Bytes(smallest),
                               ", is larger than that too: use a device "
                               "with more memory")
                : absl::StrCat("lower {name1} to a multiple of ", smallest,
                               " bytes no larger than that, or use a "
                               "device with more memory")));
  }
  const std::string raise =
      options.memory_limit != 0
          ? absl::StrCat("at least ", granularity, " bytes")
          : absl::StrCat(
                "at least ",
                FractionAtLeast(static_cast<double>(granularity) /
                                static_cast<double>(device.total_bytes)),
                " (one granule of the device's ", device.total_bytes,
                " bytes)");
  return Problem({limit_field, growth_granularity},
                 absl::StrCat("{0} makes a limit of ", Bytes(limit),
                              ", smaller than one growth granule, {1}; raise "
                              "{name0} to ",
                              raise, ", or lower {name1}"));
}

// r->limit: memory_limit, else memory_fraction of the device's total memory,
// rounded down to whole granules (r->granularity).
absl::Status ResolveLimit(const Options& options, const DeviceInfo& device,
                          const OptionsField& growth_granularity,
                          ResolvedOptions* r) {
  std::uint64_t limit;
  OptionsField limit_field;
  if (options.memory_limit != 0) {
    limit_field = Own("memory_limit", absl::StrCat(options.memory_limit));
    if (options.memory_limit > device.total_bytes) {
      return Problem(
          {limit_field},
          absl::StrCat("{0} is more than the device's total memory, ",
                       Bytes(device.total_bytes), "; set {name0} to at most ",
                       device.total_bytes,
                       " bytes, or {reset0} to take the limit from the "
                       "memory fraction"));
    }
    limit = options.memory_limit;
  } else {
    const double f = options.memory_fraction;
    limit_field = Own("memory_fraction", Fraction(f));
    limit =
        static_cast<std::uint64_t>(f * static_cast<double>(device.total_bytes));
    if (limit > device.total_bytes) limit = device.total_bytes;
  }
  r->limit = RoundDownToMultiple(limit, r->granularity);
  if (r->limit == 0) {
    return LimitBelowOneGranule(options, device, limit, r->granularity,
                                limit_field, growth_granularity);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options,
                                               const DeviceInfo& device) {
  ResolvedOptions r;
  r.options = options;
  if (device.total_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %s reports 0 bytes of total memory", device.name));
  }
  GPUALLOC_RETURN_IF_ERROR(CheckOptions(options));
  GPUALLOC_ASSIGN_OR_RETURN(r.profile, ResolveProfile(options, device));
  OptionsField min_block;
  GPUALLOC_RETURN_IF_ERROR(ResolveMinBlock(options, device, &r, &min_block));
  OptionsField growth_granularity;
  GPUALLOC_RETURN_IF_ERROR(
      ResolveGranularity(options, device, min_block, &r, &growth_granularity));
  GPUALLOC_RETURN_IF_ERROR(
      ResolveLimit(options, device, growth_granularity, &r));
  if (options.expandable == Tristate::kOn &&
      !device.capabilities.virtual_memory) {
    return Problem({Own("expandable", "kOn")},
                   absl::StrFormat("{0} asks for expandable regions, but "
                                   "backend %s (%s) has no virtual memory "
                                   "support; {reset0} (expandable regions "
                                   "where they work)",
                                   device.backend, device.name));
  }
  r.expandable = options.mode == AllocatorMode::kBfc &&
                 options.expandable != Tristate::kOff &&
                 device.capabilities.virtual_memory;
  r.size_divisions = options.size_divisions;
  r.history = options.history;
  // The history sees every operation, so it has no front caches (the other
  // modes refuse front_cache in CheckOptions).
  r.front_cache = options.history == 0 ? options.front_cache : 0;
  if (options.large_page_placement && r.profile != nullptr) {
    const std::uint64_t page = r.profile->large_page_size;
    if (std::has_single_bit(page) && page > r.min_block_size)
      r.large_page = page;
  }
  // Any alignment up to one granule can be honoured by padding inside a region.
  r.max_alignment = r.granularity;
  return r;
}

absl::StatusOr<std::uint64_t> NewLimit(std::uint64_t bytes, std::uint64_t unit,
                                       const DeviceInfo& device) {
  if (bytes > device.total_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SetLimit(%d bytes, %s): more than the device's total memory of %d "
        "bytes (%s) on %s",
        bytes, FormatBytes(bytes), device.total_bytes,
        FormatBytes(device.total_bytes), device.name));
  }
  const std::uint64_t limit = RoundDownToMultiple(bytes, unit);
  if (limit == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SetLimit(%d bytes): less than one growth granule of %d bytes (%s); "
        "the limit must hold at least one",
        bytes, unit, FormatBytes(unit)));
  }
  return limit;
}

absl::Status LiveAboveNewLimit(std::uint64_t limit, std::uint64_t held,
                               absl::string_view mode) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "SetLimit(%d bytes, %s): the live allocations hold %d bytes (%s), "
      "which allocator=%s caches none of; free memory first or choose a "
      "limit of at least %d bytes",
      limit, FormatBytes(limit), held, FormatBytes(held), mode, held));
}

}  // namespace gpualloc::core
