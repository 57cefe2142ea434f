// SPDX-License-Identifier: Apache-2.0
// backends/sim/sim_backend.cc: SimBackend, the simulated device: Create, the
// capability checks of each call and its forwarding to SimBackend::Impl
// (backends/sim/sim_backend_impl.h, which says how the parts compose), and
// the test's view and control of the device.

#include "gpualloc/backends/sim_backend.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/sim/host_copy.h"
#include "backends/sim/sim_backend_impl.h"
#include "backends/sim/sim_options.h"
#include "backends/sim/sim_util.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

absl::StatusOr<std::shared_ptr<SimBackend>> SimBackend::Create(
    const SimOptions& options) {
  absl::StatusOr<const ArchProfile*> found = FindArchProfile(options.profile);
  if (!found.ok()) {
    return sim::InvalidField("profile", found.status().message());
  }
  const ArchProfile& profile = **found;

  absl::StatusOr<DeviceInfo> info = sim::MakeDeviceInfo(options, profile);
  if (!info.ok()) return info.status();
  auto impl = std::make_unique<Impl>(options, *std::move(info),
                                     sim::ResolveCosts(options, profile));
  return std::shared_ptr<SimBackend>(new SimBackend(std::move(impl)));
}

SimBackend::SimBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimBackend::~SimBackend() = default;

const DeviceInfo& SimBackend::info() const { return impl_->info(); }
absl::StatusOr<std::uint64_t> SimBackend::FreeBytes() {
  return impl_->FreeBytes();
}
absl::StatusOr<DeviceAddress> SimBackend::Allocate(std::uint64_t bytes) {
  return impl_->Allocate(bytes);
}
absl::Status SimBackend::Free(DeviceAddress address) {
  return impl_->Free(address);
}

absl::StatusOr<EventHandle> SimBackend::CreateEvent() {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kCreateEvent, Backend::CreateEvent());
  }
  return impl_->CreateEvent();
}
absl::Status SimBackend::DestroyEvent(EventHandle event) {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kDestroyEvent,
                              Backend::DestroyEvent(event));
  }
  return impl_->DestroyEvent(event);
}
absl::Status SimBackend::RecordEvent(EventHandle event, Stream stream) {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kRecordEvent,
                              Backend::RecordEvent(event, stream));
  }
  return impl_->RecordEvent(event, stream);
}
absl::StatusOr<bool> SimBackend::QueryEvent(EventHandle event) {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kQueryEvent, Backend::QueryEvent(event));
  }
  return impl_->QueryEvent(event);
}
absl::Status SimBackend::StreamWaitEvent(Stream stream, EventHandle event) {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kStreamWaitEvent,
                              Backend::StreamWaitEvent(stream, event));
  }
  return impl_->StreamWaitEvent(stream, event);
}
absl::Status SimBackend::SynchronizeEvent(EventHandle event) {
  if (!info().capabilities.streams) {
    return impl_->Unsupported(SimOp::kSynchronizeEvent,
                              Backend::SynchronizeEvent(event));
  }
  return impl_->SynchronizeEvent(event);
}

absl::StatusOr<bool> SimBackend::IsCapturing(Stream stream) {
  if (!info().capabilities.graph_capture) {
    return impl_->Unsupported(SimOp::kIsCapturing,
                              Backend::IsCapturing(stream));
  }
  return impl_->IsCapturing(stream);
}
absl::StatusOr<CaptureMode> SimBackend::ExchangeCaptureMode(CaptureMode mode) {
  if (!info().capabilities.graph_capture) {
    return impl_->Unsupported(SimOp::kExchangeCaptureMode,
                              Backend::ExchangeCaptureMode(mode));
  }
  return impl_->ExchangeCaptureMode(mode);
}
absl::Status SimBackend::BeginCapture(Stream stream) {
  if (!info().capabilities.graph_capture) {
    return NotSupported("BeginCapture", "graph_capture");
  }
  return impl_->WithCapture([&](sim::Capture& c) { return c.Begin(stream); });
}
absl::StatusOr<SimGraph> SimBackend::EndCapture(Stream stream) {
  if (!info().capabilities.graph_capture) {
    return NotSupported("EndCapture", "graph_capture");
  }
  return impl_->WithCapture([&](sim::Capture& c) { return c.End(stream); });
}
absl::Status SimBackend::LaunchGraph(SimGraph graph, Stream stream) {
  if (!info().capabilities.graph_capture) {
    return NotSupported("LaunchGraph", "graph_capture");
  }
  return impl_->LaunchGraph(graph, stream);
}
absl::Status SimBackend::DestroyGraph(SimGraph graph) {
  if (!info().capabilities.graph_capture) {
    return NotSupported("DestroyGraph", "graph_capture");
  }
  return impl_->WithCapture([&](sim::Capture& c) { return c.Destroy(graph); });
}
std::uint64_t SimBackend::capture_violations() const {
  return impl_->WithCapture([](sim::Capture& c) { return c.violations(); });
}
std::vector<std::string> SimBackend::capture_violation_log() const {
  return impl_->WithCapture([](sim::Capture& c) { return c.violation_log(); });
}

