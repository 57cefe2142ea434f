// SPDX-License-Identifier: Apache-2.0
// gpualloc/backends/sim_backend.h: a simulated device, the backend every CPU
// test and tool uses.
//
// The simulator models what an allocator can observe of a GPU: capacity,
// granularity, alignment, page sizes and capabilities (from an architecture
// profile or given explicitly); addresses that are either fake (nothing
// touched, so a 192 GiB device costs no host memory) or backed by host memory
// (so tests can write and check fill patterns, and copy to and from host
// memory with CopyToHost / CopyFromHost); virtual memory with CUDA's
// rules (reserve, create, map, set access, unmap, release, free), really
// mapped in host-backed mode; streams and events whose work completes when a
// test says so or in order on a modeled clock, with a hazard detector that
// also catches work on memory that is not accessible and unmaps of memory
// pending work still uses; a stream-ordered pool with CUDA's three reuse
// rules; fault
// injection (fail the k-th call of an operation); and a counter of every call
// with its modeled cost (per call plus per byte, by architecture profile, and
// the pending work a host wait waits for); graph capture (a stream records
// its work into a graph, launched later as often as the test likes), with
// CUDA's capture rules checked and their violations counted; and completion
// counters in host memory the simulator owns, written by streams once their
// earlier work completes (cuStreamWriteValue64) and waited for by streams
// (cuStreamWaitValue64).
//
// Guarantees the allocator tests rely on: fake addresses are deterministic and
// never reused (a stale pointer cannot alias a later allocation), and separate
// allocations are never contiguous (a guard of at least one granule follows
// each; host-backed guards are PROT_NONE, so an overrun faults).
//
// Thread safety: all methods are thread-safe.
#ifndef GPUALLOC_SIM_BACKEND_H_
#define GPUALLOC_SIM_BACKEND_H_

// A header of the backends layer: the library's lower layers may not include it
// (docs/DESIGN.md, "Layers").
#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 2
#error \
    "gpualloc/backends/sim_backend.h belongs to the backends layer; a lower layer of the library may not include it"
#endif

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

// The operations the simulator counts, costs and can make fail.
enum class SimOp : int {
  kAllocate = 0,
  kFree,
  kFreeBytes,
  kCreateEvent,
  kDestroyEvent,
  kRecordEvent,
  kQueryEvent,
  kStreamWaitEvent,
  kSynchronizeEvent,
  kPoolAllocate,
  kPoolFree,
  kPoolTrim,
  kConfigurePool,
  kGetPoolUsage,
  kReserveAddress,
  kFreeAddress,
  kCreatePhysical,
  kReleasePhysical,
  kMap,
  kUnmap,
  kSetAccess,
  kIsCapturing,
  kExchangeCaptureMode,
  kCopyToHost,
  kCopyFromHost,
  kHostAllocate,
  kHostFree,
  kGetIpcHandle,
  kOpenIpcHandle,
  kCloseIpcHandle,
  kExportMapping,
  kImportPhysical,
  kCreateCounters,
  kDestroyCounters,
  kWriteCounter,
  kWaitCounter,
  kCount
};
inline constexpr int kNumSimOps = static_cast<int>(SimOp::kCount);
absl::string_view SimOpName(SimOp op);

enum class SimMemory {
  kFake,        // addresses are numbers only; nothing is allocated on the host
  kHostBacked,  // addresses point at host memory the caller may read and write
};

// How queued work completes.
enum class SimClock {
  // Work completes only when the test says so (CompleteStream, CompleteAll)
  // or the host waits for it (SynchronizeEvent, Free).
  kManual,
  // Each stream runs its work in order, each piece taking its duration, on a
  // modeled clock that AdvanceClock moves; host waits move it to the awaited
  // completion.
  kModeled,
};

// What the detector flagged.
enum class SimHazardKind {
  // Work on `stream` touched memory that work queued earlier on `other` still
  // uses, and `stream` was not made to wait. Counted by hazards().
  kStreamOrder,
  // Unmap of memory that incomplete work queued on `other` (== `stream`)
  // still uses: the allocator must never unmap memory while an event on it
  // is pending. Counted by hazards().
  kUnmapInUse,
  // Work on `stream` touched memory that is neither a live plain allocation,
  // nor a block of a live pool segment, nor mapped with access set (`other`
  // == `stream`). Counted by access_violations(), not hazards(), so that
  // tests that drive the detector with made-up addresses keep working.
  kInaccessible,
};

