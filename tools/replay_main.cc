// SPDX-License-Identifier: Apache-2.0
// tools/replay_main.cc: gpualloc-replay, real traces replayed against one or
// more configurations side by side.
//
// Every trace is parsed before any replay starts, so a bad file fails the run
// at once instead of after minutes of work. Uses the public headers and
// tools/replay only.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "tools/cli.h"
#include "tools/replay/reference.h"
#include "tools/replay/replay.h"
#include "tools/replay/report.h"
#include "tools/replay/snapshot_view.h"
#include "tools/replay/svg.h"

namespace {

using gpualloc::replay::ReplayResult;
using gpualloc::replay::Trace;

constexpr absl::string_view kUsage =
    "usage: gpualloc-replay [--json] [--svg FILE] [--baseline SOURCES.md]\n"
    "                       [--repeat N] [--complete-every N] [--work-us N]\n"
    "                       [--one-stream | --compare-one-stream]\n"
    "                       [--config STRING]... [--reference NAMES]\n"
    "                       TRACE...\n"
    "       gpualloc-replay --svg FILE --snapshot SNAPSHOT.json... [TRACE...]\n"
    "\n"
    "Reads: the command line only. The environment (GPUALLOC_* and the\n"
    "other variables gpualloc-info shows) is not read, so a replay is\n"
    "reproducible; the device is the simulator unless backend= says\n"
    "otherwise.\n"
    "\n"
    "Replays allocation traces (the project CSV or RMM's logging CSV) on a\n"
    "simulated device, once per configuration, and prints a side-by-side\n"
    "table: peak requested and reserved bytes, utilization, fragmentation at\n"
    "the peak, backend allocations and frees, host and stream waits, the\n"
    "modeled time of the backend calls, stream hazards and the allocator's\n"
    "wall time per call.\n"
    "\n"
    "Multi-stream traces: the device's progress is modeled one of two ways.\n"
    "Ops (the default): the simulated streams run only when told, and all\n"
    "queued work completes after every N ops (--complete-every), a device\n"
    "that keeps up with the host a short way behind it. Timestamps (with\n"
    "--work-us N, for traces whose rows carry times: RMM's Time column or a\n"
    "time_us column after stream in the project CSV): the host makes each\n"
    "call at its trace time, later by as much as its waits have held it up,\n"
    "and each use of a block runs N microseconds on its stream, in order;\n"
    "traces without times keep the ops model. A\n"
    "block freed on one stream is reusable on another once its work has\n"
    "completed, or at once where the allocator makes the new stream wait\n"
    "(\"stream waits\"); out of memory, the allocator waits on the host for\n"
    "pending frees (\"host waits\"). A block freed on another stream than\n"
    "the one that allocated it was handed over: the freeing stream is\n"
    "ordered after the allocating one (its work may still run) and uses the\n"
    "block before the free.\n"
    "\n"
    "Multi-stream traces also get the no-wait bound (the table's \"no-wait\n"
    "bound\", the JSON's nowait_bound_bytes; null for one stream): the most\n"
    "bytes live plus freed but still pending under the progress model, a\n"
    "stream reusing its own pending bytes at once, over the whole run (all\n"
    "passes with --repeat, as one device timeline): what an allocator that\n"
    "never makes a stream or the host wait must hold, before fragmentation.\n"
    "What the streams cost in memory, in one command: --compare-one-stream.\n"
    "\n"
    "Host rows (host_alloc and host_free in the project CSV: page-locked\n"
    "host buffers the streams copy to and from) are replayed apart, through\n"
    "the host pool and with no host cache (each row a HostAllocate or\n"
    "HostFree); the report gains a host section after the table (the JSON a\n"
    "\"host\" object), and the device figures do not change with them.\n"
    "\n"
    "  --config STRING      a configuration (key=value,...; the keys are\n"
    "                       listed below); repeat for more. Default: one, the\n"
    "                       defaults (on the simulator)\n"
    "  --reference NAMES    also replay each trace with other allocators'\n"
    "                       policies, modeled (comma-separated: pytorch =\n"
    "                       PyTorch's CUDACachingAllocator, pytorch-\n"
    "                       expandable = the same with expandable_segments,\n"
    "                       tf =\n"
    "                       TensorFlow's BFC allocator with allow_growth,\n"
    "                       async = the driver's stream-ordered pool), on\n"
    "                       the device of the first --config and under the\n"
    "                       limit gpualloc would use there (its mem_limit or\n"
    "                       mem_fraction; its other allocator settings\n"
    "                       unused), each model applying it by its own\n"
    "                       rule: rows \"pytorch model\" etc. after the\n"
    "                       configurations' (the JSON's \"reference\" names\n"
    "                       the model, its \"config\" is \"\")\n"
    "  --json               one JSON object per (trace, configuration)\n"
    "  --repeat N           replay each trace N times back to back on\n"
    "                       the same allocator (default 1); with N > 1\n"
    "                       each pass ends by freeing what the trace left\n"
    "                       live. The table's backend, wait and modeled-\n"
    "                       time columns are then the last pass's (a warm\n"
    "                       allocator), the others the whole run's, but\n"
    "                       \"pass 1 peak\" and \"pass N peak\", the first\n"
    "                       and the last pass's own peak reserved (creep:\n"
    "                       the last above the first); the JSON adds\n"
    "                       \"repetitions\", each pass's counts and peaks\n"
    "  --complete-every N   multi-stream traces: all queued work completes\n"
    "                       after every N ops (default 64); 0 = only when the\n"
    "                       allocator waits for it on the host\n"
    "  --work-us N          multi-stream traces with times: the timestamp\n"
    "                       model, each use of a block taking N us (the\n"
    "                       JSON's progress_model says which model ran)\n"
    "  --one-stream         replay every trace with every stream mapped to\n"
    "                       stream 0 (the JSON's \"one_stream\": true; the\n"
    "                       table's trace headings say so)\n"
    "  --compare-one-stream also replay each multi-stream trace that way,\n"
    "                       per configuration, and show its peak reserved\n"
    "                       beside the normal one (\"one-stream peak\", the\n"
    "                       JSON's one_stream_peak_bytes_reserved): the\n"
    "                       difference is what the streams cost in memory\n"
    "  --svg FILE           draw the address space over time into FILE\n"
    "  --baseline FILE      add PyTorch's peak reserved from FILE's table\n"
    "                       (tests/data/traces/SOURCES.md) and our ratio\n"
    "  --snapshot FILE      also draw an allocator snapshot (the JSON of\n"
    "                       gpualloc_snapshot_json) into the --svg picture,\n"
    "                       one panel per file; repeat for more\n"
    "  --help               this text\n";

// The first line of the table: what was read.
constexpr char kReads[] =
    "Settings from: the command line only (--config; the environment is not "
    "read)";

// Every configuration key, from the library's own list so that it cannot
// drift from what the parser takes.
std::string KeysHelp() {
  std::string out = "\nConfiguration keys:\n";
  for (const gpualloc::ConfigKeyInfo& k : gpualloc::ConfigKeys()) {
    absl::StrAppendFormat(&out, "  %-15s%s\n", k.key, k.values);
  }
  return out;
}

int Fail(absl::string_view message) {
  std::fprintf(stderr, "gpualloc-replay: %.*s\n",
               static_cast<int>(message.size()), message.data());
  return 1;
}

// The configuration as Replay resolves it (the simulator unless backend=
// says otherwise, no environment), and what creation checks without
// allocating (on the simulator: the device and the options against it),
// without replaying anything.
absl::Status CheckConfig(const std::string& config) {
  absl::StatusOr<gpualloc::ConfigOverrides> overrides =
      gpualloc::ParseConfigString(config);
  if (!overrides.ok()) return overrides.status();
  if (!overrides->backend.has_value()) {
    overrides->backend = gpualloc::BackendKind::kSim;
  }
  absl::StatusOr<gpualloc::Config> resolved =
      gpualloc::ResolveConfig(*overrides, gpualloc::MapEnvironment({}));
  if (!resolved.ok()) return resolved.status();
  return gpualloc::DeviceRegistry::Create(*resolved).status();
}

// Whether `path` can be written, checked by opening it the way the final
// write will, without truncating it; a file this creates is removed again.
absl::Status CheckWritable(const std::string& path) {
  struct stat st;
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a file to write"));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return absl::OkStatus();
}

// What a failed run names: the configuration, or the reference model.
std::string RunName(const std::string& config, const std::string& reference) {
  if (!reference.empty()) return gpualloc::replay::ReferenceLabel(reference);
  return absl::StrCat("config \"", config, "\"");
}

// The error for --repeat, --complete-every or --work-us without a whole
// number.
std::string NumberError(const std::string& flag) {
  return absl::StrCat(flag, " needs a whole number",
                      flag == "--repeat" ? " of at least 1" : "", "\n", kUsage);
}

// What the command line asks for.
struct Args {
  bool json = false;
  std::string svg_path;
  std::string baseline_path;
  std::vector<std::string> configs;
  std::vector<std::string> references;
  std::vector<std::string> paths;
  std::vector<std::string> snapshot_paths;
  std::uint64_t repeat = 1;
  std::uint64_t complete_every = 64;
  std::uint64_t work_us = 0;
  bool one_stream = false;
  bool compare_one_stream = false;
};

// --repeat, --complete-every and --work-us: a whole number (--repeat's at
// least 1).
gpualloc::cli::Parser::ValueHandler WholeNumber(const std::string& flag,
                                                std::uint64_t* into) {
  return [flag, into](const std::string& v) {
    std::uint64_t number = 0;
    if (!absl::SimpleAtoi(v, &number) || (flag == "--repeat" && number == 0)) {
      return absl::InvalidArgumentError(NumberError(flag));
    }
    *into = number;
    return absl::OkStatus();
  };
}

// A flag's value appended to *into.
gpualloc::cli::Parser::ValueHandler AppendTo(std::vector<std::string>* into) {
  return [into](const std::string& v) {
    into->push_back(v);
    return absl::OkStatus();
  };
}

// A flag's value stored in *into.
gpualloc::cli::Parser::ValueHandler StoreIn(std::string* into) {
  return [into](const std::string& v) {
    *into = v;
    return absl::OkStatus();
  };
}

absl::StatusOr<gpualloc::cli::Parsed> ParseArgs(int argc, char** argv,
                                                Args* args) {
  gpualloc::cli::Parser parser;
  parser.Flag("--json", &args->json)
      .Flag("--one-stream", &args->one_stream)
      .Flag("--compare-one-stream", &args->compare_one_stream)
      .Value("--reference",
             [args](const std::string& v) {
               absl::StatusOr<std::vector<std::string>> names =
                   gpualloc::replay::ParseReferenceList(v);
               if (!names.ok()) {
                 return absl::InvalidArgumentError(
                     absl::StrCat("--reference ", names.status().message()));
               }
               args->references.insert(args->references.end(), names->begin(),
                                       names->end());
               return absl::OkStatus();
             })
      .Value("--svg", StoreIn(&args->svg_path))
      .Value("--baseline", StoreIn(&args->baseline_path))
      .Value("--config", AppendTo(&args->configs))
      .Value("--snapshot", AppendTo(&args->snapshot_paths));
  for (const auto& [flag, into] :
       {std::pair{"--repeat", &args->repeat},
        std::pair{"--complete-every", &args->complete_every},
        std::pair{"--work-us", &args->work_us}}) {
    parser.Value(flag, WholeNumber(flag, into), NumberError(flag));
  }
  parser.Positional(AppendTo(&args->paths))
      .Missing([](const std::string& flag) {
        return absl::StrCat(flag, " needs a value\n", kUsage);
      })
      .Unknown([](const std::string& arg) {
        return absl::StrCat("unknown option ", gpualloc::cli::Quote(arg), "\n",
                            kUsage);
      });
  return parser.Parse(argc, argv);
}

// The arguments against each other.
absl::Status CheckCombination(const Args& args) {
  if (args.one_stream && args.compare_one_stream) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--one-stream and --compare-one-stream exclude each other\n", kUsage));
  }
  if (!args.snapshot_paths.empty() && args.svg_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--snapshot needs --svg FILE\n", kUsage));
  }
  if (args.paths.empty() && args.snapshot_paths.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no trace given\n", kUsage));
  }
  return absl::OkStatus();
}