absl::Status SimBackend::ConfigurePool(const PoolOptions& options) {
  if (!info().capabilities.stream_ordered_pools) {
    return impl_->Unsupported(SimOp::kConfigurePool,
                              Backend::ConfigurePool(options));
  }
  return impl_->ConfigurePool(options);
}
absl::StatusOr<DeviceAddress> SimBackend::PoolAllocate(std::uint64_t bytes,
                                                       Stream stream) {
  if (!info().capabilities.stream_ordered_pools) {
    return impl_->Unsupported(SimOp::kPoolAllocate,
                              Backend::PoolAllocate(bytes, stream));
  }
  return impl_->PoolAllocate(bytes, stream);
}
absl::Status SimBackend::PoolFree(DeviceAddress address, Stream stream) {
  if (!info().capabilities.stream_ordered_pools) {
    return impl_->Unsupported(SimOp::kPoolFree,
                              Backend::PoolFree(address, stream));
  }
  return impl_->PoolFree(address, stream);
}
absl::Status SimBackend::PoolTrim(std::uint64_t keep_bytes) {
  if (!info().capabilities.stream_ordered_pools) {
    return impl_->Unsupported(SimOp::kPoolTrim, Backend::PoolTrim(keep_bytes));
  }
  return impl_->PoolTrim(keep_bytes);
}
absl::StatusOr<PoolUsage> SimBackend::GetPoolUsage() {
  if (!info().capabilities.stream_ordered_pools) {
    return impl_->Unsupported(SimOp::kGetPoolUsage, Backend::GetPoolUsage());
  }
  return impl_->GetPoolUsage();
}

void SimBackend::Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t duration_ns) {
  impl_->Use(stream, address, bytes, duration_ns);
}
void SimBackend::CompleteStream(Stream stream) {
  impl_->CompletingStreams([&](sim::Streams& s) { s.CompleteStream(stream); });
}
void SimBackend::CompleteAll() {
  impl_->CompletingStreams([](sim::Streams& s) { s.CompleteAll(); });
}
void SimBackend::OrderStreams(Stream waiter, Stream other) {
  impl_->WithStreams([&](sim::Streams& s) { s.OrderStreams(waiter, other); });
}
void SimBackend::AdvanceClock(std::uint64_t ns) {
  impl_->CompletingStreams([&](sim::Streams& s) { s.AdvanceClock(ns); });
}
std::uint64_t SimBackend::now_ns() const {
  return impl_->WithStreams([](sim::Streams& s) { return s.now_ns(); });
}
std::uint64_t SimBackend::pending_work() const {
  return impl_->WithStreams([](sim::Streams& s) { return s.pending_work(); });
}
std::uint64_t SimBackend::hazards() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.detector().hazards(); });
}
void SimBackend::DestroyStream(Stream stream) {
  impl_->WithStreams([&](sim::Streams& s) { s.DestroyStream(stream); });
}
std::uint64_t SimBackend::calls_on_destroyed_streams() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.calls_on_destroyed_streams(); });
}
std::uint64_t SimBackend::tracked_streams() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.tracked_streams(); });
}
std::vector<SimHazard> SimBackend::hazard_log() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.detector().hazard_log(); });
}
std::uint64_t SimBackend::live_events() const {
  return impl_->WithStreams([](sim::Streams& s) { return s.live_events(); });
}
std::uint64_t SimBackend::access_violations() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.detector().access_violations(); });
}
std::vector<SimHazard> SimBackend::access_violation_log() const {
  return impl_->WithStreams(
      [](sim::Streams& s) { return s.detector().access_violation_log(); });
}