// A graph EndCapture made: the work a stream captured, to launch many times.
// 0 is never a graph.
using SimGraph = std::uint64_t;

// A moment the detector flagged.
struct SimHazard {
  SimHazardKind kind = SimHazardKind::kStreamOrder;
  Stream stream;
  Stream other;
  DeviceAddress address = 0;  // start of the overlap
  std::uint64_t bytes = 0;    // length of the overlap
  std::string ToString() const;
};

struct SimOptions {
  // Architecture profile whose numbers fill every field left at 0 below.
  std::string profile = "h200";
  std::uint64_t total_bytes = 0;
  std::uint64_t min_granularity = 0;
  std::uint64_t recommended_granularity = 0;
  std::uint64_t allocation_alignment = 0;
  SimMemory memory = SimMemory::kFake;
  // The cost model: a successful call of `op` handling `bytes` adds
  // cost_ns[op] + cost_ns_per_mib[op] * bytes / MiB to modeled_ns(). An
  // entry left at kProfileCost takes the profile's figure
  // (ArchProfile::costs, with its sources in arch/profiles.cc);
  // those are the calls that allocate, map and free memory, per call plus
  // per byte: cuMemAlloc and cuMemFree (Allocate, Free), cuMemCreate and
  // cuMemRelease (CreatePhysical, ReleasePhysical; a release costs its
  // handle's bytes), cuMemMap, cuMemUnmap, cuMemSetAccess (their range), and
  // cuMemAddressReserve/Free (per call). The rest are small per-call
  // figures: events, the pool's calls, cudaMemGetInfo, the capture queries.
  // The copies between device and host memory (CopyToHost, CopyFromHost)
  // cost 10 us per call (a synchronous cuMemcpy's launch and completion)
  // plus their bytes over a host link of about 50 GB/s, 20'972 ns per MiB
  // (PCIe 5 x16 and NVLink-C2C-class links of the H100/H200 and MI300X
  // devices the profiles describe; the same figure for every profile) when
  // the host range is pinned memory of this device (HostAllocate); a copy
  // from or to ordinary pageable memory goes through the driver's pinned
  // staging buffer and costs pageable_copy_ns_per_mib per MiB instead (below).
  // Pinned host memory (HostAllocate, cuMemHostAlloc) costs 50 us per call
  // plus 200 us per MiB (faulting in and page-locking the pages, about
  // 5 GB/s); HostFree (cuMemFreeHost) 30 us plus 20 us per MiB, and it
  // synchronizes the device like Free (a host wait, below). Estimates of the
  // orders of magnitude measured on CUDA hosts, not measurements of ours.
  // Sharing with other processes: GetIpcHandle 5 us (cuIpcGetMemHandle is a
  // driver query), OpenIpcHandle 100 us (cuIpcOpenMemHandle maps the whole
  // allocation into this context and updates the page tables), CloseIpcHandle
  // 50 us (an unmap), ExportMapping 10 us (retain, export to a file
  // descriptor, release) and ImportPhysical 20 us (a new handle over another
  // process's memory); per call, the mapping calls that follow an import
  // (Map, SetAccess) cost what they always do.
  // Completion counters take the profile's figures (ArchProfile::costs): a
  // block costs what pinned host memory does (CreateCounters like
  // HostAllocate, DestroyCounters like HostFree, per call plus per MiB of its
  // 8 bytes per counter, and DestroyCounters synchronizes the device, a host
  // wait); WriteCounter and WaitCounter cost what RecordEvent and
  // StreamWaitEvent do (2 us each): estimates of the host's enqueue cost
  // until tools/device-check.sh measures cuStreamWriteValue64 and
  // cuStreamWaitValue64. Reading a counter is a load, not a call: it costs
  // nothing.
  // A pool call that grows the pool by a segment also adds the kAllocate
  // cost of the segment's bytes, and one that returns a segment to the
  // device (a trim, or the release threshold applied at a synchronization
  // point) its kFree cost, since the device pays for them.
  //
  // Host waits cost the pending work they wait for, on top of their call:
  // SynchronizeEvent the work its event captured, Free (which synchronizes
  // the device, like cudaFree) all queued work. Modeled clock: the time from
  // now_ns() until that work is done. Manual clock (no time passes on its
  // own): host_wait_ns_per_piece for each pending piece the wait completes
  // on the stream where it completes the most (streams run side by side,
  // pieces of one stream one after the other).
  static constexpr std::uint64_t kProfileCost = ~std::uint64_t{0};
  std::array<std::uint64_t, kNumSimOps> cost_ns = {
      /*kAllocate=*/kProfileCost,
      /*kFree=*/kProfileCost,
      /*kFreeBytes=*/1'000,
      /*kCreateEvent=*/1'000,
      /*kDestroyEvent=*/1'000,
      /*kRecordEvent=*/2'000,
      /*kQueryEvent=*/500,
      /*kStreamWaitEvent=*/2'000,
      /*kSynchronizeEvent=*/5'000,
      /*kPoolAllocate=*/1'000,
      /*kPoolFree=*/1'000,
      /*kPoolTrim=*/10'000,
      /*kConfigurePool=*/1'000,
      /*kGetPoolUsage=*/500,
      /*kReserveAddress=*/kProfileCost,
      /*kFreeAddress=*/kProfileCost,
      /*kCreatePhysical=*/kProfileCost,
      /*kReleasePhysical=*/kProfileCost,
      /*kMap=*/kProfileCost,
      /*kUnmap=*/kProfileCost,
      /*kSetAccess=*/kProfileCost,
      /*kIsCapturing=*/100,
      /*kExchangeCaptureMode=*/100,
      /*kCopyToHost=*/10'000,
      /*kCopyFromHost=*/10'000,
      /*kHostAllocate=*/50'000,
      /*kHostFree=*/30'000,
      /*kGetIpcHandle=*/5'000,
      /*kOpenIpcHandle=*/100'000,
      /*kCloseIpcHandle=*/50'000,
      /*kExportMapping=*/10'000,
      /*kImportPhysical=*/20'000,
      /*kCreateCounters=*/kProfileCost,
      /*kDestroyCounters=*/kProfileCost,
      /*kWriteCounter=*/kProfileCost,
      /*kWaitCounter=*/kProfileCost};
  std::array<std::uint64_t, kNumSimOps> cost_ns_per_mib = {
      /*kAllocate=*/kProfileCost,
      /*kFree=*/kProfileCost,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      /*kReserveAddress=*/kProfileCost,
      /*kFreeAddress=*/kProfileCost,
      /*kCreatePhysical=*/kProfileCost,
      /*kReleasePhysical=*/kProfileCost,
      /*kMap=*/kProfileCost,
      /*kUnmap=*/kProfileCost,
      /*kSetAccess=*/kProfileCost,
      /*kIsCapturing=*/0,
      /*kExchangeCaptureMode=*/0,
      /*kCopyToHost=*/20'972,
      /*kCopyFromHost=*/20'972,
      /*kHostAllocate=*/200'000,
      /*kHostFree=*/20'000,
      /*kGetIpcHandle=*/0,
      /*kOpenIpcHandle=*/0,
      /*kCloseIpcHandle=*/0,
      /*kExportMapping=*/0,
      /*kImportPhysical=*/0,
      /*kCreateCounters=*/kProfileCost,
      /*kDestroyCounters=*/kProfileCost,
      /*kWriteCounter=*/kProfileCost,
      /*kWaitCounter=*/kProfileCost};
  // A copy whose host range is not pinned memory of this device (pageable
  // memory: staged through a pinned bounce buffer by the driver) costs this
  // per MiB instead of cost_ns_per_mib's link rate: about 25 GB/s, half the
  // link's.
  std::uint64_t pageable_copy_ns_per_mib = 41'943;
  // Pinned host memory the modeled machine can hand out (HostAllocate);
  // 0: 1 TiB. Not taken from the device's capacity.
  std::uint64_t host_memory_bytes = 0;
  // Manual clock: the modeled cost of waiting for one pending piece of work
  // (0: work_ns, what a piece takes on the modeled clock by default).
  std::uint64_t host_wait_ns_per_piece = 0;
  int ordinal = 0;
  // Capabilities the simulated device offers (tests turn them off to check
  // that a mode the backend cannot serve fails clearly). Without them the
  // calls answer Backend's Unimplemented (counted as failed calls). The pool
  // needs streams: with streams off, capabilities.stream_ordered_pools is
  // off too.
  bool streams = true;
  bool stream_ordered_pools = true;
  // Virtual memory (reserve/create/map/unmap...): both the NVIDIA and the AMD
  // devices the profiles describe support it. Host-backed memory maps it for
  // real, so it needs min_granularity to be a multiple of the host page size.
  bool virtual_memory = true;
  // Graph capture (BeginCapture...; IsCapturing and ExchangeCaptureMode):
  // needs streams, so with streams off capabilities.graph_capture is off too.
  bool graph_capture = true;
  // Page-locked host memory (HostAllocate, HostFree; backends/sim/
  // host_memory.h): real page-aligned mappings in host-backed memory, fake
  // addresses of their own range in fake memory.
  bool host_memory = true;
  // Sharing memory with another SimBackend (capabilities.ipc_handles:
  // GetIpcHandle...; capabilities.shareable_handles: ExportMapping,
  // ImportPhysical, which also need virtual_memory).
  bool ipc_handles = true;
  bool shareable_handles = true;
  // Completion counters (capabilities.completion_counters: CreateCounters,
  // DestroyCounters, WriteCounter, WaitCounter; backends/sim/counters.h):
  // needs streams, so with streams off the capability is off too.
  bool completion_counters = true;
  SimClock clock = SimClock::kManual;
  // Duration of one piece of work (Use) when the caller gives none.
  std::uint64_t work_ns = 10'000;
};

