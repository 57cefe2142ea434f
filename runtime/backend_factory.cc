// SPDX-License-Identifier: Apache-2.0
// runtime/backend_factory.cc: the backend a configuration names
// (gpualloc/registry.h's CreateBackend and DeviceCount), and the checks of a
// configuration that need no device call.
//
// The vendor backends (backends/cuda, backends/hip) are in the build when
// their toolkit headers were found (backends/vendor_backends.h); the errors
// for a backend this build lacks, and for auto when no driver loads, say so
// and name the way to the simulator. kVendorBackends below is the one place a
// vendor backend is added.
#include "runtime/backend_factory.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "backends/vendor_backends.h"
#include "core/options.h"
#include "gpualloc/sim_backend.h"

namespace gpualloc {
namespace runtime {

std::string FromWhere(const Config& config, absl::string_view key) {
  for (const ConfigSetting& s : config.settings) {
    if (s.key != key) continue;
    switch (s.origin) {
      case ValueOrigin::kDefault:
        return " (the default)";
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

// The profile the simulator models when arch is "auto" (docs/ARCHITECTURE.md,
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

// What the configuration alone rules out for its backend.
absl::Status CheckBackendChoice(const Config& config) {
  if (config.device_memory != 0 && config.backend != BackendKind::kSim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_memory=", config.device_memory,
        FromWhere(config, "device_memory"),
        " sizes the simulated device only, but backend=",
        BackendKindName(config.backend), FromWhere(config, "backend"),
        "; set backend=sim or unset device_memory"));
  }
  // Only AMD devices have fine-grained device memory.
  if (config.memory_kind == MemoryKind::kFine &&
      (config.backend == BackendKind::kSim ||
       config.backend == BackendKind::kCuda)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_kind=fine", FromWhere(config, "memory_kind"),
        " (AMD fine-grained memory) needs backend=hip, but backend=",
        BackendKindName(config.backend), FromWhere(config, "backend"),
        "; set backend=hip or memory_kind=coarse"));
  }
  return absl::OkStatus();
}

// The configuration key of an Options field, for messages.
static absl::string_view KeyOfOptionsField(absl::string_view field) {
  static constexpr std::pair<absl::string_view, absl::string_view> kKeys[] = {
      {"growth_granularity", "granularity"},
      {"min_block_size", "min_block"},
      {"memory_fraction", "mem_fraction"},
      {"memory_limit", "mem_limit"},
      {"max_internal_fragmentation", "split_bound"},
      {"size_divisions", "size_divisions"},
      {"history", "history"},
      {"expandable", "expandable"},
      {"arch", "arch"},
  };
  for (const auto& [f, key] : kKeys) {
    if (f == field) return key;
  }
  return "";
}

// The simulated device needs no device call: creating it and checking the
// options against it at creation turns a configuration that could never
// allocate (device_memory=255, granularity=3, min_block=2^63) into an error
// naming the key, instead of an error on every later allocation.
absl::Status CheckOnSimulatedDevice(const Config& config) {
  std::string device_memory;
  if (config.device_memory != 0) {
    device_memory = absl::StrCat("device_memory=", config.device_memory,
                                 FromWhere(config, "device_memory"));
  }
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateBackend(config, 0);
  if (!backend.ok()) {
    if (device_memory.empty()) return backend.status();
    return absl::Status(
        backend.status().code(),
        absl::StrCat(device_memory, ": ", backend.status().message()));
  }
  const DeviceInfo& device = (*backend)->info();
  absl::StatusOr<core::ResolvedOptions> resolved =
      core::ResolveOptions(config.options, device);
  if (resolved.ok()) return absl::OkStatus();
  // "Options.<field>: why" -> "<key>=<value> (from ...): why".
  absl::string_view message = resolved.status().message();
  std::string what;
  if (absl::ConsumePrefix(&message, "Options.")) {
    const std::size_t colon = message.find(": ");
    const absl::string_view key =
        colon == absl::string_view::npos
            ? absl::string_view()
            : KeyOfOptionsField(message.substr(0, colon));
    for (const ConfigSetting& s : config.settings) {
      if (!key.empty() && s.key == key) {
        what = absl::StrCat(key, "=", s.value, FromWhere(config, key), ":");
        message.remove_prefix(colon + 2);
      }
    }
    // The profile's granularity against a min_block that was set: the
    // setting is what is wrong.
    if (key == "granularity" && config.options.growth_granularity == 0 &&
        config.options.min_block_size != 0) {
      what = absl::StrCat("min_block=", config.options.min_block_size,
                          FromWhere(config, "min_block"),
                          ": the growth granularity");
    }
  }
  if (what.empty()) what = "the configuration:";
  return absl::Status(
      resolved.status().code(),
      absl::StrCat(what, " ", message, " (on the ", device.name, ", ",
                   device.total_bytes, " bytes",
                   device_memory.empty() ? "" : ", ", device_memory, ")"));
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
