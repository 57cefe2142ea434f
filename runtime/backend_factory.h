// SPDX-License-Identifier: Apache-2.0
// runtime/backend_factory.h: what the device registry asks of the backend
// factory (runtime/backend_factory.cc) besides gpualloc/runtime/registry.h's
// CreateBackend and DeviceCount.
#ifndef GPUALLOC_RUNTIME_BACKEND_FACTORY_H_
#define GPUALLOC_RUNTIME_BACKEND_FACTORY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "runtime/layer.h"

namespace gpualloc::runtime {

// What the configuration alone rules out for its backend: device_memory
// without backend=sim, memory_kind=fine without backend=hip.
absl::Status CheckBackendChoice(const Config& config);

// An error of core::ResolveOptions or CreateAllocator about
// `config.options`, restated in the configuration's terms: the key or
// variable that set each field and its value as written
// (`GPUALLOC_GRANULARITY="4KiB"`), and the fix in those terms; with `device`,
// which device it was checked against. Any other status is returned as it
// is.
absl::Status RestateOptionsError(const Config& config,
                                 const absl::Status& status,
                                 const DeviceInfo* device);

// Everything that can be checked without a device: CheckBackendChoice and
// the option checks that need no device (core::CheckOptions: a setting that
// belongs to allocator=bfc with another mode), restated.
absl::Status CheckWithoutDevice(const Config& config);

// The simulated device needs no device call, so a configuration that could
// never allocate on it (device_memory=255, granularity=3, min_block=2^63) is
// an error naming the key at creation.
absl::Status CheckOnSimulatedDevice(const Config& config);

// Where a key's effective value came from, for messages: " (from
// GPUALLOC_BACKEND)", " (from the config string)", " (the default)"; "" for
// a key the configuration does not hold.
std::string FromWhere(const Config& config, absl::string_view key);

}  // namespace gpualloc::runtime

#endif  // GPUALLOC_RUNTIME_BACKEND_FACTORY_H_