// Every configuration and output path is checked before the first replay,
// so that a typo fails the run at once instead of after minutes of work.
// Each configuration's rows, picture and totals carry its label (name=,
// else the string): two with one label could not be told apart.
absl::Status CheckConfigs(const Args& args) {
  std::map<std::string, std::string> config_of_label;
  for (const std::string& config : args.configs) {
    const absl::Status checked = CheckConfig(config);
    if (!checked.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config \"", config, "\": ", checked.message()));
    }
    absl::StatusOr<std::string> label = gpualloc::replay::ConfigLabel(config);
    if (!label.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config \"", config, "\": ", label.status().message()));
    }
    auto [it, added] = config_of_label.emplace(*label, config);
    if (!added) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config \"", it->second, "\" and --config \"", config,
          "\" have the same ",
          it->second == config ? "string"
                               : absl::StrCat("name \"", *label, "\""),
          ", which labels each configuration's results: give each a "
          "different name="));
    }
  }
  // A reference model's rows carry its label ("pytorch model"): it may not
  // be given twice, nor be a configuration's.
  std::map<std::string, std::string> reference_of_label;
  for (const std::string& name : args.references) {
    const std::string label = gpualloc::replay::ReferenceLabel(name);
    if (!reference_of_label.emplace(label, name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--reference names ", name, " twice"));
    }
    auto it = config_of_label.find(label);
    if (it != config_of_label.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config \"", it->second, "\" has the name \"", label,
          "\" of --reference ", name, "'s rows: give it another name="));
    }
  }
  if (!args.svg_path.empty()) {
    const absl::Status checked = CheckWritable(args.svg_path);
    if (!checked.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--svg ", checked.message()));
    }
  }
  return absl::OkStatus();
}

