// SPDX-License-Identifier: Apache-2.0
// tools/info.cc: gpualloc-info, what gpualloc would do on this machine.
//
// Resolves the configuration (a configuration string, then the process
// environment, then the defaults; docs/REFERENCE.md, "Precedence"), creates
// the backend it names and prints the device, the architecture profile the
// allocator tunes by, every setting with where it came from, and the resulting
// limit. A configuration or backend error goes to stderr with exit status 1, so
// scripts can check a configuration before a long run.
// PyTorch keys gpualloc does not support, or that a GPUALLOC_* variable
// overrides, are named in one warning line on stderr (ResolveConfig writes it).
//
// Uses the public headers only (docs/DESIGN.md, "Layers"), and the
// command-line parser the tools share (tools/cli.h).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "tools/cli.h"

namespace {

constexpr absl::string_view kUsage =
    "usage: gpualloc-info [--config STRING] [--sim PROFILE] [--device N]\n"
    "\n"
    "Reads: the command line and the environment, as a program using the\n"
    "library does (GPUALLOC_* variables, their JAX/XLA/TF aliases and\n"
    "PYTORCH_ALLOC_CONF). gpualloc-replay and gpualloc-tune read the command\n"
    "line only.\n"
    "\n"
    "Prints the device gpualloc would use, its architecture profile, the\n"
    "effective configuration (with where each value came from) and the\n"
    "resulting memory limit. Without a GPU (backend=auto, the default, finds\n"
    "none) it says so, prints the configuration and exits 0; --sim PROFILE\n"
    "shows the simulated device instead.\n"
    "\n"
    "  --config STRING  settings as key=value[,key=value...]; they take\n"
    "                   precedence over GPUALLOC_* variables, which take\n"
    "                   precedence over their JAX/XLA/TF aliases and the\n"
    "                   keys of PyTorch's PYTORCH_ALLOC_CONF (or\n"
    "                   PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF),\n"
    "                   which take precedence over the defaults. The keys\n"
    "                   are listed below.\n"
    "                   Example: backend=sim,device_memory=80GB,arch=h100\n"
    "  --sim PROFILE    the simulated device of that profile: the same as\n"
    "                   --config backend=sim,arch=PROFILE\n"
    "                   (profiles: $PROFILES)\n"
    "  --device N       the device ordinal (default 0)\n"
    "  --help           this text\n"
    "\n"
    "Exit status: 0 on success and when no GPU is found, 1 on a\n"
    "configuration or device error, 2 on bad command-line arguments.\n";

// The first line of the output: what was read.
constexpr absl::string_view kReads =
    "Settings from: the command line, then the environment (GPUALLOC_*, "
    "JAX/XLA/TF and PyTorch variables), then the defaults\n";

std::string ProfileNames() {
  std::vector<std::string> names;
  for (const gpualloc::ArchProfile& p : gpualloc::AllArchProfiles()) {
    names.push_back(std::string(p.name));
  }
  return absl::StrJoin(names, ", ");
}

std::string UsageText() {
  return absl::StrReplaceAll(kUsage, {{"$PROFILES", ProfileNames()}});
}

// Label column width of the device and profile sections.
constexpr int kLabelWidth = 22;

// "2 MiB" when exact, "74.51 GiB" otherwise, "512 B" below 1 KiB.
std::string Human(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  std::uint64_t scale = 1;
  while (unit + 1 < 6 && bytes / scale >= 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) return absl::StrCat(bytes / scale, " ", kUnits[unit]);
  return absl::StrFormat("%.2f %s", static_cast<double>(bytes) / scale,
                         kUnits[unit]);
}

// "80000000000 B (74.51 GiB)"; just "2 MiB" style when the bytes add nothing.
std::string Bytes(std::uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  return absl::StrCat(bytes, " B (", Human(bytes), ")");
}

std::string Sizes(const std::vector<std::uint64_t>& sizes) {
  if (sizes.empty()) return "none reported";
  std::vector<std::string> parts;
  for (std::uint64_t s : sizes) parts.push_back(Human(s));
  return absl::StrJoin(parts, ", ");
}

void Row(absl::string_view label, absl::string_view value) {
  absl::PrintF("  %-*s%s\n", kLabelWidth, label, value);
}

// Prints `text` as the value of `label`, wrapped at about 100 columns with
// continuation lines indented under the value.
void WrappedRow(absl::string_view label, absl::string_view text) {
  constexpr std::size_t kWidth = 100 - 2 - kLabelWidth;
  std::vector<std::string> lines(1);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!lines.back().empty() &&
        lines.back().size() + 1 + word.size() > kWidth) {
      lines.emplace_back();
    }
    if (!lines.back().empty()) lines.back() += ' ';
    absl::StrAppend(&lines.back(), word);
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    Row(i == 0 ? label : "", lines[i]);
  }
}

