// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay.cc: a trace replayed on a (simulated) device (Replay,
// its passes in replay_passes.cc), and the PyTorch baseline table. The JSON
// form of the result is in replay_json.cc, the no-wait bound in
// nowait_bound.cc.
//
// Two passes over the trace, each on a fresh backend and allocator:
//   1. an untimed pass, first: it runs the trace up to the step after which
//      the live requested bytes first peaked, to read the fragmentation there
//      (the step is known from the trace when every allocation succeeds;
//      after a failed allocation the pass runs to the end, watching for the
//      peak), and, when a timeline is asked for, to the end while recording
//      blocks, regions and samples. It notes what each allocation answered.
//      Run first, it is also the measured pass's warm-up: the heap the
//      simulator's and the allocator's tables grow into is touched (and its
//      page faults paid) outside the timed loop, so that the first
//      configuration replayed in a process, or the first on a larger trace,
//      is not slower than the same configuration replayed again. Its device
//      is destroyed before the measured pass, which reuses its memory;
//   2. the measured pass: only Allocate/Deallocate (plus, on multi-stream
//      traces, the simulator's Use and a periodic CompleteAll, timed apart
//      and taken out) inside the timed loop, so ns_per_op is the allocator's
//      cost and no clock is read per call on one stream. With a repeat count
//      it runs the trace that many times on the same allocator, each time
//      under fresh ids, freeing what is left live at the end of each, and
//      reads the counters after each.
// The simulator's fake addresses are deterministic, so both passes make the
// same calls and see the same layout: pass 1 makes every call pass 2 makes
// (as far as it goes), the failed allocations included (out of memory, the
// allocator collects garbage, trims and waits on the host), and every
// allocation must get the same answer in both, or the replay is an error.
#include "tools/replay/replay.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "tools/replay/reference.h"
#include "tools/replay/replay_internal.h"

