// backends/sim/sim_backend.cc: the simulated device.
//
// Model (see gpualloc/sim_backend.h for the contract):
//  - Capacity is accounted by the request rounded up to the allocation
//    alignment, the way a driver rounds a cuMemAlloc/hipMalloc.
//  - Placement: every address is aligned to the allocation alignment; requests
//    of at least one recommended granule are aligned to the recommended
//    granularity, like a driver that backs them with large pages.
//  - Separate allocations are never contiguous: at least one recommended
//    granule of unused address space follows every allocation, so an
//    allocator that wrongly merges neighbours from different backend
//    allocations is caught.
//  - Fake memory hands out addresses from a deterministic bump pointer in a
//    window of 2^48 bytes per device ordinal starting at 0x7f0000000000
//    (ordinal 0). Addresses are never reused and never dereferenced, so a stale
//    pointer cannot alias a later allocation; no host memory is touched.
//  - Host-backed memory maps each allocation privately and lazily
//    (MAP_NORESERVE). Only the requested bytes are readable and writable; the
//    alignment slack before them and a guard of at least one recommended
//    granule after them are PROT_NONE, so an overrun faults instead of
//    corrupting a neighbour.
//  - Every call is counted; a call that fails (fault injection or a real error)
//    also counts as failed and costs nothing; a successful call adds its
//    modeled cost. A call that fails changes no state other than the counters.
//  - Streams: a stream is its count of queued pieces (positions 1, 2, ...),
//    how many of them completed, and a vector clock: per other stream, the
//    position its future work is ordered after. An event captures the
//    recording stream's position plus its clock, so clocks are transitively
//    closed and "is X's piece p ordered before this stream's work" is one
//    lookup. Completion is a prefix of each queue (pieces of one stream end in
//    order on the modeled clock too), so completing is moving a counter, and
//    completed pieces are dropped.
//  - The hazard detector indexes each stream's pending pieces by start
//    address (and by position, to drop them as they complete). A Use scans,
//    per other stream, only the pieces that can overlap its range: those
//    starting less than the stream's longest pending piece before it. A piece
//    covered by a later one of the same stream at the same start is dropped at
//    once, so reusing one block on one stream keeps one entry however long
//    nothing completes.
//  - The pool carves blocks out of segments taken like plain allocations
//    (same placement, guards and host mappings). Each free block carries the
//    condition of its free: the freeing stream, its clock at the free, and
//    whether it merged frees of several streams; the reuse rules are checked
//    against that condition when a block is considered.
//
// Thread safety: one lock (core::Lock, the project's annotated std::mutex; it
// is also visible to ThreadSanitizer, which Debian's prebuilt absl::Mutex is
// not) guards all mutable state; DeviceInfo and the options are immutable
// after Create.

#include "gpualloc/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/lock.h"
#include "gpualloc/arch.h"
#include "gpualloc/backend.h"