const char* YesNo(bool b) { return b ? "yes" : "no"; }

void PrintDevice(const gpualloc::DeviceInfo& d) {
  absl::PrintF("Device\n");
  Row("backend", d.backend);
  Row("vendor", gpualloc::VendorName(d.vendor));
  Row("name", d.name);
  Row("arch id", d.arch_id.empty() ? "(none reported)" : d.arch_id);
  Row("ordinal", absl::StrCat(d.ordinal));
  Row("total memory", Bytes(d.total_bytes));
  Row("granularity",
      absl::StrCat("minimum ", Human(d.min_granularity), ", recommended ",
                   Human(d.recommended_granularity)));
  Row("allocation alignment", Human(d.allocation_alignment));
  Row("page sizes", Sizes(d.page_sizes));
  const gpualloc::Capabilities& c = d.capabilities;
  Row("capabilities",
      absl::StrCat("virtual memory: ", YesNo(c.virtual_memory),
                   ", streams: ", YesNo(c.streams),
                   ", stream-ordered pools: ", YesNo(c.stream_ordered_pools),
                   ", graph capture: ", YesNo(c.graph_capture),
                   ", host accessible: ", YesNo(c.host_accessible),
                   ", host copy: ", YesNo(c.host_copy),
                   ", ipc handles: ", YesNo(c.ipc_handles),
                   ", shareable handles: ", YesNo(c.shareable_handles),
                   ", host memory: ", YesNo(c.host_memory),
                   ", completion counters: ", YesNo(c.completion_counters)));
  Row("driver version",
      d.driver_version.empty() ? "(none reported)" : d.driver_version);
}

// The architecture profile the allocator tunes by, chosen as
// core/config/options.cc chooses it: arch=NAME, else the backend's own match,
// else detection.
absl::StatusOr<const gpualloc::ArchProfile*> ProfileOf(
    const gpualloc::Config& config, const gpualloc::DeviceInfo& d) {
  const std::string& arch = config.options.arch;
  const bool detect = arch.empty() || arch == "auto";
  if (detect && !d.profile.empty()) return gpualloc::FindArchProfile(d.profile);
  if (detect) {
    return gpualloc::FindArchProfile(d.vendor, d.arch_id, d.total_bytes);
  }
  return gpualloc::FindArchProfile(arch);
}

void PrintProfile(const gpualloc::Config& config,
                  const gpualloc::DeviceInfo& d) {
  absl::PrintF("\nArchitecture profile\n");
  const std::string& arch = config.options.arch;
  const bool detect = arch.empty() || arch == "auto";
  const bool from_backend = detect && !d.profile.empty();
  absl::StatusOr<const gpualloc::ArchProfile*> found = ProfileOf(config, d);
  if (!found.ok()) {
    Row("profile", "none matches; the allocator uses the device's own numbers");
    WrappedRow("why", found.status().message());
    return;
  }
  const gpualloc::ArchProfile& p = **found;
  Row("profile", absl::StrCat(p.name, " (", p.description, ")"));
  Row("chosen by",
      from_backend ? absl::StrCat("backend ", d.backend, ": ", d.profile_reason)
      : detect
          ? absl::StrCat("detection: vendor ", gpualloc::VendorName(d.vendor),
                         ", arch id ", d.arch_id.empty() ? "(none)" : d.arch_id,
                         ", memory ", Human(d.total_bytes))
          : absl::StrCat("arch=", arch));
  Row("arch ids", p.arch_ids.empty() ? "(generic fallback)"
                                     : absl::StrJoin(p.arch_ids, ", "));
  Row("memory",
      p.memory_bytes == 0 ? "(from the device)" : Bytes(p.memory_bytes));
  Row("granularity",
      absl::StrCat("minimum ", Human(p.min_granularity), ", recommended ",
                   Human(p.recommended_granularity)));
  Row("allocation alignment", Human(p.allocation_alignment));
  Row("page sizes", Sizes(p.page_sizes));
  Row("min block size", Human(p.min_block_size));
  Row("large page size",
      p.large_page_size == 0 ? "(none)" : Human(p.large_page_size));
  WrappedRow("sources", p.sources);
}

