// SPDX-License-Identifier: Apache-2.0
// core/backend.cc: the vendor-neutral parts of the Backend interface.

#include "gpualloc/core/backend.h"

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace gpualloc {

absl::Status Backend::NotSupported(absl::string_view operation,
                                   absl::string_view capability) const {
  return absl::UnimplementedError(absl::StrFormat(
      "backend %s (device %d, %s) does not support %s: it lacks "
      "the %s capability",
      info().backend, info().ordinal, info().name, operation, capability));
}

absl::StatusOr<EventHandle> Backend::CreateEvent() {
  return NotSupported("CreateEvent", "streams");
}
absl::Status Backend::DestroyEvent(EventHandle) {
  return NotSupported("DestroyEvent", "streams");
}
absl::Status Backend::RecordEvent(EventHandle, Stream) {
  return NotSupported("RecordEvent", "streams");
}
absl::StatusOr<bool> Backend::QueryEvent(EventHandle) {
  return NotSupported("QueryEvent", "streams");
}
absl::Status Backend::StreamWaitEvent(Stream, EventHandle) {
  return NotSupported("StreamWaitEvent", "streams");
}
absl::Status Backend::SynchronizeEvent(EventHandle) {
  return NotSupported("SynchronizeEvent", "streams");
}

absl::StatusOr<bool> Backend::IsCapturing(Stream) {
  return NotSupported("IsCapturing", "graph_capture");
}
absl::StatusOr<CaptureMode> Backend::ExchangeCaptureMode(CaptureMode) {
  return NotSupported("ExchangeCaptureMode", "graph_capture");
}

absl::Status Backend::ConfigurePool(const PoolOptions&) {
  return NotSupported("ConfigurePool", "stream_ordered_pools");
}
absl::StatusOr<DeviceAddress> Backend::PoolAllocate(std::uint64_t, Stream) {
  return NotSupported("PoolAllocate", "stream_ordered_pools");
}
absl::Status Backend::PoolFree(DeviceAddress, Stream) {
  return NotSupported("PoolFree", "stream_ordered_pools");
}
absl::Status Backend::PoolTrim(std::uint64_t) {
  return NotSupported("PoolTrim", "stream_ordered_pools");
}
absl::StatusOr<PoolUsage> Backend::GetPoolUsage() {
  return NotSupported("GetPoolUsage", "stream_ordered_pools");
}

absl::StatusOr<DeviceAddress> Backend::ReserveAddress(std::uint64_t,
                                                      std::uint64_t) {
  return NotSupported("ReserveAddress", "virtual_memory");
}
absl::Status Backend::FreeAddress(DeviceAddress, std::uint64_t) {
  return NotSupported("FreeAddress", "virtual_memory");
}
absl::StatusOr<PhysicalHandle> Backend::CreatePhysical(std::uint64_t) {
  return NotSupported("CreatePhysical", "virtual_memory");
}
absl::Status Backend::ReleasePhysical(PhysicalHandle) {
  return NotSupported("ReleasePhysical", "virtual_memory");
}
absl::Status Backend::Map(DeviceAddress, std::uint64_t, PhysicalHandle) {
  return NotSupported("Map", "virtual_memory");
}
absl::Status Backend::Unmap(DeviceAddress, std::uint64_t) {
  return NotSupported("Unmap", "virtual_memory");
}
absl::Status Backend::SetAccess(DeviceAddress, std::uint64_t) {
  return NotSupported("SetAccess", "virtual_memory");
}

absl::Status Backend::CopyToHost(void*, DeviceAddress, std::uint64_t) {
  return NotSupported("CopyToHost", "host_copy");
}
absl::Status Backend::CopyFromHost(DeviceAddress, const void*, std::uint64_t) {
  return NotSupported("CopyFromHost", "host_copy");
}

absl::StatusOr<IpcHandle> Backend::GetIpcHandle(DeviceAddress) {
  return NotSupported("GetIpcHandle", "ipc_handles");
}
absl::StatusOr<DeviceAddress> Backend::OpenIpcHandle(const IpcHandle&) {
  return NotSupported("OpenIpcHandle", "ipc_handles");
}
absl::Status Backend::CloseIpcHandle(DeviceAddress) {
  return NotSupported("CloseIpcHandle", "ipc_handles");
}
absl::StatusOr<int> Backend::ExportMapping(DeviceAddress) {
  return NotSupported("ExportMapping", "shareable_handles");
}
absl::StatusOr<PhysicalHandle> Backend::ImportPhysical(int, std::uint64_t) {
  return NotSupported("ImportPhysical", "shareable_handles");
}

absl::StatusOr<void*> Backend::HostAllocate(std::uint64_t) {
  return NotSupported("HostAllocate", "host_memory");
}
absl::Status Backend::HostFree(void*) {
  return NotSupported("HostFree", "host_memory");
}

absl::StatusOr<CounterBlock> Backend::CreateCounters(std::size_t) {
  return NotSupported("CreateCounters", "completion_counters");
}
absl::Status Backend::DestroyCounters(CounterHandle) {
  return NotSupported("DestroyCounters", "completion_counters");
}
absl::Status Backend::WriteCounter(CounterHandle, std::size_t, std::uint64_t,
                                   Stream) {
  return NotSupported("WriteCounter", "completion_counters");
}
absl::Status Backend::WaitCounter(CounterHandle, std::size_t, std::uint64_t,
                                  Stream) {
  return NotSupported("WaitCounter", "completion_counters");
}
absl::StatusOr<Backend::AddressRange> Backend::GetAddressRange(DeviceAddress) {
  return NotSupported("GetAddressRange", "ipc_handles");
}

}  // namespace gpualloc