namespace gpualloc::replay {
namespace {

using replay_internal::Counters;
using replay_internal::Device;
using replay_internal::MakeReplayState;
using replay_internal::MeasuredPass;
using replay_internal::ReplayState;
using replay_internal::UntimedPass;

// The limit gpualloc itself would use under `config` on its device
// (mem_limit, else mem_fraction of the device's memory, as the allocator
// resolves them): read from an allocator made on a backend of its own, so
// that the device a replay runs on sees none of its calls.
absl::StatusOr<std::uint64_t> GpuallocLimit(const Config& config,
                                            SimClock clock) {
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      CreateBackend(config, 0, clock);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::unique_ptr<Allocator>> allocator =
      CreateAllocator(config.options, *backend);
  if (!allocator.ok()) return allocator.status();
  return (*allocator)->GetStats().bytes_limit;
}

// `reference`: a reference model (reference.h) instead of gpualloc, under
// `reference_limit` bytes.
absl::StatusOr<Device> MakeDevice(const Config& config,
                                  SimClock clock = SimClock::kManual,
                                  const std::string& reference = "",
                                  std::uint64_t reference_limit = 0) {
  Device d;
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      CreateBackend(config, 0, clock);
  if (!backend.ok()) return backend.status();
  d.backend = std::move(*backend);
  d.sim = std::dynamic_pointer_cast<SimBackend>(d.backend);
  absl::StatusOr<std::unique_ptr<Allocator>> allocator =
      reference.empty()
          ? CreateAllocator(config.options, d.backend)
          : CreateReference(reference, d.backend, reference_limit);
  if (!allocator.ok()) return allocator.status();
  d.allocator = std::move(*allocator);
  return d;
}

std::string DeviceName(const Config& config, const DeviceInfo& info) {
  std::string model = info.name;
  if (!config.options.arch.empty() && config.options.arch != "auto") {
    model = config.options.arch;
  } else if (absl::StatusOr<const ArchProfile*> p =
                 FindArchProfile(info.vendor, info.arch_id, info.total_bytes);
             p.ok()) {
    model = std::string((*p)->name);
  }
  return absl::StrFormat("%s %s %.2f GB", info.backend, model,
                         static_cast<double>(info.total_bytes) / 1e9);
}

}  // namespace

void KeepFreedMemoryMapped() {
#if defined(__GLIBC__)
  // The largest threshold glibc takes (32 MiB on 64-bit); setting it also
  // turns off the dynamic threshold, which would otherwise trim again.
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

namespace {

void WarmHeapHeadroom() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  // The measured pass makes the untimed pass's allocations again, but into a
  // heap whose free lists that pass left in another order, so a table may
  // no longer fit where it was and grow the heap past what was ever touched
  // (seen: 2 MiB, 772 page faults, depending only on the heap's start).
  // Touching half the heap's size again above its top (blocks under the
  // mmap threshold, freed into the top, which KeepFreedMemoryMapped keeps)
  // leaves that growth already mapped. Costs that much resident memory.
  constexpr std::size_t kBlock = 4 << 20;
  const std::size_t headroom =
      std::max<std::size_t>(mallinfo2().arena / 2, 2 * kBlock);
  std::vector<void*> blocks;
  for (std::size_t done = 0; done < headroom; done += kBlock) {
    void* b = std::malloc(kBlock);
    if (b == nullptr) break;
    std::memset(b, 0, kBlock);
    blocks.push_back(b);
  }
  for (void* b : blocks) std::free(b);
#endif
}

}  // namespace

Trace OneStream(const Trace& trace) {
  Trace merged = trace;
  for (TraceOp& op : merged.ops) op.stream = 0;
  for (HostTraceOp& op : merged.host_ops) op.stream = 0;
  merged.num_streams = std::min<std::uint64_t>(trace.num_streams, 1);
  return merged;
}

namespace {

std::string LabelOf(const ConfigOverrides& overrides,
                    const std::string& config_string) {
  if (overrides.name.has_value() && !overrides.name->empty()) {
    return *overrides.name;
  }
  return config_string.empty() ? "defaults" : config_string;
}

// The whole run's figures: the last reading, but for the peaks, which were
// reset at every pass: their maximum over the passes.
void SetTotals(const Counters& before, ReplayResult* result) {
  Stats stats = before.stats;
  for (const ReplayRepetition& rep : result->repetitions) {
    stats.peak_bytes_in_use =
        std::max(stats.peak_bytes_in_use, rep.peak_bytes_in_use);
    stats.peak_bytes_requested =
        std::max(stats.peak_bytes_requested, rep.peak_bytes_requested);
    stats.peak_bytes_reserved =
        std::max(stats.peak_bytes_reserved, rep.peak_bytes_reserved);
  }
  result->stats = stats;
  result->peak_bytes_in_use = stats.peak_bytes_in_use;
  result->peak_bytes_requested = stats.peak_bytes_requested;
  result->peak_bytes_reserved = stats.peak_bytes_reserved;
  result->final_bytes_reserved = stats.bytes_reserved;
  result->utilization =
      stats.peak_bytes_reserved == 0
          ? 0
          : static_cast<double>(stats.peak_bytes_requested) /
                static_cast<double>(stats.peak_bytes_reserved);
  result->largest_free_block_bytes = stats.largest_free_block_bytes;
  result->backend_allocs = stats.backend_allocs;
  result->backend_frees = stats.backend_frees;
  result->events_recorded = stats.events_recorded;
  result->host_waits = stats.host_waits;
  result->stream_waits = stats.stream_waits;
  result->completion_calls = before.completion_calls;
  result->backend_calls = before.backend_calls;
  result->modeled_backend_ns = before.modeled_ns;
  result->hazards = before.hazards;
}

// Pass 1 must have seen what the measured pass saw, as far as it went.
absl::Status CheckSameAnswers(const Trace& trace, const ReplayState& st,
                              bool record, std::uint64_t total_steps,
                              std::uint64_t steps) {
  const std::vector<std::uint8_t>& outcome = st.outcome;
  const std::vector<std::uint8_t>& failed = st.failed;
  const std::uint64_t na = st.na;
  for (std::uint64_t id = 0; id < failed.size(); ++id) {
    if (outcome[id] == 0 || (outcome[id] == 2) == (failed[id] != 0)) continue;
    return absl::InternalError(absl::StrCat(
        "replay of ", trace.name, " is not deterministic: allocation ", id % na,
        " of pass ", id / na + 1, " ",
        failed[id] ? "failed in the measured pass but succeeded in the untimed "
                     "one"
                   : "succeeded in the measured pass but failed in the untimed "
                     "one"));
  }
  if (record && total_steps != steps) {
    return absl::InternalError(absl::StrCat(
        "replay of ", trace.name, " is not deterministic: ", steps,
        " steps in the measured pass, ", total_steps, " in the untimed one"));
  }
  return absl::OkStatus();
}

// The result's description of the run, before either pass.
ReplayResult DescribeRun(const Trace& trace, const std::string& config_string,
                         const ConfigOverrides& overrides,
                         const ReplayOptions& options) {
  ReplayResult result;
  result.trace = trace.name;
  result.config = config_string;
  result.label = LabelOf(overrides, config_string);
  if (!options.reference.empty()) {
    // The configuration gave the device only.
    result.config.clear();
    result.reference = options.reference;
    result.label = ReferenceLabel(options.reference);
  }
  result.repeat = options.repeat;
  result.complete_every = options.complete_every;
  result.nowait_bound_bytes = NoWaitBound(trace, options);
  return result;
}

}  // namespace

std::uint64_t PeakRequested(const Trace& trace) {
  std::uint64_t live = 0, peak = 0;
  for (const TraceOp& op : trace.ops) {
    // (A free carries its allocation's size.)
    if (op.kind == TraceOp::Kind::kAlloc) {
      live += op.size;
      peak = std::max(peak, live);
    } else {
      live -= op.size;
    }
  }
  return peak;
}

absl::StatusOr<std::string> ConfigLabel(const std::string& config_string) {
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(config_string);
  if (!overrides.ok()) return overrides.status();
  return LabelOf(*overrides, config_string);
}

absl::StatusOr<ReplayResult> Replay(const Trace& trace,
                                    const std::string& config_string,
                                    const ReplayOptions& options) {
  if (options.repeat == 0) {
    return absl::InvalidArgumentError("expected a repeat count of at least 1");
  }
  if (options.one_stream) {
    ReplayOptions merged = options;
    merged.one_stream = false;
    absl::StatusOr<ReplayResult> r =
        Replay(OneStream(trace), config_string, merged);
    if (r.ok()) r->one_stream = true;
    return r;
  }
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(config_string);
  if (!overrides.ok()) return overrides.status();
  std::uint64_t limit_bytes = 0;
  if (options.limit_factor > 0) {
    const std::uint64_t peak = PeakRequested(trace);
    const double bytes = options.limit_factor * static_cast<double>(peak);
    if (!(bytes >= 1 && bytes < 1.8e19)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--limit-factor %g gives trace %s a limit of %.0f bytes (its peak "
          "of live requested bytes is %d): not a limit in bytes",
          options.limit_factor, trace.name, bytes, peak));
    }
    limit_bytes = static_cast<std::uint64_t>(bytes);
    overrides->memory_limit = limit_bytes;
    overrides->memory_fraction.reset();
  }
  // The simulator unless backend= says otherwise.
  if (!overrides->backend.has_value()) overrides->backend = BackendKind::kSim;
  // An empty environment: a replay must not depend on the caller's GPUALLOC_*
  // variables, or two runs of the same command could disagree.
  absl::StatusOr<Config> config = ResolveConfig(*overrides, MapEnvironment({}));
  if (!config.ok()) return config.status();

