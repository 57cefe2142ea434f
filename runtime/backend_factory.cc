// SPDX-License-Identifier: Apache-2.0
// runtime/backend_factory.cc: the backend a configuration names
// (gpualloc/runtime/registry.h's CreateBackend and DeviceCount), and the checks
// of a configuration that need no device call.
//
// The vendor backends (backends/cuda, backends/hip) are in the build when
// their toolkit headers were found (backends/vendor_backends.h); the errors
// for a backend this build lacks, and for auto when no driver loads, say so
// and name the way to the simulator. kVendorBackends below is the one place a
// vendor backend is added.
#include "runtime/backend_factory.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "backends/vendor_backends.h"
#include "core/config/config_parse.h"
#include "core/config/options.h"
#include "core/report/format_bytes.h"
#include "gpualloc/backends/sim_backend.h"

namespace gpualloc {
namespace runtime {

std::string FromWhere(const Config& config, absl::string_view key) {
  for (const ConfigSetting& s : config.settings) {
    if (s.key != key) continue;
    switch (s.origin) {
      case ValueOrigin::kDefault:
        return s.source == "default (PyTorch's)" ? " (PyTorch's default)"
                                                 : " (the default)";
      case ValueOrigin::kOption:
        return absl::StrCat(" (from the ", s.source, ")");
      case ValueOrigin::kVariable:
      case ValueOrigin::kAlias:
        return absl::StrCat(" (from ", s.source, ")");
    }
  }
  return "";
}

}  // namespace runtime
namespace {

using runtime::FromWhere;

// The profile the simulator models when arch is "auto" (docs/DESIGN.md,
// "Simulated device").
constexpr absl::string_view kDefaultSimProfile = "h200";

constexpr absl::string_view kUseSim =
    "GPUALLOC_BACKEND=sim (or backend=sim in a config string) selects the "
    "simulated device";

// A vendor backend this build may contain.
struct VendorBackend {
  BackendKind kind;
  absl::string_view vendor;  // "CUDA", "HIP"
  // Null when this build has no such backend.
  absl::StatusOr<std::shared_ptr<Backend>> (*create)(const Config&, int);
  absl::StatusOr<int> (*count)(const Config&);
};

// In the order auto tries them. A backend this build lacks has no functions.
constexpr VendorBackend kVendorBackends[] = {
#if GPUALLOC_HAVE_CUDA_BACKEND
    {BackendKind::kCuda, "CUDA", &backends::CreateCudaBackend,
     &backends::CudaDeviceCount},
#else
    {BackendKind::kCuda, "CUDA", nullptr, nullptr},
#endif
#if GPUALLOC_HAVE_HIP_BACKEND
    {BackendKind::kHip, "HIP", &backends::CreateHipBackend,
     &backends::HipDeviceCount},
#else
    {BackendKind::kHip, "HIP", nullptr, nullptr},
#endif
};

const VendorBackend& FindVendorBackend(BackendKind kind) {
  for (const VendorBackend& v : kVendorBackends) {
    if (v.kind == kind) return v;
  }
  return kVendorBackends[0];  // unreachable: callers pass cuda or hip
}

absl::Status NotBuilt(const Config& config, const VendorBackend& v) {
  return absl::UnimplementedError(absl::StrCat(
      "backend=", BackendKindName(v.kind), FromWhere(config, "backend"),
      ": this build of gpualloc has "
      "no ",
      v.vendor, " backend; ", kUseSim));
}

// backend=auto: the first vendor backend that works, else an error saying
// what was tried and why each failed.
template <typename T, typename Fn>
absl::StatusOr<T> TryVendors(const Config& config, Fn&& fn) {
  std::vector<std::string> tried;
  for (const VendorBackend& v : kVendorBackends) {
    if (v.create == nullptr) {
      tried.push_back(
          absl::StrCat(BackendKindName(v.kind), " (not in this build)"));
      continue;
    }
    absl::StatusOr<T> result = fn(v);
    if (result.ok()) return result;
    tried.push_back(absl::StrCat(BackendKindName(v.kind), " (",
                                 result.status().message(), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "backend=auto", FromWhere(config, "backend"),
      " found no GPU backend that works; tried: ", absl::StrJoin(tried, ", "),
      ". ", kUseSim));
}

}  // namespace

namespace runtime {

namespace {

using config_internal::AsSet;
using config_internal::FindSetting;
using config_internal::HowToReset;
using config_internal::NameToChange;

// How key `key` was set (AsSet); "key=value" when the configuration has no
// such setting (a Config a program built by hand).
std::string SettingAsSet(const Config& config, absl::string_view key,
                         absl::string_view value) {
  const ConfigSetting* s = FindSetting(config, key);
  return s != nullptr ? AsSet(*s) : absl::StrCat(key, "=", value);
}
std::string SettingReset(const Config& config, absl::string_view key) {
  const ConfigSetting* s = FindSetting(config, key);
  return s != nullptr ? HowToReset(*s) : absl::StrCat("unset ", key);
}
std::string SettingName(const Config& config, absl::string_view key) {
  const ConfigSetting* s = FindSetting(config, key);
  return s != nullptr ? NameToChange(*s) : std::string(key);
}

}  // namespace

// What the configuration alone rules out for its backend.
absl::Status CheckBackendChoice(const Config& config) {
  const std::string backend = std::string(BackendKindName(config.backend));
  if (config.device_memory != 0 && config.backend != BackendKind::kSim) {
    return absl::InvalidArgumentError(
        absl::StrCat(SettingAsSet(config, "device_memory",
                                  absl::StrCat(config.device_memory)),
                     " sizes the simulated device (backend=sim) only, and ",
                     SettingAsSet(config, "backend", backend),
                     " selects another; set ", SettingName(config, "backend"),
                     " to sim, or ", SettingReset(config, "device_memory")));
  }
  // Only AMD devices have fine-grained device memory.
  if (config.memory_kind == MemoryKind::kFine &&
      (config.backend == BackendKind::kSim ||
       config.backend == BackendKind::kCuda)) {
    return absl::InvalidArgumentError(absl::StrCat(
        SettingAsSet(config, "memory_kind", "fine"),
        " (AMD fine-grained memory) needs backend=hip, and ",
        SettingAsSet(config, "backend", backend), " selects another; set ",
        SettingName(config, "backend"), " to hip, or ",
        SettingReset(config, "memory_kind"), " (coarse)"));
  }
  return absl::OkStatus();
}

absl::Status RestateOptionsError(const Config& config,
                                 const absl::Status& status,
                                 const DeviceInfo* device) {
  const std::optional<core::OptionsProblem> problem =
      core::OptionsProblemOf(status);
  if (!problem.has_value()) return status;
  // The setting behind each field, when the configuration has one.
  std::vector<const ConfigSetting*> settings;
  for (const core::OptionsField& f : problem->fields) {
    const absl::string_view key = core::ConfigKeyOfField(f.field);
    settings.push_back(key.empty() ? nullptr : FindSetting(config, key));
  }
  std::string message = core::RenderOptionsProblem(
      *problem,
      [&](std::size_t i) {
        const core::OptionsField& f = problem->fields[i];
        const ConfigSetting* s = settings[i];
        if (s == nullptr)
          return absl::StrCat("Options.", f.field, "=", f.value);
        // Left to its default: the value the check used, which the profile
        // or the device gave.
        if (s->set_by.empty() && !f.derived.empty()) {
          return absl::StrCat(f.derived, " ", s->key, "=", f.value);
        }
        return AsSet(*s);
      },
      [&](std::size_t i) {
        const ConfigSetting* s = settings[i];
        return s != nullptr
                   ? NameToChange(*s)
                   : absl::StrCat("Options.", problem->fields[i].field);
      },
      [&](std::size_t i) {
        const ConfigSetting* s = settings[i];
        return s != nullptr
                   ? HowToReset(*s)
                   : absl::StrCat("reset Options.", problem->fields[i].field);
      });
  if (device != nullptr) {
    absl::StrAppend(&message, " (device ", device->ordinal, ": ", device->name,
                    ", ", device->total_bytes, " bytes (",
                    core::FormatBytes(device->total_bytes), ")");
    const ConfigSetting* memory = FindSetting(config, "device_memory");
    if (config.device_memory != 0 && memory != nullptr) {
      absl::StrAppend(&message, " as ", AsSet(*memory), " sets");
    }
    absl::StrAppend(&message, ")");
  }
  absl::Status restated(status.code(), message);
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    restated.SetPayload(url, payload);
  });
  return restated;
}

absl::Status CheckWithoutDevice(const Config& config) {
  if (absl::Status s = CheckBackendChoice(config); !s.ok()) return s;
  return RestateOptionsError(config, core::CheckOptions(config.options),
                             nullptr);
}

// The simulated device needs no device call: creating it and checking the
// options against it at creation turns a configuration that could never
// allocate (device_memory=255, granularity=3, min_block=2^63) into an error
// naming the key, instead of an error on every later allocation.
absl::Status CheckOnSimulatedDevice(const Config& config) {
  // The simulated device's own size rules, named after what set them.
  const std::string arch =
      config.options.arch.empty() || config.options.arch == "auto"
          ? std::string(kDefaultSimProfile)
          : config.options.arch;
  if (absl::StatusOr<const ArchProfile*> profile = FindArchProfile(arch);
      profile.ok()) {
    const std::uint64_t alignment = (*profile)->allocation_alignment;
    if (config.device_memory != 0 && alignment != 0 &&
        config.device_memory % alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(SettingAsSet(config, "device_memory",
                                    absl::StrCat(config.device_memory)),
                       " is not a multiple of the simulated ", arch,
                       "'s allocation alignment, ", alignment, " bytes; set ",
                       SettingName(config, "device_memory"),
                       " to a multiple of ", alignment, " bytes (e.g. 80GB)"));
    }
    if (config.device_memory == 0 && (*profile)->memory_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(SettingAsSet(config, "arch", arch),
                       " is a generic profile with no "
                       "memory size, which the simulated device needs; set ",
                       SettingName(config, "device_memory"),
                       " (e.g. 80GB), or ", SettingName(config, "arch"),
                       " to a profile with one (h100, "
                       "h200, mi300x, ...)"));
    }
  }
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateBackend(config, 0);
  if (!backend.ok()) {
    if (config.device_memory == 0) return backend.status();
    return absl::Status(
        backend.status().code(),
        absl::StrCat(SettingAsSet(config, "device_memory",
                                  absl::StrCat(config.device_memory)),
                     ": ", backend.status().message()));
  }
  const DeviceInfo& device = (*backend)->info();
  absl::StatusOr<core::ResolvedOptions> resolved =
      core::ResolveOptions(config.options, device);
  if (resolved.ok()) return absl::OkStatus();
  return RestateOptionsError(config, resolved.status(), &device);
}

}  // namespace runtime

absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(const Config& config,
                                                       int ordinal,
                                                       SimClock sim_clock) {
  if (ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ordinal ", ordinal, " is negative"));
  }
  if (absl::Status s = runtime::CheckBackendChoice(config); !s.ok()) return s;
  switch (config.backend) {
    case BackendKind::kSim: {
      SimOptions sim;
      // "" is "auto" too, as in Options.
      sim.profile = config.options.arch.empty() || config.options.arch == "auto"
                        ? std::string(kDefaultSimProfile)
                        : config.options.arch;
      sim.total_bytes = config.device_memory;
      sim.ordinal = ordinal;
      sim.clock = sim_clock;
      absl::StatusOr<std::shared_ptr<SimBackend>> backend =
          SimBackend::Create(sim);
      if (!backend.ok()) {
        return absl::Status(
            backend.status().code(),
            absl::StrCat("backend=sim: ", backend.status().message()));
      }
      return std::shared_ptr<Backend>(std::move(*backend));
    }
    case BackendKind::kCuda:
    case BackendKind::kHip: {
      const VendorBackend& v = FindVendorBackend(config.backend);
      if (v.create == nullptr) return NotBuilt(config, v);
      return v.create(config, ordinal);
    }
    case BackendKind::kAuto:
      return TryVendors<std::shared_ptr<Backend>>(
          config,
          [&](const VendorBackend& v) { return v.create(config, ordinal); });
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid backend kind ", static_cast<int>(config.backend)));
}

absl::StatusOr<int> DeviceCount(const Config& config) {
  switch (config.backend) {
    case BackendKind::kSim:
      return 1;
    case BackendKind::kCuda:
    case BackendKind::kHip: {
      const VendorBackend& v = FindVendorBackend(config.backend);
      if (v.count == nullptr) return NotBuilt(config, v);
      return v.count(config);
    }
    case BackendKind::kAuto:
      return TryVendors<int>(
          config, [&](const VendorBackend& v) { return v.count(config); });
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid backend kind ", static_cast<int>(config.backend)));
}

}  // namespace gpualloc
