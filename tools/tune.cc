// SPDX-License-Identifier: Apache-2.0
// gpualloc-tune: sweeps a grid of configurations over traces and ranks them
// (docs/REFERENCE.md, "gpualloc-tune"). The grid and ranking live in
// tools/replay/tune_lib.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/cli.h"
#include "tools/replay/reference.h"
#include "tools/replay/replay.h"
#include "tools/replay/tune_lib.h"

namespace {

using gpualloc::replay::GridAxis;

constexpr char kUsage[] =
    "usage: gpualloc-tune [--csv FILE] [--json FILE] [--base CONFIG]\n"
    "                     [--grid KEY=V1|V2|...]... [--reference NAMES]\n"
    "                     TRACE...\n"
    "\n"
    "Reads: the command line only. The environment (GPUALLOC_* and the\n"
    "other variables gpualloc-info shows) is not read, so a sweep is\n"
    "reproducible.\n"
    "\n"
    "Replays every TRACE under every configuration of a grid (the cross\n"
    "product of the --grid values, each combined with --base) on the\n"
    "simulated device and ranks the configurations by total OOMs, then the\n"
    "sum of peak reserved bytes, then modeled backend time.\n"
    "\n"
    "  --grid KEY=V1|V2  a configuration key and its values, e.g.\n"
    "                    --grid arch=h100|mi300x --grid split_bound=0|1MiB\n"
    "                    (keys as in gpualloc-info --help). Without --grid:\n"
    "                    arch=h100|mi300x growth=exact|doubling\n"
    "                    preallocate=true|false split_bound=0|1MiB\n"
    "                    granularity=2MiB|32MiB\n"
    "  --base CONFIG     settings every configuration shares, e.g.\n"
    "                    device_memory=80GB\n"
    "  --reference NAMES other allocators' policies, modeled (comma-\n"
    "                    separated: pytorch, pytorch-expandable, tf, async;\n"
    "                    see gpualloc-replay --help), ranked among the\n"
    "                    configurations as\n"
    "                    \"reference=NAME\" on the device --base describes\n"
    "                    and under its limit (mem_limit or mem_fraction;\n"
    "                    its other allocator settings unused; not in the\n"
    "                    per-architecture summary)\n"
    "  --csv FILE        one row per (configuration, trace), with its rank\n"
    "  --json FILE       the same as one JSON object per line\n"
    "  --help            this text\n";

int BadArguments(const std::string& message) {
  std::fprintf(stderr, "gpualloc-tune: %s\n\n%s", message.c_str(), kUsage);
  return 1;
}

// Whether `path` can be written, checked by opening it the way WriteFile
// will, without truncating it; a file this creates is removed again.
bool CheckWritable(const char* flag, const std::string& path) {
  struct stat st;
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "gpualloc-tune: %s %s: is a directory, not a file\n",
                 flag, path.c_str());
    return false;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    std::fprintf(stderr, "gpualloc-tune: %s %s: cannot write: %s\n", flag,
                 path.c_str(), std::strerror(errno));
    return false;
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return true;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "gpualloc-tune: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// What the command line asks for.
struct Args {
  std::string csv_path;
  std::string json_path;
  std::string base;
  std::vector<GridAxis> axes;
  std::vector<std::string> trace_paths;
  std::vector<std::string> references;
};

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
  parser.Value("--csv", StoreIn(&args->csv_path), "--csv needs a FILE")
      .Value("--json", StoreIn(&args->json_path), "--json needs a FILE")
      .Value("--base", StoreIn(&args->base), "--base needs a CONFIG")
      .Once("--base given twice")
      .Value(
          "--grid",
          [args](const std::string& text) {
            absl::StatusOr<GridAxis> axis =
                gpualloc::replay::ParseGridAxis(text);
            if (!axis.ok()) return axis.status();
            args->axes.push_back(*std::move(axis));
            return absl::OkStatus();
          },
          "--grid needs KEY=V1|V2|...")
      .Value(
          "--reference",
          [args](const std::string& text) {
            absl::StatusOr<std::vector<std::string>> names =
                gpualloc::replay::ParseReferenceList(text);
            if (!names.ok()) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--reference ", names.status().message()));
            }
            args->references.insert(args->references.end(), names->begin(),
                                    names->end());
            return absl::OkStatus();
          },
          "--reference needs NAMES")
      .Positional([args](const std::string& path) {
        args->trace_paths.push_back(path);
        return absl::OkStatus();
      })
      .Unknown([](const std::string& arg) {
        return absl::StrCat("unknown option ", gpualloc::cli::Quote(arg));
      });
  return parser.Parse(argc, argv);
}

