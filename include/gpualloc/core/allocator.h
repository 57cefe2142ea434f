// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/allocator.h: the public C++ allocator.
//
// An Allocator serves device memory for one device out of large regions that it
// obtains from a Backend, with best-fit-with-coalescing (BFC): free chunks live
// in size-class bins, the smallest fitting chunk (lowest address on ties) is
// split to size, and freed chunks merge with free neighbours.
//
// Growth follows JAX: with `preallocate`, the first Allocate reserves
// `memory_fraction` of the device's TOTAL memory (or `memory_limit`) as one
// region; without it, regions are added on demand, in multiples of the
// architecture's recommended granularity, up to the same limit. On out of
// memory fully free regions are returned to the device and the request is
// retried (garbage collection); Trim() does the same on demand.
//
// Errors are absl::Status values; nothing throws. A rejected call changes
// nothing: every live allocation and the allocator's state stay as they were.
//
// Thread safety: every method is thread-safe. One lock per allocator, held for
// the duration of a call (never while an out-of-memory handler runs).
#ifndef GPUALLOC_ALLOCATOR_H_
#define GPUALLOC_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/backend.h"

namespace gpualloc {

enum class GrowthPolicy {
  // Each new region is the request rounded up to the growth granularity:
  // smallest footprint, more regions.
  kExact,
  // Region sizes double from one granule (TensorFlow's BFC); with expandable
  // regions, each growth maps at least what is mapped already. Fewer backend
  // calls, more reserved memory.
  kDoubling,
};

// How requests reach the device (GPUALLOC_ALLOCATOR; JAX's
// XLA_PYTHON_CLIENT_ALLOCATOR).
enum class AllocatorMode {
  // Best fit with coalescing over large regions (the default).
  kBfc,
  // Every Allocate goes to the backend and every Deallocate returns the
  // memory at once: slow (each call may synchronize the device), minimal
  // footprint, for debugging.
  kPlatform,
  // The backend's stream-ordered pool (cuMemAllocFromPoolAsync), release
  // threshold = the limit. Needs capabilities.stream_ordered_pools.
  kAsync,
};
absl::string_view AllocatorModeName(AllocatorMode mode);

// What BFC does with free memory whose last use was queued on another stream
// and may still be running (docs/DESIGN.md, "Cross-stream policy"). Waits are
// always on the device (cuStreamWaitEvent): the host waits only when nothing
// else can serve a request.
enum class CrossStreamReuse {
  // Hand it out only once the freeing work is known complete; until then
  // look for other memory, grow, and out of memory wait on the host.
  kWhenComplete,
  // When memory is short (nothing else fits and growing cannot help), hand
  // it out at once and make the new stream wait for the freeing work. With
  // memory to spare no stream waits.
  kStreamWait,
  // The default. Memory the stream may use at once first (best fit among
  // it); when none fits, make the stream wait for the best fit's freeing
  // work rather than grow (the driver's pool does the same with its internal
  // dependencies, and RMM's pool with cudaStreamWaitEvent).
  kBeforeGrowth,
  // The best fit, whichever stream freed it, with a wait where its freeing
  // work is not known complete: the memory a single stream would need, laid
  // out the same way in every repetition of a step whatever the device's
  // timing, for a wait at most cross-stream reuses of fresh memory.
  kBestFit,
};

// A setting that can be forced on, forced off, or left to the device.
enum class Tristate { kAuto, kOn, kOff };

// Options::front_cache's default: off. Measured (docs/MEASUREMENTS.md,
// "Front caches"): with threads on streams of their own and repeated sizes it
// multiplies throughput (2 threads: 1.97x one thread, against 0.21x without),
// but one thread replays the bundled traces 1.3x to 1.5x slower, and a cache
// changes where later blocks land, so the peak reserved (-10% to +13% on the
// generated multi-stream traces at 4 MiB); memory and one thread are judged
// first, so it is opt-in.
inline constexpr std::uint64_t kDefaultFrontCache = 0;

struct Options {
  AllocatorMode mode = AllocatorMode::kBfc;
  // Reserve the whole limit as one region on the first Allocate (JAX default).
  bool preallocate = true;
  // Fraction of the device's TOTAL memory the allocator may reserve, in (0, 1].
  double memory_fraction = 0.75;
  // When non-zero, the limit in bytes; overrides memory_fraction.
  std::uint64_t memory_limit = 0;
  // On out of memory, return fully free regions to the device and retry.
  bool garbage_collection = true;
  // Growing on demand (preallocate = false): when adding memory would pass
  // the limit, first return free memory that could not serve the request
  // (fully free regions, or free granules with expandable regions) until it
  // fits. Below the limit nothing is returned: a repeated step then makes no
  // backend call.
  bool trim_before_growth = true;
  // PyTorch's garbage_collection_threshold (bfc mode): 0 (off) or a fraction
  // T in (0, 1). With T, the give-back above starts before a growth would
  // pass T x the limit instead of the limit: just enough free memory goes
  // back first. Needs trim_before_growth.
  double gc_threshold = 0;
  GrowthPolicy growth_policy = GrowthPolicy::kExact;
  // Region sizes are multiples of this; 0 takes the architecture profile's
  // recommended granularity. Must be a multiple of the device's minimum.
  std::uint64_t growth_granularity = 0;
  // Every chunk is a multiple of this power of two; 0 takes the profile's
  // (256 B on every current profile).
  std::uint64_t min_block_size = 0;
  // Split bound: when the best-fit chunk exceeds the request by at most this
  // many bytes, the surplus stays with the allocation instead of becoming a
  // free chunk. 0 always splits (the surplus is at least min_block_size).
  std::uint64_t max_internal_fragmentation = 0;
  // Size rounding (bfc mode), PyTorch's roundup_power2_divisions: 0 (off) or
  // a power of two N from 2 to 64. A request above min_block_size * N that is
  // not a power of two gets a chunk rounded up to the next of N equal steps
  // of its power-of-two range (N=4: 1200 KiB -> 1.25 MiB, 5 MiB -> 6 MiB):
  // fewer distinct chunk sizes, so freed chunks fit later requests more
  // often, at up to 1/N of internal waste. Platform and async modes refuse
  // a non-zero value.
  std::uint32_t size_divisions = 0;
  // Allocation history (bfc mode): the last N allocator events (allocs,
  // frees, segment changes, out-of-memory answers) with the calling thread's
  // context (SetThreadContext) in a ring buffer made at creation, returned
  // by GetSnapshot (Snapshot::history) and exportable for PyTorch's
  // memory_viz (gpualloc/core/torch_snapshot.h). 0 (off, the default) costs
  // nothing; at most kMaxHistory. Platform and async modes refuse a
  // non-zero value.
  std::uint64_t history = 0;
  // Front caches (bfc mode): each stream keeps up to this many bytes of the
  // blocks it freed, by exact size, and hands them back to its next
  // allocations of that size without the global lock or the best-fit search
  // (4x this for all streams together). Flushed into the BFC before any
  // growth, on Trim and at out of memory, so that they never raise the
  // memory reserved. 0 turns them off; the history, private pools and tags
  // turn them off too (their paths see every operation).
  std::uint64_t front_cache = kDefaultFrontCache;
  CrossStreamReuse cross_stream_reuse = CrossStreamReuse::kBeforeGrowth;
  // Expandable regions (bfc mode): one reserved address range of four times
  // the device's size, grown by mapping one physical handle per growth where
  // the request fits best (at the end of what is mapped, or in a hole), so
  // that all free memory stays mergeable; Trim and garbage collection unmap
  // free handles. kAuto turns them on where the backend's virtual memory
  // works; kOn fails at creation where it does not (or in another mode).
  Tristate expandable = Tristate::kAuto;
  // Allocations of at least the profile's big-page / fragment size (2 MiB)
  // start on a multiple of it when their best-fit free chunk has room for
  // that, so placement costs no extra reserved memory.
  bool large_page_placement = true;
  // Architecture profile name, or "auto" to pick it from the device.
  std::string arch = "auto";
  // A label used in messages and reports.
  std::string name;
};

// TensorFlow's allocator statistics, with the same names and meanings.
struct Stats {
  std::uint64_t num_allocs = 0;    // successful Allocate calls, ever
  std::uint64_t bytes_in_use = 0;  // sum of the sizes of in-use chunks
  std::uint64_t peak_bytes_in_use = 0;
  // Largest chunk handed out since creation or the last ResetPeakStats.
  std::uint64_t largest_alloc_size = 0;
  std::uint64_t bytes_limit = 0;
  std::uint64_t bytes_reserved = 0;  // sum of region sizes
  std::uint64_t peak_bytes_reserved = 0;
  std::uint64_t largest_free_block_bytes = 0;
  std::uint64_t bytes_requested = 0;  // sum of the sizes as asked
  std::uint64_t peak_bytes_requested = 0;
  // 1 - largest free block / total free bytes (0 when nothing is free).
  double fragmentation = 0;
  // ResourceExhausted answers of Allocate: final ones only (a failure the
  // out-of-memory handler retried successfully is not counted).
  std::uint64_t num_ooms = 0;
  std::uint64_t backend_allocs = 0;
  std::uint64_t backend_frees = 0;
  // Stream-ordered bookkeeping: backend event calls made on behalf of frees.
  // All three stay 0 on a workload that uses one stream.
  std::uint64_t events_recorded = 0;
  std::uint64_t stream_waits = 0;  // new streams made to wait for a free
  std::uint64_t host_waits = 0;    // host blocked on an event (out of memory)
  // Private pools (CreatePool): the memory they hold, counted in
  // bytes_reserved, and of it what they handed out, counted in bytes_in_use
  // (their allocations count in num_allocs, bytes_requested and the peaks
  // like any other).
  std::uint64_t pool_bytes_reserved = 0;
  std::uint64_t pool_bytes_in_use = 0;
  // Memory of tags put to sleep (Allocator::Sleep): given back to the device
  // (not in bytes_reserved), its addresses kept for Wake.
  std::uint64_t bytes_sleeping = 0;
  // Memory the device refused to take back (a failed unmap or release of
  // physical memory): still held by the device, so counted in
  // bytes_reserved and against the limit; released at the next Trim,
  // garbage collection or growth, or at destruction.
  std::uint64_t bytes_release_pending = 0;
  // Front caches (Options::front_cache): bytes of freed blocks they hold now
  // (not in bytes_in_use, but in the peaks: a cached block is memory only
  // its stream may take), allocations they served, and allocations that
  // found no block of their size there.
  std::uint64_t front_cache_bytes = 0;
  std::uint64_t front_cache_hits = 0;
  std::uint64_t front_cache_misses = 0;
  // Sharing blocks with other processes (Allocator::Export): live blocks
  // exported and not freed (in bytes_in_use); blocks freed while an
  // importer still has them open, kept allocated until every importer has
  // closed them (in bytes_in_use, not reusable); and memory of other
  // processes imported here (Allocator::Import; not in bytes_reserved).
  std::uint64_t bytes_exported = 0;
  std::uint64_t bytes_held_for_importers = 0;
  std::uint64_t bytes_imported = 0;
};

// What Allocator::Import mapped: the block of another process, here.
struct ImportedBlock {
  void* ptr = nullptr;
  std::uint64_t bytes = 0;  // the exported block's size
};

// A label on allocations that Allocator::Sleep and Wake act on; 0 is none.
using Tag = std::uint32_t;

// What Allocator::Sleep did.
struct SleepReport {
  std::uint64_t allocations = 0;     // live allocations of the tag, asleep now
  std::uint64_t bytes_in_use = 0;    // their bytes (chunk sizes)
  std::uint64_t bytes_released = 0;  // physical memory given back
  // Granules holding the tag's memory that stayed mapped because untagged
  // live blocks share them. The bfc mode gives a tag granules of its own,
  // so none are shared and this is 0; it is reported so that a caller can
  // check what it relies on.
  std::uint64_t bytes_kept = 0;
  std::uint64_t bytes_backed_up = 0;  // copied to host memory (backup)
};

// Every region and chunk, in address order. A free chunk whose parts were
// freed under different stream conditions is listed part by part (free
// neighbours, each with the stream its part waits for, or 0).
struct ChunkSnapshot {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;  // 0 for free chunks
  bool in_use = false;
  std::uintptr_t stream = 0;
  // An in-use chunk the private pool with this id holds (its memory is
  // listed under Snapshot::pools), else 0.
  std::uint64_t pool = 0;
  // An in-use chunk holding the memory of this tag (see Allocator::Sleep),
  // else 0.
  std::uint32_t tag = 0;
  // The chunk's memory is given back to the device (its tag is asleep, see
  // Allocator::Sleep): counted in its region's size, which keeps the
  // addresses, but not in Stats::bytes_reserved (it is in bytes_sleeping).
  // Set on the tag's block in the regions and on the tag pool's chunks.
  bool asleep = false;
};
struct RegionSnapshot {
  std::uint64_t base = 0;
  std::uint64_t size = 0;  // the chunks' sizes, those asleep included
  std::vector<ChunkSnapshot> chunks;
};
// How an allocator's regions are made (Snapshot::region_kind).
enum class RegionKind : std::uint8_t {
  kSeparate,    // each region one backend allocation (the bfc mode without
                // expandable regions, and the platform and async modes)
  kExpandable,  // maximal mapped runs of one reserved address range
                // (Options::expandable): PyTorch's expandable segments
};
// "separate", "expandable".
absl::string_view RegionKindName(RegionKind kind);
// A private memory pool (see Allocator::CreatePool). 0 is never a pool.
using PoolId = std::uint64_t;

// One private pool: the blocks it took from the allocator's memory, carved
// by its own best fit. Its regions are the blocks (neighbouring ones joined).
struct PoolSnapshot {
  PoolId id = 0;
  std::uint32_t references = 0;         // CreatePool + RetainPool - ReleasePool
  std::vector<std::uintptr_t> streams;  // streams allocating to it now
  std::uint64_t bytes_reserved = 0;     // memory the pool holds
  std::uint64_t bytes_in_use = 0;       // of it, handed out and not freed
  std::vector<RegionSnapshot> regions;
  // The memory of a tag (Allocator::Sleep) is listed as a pool too, with the
  // tag as its id; `asleep` while its memory is given back, and then
  // `bytes_sleeping` of its memory is not reserved (not in bytes_reserved).
  std::uint32_t tag = 0;
  bool asleep = false;
  std::uint64_t bytes_sleeping = 0;
};

// The largest Options::history (16 Mi entries, 40 bytes each).
inline constexpr std::uint64_t kMaxHistory = std::uint64_t{1} << 24;

// What the history records, by PyTorch's names (HistoryActionName).
enum class HistoryAction : std::uint8_t {
  kAlloc,          // an Allocate that succeeded: address, bytes as asked
  kFreeRequested,  // a Deallocate: address, chunk size
  kFreeCompleted,  // the same Deallocate (the chunk is free at once, its
                   // stream-order condition attached)
  kSegmentAlloc,   // a region from the backend: base, size
  kSegmentFree,    // a region given back
  kSegmentMap,     // expandable regions: a range mapped
  kSegmentUnmap,   // a range unmapped
  kOom,            // an out-of-memory answer: address = bytes the limit
                   // still allows to reserve, size = bytes asked
};
// "alloc", "free_requested", "free_completed", "segment_alloc",
// "segment_free", "segment_map", "segment_unmap", "oom".
absl::string_view HistoryActionName(HistoryAction action);

// One event of the history, oldest first in Snapshot::history.
struct HistoryEvent {
  HistoryAction action = HistoryAction::kAlloc;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uintptr_t stream = 0;
  std::uint64_t time_ns = 0;  // std::chrono::steady_clock, in ns
  std::string context;        // SetThreadContext's at the event; may be ""
};

struct Snapshot {
  std::vector<RegionSnapshot> regions;
  std::vector<PoolSnapshot> pools;
  Stats stats;
  // How the regions are made (whether there are any yet or not).
  RegionKind region_kind = RegionKind::kSeparate;
  // Options::history's events (empty when off), oldest first; counts of
  // the events recorded since creation and of those overwritten since.
  std::vector<HistoryEvent> history;
  std::uint64_t history_recorded = 0;
  std::uint64_t history_dropped = 0;
};

// Sets the calling thread's context, stored with each history event the
// thread causes from now on (a Python stack, an op name); "" clears it.
// Each distinct context is copied once into a process-wide table and kept
// for the life of the process, so that an event stores a 32-bit id: use a
// bounded set of strings (op names, call sites), not unique ones.
void SetThreadContext(absl::string_view context);

// A failed request, as the out-of-memory handler sees it. The numbers are
// those of the moment the request failed (the message states the same).
struct OutOfMemoryInfo {
  std::size_t bytes = 0;      // as asked
  std::size_t alignment = 0;  // as asked (0: the default)
  Stream stream;
  std::uint64_t bytes_limit = 0;
  std::uint64_t bytes_in_use = 0;
  std::uint64_t bytes_reserved = 0;
  std::uint64_t largest_free_block_bytes = 0;
  // The ResourceExhausted message Allocate returns if the handler says kFail;
  // valid during the call only.
  absl::string_view message;
};

enum class OutOfMemoryAction {
  kFail,   // return the error
  kRetry,  // try the request once more (the handler freed something)
};

// Called when Allocate is about to answer out of memory (PyTorch's
// out-of-memory observers, RMM's failure callback), before the error is
// returned; its answer decides whether the request is tried once more.
//
// Reentrancy: the handler runs on the failing thread WITHOUT the allocator's
// lock, so it may do anything a caller may: free memory elsewhere (other
// allocators, caches), and call this allocator again: Deallocate, GetStats,
// Trim, even Allocate. Other threads keep allocating meanwhile; kRetry runs
// the whole allocation again (growth and garbage collection included) on the
// state as it then is, exactly once: a retry that fails is final and does not
// call the handler again. While a thread runs a handler, an out-of-memory
// answer on that thread (of any allocator, e.g. the handler's own Allocate)
// calls no handler: it is final at once, so handlers never nest or loop. The
// running call holds its own reference to the handler, so the handler may
// even replace or remove itself (for later failures). It must not throw or
// destroy the allocator, and may be called from several threads at once.
//
// How: the failing attempt copies the handler (a shared_ptr swapped in under
// the lock by SetOutOfMemoryHandler) and the numbers while it holds the lock,
// and returns, releasing it; Allocate then calls the handler with no lock
// held, and a retry takes the lock afresh. A thread-local flag marks the
// threads running a handler.
using OutOfMemoryHandler =
    std::function<OutOfMemoryAction(const OutOfMemoryInfo&)>;

class Allocator {
 public:
  virtual ~Allocator() = default;

