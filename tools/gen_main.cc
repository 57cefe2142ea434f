// SPDX-License-Identifier: Apache-2.0
// tools/gen_main.cc: gpualloc-gen, deterministic multi-stream allocation
// traces in the project CSV (tools/replay/workload_gen.h).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/replay/workload_gen.h"

namespace {

constexpr absl::string_view kUsage =
    "usage: gpualloc-gen --pattern prefetch|fsdp|serve [--seed N]\n"
    "                    [--steps N | --requests N] [--layers N]\n"
    "                    [--copy-streams K] [--streams M] [--scale X]\n"
    "                    [-o FILE] [--summary]\n"
    "\n"
    "Reads: the command line only (no configuration, no environment).\n"
    "\n"
    "Writes a multi-stream allocation trace in the project CSV\n"
    "(seq,action,addr_or_id,size,stream) that gpualloc-replay and\n"
    "gpualloc-tune read. The same arguments give the same bytes. Stream 0 is\n"
    "the compute (default) stream; side streams are 1, 2, ...; every\n"
    "allocation is freed by the end.\n"
    "\n"
    "  --pattern prefetch   layer-wise weight prefetch and offload: copy\n"
    "                       streams 1..K bring each layer's weights in ahead\n"
    "                       of compute, which frees them; the backward pass\n"
    "                       prefetches in reverse, and weight gradients are\n"
    "                       offloaded and freed on a copy stream; the\n"
    "                       offloaded weights and optimizer state, and per\n"
    "                       step the token ids and gradient staging, are\n"
    "                       page-locked host buffers (host_alloc and\n"
    "                       host_free rows)\n"
    "  --pattern fsdp       FSDP over 8 ranks: all-gather buffers on stream 1\n"
    "                       freed on compute after each layer's forward or\n"
    "                       backward, full gradients reduce-scattered and\n"
    "                       freed on stream 2, sharded optimizer state\n"
    "  --pattern serve      an inference server: M request streams (1..M), up\n"
    "                       to two requests in flight on each, every request\n"
    "                       holding KV-cache blocks of growing sizes and\n"
    "                       decode workspaces, all freed on its stream\n"
    "  --seed N             random seed (default 1)\n"
    "  --steps N            training steps (prefetch, fsdp; default 4)\n"
    "  --requests N         requests (serve; default 48)\n"
    "  --layers N           transformer layers (default 32)\n"
    "  --copy-streams K     prefetch: copy streams, 1..8 (default 2)\n"
    "  --streams M          serve: request streams, 1..64 (default 4)\n"
    "  --scale X            multiply every size by X (default 1), to size a\n"
    "                       trace relative to a device\n"
    "  -o FILE              write to FILE (default standard output)\n"
    "  --summary            print ops, allocations, streams and peak live\n"
    "                       bytes to standard error\n"
    "  --help               this text\n";

int Fail(absl::string_view message) {
  std::fprintf(stderr, "gpualloc-gen: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<gpualloc::replay::GenCommand> command =
      gpualloc::replay::ParseGenCommand(args);
  if (!command.ok()) {
    return Fail(absl::StrCat(command.status().message(), "\n", kUsage));
  }
  if (command->help) {
    std::printf("%.*s", static_cast<int>(kUsage.size()), kUsage.data());
    return 0;
  }
  const gpualloc::replay::GenOptions& options = command->options;
  const std::string& out_path = command->output;
  const bool summary = command->summary;

  gpualloc::replay::GenSummary s;
  absl::StatusOr<std::string> csv =
      gpualloc::replay::GenerateTrace(options, &s);
  if (!csv.ok()) return Fail(csv.status().message());
  if (out_path.empty()) {
    std::fwrite(csv->data(), 1, csv->size(), stdout);
    if (std::fflush(stdout) != 0) return Fail("cannot write the trace");
  } else {
    std::ofstream out(out_path, std::ios::binary);
    out << *csv;
    out.close();
    if (!out) return Fail(absl::StrCat(out_path, ": cannot write the trace"));
  }
  if (summary) {
    std::fprintf(
        stderr,
        "%s: %llu ops, %llu allocations, %llu streams, peak live "
        "%.3f GiB (%llu bytes)\n",
        std::string(gpualloc::replay::GenPatternName(options.pattern)).c_str(),
        static_cast<unsigned long long>(s.ops),
        static_cast<unsigned long long>(s.allocs),
        static_cast<unsigned long long>(s.streams),
        static_cast<double>(s.peak_live_bytes) / (1024.0 * 1024 * 1024),
        static_cast<unsigned long long>(s.peak_live_bytes));
  }
  if (summary && s.host_allocs > 0) {
    std::fprintf(
        stderr, "host: %llu allocations, peak live %.3f GiB (%llu bytes)\n",
        static_cast<unsigned long long>(s.host_allocs),
        static_cast<double>(s.peak_host_live_bytes) / (1024.0 * 1024 * 1024),
        static_cast<unsigned long long>(s.peak_host_live_bytes));
  }
  return 0;
}