// What the run reads before its first replay.
struct Inputs {
  std::map<std::string, std::uint64_t> baseline;
  std::vector<Trace> traces;
  std::vector<ReplayResult> snapshots;  // drawn after the traces
};

absl::StatusOr<Inputs> LoadInputs(const Args& args) {
  Inputs in;
  if (!args.baseline_path.empty()) {
    auto b = gpualloc::replay::LoadBaseline(args.baseline_path);
    if (!b.ok()) return b.status();
    in.baseline = std::move(*b);
  }
  for (const std::string& path : args.paths) {
    absl::StatusOr<Trace> t = gpualloc::replay::LoadTrace(path);
    if (!t.ok()) return t.status();
    in.traces.push_back(std::move(*t));
  }
  // Snapshots are read up front too; they are drawn after the traces.
  for (const std::string& path : args.snapshot_paths) {
    absl::StatusOr<ReplayResult> s =
        gpualloc::replay::LoadSnapshotAsReplayResult(path);
    if (!s.ok()) return s.status();
    in.snapshots.push_back(std::move(*s));
  }
  return in;
}

// On a terminal, a progress line for one replay; it is cleared after.
void ShowProgress(bool tty, const Trace& trace, const std::string& config,
                  const std::string& reference, absl::string_view suffix,
                  gpualloc::replay::ReplayOptions* options) {
  if (!tty) return;
  const std::string what = absl::StrCat(
      trace.name, " [",
      !reference.empty() ? gpualloc::replay::ReferenceLabel(reference)
                         : (config.empty() ? std::string("defaults") : config),
      "]", suffix);
  options->progress = [what](std::uint64_t done, std::uint64_t total) {
    std::fprintf(stderr, "\r%s: %3d%%", what.c_str(),
                 total == 0 ? 100 : static_cast<int>(100 * done / total));
    std::fflush(stderr);
  };
}

