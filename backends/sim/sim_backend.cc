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
//    modeled cost: per call plus per MiB it handles (the profile's figures
//    unless the options say otherwise), and for a host wait the pending work
//    it waits for. A call that fails changes no state other than the counters.
//  - Streams: a stream is its count of queued pieces (positions 1, 2, ...),
//    how many of them completed, and a vector clock: per other stream, the
//    position its future work is ordered after. An event captures the
//    recording stream's position plus its clock, so clocks are transitively
//    closed and "is X's piece p ordered before this stream's work" is one
//    lookup. Completion is a prefix of each queue (pieces of one stream end in
//    order on the modeled clock too), so completing is moving a counter, and
//    completed pieces are dropped.
//  - The hazard detector indexes each stream's pending pieces by start
//    address (and by position, to drop them as they complete), and every
//    stream's pieces together by start address in classes of length (2^k to
//    2^(k+1) - 1 bytes). A Use finds the streams with a pending piece that can
//    overlap its range in that shared index (per class, the pieces starting
//    less than the class's longest length before the range), then scans only
//    those streams' own pieces: its cost does not grow with the number of
//    streams, only with the pieces near its range. A piece covered by a later
//    one of the same stream at the same start is dropped at once, so reusing
//    one block on one stream keeps one entry however long nothing completes.
//    Modeled clock: streams are kept in order of their first pending end, so
//    the pieces whose end has passed are dropped as the clock moves, without
//    visiting the other streams.
//  - Virtual memory: reservations, physical handles and mappings are three
//    maps; a mapping is always a whole handle, so a handle counts its
//    mappings and a released one lives (and counts against the capacity)
//    until the last goes. Accessible memory is a set of disjoint, merged
//    ranges, so "is all of [a, b) accessible" is one lookup. Every rule is
//    checked before any system call, and system calls come before any
//    bookkeeping changes, so a failed call changes nothing. Fake
//    reservations come down from the top of the ordinal's window while plain
//    allocations go up from the bottom; each side checks the other's mark.
//    Host-backed ones are real: PROT_NONE anonymous reservations, memfd
//    handles mapped MAP_SHARED | MAP_FIXED over them, mprotect for access.
//  - Use checks that its range is usable (one live allocation, one pool
//    segment, or accessible mapped memory) and counts an access violation
//    otherwise; Unmap counts a hazard per stream whose incomplete work
//    still touches the range.
//  - The pool carves blocks out of segments taken like plain allocations
//    (same placement, guards and host mappings). Each free block carries the
//    condition of its free: the freeing stream, its clock at the free, and
//    whether it merged frees of several streams; the reuse rules are checked
//    against that condition when a block is considered.
//
// Thread safety: one lock (core::Lock, the project's annotated futex mutex; it
// is also visible to ThreadSanitizer, which Debian's prebuilt absl::Mutex is
// not) guards all mutable state; DeviceInfo and the options are immutable
// after Create.

#include "gpualloc/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
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
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
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

// REQUIRES: `alignment` is a power of two and the result does not overflow.
std::uint64_t AlignUp(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

int OpIndex(SimOp op) {
  const int index = static_cast<int>(op);
  return index >= 0 && index < kNumSimOps ? index : -1;
}

// The cost model after SimOptions' kProfileCost entries took the profile's
// figures.
struct CostModel {
  std::array<std::uint64_t, kNumSimOps> call_ns = {};
  std::array<std::uint64_t, kNumSimOps> per_mib_ns = {};
  std::uint64_t wait_ns_per_piece = 0;
};

CostModel ResolveCosts(const SimOptions& options, const ArchProfile& profile) {
  const DriverCosts& d = profile.costs;
  const std::pair<SimOp, const CallCost*> from_profile[] = {
      {SimOp::kAllocate, &d.allocate},
      {SimOp::kFree, &d.free},
      {SimOp::kReserveAddress, &d.reserve_address},
      {SimOp::kFreeAddress, &d.free_address},
      {SimOp::kCreatePhysical, &d.create_physical},
      {SimOp::kReleasePhysical, &d.release_physical},
      {SimOp::kMap, &d.map},
      {SimOp::kUnmap, &d.unmap},
      {SimOp::kSetAccess, &d.set_access}};
  CostModel model;
  model.call_ns = options.cost_ns;
  model.per_mib_ns = options.cost_ns_per_mib;
  for (const auto& [op, cost] : from_profile) {
    const auto index = static_cast<std::size_t>(op);
    if (model.call_ns[index] == SimOptions::kProfileCost) {
      model.call_ns[index] = cost->call_ns;
    }
    if (model.per_mib_ns[index] == SimOptions::kProfileCost) {
      model.per_mib_ns[index] = cost->per_mib_ns;
    }
  }
  // An op the profile has no figure for: a kProfileCost left there costs 0.
  for (std::uint64_t& ns : model.call_ns) {
    if (ns == SimOptions::kProfileCost) ns = 0;
  }
  for (std::uint64_t& ns : model.per_mib_ns) {
    if (ns == SimOptions::kProfileCost) ns = 0;
  }
  model.wait_ns_per_piece = options.host_wait_ns_per_piece != 0
                                ? options.host_wait_ns_per_piece
                                : options.work_ns;
  return model;
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
  std::uintptr_t handle = 0;        // the stream's own handle
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
    case SimOp::kReserveAddress:
      return "reserve_address";
    case SimOp::kFreeAddress:
      return "free_address";
    case SimOp::kCreatePhysical:
      return "create_physical";
    case SimOp::kReleasePhysical:
      return "release_physical";
    case SimOp::kMap:
      return "map";
    case SimOp::kUnmap:
      return "unmap";
    case SimOp::kSetAccess:
      return "set_access";
    case SimOp::kCount:
      break;
  }
  return "invalid";
}

