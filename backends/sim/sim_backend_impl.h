// SPDX-License-Identifier: Apache-2.0
// backends/sim/sim_backend_impl.h: SimBackend::Impl, the simulated device
// composed of its parts under one lock, and the wrapper every backend call
// goes through (Call); backends/sim/sim_backend.cc forwards to it. Internal to
// backends/sim.
//
// Model (see gpualloc/backends/sim_backend.h for the contract); each part's
// header says how it works:
//  - call_ledger.h: every call is counted; a call that fails (fault injection
//    or a real error) also counts as failed and costs nothing; a successful
//    call adds its modeled cost: per call plus per MiB it handles, and for a
//    host wait the pending work it waits for. A call that fails changes no
//    state other than the counters.
//  - placement.h: capacity is accounted by the request rounded up to the
//    allocation alignment, the way a driver rounds a cuMemAlloc/hipMalloc;
//    alignment, guards, fake and host-backed addresses.
//  - streams.h and hazards.h: streams, events, the modeled clock and the
//    hazard detector. Use checks that its range is usable (one live
//    allocation, one pool segment, or accessible mapped memory) and counts an
//    access violation otherwise; Unmap counts a hazard per stream whose
//    incomplete work still touches the range.
//  - virtual_memory.h: reservations, physical handles, mappings, access.
//  - pool.h: the stream-ordered pool and its reuse rules.
//  - capture.h: graph capture: captured work, graphs, and the capture rules
//    every call is checked against while a stream captures (Call).
//  - sim_options.h: SimOptions checked and turned into the DeviceInfo.
//  - ipc.h: IPC handles of plain allocations, exported and imported
//    mappings (two instances stand for two processes).
//  - host_copy.h: the checks of the copies between device and host memory
//    (host-backed memory only; the copy itself is a memcpy).
//  - host_memory.h: pinned host memory (HostAllocate, HostFree), its own
//    capacity; copies whose host side is not pinned pay the pageable rate.
//  - counters.h: completion counters in host memory the simulator owns; a
//    write lands once its stream's earlier work completes, so every call and
//    control that completes work (host waits, CompleteStream, CompleteAll,
//    AdvanceClock) lands what is due before it returns.
// Plain allocations, pool segments and physical handles share the device's
// capacity.
//
// Thread safety: one lock (core::Lock, the project's annotated futex mutex; it
// is also visible to ThreadSanitizer, which Debian's prebuilt absl::Mutex is
// not) guards every part; each call takes it once (Call). DeviceInfo and the
// options are immutable after Create.
#ifndef GPUALLOC_BACKENDS_SIM_SIM_BACKEND_IMPL_H_
#define GPUALLOC_BACKENDS_SIM_SIM_BACKEND_IMPL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "backends/sim/call_ledger.h"
#include "backends/sim/capture.h"
#include "backends/sim/counters.h"
#include "backends/sim/host_copy.h"
#include "backends/sim/host_memory.h"
#include "backends/sim/ipc.h"
#include "backends/sim/placement.h"
#include "backends/sim/pool.h"
#include "backends/sim/sim_options.h"
#include "backends/sim/sim_util.h"
#include "backends/sim/streams.h"
#include "backends/sim/virtual_memory.h"
#include "core/lock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

using sim::HostPageSize;

// The body of a call runs under the lock.
#define GPUALLOC_SIM_LOCKED ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)

class SimBackend::Impl {
 public:
  Impl(const SimOptions& options, DeviceInfo info, const sim::CostModel& costs)
      : info_(std::move(info)),
        ledger_(costs),
        placement_(options.memory, info_, options.ordinal, HostPageSize()),
        streams_(info_, options.clock, options.work_ns),
        counters_(info_, options.clock == SimClock::kModeled),
        vm_(options.memory, info_, HostPageSize(), &placement_),
        ipc_(options.memory, info_, HostPageSize(), &placement_, &vm_),
        pool_(info_, &placement_, &streams_, &ledger_,
              [this] { return DeviceFreeForPool(); }),
        host_(options.memory, info_.name, options.ordinal,
              options.host_memory_bytes != 0 ? options.host_memory_bytes
                                             : kDefaultHostMemoryBytes,
              HostPageSize()),
        pageable_ns_per_mib_(options.pageable_copy_ns_per_mib) {}

