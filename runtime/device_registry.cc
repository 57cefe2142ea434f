// SPDX-License-Identifier: Apache-2.0
// runtime/device_registry.cc: one allocator per device, created on first use
// (gpualloc/runtime/registry.h's DeviceRegistry).
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/lock.h"
#include "gpualloc/core/host_allocator.h"
#include "gpualloc/runtime/registry.h"
#include "runtime/backend_factory.h"

namespace gpualloc {
namespace {

class DeviceRegistryImpl final : public DeviceRegistry {
 public:
  DeviceRegistryImpl(Config config, BackendFactory factory, int num_devices)
      : config_(std::move(config)),
        factory_(std::move(factory)),
        num_devices_(num_devices),
        slots_(new Slot[static_cast<std::size_t>(num_devices)]) {}

  absl::StatusOr<Allocator*> Get(int ordinal) override {
    if (ordinal < 0 || ordinal >= num_devices_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ordinal ", ordinal, " is out of range: ", num_devices_,
          " device", num_devices_ == 1 ? "" : "s", " (ordinals 0..",
          num_devices_ - 1, ")"));
    }
    Slot& slot = slots_[static_cast<std::size_t>(ordinal)];
    // Fast path once created: one acquire load, no lock.
    if (Allocator* a = slot.ready.load(std::memory_order_acquire)) return a;

    // The slot's lock is held across creation, so the factory never runs
    // twice at once for one device; other devices are not held up.
    core::LockGuard guard(&slot.mu);
    if (slot.allocator != nullptr) return slot.allocator.get();
    absl::StatusOr<std::shared_ptr<Backend>> backend = factory_(ordinal);
    if (!backend.ok()) return backend.status();
    if (*backend == nullptr) {
      return absl::InternalError(absl::StrCat(
          "the backend factory returned no backend for device ", ordinal));
    }
    const DeviceInfo device = (*backend)->info();
    std::shared_ptr<Backend> kept = *backend;
    absl::StatusOr<std::unique_ptr<Allocator>> allocator =
        CreateAllocator(config_.options, std::move(*backend));
    if (!allocator.ok()) {
      // The options are checked against the device only here, at its first
      // use (on a GPU): the error names what the user set.
      return runtime::RestateOptionsError(config_, allocator.status(), &device);
    }
    slot.allocator = std::move(*allocator);
    slot.backend = std::move(kept);
    slot.ready.store(slot.allocator.get(), std::memory_order_release);
    return slot.allocator.get();
  }

  absl::StatusOr<Allocator*> GetHost() override {
    if (Allocator* a = host_ready_.load(std::memory_order_acquire)) return a;
    absl::StatusOr<Allocator*> device = Get(0);
    if (!device.ok()) return device.status();
    std::shared_ptr<Backend> backend;
    {
      core::LockGuard guard(&slots_[0].mu);
      backend = slots_[0].backend;
    }
    core::LockGuard guard(&host_mu_);
    if (host_ != nullptr) return host_.get();
    Options options;
    options.memory_limit = config_.host_memory_limit;
    options.name = "host pool";
    absl::StatusOr<std::unique_ptr<Allocator>> host =
        CreateHostAllocator(options, std::move(backend));
    if (!host.ok()) {
      return absl::Status(
          host.status().code(),
          absl::StrCat(host.status().message(),
                       config_.host_memory_limit != 0
                           ? absl::StrCat(" (host_memory_limit ",
                                          config_.host_memory_limit, ")")
                           : std::string()));
    }
    host_ = std::move(*host);
    host_ready_.store(host_.get(), std::memory_order_release);
    return host_.get();
  }

  int num_devices() const override { return num_devices_; }
  const Config& config() const override { return config_; }

 private:
  struct Slot {
    core::Lock mu;
    std::unique_ptr<Allocator> allocator ABSL_GUARDED_BY(mu);
    // The device's backend, for the host pool (device 0).
    std::shared_ptr<Backend> backend ABSL_GUARDED_BY(mu);
    // allocator.get() once created; read without the lock.
    std::atomic<Allocator*> ready{nullptr};
  };

  const Config config_;
  const BackendFactory factory_;
  const int num_devices_;
  const std::unique_ptr<Slot[]> slots_;
  // The pinned host pool (GetHost), destroyed before the devices' allocators.
  core::Lock host_mu_;
  std::unique_ptr<Allocator> host_ ABSL_GUARDED_BY(host_mu_);
  std::atomic<Allocator*> host_ready_{nullptr};
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRegistry>> DeviceRegistry::Create(
    const Config& config, BackendFactory factory, int num_devices) {
  if (num_devices < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceRegistry: num_devices ", num_devices, " is negative"));
  }
  if (factory == nullptr) {
    // What can be checked without a device call fails here, at creation,
    // rather than on every Get: on every backend, a setting that belongs to
    // allocator=bfc with another mode.
    if (absl::Status s = runtime::CheckWithoutDevice(config); !s.ok()) return s;
    if (config.backend == BackendKind::kSim) {
      if (absl::Status s = runtime::CheckOnSimulatedDevice(config); !s.ok())
        return s;
    }
  }
  if (num_devices == 0) {
    absl::StatusOr<int> count = DeviceCount(config);
    if (!count.ok()) return count.status();
    num_devices = *count;
  }
  if (factory == nullptr) {
    factory = [config](int ordinal) { return CreateBackend(config, ordinal); };
  }
  return std::unique_ptr<DeviceRegistry>(
      new DeviceRegistryImpl(config, std::move(factory), num_devices));
}

}  // namespace gpualloc