// The value as printed: sizes get human units, empty labels a marker.
std::string ShowValue(const gpualloc::ConfigSetting& s) {
  if (s.value.empty()) return "(none)";
  if (s.key == "mem_limit" || s.key == "device_memory") {
    std::uint64_t bytes = 0;
    const auto [end, ec] =
        std::from_chars(s.value.data(), s.value.data() + s.value.size(), bytes);
    if (ec == std::errc() && end == s.value.data() + s.value.size()) {
      return Bytes(bytes);
    }
  }
  return s.value;
}

void PrintConfig(const gpualloc::Config& config) {
  absl::PrintF("\nConfiguration\n");
  std::vector<std::vector<std::string>> rows = {
      {"key", "value", "origin", "source"}};
  for (const gpualloc::ConfigSetting& s : config.settings) {
    rows.push_back({s.key, ShowValue(s),
                    std::string(gpualloc::ValueOriginName(s.origin)),
                    s.source});
  }
  std::vector<std::size_t> width(4, 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  rows.insert(rows.begin() + 1,
              {std::string(width[0], '-'), std::string(width[1], '-'),
               std::string(width[2], '-'), std::string(width[3], '-')});
  for (const auto& row : rows) {
    absl::PrintF("  %-*s  %-*s  %-*s  %s\n", width[0], row[0], width[1], row[1],
                 width[2], row[2], row[3]);
  }
}

const gpualloc::ConfigSetting* Setting(const gpualloc::Config& config,
                                       absl::string_view key) {
  for (const gpualloc::ConfigSetting& s : config.settings) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

// The settings only allocator=bfc reads: platform and async mode keep no
// regions or chunks of their own (core/config/options.cc,
// core/modes/platform_allocator.cc, core/modes/async_allocator.cc). The async
// mode reads gc (it waits for pending frees and retries on out of memory); the
// platform mode does not.
std::vector<absl::string_view> BfcOnlyKeys(gpualloc::AllocatorMode mode) {
  std::vector<absl::string_view> keys = {"preallocate", "expandable"};
  if (mode == gpualloc::AllocatorMode::kPlatform) keys.push_back("gc");
  for (absl::string_view k :
       {"cross_stream", "growth", "split_bound", "front_cache"}) {
    keys.push_back(k);
  }
  return keys;
}

void PrintLimit(const gpualloc::Config& config, const gpualloc::Stats& stats,
                const gpualloc::DeviceInfo& d) {
  absl::PrintF("\nLimit\n");
  const gpualloc::Options& o = config.options;
  const bool bfc = o.mode == gpualloc::AllocatorMode::kBfc;
  const bool platform = o.mode == gpualloc::AllocatorMode::kPlatform;
  const std::string mode(gpualloc::AllocatorModeName(o.mode));
  // The granularity and minimum block as core/config/options.cc resolves them:
  // the option, else the profile's (the larger of its and the device's
  // recommended granularity), else 2 MiB and 256 B.
  absl::StatusOr<const gpualloc::ArchProfile*> profile = ProfileOf(config, d);
  const gpualloc::ArchProfile* p = profile.ok() ? *profile : nullptr;
  std::uint64_t granularity = o.growth_granularity;
  if (granularity == 0) {
    granularity = d.recommended_granularity;
    if (p != nullptr && p->recommended_granularity > granularity) {
      granularity = p->recommended_granularity;
    }
    if (granularity == 0) granularity = std::uint64_t{2} << 20;
  }
  const std::uint64_t min_block = o.min_block_size != 0 ? o.min_block_size
                                  : p != nullptr        ? p->min_block_size
                                                        : 256;
  Row("bytes limit", Bytes(stats.bytes_limit));
  std::string why;
  if (o.memory_limit != 0) {
    const gpualloc::ConfigSetting* fraction = Setting(config, "mem_fraction");
    why = absl::StrCat("mem_limit ", Human(o.memory_limit));
    if (fraction != nullptr &&
        fraction->origin != gpualloc::ValueOrigin::kDefault) {
      absl::StrAppend(&why, " (overrides mem_fraction ", fraction->value,
                      " from ", fraction->source, ")");
    }
  } else {
    why = absl::StrFormat("mem_fraction %s of %s",
                          Setting(config, "mem_fraction")->value,
                          Human(d.total_bytes));
  }
  // Every mode's limit is rounded down to the granularity; only bfc grows by
  // it.
  absl::StrAppend(&why,
                  bfc ? ", rounded down to whole growth granules ("
                      : ", rounded down to a multiple of the granularity (",
                  Human(granularity), ")");
  Row("from", why);
  const std::string unit =
      Human(std::max<std::uint64_t>(d.allocation_alignment, 1));
  if (platform) {
    WrappedRow(
        "counts",
        absl::StrCat(
            "the live blocks only, each its own device allocation: its size "
            "rounded up to the minimum block (",
            Human(min_block),
            ") and to whole units of the device's allocation alignment (", unit,
            "); nothing is cached, so a freed block no longer counts"));
    WrappedRow("reserves",
               "nothing ahead of time: every Allocate is one device "
               "allocation and every Deallocate one device free");
  } else if (!bfc) {
    WrappedRow(
        "counts",
        absl::StrCat(
            "the live blocks (each its size rounded up to the minimum block, ",
            Human(min_block),
            "; the pool rounds its own sizes) and frees not yet handed back "
            "to the pool"));
    WrappedRow("reserves",
               "nothing ahead of time: every Allocate is one allocation from "
               "the device's stream-ordered pool, which keeps freed memory up "
               "to the limit (its release threshold)");
  } else {
    // What the allocator will do with this device (core/config/options.cc
    // decides the same way: expandable regions in bfc mode where virtual memory
    // works).
    const bool expandable = o.expandable != gpualloc::Tristate::kOff &&
                            d.capabilities.virtual_memory;
    if (expandable) {
      Row("growth",
          o.preallocate
              ? "the whole limit is mapped on the first allocation into one "
                "reserved address range (preallocate=true, expandable regions)"
              : "granules are mapped on demand into one reserved address range "
                "up to the limit, free ones unmapped (expandable regions)");
    } else {
      Row("growth", o.preallocate
                        ? "the whole limit is reserved as one region on the "
                          "first allocation (preallocate=true)"
                        : "regions are added on demand up to the limit "
                          "(preallocate=false)");
    }
    return;
  }
  // The bfc-only settings, naming those given here (they change nothing).
  std::vector<std::string> given;
  for (absl::string_view key : BfcOnlyKeys(o.mode)) {
    const gpualloc::ConfigSetting* s = Setting(config, key);
    if (s != nullptr && s->origin != gpualloc::ValueOrigin::kDefault) {
      given.push_back(absl::StrCat(key, "=", s->value, " (", s->source, ")"));
    }
  }
  WrappedRow(
      "not used",
      absl::StrCat(absl::StrJoin(BfcOnlyKeys(o.mode), ", "),
                   ": allocator=bfc settings, without effect in "
                   "allocator=",
                   mode,
                   given.empty() ? ""
                                 : absl::StrCat("; given here: ",
                                                absl::StrJoin(given, ", "))));
}

// Every configuration key and its variable, from the library's own list so
// that it cannot drift from what the parser takes.
std::string KeysHelp() {
  std::string out = absl::StrFormat("\nConfiguration keys:\n  %-15s%-24s%s\n",
                                    "key", "variable", "values");
  for (const gpualloc::ConfigKeyInfo& k : gpualloc::ConfigKeys()) {
    absl::StrAppendFormat(&out, "  %-15s%-24s%s\n", k.key, k.variable,
                          k.values);
  }
  return out;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "gpualloc-info: %s\n", status.message());
  return 1;
}

int Usage(absl::string_view why) {
  absl::FPrintF(stderr, "gpualloc-info: %s\n%s", why, UsageText());
  return 2;
}

// What the command line asks for.
struct Args {
  std::string config_string;
  bool have_config = false;
  std::string sim_profile;
  int ordinal = 0;
};

absl::Status SetConfig(const std::string& value, Args* args) {
  if (args->have_config) {
    return absl::InvalidArgumentError("--config given twice");
  }
  args->have_config = true;
  args->config_string = value;
  return absl::OkStatus();
}

absl::Status SetSim(const std::string& value, Args* args) {
  if (!args->sim_profile.empty()) {
    return absl::InvalidArgumentError("--sim given twice");
  }
  if (!gpualloc::FindArchProfile(value).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sim \"", value, "\" is not a profile; profiles: ", ProfileNames()));
  }
  args->sim_profile = value;
  return absl::OkStatus();
}

