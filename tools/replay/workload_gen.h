// SPDX-License-Identifier: Apache-2.0
// tools/replay/workload_gen.h: deterministic multi-stream allocation traces
// in the project CSV ("seq,action,addr_or_id,size,stream"), modelling what ML
// runtimes do with side streams. gpualloc-gen writes them; the bundled
// tests/data/traces/gen-*.csv are its output.
//
// The same options give the same bytes on every machine and compiler: the
// random numbers are splitmix64 and every size is integer arithmetic (the
// scale is read once into parts per million).
#ifndef GPUALLOC_TOOLS_REPLAY_WORKLOAD_GEN_H_
#define GPUALLOC_TOOLS_REPLAY_WORKLOAD_GEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/layer.h"

namespace gpualloc::replay {

enum class GenPattern : std::uint8_t {
  // Layer-wise weight prefetch and offload: copy streams bring each layer's
  // weights in ahead of the compute stream, which frees them after use;
  // gradients are offloaded and freed on a copy stream. The offloaded state
  // and the staging buffers are host rows (host_alloc, host_free): the
  // weights and optimizer state for the whole run, per step the token ids
  // and each gradient's staging buffer.
  kPrefetch,
  // FSDP: per layer an all-gather buffer (full parameters) on the all-gather
  // stream, freed on compute after the layer's forward or backward; full
  // gradients reduce-scattered (and freed) on the reduce-scatter stream.
  kFsdp,
  // An inference server: independent request streams, each request holding a
  // growing set of KV-cache-like blocks and decode workspaces on its stream.
  kServe,
};

// "prefetch", "fsdp" or "serve".
absl::StatusOr<GenPattern> ParseGenPattern(absl::string_view name);
absl::string_view GenPatternName(GenPattern pattern);

struct GenOptions {
  GenPattern pattern = GenPattern::kPrefetch;
  std::uint64_t seed = 1;
  // Training steps (prefetch, fsdp) or requests (serve); 0 = the pattern's
  // default (4 steps, 48 requests).
  std::uint64_t steps = 0;
  // Transformer layers (prefetch, fsdp, serve); 0 = 32.
  std::uint64_t layers = 0;
  // prefetch: copy streams (1..8); the weights of layer l come in on copy
  // stream 1 + l % copy_streams, up to copy_streams layers ahead.
  std::uint64_t copy_streams = 2;
  // serve: request streams (1..64).
  std::uint64_t streams = 4;
  // Every size is multiplied by this (> 0; at most 6 decimals are used).
  double scale = 1.0;
};

// What a generated trace holds (for reports and tests).
struct GenSummary {
  std::uint64_t ops = 0;
  std::uint64_t allocs = 0;
  std::uint64_t streams = 0;          // distinct stream values used
  std::uint64_t peak_live_bytes = 0;  // requested bytes
  // Host rows (host_alloc): the prefetch pattern's page-locked buffers.
  std::uint64_t host_allocs = 0;
  std::uint64_t peak_host_live_bytes = 0;
};

// gpualloc-gen's command line (the arguments after the program name).
struct GenCommand {
  GenOptions options;
  std::string output;    // -o FILE; empty = standard output
  bool summary = false;  // --summary
  bool help = false;     // --help or -h (nothing else is then checked)
};
// InvalidArgument naming the argument when one is unknown, lacks its value or
// has a malformed one, or when --pattern is missing.
absl::StatusOr<GenCommand> ParseGenCommand(
    const std::vector<std::string>& args);

// The CSV text (header included; every allocation freed by the end).
// InvalidArgument naming the option when one is out of range.
absl::StatusOr<std::string> GenerateTrace(const GenOptions& options,
                                          GenSummary* summary = nullptr);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_WORKLOAD_GEN_H_