  ReplayResult result = DescribeRun(trace, config_string, *overrides, options);
  if (limit_bytes != 0) {
    result.limit_factor = options.limit_factor;
    result.limit_bytes = limit_bytes;
  }
  // The timestamp model needs the trace's times and more than one stream
  // (one stream never waits for another).
  const bool timed_model =
      options.work_us > 0 && trace.timed && trace.num_streams > 1;
  const SimClock clock = timed_model ? SimClock::kModeled : SimClock::kManual;

  // The untimed pass first (on its own device), then the measured one: the
  // untimed pass warms what the first replay of a process (or the first of
  // a larger trace) would otherwise pay inside the timed loop, the page
  // faults of the heap the simulator's and the allocator's tables grow into,
  // so that ns_per_op compares across configurations whatever their order.
  // A reference model runs under the limit gpualloc would have there.
  std::uint64_t reference_limit = 0;
  if (!options.reference.empty()) {
    absl::StatusOr<std::uint64_t> limit = GpuallocLimit(*config, clock);
    if (!limit.ok()) return limit.status();
    reference_limit = *limit;
  }
  absl::StatusOr<Device> first =
      MakeDevice(*config, clock, options.reference, reference_limit);
  if (!first.ok()) return first.status();
  result.device = DeviceName(*config, first->backend->info());

