// SPDX-License-Identifier: Apache-2.0
// tools/ipc_timing.cc: the host cost of Allocator::Export, Import and
// CloseImport on the simulator's host-backed memory, and the backend calls
// each makes, for separate and expandable regions. Two SimBackend instances
// stand for the two processes. Prints one line per region kind and call:
//
//   build/tools/ipc_timing [iterations]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"

namespace {

using gpualloc::SimOp;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

std::shared_ptr<gpualloc::SimBackend> Sim() {
  gpualloc::SimOptions so;
  so.profile = "h100";
  so.total_bytes = 512 * kMiB;
  so.memory = gpualloc::SimMemory::kHostBacked;
  auto sim = gpualloc::SimBackend::Create(so);
  if (!sim.ok()) {
    std::fprintf(stderr, "%s\n", sim.status().ToString().c_str());
    std::exit(1);
  }
  return *sim;
}

std::unique_ptr<gpualloc::Allocator> Make(
    bool expandable, std::shared_ptr<gpualloc::Backend> b) {
  gpualloc::Options o;
  o.preallocate = false;
  o.memory_limit = 256 * kMiB;
  o.expandable =
      expandable ? gpualloc::Tristate::kOn : gpualloc::Tristate::kOff;
  auto a = gpualloc::CreateAllocator(o, std::move(b));
  if (!a.ok()) {
    std::fprintf(stderr, "%s\n", a.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(a);
}

std::vector<std::uint64_t> Counts(const gpualloc::SimBackend& sim) {
  std::vector<std::uint64_t> c(gpualloc::kNumSimOps);
  for (int i = 0; i < gpualloc::kNumSimOps; ++i) {
    c[i] = sim.calls(static_cast<SimOp>(i));
  }
  return c;
}

void Run(bool expandable, int iterations) {
  auto exporter_sim = Sim();
  auto importer_sim = Sim();
  auto exporter = Make(expandable, exporter_sim);
  auto importer = Make(expandable, importer_sim);
  // The memory exists before the timing: each iteration shares a block of
  // memory already mapped.
  void* warm = *exporter->Allocate(64 * kMiB);
  (void)exporter->Deallocate(warm);
  using Clock = std::chrono::steady_clock;
  Clock::duration t_export{}, t_import{}, t_close{};
  std::vector<std::uint64_t> c_export(gpualloc::kNumSimOps, 0),
      c_import(gpualloc::kNumSimOps, 0), c_close(gpualloc::kNumSimOps, 0);
  const auto add = [](std::vector<std::uint64_t>& sum,
                      const std::vector<std::uint64_t>& a,
                      const std::vector<std::uint64_t>& b) {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += b[i] - a[i];
  };
  for (int i = 0; i < iterations; ++i) {
    void* p = *exporter->Allocate(4 * kMiB);
    auto e0 = Counts(*exporter_sim);
    auto t0 = Clock::now();
    auto description = exporter->Export(p);
    auto t1 = Clock::now();
    add(c_export, e0, Counts(*exporter_sim));
    if (!description.ok()) {
      std::fprintf(stderr, "%s\n", description.status().ToString().c_str());
      std::exit(1);
    }
    auto i0 = Counts(*importer_sim);
    auto t2 = Clock::now();
    auto block = importer->Import(*description);
    auto t3 = Clock::now();
    add(c_import, i0, Counts(*importer_sim));
    if (!block.ok()) {
      std::fprintf(stderr, "%s\n", block.status().ToString().c_str());
      std::exit(1);
    }
    auto k0 = Counts(*importer_sim);
    auto t4 = Clock::now();
    (void)importer->CloseImport(block->ptr);
    auto t5 = Clock::now();
    add(c_close, k0, Counts(*importer_sim));
    (void)exporter->Deallocate(p);
    t_export += t1 - t0;
    t_import += t3 - t2;
    t_close += t5 - t4;
  }
  const auto us = [&](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count() / iterations;
  };
  const auto calls = [&](const std::vector<std::uint64_t>& c) {
    std::string out;
    for (int i = 0; i < gpualloc::kNumSimOps; ++i) {
      if (c[i] == 0) continue;
      char part[96];
      std::snprintf(
          part, sizeof(part), "%s%s x%.3g", out.empty() ? "" : ", ",
          std::string(gpualloc::SimOpName(static_cast<SimOp>(i))).c_str(),
          static_cast<double>(c[i]) / iterations);
      out += part;
    }
    return out.empty() ? std::string("none") : out;
  };
  const char* kind = expandable ? "expandable" : "separate";
  std::printf("%-10s Export      %8.1f us  backend calls: %s\n", kind,
              us(t_export), calls(c_export).c_str());
  std::printf("%-10s Import      %8.1f us  backend calls: %s\n", kind,
              us(t_import), calls(c_import).c_str());
  std::printf("%-10s CloseImport %8.1f us  backend calls: %s\n", kind,
              us(t_close), calls(c_close).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  std::printf(
      "4 MiB blocks, %d iterations, host-backed simulator (per call, "
      "host time)\n",
      iterations);
  Run(/*expandable=*/false, iterations);
  Run(/*expandable=*/true, iterations);
  return 0;
}
