// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/backend.h: the boundary between the vendor-neutral core and a
// device.
//
// A Backend translates a handful of device operations (physical allocate and
// free, virtual memory, streams and events, stream-ordered pools) into
// vendor calls. It sits on the cold path: the allocator calls it only to grow,
// shrink or synchronize, so a virtual call per operation costs nothing that
// matters.
//
// Every optional operation is announced by a capability flag in DeviceInfo, so
// a backend states what it supports instead of failing in surprising ways.
//
// Thread safety: every method may be called from any thread; implementations
// synchronize internally.
#ifndef GPUALLOC_BACKEND_H_
#define GPUALLOC_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/arch/profiles.h"

namespace gpualloc {

// A device address. Opaque to the host: never dereferenced by the core.
using DeviceAddress = std::uint64_t;

// A stream names an ordered queue of device work. Any opaque handle value names
// a stream (the way a runtime passes its cudaStream_t); 0 is the default
// stream. A strong type so that it cannot be confused with a size or an
// alignment.
struct Stream {
  std::uintptr_t handle = 0;

  constexpr Stream() = default;
  constexpr explicit Stream(std::uintptr_t h) : handle(h) {}
  static Stream FromHandle(const void* h) {
    return Stream(reinterpret_cast<std::uintptr_t>(h));
  }
  friend constexpr bool operator==(Stream a, Stream b) {
    return a.handle == b.handle;
  }
};

// An event names a point in a stream's work. Opaque; 0 is never an event.
using EventHandle = std::uint64_t;

// Physical device memory made for virtual-memory mapping
// (CUmemGenericAllocationHandle / hipMemGenericAllocationHandle_t). Opaque; 0
// is never a handle.
using PhysicalHandle = std::uint64_t;

// Reuse rules of a stream-ordered pool (CUDA's cudaMemPoolReuse* attributes;
// HIP mirrors them). Memory freed on stream A may be handed to stream B when:
struct PoolReuse {
  // B already waits, through events, for the work A queued before the free.
  bool follow_event_dependencies = true;
  // The freeing work has completed (the pool looks when it allocates).
  bool opportunistic = true;
  // The pool itself makes B wait for the free (an inserted dependency).
  bool internal_dependencies = true;
};

struct PoolOptions {
  // Unused memory the pool keeps at synchronization points instead of
  // returning it to the device (cudaMemPoolAttrReleaseThreshold).
  std::uint64_t release_threshold = 0;
  PoolReuse reuse;
};

struct PoolUsage {
  std::uint64_t reserved = 0;  // memory the pool holds from the device
  std::uint64_t used = 0;      // memory handed out and not yet freed
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_used = 0;
};

// What a backend can do beyond physical allocate/free.
struct Capabilities {
  bool virtual_memory = false;  // reserve/map/unmap address ranges
  bool streams = false;         // events on streams (stream-ordered frees)
  bool stream_ordered_pools = false;  // the vendor's async pools
  bool host_accessible = false;  // addresses can be read/written by the host
  // Streams can capture work into graphs (cuStreamBeginCapture), and the
  // backend answers IsCapturing and ExchangeCaptureMode.
  bool graph_capture = false;
  // The backend copies between device memory and host memory: CopyToHost /
  // CopyFromHost.
  bool host_copy = false;
  // What Allocate returned can be opened by another process on the same
  // machine (cuIpcGetMemHandle / hipIpcGetMemHandle): GetIpcHandle,
  // OpenIpcHandle, CloseIpcHandle.
  bool ipc_handles = false;
  // Physical memory can leave the process as a POSIX file descriptor
  // (cuMemExportToShareableHandle with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  // / hipMemExportToShareableHandle) and be imported by another process:
  // ExportMapping, ImportPhysical. Requires virtual_memory.
  bool shareable_handles = false;
  // Page-locked host memory the device copies to and from at full link speed
  // (cuMemHostAlloc / hipHostMalloc): HostAllocate, HostFree.
  bool host_memory = false;
  // Streams write 64-bit values into host-visible memory once their earlier
  // work has completed, and wait for such a value (cuStreamWriteValue64 /
  // cuStreamWaitValue64 on mapped page-locked memory; hipStreamWriteValue64 /
  // hipStreamWaitValue64): CreateCounters, DestroyCounters, WriteCounter,
  // WaitCounter. Requires streams.
  bool completion_counters = false;
};

// An IPC handle of one plain allocation (CUipcMemHandle / hipIpcMemHandle_t):
// 64 opaque bytes that another process on the same machine opens.
struct IpcHandle {
  static constexpr std::size_t kBytes = 64;
  std::uint8_t bytes[kBytes] = {};
};

// A block of completion counters (opaque; 0 is never a handle).
using CounterHandle = std::uint64_t;
struct CounterBlock {
  CounterHandle handle = 0;
  // `count` 64-bit counters in host memory that the device writes; the host
  // reads them with acquire loads (std::atomic_ref<const std::uint64_t> or
  // __atomic_load_n(..., __ATOMIC_ACQUIRE)), no call. All start at 0.
  const std::uint64_t* values = nullptr;
  std::size_t count = 0;
};

// A thread's stream-capture mode (CUstreamCaptureMode / hipStreamCaptureMode):
// which calls the thread may make while some stream captures work into a
// graph. In kGlobal (the default) and kThreadLocal, a call that may
// synchronize or allocate device memory invalidates the capture; kRelaxed
// allows them, which is what an allocator needs to grow during a capture.
enum class CaptureMode : std::uint8_t { kGlobal, kThreadLocal, kRelaxed };

// Facts about one device, as the backend reports them.
struct DeviceInfo {
  std::string backend;  // "sim", "cuda", "hip"
  Vendor vendor = Vendor::kUnknown;
  std::string name;     // marketing name, e.g. "NVIDIA H200"
  std::string arch_id;  // e.g. "sm_90", "gfx942"
  // The architecture profile (gpualloc/arch/profiles.h) the backend matched the
  // device to, and why (e.g. by name, by arch id and memory, generic fallback);
  // the allocator tunes by it when Options.arch is "auto". Empty: the allocator
  // finds one from vendor, arch_id and total_bytes.
  std::string profile;
  std::string profile_reason;
  int ordinal = 0;
  std::uint64_t total_bytes = 0;
  // Virtual-memory granularity: minimum and recommended (cuMemGetAllocation-
  // Granularity); growth happens in multiples of the recommended one.
  std::uint64_t min_granularity = 0;
  std::uint64_t recommended_granularity = 0;
  // Alignment guaranteed for plain allocations (256 B on NVIDIA, 4 KiB on AMD).
  std::uint64_t allocation_alignment = 0;
  std::vector<std::uint64_t>
      page_sizes;  // TLB page / fragment sizes, ascending
  Capabilities capabilities;
  std::string driver_version;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Facts that do not change while the backend lives.
  virtual const DeviceInfo& info() const = 0;

