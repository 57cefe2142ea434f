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
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/config.h"
#include "tools/cli.h"
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
    "side streams released and destroyed, blocks exported to a second\n"
    "simulated process that imports and closes them, stale descriptions,\n"
    "injected backend faults on both devices) on a simulated device in\n"
    "every allocator mode, checking after every operation: no overlapping\n"
    "blocks, bytes_requested equal to the live and held requests, the\n"
    "bytes imported, no hazard, no call on a released stream, Validate()\n"
    "and the device's held memory equal to bytes_reserved; at the end\n"
    "nothing in use or held, the devices' memory all returned and no\n"
    "descriptor left open.\n"
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
    "                          create_event,record_event,query_event,\n"
    "                          set_access,unmap,release_physical,\n"
    "                          get_ipc_handle,export_mapping; any\n"
    "                          simulator call by its name, e.g. free; the\n"
    "                          importer's device gets faults of its own\n"
    "                          calls too)\n"
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

// What the command line asks for.
struct Args {
  SoakOptions options;
  std::vector<int> stream_counts = {1, 4};
  std::vector<SoakMode> modes = gpualloc::soak::AllModes();
};

absl::Status BadValue(absl::string_view flag, absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad value for ", flag, ": ", gpualloc::cli::Quote(value)));
}

// A flag whose value is a count.
gpualloc::cli::Parser::ValueHandler Count(const std::string& flag,
                                          std::uint64_t* into) {
  return [flag, into](const std::string& value) {
    if (!ParseCount(value, into)) return BadValue(flag, value);
    return absl::OkStatus();
  };
}

// --max-size and --device-memory: a size above 0.
gpualloc::cli::Parser::ValueHandler Size(const std::string& flag,
                                         std::uint64_t* into) {
  return [flag, into](const std::string& value) {
    absl::StatusOr<std::uint64_t> size = gpualloc::ParseSize(value, flag);
    if (!size.ok() || *size == 0) return BadValue(flag, value);
    *into = *size;
    return absl::OkStatus();
  };
}

absl::Status SetStreams(const std::string& value, Args* args) {
  args->stream_counts.clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int s = 0;
    if (!absl::SimpleAtoi(part, &s) || s < 1 || s > 64) {
      return BadValue("--streams", value);
    }
    args->stream_counts.push_back(s);
  }
  return absl::OkStatus();
}

absl::Status SetModes(const std::string& value, Args* args) {
  args->modes.clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    absl::StatusOr<SoakMode> m = gpualloc::soak::FindMode(part);
    if (!m.ok()) return absl::InvalidArgumentError(m.status().message());
    args->modes.push_back(*m);
  }
  return absl::OkStatus();
}

absl::Status SetCrossFreePercent(const std::string& value, Args* args) {
  std::uint64_t n = 0;
  if (!ParseCount(value, &n) || n > 100) {
    return BadValue("--cross-free-percent", value);
  }
  args->options.cross_free_percent = static_cast<int>(n);
  return absl::OkStatus();
}

absl::Status SetFaultOps(const std::string& value, Args* args) {
  absl::StatusOr<std::vector<gpualloc::SimOp>> ops =
      gpualloc::soak::ParseFaultOps(value);
  if (!ops.ok()) return absl::InvalidArgumentError(ops.status().message());
  args->options.fault_ops = *ops;
  return absl::OkStatus();
}

// Every argument but --help is a flag and its value, as it always was.
absl::StatusOr<gpualloc::cli::Parsed> ParseArgs(int argc, char** argv,
                                                Args* args) {
  SoakOptions& o = args->options;
  const auto with_args = [args](
                             absl::Status (*set)(const std::string&, Args*)) {
    return [args, set](const std::string& value) { return set(value, args); };
  };
  gpualloc::cli::Parser parser(
      gpualloc::cli::Syntax{.unknown_takes_value = true});
  parser.Value("--seed", Count("--seed", &o.seed))
      .Value("--ops", Count("--ops", &o.ops))
      .Value("--streams", with_args(SetStreams))
      .Value("--modes", with_args(SetModes))
      .Value("--max-size", Size("--max-size", &o.max_size))
      .Value("--device-memory", Size("--device-memory", &o.device_memory))
      .Value("--cross-free-percent", with_args(SetCrossFreePercent))
      .Value("--fault-every", Count("--fault-every", &o.fault_every))
      .Value("--fault-ops", with_args(SetFaultOps))
      .Value("--validate-every", Count("--validate-every", &o.validate_every))
      .Value("--phase-ops", Count("--phase-ops", &o.phase_ops))
      .Value("--min-live", Count("--min-live", &o.min_live))
      .Value("--max-live", Count("--max-live", &o.max_live))
      .Unknown([](const std::string& flag) {
        return absl::StrCat("unknown flag ", gpualloc::cli::Quote(flag));
      });
  return parser.Parse(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  args.options.ops = 40'000;
  absl::StatusOr<gpualloc::cli::Parsed> parsed = ParseArgs(argc, argv, &args);
  if (!parsed.ok()) return Usage(parsed.status().message());
  if (*parsed == gpualloc::cli::Parsed::kHelp) {
    absl::PrintF("%s", kUsage);
    return 0;
  }
  const SoakOptions& options = args.options;
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
  absl::PrintF(
      "%-15s %7s %10s %8s %11s %8s %8s %8s %8s %8s %8s %10s %7s %11s %8s "
      "%8s %8s %6s\n",
      "mode", "streams", "ops", "seconds", "ops/s", "ooms", "faults", "failed",
      "xfrees", "released", "hazards", "validated", "peak", "pending",
      "exports", "imports", "held", "stale");
  std::fflush(stdout);
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    std::signal(sig, OnCrash);
  }
  for (int streams : args.stream_counts) {
    for (const SoakMode& mode : args.modes) {
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
          "%-15s %7d %10d %8.1f %11.0f %8d %8d %8d %8d %8d %8d %10d %7d "
          "%11d %8d %8d %8d %6d\n",
          r->mode, r->streams, r->ops, r->seconds, rate, r->ooms,
          r->faults_injected, r->failed_by_fault, r->cross_frees,
          r->streams_released, r->hazards, r->validator_runs, r->peak_live,
          r->peak_release_pending, r->exports, r->imports, r->held,
          r->stale_refused);
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
