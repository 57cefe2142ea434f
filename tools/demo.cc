// tools/demo.cc: gpualloc-demo, a short tour of the allocator modes on a
// simulated device.
//
// Works a simulated H200 (fake addresses: nothing is allocated on the host)
// through a short, training-step-like allocation sequence under the two JAX
// growth modes (preallocate 75%, grow on demand) and prints what the allocator
// reports: the statistics, the backend calls they cost, and the regions.
//
// Usage: gpualloc-demo [--profile NAME] (any profile of gpualloc/arch.h)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpualloc/allocator.h"
#include "gpualloc/arch.h"
#include "gpualloc/sim_backend.h"

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
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  const Stats st = a.GetStats();
  const absl::Status valid = a.Validate();
  const gpualloc::Snapshot snap = a.GetSnapshot();
  std::printf("%-22s %9.3f %9.3f %9.3f %8.1f%% %6zu %6llu %6llu %7.1f %s\n",
              label, st.peak_bytes_requested / kGiB,
              st.peak_bytes_in_use / kGiB, st.peak_bytes_reserved / kGiB,
              st.peak_bytes_reserved == 0
                  ? 0.0
                  : 100.0 * st.peak_bytes_requested / st.peak_bytes_reserved,
              failed, static_cast<unsigned long long>(st.backend_allocs),
              static_cast<unsigned long long>(snap.regions.size()),
              ns / steps.size(),
              valid.ok() ? "ok" : std::string(valid.message()).c_str());
  if (!first_oom.empty()) {
    std::printf("  first of %zu out-of-memory reports: %s\n", failed,
                first_oom.c_str());
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
      std::fprintf(stderr, "usage: gpualloc-demo [--profile NAME]\n");
      return 2;
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
  std::printf("%-22s %9s %9s %9s %9s %6s %6s %6s %7s %s\n", "configuration",
              "req GiB", "use GiB", "rsv GiB", "util", "ooms", "bk.al", "regns",
              "ns/op", "valid");

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
      "\nreq/use/rsv: peak bytes requested / in use (rounded chunks) / "
      "reserved from "
      "the device;\nutil = peak requested / peak reserved; bk.al = backend "
      "allocations (cudaMalloc-like calls).\n");
  return ok ? 0 : 1;
}