namespace gpualloc {
namespace {

// First fake address of device ordinal 0, and the size of each ordinal's
// window. Fake addresses past the canonical user range are fine: they are
// never dereferenced.
constexpr DeviceAddress kFakeBase = 0x7f00'0000'0000;
constexpr std::uint64_t kFakeWindow = std::uint64_t{1} << 48;
constexpr int kMaxOrdinal = 255;

bool IsPowerOfTwo(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// REQUIRES: `alignment` is a power of two and the result does not overflow.
std::uint64_t AlignUp(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

int OpIndex(SimOp op) {
  const int index = static_cast<int>(op);
  return index >= 0 && index < kNumSimOps ? index : -1;
}

std::uint64_t SaturatingAdd(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

// One past the last byte of [address, address + bytes), clamped to the top
// of the address space.
DeviceAddress SaturatingEnd(DeviceAddress address, std::uint64_t bytes) {
  return SaturatingAdd(address, bytes);
}

// The work a stream, an event or a pool free is ordered after: (stream
// handle, position) pairs sorted by handle, where position p stands for the
// first p pieces queued on that stream; a stream not listed is at 0. Few
// streams wait on each other, so a sorted vector beats a map.
using VectorClock = std::vector<std::pair<std::uintptr_t, std::uint64_t>>;

VectorClock::const_iterator ClockFind(const VectorClock& clock,
                                      std::uintptr_t stream) {
  return std::lower_bound(
      clock.begin(), clock.end(), stream,
      [](const auto& entry, std::uintptr_t s) { return entry.first < s; });
}

std::uint64_t ClockAt(const VectorClock& clock, std::uintptr_t stream) {
  const auto it = ClockFind(clock, stream);
  return it != clock.end() && it->first == stream ? it->second : 0;
}

void ClockRaise(VectorClock* clock, std::uintptr_t stream,
                std::uint64_t position) {
  if (position == 0) return;
  const auto found = ClockFind(*clock, stream);
  const auto it = clock->begin() + (found - clock->cbegin());
  if (it != clock->end() && it->first == stream) {
    it->second = std::max(it->second, position);
  } else {
    clock->insert(it, {stream, position});
  }
}

// A piece of work that may still cause a hazard, indexed by its start.
struct IndexedPiece {
  DeviceAddress end = 0;
  std::uint64_t position = 0;
};

// One stream. Piece i (1-based) of its queue has position i; a position p
// in a clock stands for the first p pieces.
struct StreamState {
  std::uint64_t next_position = 0;  // pieces ever queued
  // Pieces at or below are complete (manual: as the test said; modeled:
  // updated by Prune from `ends`).
  std::uint64_t completed_position = 0;
  // Pieces at or below are complete AND a host synchronization point has
  // seen it; the pool then lets any stream reuse what they freed.
  std::uint64_t observed_position = 0;
  // Work on other streams that this stream's future work is ordered after;
  // transitively closed, since events carry their recorder's clock.
  VectorClock clock;
  // Modeled: when everything queued so far, waits included, is done.
  std::uint64_t ready_ns = 0;
  // Modeled: end times of the pieces after completed_position, in order
  // (nondecreasing, since a stream runs its pieces one after the other).
  std::deque<std::uint64_t> ends;
  // Pending pieces that touch memory, by start address and by position.
  // A piece is dropped from both when it completes, or when a later piece
  // of the same stream starts at the same address and covers it (any
  // stream ordered after the later piece is ordered after the earlier
  // one, so only the later one can be a hazard).
  absl::btree_multimap<DeviceAddress, IndexedPiece> by_address;
  absl::btree_map<std::uint64_t, DeviceAddress> by_position;
  // Longest indexed piece: bounds how far before a range an overlapping
  // piece can start.
  std::uint64_t longest = 0;
};

// A never-recorded event has an empty clock: complete, and a no-op to wait
// for, as in CUDA.
struct Event {
  // The recording stream's own position and everything it waited for.
  VectorClock clock;
  std::uint64_t done_ns = 0;  // modeled: when the captured work is done
};

// When memory freed into the pool may be handed to a stream.
struct FreeCondition {
  std::uintptr_t stream = 0;  // the stream the free was queued on
  bool mixed = false;         // merged from frees on different streams
  // The freeing stream's position at the free and what it waited for.
  VectorClock clock;
  std::uint64_t done_ns = 0;  // modeled: when that work is done
};

struct PoolBlock {
  std::uint64_t size = 0;
  DeviceAddress segment = 0;  // start of the segment holding the block
  bool free = true;
  FreeCondition freed;  // meaningful when free
};

absl::Status InvalidField(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("SimOptions.", field, ": ", problem));
}

}  // namespace

absl::string_view SimOpName(SimOp op) {
  switch (op) {
    case SimOp::kAllocate:
      return "allocate";
    case SimOp::kFree:
      return "free";
    case SimOp::kFreeBytes:
      return "free_bytes";
    case SimOp::kCreateEvent:
      return "create_event";
    case SimOp::kDestroyEvent:
      return "destroy_event";
    case SimOp::kRecordEvent:
      return "record_event";
    case SimOp::kQueryEvent:
      return "query_event";
    case SimOp::kStreamWaitEvent:
      return "stream_wait_event";
    case SimOp::kSynchronizeEvent:
      return "synchronize_event";
    case SimOp::kPoolAllocate:
      return "pool_allocate";
    case SimOp::kPoolFree:
      return "pool_free";
    case SimOp::kPoolTrim:
      return "pool_trim";
    case SimOp::kConfigurePool:
      return "configure_pool";
    case SimOp::kGetPoolUsage:
      return "get_pool_usage";
    case SimOp::kCount:
      break;
  }
  return "invalid";
}

std::string SimHazard::ToString() const {
  return absl::StrFormat(
      "hazard: stream %#x touched [%#x, %#x) (%d bytes) while work queued on "
      "stream %#x still uses it and stream %#x was not made to wait for it",
      stream.handle, address, address + bytes, bytes, other.handle,
      stream.handle);
}

class SimBackend::Impl {
 public:
  Impl(const SimOptions& options, DeviceInfo info)
      : memory_(options.memory),
        cost_ns_(options.cost_ns),
        info_(std::move(info)),
        fake_base_(kFakeBase +
                   static_cast<std::uint64_t>(options.ordinal) * kFakeWindow),
        host_page_size_(static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))),
        modeled_clock_(options.clock == SimClock::kModeled),
        work_ns_(options.work_ns),
        next_fake_address_(fake_base_) {}

  ~Impl() {
    core::LockGuard lock(&mu_);
    for (const auto& [address, allocation] : live_) {
      if (allocation.mapping != nullptr) {
        munmap(allocation.mapping, allocation.mapping_length);
      }
    }
    for (const auto& [address, segment] : pool_segments_) {
      if (segment.mapping != nullptr) {
        munmap(segment.mapping, segment.mapping_length);
      }
    }
  }

  const DeviceInfo& info() const { return info_; }

