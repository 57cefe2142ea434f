// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay.h: traces, their replay on a simulated device, and the
// replay's result fields. Shared by gpualloc-replay, gpualloc-tune and
// the demo; uses the public headers only.
#ifndef GPUALLOC_TOOLS_REPLAY_REPLAY_H_
#define GPUALLOC_TOOLS_REPLAY_REPLAY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "tools/layer.h"

namespace gpualloc::replay {

struct TraceOp {
  enum class Kind : std::uint8_t { kAlloc, kFree };
  Kind kind = Kind::kAlloc;
  std::uint64_t id = 0;      // dense allocation id; a free names its alloc's
  std::uint64_t size = 0;    // bytes as requested (a free: its alloc's size)
  std::uint64_t stream = 0;  // 0 = the default stream
  // When the program made the call, in ns from the trace's first row (0 for
  // traces without times).
  std::uint64_t time_ns = 0;
};

// A row of page-locked host memory (the project CSV's host_alloc and
// host_free): a buffer the program's streams copy to and from. Kept apart
// from the device ops, so that everything that reads Trace::ops (the device
// replay, the no-wait bound, the reference models, the picture) sees exactly
// what it saw in a trace without host rows.
struct HostTraceOp {
  enum class Kind : std::uint8_t { kAlloc, kFree };
  Kind kind = Kind::kAlloc;
  std::uint64_t id = 0;      // dense host allocation id (its own 0, 1, ...)
  std::uint64_t size = 0;    // bytes as requested (a free: its alloc's size)
  std::uint64_t stream = 0;  // the stream whose work uses the buffer
  std::uint64_t time_ns = 0;
  // Device ops (Trace::ops) before it in the file: it comes right before
  // ops[before] (after the last one when before == ops.size()).
  std::uint64_t before = 0;
};

struct Trace {
  std::string name;  // the file name without directory and extension
  std::vector<TraceOp> ops;
  std::uint64_t num_allocs = 0;
  std::uint64_t num_frees = 0;
  // Distinct streams of the device ops (host rows do not add to it, so they
  // do not change how the device ops replay).
  std::uint64_t num_streams = 0;
  // The host rows, in file order (project CSV only).
  std::vector<HostTraceOp> host_ops;
  std::uint64_t num_host_allocs = 0;
  std::uint64_t num_host_frees = 0;
  // Whether the rows carry times (the project CSV's optional time_us column,
  // RMM's Time column).
  bool timed = false;
};

// Parses a trace; the format is told by the header line:
//   the project CSV  "seq,action,addr_or_id,size,stream" (tests/data/traces);
//   RMM's logging_resource_adaptor CSV "Thread,Time,Action,Pointer,Size,Stream"
//     (actions allocate, free, "allocate failure"; pointers are mapped to ids,
//     a failed allocation is skipped, a free of an unknown pointer is an
//     error).
// Malformed input is InvalidArgument "NAME:LINE: expected ..., got ...".
absl::StatusOr<Trace> ParseTrace(absl::string_view text,
                                 absl::string_view name);
// Reads the file and parses it; the name is the file's stem.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

// What the address-space picture needs: every block with its lifetime in op
// indices, and every region the allocator held, placed in address order.
struct TimelineBlock {
  // What the block's memory is over its lifetime. A replay records in-use
  // blocks only; a snapshot (snapshot_view.h) also free chunks still waiting
  // for a stream's work, and the chunks of a tag put to sleep.
  enum class State : std::uint8_t { kInUse, kFreePending, kAsleep };
  std::uint64_t id = 0;
  std::uint64_t address = 0;
  std::uint64_t size = 0;      // as requested
  std::uint64_t alloc_op = 0;  // index in Trace::ops
  std::uint64_t free_op = 0;   // index of its free, or ops.size() if never
  std::uint64_t stream = 0;
  State state = State::kInUse;
};
// A region at one size over [from_op, to_op). With expandable regions a
// "region" is a maximal run of mapped memory inside the one reserved address
// range: it grows and shrinks as pieces are mapped and unmapped, and each
// size it had is a record of its own, so that the records alive after an op
// add up to the bytes reserved then.
struct TimelineRegion {
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  std::uint64_t from_op = 0;  // first op it existed after
  std::uint64_t to_op = 0;    // op at which it was returned, or ops.size()
};
struct Timeline {
  std::uint64_t num_ops = 0;
  std::vector<TimelineBlock> blocks;
  std::vector<TimelineRegion> regions;
  // How the allocator reserved memory: "bfc" with `expandable` (one reserved
  // address range, regions are its mapped runs) or without (regions are
  // separate device allocations), "platform" (a device allocation per
  // block), "async" (the device's pool), or "snapshot" (snapshot_view.h:
  // regions as the snapshot lists them).
  std::string mode;
  bool expandable = false;
  // Reserved and in-use bytes after each of up to ~2000 evenly spaced ops.
  std::vector<std::uint64_t> sample_ops;
  std::vector<std::uint64_t> sample_reserved;
  std::vector<std::uint64_t> sample_in_use;
};

struct ReplayOptions {
  bool record_timeline = false;
  // The measured pass replays the trace this many times (at least 1) back to
  // back on the same allocator. Pass k's allocation ids are the trace's plus
  // k * num_allocs; with more than one pass, every pass (the last included)
  // ends by freeing what the trace left live, on the stream that allocated
  // it, so that each starts from nothing.
  std::uint64_t repeat = 1;
  // The model of device progress on multi-stream traces (the simulator's
  // clock is manual): all queued work completes after every `complete_every`
  // ops, as if the streams kept up with the host a short way behind it. 0:
  // work completes only when the allocator waits for it on the host (out of
  // memory). Single-stream traces never need it.
  std::uint64_t complete_every = 64;
  // When non-zero, the model for multi-stream traces with times instead
  // (Trace::timed; others keep complete_every): the simulator's clock is
  // modeled, the host issues each call at its trace time (later by as much
  // as the host has been held up by waits so far), and each use of a block
  // on a stream runs for work_us microseconds in the stream's order.
  std::uint64_t work_us = 0;
  // Every op replayed on stream 0 (OneStream(trace)): what the allocations
  // cost with one stream, the same trace otherwise.
  bool one_stream = false;
  // Called now and then with (ops done, ops total), for a progress line.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
  // When set, a reference model (reference.h: "pytorch", "tf", "async")
  // replays instead of gpualloc, on the device the configuration string
  // describes (the simulator's default device for ""), under the limit
  // gpualloc would use there (the configuration's mem_limit or
  // mem_fraction, resolved as the allocator resolves them), which the model
  // applies by its own project's rule; the configuration's other allocator
  // settings are not used, and the result's config is "".
  std::string reference;
};

// One pass of the measured replay: its own share of the whole run's counts
// (they add up to the whole) and its own peaks.
struct ReplayRepetition {
  std::uint64_t ops = 0;    // Allocate + Deallocate calls, drain frees included
  std::uint64_t frees = 0;  // the Deallocate calls among them
  std::uint64_t ooms = 0;
  std::uint64_t peak_bytes_in_use = 0;
  std::uint64_t peak_bytes_requested = 0;
  std::uint64_t peak_bytes_reserved = 0;
  std::uint64_t backend_allocs = 0;
  std::uint64_t backend_frees = 0;
  std::uint64_t backend_calls = 0;
  std::uint64_t modeled_backend_ns = 0;
  std::uint64_t events_recorded = 0;
  std::uint64_t host_waits = 0;
  std::uint64_t stream_waits = 0;
  std::uint64_t completion_calls = 0;  // CompletionCalls (below)
  std::uint64_t hazards = 0;
};

// The calls the allocator (or model) made to learn whether work completed,
// from the simulator's ledger: every call of an operation in
// CompletionOps() (event records and event queries).
std::uint64_t CompletionCalls(const SimBackend& sim);
// The simulator's operations that exist to learn completion.
const std::vector<SimOp>& CompletionOps();
// 100 * n / frees, 0 without frees: the per-100-frees figures of the
// JSON and the table.
double Per100Frees(std::uint64_t n, std::uint64_t frees);

// The host rows' replay (host_replay.cc), one way of serving them: through
// the host allocator (CreateHostAllocator over the simulated device), or
// with no host cache, each host_alloc a HostAllocate and each host_free a
// HostFree. Counts from the simulator's ledger.
struct HostPassFigures {
  std::uint64_t host_allocs = 0;  // HostAllocate calls
  std::uint64_t host_frees = 0;   // HostFree calls
  std::uint64_t host_waits = 0;   // the host blocked on a stream's work
  std::uint64_t modeled_ns = 0;   // the modeled cost of the host side's calls
  std::uint64_t peak_bytes_reserved = 0;
};
struct HostFigures {
  std::uint64_t ops = 0;                  // host allocate + free calls made
  std::uint64_t peak_bytes_reserved = 0;  // pinned memory held at most
  std::uint64_t peak_bytes_in_use = 0;    // handed out at most
  std::uint64_t host_allocs = 0;
  std::uint64_t host_frees = 0;
  std::uint64_t host_waits = 0;
  std::uint64_t modeled_ns = 0;
  // Wall time of the host rows' loop / ops (the simulator's own work in it
  // timed apart and taken out).
  double ns_per_op = 0;
  // The simulator's race detector on the host buffers and the scratch
  // (must be 0), and uses of memory not live (must be 0 too).
  std::uint64_t hazards = 0;
  std::uint64_t access_violations = 0;
  std::vector<HostPassFigures> repetitions;  // one per pass, in order
};
struct HostReplayResult {
  // The most bytes the host rows hold live at once, as requested (from the
  // trace alone, one pass).
  std::uint64_t peak_bytes_requested = 0;
  HostFigures pool;      // the host allocator
  HostFigures no_cache;  // no host cache
};

// The replay's figures for one (trace, configuration), over the whole run.
struct ReplayResult {
  std::string trace;
  std::string config;  // the configuration string as given ("" = defaults)
  std::string label;   // name= from the configuration, or the config string
  // The reference model that replayed (ReplayOptions::reference), "" for
  // gpualloc; its label is ReferenceLabel's.
  std::string reference;
  std::uint64_t ops = 0;    // Allocate + Deallocate calls made
  std::uint64_t frees = 0;  // the Deallocate calls among them
  std::uint64_t ooms = 0;
  std::vector<std::uint64_t> failed_ids;
  std::uint64_t peak_bytes_in_use = 0;
  std::uint64_t peak_bytes_requested = 0;
  std::uint64_t peak_bytes_reserved = 0;
  std::uint64_t final_bytes_reserved = 0;
  double utilization = 0;  // peak_bytes_requested / peak_bytes_reserved
  double fragmentation_at_peak = 0;  // at the op of peak bytes requested
  std::uint64_t largest_free_block_bytes = 0;  // at the end
  std::uint64_t backend_allocs = 0;
  std::uint64_t backend_frees = 0;
  std::uint64_t backend_calls = 0;       // every simulated device call
  std::uint64_t modeled_backend_ns = 0;  // their modeled cost
  std::uint64_t events_recorded = 0;
  std::uint64_t host_waits = 0;    // the host blocked on an event
  std::uint64_t stream_waits = 0;  // a stream made to wait for another's free
  // Event records and queries (CompletionCalls); 0 on a vendor backend.
  std::uint64_t completion_calls = 0;
  std::uint64_t hazards = 0;
  // Wall time of the measured loop / ops, after an untimed pass over the
  // same trace (the warm-up; see replay.cc).
  double ns_per_op = 0;
  // Page faults of the process (memory touched for the first time) inside
  // the measured loop: what it paid beyond the allocator's work. About 0
  // after the warm-up with KeepFreedMemoryMapped.
  std::uint64_t timed_page_faults = 0;
  // The allocator's at the end of the run (the peaks: the run's maximum).
  Stats stats;
  std::uint64_t repeat = 1;           // ReplayOptions::repeat
  std::uint64_t complete_every = 64;  // ReplayOptions::complete_every
  // The device-progress model used: "ops" (complete_every), "timestamps"
  // (work_us with the trace's times) or "" (single stream: none needed).
  std::string progress_model;
  std::uint64_t work_us = 0;  // ReplayOptions::work_us, when "timestamps"
  std::vector<ReplayRepetition> repetitions;  // one per pass, in order
  // NoWaitBound(trace, options): multi-stream traces only (nullopt: one
  // stream, where it would be the peak requested). The same for every
  // configuration.
  std::optional<std::uint64_t> nowait_bound_bytes;
  bool one_stream = false;  // ReplayOptions::one_stream
  // The peak reserved of the same replay with ReplayOptions::one_stream, when
  // the caller ran that too (gpualloc-replay --compare-one-stream, on
  // multi-stream traces); Replay itself leaves it unset.
  std::optional<std::uint64_t> one_stream_peak_bytes_reserved;
  std::string device;  // the simulated device's name and size
  Timeline timeline;   // when ReplayOptions::record_timeline
  // Traces with host rows, gpualloc's replays (not the reference models'):
  // the host rows replayed apart from the device rows (ReplayHost).
  std::optional<HostReplayResult> host;
};

// `trace` with every op on stream 0, the default stream (a free on another
// stream than its allocation's is then no handover); name and times kept.
Trace OneStream(const Trace& trace);

// The no-wait bound: the most memory an allocator that never makes a stream
// or the host wait must hold at once on `trace` under the device-progress
// model of `options`, before fragmentation. It is the peak over the run of
// the live requested bytes plus the pending-free bytes: bytes freed on a
// stream whose work queued up to the free (an event recorded at the free)
// has not completed. Pending bytes are reusable at once by the stream that
// freed them (stream order makes that safe), so an allocation first takes
// what its own stream has pending, latest to complete first, and only then
// new memory; another stream's pending bytes wait for their completion. The
// completions are Replay's without the allocator's own waits:
//   ops model: everything queued completes after every complete_every steps
//     (trace ops and drain frees, counted over the whole run as Replay counts
//     them); a free on a stream that queued no work since the last completion
//     is complete at once; complete_every 0: nothing ever completes;
//   timestamp model (work_us, timed traces): the host calls at the trace's
//     times (a pass's times continue from where the previous pass ended), each
//     allocation queues work_us on its stream and a handover (a free on
//     another stream) orders the freeing stream after the allocating one and
//     queues work_us there; a free's bytes complete when its stream's work up
//     to the free has run.
// Every allocation is taken to succeed (the bound knows no allocator). With
// repeat > 1 the run is Replay's: each pass ends by freeing what the trace
// left live, on the stream that allocated it, in id order. Depends on the
// trace and on repeat, complete_every and work_us only. nullopt for a trace
// of one stream (or with one_stream), where no stream waits for another.
std::optional<std::uint64_t> NoWaitBound(const Trace& trace,
                                         const ReplayOptions& options);

// The label a replay under `config_string` carries (ReplayResult::label):
// its name=, else the string itself, else "defaults". Errors: the string does
// not parse.
absl::StatusOr<std::string> ConfigLabel(const std::string& config_string);

// Replays `trace` on the device and allocator `config_string` describes
// (the backend is the simulator unless backend= says otherwise; the process
// environment is not read: a replay is reproducible). An allocation that
// fails is counted and its free skipped. Errors: a bad configuration, a
// repeat of 0, or an allocator that cannot be created.
absl::StatusOr<ReplayResult> Replay(const Trace& trace,
                                    const std::string& config_string,
                                    const ReplayOptions& options = {});

// The host rows of `trace` (Trace::host_ops) replayed on a fresh simulated
// device of `config_string`'s description, under the progress model of
// `options` (repeat, complete_every, work_us, one_stream as Replay takes
// them), twice: through CreateHostAllocator with the configuration's
// options, and with no host cache. The device rows are not allocated there;
// each still counts for the ops model's completions and queues work on its
// stream, so that the streams the host buffers are recorded on are as busy
// as in the device replay. Each host row uses its buffer on its stream (a
// host_free on another stream than the host_alloc's: both streams), and the
// pool reuses a block only once that work is done. Replay calls it for a
// trace with host rows (the result's `host`); the device figures do not
// depend on it. Errors: a bad configuration, a backend without host memory,
// a host allocation that fails.
absl::StatusOr<HostReplayResult> ReplayHost(const Trace& trace,
                                            const std::string& config_string,
                                            const ReplayOptions& options = {});

// For a program that replays many times (gpualloc-replay, gpualloc-tune),
// called once at the start of main, before anything sizeable is allocated
// (called later, it leaves more faults in the timed loops): glibc's malloc
// keeps freed memory mapped (no trimming of the heap's top, and blocks up to 32
// MiB from the heap rather than from their own mmap), so that a measured pass
// reuses the memory its untimed pass touched instead of faulting in fresh pages
// inside the timed loop. The process keeps its peak heap. Does nothing on other
// C libraries.
void KeepFreedMemoryMapped();

// One JSON object (one line) with every field above except the timeline;
// "repetitions" is an array of one object per pass; "nowait_bound_bytes" and
// "one_stream_peak_bytes_reserved" are null when unset.
std::string ToJson(const ReplayResult& result);

// PyTorch's peak reserved bytes per trace name, read from the baseline table
// of a SOURCES.md ("| trace | PyTorch peak reserved | ... |", values in GiB).
absl::StatusOr<std::map<std::string, std::uint64_t>> LoadBaseline(
    const std::string& sources_md);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_REPLAY_H_