  // Returns device memory of at least `bytes`, aligned to `alignment` (a power
  // of two; 0 means the minimum block size, 256 B). 0 bytes is valid and
  // returns a unique non-null pointer to a minimum-size block. A request beyond
  // what the allocator can ever serve, or that cannot be served now even after
  // garbage collection, is ResourceExhausted with a report of why.
  //
  // `tag` (non-zero) labels the allocation for Sleep and Wake: in the bfc
  // mode each tag's memory is a pool of its own, and with expandable regions
  // it is carved from granules that hold no other tag's or untagged memory
  // (without them its blocks come from general memory and cannot sleep).
  // Allocating with a tag that is asleep, or with a tag on a stream that
  // allocates to a private pool, is FailedPrecondition. The platform and
  // async modes accept tags and keep nothing by them (their Sleep answers
  // FailedPrecondition).
  //
  // The overloads with fewer arguments (the default stream, alignment 0, no
  // tag) forward to the virtual one, which a mode overrides (no default
  // arguments on virtual functions; a class that overrides it and is called
  // through its own type says `using Allocator::Allocate;`).
  absl::StatusOr<void*> Allocate(std::size_t bytes) {
    return Allocate(bytes, Stream(), 0, 0);
  }
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream) {
    return Allocate(bytes, stream, 0, 0);
  }
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                 std::size_t alignment) {
    return Allocate(bytes, stream, alignment, 0);
  }
  virtual absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                         std::size_t alignment, Tag tag) = 0;
  // Releases what Allocate returned. The free rule, the same in every mode:
  // the memory is reused only after the work queued so far on `stream`, on
  // the stream the block was allocated on, and on every stream RecordStream
  // named (at once on a stream whose own work that is). Freeing on the
  // allocation stream (PyTorch's habit: its frees carry no stream) costs
  // nothing extra; freeing on another stream (cudaFreeAsync's habit) costs at
  // most one event when the memory is wanted again. A pointer this allocator
  // did not hand out, an interior pointer or a second free is an error naming
  // the address; nothing changes.
  absl::Status Deallocate(void* ptr) { return Deallocate(ptr, Stream()); }
  virtual absl::Status Deallocate(void* ptr, Stream stream) = 0;
  // Declares that work on `stream` also uses the live allocation `ptr`
  // (PyTorch's record_stream): when it is freed, its memory is reused on other
  // streams only after that work too has completed. Unknown pointers are an
  // error naming the address.
  virtual absl::Status RecordStream(void* ptr, Stream stream) = 0;
  // The runtime is about to destroy `stream`. Once this returns the allocator
  // never touches it again (no event recorded on it, no wait made on it),
  // while the work already queued on it is still honoured: one last event is
  // recorded on it here, and memory its work may still use is reused on
  // other streams only once that event has completed. The handle may then
  // name a new stream: the allocator treats it as a stranger to the old
  // stream's memory. Costs one event record and query, a walk over the
  // allocator's blocks and a query per earlier released stream whose last
  // event is not yet known complete (no host wait); a stream the allocator
  // never saw costs nothing. On error (the event could not be recorded)
  // nothing changes.
  virtual absl::Status ReleaseStream(Stream stream) = 0;

  virtual Stats GetStats() const = 0;
  // Resets the peak statistics to the current values, and largest_alloc_size
  // to 0 (TensorFlow's ClearStats), in every mode.
  virtual void ResetPeakStats() = 0;
  virtual Snapshot GetSnapshot() const = 0;

  // Returns every fully free region to the device.
  virtual absl::Status Trim() = 0;
  // Changes the limit while the allocator runs (PyTorch's
  // set_per_process_memory_fraction; Options::memory_limit at creation).
  // `bytes` is rounded down to the growth granularity (whole units of the
  // device for allocator=platform) and must leave at least one and at most
  // the device's total memory. Raising it lets later growth use more.
  // Lowering it below what is reserved first returns every fully free region
  // to the device, as Trim does; when what stays reserved still exceeds the
  // new limit the call is FailedPrecondition saying how much, and the limit
  // is unchanged (as during a graph capture, when nothing may be returned).
  // Bad values are InvalidArgument naming them; nothing changes on error.
  virtual absl::Status SetLimit(std::uint64_t bytes) = 0;
  // Checks every invariant of the allocator; the Status names the broken one.
  virtual absl::Status Validate() const = 0;

  // Installs `handler` (see OutOfMemoryHandler) for every later
  // out-of-memory answer of Allocate, including requests beyond the limit
  // (kRetry then fails again); a null handler removes it. Safe while other
  // threads allocate: a failure already calling the previous handler keeps
  // it (copied, under the lock, when the request failed), so the previous
  // handler may still run once after this returns. Checked only on the
  // out-of-memory path: an allocation that succeeds never looks at it.
  virtual void SetOutOfMemoryHandler(OutOfMemoryHandler handler) = 0;

  // --- Private pools: memory for graph capture ------------------------------
  // A CUDA or HIP graph replays the addresses it captured, so the memory it
  // was given must stay its own from capture until the graph is gone, and
  // nobody may record, query or wait for an event on a capturing stream.
  // PyTorch's private pools (graph_pool_handle, MemPool, beginAllocateToPool)
  // serve this, and these calls mirror them.
  //
  // CreatePool makes an empty pool with one reference. While a stream
  // allocates to a pool (BeginAllocateToPool .. EndAllocateToPool), every
  // Allocate on that stream is served by the pool only: the pool's own free
  // memory first, else a new block the pool takes from the allocator's
  // memory (growing the allocator as usual). Memory freed from a pool, during
  // capture or later, goes back to that pool only, and is reused only by
  // allocations to it. Several graphs may share one pool by allocating to the
  // same id, in turn (their replays must then run in capture order, as in
  // PyTorch); each sharer holds a reference (RetainPool). When the last
  // reference is dropped (ReleasePool) the pool's blocks go back to the
  // allocator's free memory, each once all of its allocations are freed,
  // reusable on other streams only after the work queued so far on
  // `last_use` (where the graph was last launched) and on every stream that
  // used pool memory.
  //
  // A capture may begin on a routed stream at any moment (PyTorch begins
  // allocating to the pool first). So while a stream allocates to a pool on a
  // backend with capabilities.graph_capture, the fast path asks the device
  // nothing (memory other streams freed is reused only when already known
  // complete, as PyTorch defers record_stream events), and the slow paths ask
  // the backend whether a routed stream captures now (Backend::IsCapturing).
  // While one does, the allocator makes no event call and no host wait on any
  // stream, never returns memory to the device, and makes its device calls in
  // the backend's relaxed capture mode. Memory the graph reads that was
  // allocated outside the pool must stay allocated while the graph may
  // replay (PyTorch's static inputs).
  //
  // Errors name the pool and the stream: an unknown or released pool is
  // NotFound; a stream already allocating to a pool, EndAllocateToPool of a
  // pool nobody allocates to, ReleasePool of the last reference while a
  // stream still allocates to it, and ReleasePool naming as last_use a stream
  // released with ReleaseStream that no call named since (it may be
  // destroyed) are FailedPrecondition; nothing changes on
  // error. Trim and ReleaseStream during a capture are FailedPrecondition
  // (they would wait or record an event). Only the bfc mode has pools: the
  // others answer Unimplemented.
  virtual absl::StatusOr<PoolId> CreatePool();
  virtual absl::Status RetainPool(PoolId pool);
  absl::Status ReleasePool(PoolId pool) { return ReleasePool(pool, Stream()); }
  virtual absl::Status ReleasePool(PoolId pool, Stream last_use);
  virtual absl::Status BeginAllocateToPool(PoolId pool, Stream stream);
  // Ends every stream's allocating to `pool`.
  virtual absl::Status EndAllocateToPool(PoolId pool);

  // --- Sleep and wake: giving memory back without losing addresses --------
  // Sleep(tag) makes the host wait for the work queued on every stream that
  // allocated, freed or recorded (RecordStream) the tag's memory (work on
  // another stream must be declared with RecordStream, or be finished by the
  // caller), then unmaps and releases the physical memory of every granule
  // holding only the tag's memory (live or free), keeping the addresses
  // reserved: pointers and captured graphs stay valid for after Wake. The
  // tag's allocations stay live but may not be used, freed (Deallocate,
  // RecordStream: FailedPrecondition) or added to until Wake(tag) maps fresh
  // physical memory at the same addresses. Their content is lost, unless
  // `backup` copied it to host memory first (capabilities.host_copy), which
  // Wake copies back.
  //
  // Released memory is reusable by the rest of the allocator at once: a Wake
  // needs the limit to have room for the tag again, giving back free memory
  // first as garbage collection does (ResourceExhausted, nothing changed,
  // when that is not enough). Sleeping a tag with no memory only marks it
  // asleep. Errors, nothing changed: tag 0 is InvalidArgument; a tag
  // already asleep (Sleep) or not asleep (Wake), a backup without
  // host_copy, a graph capture underway, and a backend without virtual
  // memory or an allocator without expandable regions are
  // FailedPrecondition, naming the backend. On a device error half way, what
  // changed is turned back (memory released is mapped again, its content
  // restored from the backup if Sleep made one) and the error names the
  // step; should turning back fail too, the tag is left asleep, refused
  // until a Wake succeeds, and the error says so. Only the bfc mode sleeps.
  absl::StatusOr<SleepReport> Sleep(Tag tag) { return Sleep(tag, false); }
  virtual absl::StatusOr<SleepReport> Sleep(Tag tag, bool backup);
  virtual absl::Status Wake(Tag tag);

  // --- Sharing a block with another process ---------------------------------
  // Export(ptr) describes the live block `ptr` (what Allocate returned) so
  // that another process on the same machine can map it: a versioned,
  // self-describing byte string (docs/REFERENCE.md, "Export descriptions")
  // to send over any channel. Import(description), in the other process (an
  // allocator on the same kind of device), maps the block and returns its
  // address and size there; CloseImport(ptr) unmaps it. Exporting the same
  // block again returns the same description.
  //
  // How (PyTorch's model): with separate regions the block is its region's
  // IPC handle (Backend::GetIpcHandle, capabilities.ipc_handles) plus its
  // offset; with expandable regions, one POSIX descriptor per mapping that
  // holds the block (Backend::ExportMapping, capabilities.shareable_handles)
  // plus the exporter's pid, which the importer fetches with pidfd_open +
  // pidfd_getfd (Linux 5.6; it needs ptrace permission over the exporter:
  // the same user, and Yama's ptrace_scope 0 or PR_SET_PTRACER) and maps
  // into an address range of its own. The importer sees the whole region or
  // mappings; only the block is its to use.
  //
  // Lifetime rule: an exported block returns to free memory only once the
  // exporter has freed it (Deallocate) AND every importer has closed it.
  // Each importer registers its pid in a small shared counter page the
  // description names; a Deallocate while an importer has the block open
  // keeps it allocated, "held for importers" (Stats::bytes_held_for_
  // importers: not reusable), and the allocator frees it at a later slow
  // path, Trim, Export or Deallocate once no importer has it open; an
  // importer that no longer exists (crashed, exited without CloseImport)
  // counts as closed. Stats::bytes_exported counts live exported blocks and
  // Stats::bytes_imported the memory imported here. Destroying the exporter
  // frees its memory whatever importers still map (their mappings keep the
  // physical memory alive on devices that refcount it, as CUDA does);
  // destroying an importer closes its imports. In the bfc mode the first
  // Export turns the front caches off (Options::front_cache): every free
  // must see whether its block is exported.
  //
  // Errors: Export of a pointer that is not a live allocation is
  // InvalidArgument naming it; a backend without the capability the region
  // kind needs is Unimplemented naming the capability, the region kind and
  // the setting that avoids it. Import of a description that is garbled,
  // truncated or of another version is InvalidArgument saying what is
  // wrong; one from another kind of backend or an exporter that exited is
  // FailedPrecondition. CloseImport of a pointer Import did not return (or
  // closed already) is InvalidArgument. The bfc and platform modes share;
  // the async mode answers Unimplemented (the device's pool owns its
  // memory).
  virtual absl::StatusOr<std::string> Export(void* ptr);
  virtual absl::StatusOr<ImportedBlock> Import(absl::string_view description);
  virtual absl::Status CloseImport(void* ptr);

  virtual const DeviceInfo& device() const = 0;
  virtual const Options& options() const = 0;

 private:
  absl::Status PoolsUnsupported(absl::string_view call) const;
  absl::Status SharingUnsupported(absl::string_view call) const;
};

// InvalidArgument naming the field when `options` are inconsistent with each
// other or with the device; the backend is not called.
absl::StatusOr<std::unique_ptr<Allocator>> CreateAllocator(
    const Options& options, std::shared_ptr<Backend> backend);

}  // namespace gpualloc

#endif  // GPUALLOC_ALLOCATOR_H_