void SimBackend::FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
  impl_->WithLedger([&](sim::CallLedger& ledger) {
    ledger.FailNthCall(op, k, std::move(status));
  });
}
void SimBackend::ClearFaults() {
  impl_->WithLedger([](sim::CallLedger& ledger) { ledger.ClearFaults(); });
}
std::uint64_t SimBackend::calls(SimOp op) const {
  return impl_->WithLedger(
      [&](sim::CallLedger& ledger) { return ledger.calls(op); });
}
std::uint64_t SimBackend::failed_calls(SimOp op) const {
  return impl_->WithLedger(
      [&](sim::CallLedger& ledger) { return ledger.failed_calls(op); });
}
std::uint64_t SimBackend::modeled_ns() const {
  return impl_->WithLedger(
      [](sim::CallLedger& ledger) { return ledger.modeled_ns(); });
}
std::uint64_t SimBackend::CallCostNs(SimOp op, std::uint64_t bytes) const {
  return impl_->WithLedger(
      [&](sim::CallLedger& ledger) { return ledger.CostNs(op, bytes); });
}
void SimBackend::ResetCounters() {
  impl_->WithLedger([](sim::CallLedger& ledger) { ledger.ResetCounters(); });
  impl_->WithPool([](sim::Pool& pool) { pool.ResetStreamWaits(); });
}
std::uint64_t SimBackend::pool_stream_waits() const {
  return impl_->WithPool([](sim::Pool& pool) { return pool.stream_waits(); });
}
std::uint64_t SimBackend::bytes_allocated() const {
  return impl_->WithPlacement(
      [](sim::Placement& p) { return p.bytes_allocated(); });
}
std::uint64_t SimBackend::bytes_held() const { return impl_->BytesHeld(); }
std::uint64_t SimBackend::live_allocations() const {
  return impl_->WithPlacement(
      [](sim::Placement& p) { return p.live_allocations(); });
}

