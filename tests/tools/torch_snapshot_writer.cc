// SPDX-License-Identifier: Apache-2.0
// Helper of tests/tools/torch_snapshot_test.py: replays a bundled trace CSV
// on the simulator with the allocation history covering all of it, and
// writes what the test compares: the allocator's snapshot as PyTorch's
// pickle and as JSON.
//
//   torch_snapshot_writer TRACE.csv CONFIG OUT_PREFIX
//
// CONFIG is a configuration string (e.g. "expandable=false"); the history
// and the simulated device are added. Writes OUT_PREFIX.pickle and
// OUT_PREFIX.json. Each CSV stream N is Stream(N), for the allocation and
// the free alike (as gpualloc-replay does).
//
//   torch_snapshot_writer --sleep CONFIG OUT_PREFIX
//
// Sleep and wake instead, with CONFIG as given (history included): 8 MiB
// untagged and 64 MiB - 1000 bytes of tag 1, then Sleep(1):
// OUT_PREFIX.asleep.pickle and .json; then Wake(1) and three 1000-byte
// allocations and frees: OUT_PREFIX.awake.pickle and .json.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"
#include "gpualloc/core/snapshot_json.h"
#include "gpualloc/core/torch_snapshot.h"
#include "gpualloc/runtime/registry.h"
#include "tools/replay/replay.h"

namespace {

bool Write(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  return static_cast<bool>(out);
}

}  // namespace

bool WriteBoth(const gpualloc::Allocator& a, const std::string& prefix) {
  const gpualloc::Snapshot snapshot = a.GetSnapshot();
  if (!Write(prefix + ".pickle", gpualloc::TorchSnapshotPickle(snapshot, 0)) ||
      !Write(prefix + ".json",
             gpualloc::SnapshotToJson(snapshot, &a.device()))) {
    std::cerr << "cannot write " << prefix << ".*\n";
    return false;
  }
  return true;
}

int SleepScenario(const std::string& config_text, const std::string& prefix) {
  using namespace gpualloc;
  absl::StatusOr<Config> config =
      ResolveConfig(config_text, MapEnvironment({}));
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 1;
  }
  SimOptions sim;
  sim.profile = "h100";
  sim.total_bytes = std::uint64_t{80} << 30;
  absl::StatusOr<std::shared_ptr<SimBackend>> backend = SimBackend::Create(sim);
  if (!backend.ok()) {
    std::cerr << backend.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Allocator>> allocator =
      CreateAllocator(config->options, *backend);
  if (!allocator.ok()) {
    std::cerr << allocator.status() << "\n";
    return 1;
  }
  Allocator& a = **allocator;
  SetThreadContext("weights");
  absl::StatusOr<void*> untagged = a.Allocate(std::uint64_t{8} << 20);
  absl::StatusOr<void*> tagged =
      a.Allocate((std::uint64_t{64} << 20) - 1000, Stream(), 0, /*tag=*/1);
  SetThreadContext("");
  if (!untagged.ok() || !tagged.ok()) {
    std::cerr << (untagged.ok() ? tagged.status() : untagged.status()) << "\n";
    return 1;
  }
  absl::Status status = a.Sleep(1).status();
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  if (!WriteBoth(a, prefix + ".asleep")) return 1;
  status = a.Wake(1);
  for (int i = 0; i < 3 && status.ok(); ++i) {
    absl::StatusOr<void*> p = a.Allocate(1000);
    status = p.ok() ? a.Deallocate(*p) : p.status();
  }
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  if (!WriteBoth(a, prefix + ".awake")) return 1;
  (void)a.Deallocate(*tagged);
  (void)a.Deallocate(*untagged);
  return 0;
}

int main(int argc, char** argv) {
  using namespace gpualloc;
  if (argc != 4) {
    std::cerr << "usage: torch_snapshot_writer TRACE.csv CONFIG OUT_PREFIX\n"
                 "       torch_snapshot_writer --sleep CONFIG OUT_PREFIX\n";
    return 2;
  }
  if (std::string(argv[1]) == "--sleep") return SleepScenario(argv[2], argv[3]);
  absl::StatusOr<replay::Trace> trace = replay::LoadTrace(argv[1]);
  if (!trace.ok()) {
    std::cerr << trace.status() << "\n";
    return 1;
  }
  absl::StatusOr<Config> config = ResolveConfig(
      std::string(argv[2]) +
          ",history=" + std::to_string(3 * trace->ops.size() + 1000),
      MapEnvironment({}));
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 1;
  }
  SimOptions sim;
  sim.profile = "h100";
  sim.total_bytes = std::uint64_t{80} << 30;
  absl::StatusOr<std::shared_ptr<SimBackend>> backend = SimBackend::Create(sim);
  if (!backend.ok()) {
    std::cerr << backend.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Allocator>> allocator =
      CreateAllocator(config->options, *backend);
  if (!allocator.ok()) {
    std::cerr << allocator.status() << "\n";
    return 1;
  }
  Allocator& a = **allocator;
  std::map<std::uint64_t, void*> live;
  for (const replay::TraceOp& op : trace->ops) {
    if (op.kind == replay::TraceOp::Kind::kAlloc) {
      SetThreadContext("op" + std::to_string(op.id % 7));
      absl::StatusOr<void*> p = a.Allocate(op.size, Stream(op.stream));
      if (!p.ok()) {
        std::cerr << p.status() << "\n";
        return 1;
      }
      live[op.id] = *p;
    } else {
      absl::Status s = a.Deallocate(live.at(op.id), Stream(op.stream));
      if (!s.ok()) {
        std::cerr << s << "\n";
        return 1;
      }
      live.erase(op.id);
    }
  }
  SetThreadContext("");
  const Snapshot snapshot = a.GetSnapshot();
  const std::string prefix = argv[3];
  if (!Write(prefix + ".pickle", TorchSnapshotPickle(snapshot, 0)) ||
      !Write(prefix + ".json", SnapshotToJson(snapshot, &a.device()))) {
    std::cerr << "cannot write " << prefix << ".*\n";
    return 1;
  }
  for (const auto& [id, p] : live) (void)a.Deallocate(p);
  return 0;
}
