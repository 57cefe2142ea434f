// SPDX-License-Identifier: Apache-2.0
// tests/backends/sim_conformance_test.cc: the backend conformance suite on the
// simulator, with fake addresses (NVIDIA and AMD numbers), with host-backed
// memory, with the streams and pool capabilities off, and with virtual memory
// on (the default) and off.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_conformance.h"

namespace gpualloc::testing {
namespace {

BackendFactory Sim(std::string name, SimOptions options) {
  return BackendFactory{
      std::move(name),
      [options]() -> absl::StatusOr<std::shared_ptr<Backend>> {
        absl::StatusOr<std::shared_ptr<SimBackend>> sim =
            SimBackend::Create(options);
        if (!sim.ok()) return sim.status();
        return std::shared_ptr<Backend>(*std::move(sim));
      },
      // A piece of work that touches nothing stays pending until the stream
      // is completed (on the modeled clock too: nothing moves the clock).
      [](Backend& b, Stream s) { static_cast<SimBackend&>(b).Use(s, 0, 0); },
      [](Backend& b, Stream s) {
        static_cast<SimBackend&>(b).CompleteStream(s);
      }};
}

SimOptions FakeH200() {
  SimOptions o;
  o.profile = "h200";
  return o;
}

SimOptions HostBackedH100() {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = std::uint64_t{256} << 20;
  o.memory = SimMemory::kHostBacked;
  return o;
}

SimOptions FakeMi300x() {
  SimOptions o;
  o.profile = "mi300x";
  return o;
}

// Host-backed AMD numbers: virtual memory in 4 KiB granules, mapped in 2 MiB.
SimOptions HostBackedMi300x() {
  SimOptions o;
  o.profile = "mi300x";
  o.total_bytes = std::uint64_t{128} << 20;
  o.memory = SimMemory::kHostBacked;
  return o;
}

// Virtual memory off, fake and host-backed.
SimOptions NoVmmH200() {
  SimOptions o;
  o.profile = "h200";
  o.virtual_memory = false;
  return o;
}

SimOptions NoVmmHostBackedMi250x() {
  SimOptions o;
  o.profile = "mi250x";
  o.total_bytes = std::uint64_t{128} << 20;
  o.memory = SimMemory::kHostBacked;
  o.virtual_memory = false;
  return o;
}

// A device without streams (and so without pools), and one with streams but
// no pool: the capability-off paths.
SimOptions NoStreamsA100() {
  SimOptions o;
  o.profile = "a100";
  o.streams = false;
  return o;
}

SimOptions NoPoolModeledH100() {
  SimOptions o;
  o.profile = "h100";
  o.stream_ordered_pools = false;
  o.clock = SimClock::kModeled;
  return o;
}

SimOptions NoCountersModeledMi300x() {
  SimOptions o;
  o.profile = "mi300x";
  o.completion_counters = false;
  o.clock = SimClock::kModeled;
  return o;
}

SimOptions NoSharingH100() {
  SimOptions o;
  o.profile = "h100";
  o.ipc_handles = false;
  o.shareable_handles = false;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Sim, BackendConformanceTest,
    ::testing::Values(Sim("fake_h200", FakeH200()),
                      Sim("host_backed_h100", HostBackedH100()),
                      Sim("fake_mi300x", FakeMi300x()),
                      Sim("no_streams_a100", NoStreamsA100()),
                      Sim("no_pool_modeled_h100", NoPoolModeledH100()),
                      Sim("host_backed_mi300x", HostBackedMi300x()),
                      Sim("no_vmm_h200", NoVmmH200()),
                      Sim("no_vmm_host_backed_mi250x", NoVmmHostBackedMi250x()),
                      Sim("no_sharing_h100", NoSharingH100()),
                      Sim("no_counters_modeled_mi300x",
                          NoCountersModeledMi300x())),
    BackendFactoryName);

}  // namespace
}  // namespace gpualloc::testing