  // SimOptions::host_memory_bytes' default: 1 TiB.
  static constexpr std::uint64_t kDefaultHostMemoryBytes = std::uint64_t{1}
                                                           << 40;

  const DeviceInfo& info() const { return info_; }

  // One backend call of `op`: takes the lock, counts the call, fires its
  // injected fault when one is due (then `body` does not run), and counts
  // the outcome: a failure as failed, a success at its modeled cost for the
  // bytes `body` names.
  // A call that breaks a capture rule (capture.h) fails the same way,
  // without running `body`; `stream` is the stream the call names, if any.
  template <typename T, typename Body>
  T Call(SimOp op, Body body, Stream stream = Stream()) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = ledger_.Begin(op); !fault.ok()) return fault;
    if (absl::Status s = capture_.Check(op, stream); !s.ok()) {
      return ledger_.End(op, T(std::move(s)), 0);
    }
    std::uint64_t bytes = 0;
    T result = body(bytes);
    return ledger_.End(op, std::move(result), bytes);
  }

  // A call the device lacks the capability for: counted as a failed call.
  template <typename T>
  T Unsupported(SimOp op, T status) {
    core::LockGuard lock(&mu_);
    ledger_.CountUnsupported(op);
    return status;
  }

  absl::StatusOr<std::uint64_t> FreeBytes() {
    return Call<absl::StatusOr<std::uint64_t>>(
        SimOp::kFreeBytes, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return absl::StatusOr<std::uint64_t>(DeviceFree());
        });
  }

  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) {
    return Call<absl::StatusOr<DeviceAddress>>(
        SimOp::kAllocate,
        [&](std::uint64_t& cost)
            GPUALLOC_SIM_LOCKED -> absl::StatusOr<DeviceAddress> {
              cost = bytes;
              if (bytes == 0) {
                return absl::InvalidArgumentError(
                    absl::StrCat("Allocate of 0 bytes on ", info_.name,
                                 ": the size must be positive"));
              }
              // total_bytes, the plain allocations and the pool's segments are
              // multiples of the alignment, so a request that fits also fits
              // once rounded, and rounding cannot overflow.
              if (absl::Status s = CheckCapacity("requested", bytes); !s.ok()) {
                return s;
              }
              return placement_.Allocate(bytes);
            });
  }

  absl::Status Free(DeviceAddress address) {
    return Call<absl::Status>(
        SimOp::kFree, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          cost = placement_.SizeAt(address);
          if (absl::Status s = placement_.Free(address); !s.ok()) return s;
          ipc_.Forget(address);
          // cudaFree synchronizes the device: everything queued completes,
          // and the host has seen it (a synchronization point for the pool
          // as well). The host waits for that work: part of the call's cost.
          ledger_.AddNs(streams_.SynchronizeDevice(ledger_));
          counters_.Land(streams_);
          pool_.ReleaseAboveThreshold();
          return absl::OkStatus();
        });
  }

  // --- Events
  // -----------------------------------------------------------------

  absl::StatusOr<EventHandle> CreateEvent() {
    return Call<absl::StatusOr<EventHandle>>(
        SimOp::kCreateEvent, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return absl::StatusOr<EventHandle>(streams_.CreateEvent());
        });
  }
  absl::Status DestroyEvent(EventHandle event) {
    return Call<absl::Status>(SimOp::kDestroyEvent,
                              [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                return streams_.DestroyEvent(event);
                              });
  }
  absl::Status RecordEvent(EventHandle event, Stream stream) {
    return Call<absl::Status>(
        SimOp::kRecordEvent,
        [&](std::uint64_t&)
            GPUALLOC_SIM_LOCKED { return streams_.RecordEvent(event, stream); },
        stream);
  }
  absl::StatusOr<bool> QueryEvent(EventHandle event) {
    return Call<absl::StatusOr<bool>>(SimOp::kQueryEvent,
                                      [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                        return streams_.QueryEvent(event);
                                      });
  }
  absl::Status StreamWaitEvent(Stream stream, EventHandle event) {
    return Call<absl::Status>(
        SimOp::kStreamWaitEvent,
        [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return streams_.StreamWaitEvent(stream, event);
        },
        stream);
  }
  absl::Status SynchronizeEvent(EventHandle event) {
    return Call<absl::Status>(
        SimOp::kSynchronizeEvent, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          std::uint64_t wait_ns = 0;
          absl::Status s = streams_.SynchronizeEvent(event, ledger_, &wait_ns);
          if (!s.ok()) return s;
          ledger_.AddNs(wait_ns);
          counters_.Land(streams_);
          pool_.ReleaseAboveThreshold();
          return absl::OkStatus();
        });
  }

  // --- Device work
  // --------------------------------------------------------------

  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns) {
    core::LockGuard lock(&mu_);
    if (capture_.Record(stream, address, bytes, duration_ns)) return;
    Queue(stream, {address, bytes, duration_ns});
  }

  // --- Graph capture
  // ------------------------------------------------------------

  absl::StatusOr<bool> IsCapturing(Stream stream) {
    return Call<absl::StatusOr<bool>>(
        SimOp::kIsCapturing, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return absl::StatusOr<bool>(capture_.IsCapturing(stream));
        });
  }
  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode) {
    return Call<absl::StatusOr<CaptureMode>>(
        SimOp::kExchangeCaptureMode, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return absl::StatusOr<CaptureMode>(capture_.ExchangeMode(mode));
        });
  }
  absl::Status LaunchGraph(SimGraph graph, Stream stream) {
    core::LockGuard lock(&mu_);
    absl::StatusOr<std::vector<sim::CapturedWork>> work =
        capture_.Graph(graph, "LaunchGraph");
    if (!work.ok()) return work.status();
    if (capture_.IsCapturing(stream)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "sim: LaunchGraph of graph %d onto stream %#x, which is capturing",
          graph, stream.handle));
    }
    for (const sim::CapturedWork& piece : *work) Queue(stream, piece);
    return absl::OkStatus();
  }
  // --- The stream-ordered pool
  // ----------------------------------------------------

  absl::Status ConfigurePool(const PoolOptions& options) {
    return Call<absl::Status>(SimOp::kConfigurePool,
                              [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                pool_.Configure(options);
                                return absl::OkStatus();
                              });
  }
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) {
    return Call<absl::StatusOr<DeviceAddress>>(
        SimOp::kPoolAllocate,
        [&](std::uint64_t&)
            GPUALLOC_SIM_LOCKED -> absl::StatusOr<DeviceAddress> {
              if (absl::Status s =
                      streams_.CheckNotDestroyed(stream, "PoolAllocate");
                  !s.ok()) {
                return s;
              }
              return pool_.Allocate(bytes, stream);
            });
  }
  absl::Status PoolFree(DeviceAddress address, Stream stream) {
    return Call<absl::Status>(
        SimOp::kPoolFree, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          if (absl::Status s = streams_.CheckNotDestroyed(stream, "PoolFree");
              !s.ok()) {
            return s;
          }
          return pool_.Free(address, stream);
        });
  }
  absl::Status PoolTrim(std::uint64_t keep_bytes) {
    return Call<absl::Status>(SimOp::kPoolTrim,
                              [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                pool_.ReleaseSegments(keep_bytes, 0);
                                return absl::OkStatus();
                              });
  }
  absl::StatusOr<PoolUsage> GetPoolUsage() {
    return Call<absl::StatusOr<PoolUsage>>(
        SimOp::kGetPoolUsage, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return absl::StatusOr<PoolUsage>(pool_.usage());
        });
  }

  // --- Virtual memory
  // ----------------------------------------------------------

  absl::StatusOr<DeviceAddress> ReserveAddress(std::uint64_t bytes,
                                               std::uint64_t alignment) {
    return Call<absl::StatusOr<DeviceAddress>>(
        SimOp::kReserveAddress, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return vm_.Reserve(bytes, alignment);
        });
  }
  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes) {
    return Call<absl::Status>(SimOp::kFreeAddress,
                              [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                return vm_.FreeAddress(address, bytes);
                              });
  }
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes) {
    return Call<absl::StatusOr<PhysicalHandle>>(
        SimOp::kCreatePhysical,
        [&](std::uint64_t& cost)
            GPUALLOC_SIM_LOCKED -> absl::StatusOr<PhysicalHandle> {
              cost = bytes;
              if (absl::Status s = vm_.CheckCreate(bytes); !s.ok()) return s;
              if (absl::Status s = CheckCapacity("CreatePhysical of", bytes);
                  !s.ok()) {
                return s;
              }
              return vm_.Create(bytes);
            });
  }
  absl::Status ReleasePhysical(PhysicalHandle handle) {
    return Call<absl::Status>(SimOp::kReleasePhysical,
                              [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
                                cost = vm_.HandleBytes(handle);
                                return vm_.Release(handle);
                              });
  }
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle) {
    return Call<absl::Status>(SimOp::kMap,
                              [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
                                cost = bytes;
                                return vm_.Map(address, bytes, handle);
                              });
  }
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes) {
    return Call<absl::Status>(
        SimOp::kUnmap, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          cost = bytes;
          return vm_.Unmap(
              address, bytes,
              [&](DeviceAddress start, DeviceAddress end)
                  GPUALLOC_SIM_LOCKED { streams_.FlagUnmapInUse(start, end); });
        });
  }
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes) {
    return Call<absl::Status>(SimOp::kSetAccess,
                              [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
                                cost = bytes;
                                return vm_.SetAccess(address, bytes);
                              });
  }

  // --- Pinned host memory
  // ------------------------------------------------------

  absl::StatusOr<void*> HostAllocate(std::uint64_t bytes) {
    return Call<absl::StatusOr<void*>>(
        SimOp::kHostAllocate, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          cost = bytes;
          return host_.Allocate(bytes);
        });
  }
  absl::Status HostFree(void* ptr) {
    return Call<absl::Status>(
        SimOp::kHostFree, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          cost = host_.SizeAt(ptr);
          if (absl::Status s = host_.Free(ptr); !s.ok()) return s;
          // cudaFreeHost synchronizes the device, as cudaFree does.
          ledger_.AddNs(streams_.SynchronizeDevice(ledger_));
          counters_.Land(streams_);
          pool_.ReleaseAboveThreshold();
          return absl::OkStatus();
        });
  }

  // --- Completion counters (backends/sim/counters.h)
  // ---------------------------------------------------------------

  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count) {
    return Call<absl::StatusOr<CounterBlock>>(
        SimOp::kCreateCounters, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          absl::StatusOr<CounterBlock> block = counters_.Create(count);
          if (block.ok()) cost = block->count * sizeof(std::uint64_t);
          return block;
        });
  }
  absl::Status DestroyCounters(CounterHandle handle) {
    return Call<absl::Status>(
        SimOp::kDestroyCounters, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
          if (absl::Status s = counters_.CheckBlock(handle); !s.ok()) return s;
          // cuMemFreeHost synchronizes the device, as cudaFree does: every
          // queued write has landed before the block goes.
          ledger_.AddNs(streams_.SynchronizeDevice(ledger_));
          counters_.Land(streams_);
          pool_.ReleaseAboveThreshold();
          return counters_.Destroy(handle, &cost);
        });
  }
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream) {
    return Call<absl::Status>(
        SimOp::kWriteCounter,
        [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return counters_.Write(handle, index, value, stream, streams_);
        },
        stream);
  }
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream stream) {
    return Call<absl::Status>(
        SimOp::kWaitCounter,
        [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return counters_.Wait(handle, index, value, stream, streams_);
        },
        stream);
  }
  template <typename F>
  auto WithCounters(F f) {
    core::LockGuard lock(&mu_);
    return f(counters_);
  }
  template <typename F>
  auto WithHost(F f) {
    core::LockGuard lock(&mu_);
    return f(host_);
  }
  std::uint64_t pageable_copies() {
    core::LockGuard lock(&mu_);
    return pageable_copies_;
  }
  std::uint64_t pageable_copy_bytes() {
    core::LockGuard lock(&mu_);
    return pageable_copy_bytes_;
  }
  // --- Address ranges (GetAddressRange: a lookup, not a ledger call) ---
  absl::StatusOr<Backend::AddressRange> GetAddressRange(DeviceAddress address) {
    core::LockGuard lock(&mu_);
    std::pair<DeviceAddress, std::uint64_t> range = ipc_.RangeOf(address);
    if (range.second == 0) range = placement_.RangeOf(address);
    if (range.second == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GetAddressRange(%#x) on %s: not inside a live allocation or a "
          "range OpenIpcHandle opened",
          address, info_.name));
    }
    return Backend::AddressRange{range.first, range.second};
  }

  // --- Sharing memory with other processes (backends/sim/ipc.h)
  // ---------------------------------------------------------------

  absl::StatusOr<IpcHandle> GetIpcHandle(DeviceAddress base) {
    return Call<absl::StatusOr<IpcHandle>>(
        SimOp::kGetIpcHandle, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return ipc_.GetHandle(base);
        });
  }
  absl::StatusOr<DeviceAddress> OpenIpcHandle(const IpcHandle& handle) {
    return Call<absl::StatusOr<DeviceAddress>>(
        SimOp::kOpenIpcHandle,
        [&](std::uint64_t&) GPUALLOC_SIM_LOCKED { return ipc_.Open(handle); });
  }
  absl::Status CloseIpcHandle(DeviceAddress address) {
    return Call<absl::Status>(SimOp::kCloseIpcHandle,
                              [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                return ipc_.Close(address);
                              });
  }
  absl::StatusOr<int> ExportMapping(DeviceAddress address) {
    return Call<absl::StatusOr<int>>(SimOp::kExportMapping,
                                     [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
                                       return ipc_.ExportMapping(address);
                                     });
  }
  absl::StatusOr<PhysicalHandle> ImportPhysical(int fd, std::uint64_t bytes) {
    return Call<absl::StatusOr<PhysicalHandle>>(
        SimOp::kImportPhysical, [&](std::uint64_t&) GPUALLOC_SIM_LOCKED {
          return ipc_.ImportPhysical(fd, bytes);
        });
  }

  // --- Copies between device and host memory
  // ---------------------------------------

  // CopyToHost or CopyFromHost (`op`) of [device, device + bytes): once the
  // range and `host` pass the checks, `copy` runs with the range's address.
  absl::Status Copy(SimOp op, DeviceAddress device, const void* host,
                    std::uint64_t bytes, absl::FunctionRef<void(void*)> copy) {
    return Call<absl::Status>(op, [&](std::uint64_t& cost) GPUALLOC_SIM_LOCKED {
      cost = bytes;
      const DeviceAddress end = sim::SaturatingEnd(device, bytes);
      const bool whole = bytes != 0 && end - device == bytes;
      const sim::CopyRange range =
          whole && Usable(device, end)         ? sim::CopyRange::kUsable
          : whole && vm_.Reserved(device, end) ? sim::CopyRange::kReserved
                                               : sim::CopyRange::kElsewhere;
      absl::Status s = sim::CheckCopy(info_, op, device, host, bytes, range);
      if (s.ok() && bytes != 0) {
        copy(reinterpret_cast<void*>(device));
        if (!host_.Pinned(host, bytes)) ChargePageable(op, bytes);
      }
      return s;
    });
  }

  // Runs `f` on one part under the lock (the calls that are not backend
  // calls: the test's view and control of the device).
  template <typename F>
  auto WithCapture(F f) {
    core::LockGuard lock(&mu_);
    return f(capture_);
  }
  template <typename F>
  auto WithLedger(F f) {
    core::LockGuard lock(&mu_);
    return f(ledger_);
  }
  template <typename F>
  auto WithStreams(F f) {
    core::LockGuard lock(&mu_);
    return f(streams_);
  }
  // WithStreams for a control that may complete work (CompleteStream,
  // CompleteAll, AdvanceClock): the counter writes now due land before it
  // returns.
  template <typename F>
  void CompletingStreams(F f) {
    core::LockGuard lock(&mu_);
    f(streams_);
    counters_.Land(streams_);
  }
  template <typename F>
  auto WithPlacement(F f) {
    core::LockGuard lock(&mu_);
    return f(placement_);
  }
  template <typename F>
  auto WithPool(F f) {
    core::LockGuard lock(&mu_);
    return f(pool_);
  }
  template <typename F>
  auto WithVm(F f) {
    core::LockGuard lock(&mu_);
    return f(vm_);
  }
  std::uint64_t BytesHeld() {
    core::LockGuard lock(&mu_);
    return info_.total_bytes - DeviceFree();
  }

 private:
  std::uint64_t DeviceFree() const GPUALLOC_SIM_LOCKED {
    return info_.total_bytes - placement_.bytes_allocated() -
           pool_.usage().reserved - vm_.physical_bytes();
  }
  // The pool asks only from inside a call, under the lock.
  std::uint64_t DeviceFreeForPool() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return DeviceFree();
  }

  // ResourceExhausted with the device's numbers when `bytes` do not fit.
  absl::Status CheckCapacity(absl::string_view what,
                             std::uint64_t bytes) const GPUALLOC_SIM_LOCKED {
    const std::uint64_t free = DeviceFree();
    if (bytes <= free) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "out of memory on %s: %s %d bytes, %d of %d bytes in use (%d by plain "
        "allocations, %d by the stream-ordered pool, %d by physical memory "
        "handles; %d free)",
        info_.name, what, bytes, info_.total_bytes - free, info_.total_bytes,
        placement_.bytes_allocated(), pool_.usage().reserved,
        vm_.physical_bytes(), free));
  }

  // A copy of `bytes` from or to pageable host memory: counted, and the
  // pageable rate's surplus over the link's added to the modeled cost.
  void ChargePageable(SimOp op, std::uint64_t bytes) GPUALLOC_SIM_LOCKED {
    ++pageable_copies_;
    pageable_copy_bytes_ += bytes;
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
    const std::uint64_t rate = pageable_ns_per_mib_;
    const std::uint64_t staged = sim::SaturatingAdd(
        bytes / kMiB > ~std::uint64_t{0} / (rate + 1) ? ~std::uint64_t{0}
                                                      : bytes / kMiB * rate,
        (bytes % kMiB) * rate / kMiB);
    const std::uint64_t link =
        ledger_.CostNs(op, bytes) - ledger_.CostNs(op, 0);
    if (staged > link) ledger_.AddNs(staged - link);
  }

  // Queues one piece of work on `stream`, checking its range.
  void Queue(Stream stream,
             const sim::CapturedWork& piece) GPUALLOC_SIM_LOCKED {
    const DeviceAddress end = sim::SaturatingEnd(piece.address, piece.bytes);
    const bool usable = end > piece.address && Usable(piece.address, end);
    streams_.Use(stream, piece.address, piece.bytes, piece.duration_ns, usable);
  }

  // Whether work may touch [start, end): all of it inside one live plain
  // allocation, one live pool segment, mapped with access set, or one live
  // pinned host allocation.
  bool Usable(DeviceAddress start,
              DeviceAddress end) const GPUALLOC_SIM_LOCKED {
    return placement_.Holds(start, end) || pool_.Holds(start, end) ||
           vm_.Accessible(start, end) || host_.Holds(start, end) ||
           ipc_.Holds(start, end);
  }

  const DeviceInfo info_;
  mutable core::Lock mu_;
  sim::CallLedger ledger_ ABSL_GUARDED_BY(mu_);
  sim::Placement placement_ ABSL_GUARDED_BY(mu_);
  sim::Streams streams_ ABSL_GUARDED_BY(mu_);
  sim::Counters counters_ ABSL_GUARDED_BY(mu_);
  sim::VirtualMemory vm_ ABSL_GUARDED_BY(mu_);
  sim::Ipc ipc_ ABSL_GUARDED_BY(mu_);
  sim::Pool pool_ ABSL_GUARDED_BY(mu_);
  sim::Capture capture_ ABSL_GUARDED_BY(mu_);
  sim::HostMemory host_ ABSL_GUARDED_BY(mu_);
  const std::uint64_t pageable_ns_per_mib_;
  std::uint64_t pageable_copies_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t pageable_copy_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

#undef GPUALLOC_SIM_LOCKED

}  // namespace gpualloc

#endif  // GPUALLOC_BACKENDS_SIM_SIM_BACKEND_IMPL_H_
