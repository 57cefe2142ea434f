// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/host_allocator.h: a caching pool of page-locked (pinned) host
// memory, for the copies between host and device that offload and prefetch
// make (PyTorch's CachingHostAllocator).
//
// cuMemHostAlloc / hipHostMalloc are slow (tens to hundreds of microseconds
// plus the cost of pinning every page) and freeing synchronizes the device,
// so the pool keeps what it got: the BFC allocator of gpualloc/core/
// allocator.h (best fit with coalescing) runs over the device backend's
// HostAllocate / HostFree, in regions of at least 2 MiB whose sizes double
// (docs/DESIGN.md, "Pinned host memory").
//
// Streams: host memory is allocated for the host, not for a stream. Allocate
// and Deallocate take the default Stream() (or kHostStream, the same thing);
// RecordStream(ptr, s) declares that device work queued on stream `s` (the
// copy that reads or writes the buffer) uses it, PyTorch's record_stream.
// Deallocate records one event on each recorded stream (the work queued so
// far) and holds the block; a block with no recorded stream is free at once.
// Each Allocate, Trim and GetStats asks the device, without waiting, which
// held blocks' events have completed and frees those; a block whose events
// are not complete is simply not reused yet, and the pool grows instead. The
// host waits only at out of memory, when blocks are still held: it waits for
// their events (Stats::host_waits) and tries once more. Deallocate(ptr, s)
// with another stream records `s` too. A held block counts in bytes_in_use
// until it is freed. HostFree (a Trim, a garbage collection at the limit,
// the pool's destruction) synchronizes the device on CUDA.
//
// The limit: Options::memory_limit (the configuration's host_memory_limit),
// by default the machine's physical memory (DefaultHostMemoryLimit). Of the
// other Options the pool takes name, garbage_collection, min_block_size,
// max_internal_fragmentation, size_divisions, history and
// growth_granularity (raised to at least 2 MiB); the rest is fixed: mode
// bfc, no preallocation, doubling growth, separate regions, no front cache.
// Another mode or expandable kOn is InvalidArgument.
//
// Thread safety: every method is thread-safe (the BFC allocator's lock).
#ifndef GPUALLOC_HOST_ALLOCATOR_H_
#define GPUALLOC_HOST_ALLOCATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

// The stream the pool's own allocations and frees name: the host. No event
// is ever recorded on it (the host's use of a buffer is over when it calls
// the pool). No runtime hands out this handle value (not a pointer any
// process maps, and the top bit clear, as gpualloc's streams need).
inline constexpr Stream kHostStream{~std::uintptr_t{0} >> 1};

// Each region the pool takes is at least this big (growth doubles from it).
inline constexpr std::uint64_t kHostRegionBytes = std::uint64_t{2} << 20;

// The machine's physical memory (sysconf: _SC_PHYS_PAGES x _SC_PAGESIZE),
// rounded down to kHostRegionBytes: the pool's limit when
// Options::memory_limit is 0.
std::uint64_t DefaultHostMemoryLimit();

// A pinned host memory pool over `backend`'s HostAllocate / HostFree. A
// backend without capabilities.host_memory (or without capabilities.streams,
// which the record-stream rule needs) is FailedPrecondition naming the
// capability; a null backend and inconsistent options are InvalidArgument.
// The backend is not called until the first Allocate.
absl::StatusOr<std::unique_ptr<Allocator>> CreateHostAllocator(
    const Options& options, std::shared_ptr<Backend> backend);

}  // namespace gpualloc

#endif  // GPUALLOC_HOST_ALLOCATOR_H_