// One trace under one configuration (or reference model), with its
// one-stream peak when --compare-one-stream asks for it.
absl::StatusOr<ReplayResult> ReplayOne(const Args& args, bool tty,
                                       const Trace& trace,
                                       const std::string& config,
                                       const std::string& reference) {
  gpualloc::replay::ReplayOptions options;
  options.reference = reference;
  options.record_timeline = !args.svg_path.empty();
  options.repeat = args.repeat;
  options.complete_every = args.complete_every;
  options.work_us = args.work_us;
  options.one_stream = args.one_stream;
  ShowProgress(tty, trace, config, reference,
               args.one_stream ? " as one stream" : "", &options);
  absl::StatusOr<ReplayResult> r =
      gpualloc::replay::Replay(trace, config, options);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat(trace.name, " with ", RunName(config, reference), ": ",
                     r.status().message()));
  }
  if (args.compare_one_stream && trace.num_streams > 1) {
    // The same replay on one stream, for its peak reserved only.
    options.record_timeline = false;
    options.one_stream = true;
    ShowProgress(tty, trace, config, reference, " as one stream", &options);
    absl::StatusOr<ReplayResult> merged =
        gpualloc::replay::Replay(trace, config, options);
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (!merged.ok()) {
      return absl::Status(merged.status().code(),
                          absl::StrCat(trace.name, " as one stream with ",
                                       RunName(config, reference), ": ",
                                       merged.status().message()));
    }
    r->one_stream_peak_bytes_reserved = merged->peak_bytes_reserved;
  }
  return r;
}