absl::Status SetDevice(const std::string& value, Args* args) {
  const auto [end, ec] =
      std::from_chars(value.data(), value.data() + value.size(), args->ordinal);
  if (ec != std::errc() || end != value.data() + value.size() ||
      args->ordinal < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device \"", value, "\" is not a device ordinal (0, 1, ...)"));
  }
  return absl::OkStatus();
}

// "--flag value" and "--flag=value" alike.
absl::StatusOr<gpualloc::cli::Parsed> ParseArgs(int argc, char** argv,
                                                Args* args) {
  const auto with_args = [args](
                             absl::Status (*set)(const std::string&, Args*)) {
    return [args, set](const std::string& value) { return set(value, args); };
  };
  gpualloc::cli::Parser parser(gpualloc::cli::Syntax{.equals_values = true});
  parser.Value("--config", with_args(SetConfig))
      .Value("--sim", with_args(SetSim))
      .Value("--device", with_args(SetDevice));
  return parser.Parse(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  absl::StatusOr<gpualloc::cli::Parsed> parsed = ParseArgs(argc, argv, &args);
  if (!parsed.ok()) return Usage(parsed.status().message());
  if (*parsed == gpualloc::cli::Parsed::kHelp) {
    absl::PrintF("%s%s", UsageText(), KeysHelp());
    return 0;
  }
  std::string& config_string = args.config_string;
  const std::string& sim_profile = args.sim_profile;
  const int ordinal = args.ordinal;
  if (!sim_profile.empty()) {
    // --sim is backend=sim,arch=PROFILE in front of --config, which must not
    // say otherwise.
    absl::StatusOr<gpualloc::ConfigOverrides> given =
        gpualloc::ParseConfigString(config_string);
    if (given.ok() && (given->backend.has_value() || given->arch.has_value())) {
      return Usage("--sim sets backend and arch; --config must not set them");
    }
    config_string =
        absl::StrCat("backend=sim,arch=", sim_profile,
                     config_string.empty() ? "" : ",", config_string);
  }
  absl::StatusOr<gpualloc::Config> config =
      gpualloc::ResolveConfig(config_string, gpualloc::ProcessEnvironment());
  if (!config.ok()) return Fail(config.status());
  absl::PrintF("%s\n", kReads);
  absl::StatusOr<int> count = gpualloc::DeviceCount(*config);
  if (!count.ok() && config->backend == gpualloc::BackendKind::kAuto &&
      absl::IsFailedPrecondition(count.status())) {
    // backend=auto found no GPU: an answer, not an error. What would be used
    // on a machine with one is still worth seeing.
    absl::PrintF("No GPU found\n");
    WrappedRow("why", count.status().message());
    WrappedRow("simulator",
               absl::StrCat("gpualloc-info --sim PROFILE shows a simulated "
                            "device (profiles: ",
                            ProfileNames(), ")"));
    PrintConfig(*config);
    return 0;
  }
  if (!count.ok()) return Fail(count.status());
  if (ordinal >= *count) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--device ", ordinal, ": backend ",
                     gpualloc::BackendKindName(config->backend), " has ",
                     *count, " device", *count == 1 ? "" : "s")));
  }
  absl::StatusOr<std::shared_ptr<gpualloc::Backend>> backend =
      gpualloc::CreateBackend(*config, ordinal);
  if (!backend.ok()) return Fail(backend.status());
  const gpualloc::DeviceInfo& device = (*backend)->info();

  PrintDevice(device);
  PrintProfile(*config, device);
  PrintConfig(*config);
  // The allocator computes the limit exactly as a program would get it;
  // creating one touches no device memory.
  absl::StatusOr<std::unique_ptr<gpualloc::Allocator>> allocator =
      gpualloc::CreateAllocator(config->options, *backend);
  std::fflush(stdout);
  if (!allocator.ok()) {
    return Fail(absl::Status(allocator.status().code(),
                             absl::StrCat("cannot create the allocator: ",
                                          allocator.status().message())));
  }
  PrintLimit(*config, (*allocator)->GetStats(), device);
  return 0;
}
