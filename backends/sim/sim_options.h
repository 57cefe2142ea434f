// SPDX-License-Identifier: Apache-2.0
// backends/sim/sim_options.h: SimOptions checked and turned into the
// simulated device's DeviceInfo (each field left at 0 takes the architecture
// profile's figure).
#ifndef GPUALLOC_BACKENDS_SIM_SIM_OPTIONS_H_
#define GPUALLOC_BACKENDS_SIM_SIM_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// InvalidArgument "SimOptions.<field>: <problem>".
absl::Status InvalidField(absl::string_view field, absl::string_view problem);

std::uint64_t HostPageSize();

// The device `options` describe on `profile`; InvalidArgument naming the
// field when the options are inconsistent (granularity not a power of two,
// total not a multiple of the allocation alignment...).
absl::StatusOr<DeviceInfo> MakeDeviceInfo(const SimOptions& options,
                                          const ArchProfile& profile);

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_SIM_OPTIONS_H_
