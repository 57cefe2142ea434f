// SPDX-License-Identifier: Apache-2.0
// tools/soak.cc: gpualloc-soak, long random multi-stream runs of every
// allocator mode on the simulator, checked against a shadow model after every
// operation (tools/soak/soak_lib.h says what is generated and checked).
//
// Stops at the first violation with the mode, seed and operation index and
// the command that replays exactly that sequence (exit status 1); otherwise
// prints one line of figures per mode and stream count (exit status 0).
//
// Uses the public headers only.
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/config.h"
#include "gpualloc/sim_backend.h"
#include "tools/soak/soak_lib.h"

namespace {

using gpualloc::soak::SoakMode;
using gpualloc::soak::SoakOptions;
using gpualloc::soak::SoakResult;

constexpr absl::string_view kUsage =
    "usage: gpualloc-soak [--seed S] [--ops N] [--streams 1,4]\n"
    "                     [--modes bfc-expandable,bfc-regions,...]\n"
    "                     [--max-size SIZE] [--device-memory SIZE]\n"
    "                     [--cross-free-percent P] [--fault-every N]\n"
    "                     [--fault-ops LIST]\n"
    "                     [--validate-every N] [--phase-ops N]\n"
    "                     [--min-live N] [--max-live N]\n"
    "\n"
    "Reads: the command line only. The environment (GPUALLOC_* and the\n"
    "other variables gpualloc-info shows) is not read.\n"
    "\n"
    "Runs random allocation sequences (fill and drain phases, log-uniform\n"
    "sizes, several streams with RecordStream users, cross-stream frees,\n"
    "side streams released and destroyed, injected backend faults) on a\n"
    "simulated device in every allocator mode, checking after every\n"
    "operation: no overlapping blocks, bytes_requested equal to the live\n"
    "requests, no hazard, no call on a released stream, Validate(); at the\n"
    "end nothing in use and the device's memory all returned.\n"
    "\n"
    "  --seed S                the sequence (default 1)\n"
    "  --ops N                 operations per mode and stream count\n"
    "                          (default 40000)\n"
    "  --streams LIST          stream counts to run (default 1,4)\n"
    "  --modes LIST            bfc-expandable, bfc-regions, bfc-prealloc,\n"
    "                          platform, async (default all)\n"
    "  --max-size SIZE         largest block (default 256MiB)\n"
    "  --device-memory SIZE    simulated device (default 16GiB; the limit is\n"
    "                          75% of it)\n"
    "  --cross-free-percent P  frees naming another stream than the\n"
    "                          allocation's (default 20)\n"
    "  --fault-every N         inject a backend fault every N operations\n"
    "                          (default 50; 0: none)\n"
    "  --fault-ops LIST        the backend calls that fail (default\n"
    "                          allocate,pool_allocate,map,create_physical,\n"
    "                          create_event,record_event,query_event; any\n"
    "                          simulator call by its name, e.g. unmap)\n"
    "  --validate-every N      Validate() every N operations (default 1)\n"
    "  --phase-ops N           mean fill/drain phase length (default 5000)\n"
    "  --min-live N, --max-live N  range of the phases' targets of live\n"
    "                          blocks (default 50, 3000)\n"
    "\n"
    "Exit status: 0 when every run passed, 1 on a violation, 2 on bad\n"
    "arguments or configuration.\n";

int Usage(absl::string_view error) {
  absl::FPrintF(stderr, "gpualloc-soak: %s\n\n%s", error, kUsage);
  return 2;
}

bool ParseCount(absl::string_view text, std::uint64_t* out) {
  return absl::SimpleAtoi(text, out);
}

// What a crash (an internal check's abort, a fault) reports: the run and the
// operation it was in, and the command that replays up to it.
volatile std::uint64_t g_current_op = 0;
std::string g_crash_what;     // "mode M, N streams, seed S"
std::string g_replay_before;  // the replay command up to the --ops value
std::string g_replay_after;   // and after it

void WriteAll(const char* text, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}
void WriteString(const std::string& s) { WriteAll(s.data(), s.size()); }
void WriteNumber(std::uint64_t v) {
  char digits[24];
  int n = 0;
  do {
    digits[sizeof(digits) - 1 - n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  WriteAll(digits + sizeof(digits) - n, static_cast<std::size_t>(n));
}

extern "C" void OnCrash(int sig) {
  const std::uint64_t op = g_current_op;
  WriteString("\nCRASH (signal ");
  WriteNumber(static_cast<std::uint64_t>(sig));
  WriteString(") in ");
  WriteString(g_crash_what);
  WriteString(", during operation ");
  WriteNumber(op);
  WriteString("\nreplay: ");
  WriteString(g_replay_before);
  WriteNumber(op + 1);
  WriteString(g_replay_after);
  WriteString("\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  SoakOptions options;
  options.ops = 40'000;
  std::vector<int> stream_counts = {1, 4};
  std::vector<SoakMode> modes = gpualloc::soak::AllModes();

  for (int i = 1; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      absl::PrintF("%s", kUsage);
      return 0;
    }
    if (i + 1 >= argc) return Usage(absl::StrCat(flag, " needs a value"));
    const absl::string_view value = argv[++i];
    const std::string bad = absl::StrCat("bad value for ", flag, ": ", value);
    std::uint64_t n = 0;
    if (flag == "--seed") {
      if (!ParseCount(value, &options.seed)) return Usage(bad);
    } else if (flag == "--ops") {
      if (!ParseCount(value, &options.ops)) return Usage(bad);
    } else if (flag == "--streams") {
      stream_counts.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int s = 0;
        if (!absl::SimpleAtoi(part, &s) || s < 1 || s > 64) return Usage(bad);
        stream_counts.push_back(s);
      }
    } else if (flag == "--modes") {
      modes.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        absl::StatusOr<SoakMode> m = gpualloc::soak::FindMode(part);
        if (!m.ok()) return Usage(std::string(m.status().message()));
        modes.push_back(*m);
      }
    } else if (flag == "--max-size" || flag == "--device-memory") {
      absl::StatusOr<std::uint64_t> size = gpualloc::ParseSize(value, flag);
      if (!size.ok() || *size == 0) return Usage(bad);
      (flag == "--max-size" ? options.max_size : options.device_memory) = *size;
    } else if (flag == "--cross-free-percent") {
      if (!ParseCount(value, &n) || n > 100) return Usage(bad);
      options.cross_free_percent = static_cast<int>(n);
    } else if (flag == "--fault-every") {
      if (!ParseCount(value, &options.fault_every)) return Usage(bad);
    } else if (flag == "--fault-ops") {
      absl::StatusOr<std::vector<gpualloc::SimOp>> ops =
          gpualloc::soak::ParseFaultOps(value);
      if (!ops.ok()) return Usage(std::string(ops.status().message()));
      options.fault_ops = *ops;
    } else if (flag == "--validate-every") {
      if (!ParseCount(value, &options.validate_every)) return Usage(bad);
    } else if (flag == "--phase-ops") {
      if (!ParseCount(value, &options.phase_ops)) return Usage(bad);
    } else if (flag == "--min-live") {
      if (!ParseCount(value, &options.min_live)) return Usage(bad);
    } else if (flag == "--max-live") {
      if (!ParseCount(value, &options.max_live)) return Usage(bad);
    } else {
      return Usage(absl::StrCat("unknown flag ", flag));
    }
  }
  if (options.min_live > options.max_live) {
    return Usage(absl::StrCat("--min-live ", options.min_live,
                              " is above --max-live ", options.max_live,
                              " (the phases' targets lie between them)"));
  }

  absl::PrintF(
      "gpualloc-soak: seed %d, %d ops per run, sizes 1 B..%d B, device %d B, "
      "cross-stream frees %d%%, a fault every %d ops (%s), Validate every "
      "%d\n",
      options.seed, options.ops, options.max_size, options.device_memory,
      options.cross_free_percent, options.fault_every,
      gpualloc::soak::FaultOpsString(options.fault_ops),
      options.validate_every);
  absl::PrintF("%-15s %7s %10s %8s %11s %8s %8s %8s %8s %8s %8s %10s %7s\n",
               "mode", "streams", "ops", "seconds", "ops/s", "ooms", "faults",
               "failed", "xfrees", "released", "hazards", "validated", "peak");
  std::fflush(stdout);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    std::signal(sig, OnCrash);
  }
  for (int streams : stream_counts) {
    for (const SoakMode& mode : modes) {
      SoakOptions run_options = options;
      run_options.streams = streams;
      run_options.current_op = &g_current_op;
      g_crash_what =
          absl::StrFormat("mode %s (%s), %d streams, seed %d", mode.name,
                          mode.config, streams, options.seed);
      gpualloc::soak::ReplayParts parts =
          gpualloc::soak::ReplayCommandParts(mode.name, streams, options);
      g_replay_before = std::move(parts.before_ops);
      g_replay_after = std::move(parts.after_ops);
      absl::StatusOr<SoakResult> r = gpualloc::soak::RunSoak(mode, run_options);
      if (!r.ok()) {
        absl::FPrintF(stderr, "gpualloc-soak: %s: %s\n", mode.name,
                      r.status().ToString());
        return 2;
      }
      const double rate =
          r->seconds > 0 ? static_cast<double>(r->ops) / r->seconds : 0;
      absl::PrintF(
          "%-15s %7d %10d %8.1f %11.0f %8d %8d %8d %8d %8d %8d %10d %7d\n",
          r->mode, r->streams, r->ops, r->seconds, rate, r->ooms,
          r->faults_injected, r->failed_by_fault, r->cross_frees,
          r->streams_released, r->hazards, r->validator_runs, r->peak_live);
      std::fflush(stdout);
      if (!r->ok) {
        absl::PrintF(
            "\nVIOLATION in mode %s (%s), %d streams, seed %d, after "
            "operation %d:\n  %s\nreplay: %s\n",
            mode.name, mode.config, streams, options.seed, r->failed_op,
            r->violation, gpualloc::soak::ReplayCommand(*r, run_options));
        return 1;
      }
    }
  }
  absl::PrintF("all runs passed\n");
  return 0;
}