  // Bytes the device could still hand out now (cuMemGetInfo's free).
  virtual absl::StatusOr<std::uint64_t> FreeBytes() = 0;

  // Physical allocation (cuMemAlloc / hipMalloc): at least `bytes`, aligned to
  // info().allocation_alignment. Out of device memory is ResourceExhausted.
  virtual absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) = 0;
  // Frees what Allocate returned; anything else is InvalidArgument.
  virtual absl::Status Free(DeviceAddress address) = 0;

  // --- Streams and events (capabilities.streams) ---------------------------
  // The CUDA driver's event calls, one for one (cuEventCreate with timing
  // disabled, cuEventRecord, cuEventQuery, cuStreamWaitEvent,
  // cuEventSynchronize, cuEventDestroy). An event is created once and recorded
  // many times; each record replaces what it waits for. The allocator keeps a
  // small pool of events and calls these only when memory moves between
  // streams. Without the capability every call returns Unimplemented naming
  // the backend.
  virtual absl::StatusOr<EventHandle> CreateEvent();
  virtual absl::Status DestroyEvent(EventHandle event);
  // Captures the work queued on `stream` so far.
  virtual absl::Status RecordEvent(EventHandle event, Stream stream);
  // true when the captured work has completed (an event never recorded counts
  // as complete, as in CUDA).
  virtual absl::StatusOr<bool> QueryEvent(EventHandle event);
  // Work queued on `stream` from now on starts after the captured work.
  virtual absl::Status StreamWaitEvent(Stream stream, EventHandle event);
  // Blocks the host until the captured work has completed.
  virtual absl::Status SynchronizeEvent(EventHandle event);