class SimBackend final : public Backend {
 public:
  // InvalidArgument when the options are inconsistent (unknown profile,
  // granularity not a power of two, total not a multiple of the allocation
  // alignment...).
  static absl::StatusOr<std::shared_ptr<SimBackend>> Create(
      const SimOptions& options);
  ~SimBackend() override;

  const DeviceInfo& info() const override;
  absl::StatusOr<std::uint64_t> FreeBytes() override;
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) override;
  // Like cudaFree, synchronizes the device: all queued work completes (on the
  // modeled clock, now_ns moves to when it is done), and it is a
  // synchronization point for the pool.
  absl::Status Free(DeviceAddress address) override;

  absl::StatusOr<EventHandle> CreateEvent() override;
  absl::Status DestroyEvent(EventHandle event) override;
  absl::Status RecordEvent(EventHandle event, Stream stream) override;
  absl::StatusOr<bool> QueryEvent(EventHandle event) override;
  absl::Status StreamWaitEvent(Stream stream, EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;

  // The stream-ordered pool exists from creation with CUDA's defaults
  // (release threshold 0, every reuse rule on); ConfigurePool replaces the
  // options and the threshold applies from the next synchronization point.
  // Blocks are taken from segments of whole recommended granules, taken from
  // the device's capacity (FreeBytes counts them, bytes_allocated and
  // live_allocations do not: those count plain allocations only), at fake or
  // host-backed addresses like plain allocations. A block freed on stream A
  // is handed to stream B when: B == A; or a synchronization point (Free,
  // SynchronizeEvent) saw the free complete (whatever the rules say, as in
  // CUDA); or follow_event_dependencies and B already waits for the free;
  // or opportunistic and the free has completed; or internal_dependencies,
  // and then B is made to wait for the free. Best fit among the blocks B can
  // use without a new wait comes first, then best fit among the rest. Free
  // neighbours in one segment merge, keeping the strictest condition (a
  // block merged from frees on two streams is no longer "same stream" for
  // either), except that a part whose free a synchronization point saw adds
  // no condition. At synchronization points and in PoolTrim, fully free
  // segments whose frees have completed go back to the device, newest first,
  // while the pool holds more than the threshold (or keep_bytes); a growth
  // that does not fit does the same first. A request of 0 bytes is
  // InvalidArgument; freeing an address twice is FailedPrecondition.
  absl::Status ConfigurePool(const PoolOptions& options) override;
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) override;
  absl::Status PoolFree(DeviceAddress address, Stream stream) override;
  absl::Status PoolTrim(std::uint64_t keep_bytes) override;
  absl::StatusOr<PoolUsage> GetPoolUsage() override;
  // Stream waits the pool inserted itself: PoolAllocate calls that handed a
  // block to a stream only after making that stream wait for the block's
  // free on another stream (internal_dependencies), since creation or the
  // last ResetCounters. A real driver does this too and reports nothing, so
  // it is the simulator's own figure, not a backend call, never counted in
  // calls(); the replay's async model reports it as its stream waits.
  std::uint64_t pool_stream_waits() const;

  // --- Virtual memory (SimOptions::virtual_memory) --------------------------
  // CUDA's rules, checked before anything changes; each broken rule is
  // InvalidArgument naming it and the values:
  //   - sizes, addresses and alignments are multiples of min_granularity
  //     (sizes positive); a reservation's alignment is 0 (the granularity) or
  //     a power of two at least the granularity;
  //   - Map: [address, address + bytes) lies inside one reservation, overlaps
  //     no mapping, and bytes is the size of `handle`, which is live and not
  //     released (a mapping is always a whole handle at offset 0; one handle
  //     may be mapped at several places, as in CUDA);
  //   - Unmap: the range is exactly one or more whole, contiguous mappings;
  //   - SetAccess: the whole range is mapped (it may span several mappings
  //     and cover part of one);
  //   - FreeAddress: exactly a whole reservation with nothing mapped in it;
  //   - ReleasePhysical: a live, not yet released handle.
  // CreatePhysical takes its bytes from the device's capacity like Allocate
  // (FreeBytes drops; ResourceExhausted with the numbers when they do not
  // fit). A handle released while mapped is gone, but its memory stays
  // mapped and usable until the last mapping of it is unmapped; then it
  // returns to the device. Out of address space is ResourceExhausted.
  //
  // Fake memory: reservations come down from the top of the ordinal's 2^48
  // byte window while plain allocations and pool segments go up from the
  // bottom, so the two never overlap; addresses are deterministic and never
  // reused, and a guard of one recommended granule separates reservations.
  // Host-backed memory: a reservation is an anonymous PROT_NONE mapping
  // (MAP_NORESERVE), a handle a memfd of its size, Map maps the memfd over
  // the reservation (MAP_SHARED | MAP_FIXED, PROT_NONE), SetAccess makes it
  // readable and writable, Unmap puts PROT_NONE anonymous memory back, and
  // ReleasePhysical closes the memfd (the mappings keep its pages, as CUDA's
  // mappings keep released memory). A failing system call is Internal (or
  // ResourceExhausted when the host is out of memory) with errno's text.
  absl::StatusOr<DeviceAddress> ReserveAddress(
      std::uint64_t bytes, std::uint64_t alignment) override;
  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes) override;
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes) override;
  absl::Status ReleasePhysical(PhysicalHandle handle) override;
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle) override;
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes) override;
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes) override;

  // --- Sharing memory with other processes ---------------------------------
  // Two SimBackend instances stand for two processes: a handle is opened,
  // and exported memory imported, by another instance (in this process or
  // another one); opening a handle made by the same instance is
  // InvalidArgument, as CUDA refuses it in the process that made it.
  // Host-backed memory shares its content for real: a plain allocation is
  // moved to a memfd mapped MAP_SHARED at the same address (its content
  // copied) at its first GetIpcHandle, and a mapping keeps a duplicate of its
  // handle's memfd until it is unmapped. The 64-byte IpcHandle holds a magic
  // number, the exporter's pid, the number of the memfd the exporter keeps
  // open, the size and the exporting instance's id; OpenIpcHandle in another
  // process fetches the memfd with pidfd_open + pidfd_getfd (which needs
  // ptrace permission over the exporter), in the exporting process it maps
  // the memfd directly, and maps it MAP_SHARED at a new address;
  // CloseIpcHandle unmaps it. ExportMapping returns a duplicate of the
  // mapping's memfd, ImportPhysical a handle over a duplicate of the given
  // descriptor (not counted against this device's capacity). Fake memory has
  // no bytes to share: handles and exported descriptors (a small memfd
  // naming the exporting instance) work between instances in one process
  // and are FailedPrecondition in another, saying that host-backed memory is
  // needed. Opened and imported memory is usable by Use and the copies like
  // the exporter's.
  absl::StatusOr<IpcHandle> GetIpcHandle(DeviceAddress base) override;
  absl::StatusOr<DeviceAddress> OpenIpcHandle(const IpcHandle& handle) override;
  absl::Status CloseIpcHandle(DeviceAddress address) override;
  absl::StatusOr<int> ExportMapping(DeviceAddress address) override;
  absl::StatusOr<PhysicalHandle> ImportPhysical(int fd,
                                                std::uint64_t bytes) override;

  // Bytes currently mapped (each mapping counts, so a handle mapped twice
  // counts twice).
  std::uint64_t mapped_bytes() const;
  // Bytes of physical memory alive: handles not yet released, and released
  // ones still mapped. Counted against the capacity with bytes_allocated().
  std::uint64_t physical_bytes() const;
  // Bytes of address space reserved and not yet freed.
  std::uint64_t reserved_address_bytes() const;
  // Whether all of [address, address + bytes) is mapped with access set
  // (false for an empty range). Plain allocations are not virtual memory:
  // this answers false for them.
  bool IsAccessible(DeviceAddress address, std::uint64_t bytes) const;

  // --- Copies between device and host memory -------------------------------
  // Host-backed memory only (capabilities.host_copy): fake memory has no
  // bytes to copy, so there both calls are Unimplemented naming the mode
  // (counted as failed calls). The device range must lie wholly inside one
  // live plain allocation, one live pool segment, or mapped memory with
  // access set (what Use accepts); a range inside a reservation that is not
  // all accessible is FailedPrecondition, any other range InvalidArgument,
  // both naming the address. Then a memcpy. 0 bytes does nothing; a null
  // host pointer with bytes > 0 is InvalidArgument. The copy does not
  // complete queued work (the caller has waited for the streams that use
  // the memory). During a capture a copy is a host wait: a capture
  // violation, like SynchronizeEvent.
  absl::Status CopyToHost(void* host, DeviceAddress source,
                          std::uint64_t bytes) override;
  absl::Status CopyFromHost(DeviceAddress destination, const void* host,
                            std::uint64_t bytes) override;

  // --- Page-locked host memory (SimOptions::host_memory) -------------------
  // HostAllocate: at least `bytes` (positive, else InvalidArgument), rounded
  // up to whole host pages, page-aligned; beyond SimOptions::host_memory_bytes
  // left is ResourceExhausted with the numbers. Host-backed memory: a real
  // anonymous mapping the caller may read and write. Fake memory: an address
  // of a range of its own (above every device window), never dereferenced,
  // never reused. HostFree: what HostAllocate returned, else InvalidArgument;
  // like cudaFreeHost it synchronizes the device (all queued work completes,
  // and the host waits for it: part of the call's cost, as for Free). Work
  // may Use pinned memory (the device copies to and from it); copies from or
  // to it run at the link's rate, others at the pageable rate.
  absl::StatusOr<void*> HostAllocate(std::uint64_t bytes) override;
  absl::Status HostFree(void* ptr) override;
  // Pinned host bytes (page-rounded) live now, the most ever live at once,
  // and how many allocations hold them.
  std::uint64_t host_bytes_allocated() const;
  std::uint64_t peak_host_bytes_allocated() const;
  std::uint64_t live_host_allocations() const;
  // Copies (CopyToHost, CopyFromHost) whose host range was pageable memory
  // (not all inside one live pinned allocation), and their bytes.
  std::uint64_t pageable_copies() const;
  std::uint64_t pageable_copy_bytes() const;

  // --- Completion counters (SimOptions::completion_counters) ----------------
  // backends/sim/counters.h says how they are modeled. A block is real host
  // memory the simulator owns, in fake and host-backed mode alike, so the
  // caller reads `values` with acquire loads and no call, as on a device.
  //   - WriteCounter captures the work queued on `stream` so far (as
  //     RecordEvent does) and the value lands, a release store, once that
  //     work has completed: at once on a stream with no pending work;
  //     otherwise at the CompleteStream, CompleteAll, host wait (Free,
  //     HostFree, SynchronizeEvent, DestroyCounters) or, on the modeled clock,
  //     the AdvanceClock that completes it. Nothing else lands a write (a
  //     read is not a call). Writes due together land in queue order (manual
  //     clock) or in order of their ends (modeled clock), so a counter shows
  //     the last of them.
  //   - WaitCounter orders the work queued on `stream` from now on after the
  //     work captured by the first queued write of a value >= `value` to the
  //     counter, exactly as StreamWaitEvent orders it after an event recorded
  //     there: the hazard detector sees the dependency, the manual clock's
  //     CompleteStream completes it first, the modeled clock delays the
  //     stream to its end. A counter holding such a value already needs no
  //     ordering (the wait is judged when it is queued). No such write
  //     queued: FailedPrecondition (on a device the stream would wait
  //     forever), nothing changes.
  //   - DestroyCounters synchronizes the device like HostFree (all queued
  //     work completes, every queued write lands; a host wait in the cost),
  //     then frees the block.
  //   - Bad input (backends/common/counters.h) is InvalidArgument naming it
  //     and changes nothing; a destroyed stream is FailedPrecondition as for
  //     RecordEvent; writing or waiting on a capturing stream is a capture
  //     violation, DestroyCounters during a capture a host wait, and
  //     CreateCounters one of the calls that need kRelaxed.
  // Counted, costed (SimOptions::cost_ns) and fault-injected like every call.
  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count) override;
  absl::Status DestroyCounters(CounterHandle handle) override;
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream) override;
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream stream) override;
  // Blocks created and not destroyed, and writes queued and not landed.
  std::uint64_t live_counter_blocks() const;
  std::uint64_t pending_counter_writes() const;

  // --- Address ranges (with capabilities.ipc_handles) ----------------------
  // The live plain allocation, or the range OpenIpcHandle opened, holding
  // `address`: its start and size (the opened range's size is the
  // exporter's allocation's). Anything else is InvalidArgument naming the
  // address. A lookup: no call the ledger counts, costs or fails.
  absl::StatusOr<AddressRange> GetAddressRange(DeviceAddress address) override;

  // --- Device work and the hazard detector ---------------------------------
  // Streams are created on first mention; every handle is an ordinary,
  // independent stream, 0 (the default stream) included: the legacy default
  // stream's implicit synchronization with other streams is not modeled.
  // Each piece of work is ordered after the earlier pieces of its stream and
  // after what the stream waited for through StreamWaitEvent (transitively:
  // an event carries what its recording stream waited for). Completed work is
  // forgotten, so memory stays bounded by the pending work.
  //
  // Use queues work on `stream` that reads and writes [address, address +
  // bytes), taking `duration_ns` (0: SimOptions::work_ns) on the modeled clock.
  // When work queued earlier on another stream touches an overlapping range,
  // has not completed, and `stream` was not made to wait for it (through
  // events, transitively), a hazard is counted and logged. This is how tests
  // and the replay tool "use" memory an allocator handed out. A range that
  // is not all inside one live plain allocation, one live pool segment,
  // mapped memory with access set (IsAccessible), or one live pinned host
  // allocation (HostAllocate: the device copies to and from it, so work may
  // use it) is an access violation:
  // counted and logged apart from the hazards (kInaccessible). While
  // `stream` captures (BeginCapture), Use records the piece into the capture
  // instead: nothing is queued or checked until the graph is launched.
  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns = 0);
  // Manual clock: completes the work queued so far on `stream`, and first the
  // work it waits for. CompleteAll completes everything. Modeled clock: moves
  // the clock to when that work is done. Neither is a host synchronization
  // point for the pool (SynchronizeEvent and Free are).
  void CompleteStream(Stream stream);
  void CompleteAll();
  // The program's own ordering between two of its streams, as an event
  // recorded on `other` and waited for by `waiter` would make it: work queued
  // on `waiter` from now on starts after the work queued so far on `other`.
  // Not a backend call (not counted, never fails): it stands for what the
  // program does, not the allocator.
  void OrderStreams(Stream waiter, Stream other);
  // The program destroys `stream` (cudaStreamDestroy): its queued work goes
  // on, but a later RecordEvent, StreamWaitEvent, PoolAllocate or PoolFree
  // naming it fails with FailedPrecondition and is counted
  // (calls_on_destroyed_streams). A later Use of the handle, or OrderStreams
  // naming it as the waiter, makes it a new stream. Not a backend call.
  void DestroyStream(Stream stream);
  std::uint64_t calls_on_destroyed_streams() const;
  // Streams the simulator keeps state for: each stream mentioned and not
  // destroyed, and each destroyed one until its work, and the work it waits
  // for, has completed. Then it is forgotten (at DestroyStream, or at the next
  // CompleteStream, CompleteAll, host synchronization or pending_work), so a
  // program that creates and destroys a stream per request keeps this small
  // and CompleteAll's cost does not grow with the streams ever made. Events
  // and pool frees on a forgotten stream keep their meaning, and a new stream
  // with its handle is ordered after none of its work.
  std::uint64_t tracked_streams() const;
  // Modeled clock: moves host time forward (the manual clock keeps now_ns
  // too, moved only by AdvanceClock, and ignores it).
  void AdvanceClock(std::uint64_t ns);
  std::uint64_t now_ns() const;
  // Pieces of work queued and not yet complete.
  std::uint64_t pending_work() const;
  // Hazards counted: at most one per Use and other stream
  // (kStreamOrder), and one per Unmap and stream whose incomplete work uses
  // the range (kUnmapInUse).
  std::uint64_t hazards() const;
  // The first hazards found (at most 64), for messages.
  std::vector<SimHazard> hazard_log() const;
  // Uses of inaccessible memory (kInaccessible): at most one per Use.
  std::uint64_t access_violations() const;
  // The first of them (at most 64), for messages.
  std::vector<SimHazard> access_violation_log() const;
  // Events created and not destroyed.
  std::uint64_t live_events() const;

  // --- Graph capture (SimOptions::graph_capture) ----------------------------
  // Whether `stream` is capturing (an invalidated capture still is, until its
  // EndCapture, as cuStreamIsCapturing answers for
  // CU_STREAM_CAPTURE_STATUS_INVALIDATED). A counted call.
  absl::StatusOr<bool> IsCapturing(Stream stream) override;
  // Sets the calling thread's capture mode and returns the previous one
  // (kGlobal until a thread sets one). A counted call. The mode is per
  // calling thread, as in CUDA, and kept per backend, so that two simulated
  // devices (or two tests) do not see each other's mode.
  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode) override;
  //
  // The program's side of a capture: not backend calls (not counted, never
  // fault-injected). Without the capability each is Unimplemented.
  //
  // cudaStreamBeginCapture in the global mode: from now on, Use on `stream`
  // records its pieces (address, bytes, duration) into the capture instead
  // of queuing them (no hazard or access check then). FailedPrecondition
  // when `stream` is already capturing.
  absl::Status BeginCapture(Stream stream);
  // Ends the capture of `stream` (it stops capturing either way) and returns
  // a graph holding the captured pieces, in order. FailedPrecondition when
  // `stream` is not capturing, or when a violation invalidated the capture
  // (the message names the first one).
  absl::StatusOr<SimGraph> EndCapture(Stream stream);
  // Queues the graph's pieces on `stream`, in order, as Use calls: hazards
  // and access are checked at each launch, against the device as it is
  // then (memory freed or unmapped after the capture is an access
  // violation). An unknown graph is InvalidArgument; a capturing `stream`
  // is FailedPrecondition.
  absl::Status LaunchGraph(SimGraph graph, Stream stream);
  // InvalidArgument for an unknown graph.
  absl::Status DestroyGraph(SimGraph graph);
  //
  // Capture violations (cudaErrorStreamCaptureUnsupported, which also turns
  // the capture into cudaErrorStreamCaptureInvalidated), checked only while
  // at least one stream captures:
  //   - RecordEvent on a capturing stream;
  //   - StreamWaitEvent whose waiting stream is capturing;
  //   - WriteCounter and WaitCounter on a capturing stream (not a CUDA error:
  //     CUDA would capture the write into the graph, where it would not say
  //     when the work queued so far completed);
  //   - a host wait: SynchronizeEvent (any event), Free, HostFree and
  //     DestroyCounters (they synchronize the device, like cudaFree and
  //     cudaFreeHost), CopyToHost and CopyFromHost (synchronous copies);
  //   - a call that allocates, maps or frees device memory (Allocate,
  //     ReserveAddress, FreeAddress, CreatePhysical, ReleasePhysical, Map,
  //     Unmap, SetAccess, PoolAllocate, PoolFree, PoolTrim, HostAllocate,
  //     CreateCounters) from a thread whose capture mode is not kRelaxed.
  // QueryEvent is allowed (CUDA allows querying events not recorded in the
  // capture, and recording one in it is already a violation). Each violation
  // is counted and logged, the call fails with FailedPrecondition naming the
  // call, the capturing stream and the rule, and changes nothing but the
  // counters (as any failing call), and every capture underway is
  // invalidated.
  std::uint64_t capture_violations() const;
  // The first violations (at most 64), human readable: the call, the
  // stream, the rule.
  std::vector<std::string> capture_violation_log() const;

  // Fault injection: the k-th call of `op` from now on (k = 1: the next one; 0
  // clears the pending fault; an OK status is turned into Internal)
  // fails with `status` instead of doing its work. One pending fault per op;
  // a new one replaces it. The failed call is counted but costs nothing.
  void FailNthCall(SimOp op, std::uint64_t k,
                   absl::Status status = absl::ResourceExhaustedError(
                       "simulated fault injected by the test"));
  void ClearFaults();

  // Counters since creation (or the last ResetCounters).
  std::uint64_t calls(SimOp op) const;
  std::uint64_t failed_calls(SimOp op) const;
  // The modeled cost of the successful calls (and their host waits).
  std::uint64_t modeled_ns() const;
  // What one successful call of `op` handling `bytes` adds to modeled_ns(),
  // host waits aside: the resolved cost model.
  std::uint64_t CallCostNs(SimOp op, std::uint64_t bytes) const;
  void ResetCounters();

  // Device memory currently handed out, and how many allocations hold it.
  std::uint64_t bytes_allocated() const;
  std::uint64_t live_allocations() const;
  // Everything the device's memory holds for its callers: plain
  // allocations, the stream-ordered pool's reserve and physical memory
  // (total minus what FreeBytes answers, without a call).
  std::uint64_t bytes_held() const;

 private:
  class Impl;
  explicit SimBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpualloc

#endif  // GPUALLOC_SIM_BACKEND_H_
