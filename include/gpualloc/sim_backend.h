// gpualloc/sim_backend.h: a simulated device, the backend every CPU test and
// tool uses.
//
// The simulator models what an allocator can observe of a GPU: capacity,
// granularity, alignment, page sizes and capabilities (from an architecture
// profile or given explicitly); addresses that are either fake (nothing
// touched, so a 192 GiB device costs no host memory) or backed by host memory
// (so tests can write and check fill patterns); streams and events whose work
// completes when a test says so or in order on a modeled clock, with a hazard
// detector; a stream-ordered pool with CUDA's three reuse rules; fault
// injection (fail the k-th call of an operation); and a counter of every call
// with a modeled cost per call.
//
// Guarantees the allocator tests rely on: fake addresses are deterministic and
// never reused (a stale pointer cannot alias a later allocation), and separate
// allocations are never contiguous (a guard of at least one granule follows
// each; host-backed guards are PROT_NONE, so an overrun faults).
//
// Thread safety: all methods are thread-safe.
#ifndef GPUALLOC_SIM_BACKEND_H_
#define GPUALLOC_SIM_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/backend.h"

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

// A moment the detector flagged: work on `stream` touched memory that work
// queued earlier on `other` still uses, and `stream` was not made to wait.
struct SimHazard {
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
  // Modeled device-side cost of one call, in nanoseconds. cudaMalloc and
  // cudaFree synchronize the whole device; the defaults are typical host-side
  // figures for a large allocation on a Hopper GPU. A pool call that grows
  // the pool by a segment also adds the kAllocate cost, and one that returns
  // a segment to the device (a trim, or the release threshold applied at a
  // synchronization point) the kFree cost, since the device pays for them.
  std::array<std::uint64_t, kNumSimOps> cost_ns = {
      /*kAllocate=*/50'000,        /*kFree=*/30'000,
      /*kFreeBytes=*/1'000,        /*kCreateEvent=*/1'000,
      /*kDestroyEvent=*/1'000,     /*kRecordEvent=*/2'000,
      /*kQueryEvent=*/500,         /*kStreamWaitEvent=*/2'000,
      /*kSynchronizeEvent=*/5'000, /*kPoolAllocate=*/1'000,
      /*kPoolFree=*/1'000,         /*kPoolTrim=*/10'000,
      /*kConfigurePool=*/1'000,    /*kGetPoolUsage=*/500};
  int ordinal = 0;
  // Capabilities the simulated device offers (tests turn them off to check
  // that a mode the backend cannot serve fails clearly). Without them the
  // calls answer Backend's Unimplemented (counted as failed calls). The pool
  // needs streams: with streams off, capabilities.stream_ordered_pools is
  // off too.
  bool streams = true;
  bool stream_ordered_pools = true;
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
  // and the replay tool "use" memory an allocator handed out.
  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns = 0);
  // Manual clock: completes the work queued so far on `stream`, and first the
  // work it waits for. CompleteAll completes everything. Modeled clock: moves
  // the clock to when that work is done. Neither is a host synchronization
  // point for the pool (SynchronizeEvent and Free are).
  void CompleteStream(Stream stream);
  void CompleteAll();
  // Modeled clock: moves host time forward (the manual clock keeps now_ns
  // too, moved only by AdvanceClock, and ignores it).
  void AdvanceClock(std::uint64_t ns);
  std::uint64_t now_ns() const;
  // Pieces of work queued and not yet complete.
  std::uint64_t pending_work() const;
  // Hazards counted: at most one per Use and other stream.
  std::uint64_t hazards() const;
  // The first hazards found (at most 64), for messages.
  std::vector<SimHazard> hazard_log() const;
  // Events created and not destroyed.
  std::uint64_t live_events() const;

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
  std::uint64_t modeled_ns() const;  // sum of cost_ns over successful calls
  void ResetCounters();

  // Device memory currently handed out, and how many allocations hold it.
  std::uint64_t bytes_allocated() const;
  std::uint64_t live_allocations() const;

 private:
  class Impl;
  explicit SimBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpualloc

#endif  // GPUALLOC_SIM_BACKEND_H_