  // --- Graph capture (capabilities.graph_capture) ---------------------------
  // Whether `stream` is capturing work into a graph now (cuStreamIsCapturing
  // / hipStreamIsCapturing): work queued on it is recorded, not run, and the
  // allocator must neither record, query nor wait for events on it.
  virtual absl::StatusOr<bool> IsCapturing(Stream stream);
  // Sets the calling thread's capture mode and returns the previous one
  // (cuThreadExchangeStreamCaptureMode / hipThreadExchangeStreamCaptureMode).
  // The allocator switches to kRelaxed around the device calls it makes while
  // a capture is underway, and back afterwards, as PyTorch does around
  // cudaMalloc.
  virtual absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode);

  // --- The device's stream-ordered pool (capabilities.stream_ordered_pools) -
  // cuMemAllocFromPoolAsync / cuMemFreeAsync on one pool per backend, the
  // way the async mode uses them. ConfigurePool comes first.
  virtual absl::Status ConfigurePool(const PoolOptions& options);
  // Memory usable by work queued on `stream` after this call. Out of memory is
  // ResourceExhausted (never a success with no address).
  virtual absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                                     Stream stream);
  // Returns `address` to the pool once the work queued on `stream` completes.
  virtual absl::Status PoolFree(DeviceAddress address, Stream stream);
  // Releases unused pool memory down to `keep_bytes` (cuMemPoolTrimTo).
  virtual absl::Status PoolTrim(std::uint64_t keep_bytes);
  virtual absl::StatusOr<PoolUsage> GetPoolUsage();

  // --- Virtual memory (capabilities.virtual_memory) -------------------------
  // The CUDA driver's cuMem* calls, one for one; HIP's hipMem* mirror them.
  // Every backend checks CUDA's rules before any vendor call and answers
  // InvalidArgument naming the rule broken:
  //   - sizes, addresses and alignments are multiples of
  //     info().min_granularity (the allocator maps in multiples of the
  //     recommended one);
  //   - a mapping starts at offset 0 of its physical handle and covers all of
  //     it; Unmap names whole mappings exactly (no partial unmap), and the
  //     range it names holds nothing unmapped;
  //   - an address range is freed only once nothing is mapped in it.
  // Out of physical memory is ResourceExhausted; out of address space too.
  //
  // Reserves `bytes` of address space aligned to `alignment` (0: the
  // granularity) with nothing behind it (cuMemAddressReserve).
  virtual absl::StatusOr<DeviceAddress> ReserveAddress(std::uint64_t bytes,
                                                       std::uint64_t alignment);
  // Gives back a whole reservation (cuMemAddressFree).
  virtual absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes);
  // Physical memory of `bytes` on this device (cuMemCreate); counts against
  // the device's capacity like Allocate.
  virtual absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes);
  // Drops the handle (cuMemRelease). Memory still mapped stays usable and
  // returns to the device when its last mapping goes, as in CUDA.
  virtual absl::Status ReleasePhysical(PhysicalHandle handle);
  // Maps all of `handle` (offset 0) at `address` inside a reservation
  // (cuMemMap). The range is not accessible until SetAccess.
  virtual absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                           PhysicalHandle handle);
  // Unmaps whole mappings covering exactly [address, address + bytes)
  // (cuMemUnmap).
  virtual absl::Status Unmap(DeviceAddress address, std::uint64_t bytes);
  // Makes mapped [address, address + bytes), which may span several
  // mappings, readable and writable by this device (cuMemSetAccess).
  virtual absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes);

  // --- Copies between device and host memory (capabilities.host_copy) ------
  // cuMemcpyDtoH / cuMemcpyHtoD (hipMemcpy): what the allocator needs to
  // keep the content of memory whose physical pages it gives back for a while
  // (Sleep with a backup) and to restore it afterwards. Synchronous: the call
  // returns once the copy is done, and the copy is ordered after all work
  // queued before it on the device; the caller has already waited for the
  // streams that use the memory. The device range must lie in memory the
  // backend handed out (Allocate, PoolAllocate) or mapped and made
  // accessible (Map + SetAccess); anything else is an error (InvalidArgument
  // or FailedPrecondition naming the address, or the vendor's error
  // translated). 0 bytes is OK and does nothing; a null host pointer with
  // bytes > 0 is InvalidArgument. Without the capability both return
  // Unimplemented naming the backend.
  //
  // Copies [source, source + bytes) of device memory to `host`.
  virtual absl::Status CopyToHost(void* host, DeviceAddress source,
                                  std::uint64_t bytes);
  // Copies `bytes` from `host` to [destination, destination + bytes).
  virtual absl::Status CopyFromHost(DeviceAddress destination, const void* host,
                                    std::uint64_t bytes);

  // --- Sharing memory with other processes ----------------------------------
  // capabilities.ipc_handles. GetIpcHandle names `base`, the start of what
  // Allocate returned (anything else is InvalidArgument); the handle stays
  // valid until Free(base). OpenIpcHandle, in another process (CUDA refuses
  // the process that made the handle, and so does every backend), maps the
  // whole allocation and returns its start there; CloseIpcHandle unmaps what
  // OpenIpcHandle returned. Free of the exporter's allocation while another
  // process has it open is the caller's hazard, as in CUDA.
  virtual absl::StatusOr<IpcHandle> GetIpcHandle(DeviceAddress base);
  virtual absl::StatusOr<DeviceAddress> OpenIpcHandle(const IpcHandle& handle);
  virtual absl::Status CloseIpcHandle(DeviceAddress address);
  // capabilities.shareable_handles. ExportMapping returns a new POSIX file
  // descriptor, owned by the caller, for the physical memory mapped at
  // `address`, the start of one whole mapping (Map): cuMemRetainAllocation-
  // Handle, cuMemExportToShareableHandle, cuMemRelease. Works after the
  // handle itself was released (the mapping keeps the memory). ImportPhysical
  // turns such a descriptor, received from any process, into a handle of
  // this device covering `bytes` (cuMemImportFromShareableHandle), to be
  // mapped (Map, SetAccess) and released (ReleasePhysical) like one from
  // CreatePhysical; it does not take ownership of `fd`. Imported memory does
  // not count against this device's capacity: the exporter's does.
  virtual absl::StatusOr<int> ExportMapping(DeviceAddress address);
  virtual absl::StatusOr<PhysicalHandle> ImportPhysical(int fd,
                                                        std::uint64_t bytes);

  // --- Page-locked host memory (capabilities.host_memory) -------------------
  // At least `bytes` of host memory, page-aligned, readable and writable by
  // the host and copyable at link speed by every stream of this device
  // (cuMemHostAlloc with CU_MEMHOSTALLOC_PORTABLE / hipHostMalloc). Slow and,
  // on CUDA, synchronizing: a caching pool sits on top (CreateHostAllocator).
  // Out of host memory is ResourceExhausted. HostFree frees what
  // HostAllocate returned; anything else is InvalidArgument.
  virtual absl::StatusOr<void*> HostAllocate(std::uint64_t bytes);
  virtual absl::Status HostFree(void* ptr);

  // --- Completion counters (capabilities.completion_counters) ---------------
  // How the host learns that a stream's work has completed without a query
  // call: the stream writes a value into host memory once its earlier work is
  // done, and the host reads it with a plain (acquire) load. Events stay the
  // fallback where a device lacks the capability.
  //
  // Bad input changes nothing and is InvalidArgument naming what was wrong: a
  // handle CreateCounters did not return (or one destroyed already), an index
  // >= the block's count, a count of 0 or above 65536, and a value of 2^63 or
  // more (CUDA's wait compares (int64_t)(*addr - value) >= 0 and ROCm's
  // compares signed values: only values below 2^63 compare as unsigned
  // numbers on every device). The values are the caller's: the backend
  // assumes no order between the values written to a counter.
  //
  // `count` counters, all 0, in host memory the device can write (mapped
  // page-locked memory on a GPU). `values` stays valid until DestroyCounters.
  virtual absl::StatusOr<CounterBlock> CreateCounters(std::size_t count);
  // Frees the block. Call it once no write into the block is pending (after a
  // host synchronization): cuMemFreeHost and hipHostFree wait for the device
  // in practice, and the simulator models that, but no driver promises it.
  virtual absl::Status DestroyCounters(CounterHandle handle);
  // Queues on `stream` a write of `value` into counter `index`: it happens once
  // the work queued on `stream` before it has completed (the stream's order).
  virtual absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                                    std::uint64_t value, Stream stream);
  // Queues on `stream` a wait: work queued on `stream` after it starts only
  // once counter `index` holds a value >= `value`. REQUIRES that a
  // WriteCounter of a value >= `value` to that counter was already queued
  // (the allocator never waits for a value nobody will write); the simulator
  // refuses otherwise with FailedPrecondition, unless the counter already
  // holds such a value (then the wait orders nothing).
  virtual absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                                   std::uint64_t value, Stream stream);

  // --- Address ranges (with capabilities.ipc_handles) -----------------------
  // The allocation holding `address` (cuMemGetAddressRange /
  // hipMemGetAddressRange): its start and size, for any address inside what
  // Allocate returned or what OpenIpcHandle opened (the allocation as this
  // process sees it). Anything else is InvalidArgument. An importer checks
  // with it that the block a description names lies inside the allocation
  // its IPC handle opened. Every backend with ipc_handles answers it;
  // without the capability (or an override) it is Unimplemented naming the
  // backend.
  struct AddressRange {
    DeviceAddress base = 0;
    std::uint64_t bytes = 0;
  };
  virtual absl::StatusOr<AddressRange> GetAddressRange(DeviceAddress address);

 protected:
  // Unimplemented naming this backend and the missing capability.
  absl::Status NotSupported(absl::string_view operation,
                            absl::string_view capability) const;
};

}  // namespace gpualloc

#endif  // GPUALLOC_BACKEND_H_
