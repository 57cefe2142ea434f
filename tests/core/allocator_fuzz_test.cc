// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_fuzz_test.cc: replays the fuzz corpus
// (tests/core/fuzz_corpus/) as an ordinary test, plus random programs from a
// printed seed.
#include "tests/core/allocator_fuzz.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

TEST(AllocatorFuzzTest, CorpusReplays) {
  const std::filesystem::path dir = GPUALLOC_FUZZ_CORPUS_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                          std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    fuzz::RunProgram(bytes.data(), bytes.size());
    ++files;
  }
  EXPECT_GT(files, 0);
}

// Every mode of the shared list (tests/core/allocator_modes.h) is one a
// program's first byte can choose.
TEST(AllocatorFuzzTest, EveryModeIsReachable) {
  std::set<std::string> chosen;
  for (int config = 0; config < 256; ++config) {
    chosen.insert(fuzz::ProgramMode(static_cast<std::uint8_t>(config)).name);
  }
  for (const testing::AllocatorModeSpec& mode : testing::kAllModes) {
    EXPECT_TRUE(chosen.contains(mode.name)) << mode.name;
  }
}

TEST(AllocatorFuzzTest, RandomPrograms) {
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (int program = 0; program < 150; ++program) {
    std::vector<std::uint8_t> bytes(1 + 4 * (rng() % 400));
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    fuzz::RunProgram(bytes.data(), bytes.size());
  }
}

}  // namespace
}  // namespace gpualloc