  const bool multi_stream = trace.num_streams > 1 && first->sim != nullptr;
  if (multi_stream) {
    result.progress_model = timed_model ? "timestamps" : "ops";
    if (timed_model) result.work_us = options.work_us;
  }
  ReplayState st = MakeReplayState(trace, options, multi_stream, timed_model);
  absl::StatusOr<std::uint64_t> total_steps =
      UntimedPass(st, *first, options, result).Run();
  if (!total_steps.ok()) return total_steps.status();

  // Pass 1's device goes first: the measured pass reuses its memory.
  first->allocator.reset();
  first->sim.reset();
  first->backend.reset();
  WarmHeapHeadroom();
  absl::StatusOr<Device> device =
      MakeDevice(*config, clock, options.reference, reference_limit);
  if (!device.ok()) return device.status();
  MeasuredPass measured(st, *device, options, result);
  if (absl::Status s = measured.Run(); !s.ok()) return s;

  result.ops = measured.calls();
  result.frees = measured.frees();
  result.ns_per_op =
      measured.calls() == 0
          ? 0
          : measured.elapsed_ns() / static_cast<double>(measured.calls());
  for (std::uint64_t id = 0; id < st.failed.size(); ++id) {
    if (st.failed[id]) result.failed_ids.push_back(id);
  }
  SetTotals(measured.last(), &result);
  if (absl::Status s = CheckSameAnswers(trace, st, options.record_timeline,
                                        *total_steps, measured.steps());
      !s.ok()) {
    return s;
  }
  // The host rows, apart (their figures do not touch the device's).
  if (!trace.host_ops.empty() && options.reference.empty()) {
    absl::StatusOr<HostReplayResult> host =
        ReplayHost(trace, config_string, options);
    if (!host.ok()) return host.status();
    result.host = std::move(*host);
  }
  // What the trace left live is freed before the allocator goes (untimed,
  // after every figure was read), so that it has nothing to report.
  for (std::uint64_t j = 0; j < st.ptrs.size(); ++j) {
    if (st.ptrs[j] == nullptr) continue;
    (void)device->allocator->Deallocate(st.ptrs[j],
                                        Stream(st.alloc_stream[j % st.na]));
    st.ptrs[j] = nullptr;
  }
  return result;
}

absl::StatusOr<std::map<std::string, std::uint64_t>> LoadBaseline(
    const std::string& sources_md) {
  std::ifstream in(sources_md);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(sources_md, ": cannot open the baseline"));
  }
  std::map<std::string, std::uint64_t> baseline;
  std::string line;
  std::size_t number = 0;
  bool in_table = false;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    for (auto& c : cells) c = absl::StripAsciiWhitespace(c);
    // "| a | b |" splits into "", "a", "b", "".
    const bool is_row = cells.size() >= 4 && cells.front().empty();
    if (!in_table) {
      in_table =
          is_row && cells[1] == "trace" && cells[2] == "PyTorch peak reserved";
      continue;
    }
    if (!is_row) {
      if (!baseline.empty()) break;  // the end of the table
      continue;
    }
    if (absl::StartsWith(cells[1], "---")) continue;  // the separator row
    // "6.738 GiB": GiB is the table's unit; MiB is accepted too.
    std::vector<absl::string_view> parts =
        absl::StrSplit(cells[2], ' ', absl::SkipEmpty());
    double value = 0;
    double scale = 0;
    if (parts.size() == 2) {
      if (parts[1] == "GiB") scale = 1024.0 * 1024 * 1024;
      if (parts[1] == "MiB") scale = 1024.0 * 1024;
    }
    if (scale == 0 || !absl::SimpleAtod(parts[0], &value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          sources_md, ":", number,
          ": expected a size like \"6.738 GiB\", got \"", cells[2], "\""));
    }
    baseline[std::string(cells[1])] =
        static_cast<std::uint64_t>(std::llround(value * scale));
  }
  if (baseline.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        sources_md,
        ": expected a table \"| trace | PyTorch peak reserved | ... |\", got "
        "none"));
  }
  return baseline;
}

}  // namespace gpualloc::replay
