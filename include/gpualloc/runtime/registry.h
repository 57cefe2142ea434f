// SPDX-License-Identifier: Apache-2.0
// gpualloc/runtime/registry.h: backends chosen by configuration, and one
// allocator per device: what a runtime embeds.
//
//   auto config = gpualloc::ResolveConfig("", gpualloc::ProcessEnvironment());
//   auto registry = gpualloc::DeviceRegistry::Create(*config);
//   absl::StatusOr<gpualloc::Allocator*> a = (*registry)->Get(/*ordinal=*/0);
//
// Thread safety: every method is thread-safe; Get may race for the same device
// and every caller receives the same allocator.
#ifndef GPUALLOC_REGISTRY_H_
#define GPUALLOC_REGISTRY_H_

// A header of the runtime layer: the library's lower layers may not include it
// (docs/DESIGN.md, "Layers").
#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 3
#error \
    "gpualloc/runtime/registry.h belongs to the runtime layer; a lower layer of the library may not include it"
#endif

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"

namespace gpualloc {

// The backend config.backend names for device `ordinal`:
//   sim: a SimBackend of config.options.arch's profile (h200 when "auto"),
//        sized by config.device_memory when non-zero;
//   cuda, hip: the vendor backend, Unavailable when its driver does not load
//        or the device does not exist, Unimplemented when this build has none;
//   auto: the first vendor whose driver loads; when none does, an error that
//        says which were tried and that backend=sim selects the simulator.
// `sim_clock`: how the simulator's queued work completes (sim only).
absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(
    const Config& config, int ordinal, SimClock sim_clock = SimClock::kManual);

// Number of devices config.backend sees (sim: 1 unless the factory says more).
absl::StatusOr<int> DeviceCount(const Config& config);

class DeviceRegistry {
 public:
  using BackendFactory =
      std::function<absl::StatusOr<std::shared_ptr<Backend>>(int ordinal)>;

  // Allocators are created lazily from `config`; `factory` (default:
  // CreateBackend(config, ordinal)) makes each device's backend. `num_devices`
  // bounds the ordinals (0: DeviceCount(config)). With the default factory,
  // what needs no device (a setting that belongs to allocator=bfc with another
  // mode; on the simulator, everything) is checked here; the rest at each
  // device's first Get. Either error names the configuration key or variable
  // that set each side, as written (config.settings), not the Options field.
  static absl::StatusOr<std::unique_ptr<DeviceRegistry>> Create(
      const Config& config, BackendFactory factory = nullptr,
      int num_devices = 0);

  virtual ~DeviceRegistry() = default;

  // The allocator of device `ordinal`, created on first use. An ordinal out
  // of range is InvalidArgument; a creation error is returned to every caller
  // until a later call succeeds (nothing is cached on failure).
  virtual absl::StatusOr<Allocator*> Get(int ordinal) = 0;
  // The pinned host memory pool (gpualloc/core/host_allocator.h), created on
  // first use over device 0's backend (which Get(0) creates first), its
  // limit config().host_memory_limit. Errors as for Get; a backend without
  // page-locked host memory is FailedPrecondition naming the capability.
  virtual absl::StatusOr<Allocator*> GetHost() = 0;
  virtual int num_devices() const = 0;
  virtual const Config& config() const = 0;
};

}  // namespace gpualloc

#endif  // GPUALLOC_REGISTRY_H_