std::string SimHazard::ToString() const {
  switch (kind) {
    case SimHazardKind::kStreamOrder:
      break;
    case SimHazardKind::kUnmapInUse:
      return absl::StrFormat(
          "hazard: Unmap of [%#x, %#x) (%d bytes) while work queued on stream "
          "%#x still uses it (unmap only after the work's events completed)",
          address, address + bytes, bytes, other.handle);
    case SimHazardKind::kInaccessible:
      return absl::StrFormat(
          "access violation: stream %#x touched [%#x, %#x) (%d bytes), which "
          "is not inside one live allocation, pool segment or mapped range "
          "with access set",
          stream.handle, address, address + bytes, bytes);
  }
  return absl::StrFormat(
      "hazard: stream %#x touched [%#x, %#x) (%d bytes) while work queued on "
      "stream %#x still uses it and stream %#x was not made to wait for it",
      stream.handle, address, address + bytes, bytes, other.handle,
      stream.handle);
}

class SimBackend::Impl {
 public:
  Impl(const SimOptions& options, DeviceInfo info, const CostModel& costs)
      : memory_(options.memory),
        costs_(costs),
        info_(std::move(info)),
        fake_base_(kFakeBase +
                   static_cast<std::uint64_t>(options.ordinal) * kFakeWindow),
        host_page_size_(static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))),
        modeled_clock_(options.clock == SimClock::kModeled),
        work_ns_(options.work_ns),
        next_fake_address_(fake_base_),
        fake_reserve_low_(fake_base_ + kFakeWindow) {}

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
    if (memory_ == SimMemory::kHostBacked) {
      // A reservation's munmap takes its mappings with it.
      for (const auto& [address, reservation] : reservations_) {
        munmap(reinterpret_cast<void*>(address), reservation.size);
      }
      for (const auto& [handle, physical] : physicals_) {
        if (physical.fd >= 0) close(physical.fd);
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
    return EndCall(SimOp::kAllocate, AllocateLocked(bytes), bytes);
  }

  absl::Status Free(DeviceAddress address) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFree); !fault.ok()) {
      return fault;
    }
    const auto live = live_.find(address);
    const std::uint64_t bytes = live != live_.end() ? live->second.size : 0;
    return EndCall(SimOp::kFree, FreeLocked(address), bytes);
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
    if (absl::Status s = CheckNotDestroyed(stream, "RecordEvent"); !s.ok()) {
      return EndCall(SimOp::kRecordEvent, s);
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
    if (absl::Status s = CheckNotDestroyed(stream, "StreamWaitEvent");
        !s.ok()) {
      return EndCall(SimOp::kStreamWaitEvent, s);
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
    // The host waits for the captured work: that is the call's cost too.
    std::uint64_t wait_ns = 0;
    if (modeled_clock_) {
      wait_ns = e.done_ns > now_ns_ ? e.done_ns - now_ns_ : 0;
      now_ns_ = std::max(now_ns_, e.done_ns);
    } else {
      std::uint64_t most = 0;
      for (const auto& [handle, position] : e.clock) {
        most = std::max(most, PendingUpTo(GetStream(handle), position));
      }
      wait_ns = WaitCostNs(most);
      CompleteClock(e.clock);
    }
    modeled_ns_ = SaturatingAdd(modeled_ns_, wait_ns);
    Observe(e.clock);
    ReleaseAboveThreshold();
    return EndCall(SimOp::kSynchronizeEvent, absl::OkStatus());
  }

  // --- Device work -----------------------------------------------------------

  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns) {
    core::LockGuard lock(&mu_);
    if (duration_ns == 0) duration_ns = work_ns_;
    destroyed_streams_.erase(stream.handle);  // a new stream with the handle
    const DeviceAddress end = SaturatingEnd(address, bytes);
    StreamState& s = GetStream(stream.handle);
    if (end > address && !UsableLocked(address, end)) {
      ++access_violations_;
      if (access_violation_log_.size() < kHazardLogSize) {
        access_violation_log_.push_back(SimHazard{SimHazardKind::kInaccessible,
                                                  stream, stream, address,
                                                  end - address});
      }
    }
    if (end > address) {
      PruneEnded();
      for (const std::uintptr_t handle : StreamsNear(address, end)) {
        if (handle == stream.handle) continue;
        StreamState& other = GetStream(handle);
        Prune(other);
        const std::optional<std::pair<DeviceAddress, DeviceAddress>> overlap =
            FindUnordered(other, address, end, ClockAt(s.clock, handle));
        if (!overlap.has_value()) continue;
        ++hazards_;
        if (hazard_log_.size() < kHazardLogSize) {
          hazard_log_.push_back(SimHazard{SimHazardKind::kStreamOrder, stream,
                                          Stream(handle), overlap->first,
                                          overlap->second - overlap->first});
        }
      }
    }
    const std::uint64_t position = ++s.next_position;
    if (modeled_clock_) {
      const std::uint64_t start = std::max(now_ns_, s.ready_ns);
      s.ready_ns = SaturatingAdd(start, duration_ns);
      s.ends.push_back(s.ready_ns);
      if (s.ends.size() == 1) first_ends_.emplace(s.ends.front(), s.handle);
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

  void DestroyStream(Stream stream) {
    core::LockGuard lock(&mu_);
    destroyed_streams_.insert(stream.handle);
  }

  std::uint64_t calls_on_destroyed_streams() const {
    core::LockGuard lock(&mu_);
    return calls_on_destroyed_streams_;
  }

  // FailedPrecondition for a call naming a destroyed stream.
  absl::Status CheckNotDestroyed(Stream stream, absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!destroyed_streams_.contains(stream.handle)) return absl::OkStatus();
    ++calls_on_destroyed_streams_;
    return absl::FailedPreconditionError(
        absl::StrFormat("sim: %s on stream %#x, which the program destroyed",
                        call, stream.handle));
  }

  void OrderStreams(Stream waiter, Stream other) {
    core::LockGuard lock(&mu_);
    destroyed_streams_.erase(waiter.handle);  // a new stream with the handle
    if (waiter.handle == other.handle) return;
    const StreamState& s = GetStream(other.handle);
    VectorClock clock = s.clock;
    ClockRaise(&clock, other.handle, s.next_position);
    const std::uint64_t done_ns = s.ready_ns;
    Wait(waiter.handle, clock, done_ns);
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
    if (absl::Status s = CheckNotDestroyed(stream, "PoolAllocate"); !s.ok()) {
      return EndCall(SimOp::kPoolAllocate, absl::StatusOr<DeviceAddress>(s));
    }
    return EndCall(SimOp::kPoolAllocate, PoolAllocateLocked(bytes, stream));
  }

  absl::Status PoolFree(DeviceAddress address, Stream stream) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kPoolFree); !fault.ok()) {
      return fault;
    }
    if (absl::Status s = CheckNotDestroyed(stream, "PoolFree"); !s.ok()) {
      return EndCall(SimOp::kPoolFree, s);
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

  // --- Virtual memory --------------------------------------------------------

  absl::StatusOr<DeviceAddress> ReserveAddress(std::uint64_t bytes,
                                               std::uint64_t alignment) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kReserveAddress); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kReserveAddress,
                   ReserveAddressLocked(bytes, alignment));
  }

  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kFreeAddress); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kFreeAddress, FreeAddressLocked(address, bytes));
  }

  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kCreatePhysical); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kCreatePhysical, CreatePhysicalLocked(bytes), bytes);
  }

  absl::Status ReleasePhysical(PhysicalHandle handle) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kReleasePhysical); !fault.ok()) {
      return fault;
    }
    const auto physical = physicals_.find(handle);
    const std::uint64_t bytes =
        physical != physicals_.end() ? physical->second.size : 0;
    return EndCall(SimOp::kReleasePhysical, ReleasePhysicalLocked(handle),
                   bytes);
  }

  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kMap); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kMap, MapLocked(address, bytes, handle), bytes);
  }

  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kUnmap); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kUnmap, UnmapLocked(address, bytes), bytes);
  }

  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes) {
    core::LockGuard lock(&mu_);
    if (absl::Status fault = BeginCall(SimOp::kSetAccess); !fault.ok()) {
      return fault;
    }
    return EndCall(SimOp::kSetAccess, SetAccessLocked(address, bytes), bytes);
  }

  std::uint64_t mapped_bytes() const {
    core::LockGuard lock(&mu_);
    return mapped_bytes_;
  }
  std::uint64_t physical_bytes() const {
    core::LockGuard lock(&mu_);
    return physical_bytes_;
  }
  std::uint64_t reserved_address_bytes() const {
    core::LockGuard lock(&mu_);
    return reserved_bytes_;
  }
  bool IsAccessible(DeviceAddress address, std::uint64_t bytes) const {
    core::LockGuard lock(&mu_);
    const DeviceAddress end = SaturatingEnd(address, bytes);
    return end > address && AccessibleLocked(address, end);
  }

  std::uint64_t access_violations() const {
    core::LockGuard lock(&mu_);
    return access_violations_;
  }
  std::vector<SimHazard> access_violation_log() const {
    core::LockGuard lock(&mu_);
    return access_violation_log_;
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
  // Immutable after construction: no lock.
  std::uint64_t CallCostNs(SimOp op, std::uint64_t bytes) const {
    const int index = OpIndex(op);
    if (index < 0) return 0;
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
    const std::uint64_t per_mib = costs_.per_mib_ns[index];
    // Whole MiB, then the rest pro rata; neither product can overflow for
    // sizes below 2^64 / per_mib MiB, and the sum saturates.
    const std::uint64_t whole = bytes / kMiB;
    const std::uint64_t bytes_ns =
        per_mib != 0 &&
                whole > std::numeric_limits<std::uint64_t>::max() / per_mib
            ? std::numeric_limits<std::uint64_t>::max()
            : SaturatingAdd(whole * per_mib, (bytes % kMiB) * per_mib / kMiB);
    return SaturatingAdd(costs_.call_ns[index], bytes_ns);
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
  T EndCall(SimOp op, T result, std::uint64_t bytes = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int index = OpIndex(op);
    if (result.ok()) {
      modeled_ns_ = SaturatingAdd(modeled_ns_, CallCostNs(op, bytes));
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
    return info_.total_bytes - bytes_allocated_ - pool_usage_.reserved -
           physical_bytes_;
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
      // Reservations come down from the top of the window.
      const std::uint64_t window_end = fake_reserve_low_;
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
          "(%d by plain allocations, %d by the stream-ordered pool, %d by "
          "physical memory handles; %d free)",
          info_.name, bytes, info_.total_bytes - free, info_.total_bytes,
          bytes_allocated_, pool_usage_.reserved, physical_bytes_, free));
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
    // host has seen it (a synchronization point for the pool as well). The
    // host waits for that work: it is part of the call's cost.
    std::uint64_t wait_ns = 0;
    if (modeled_clock_) {
      for (const auto& [handle, s] : streams_) {
        if (s.ready_ns > now_ns_) {
          wait_ns = std::max(wait_ns, s.ready_ns - now_ns_);
        }
      }
    } else {
      std::uint64_t most = 0;
      for (auto& [handle, s] : streams_) {
        most = std::max(most, PendingUpTo(s, s.next_position));
      }
      wait_ns = WaitCostNs(most);
    }
    modeled_ns_ = SaturatingAdd(modeled_ns_, wait_ns);
    CompleteAllLocked();
    for (auto& [handle, s] : streams_) {
      Prune(s);
      s.observed_position = s.completed_position;
    }
    ReleaseAboveThreshold();
    return absl::OkStatus();
  }

  // --- Virtual memory --------------------------------------------------------

  // A reservation of address space; mappings live inside reservations.
  struct Reservation {
    std::uint64_t size = 0;
  };
  // Physical memory made by CreatePhysical. A released handle stays here
  // while it is mapped (its memory is still alive), marked released.
  struct Physical {
    std::uint64_t size = 0;
    int fd = -1;  // host-backed and not released: its memfd
    bool released = false;
    std::uint64_t mappings = 0;  // how many mappings of it exist
  };
  struct Mapping {
    std::uint64_t size = 0;  // the handle's size: mappings are whole handles
    PhysicalHandle handle = 0;
  };

  absl::Status VmmInvalid(const std::string& call,
                          absl::string_view rule) const {
    return absl::InvalidArgumentError(
        absl::StrCat(call, " on ", info_.name, ": ", rule));
  }

  // The system call `what` failed with `error` during `call`.
  absl::Status SystemError(const std::string& call, absl::string_view what,
                           int error) const {
    const std::string message = absl::StrCat(call, " on ", info_.name, ": ",
                                             what, ": ", std::strerror(error));
    if (error == ENOMEM || error == EMFILE || error == ENFILE ||
        error == ENOSPC) {
      return absl::ResourceExhaustedError(message);
    }
    return absl::InternalError(message);
  }

  // Checks that `value` (the `what` of `call`) is a multiple of the minimum
  // granularity, and positive when it is a size.
  absl::Status CheckGranular(const std::string& call, absl::string_view what,
                             std::uint64_t value, bool size) const {
    const std::uint64_t granule = info_.min_granularity;
    if (size && value == 0) {
      return VmmInvalid(call, absl::StrCat(what, " must be positive"));
    }
    if (value % granule != 0) {
      return VmmInvalid(
          call, absl::StrFormat("%s %#x (%d) is not a multiple of the minimum "
                                "granularity (%d bytes)",
                                what, value, value, granule));
    }
    return absl::OkStatus();
  }

  // Checks the address, size and wrap-around of [address, address + bytes).
  absl::Status CheckRange(const std::string& call, DeviceAddress address,
                          std::uint64_t bytes) const {
    if (absl::Status s = CheckGranular(call, "the address", address, false);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckGranular(call, "the size", bytes, true);
        !s.ok()) {
      return s;
    }
    if (bytes > std::numeric_limits<std::uint64_t>::max() - address) {
      return VmmInvalid(call, "the range wraps around the address space");
    }
    return absl::OkStatus();
  }

  static std::string RangeCall(absl::string_view name, DeviceAddress address,
                               std::uint64_t bytes) {
    return absl::StrFormat("%s of [%#x, %#x) (%d bytes)", name, address,
                           address + bytes, bytes);
  }

  absl::StatusOr<DeviceAddress> ReserveAddressLocked(std::uint64_t bytes,
                                                     std::uint64_t alignment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call = absl::StrFormat(
        "ReserveAddress of %d bytes aligned to %d", bytes, alignment);
    if (absl::Status s = CheckGranular(call, "the size", bytes, true);
        !s.ok()) {
      return s;
    }
    if (alignment == 0) alignment = info_.min_granularity;
    if (!std::has_single_bit(alignment)) {
      return VmmInvalid(call, "the alignment must be a power of two");
    }
    if (absl::Status s = CheckGranular(call, "the alignment", alignment, true);
        !s.ok()) {
      return s;
    }
    DeviceAddress address = 0;
    if (memory_ == SimMemory::kFake) {
      // Down from the lowest reservation so far, a guard granule below it,
      // staying above what plain allocations and pool segments took.
      const std::uint64_t guard = info_.recommended_granularity;
      const DeviceAddress top = fake_reserve_low_;
      const DeviceAddress low = next_fake_address_;
      if (top < low || top - low < guard || top - low - guard < bytes ||
          ((top - guard - bytes) & ~(alignment - 1)) < low) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "%s on %s: fake address space exhausted: [%#x, %#x) is left "
            "between plain allocations and reservations (%d bytes per device; "
            "addresses are never reused)",
            call, info_.name, low, top, kFakeWindow));
      }
      address = (top - guard - bytes) & ~(alignment - 1);
      fake_reserve_low_ = address;
    } else {
      // Over-reserve by the alignment, then trim both ends, so that the
      // reservation is exactly [address, address + bytes).
      const std::uint64_t page = host_page_size_;
      const std::uint64_t slack = alignment > page ? alignment - page : 0;
      if (bytes > std::numeric_limits<std::uint64_t>::max() - slack) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("%s on %s: larger than the host's address space",
                            call, info_.name));
      }
      const std::uint64_t length = bytes + slack;
      void* mapping = mmap(nullptr, length, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mapping == MAP_FAILED) {
        const int error = errno;
        return absl::ResourceExhaustedError(absl::StrFormat(
            "%s on %s: mmap of %d bytes of host address space: %s", call,
            info_.name, length, std::strerror(error)));
      }
      const DeviceAddress base = reinterpret_cast<std::uintptr_t>(mapping);
      address = AlignUp(base, alignment);
      if (address > base) {
        (void)munmap(mapping, address - base);
      }
      if (base + length > address + bytes) {
        (void)munmap(reinterpret_cast<void*>(address + bytes),
                     base + length - address - bytes);
      }
    }
    reservations_.emplace(address, Reservation{bytes});
    reserved_bytes_ += bytes;
    return address;
  }

  absl::Status FreeAddressLocked(DeviceAddress address, std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call = RangeCall("FreeAddress", address, bytes);
    if (absl::Status s = CheckRange(call, address, bytes); !s.ok()) return s;
    auto it = reservations_.find(address);
    if (it == reservations_.end()) {
      const auto holder = ReservationHolding(address);
      if (holder != reservations_.end()) {
        return VmmInvalid(
            call,
            absl::StrFormat(
                "%#x is inside the reservation [%#x, %#x): FreeAddress "
                "takes a whole reservation",
                address, holder->first, holder->first + holder->second.size));
      }
      return VmmInvalid(
          call, absl::StrFormat("no reservation starts at %#x", address));
    }
    if (it->second.size != bytes) {
      return VmmInvalid(call,
                        absl::StrFormat("the reservation at %#x has %d bytes: "
                                        "FreeAddress takes a whole reservation",
                                        address, it->second.size));
    }
    const auto mapped = mappings_.lower_bound(address);
    if (mapped != mappings_.end() && mapped->first < address + bytes) {
      return VmmInvalid(
          call,
          absl::StrFormat("the mapping [%#x, %#x) of physical handle "
                          "%d is still in it: unmap it first",
                          mapped->first, mapped->first + mapped->second.size,
                          mapped->second.handle));
    }
    if (memory_ == SimMemory::kHostBacked &&
        munmap(reinterpret_cast<void*>(address), bytes) != 0) {
      return SystemError(call, "munmap", errno);
    }
    reservations_.erase(it);
    reserved_bytes_ -= bytes;
    return absl::OkStatus();
  }

  absl::StatusOr<PhysicalHandle> CreatePhysicalLocked(std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call =
        absl::StrFormat("CreatePhysical of %d bytes", bytes);
    if (absl::Status s = CheckGranular(call, "the size", bytes, true);
        !s.ok()) {
      return s;
    }
    const std::uint64_t free = DeviceFreeLocked();
    if (bytes > free) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "out of memory on %s: CreatePhysical of %d bytes, %d of %d bytes in "
          "use (%d by plain allocations, %d by the stream-ordered pool, %d by "
          "physical memory handles; %d free)",
          info_.name, bytes, info_.total_bytes - free, info_.total_bytes,
          bytes_allocated_, pool_usage_.reserved, physical_bytes_, free));
    }
    Physical physical;
    physical.size = bytes;
    if (memory_ == SimMemory::kHostBacked) {
      const int fd = memfd_create("gpualloc-sim-physical", MFD_CLOEXEC);
      if (fd < 0) return SystemError(call, "memfd_create", errno);
      if (bytes >
              static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
          ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        const int error = errno;
        close(fd);
        return SystemError(call, "ftruncate of the memfd", error);
      }
      physical.fd = fd;
    }
    const PhysicalHandle handle = next_physical_++;
    physicals_.emplace(handle, physical);
    physical_bytes_ += bytes;
    return handle;
  }

  absl::Status ReleasePhysicalLocked(PhysicalHandle handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call =
        absl::StrFormat("ReleasePhysical of handle %d", handle);
    auto it = physicals_.find(handle);
    if (it == physicals_.end()) {
      return VmmInvalid(call,
                        "no such physical handle (never created, or released "
                        "and no longer mapped)");
    }
    Physical& physical = it->second;
    if (physical.released) {
      return VmmInvalid(
          call, absl::StrFormat("the handle was already released (its %d "
                                "bytes stay until its %d mapping(s) go)",
                                physical.size, physical.mappings));
    }
    if (physical.fd >= 0) {
      // Whatever close answers, the descriptor is gone (Linux frees it
      // before reporting an error).
      const int fd = std::exchange(physical.fd, -1);
      if (close(fd) != 0) return SystemError(call, "close of the memfd", errno);
    }
    if (physical.mappings > 0) {
      physical.released = true;  // alive until its last mapping goes
      return absl::OkStatus();
    }
    physical_bytes_ -= physical.size;
    physicals_.erase(it);
    return absl::OkStatus();
  }

  absl::Status MapLocked(DeviceAddress address, std::uint64_t bytes,
                         PhysicalHandle handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call = absl::StrCat(RangeCall("Map", address, bytes),
                                          " to physical handle ", handle);
    if (absl::Status s = CheckRange(call, address, bytes); !s.ok()) return s;
    const DeviceAddress end = address + bytes;
    auto physical = physicals_.find(handle);
    if (physical == physicals_.end()) {
      return VmmInvalid(call,
                        "no such physical handle (never created, or released "
                        "and no longer mapped)");
    }
    if (physical->second.released) {
      return VmmInvalid(call,
                        "the handle was released: only a live handle can be "
                        "mapped");
    }
    if (physical->second.size != bytes) {
      return VmmInvalid(
          call, absl::StrFormat("a mapping covers its whole handle from "
                                "offset 0, and the handle has %d bytes",
                                physical->second.size));
    }
    const auto reservation = ReservationHolding(address);
    if (reservation == reservations_.end()) {
      return VmmInvalid(
          call, absl::StrFormat("%#x is not inside a reservation", address));
    }
    const DeviceAddress reservation_end =
        reservation->first + reservation->second.size;
    if (end > reservation_end) {
      return VmmInvalid(
          call, absl::StrFormat("the range runs past the end of the "
                                "reservation [%#x, %#x): a mapping lies "
                                "inside one reservation",
                                reservation->first, reservation_end));
    }
    auto overlap = mappings_.lower_bound(end);
    if (overlap != mappings_.begin()) {
      --overlap;
      if (overlap->first + overlap->second.size > address) {
        return VmmInvalid(
            call, absl::StrFormat("the range overlaps the mapping [%#x, %#x) "
                                  "of physical handle %d",
                                  overlap->first,
                                  overlap->first + overlap->second.size,
                                  overlap->second.handle));
      }
    }
    if (memory_ == SimMemory::kHostBacked) {
      void* mapped = mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                          MAP_SHARED | MAP_FIXED, physical->second.fd, 0);
      if (mapped == MAP_FAILED) {
        const int error = errno;
        // A failed MAP_FIXED may have dropped what was there: put the
        // reservation's inaccessible memory back.
        (void)mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                   0);
        return SystemError(call, "mmap of the memfd", error);
      }
    }
    mappings_.emplace(address, Mapping{bytes, handle});
    ++physical->second.mappings;
    mapped_bytes_ += bytes;
    return absl::OkStatus();
  }

  absl::Status UnmapLocked(DeviceAddress address, std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call = RangeCall("Unmap", address, bytes);
    if (absl::Status s = CheckRange(call, address, bytes); !s.ok()) return s;
    const DeviceAddress end = address + bytes;
    if (!mappings_.contains(address)) {
      const auto holder = MappingHolding(address);
      if (holder != mappings_.end()) {
        return VmmInvalid(
            call, absl::StrFormat("%#x is inside the mapping [%#x, %#x): "
                                  "Unmap takes whole mappings (no partial "
                                  "unmap)",
                                  address, holder->first,
                                  holder->first + holder->second.size));
      }
      return VmmInvalid(call,
                        absl::StrFormat("nothing is mapped at %#x", address));
    }
    for (DeviceAddress at = address; at < end;) {
      const auto it = mappings_.find(at);
      if (it == mappings_.end()) {
        const auto next = mappings_.lower_bound(at);
        const DeviceAddress hole_end =
            next == mappings_.end() ? end : std::min(end, next->first);
        return VmmInvalid(
            call, absl::StrFormat("[%#x, %#x) in the range is not mapped: "
                                  "Unmap takes contiguous whole mappings",
                                  at, hole_end));
      }
      const DeviceAddress mapping_end = at + it->second.size;
      if (mapping_end > end) {
        return VmmInvalid(
            call, absl::StrFormat("the range ends inside the mapping [%#x, "
                                  "%#x): Unmap takes whole mappings (no "
                                  "partial unmap)",
                                  at, mapping_end));
      }
      at = mapping_end;
    }
    if (memory_ == SimMemory::kHostBacked) {
      void* back =
          mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      if (back == MAP_FAILED) {
        return SystemError(call, "mmap of PROT_NONE memory over the range",
                           errno);
      }
    }
    FlagUnmapInUse(address, end);
    for (auto it = mappings_.lower_bound(address);
         it != mappings_.end() && it->first < end;) {
      auto physical = physicals_.find(it->second.handle);
      if (--physical->second.mappings == 0 && physical->second.released) {
        physical_bytes_ -= physical->second.size;
        physicals_.erase(physical);
      }
      it = mappings_.erase(it);
    }
    mapped_bytes_ -= bytes;
    RemoveAccess(address, end);
    return absl::OkStatus();
  }

  absl::Status SetAccessLocked(DeviceAddress address, std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string call = RangeCall("SetAccess", address, bytes);
    if (absl::Status s = CheckRange(call, address, bytes); !s.ok()) return s;
    const DeviceAddress end = address + bytes;
    DeviceAddress at = address;
    const auto first = MappingHolding(address);
    if (first != mappings_.end()) at = first->first + first->second.size;
    while (at < end) {
      if (at == address || !mappings_.contains(at)) {
        const auto next = mappings_.lower_bound(at);
        const DeviceAddress hole_end =
            next == mappings_.end() ? end : std::min(end, next->first);
        return VmmInvalid(
            call, absl::StrFormat("[%#x, %#x) in the range is not mapped: "
                                  "SetAccess needs the whole range mapped",
                                  at, hole_end));
      }
      at += mappings_.at(at).size;
    }
    if (memory_ == SimMemory::kHostBacked &&
        mprotect(reinterpret_cast<void*>(address), bytes,
                 PROT_READ | PROT_WRITE) != 0) {
      return SystemError(call, "mprotect", errno);
    }
    AddAccess(address, end);
    return absl::OkStatus();
  }

  // The entry of `map` (start -> something with a size) whose range holds
  // `address`, or end().
  template <typename Map>
  static typename Map::const_iterator Holding(const Map& map,
                                              DeviceAddress address) {
    auto it = map.upper_bound(address);
    if (it == map.begin()) return map.end();
    --it;
    return address < it->first + it->second.size ? it : map.end();
  }
  absl::btree_map<DeviceAddress, Reservation>::const_iterator
  ReservationHolding(DeviceAddress address) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Holding(reservations_, address);
  }
  absl::btree_map<DeviceAddress, Mapping>::const_iterator MappingHolding(
      DeviceAddress address) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Holding(mappings_, address);
  }

  // accessible_ holds disjoint, non-touching [start, end) ranges.
  void AddAccess(DeviceAddress start, DeviceAddress end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = accessible_.upper_bound(start);
    if (it != accessible_.begin() && std::prev(it)->second >= start) --it;
    while (it != accessible_.end() && it->first <= end) {
      start = std::min(start, it->first);
      end = std::max(end, it->second);
      it = accessible_.erase(it);
    }
    accessible_.emplace(start, end);
  }

  void RemoveAccess(DeviceAddress start, DeviceAddress end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = accessible_.upper_bound(start);
    if (it != accessible_.begin() && std::prev(it)->second > start) --it;
    std::vector<std::pair<DeviceAddress, DeviceAddress>> kept;
    while (it != accessible_.end() && it->first < end) {
      if (it->first < start) kept.emplace_back(it->first, start);
      if (it->second > end) kept.emplace_back(end, it->second);
      it = accessible_.erase(it);
    }
    for (const auto& range : kept) accessible_.insert(range);
  }

  bool AccessibleLocked(DeviceAddress start, DeviceAddress end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = accessible_.upper_bound(start);
    if (it == accessible_.begin()) return false;
    --it;
    return it->second >= end;
  }

  // Whether work may touch [start, end): all of it inside one live plain
  // allocation, one live pool segment, or mapped with access set.
  bool UsableLocked(DeviceAddress start, DeviceAddress end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto* allocations : {&live_, &pool_segments_}) {
      const auto it = Holding(*allocations, start);
      if (it != allocations->end() && end <= it->first + it->second.size) {
        return true;
      }
    }
    return AccessibleLocked(start, end);
  }

  // Flags each stream whose incomplete work uses part of [start, end).
  void FlagUnmapInUse(DeviceAddress start, DeviceAddress end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PruneEnded();
    for (const std::uintptr_t handle : StreamsNear(start, end)) {
      StreamState& s = GetStream(handle);
      Prune(s);
      const std::optional<std::pair<DeviceAddress, DeviceAddress>> overlap =
          FindUnordered(s, start, end, 0);
      if (!overlap.has_value()) continue;
      ++hazards_;
      if (hazard_log_.size() < kHazardLogSize) {
        hazard_log_.push_back(SimHazard{
            SimHazardKind::kUnmapInUse, Stream(handle), Stream(handle),
            overlap->first, overlap->second - overlap->first});
      }
    }
  }

  // --- Streams ---------------------------------------------------------------

  StreamState& GetStream(std::uintptr_t handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // unordered_map: references stay valid
    auto [it, inserted] = streams_.try_emplace(handle);
    if (inserted) it->second.handle = handle;
    return it->second;
  }

  // Modeled: marks the pieces whose end has passed as complete. Both: drops
  // completed pieces from the hazard index.
  void Prune(StreamState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (modeled_clock_ && !s.ends.empty() && s.ends.front() <= now_ns_) {
      first_ends_.erase({s.ends.front(), s.handle});
      while (!s.ends.empty() && s.ends.front() <= now_ns_) {
        s.ends.pop_front();
        ++s.completed_position;
      }
      if (!s.ends.empty()) first_ends_.emplace(s.ends.front(), s.handle);
    }
    while (!s.by_position.empty() &&
           s.by_position.begin()->first <= s.completed_position) {
      const auto [position, start] = *s.by_position.begin();
      auto [first, last] = s.by_address.equal_range(start);
      for (auto it = first; it != last; ++it) {
        if (it->second.position == position) {
          Unshare(s.handle, start, it->second.end, position);
          s.by_address.erase(it);
          break;
        }
      }
      s.by_position.erase(s.by_position.begin());
    }
    if (s.by_address.empty()) s.longest = 0;
  }

  // Modeled: prunes every stream whose first pending piece has ended, in
  // order of those ends, leaving the others alone.
  void PruneEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!first_ends_.empty() && first_ends_.begin()->first <= now_ns_) {
      Prune(GetStream(first_ends_.begin()->second));
    }
  }

  void Index(StreamState& s, DeviceAddress start, DeviceAddress end,
             std::uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Erasing from a btree invalidates other iterators: no saved end.
    for (auto it = s.by_address.lower_bound(start);
         it != s.by_address.end() && it->first == start;) {
      if (it->second.end <= end) {
        Unshare(s.handle, start, it->second.end, it->second.position);
        s.by_position.erase(it->second.position);
        it = s.by_address.erase(it);
      } else {
        ++it;
      }
    }
    s.by_address.emplace(start, IndexedPiece{end, position});
    s.by_position.emplace(position, start);
    s.longest = std::max(s.longest, end - start);
    const int k = LengthClass(end - start);
    shared_pieces_[k].emplace(SharedKey{start, s.handle, position}, end);
    nonempty_classes_ |= std::uint64_t{1} << k;
  }

  // The shared index: every stream's indexed pieces, by (start, stream,
  // position), in classes of length.
  using SharedKey = std::tuple<DeviceAddress, std::uintptr_t, std::uint64_t>;
  static int LengthClass(std::uint64_t length) {
    return std::bit_width(length) - 1;  // length >= 1
  }
  void Unshare(std::uintptr_t stream, DeviceAddress start, DeviceAddress end,
               std::uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int k = LengthClass(end - start);
    shared_pieces_[k].erase(SharedKey{start, stream, position});
    if (shared_pieces_[k].empty()) {
      nonempty_classes_ &= ~(std::uint64_t{1} << k);
    }
  }

  // The streams, in handle order, with an indexed piece that overlaps
  // [start, end). Each class holds lengths below 2^(k+1), so its overlapping
  // pieces start less than that before `start`.
  std::vector<std::uintptr_t> StreamsNear(DeviceAddress start,
                                          DeviceAddress end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::uintptr_t> near;
    for (std::uint64_t classes = nonempty_classes_; classes != 0;
         classes &= classes - 1) {
      const int k = std::countr_zero(classes);
      const std::uint64_t longest =
          k == 63 ? std::numeric_limits<std::uint64_t>::max()
                  : (std::uint64_t{2} << k) - 1;
      const DeviceAddress from = start > longest ? start - longest + 1 : 0;
      const auto& pieces = shared_pieces_[k];
      for (auto it = pieces.lower_bound(SharedKey{from, 0, 0});
           it != pieces.end() && std::get<0>(it->first) < end; ++it) {
        if (it->second > start) near.push_back(std::get<1>(it->first));
      }
    }
    std::sort(near.begin(), near.end());
    near.erase(std::unique(near.begin(), near.end()), near.end());
    return near;
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

  // Manual clock: how many of the first `position` pieces of `s` are still
  // pending.
  std::uint64_t PendingUpTo(StreamState& s, std::uint64_t position)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    position = std::min(position, s.next_position);
    return position > s.completed_position ? position - s.completed_position
                                           : 0;
  }

  // Manual clock: the modeled cost of a host wait that completes `pieces`
  // pending pieces on one stream (the stream where it completes the most).
  std::uint64_t WaitCostNs(std::uint64_t pieces) const {
    return pieces != 0 && costs_.wait_ns_per_piece >
                              std::numeric_limits<std::uint64_t>::max() / pieces
               ? std::numeric_limits<std::uint64_t>::max()
               : pieces * costs_.wait_ns_per_piece;
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
    modeled_ns_ =
        SaturatingAdd(modeled_ns_, CallCostNs(SimOp::kAllocate, size));
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
      modeled_ns_ =
          SaturatingAdd(modeled_ns_, CallCostNs(SimOp::kFree, segment.size));
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
  const CostModel costs_;
  const DeviceInfo info_;
  const DeviceAddress fake_base_;
  const std::uint64_t host_page_size_;
  const bool modeled_clock_;
  const std::uint64_t work_ns_;

  mutable core::Lock mu_;
  DeviceAddress next_fake_address_ ABSL_GUARDED_BY(mu_);
  // Fake reservations take addresses below this one, going down.
  DeviceAddress fake_reserve_low_ ABSL_GUARDED_BY(mu_);
  std::uint64_t bytes_allocated_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<DeviceAddress, Allocation> live_ ABSL_GUARDED_BY(mu_);
  std::array<Fault, kNumSimOps> faults_ ABSL_GUARDED_BY(mu_);
  std::array<std::uint64_t, kNumSimOps> calls_ ABSL_GUARDED_BY(mu_) = {};
  std::array<std::uint64_t, kNumSimOps> failed_calls_ ABSL_GUARDED_BY(mu_) = {};
  std::uint64_t modeled_ns_ ABSL_GUARDED_BY(mu_) = 0;

  std::unordered_map<std::uintptr_t, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  // Every stream's indexed pieces (StreamState::by_address) by start, class
  // k holding lengths in [2^k, 2^(k+1)); the value is the piece's end.
  std::array<absl::btree_map<SharedKey, DeviceAddress>, 64> shared_pieces_
      ABSL_GUARDED_BY(mu_);
  std::uint64_t nonempty_classes_ ABSL_GUARDED_BY(mu_) = 0;  // bit k: class k
  // Modeled clock: (first pending end, stream) of each stream with pending
  // pieces, so that PruneEnded visits only streams with ended work.
  absl::btree_set<std::pair<std::uint64_t, std::uintptr_t>> first_ends_
      ABSL_GUARDED_BY(mu_);
  absl::btree_map<EventHandle, Event> events_ ABSL_GUARDED_BY(mu_);
  EventHandle next_event_ ABSL_GUARDED_BY(mu_) = 1;
  std::uint64_t now_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t hazards_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::uintptr_t> destroyed_streams_ ABSL_GUARDED_BY(mu_);
  std::uint64_t calls_on_destroyed_streams_ ABSL_GUARDED_BY(mu_) = 0;
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

  absl::btree_map<DeviceAddress, Reservation> reservations_
      ABSL_GUARDED_BY(mu_);
  absl::btree_map<PhysicalHandle, Physical> physicals_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<DeviceAddress, Mapping> mappings_ ABSL_GUARDED_BY(mu_);
  // Mapped ranges with access set: start -> end, disjoint and not touching.
  absl::btree_map<DeviceAddress, DeviceAddress> accessible_
      ABSL_GUARDED_BY(mu_);
  PhysicalHandle next_physical_ ABSL_GUARDED_BY(mu_) = 1;
  std::uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t physical_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t access_violations_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SimHazard> access_violation_log_ ABSL_GUARDED_BY(mu_);
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
  info.profile = std::string(profile.name);
  info.profile_reason =
      absl::StrCat("the simulator models profile ", profile.name);
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
  info.capabilities.virtual_memory = options.virtual_memory;
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
  if (!std::has_single_bit(info.min_granularity)) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity, " is not a power of two"));
  }
  if (!std::has_single_bit(info.recommended_granularity)) {
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
  // Host-backed virtual memory maps host pages at granule boundaries.
  const auto host_page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  if (options.memory == SimMemory::kHostBacked && options.virtual_memory &&
      info.min_granularity % host_page != 0) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity,
                     " is not a multiple of the host page size (", host_page,
                     "), which host-backed virtual memory needs (or set "
                     "SimOptions.virtual_memory = false)"));
  }
  if (!std::has_single_bit(info.allocation_alignment)) {
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

  auto impl = std::make_unique<Impl>(options, std::move(info),
                                     ResolveCosts(options, profile));
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
void SimBackend::OrderStreams(Stream waiter, Stream other) {
  impl_->OrderStreams(waiter, other);
}
void SimBackend::AdvanceClock(std::uint64_t ns) { impl_->AdvanceClock(ns); }
std::uint64_t SimBackend::now_ns() const { return impl_->now_ns(); }
std::uint64_t SimBackend::pending_work() const { return impl_->pending_work(); }
std::uint64_t SimBackend::hazards() const { return impl_->hazards(); }
void SimBackend::DestroyStream(Stream stream) { impl_->DestroyStream(stream); }
std::uint64_t SimBackend::calls_on_destroyed_streams() const {
  return impl_->calls_on_destroyed_streams();
}
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
std::uint64_t SimBackend::CallCostNs(SimOp op, std::uint64_t bytes) const {
  return impl_->CallCostNs(op, bytes);
}
void SimBackend::ResetCounters() { impl_->ResetCounters(); }
std::uint64_t SimBackend::bytes_allocated() const {
  return impl_->bytes_allocated();
}
std::uint64_t SimBackend::live_allocations() const {
  return impl_->live_allocations();
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
std::uint64_t SimBackend::mapped_bytes() const { return impl_->mapped_bytes(); }
std::uint64_t SimBackend::physical_bytes() const {
  return impl_->physical_bytes();
}
std::uint64_t SimBackend::reserved_address_bytes() const {
  return impl_->reserved_address_bytes();
}
bool SimBackend::IsAccessible(DeviceAddress address,
                              std::uint64_t bytes) const {
  return impl_->IsAccessible(address, bytes);
}
std::uint64_t SimBackend::access_violations() const {
  return impl_->access_violations();
}
std::vector<SimHazard> SimBackend::access_violation_log() const {
  return impl_->access_violation_log();
}

}  // namespace gpualloc