// Every trace under every configuration, then every reference model (on the
// device the first configuration describes, under its limit; its other
// allocator settings are not used); with --json each result is printed as it
// comes.
absl::StatusOr<std::vector<ReplayResult>> ReplayAll(
    const Args& args, const std::vector<Trace>& traces) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<ReplayResult> results;
  std::vector<std::pair<std::string, std::string>> runs;
  for (const std::string& config : args.configs) runs.emplace_back(config, "");
  for (const std::string& name : args.references) {
    runs.emplace_back(args.configs.front(), name);
  }
  for (const Trace& trace : traces) {
    for (const auto& [config, reference] : runs) {
      absl::StatusOr<ReplayResult> r =
          ReplayOne(args, tty, trace, config, reference);
      if (!r.ok()) return r.status();
      if (args.json) {
        std::printf("%s\n", gpualloc::replay::ToJson(*r).c_str());
        std::fflush(stdout);
      }
      // Without a timeline a result is small; with one, it is kept for the
      // picture only.
      results.push_back(std::move(*r));
    }
  }
  return results;
}

void PrintReport(const Args& args, const Inputs& in,
                 const std::vector<ReplayResult>& results) {
  gpualloc::replay::ReportOptions report;
  report.baseline = args.baseline_path.empty() ? nullptr : &in.baseline;
  report.repeat = args.repeat;
  std::printf("%s\n\n%s", kReads,
              gpualloc::replay::FormatReplayReport(results, report).c_str());
  const std::string host = gpualloc::replay::FormatHostReport(results, report);
  if (!host.empty()) std::printf("\n%s", host.c_str());
  const std::string compared =
      gpualloc::replay::FormatComparisonWithPyTorch(results, report);
  if (!compared.empty()) std::printf("\n%s", compared.c_str());
}

absl::Status WriteSvg(const std::string& svg_path,
                      const std::vector<ReplayResult>& results,
                      const std::vector<ReplayResult>& snapshots) {
  std::vector<gpualloc::replay::SvgPanel> panels;
  for (const ReplayResult& r : results) {
    panels.push_back({absl::StrCat(r.trace, " / ", r.label), &r});
  }
  for (const ReplayResult& r : snapshots) {
    // The caption counts its regions and says what they are.
    panels.push_back({absl::StrCat(r.trace, " / snapshot"), &r});
  }
  std::ofstream out(svg_path, std::ios::binary);
  out << gpualloc::replay::RenderSvg(panels);
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat(svg_path, ": cannot write the SVG"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything is allocated: each replay's untimed pass then warms the
  // memory its measured pass uses (ns/op comparable across configurations;
  // replay.h).
  gpualloc::replay::KeepFreedMemoryMapped();
  Args args;
  absl::StatusOr<gpualloc::cli::Parsed> parsed = ParseArgs(argc, argv, &args);
  if (!parsed.ok()) return Fail(parsed.status().message());
  if (*parsed == gpualloc::cli::Parsed::kHelp) {
    std::printf("%.*s%s", static_cast<int>(kUsage.size()), kUsage.data(),
                KeysHelp().c_str());
    return 0;
  }
  if (absl::Status s = CheckCombination(args); !s.ok()) {
    return Fail(s.message());
  }
  if (args.configs.empty()) args.configs.push_back("");
  if (absl::Status s = CheckConfigs(args); !s.ok()) return Fail(s.message());
  absl::StatusOr<Inputs> in = LoadInputs(args);
  if (!in.ok()) return Fail(in.status().message());
  absl::StatusOr<std::vector<ReplayResult>> results =
      ReplayAll(args, in->traces);
  if (!results.ok()) return Fail(results.status().message());
  if (!args.json && !results->empty()) PrintReport(args, *in, *results);
  if (!args.svg_path.empty()) {
    absl::Status s = WriteSvg(args.svg_path, *results, in->snapshots);
    if (!s.ok()) return Fail(s.message());
  }
  return 0;
}
