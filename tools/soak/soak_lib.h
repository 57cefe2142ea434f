// SPDX-License-Identifier: Apache-2.0
// tools/soak/soak_lib.h: long random multi-stream runs of the allocator on
// the simulator, checked against a shadow model (gpualloc-soak and its test).
//
// A run generates its operations in memory, deterministically from a seed:
// alternating fill and drain phases, each steering the number of live blocks
// toward a random target; block sizes log-uniform from 1 B to max_size; with
// several streams, extra users declared with RecordStream (ordered after the
// earlier users by an event, as real code orders a reader after a writer),
// work completing now and then, and frees that name another stream than the
// allocation's. In the modes that share blocks with other processes (all but
// async), live blocks are exported and imported by a second allocator on a
// second simulated device (another process, as the simulator models one) and
// the imports closed, so that freed blocks are held for their importers and
// released once every importer closed them; descriptions of exports that
// ended are imported too, and must be refused. Backend calls fail now and
// then by the simulator's fault injection, on both devices. After every
// operation the shadow model checks that no returned block overlaps another
// live one, that bytes_requested is the sum of the live requests, and that the
// simulator saw no hazard and no access to inaccessible memory; Validate() runs
// every validate_every operations, and with it the device's held memory is
// compared with the allocator's bytes_reserved (nothing lost, nothing
// uncounted), and the blocks held for importers and the bytes imported with the
// shadow's. At the end every import is closed and every block freed, nothing
// may stay in use or held, and once the allocators are destroyed the devices
// must hold nothing and the process must have as many open descriptors as
// before.
//
// A run stops at its first violation and reports the operation index, so
// that RunSoak with ops = index + 1 (same seed, mode and settings) replays
// exactly the sequence that broke.
//
// Public headers only, like every tool.
#ifndef GPUALLOC_TOOLS_SOAK_SOAK_LIB_H_
#define GPUALLOC_TOOLS_SOAK_SOAK_LIB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/backends/sim_backend.h"
#include "tools/layer.h"

namespace gpualloc::soak {

// An allocator configuration a soak runs: a short name and its
// configuration string (gpualloc/core/config.h; backend=sim and the device size
// are added by RunSoak).
struct SoakMode {
  std::string name;
  std::string config;
};

// bfc-expandable, bfc-regions, bfc-prealloc, platform, async.
const std::vector<SoakMode>& AllModes();
// A mode by name; NotFound listing the names otherwise.
absl::StatusOr<SoakMode> FindMode(absl::string_view name);

// The backend calls faults go into by default: growth (plain allocations,
// pool allocations, physical memory, mappings), giving memory back
// (unmappings, physical releases), the events behind cross-stream reuse and
// exports: allocate, pool_allocate, map, create_physical, create_event,
// record_event, query_event, set_access, unmap, release_physical,
// get_ipc_handle, export_mapping.
std::vector<SimOp> DefaultFaultOps();
// The importing device's calls faults go into (each armed fault goes into
// one of the two devices): open_ipc_handle, close_ipc_handle,
// import_physical, reserve_address, map, set_access, release_physical,
// unmap, free_address.
std::vector<SimOp> ImporterFaultOps();
// "map,record_event" (SimOpName's names) to the operations; InvalidArgument
// naming an unknown one.
absl::StatusOr<std::vector<SimOp>> ParseFaultOps(absl::string_view list);
std::string FaultOpsString(const std::vector<SimOp>& ops);

struct SoakOptions {
  std::uint64_t seed = 1;
  // Operations (allocations, frees, record-streams, completions) in the run,
  // not counting the final free of every live block.
  std::uint64_t ops = 100'000;
  int streams = 1;
  std::uint64_t max_size = std::uint64_t{256} << 20;
  // Percent of frees that name a stream other than the allocation's (only
  // with more than one stream).
  int cross_free_percent = 20;
  // The simulated device's memory (the allocator's limit is 75% of it).
  std::uint64_t device_memory = std::uint64_t{16} << 30;
  // Every this many operations one of the fault_ops, one to three calls
  // ahead, is made to fail (ResourceExhausted or Internal); 0: never.
  std::uint64_t fault_every = 50;
  std::vector<SimOp> fault_ops = DefaultFaultOps();
  // Validate() after every this many operations; 0: only at the end.
  std::uint64_t validate_every = 1;
  // Mean length of a fill or drain phase, and the range of their targets.
  std::uint64_t phase_ops = 5000;
  std::uint64_t min_live = 50;
  std::uint64_t max_live = 3000;
  // When set, holds the index of the operation running (options.ops during
  // the final checks), for a crash handler to name it.
  volatile std::uint64_t* current_op = nullptr;
};

struct SoakResult {
  std::string mode;
  int streams = 1;
  std::uint64_t seed = 0;
  bool ok = true;
  // On a violation: the index of the operation after which it was found
  // (options.ops when it was found in the final drain), and what it was.
  std::uint64_t failed_op = 0;
  std::string violation;

  std::uint64_t ops = 0;  // operations run
  double seconds = 0;     // wall time of the run, checks included
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t cross_frees = 0;
  std::uint64_t record_streams = 0;
  // Side streams released (ReleaseStream), destroyed in the simulator and
  // made again under the same handle.
  std::uint64_t streams_released = 0;
  std::uint64_t completions = 0;
  std::uint64_t trims = 0;
  std::uint64_t ooms = 0;  // Allocate answered ResourceExhausted
  // Sharing (modes that share): exports, imports and closes that worked,
  // frees of blocks an importer still had open (held), and imports of
  // descriptions whose export had ended (each refused).
  std::uint64_t exports = 0;
  std::uint64_t imports = 0;
  std::uint64_t closes = 0;
  std::uint64_t held = 0;
  std::uint64_t stale_refused = 0;
  // Faults armed on the simulator, and those that fired (a later fault on
  // the same call replaces one that has not).
  std::uint64_t faults_armed = 0;
  std::uint64_t faults_injected = 0;
  // Operations that failed with the injected error (Allocate, Trim), and
  // injected faults that hit the soak's own event calls (retried).
  std::uint64_t failed_by_fault = 0;
  std::uint64_t harness_faults = 0;
  std::uint64_t hazards = 0;
  std::uint64_t access_violations = 0;
  std::uint64_t validator_runs = 0;
  std::uint64_t peak_live = 0;
  std::uint64_t peak_bytes_requested = 0;
  std::uint64_t events_recorded = 0;
  // The most Stats::bytes_release_pending seen at a validation.
  std::uint64_t peak_release_pending = 0;
};

// Runs `mode` on a fresh simulated device. Errors are for setup only (a bad
// configuration); what the soak finds is in the result.
absl::StatusOr<SoakResult> RunSoak(const SoakMode& mode,
                                   const SoakOptions& options);

// The gpualloc-soak command line that replays `result`'s violation with the
// validator after every operation.
std::string ReplayCommand(const SoakResult& result, const SoakOptions& options);
// The same for `ops` operations of `mode` on `streams` streams; the text
// before and after the number of operations (for a crash handler).
struct ReplayParts {
  std::string before_ops;
  std::string after_ops;
};
ReplayParts ReplayCommandParts(absl::string_view mode, int streams,
                               const SoakOptions& options);

}  // namespace gpualloc::soak

#endif  // GPUALLOC_TOOLS_SOAK_SOAK_LIB_H_
