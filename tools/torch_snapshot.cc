// SPDX-License-Identifier: Apache-2.0
// tools/torch_snapshot.cc: gpualloc-torch-snapshot, a JSON allocator
// snapshot (gpualloc/core/snapshot_json.h, with its history) as the pickle
// PyTorch's torch.cuda.memory._dump_snapshot writes, for
// https://pytorch.org/memory_viz.
//
//   gpualloc-torch-snapshot SNAPSHOT.json [-o OUT.pickle] [--device N]
//
// The pickle goes to OUT.pickle, or to stdout when -o is not given; --device
// is the device index it is filed under (default: the JSON's device
// ordinal, else 0). Exit status 0, 1 on a bad file (one that does not parse,
// or whose regions and chunks are not an allocator's layout:
// tools/torch_snapshot_check.h), 2 on bad arguments.
#include "gpualloc/core/torch_snapshot.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/snapshot_json.h"
#include "tools/cli.h"
#include "tools/torch_snapshot_check.h"

namespace {

constexpr char kUsage[] =
    "usage: gpualloc-torch-snapshot SNAPSHOT.json [-o OUT.pickle] "
    "[--device N]\n"
    "\n"
    "Reads: the command line and SNAPSHOT.json (no configuration, no\n"
    "environment).\n";

int Usage(const std::string& why) {
  std::cerr << "gpualloc-torch-snapshot: " << why << "\n" << kUsage;
  return 2;
}

// The "ordinal" of the document's "device" object, when there is one.
int OrdinalOf(const std::string& json) {
  const std::size_t at = json.find("\"device\":{\"ordinal\":");
  if (at == std::string::npos) return 0;
  return std::atoi(json.c_str() + at + 21);
}

// What the command line asks for.
struct Args {
  std::string input;
  std::string output;
  int device = -1;
};

absl::StatusOr<gpualloc::cli::Parsed> ParseArgs(int argc, char** argv,
                                                Args* args) {
  gpualloc::cli::Parser parser(
      gpualloc::cli::Syntax{.lone_dash_is_flag = true});
  parser
      .Value("-o",
             [args](const std::string& value) {
               args->output = value;
               return absl::OkStatus();
             })
      .Value(
          "--device",
          [args](const std::string& value) {
            if (!absl::SimpleAtoi(value, &args->device) || args->device < 0) {
              return absl::InvalidArgumentError(
                  "--device needs a device index >= 0, got " +
                  gpualloc::cli::Quote(value));
            }
            return absl::OkStatus();
          })
      .Positional([args](const std::string& arg) {
        if (!args->input.empty()) {
          return absl::InvalidArgumentError("one snapshot at a time");
        }
        args->input = arg;
        return absl::OkStatus();
      })
      .Unknown([](const std::string& arg) {
        return "unknown option " + gpualloc::cli::Quote(arg);
      });
  return parser.Parse(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  absl::StatusOr<gpualloc::cli::Parsed> parsed = ParseArgs(argc, argv, &args);
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  if (*parsed == gpualloc::cli::Parsed::kHelp) {
    std::cout << kUsage;
    return 0;
  }
  const std::string& input = args.input;
  const std::string& output = args.output;
  int device = args.device;
  if (input.empty()) return Usage("no snapshot given");
  std::ifstream in(input, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::cerr << "gpualloc-torch-snapshot: " << gpualloc::cli::Quote(input)
              << ": cannot read\n";
    return 1;
  }
  const std::string json = text.str();
  absl::StatusOr<gpualloc::Snapshot> snapshot =
      gpualloc::SnapshotFromJson(json);
  if (!snapshot.ok()) {
    std::cerr << "gpualloc-torch-snapshot: " << gpualloc::cli::Quote(input)
              << ": " << snapshot.status().message() << "\n";
    return 1;
  }
  if (absl::Status checked = gpualloc::tools::CheckSnapshotForExport(*snapshot);
      !checked.ok()) {
    std::cerr << "gpualloc-torch-snapshot: " << gpualloc::cli::Quote(input)
              << ": " << checked.message() << "\n";
    return 1;
  }
  if (device < 0) device = OrdinalOf(json);
  const std::string pickle = gpualloc::TorchSnapshotPickle(*snapshot, device);
  if (output.empty()) {
    std::cout.write(pickle.data(), static_cast<std::streamsize>(pickle.size()));
    std::cout.flush();
    return std::cout ? 0 : 1;
  }
  std::ofstream out(output, std::ios::binary);
  out.write(pickle.data(), static_cast<std::streamsize>(pickle.size()));
  out.close();
  if (!out) {
    std::cerr << "gpualloc-torch-snapshot: " << gpualloc::cli::Quote(output)
              << ": cannot write\n";
    return 1;
  }
  return 0;
}