absl::StatusOr<DeviceAddress> SimBackend::ReserveAddress(
    std::uint64_t bytes, std::uint64_t alignment) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kReserveAddress,
                              Backend::ReserveAddress(bytes, alignment));
  }
  return impl_->ReserveAddress(bytes, alignment);
}
absl::Status SimBackend::FreeAddress(DeviceAddress address,
                                     std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kFreeAddress,
                              Backend::FreeAddress(address, bytes));
  }
  return impl_->FreeAddress(address, bytes);
}
absl::StatusOr<PhysicalHandle> SimBackend::CreatePhysical(std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kCreatePhysical,
                              Backend::CreatePhysical(bytes));
  }
  return impl_->CreatePhysical(bytes);
}
absl::Status SimBackend::ReleasePhysical(PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kReleasePhysical,
                              Backend::ReleasePhysical(handle));
  }
  return impl_->ReleasePhysical(handle);
}
absl::Status SimBackend::Map(DeviceAddress address, std::uint64_t bytes,
                             PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kMap,
                              Backend::Map(address, bytes, handle));
  }
  return impl_->Map(address, bytes, handle);
}
absl::Status SimBackend::Unmap(DeviceAddress address, std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kUnmap, Backend::Unmap(address, bytes));
  }
  return impl_->Unmap(address, bytes);
}
absl::Status SimBackend::SetAccess(DeviceAddress address, std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory) {
    return impl_->Unsupported(SimOp::kSetAccess,
                              Backend::SetAccess(address, bytes));
  }
  return impl_->SetAccess(address, bytes);
}
std::uint64_t SimBackend::mapped_bytes() const {
  return impl_->WithVm(
      [](sim::VirtualMemory& vm) { return vm.mapped_bytes(); });
}
std::uint64_t SimBackend::physical_bytes() const {
  return impl_->WithVm(
      [](sim::VirtualMemory& vm) { return vm.physical_bytes(); });
}
std::uint64_t SimBackend::reserved_address_bytes() const {
  return impl_->WithVm(
      [](sim::VirtualMemory& vm) { return vm.reserved_bytes(); });
}
absl::Status SimBackend::CopyToHost(void* host, DeviceAddress source,
                                    std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return impl_->Unsupported(SimOp::kCopyToHost,
                              sim::FakeMemoryCopy(info(), "CopyToHost"));
  }
  return impl_->Copy(SimOp::kCopyToHost, source, host, bytes,
                     [&](void* device) { std::memcpy(host, device, bytes); });
}
absl::Status SimBackend::CopyFromHost(DeviceAddress destination,
                                      const void* host, std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return impl_->Unsupported(SimOp::kCopyFromHost,
                              sim::FakeMemoryCopy(info(), "CopyFromHost"));
  }
  return impl_->Copy(SimOp::kCopyFromHost, destination, host, bytes,
                     [&](void* device) { std::memcpy(device, host, bytes); });
}
absl::StatusOr<void*> SimBackend::HostAllocate(std::uint64_t bytes) {
  if (!info().capabilities.host_memory) {
    return impl_->Unsupported(SimOp::kHostAllocate,
                              Backend::HostAllocate(bytes));
  }
  return impl_->HostAllocate(bytes);
}
absl::Status SimBackend::HostFree(void* ptr) {
  if (!info().capabilities.host_memory) {
    return impl_->Unsupported(SimOp::kHostFree, Backend::HostFree(ptr));
  }
  return impl_->HostFree(ptr);
}
std::uint64_t SimBackend::host_bytes_allocated() const {
  return impl_->WithHost([](sim::HostMemory& h) { return h.bytes(); });
}
std::uint64_t SimBackend::peak_host_bytes_allocated() const {
  return impl_->WithHost([](sim::HostMemory& h) { return h.peak_bytes(); });
}
std::uint64_t SimBackend::live_host_allocations() const {
  return impl_->WithHost([](sim::HostMemory& h) { return h.live(); });
}
std::uint64_t SimBackend::pageable_copies() const {
  return impl_->pageable_copies();
}
std::uint64_t SimBackend::pageable_copy_bytes() const {
  return impl_->pageable_copy_bytes();
}
absl::StatusOr<IpcHandle> SimBackend::GetIpcHandle(DeviceAddress base) {
  if (!info().capabilities.ipc_handles) {
    return impl_->Unsupported(SimOp::kGetIpcHandle,
                              Backend::GetIpcHandle(base));
  }
  return impl_->GetIpcHandle(base);
}
absl::StatusOr<DeviceAddress> SimBackend::OpenIpcHandle(
    const IpcHandle& handle) {
  if (!info().capabilities.ipc_handles) {
    return impl_->Unsupported(SimOp::kOpenIpcHandle,
                              Backend::OpenIpcHandle(handle));
  }
  return impl_->OpenIpcHandle(handle);
}
absl::Status SimBackend::CloseIpcHandle(DeviceAddress address) {
  if (!info().capabilities.ipc_handles) {
    return impl_->Unsupported(SimOp::kCloseIpcHandle,
                              Backend::CloseIpcHandle(address));
  }
  return impl_->CloseIpcHandle(address);
}
absl::StatusOr<int> SimBackend::ExportMapping(DeviceAddress address) {
  if (!info().capabilities.shareable_handles) {
    return impl_->Unsupported(SimOp::kExportMapping,
                              Backend::ExportMapping(address));
  }
  return impl_->ExportMapping(address);
}
absl::StatusOr<PhysicalHandle> SimBackend::ImportPhysical(int fd,
                                                          std::uint64_t bytes) {
  if (!info().capabilities.shareable_handles) {
    return impl_->Unsupported(SimOp::kImportPhysical,
                              Backend::ImportPhysical(fd, bytes));
  }
  return impl_->ImportPhysical(fd, bytes);
}
absl::StatusOr<CounterBlock> SimBackend::CreateCounters(std::size_t count) {
  if (!info().capabilities.completion_counters) {
    return impl_->Unsupported(SimOp::kCreateCounters,
                              Backend::CreateCounters(count));
  }
  return impl_->CreateCounters(count);
}
absl::Status SimBackend::DestroyCounters(CounterHandle handle) {
  if (!info().capabilities.completion_counters) {
    return impl_->Unsupported(SimOp::kDestroyCounters,
                              Backend::DestroyCounters(handle));
  }
  return impl_->DestroyCounters(handle);
}
absl::Status SimBackend::WriteCounter(CounterHandle handle, std::size_t index,
                                      std::uint64_t value, Stream stream) {
  if (!info().capabilities.completion_counters) {
    return impl_->Unsupported(
        SimOp::kWriteCounter,
        Backend::WriteCounter(handle, index, value, stream));
  }
  return impl_->WriteCounter(handle, index, value, stream);
}
absl::Status SimBackend::WaitCounter(CounterHandle handle, std::size_t index,
                                     std::uint64_t value, Stream stream) {
  if (!info().capabilities.completion_counters) {
    return impl_->Unsupported(
        SimOp::kWaitCounter,
        Backend::WaitCounter(handle, index, value, stream));
  }
  return impl_->WaitCounter(handle, index, value, stream);
}
std::uint64_t SimBackend::live_counter_blocks() const {
  return impl_->WithCounters([](sim::Counters& c) { return c.live_blocks(); });
}
std::uint64_t SimBackend::pending_counter_writes() const {
  return impl_->WithCounters(
      [](sim::Counters& c) { return c.pending_writes(); });
}

absl::StatusOr<Backend::AddressRange> SimBackend::GetAddressRange(
    DeviceAddress address) {
  if (!info().capabilities.ipc_handles) {
    return Backend::GetAddressRange(address);
  }
  return impl_->GetAddressRange(address);
}
bool SimBackend::IsAccessible(DeviceAddress address,
                              std::uint64_t bytes) const {
  const DeviceAddress end = sim::SaturatingEnd(address, bytes);
  return end > address && impl_->WithVm([&](sim::VirtualMemory& vm) {
    return vm.Accessible(address, end);
  });
}

}  // namespace gpualloc
