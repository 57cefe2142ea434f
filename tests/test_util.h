// SPDX-License-Identifier: Apache-2.0
// tests/test_util.h: helpers shared by the test programs.
#ifndef GPUALLOC_TESTS_TEST_UTIL_H_
#define GPUALLOC_TESTS_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"

#define GPUALLOC_ASSERT_OK(expr)                                            \
  do {                                                                      \
    const ::absl::Status gpualloc_s_ = ::gpualloc::testing::ToStatus(expr); \
    ASSERT_TRUE(gpualloc_s_.ok()) << #expr << ": " << gpualloc_s_;          \
  } while (false)
#define GPUALLOC_EXPECT_OK(expr)                                            \
  do {                                                                      \
    const ::absl::Status gpualloc_s_ = ::gpualloc::testing::ToStatus(expr); \
    EXPECT_TRUE(gpualloc_s_.ok()) << #expr << ": " << gpualloc_s_;          \
  } while (false)

namespace gpualloc::testing {

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

// A seed for randomized tests: GPUALLOC_TEST_SEED when set, else fresh; the
// test prints it so every failure can be replayed.
inline std::uint64_t TestSeed() {
  if (const char* env = std::getenv("GPUALLOC_TEST_SEED")) {
    return std::strtoull(env, nullptr, 0);
  }
  return std::random_device{}();
}

inline std::shared_ptr<SimBackend> MakeSim(SimOptions options) {
  auto sim = SimBackend::Create(options);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *sim : nullptr;
}

// A simulated H100 with `total` bytes (fake addresses unless host_backed).
inline std::shared_ptr<SimBackend> MakeSim(
    std::uint64_t total, bool host_backed = false,
    const std::string& profile = "h100") {
  SimOptions o;
  o.profile = profile;
  o.total_bytes = total;
  o.memory = host_backed ? SimMemory::kHostBacked : SimMemory::kFake;
  return MakeSim(o);
}

inline std::unique_ptr<Allocator> MakeAllocator(
    const Options& options, std::shared_ptr<Backend> backend) {
  auto a = CreateAllocator(options, std::move(backend));
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? std::move(*a) : nullptr;
}

inline std::uint64_t Addr(void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_TEST_UTIL_H_
