// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_fuzzer.cc: libFuzzer entry point (built with
// -Dfuzzer=enabled and clang): `build/tests/allocator_fuzzer
// tests/core/fuzz_corpus`.
#include <cstddef>
#include <cstdint>

#include "tests/core/allocator_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  gpualloc::fuzz::RunProgram(data, size);
  return 0;
}
