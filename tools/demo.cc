// SPDX-License-Identifier: Apache-2.0
// tools/demo.cc: gpualloc-demo, a short tour of the allocator modes on a
// simulated device.
//
// Works a simulated H200 (fake addresses: nothing is allocated on the host)
// through a short, training-step-like allocation sequence under the two JAX
// growth modes (preallocate 75%, grow on demand) and prints what the allocator
// reports: the statistics, the backend calls they cost, and the regions.
//
// Usage: gpualloc-demo [--profile NAME] (any profile of
// gpualloc/arch/profiles.h). Reads the command line only.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpualloc/arch/profiles.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"

namespace {

using gpualloc::Allocator;
using gpualloc::Stats;

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

struct Step {
  bool alloc;
  std::size_t bytes_or_index;
};

// A small transformer-like step: weights stay; per layer activations are
// allocated in the forward pass and freed in reverse in the backward pass,
// with short-lived gradient temporaries in between; optimizer state at the end.
std::vector<Step> TrainingSequence() {
  std::vector<Step> steps;
  std::size_t next = 0;
  auto alloc = [&](std::size_t bytes) {
    steps.push_back({true, bytes});
    return next++;
  };
  auto release = [&](std::size_t id) { steps.push_back({false, id}); };
  constexpr int kLayers = 24;
  std::vector<std::size_t> weights;
  for (int l = 0; l < kLayers; ++l) {
    weights.push_back(
        alloc(4 * 1024 * 1024 * 4 + 1000));         // d_model x d_ff, fp32
    weights.push_back(alloc(1024 * 1024 * 4 * 3));  // qkv
  }
  for (int iteration = 0; iteration < 3; ++iteration) {
    std::vector<std::size_t> acts;
    for (int l = 0; l < kLayers; ++l) {
      acts.push_back(
          alloc(8 * 1024 * 1024 * 2 + 512 * l));  // activations, varying
      const std::size_t tmp = alloc(3 * 1024 * 1024 + 77);
      release(tmp);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      const std::size_t grad = alloc(4 * 1024 * 1024 * 4 + 1000);
      release(acts[l]);
      release(grad);
    }
  }
  for (std::size_t w : weights) (void)w;  // weights stay live to the end
  return steps;
}

bool Run(const char* label, const gpualloc::Options& options,
         const std::string& profile, const std::vector<Step>& steps) {
  gpualloc::SimOptions so;
  so.profile = profile;
  auto sim = gpualloc::SimBackend::Create(so);
  if (!sim.ok()) {
    std::fprintf(stderr, "gpualloc-demo: %s\n",
                 std::string(sim.status().message()).c_str());
    return false;
  }
  auto allocator = gpualloc::CreateAllocator(options, *sim);
  if (!allocator.ok()) {
    std::fprintf(stderr, "gpualloc-demo: %s\n",
                 std::string(allocator.status().message()).c_str());
    return false;
  }
  Allocator& a = **allocator;
  std::vector<void*> ptrs;
  std::size_t failed = 0;
  std::string first_oom;
  const auto start = std::chrono::steady_clock::now();
  for (const Step& s : steps) {
    if (s.alloc) {
      auto p = a.Allocate(s.bytes_or_index);
      ptrs.push_back(p.ok() ? *p : nullptr);
      if (!p.ok() && ++failed == 1) {
        first_oom = std::string(p.status().message());
      }
    } else if (ptrs[s.bytes_or_index] != nullptr) {
      if (absl::Status st = a.Deallocate(ptrs[s.bytes_or_index]); !st.ok()) {
        std::fprintf(stderr, "gpualloc-demo: %s\n",
                     std::string(st.message()).c_str());
        return false;
      }
      ptrs[s.bytes_or_index] = nullptr;
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  const Stats st = a.GetStats();
  const absl::Status valid = a.Validate();
  const gpualloc::Snapshot snap = a.GetSnapshot();
  const std::string backend = std::to_string(st.backend_allocs) + "/" +
                              std::to_string(st.backend_frees);
  std::printf(
      "%-22s  %14.3f  %11.3f  %13.3f  %10.1f%%  %4zu  %11s  %7llu  %6.1f  %s\n",
      label, st.peak_bytes_requested / kGiB, st.peak_bytes_in_use / kGiB,
      st.peak_bytes_reserved / kGiB,
      st.peak_bytes_reserved == 0
          ? 0.0
          : 100.0 * st.peak_bytes_requested / st.peak_bytes_reserved,
      failed, backend.c_str(),
      static_cast<unsigned long long>(snap.regions.size()), ns / steps.size(),
      valid.ok() ? "ok" : std::string(valid.message()).c_str());
  if (!first_oom.empty()) {
    std::printf("  first of %zu out-of-memory reports: %s\n", failed,
                first_oom.c_str());
  }
  // The weights were live to the end; they go back before the allocator.
  for (void* p : ptrs) {
    if (p == nullptr) continue;
    if (absl::Status st = a.Deallocate(p); !st.ok()) {
      std::fprintf(stderr, "gpualloc-demo: %s\n",
                   std::string(st.message()).c_str());
      return false;
    }
  }
  return valid.ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile = "h200";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
      profile = argv[++i];
    } else {
      const bool help = std::strcmp(argv[i], "--help") == 0 ||
                        std::strcmp(argv[i], "-h") == 0;
      std::fprintf(help ? stdout : stderr,
                   "usage: gpualloc-demo [--profile NAME]\n\n"
                   "Reads: the command line only (no configuration, no "
                   "environment).\n"
                   "A short tour of the allocator modes on a simulated device "
                   "(default h200).\ntools/demo.sh is the main demo: real "
                   "traces next to PyTorch.\n");
      return help ? 0 : 2;
    }
  }
  auto p = gpualloc::FindArchProfile(profile);
  if (!p.ok()) {
    std::fprintf(stderr, "gpualloc-demo: %s\n",
                 std::string(p.status().message()).c_str());
    return 2;
  }
  const std::vector<Step> steps = TrainingSequence();
  std::printf(
      "gpualloc demo: %zu operations of a training-step-like sequence on a "
      "simulated "
      "%s\n(%s; %.1f GiB, granularity %llu MiB)\n\n",
      steps.size(), std::string((*p)->name).c_str(),
      std::string((*p)->description).c_str(), (*p)->memory_bytes / kGiB,
      static_cast<unsigned long long>((*p)->recommended_granularity / kMiB));
  std::printf("%-22s  %14s  %11s  %13s  %11s  %4s  %11s  %7s  %6s  %s\n",
              "configuration", "peak requested", "peak in use", "peak reserved",
              "utilization", "ooms", "backend a/f", "regions", "ns/op",
              "valid");

  struct Config {
    const char* label;
    gpualloc::Options options;
  };
  std::vector<Config> configs;
  configs.push_back({"preallocate 75%", gpualloc::Options()});
  gpualloc::Options growth;
  growth.preallocate = false;
  configs.push_back({"grow on demand", growth});
  growth.growth_policy = gpualloc::GrowthPolicy::kDoubling;
  configs.push_back({"grow, doubling", growth});
  gpualloc::Options tight;
  tight.memory_limit = 1100ull << 20;
  tight.preallocate = false;
  configs.push_back({"grow, 1100 MiB limit", tight});
  bool ok = true;
  for (const Config& c : configs) ok &= Run(c.label, c.options, profile, steps);
  std::printf(
      "\nColumns (sizes in GiB; \"peak\": the highest value during the "
      "run):\n"
      "  peak requested  the most bytes live at once, as requested\n"
      "  peak in use     the same in the allocator's chunks (requests rounded "
      "up)\n"
      "  peak reserved   the most device memory the allocator held at once\n"
      "  utilization     peak requested / peak reserved\n"
      "  ooms            allocations refused for lack of memory\n"
      "  backend a/f     device allocations / frees made (cudaMalloc/cudaFree, "
      "or with expandable\n"
      "                  regions the mapping / unmapping of one physical "
      "piece)\n"
      "  regions         regions at the end (with expandable regions: mapped "
      "runs of the one\n"
      "                  reserved address range)\n"
      "  ns/op           the allocator's wall time per allocate/free on this "
      "machine\n"
      "  valid           the allocator's own consistency check at the end\n");
  return ok ? 0 : 1;
}