  absl::StatusOr<std::uint64_t> FreeBytes() {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFreeBytes); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kFreeBytes,
                   absl::StatusOr<std::uint64_t>(DeviceFreeLocked()));
  }

  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kAllocate); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kAllocate, AllocateLocked(bytes));
  }

  absl::Status Free(DeviceAddress address) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFree); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kFree, FreeLocked(address));
  }

  // A call the device lacks the capability for: counted as a failed call.
  template <typename T>
  T Unsupported(SimOp op, T status) {
    core::LockGuard lock(&mu_);
    const int index = OpIndex(op);
    ++calls_[index];
    ++failed_calls_[index];
    return status;
  }

  // --- Events ---------------------------------------------------------------

  absl::StatusOr<EventHandle> CreateEvent() {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kCreateEvent); !fault.ok()) {
      return fault;
    }
    const EventHandle handle = next_event_++;
    events_.emplace(handle, Event{});
    return EndCall(SimOp::kCreateEvent, absl::StatusOr<EventHandle>(handle));
  }

  absl::Status DestroyEvent(EventHandle event) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kDestroyEvent); !fault.ok()) {
      return fault;
    }
    auto it = events_.find(event);
    if (it == events_.end()) {
      return EndCall(SimOp::kDestroyEvent, UnknownEvent("DestroyEvent", event));
    }
    // Like cuEventDestroy, destroying an event whose work is pending is fine:
    // the work goes on, only the handle goes away.
    events_.erase(it);
    return EndCall(SimOp::kDestroyEvent, absl::OkStatus());
  }

  absl::Status RecordEvent(EventHandle event, Stream stream) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kRecordEvent); !fault.ok()) {
      return fault;
    }
    auto it = events_.find(event);
    if (it == events_.end()) {
      return EndCall(SimOp::kRecordEvent, UnknownEvent("RecordEvent", event));
    }
    const StreamState& s = GetStream(stream.handle);
    Event& e = it->second;
    e.clock = s.clock;
    ClockRaise(&e.clock, stream.handle, s.next_position);
    e.done_ns = s.ready_ns;
    return EndCall(SimOp::kRecordEvent, absl::OkStatus());
  }

  absl::StatusOr<bool> QueryEvent(EventHandle event) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kQueryEvent); !fault.ok()) {
      return fault;
    }
    auto it = events_.find(event);
    if (it == events_.end()) {
      return EndCall(SimOp::kQueryEvent,
                     absl::StatusOr<bool>(UnknownEvent("QueryEvent", event)));
    }
    return EndCall(SimOp::kQueryEvent,
                   absl::StatusOr<bool>(Completed(it->second.clock)));
  }

  absl::Status StreamWaitEvent(Stream stream, EventHandle event) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kStreamWaitEvent); !fault.ok()) {
      return fault;
    }
    auto it = events_.find(event);
    if (it == events_.end()) {
      return EndCall(SimOp::kStreamWaitEvent,
                     UnknownEvent("StreamWaitEvent", event));
    }
    Wait(stream.handle, it->second.clock, it->second.done_ns);
    return EndCall(SimOp::kStreamWaitEvent, absl::OkStatus());
  }

  absl::Status SynchronizeEvent(EventHandle event) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kSynchronizeEvent); !fault.ok()) {
      return fault;
    }
    auto it = events_.find(event);
    if (it == events_.end()) {
      return EndCall(SimOp::kSynchronizeEvent,
                     UnknownEvent("SynchronizeEvent", event));
    }
    const Event& e = it->second;
    if (modeled_clock_) {
      now_ns_ = std::max(now_ns_, e.done_ns);
    } else {
      CompleteClock(e.clock);
    }
    Observe(e.clock);
    ReleaseAboveThreshold();
    return EndCall(SimOp::kSynchronizeEvent, absl::OkStatus());
  }

  // --- Device work -----------------------------------------------------------

  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns) {
    core::LockGuard lock(&mu_);
    if (duration_ns == 0) duration_ns = work_ns_;
    const DeviceAddress end = SaturatingEnd(address, bytes);
    StreamState& s = GetStream(stream.handle);
    if (end > address) {
      for (auto& [handle, other] : streams_) {
        if (handle == stream.handle || other.by_address.empty()) continue;
        Prune(other);
        const std::optional<std::pair<DeviceAddress, DeviceAddress>> overlap =
            FindUnordered(other, address, end, ClockAt(s.clock, handle));
        if (!overlap.has_value()) continue;
        ++hazards_;
        if (hazard_log_.size() < kHazardLogSize) {
          hazard_log_.push_back(SimHazard{stream, Stream(handle),
                                          overlap->first,
                                          overlap->second - overlap->first});
        }
      }
    }
    const std::uint64_t position = ++s.next_position;
    if (modeled_clock_) {
      const std::uint64_t start = std::max(now_ns_, s.ready_ns);
      s.ready_ns = SaturatingAdd(start, duration_ns);
      s.ends.push_back(s.ready_ns);
    }
    if (end > address) Index(s, address, end, position);
  }

  void CompleteStream(Stream stream) {
    core::LockGuard lock(&mu_);
    auto it = streams_.find(stream.handle);
    if (it == streams_.end()) return;
    StreamState& s = it->second;
    if (modeled_clock_) {
      now_ns_ = std::max(now_ns_, s.ready_ns);
      return;
    }
    CompleteClock(s.clock);
    CompleteUpTo(s, s.next_position);
  }

  void CompleteAll() {
    core::LockGuard lock(&mu_);
    CompleteAllLocked();
  }

  void AdvanceClock(std::uint64_t ns) {
    core::LockGuard lock(&mu_);
    now_ns_ = SaturatingAdd(now_ns_, ns);
  }

  std::uint64_t now_ns() const {
    core::LockGuard lock(&mu_);
    return now_ns_;
  }

  std::uint64_t pending_work() {
    core::LockGuard lock(&mu_);
    std::uint64_t pending = 0;
    for (auto& [handle, s] : streams_) {
      Prune(s);
      pending += s.next_position - s.completed_position;
    }
    return pending;
  }

  std::uint64_t hazards() const {
    core::LockGuard lock(&mu_);
    return hazards_;
  }

  std::vector<SimHazard> hazard_log() const {
    core::LockGuard lock(&mu_);
    return hazard_log_;
  }

  std::uint64_t live_events() const {
    core::LockGuard lock(&mu_);
    return events_.size();
  }

  // --- The stream-ordered pool -----------------------------------------------

  absl::Status ConfigurePool(const PoolOptions& options) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kConfigurePool); !fault.ok()) {
      return fault;
    }
    // Like setting cudaMemPoolAttrReleaseThreshold: takes effect at the next
    // synchronization point, not at once.
    pool_options_ = options;
    return EndCall(SimOp::kConfigurePool, absl::OkStatus());
  }

  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kPoolAllocate); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kPoolAllocate, PoolAllocateLocked(bytes, stream));
  }

  absl::Status PoolFree(DeviceAddress address, Stream stream) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kPoolFree); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kPoolFree, PoolFreeLocked(address, stream));
  }

  absl::Status PoolTrim(std::uint64_t keep_bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kPoolTrim); !fault.ok()) {
      return fault;
    }
    ReleaseSegments(keep_bytes, 0);
    return EndCall(SimOp::kPoolTrim, absl::OkStatus());
  }

  absl::StatusOr<PoolUsage> GetPoolUsage() {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kGetPoolUsage); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kGetPoolUsage,
                   absl::StatusOr<PoolUsage>(pool_usage_));
  }

  // --- Faults and counters ---------------------------------------------------

  void FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
    const int index = OpIndex(op);
    if (index < 0) return;
    if (status.ok()) {
      status = absl::InternalError(
          "FailNthCall was given an OK status to fail with");
    }
    core::LockGuard lock(&mu_);
    faults_[index] = Fault{k, std::move(status)};
  }

  void ClearFaults() {
    core::LockGuard lock(&mu_);
    faults_ = {};
  }

  std::uint64_t calls(SimOp op) const {
    const int index = OpIndex(op);
    core::LockGuard lock(&mu_);
    return index < 0 ? 0 : calls_[index];
  }
  std::uint64_t failed_calls(SimOp op) const {
    const int index = OpIndex(op);
    core::LockGuard lock(&mu_);
    return index < 0 ? 0 : failed_calls_[index];
  }
  std::uint64_t modeled_ns() const {
    core::LockGuard lock(&mu_);
    return modeled_ns_;
  }
  void ResetCounters() {
    core::LockGuard lock(&mu_);
    calls_ = {};
    failed_calls_ = {};
    modeled_ns_ = 0;
  }
  std::uint64_t bytes_allocated() const {
    core::LockGuard lock(&mu_);
    return bytes_allocated_;
  }
  std::uint64_t live_allocations() const {
    core::LockGuard lock(&mu_);
    return live_.size();
  }

 private:
  static constexpr std::size_t kHazardLogSize = 64;

  struct Allocation {
    std::uint64_t size = 0;   // accounted: rounded up to the alignment
    void* mapping = nullptr;  // host-backed only: the whole mapping
    std::uint64_t mapping_length = 0;
  };
  // A pending fault: the `countdown`-th call fails with `status`; 0 is none.
  struct Fault {
    std::uint64_t countdown = 0;
    absl::Status status;
  };

  enum class Reuse { kNo, kNow, kAfterWait };

  // Counts a call of `op` and fires its pending fault when it is due.
  absl::Status BeginCall(SimOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int index = OpIndex(op);
    ++calls_[index];
    Fault& fault = faults_[index];
    if (fault.countdown == 0 || --fault.countdown != 0) return absl::OkStatus();
    ++failed_calls_[index];
    return std::exchange(fault.status, absl::OkStatus());
  }

  // Counts the outcome of a call of `op` and passes `result` through.
  template <typename T>
  T EndCall(SimOp op, T result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int index = OpIndex(op);
    if (result.ok()) {
      modeled_ns_ += cost_ns_[index];
    } else {
      ++failed_calls_[index];
    }
    return result;
  }

  absl::Status UnknownEvent(absl::string_view operation,
                            EventHandle event) const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s of event %d on %s: no such event (never created, or destroyed)",
        operation, event, info_.name));
  }

  std::uint64_t DeviceFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return info_.total_bytes - bytes_allocated_ - pool_usage_.reserved;
  }

  // Picks an address for `size` bytes (a multiple of the alignment) and, for
  // host-backed memory, maps it. Capacity is the caller's business.
  absl::StatusOr<DeviceAddress> Place(std::uint64_t size,
                                      Allocation* allocation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::uint64_t placement = info_.allocation_alignment;
    if (size >= info_.recommended_granularity &&
        info_.recommended_granularity > placement) {
      placement = info_.recommended_granularity;
    }
    const std::uint64_t guard = info_.recommended_granularity;
    allocation->size = size;
    if (memory_ == SimMemory::kFake) {
      const DeviceAddress address = AlignUp(next_fake_address_, placement);
      const std::uint64_t window_end = fake_base_ + kFakeWindow;
      if (address > window_end || size > window_end - address ||
          guard > window_end - address - size) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "fake address space of %s exhausted after %#x (%d bytes per "
            "device; addresses are never reused)",
            info_.name, next_fake_address_, kFakeWindow));
      }
      next_fake_address_ = address + size + guard;
      return address;
    }
    const std::uint64_t page = host_page_size_;
    const std::uint64_t slack = placement > page ? placement - page : 0;
    const std::uint64_t accessible = AlignUp(size, page);
    const std::uint64_t length = slack + accessible + AlignUp(guard, page);
    void* mapping = mmap(nullptr, length, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) {
      const int error = errno;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "host-backed allocation of %d bytes on %s failed: mmap of %d "
          "bytes: %s",
          size, info_.name, length, std::strerror(error)));
    }
    const DeviceAddress address =
        AlignUp(reinterpret_cast<std::uintptr_t>(mapping), placement);
    if (mprotect(reinterpret_cast<void*>(address), accessible,
                 PROT_READ | PROT_WRITE) != 0) {
      const int error = errno;
      munmap(mapping, length);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "host-backed allocation of %d bytes on %s failed: mprotect: %s", size,
          info_.name, std::strerror(error)));
    }
    allocation->mapping = mapping;
    allocation->mapping_length = length;
    return address;
  }

  absl::StatusOr<DeviceAddress> AllocateLocked(std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Allocate of 0 bytes on ", info_.name,
                       ": the size must be positive"));
    }
    // total_bytes, bytes_allocated_ and the pool's segments are multiples of
    // the alignment, so a request that fits also fits once rounded, and
    // rounding cannot overflow.
    const std::uint64_t free = DeviceFreeLocked();
    if (bytes > free) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "out of memory on %s: requested %d bytes, %d of %d bytes in use "
          "(%d by plain allocations, %d by the stream-ordered pool; %d free)",
          info_.name, bytes, info_.total_bytes - free, info_.total_bytes,
          bytes_allocated_, pool_usage_.reserved, free));
    }
    Allocation allocation;
    absl::StatusOr<DeviceAddress> address =
        Place(AlignUp(bytes, info_.allocation_alignment), &allocation);
    if (!address.ok()) return address.status();
    live_.emplace(*address, allocation);
    bytes_allocated_ += allocation.size;
    return *address;
  }

  absl::Status FreeLocked(DeviceAddress address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = live_.find(address);
    if (it == live_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Free of %#x on %s: not an address this device allocated, or "
          "already freed",
          address, info_.name));
    }
    const Allocation& allocation = it->second;
    if (allocation.mapping != nullptr &&
        munmap(allocation.mapping, allocation.mapping_length) != 0) {
      const int error = errno;
      return absl::InternalError(
          absl::StrFormat("Free of %#x on %s: munmap: %s", address, info_.name,
                          std::strerror(error)));
    }
    bytes_allocated_ -= allocation.size;
    live_.erase(it);
    // cudaFree synchronizes the device: everything queued completes, and the
    // host has seen it (a synchronization point for the pool as well).
    CompleteAllLocked();
    for (auto& [handle, s] : streams_) {
      Prune(s);
      s.observed_position = s.completed_position;
    }
    ReleaseAboveThreshold();
    return absl::OkStatus();
  }

  // --- Streams ---------------------------------------------------------------

  StreamState& GetStream(std::uintptr_t handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return streams_[handle];  // unordered_map: references stay valid
  }

  // Modeled: marks the pieces whose end has passed as complete. Both: drops
  // completed pieces from the hazard index.
  void Prune(StreamState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (modeled_clock_) {
      while (!s.ends.empty() && s.ends.front() <= now_ns_) {
        s.ends.pop_front();
        ++s.completed_position;
      }
    }
    while (!s.by_position.empty() &&
           s.by_position.begin()->first <= s.completed_position) {
      const auto [position, start] = *s.by_position.begin();
      auto [first, last] = s.by_address.equal_range(start);
      for (auto it = first; it != last; ++it) {
        if (it->second.position == position) {
          s.by_address.erase(it);
          break;
        }
      }
      s.by_position.erase(s.by_position.begin());
    }
    if (s.by_address.empty()) s.longest = 0;
  }

  void Index(StreamState& s, DeviceAddress start, DeviceAddress end,
             std::uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Erasing from a btree invalidates other iterators: no saved end.
    for (auto it = s.by_address.lower_bound(start);
         it != s.by_address.end() && it->first == start;) {
      if (it->second.end <= end) {
        s.by_position.erase(it->second.position);
        it = s.by_address.erase(it);
      } else {
        ++it;
      }
    }
    s.by_address.emplace(start, IndexedPiece{end, position});
    s.by_position.emplace(position, start);
    s.longest = std::max(s.longest, end - start);
  }

  // The first pending piece of `s` past position `ordered` that overlaps
  // [start, end), as the overlapping range.
  static std::optional<std::pair<DeviceAddress, DeviceAddress>> FindUnordered(
      const StreamState& s, DeviceAddress start, DeviceAddress end,
      std::uint64_t ordered) {
    const DeviceAddress from = start >= s.longest ? start - s.longest + 1 : 0;
    for (auto it = s.by_address.lower_bound(from);
         it != s.by_address.end() && it->first < end; ++it) {
      if (it->second.end <= start || it->second.position <= ordered) continue;
      return std::make_pair(std::max(start, it->first),
                            std::min(end, it->second.end));
    }
    return std::nullopt;
  }

  // Manual clock: completes the first `position` pieces of `s`. The caller
  // completes what they wait for.
  void CompleteUpTo(StreamState& s, std::uint64_t position)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    position = std::min(position, s.next_position);
    if (position <= s.completed_position) return;
    s.completed_position = position;
    Prune(s);
  }

  // Manual clock: completes the work `clock` covers. Clocks are transitively
  // closed, so this completes everything that work waits for as well.
  void CompleteClock(const VectorClock& clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [handle, position] : clock) {
      CompleteUpTo(GetStream(handle), position);
    }
  }

  void CompleteAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [handle, s] : streams_) {
      if (modeled_clock_) {
        now_ns_ = std::max(now_ns_, s.ready_ns);
      } else {
        CompleteUpTo(s, s.next_position);
      }
    }
  }

  // Whether all the work `clock` covers has completed.
  bool Completed(const VectorClock& clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [handle, position] : clock) {
      StreamState& s = GetStream(handle);
      Prune(s);
      if (s.completed_position < position) return false;
    }
    return true;
  }

  // Whether a host synchronization point has seen all of it complete.
  bool Observed(const VectorClock& clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [handle, position] : clock) {
      if (GetStream(handle).observed_position < position) return false;
    }
    return true;
  }

  // A host synchronization point that saw the work `clock` covers complete.
  void Observe(const VectorClock& clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [handle, position] : clock) {
      StreamState& s = GetStream(handle);
      Prune(s);
      s.observed_position = std::max(s.observed_position,
                                     std::min(position, s.completed_position));
    }
  }

  // Orders the future work of `stream` after the work `clock` covers.
  void Wait(std::uintptr_t stream, const VectorClock& clock,
            std::uint64_t done_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    StreamState& s = GetStream(stream);
    for (const auto& [handle, position] : clock) {
      // A stream is always ordered after its own earlier work.
      if (handle != stream) ClockRaise(&s.clock, handle, position);
    }
    s.ready_ns = std::max(s.ready_ns, done_ns);
  }

  // --- Pool ------------------------------------------------------------------

  // Whether a block freed under `freed` may be handed to `stream` (`s`), and
  // at what price.
  Reuse CanReuse(const FreeCondition& freed, std::uintptr_t stream,
                 const StreamState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!freed.mixed && freed.stream == stream) return Reuse::kNow;
    // What a synchronization point saw freed is available to every stream
    // regardless of the reuse rules, as in CUDA.
    if (Observed(freed.clock)) return Reuse::kNow;
    const PoolReuse& rules = pool_options_.reuse;
    if (rules.follow_event_dependencies) {
      bool covered = true;
      for (const auto& [handle, position] : freed.clock) {
        if (handle != stream && ClockAt(s.clock, handle) < position) {
          covered = false;
          break;
        }
      }
      if (covered) return Reuse::kNow;
    }
    if (rules.opportunistic && Completed(freed.clock)) return Reuse::kNow;
    if (rules.internal_dependencies) return Reuse::kAfterWait;
    return Reuse::kNo;
  }

  // The condition of a block merged from two free neighbours: the strictest
  // of the two, except that a part whose free a synchronization point saw
  // imposes nothing.
  FreeCondition MergeConditions(const FreeCondition& a, const FreeCondition& b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (Observed(a.clock)) return b;
    if (Observed(b.clock)) return a;
    FreeCondition merged = a;
    merged.mixed = a.mixed || b.mixed || a.stream != b.stream;
    for (const auto& [handle, position] : b.clock) {
      ClockRaise(&merged.clock, handle, position);
    }
    merged.done_ns = std::max(a.done_ns, b.done_ns);
    return merged;
  }

  void NotePoolUse(std::uint64_t more_used) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pool_usage_.used += more_used;
    pool_usage_.peak_used = std::max(pool_usage_.peak_used, pool_usage_.used);
    pool_usage_.peak_reserved =
        std::max(pool_usage_.peak_reserved, pool_usage_.reserved);
  }

  std::uint64_t LargestPoolFreeBlock() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pool_free_.empty() ? 0 : pool_free_.rbegin()->first;
  }

  // Adds a segment of `size` bytes (a multiple of the granularity) holding one
  // free block with no condition.
  absl::StatusOr<DeviceAddress> GrowPool(std::uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Allocation segment;
    absl::StatusOr<DeviceAddress> address = Place(size, &segment);
    if (!address.ok()) return address.status();
    pool_segments_.emplace(*address, segment);
    PoolBlock block;
    block.size = size;
    block.segment = *address;
    pool_blocks_.emplace(*address, std::move(block));
    pool_free_.emplace(size, *address);
    pool_usage_.reserved += size;
    NotePoolUse(0);
    // The device pays for the physical allocation behind the segment.
    modeled_ns_ += cost_ns_[OpIndex(SimOp::kAllocate)];
    return *address;
  }

  bool Releasable(DeviceAddress start, const Allocation& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto block = pool_blocks_.find(start);
    return block != pool_blocks_.end() && block->second.free &&
           block->second.size == segment.size &&
           Completed(block->second.freed.clock);
  }

  std::uint64_t ReleasableBytes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::uint64_t bytes = 0;
    for (const auto& [start, segment] : pool_segments_) {
      if (Releasable(start, segment)) bytes += segment.size;
    }
    return bytes;
  }

  // Returns fully free segments whose frees have completed to the device,
  // newest address first, until the pool holds at most `keep` bytes and the
  // device has `want_free` bytes free.
  void ReleaseSegments(std::uint64_t keep, std::uint64_t want_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = pool_segments_.end(); it != pool_segments_.begin();) {
      if (pool_usage_.reserved <= keep && DeviceFreeLocked() >= want_free) {
        return;
      }
      --it;
      const DeviceAddress start = it->first;
      const Allocation& segment = it->second;
      if (!Releasable(start, segment)) continue;
      if (segment.mapping != nullptr) {
        // A failed munmap leaks host address space, nothing the simulated
        // device would notice; the segment is gone either way.
        (void)munmap(segment.mapping, segment.mapping_length);
      }
      pool_free_.erase({segment.size, start});
      pool_blocks_.erase(start);
      pool_freed_starts_.erase(
          pool_freed_starts_.lower_bound(start),
          pool_freed_starts_.lower_bound(start + segment.size));
      pool_usage_.reserved -= segment.size;
      modeled_ns_ += cost_ns_[OpIndex(SimOp::kFree)];
      it = pool_segments_.erase(it);
    }
  }

  void ReleaseAboveThreshold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pool_usage_.reserved > pool_options_.release_threshold) {
      ReleaseSegments(pool_options_.release_threshold, 0);
    }
  }

  absl::Status PoolOutOfMemory(std::uint64_t bytes, Stream stream,
                               std::uint64_t segment) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "PoolAllocate of %d bytes on stream %#x on %s: out of memory: the "
        "pool holds %d bytes (%d in use, largest free block %d) and needs "
        "a new segment of %d bytes; the device has %d of %d bytes free",
        bytes, stream.handle, info_.name, pool_usage_.reserved,
        pool_usage_.used, LargestPoolFreeBlock(), segment, DeviceFreeLocked(),
        info_.total_bytes));
  }

  absl::StatusOr<DeviceAddress> PoolAllocateLocked(std::uint64_t bytes,
                                                   Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PoolAllocate of 0 bytes on stream %#x on %s: the size must be "
          "positive",
          stream.handle, info_.name));
    }
    if (bytes > info_.total_bytes) return PoolOutOfMemory(bytes, stream, bytes);
    const std::uint64_t size = AlignUp(bytes, info_.allocation_alignment);
    StreamState& s = GetStream(stream.handle);

    // Best fit among the blocks the stream can use without a new dependency;
    // failing that, best fit among those it can use after one, since an
    // inserted wait serializes streams that need not be.
    std::optional<DeviceAddress> chosen;
    std::optional<DeviceAddress> after_wait;
    for (auto it = pool_free_.lower_bound({size, 0}); it != pool_free_.end();
         ++it) {
      const Reuse reuse =
          CanReuse(pool_blocks_.at(it->second).freed, stream.handle, s);
      if (reuse == Reuse::kNow) {
        chosen = it->second;
        break;
      }
      if (reuse == Reuse::kAfterWait && !after_wait.has_value()) {
        after_wait = it->second;
      }
    }
    if (!chosen.has_value() && after_wait.has_value()) {
      const FreeCondition& freed = pool_blocks_.at(*after_wait).freed;
      Wait(stream.handle, freed.clock, freed.done_ns);
      chosen = after_wait;
    }
    if (!chosen.has_value()) {
      const std::uint64_t granule = info_.recommended_granularity;
      if (size > std::numeric_limits<std::uint64_t>::max() - granule) {
        return PoolOutOfMemory(bytes, stream, size);
      }
      const std::uint64_t segment = AlignUp(size, granule);
      // Completed free segments go back first, the way a driver trims its
      // pool before failing an allocation; but only when that makes room,
      // since a failed call changes nothing.
      if (segment > DeviceFreeLocked()) {
        if (segment - DeviceFreeLocked() > ReleasableBytes()) {
          return PoolOutOfMemory(bytes, stream, segment);
        }
        ReleaseSegments(0, segment);
      }
      absl::StatusOr<DeviceAddress> grown = GrowPool(segment);
      if (!grown.ok()) return grown.status();
      chosen = *grown;
    }

    const DeviceAddress address = *chosen;
    PoolBlock& block = pool_blocks_.at(address);
    pool_free_.erase({block.size, address});
    if (block.size > size) {
      PoolBlock rest;
      rest.size = block.size - size;
      rest.segment = block.segment;
      rest.freed = block.freed;
      pool_free_.emplace(rest.size, address + size);
      pool_blocks_.emplace(address + size, std::move(rest));
    }
    PoolBlock& taken = pool_blocks_.at(address);  // emplace may move blocks
    taken.size = size;
    taken.free = false;
    taken.freed = FreeCondition{};
    pool_freed_starts_.erase(pool_freed_starts_.lower_bound(address),
                             pool_freed_starts_.lower_bound(address + size));
    NotePoolUse(size);
    return address;
  }

  absl::Status PoolFreeLocked(DeviceAddress address, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = pool_blocks_.find(address);
    if (pool_freed_starts_.contains(address)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("PoolFree of %#x on stream %#x on %s: already freed",
                          address, stream.handle, info_.name));
    }
    if (it == pool_blocks_.end() || it->second.free) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PoolFree of %#x on stream %#x on %s: not an address the pool "
          "handed out",
          address, stream.handle, info_.name));
    }
    const StreamState& s = GetStream(stream.handle);
    PoolBlock& block = it->second;
    block.free = true;
    block.freed.stream = stream.handle;
    block.freed.mixed = false;
    block.freed.clock = s.clock;
    ClockRaise(&block.freed.clock, stream.handle, s.next_position);
    block.freed.done_ns = s.ready_ns;
    pool_freed_starts_.insert(address);
    pool_usage_.used -= block.size;

    // Merge with free neighbours of the same segment.
    DeviceAddress start = address;
    auto next = std::next(it);
    if (next != pool_blocks_.end() && next->second.free &&
        next->second.segment == block.segment &&
        start + block.size == next->first) {
      pool_free_.erase({next->second.size, next->first});
      block.freed = MergeConditions(block.freed, next->second.freed);
      block.size += next->second.size;
      pool_blocks_.erase(next);
      it = pool_blocks_.find(start);  // erase may move blocks
    }
    if (it != pool_blocks_.begin()) {
      auto prev = std::prev(it);
      PoolBlock& before = prev->second;
      if (before.free && before.segment == it->second.segment &&
          prev->first + before.size == start) {
        pool_free_.erase({before.size, prev->first});
        before.freed = MergeConditions(before.freed, it->second.freed);
        before.size += it->second.size;
        start = prev->first;
        pool_blocks_.erase(it);
      }
    }
    const PoolBlock& merged = pool_blocks_.at(start);
    pool_free_.emplace(merged.size, start);
    return absl::OkStatus();
  }

  const SimMemory memory_;
  const std::array<std::uint64_t, kNumSimOps> cost_ns_;
  const DeviceInfo info_;
  const DeviceAddress fake_base_;
  const std::uint64_t host_page_size_;
  const bool modeled_clock_;
  const std::uint64_t work_ns_;

  mutable core::Lock mu_;
  DeviceAddress next_fake_address_ ABSL_GUARDED_BY(mu_);
  std::uint64_t bytes_allocated_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<DeviceAddress, Allocation> live_ ABSL_GUARDED_BY(mu_);
  std::array<Fault, kNumSimOps> faults_ ABSL_GUARDED_BY(mu_);
  std::array<std::uint64_t, kNumSimOps> calls_ ABSL_GUARDED_BY(mu_) = {};
  std::array<std::uint64_t, kNumSimOps> failed_calls_ ABSL_GUARDED_BY(mu_) = {};
  std::uint64_t modeled_ns_ ABSL_GUARDED_BY(mu_) = 0;

  std::unordered_map<std::uintptr_t, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<EventHandle, Event> events_ ABSL_GUARDED_BY(mu_);
  EventHandle next_event_ ABSL_GUARDED_BY(mu_) = 1;
  std::uint64_t now_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t hazards_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SimHazard> hazard_log_ ABSL_GUARDED_BY(mu_);

  PoolOptions pool_options_ ABSL_GUARDED_BY(mu_);
  PoolUsage pool_usage_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<DeviceAddress, Allocation> pool_segments_
      ABSL_GUARDED_BY(mu_);
  absl::btree_map<DeviceAddress, PoolBlock> pool_blocks_ ABSL_GUARDED_BY(mu_);
  // Free blocks by (size, address): best fit, lowest address first.
  absl::btree_set<std::pair<std::uint64_t, DeviceAddress>> pool_free_
      ABSL_GUARDED_BY(mu_);
  // Addresses PoolAllocate handed out that were freed and not handed out
  // again: a second PoolFree of one is a double free (FailedPrecondition),
  // not an unknown address.
  absl::btree_set<DeviceAddress> pool_freed_starts_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::shared_ptr<SimBackend>> SimBackend::Create(
    const SimOptions& options) {
  absl::StatusOr<const ArchProfile*> found = FindArchProfile(options.profile);
  if (!found.ok()) {
    return InvalidField("profile", found.status().message());
  }
  const ArchProfile& profile = **found;

  DeviceInfo info;
  info.backend = "sim";
  info.vendor = profile.vendor;
  info.name =
      absl::StrCat("simulated ", profile.description, " (", profile.name, ")");
  info.arch_id = profile.arch_ids.empty() ? std::string()
                                          : std::string(profile.arch_ids[0]);
  info.ordinal = options.ordinal;
  info.total_bytes =
      options.total_bytes != 0 ? options.total_bytes : profile.memory_bytes;
  info.min_granularity = options.min_granularity != 0 ? options.min_granularity
                                                      : profile.min_granularity;
  info.recommended_granularity = options.recommended_granularity != 0
                                     ? options.recommended_granularity
                                     : profile.recommended_granularity;
  info.allocation_alignment = options.allocation_alignment != 0
                                  ? options.allocation_alignment
                                  : profile.allocation_alignment;
  info.page_sizes = profile.page_sizes;
  info.capabilities.virtual_memory = false;
  info.capabilities.streams = options.streams;
  // A stream-ordered pool allocates and frees on streams: without streams
  // there is no pool either.
  info.capabilities.stream_ordered_pools =
      options.streams && options.stream_ordered_pools;
  info.capabilities.host_accessible = options.memory == SimMemory::kHostBacked;
  info.driver_version = "gpualloc-sim";

  if (options.memory != SimMemory::kFake &&
      options.memory != SimMemory::kHostBacked) {
    return InvalidField("memory", "neither kFake nor kHostBacked");
  }
  if (options.clock != SimClock::kManual &&
      options.clock != SimClock::kModeled) {
    return InvalidField("clock", "neither kManual nor kModeled");
  }
  if (options.ordinal < 0 || options.ordinal > kMaxOrdinal) {
    return InvalidField(
        "ordinal",
        absl::StrCat(options.ordinal, " is outside [0, ", kMaxOrdinal, "]"));
  }
  if (!IsPowerOfTwo(info.min_granularity)) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity, " is not a power of two"));
  }
  if (!IsPowerOfTwo(info.recommended_granularity)) {
    return InvalidField(
        "recommended_granularity",
        absl::StrCat(info.recommended_granularity, " is not a power of two"));
  }
  if (info.min_granularity > info.recommended_granularity) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity,
                     " exceeds SimOptions.recommended_granularity (",
                     info.recommended_granularity, ")"));
  }
  if (!IsPowerOfTwo(info.allocation_alignment)) {
    return InvalidField(
        "allocation_alignment",
        absl::StrCat(info.allocation_alignment, " is not a power of two"));
  }
  if (info.total_bytes == 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat("must be given: profile ", profile.name,
                     " has no memory size (generic profiles take it from "
                     "the device)"));
  }
  // Real devices report totals that are not granule multiples (an H200 shows
  // 143771 MiB, an odd number of 2 MiB granules), so the total only has to be
  // a whole number of plain-allocation units: then the device can be filled
  // exactly and capacity checks cannot overflow.
  if (info.total_bytes % info.allocation_alignment != 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat(info.total_bytes,
                     " is not a multiple of the allocation alignment (",
                     info.allocation_alignment, ")"));
  }

  auto impl = std::make_unique<Impl>(options, std::move(info));
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
  impl_->CompleteStream(stream);
}
void SimBackend::CompleteAll() { impl_->CompleteAll(); }
void SimBackend::AdvanceClock(std::uint64_t ns) { impl_->AdvanceClock(ns); }
std::uint64_t SimBackend::now_ns() const { return impl_->now_ns(); }
std::uint64_t SimBackend::pending_work() const { return impl_->pending_work(); }
std::uint64_t SimBackend::hazards() const { return impl_->hazards(); }
std::vector<SimHazard> SimBackend::hazard_log() const {
  return impl_->hazard_log();
}
std::uint64_t SimBackend::live_events() const { return impl_->live_events(); }
void SimBackend::FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
  impl_->FailNthCall(op, k, std::move(status));
}
void SimBackend::ClearFaults() { impl_->ClearFaults(); }
std::uint64_t SimBackend::calls(SimOp op) const { return impl_->calls(op); }
std::uint64_t SimBackend::failed_calls(SimOp op) const {
  return impl_->failed_calls(op);
}
std::uint64_t SimBackend::modeled_ns() const { return impl_->modeled_ns(); }
void SimBackend::ResetCounters() { impl_->ResetCounters(); }
std::uint64_t SimBackend::bytes_allocated() const {
  return impl_->bytes_allocated();
}
std::uint64_t SimBackend::live_allocations() const {
  return impl_->live_allocations();
}

}  // namespace gpualloc
