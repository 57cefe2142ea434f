// SPDX-License-Identifier: Apache-2.0
// tools/bench/random_workload.h: the random replacement workload shared by the
// Google Benchmark cases (allocator_benchmark.cc) and the untimed counter run
// (random_pairs.cc), so that both measure exactly the same operations.
//
// `live` allocations stay live; step i frees slot victim(i) and allocates
// size(i) in its place. Sizes are log-uniform from 256 B to 64 MiB (mean ~5
// MiB), all drawn up front so that no random number generation is measured.
#ifndef GPUALLOC_TOOLS_BENCH_RANDOM_WORKLOAD_H_
#define GPUALLOC_TOOLS_BENCH_RANDOM_WORKLOAD_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace gpualloc::bench {

// Log-uniform sizes from 256 B to 64 MiB.
inline std::vector<std::size_t> LogUniformSizes(std::size_t n,
                                                std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(std::log2(256.0),
                                                  std::log2(64.0 * (1 << 20)));
  std::vector<std::size_t> sizes(n);
  for (auto& s : sizes) s = static_cast<std::size_t>(std::exp2(exponent(rng)));
  return sizes;
}

class RandomWorkload {
 public:
  explicit RandomWorkload(std::size_t live)
      : live_(live), sizes_(LogUniformSizes(kDraws, 42)), victims_(kDraws) {
    std::mt19937_64 rng(7);
    for (auto& v : victims_) v = rng() % live;
  }

  // A preallocated pool with room for `live` of these sizes: 16 GiB per 1000.
  static std::uint64_t PoolFor(std::size_t live) {
    constexpr std::uint64_t k16GiB = std::uint64_t{16} << 30;
    return std::max<std::uint64_t>(k16GiB, live * k16GiB / 1000);
  }

  std::size_t live() const { return live_; }
  // The size of the i-th initial allocation.
  std::size_t initial_size(std::size_t i) const { return sizes_[i % kDraws]; }
  std::size_t victim(std::size_t step) const {
    return victims_[step & (kDraws - 1)];
  }
  std::size_t size(std::size_t step) const {
    return sizes_[(step * 31 + 17) & (kDraws - 1)];
  }

 private:
  static constexpr std::size_t kDraws = 1 << 16;
  std::size_t live_;
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> victims_;
};

}  // namespace gpualloc::bench

#endif  // GPUALLOC_TOOLS_BENCH_RANDOM_WORKLOAD_H_