// Every configuration over every trace, in order: one row each (a failed
// replay is a row with its status). A reference model's row replays on the
// device --base describes, under its limit.
std::vector<gpualloc::replay::TuneRow> Sweep(
    const std::vector<std::string>& configs,
    const std::vector<gpualloc::replay::Trace>& traces,
    const std::string& base) {
  std::vector<gpualloc::replay::TuneRow> rows;
  // Progress on a terminal only: a full default sweep takes a while, and
  // logs should not fill with carriage returns.
  const bool progress = isatty(fileno(stderr)) != 0;
  const std::size_t total = configs.size() * traces.size();
  for (const std::string& config : configs) {
    for (const gpualloc::replay::Trace& trace : traces) {
      gpualloc::replay::TuneRow row;
      row.config = config;
      row.trace = trace.name;
      gpualloc::replay::ReplayOptions options;
      std::string replayed = config;
      if (gpualloc::replay::IsReferenceConfig(config)) {
        options.reference =
            config.substr(gpualloc::replay::kReferencePrefix.size());
        replayed = base;  // the device --base describes
      }
      absl::StatusOr<gpualloc::replay::ReplayResult> result =
          gpualloc::replay::Replay(trace, replayed, options);
      if (result.ok()) {
        row.result = *std::move(result);
      } else {
        row.status = result.status();
      }
      rows.push_back(std::move(row));
      if (progress) {
        std::fprintf(stderr, "\r%zu/%zu replays", rows.size(), total);
      }
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything is allocated: each replay's untimed pass then warms the
  // memory its measured pass uses (ns/op comparable across configurations;
  // replay.h).
  gpualloc::replay::KeepFreedMemoryMapped();
  Args args;
  absl::StatusOr<gpualloc::cli::Parsed> parsed = ParseArgs(argc, argv, &args);
  if (!parsed.ok()) return BadArguments(std::string(parsed.status().message()));
  if (*parsed == gpualloc::cli::Parsed::kHelp) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.trace_paths.empty()) return BadArguments("no TRACE given");
  if (args.axes.empty()) args.axes = gpualloc::replay::DefaultGrid();
  absl::StatusOr<std::vector<std::string>> configs =
      gpualloc::replay::ExpandGrid(args.base, args.axes);
  if (!configs.ok())
    return BadArguments(std::string(configs.status().message()));
  for (const std::string& name : args.references) {
    configs->push_back(absl::StrCat(gpualloc::replay::kReferencePrefix, name));
  }
  // The outputs are checked before the first replay: a typo in a path must
  // not cost the whole sweep.
  const std::string& csv_path = args.csv_path;
  const std::string& json_path = args.json_path;
  if (!csv_path.empty() && !CheckWritable("--csv", csv_path)) return 1;
  if (!json_path.empty() && !CheckWritable("--json", json_path)) return 1;

  std::vector<gpualloc::replay::Trace> traces;
  std::vector<std::string> names;
  for (const std::string& path : args.trace_paths) {
    absl::StatusOr<gpualloc::replay::Trace> trace =
        gpualloc::replay::LoadTrace(path);
    if (!trace.ok()) {
      std::fprintf(stderr, "gpualloc-tune: %s\n",
                   std::string(trace.status().message()).c_str());
      return 1;
    }
    names.push_back(trace->name);
    traces.push_back(*std::move(trace));
  }
  // Rows are grouped by trace label: two traces with the same file stem
  // (ok.csv d2/ok.csv) must not share one.
  absl::StatusOr<std::vector<std::string>> labels =
      gpualloc::replay::TraceLabels(names, args.trace_paths);
  if (!labels.ok()) return BadArguments(std::string(labels.status().message()));
  names = *std::move(labels);
  for (std::size_t t = 0; t < traces.size(); ++t) traces[t].name = names[t];

  const std::vector<gpualloc::replay::TuneRow> rows =
      Sweep(*configs, traces, args.base);
  const std::vector<gpualloc::replay::RankedConfig> ranked =
      gpualloc::replay::Rank(*configs, names, rows);
  std::fputs(
      "Settings from: the command line only (--base, --grid; the environment "
      "is not read)\n\n",
      stdout);
  std::fputs(gpualloc::replay::FormatTable(ranked, names).c_str(), stdout);
  if (!csv_path.empty() &&
      !WriteFile(csv_path, gpualloc::replay::FormatCsv(ranked, rows))) {
    return 1;
  }
  if (!json_path.empty() &&
      !WriteFile(json_path, gpualloc::replay::FormatJson(ranked, rows))) {
    return 1;
  }
  return 0;
}
