// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_fuzz.h: a stateful fuzz target for the allocator.
//
// The input is a program. Its first byte chooses the configuration: bit 0
// the profile (h100, mi300x), bit 2 the doubling growth policy, bit 3 a 4 KiB
// split bound, and the mode from the shared list (tests/core/allocator_modes.h)
// by bits 4-5: 0 BFC over expandable regions (the default regions, as the
// simulator has virtual memory; every input written before the mode bits ran
// so), 1 BFC over separate regions, 2 platform, 3 async; in the BFC modes
// bit 1 growing on demand instead of preallocating and bit 6 the front cache
// per stream. Then each
// 4-byte instruction allocates, frees, trims or makes the device refuse one
// of the next requests, with sizes and choices taken from its bytes. After
// every instruction the invariant validator runs, the statistics are checked
// against the shadow model (tests/core/shadow_model.h), and the live blocks'
// fill patterns (host-backed memory) are checked when freed. Any broken
// invariant aborts, so a fuzzer (tests/core/allocator_fuzzer.cc, clang
// -fsanitize=fuzzer) finds it, and the corpus in tests/core/fuzz_corpus/
// replays as an ordinary test (tests/core/allocator_fuzz_test.cc).
#ifndef GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_
#define GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "tests/core/allocator_modes.h"
#include "tests/core/shadow_model.h"

namespace gpualloc::fuzz {

[[noreturn]] inline void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "allocator fuzz: %s: %s\n", what,
               std::string(status.message()).c_str());
  std::abort();
}

inline void Check(const char* what, const absl::Status& status) {
  if (!status.ok()) Fail(what, status);
}

// The mode the first byte of a program chooses (bits 1, 4, 5 and 6), from the
// shared list.
inline const testing::AllocatorModeSpec& ProgramMode(std::uint8_t config) {
  const int kind = (config >> 4) % 4;
  const bool preallocate = (config >> 1) % 2 == 0;
  const bool front_cache = (config >> 6) % 2 == 1;
  for (const testing::AllocatorModeSpec& m : testing::kAllModes) {
    if (kind == 2 ? m.mode == AllocatorMode::kPlatform
        : kind == 3
            ? m.mode == AllocatorMode::kAsync
            : m.mode == AllocatorMode::kBfc && m.expandable == (kind == 0) &&
                  m.preallocate == preallocate &&
                  (m.front_cache != 0) == front_cache) {
      return m;
    }
  }
  Fail("mode", absl::InternalError("no mode in kAllModes for the program"));
}

// The options the first byte of a program chooses.
inline Options ProgramOptions(std::uint8_t config) {
  Options o = testing::ModeOptions(ProgramMode(config), 32u << 20);
  o.growth_policy =
      (config >> 2) % 2 == 0 ? GrowthPolicy::kExact : GrowthPolicy::kDoubling;
  o.max_internal_fragmentation = (config >> 3) % 2 == 0 ? 0 : 4096;
  return o;
}

// Runs one input. Returns normally unless a check fails (then it aborts).
inline void RunProgram(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return;
  SimOptions so;
  so.profile = data[0] % 2 == 0 ? "h100" : "mi300x";
  so.total_bytes = 64u << 20;
  so.memory = SimMemory::kHostBacked;
  auto sim = SimBackend::Create(so);
  if (!sim.ok()) Fail("sim", sim.status());
  const Options o = ProgramOptions(data[0]);
  auto created = CreateAllocator(o, *sim);
  if (!created.ok()) Fail("create", created.status());
  Allocator& a = **created;
  const SimOp growth = testing::GrowthOp(a.options());

  testing::ShadowModel shadow(256, o.max_internal_fragmentation == 0);
  // Front caches keep their peaks as an upper bound once a block is freed
  // on another stream than its own (ShadowModel::set_peak_slack).
  if (o.front_cache != 0) shadow.set_peak_slack(4 * o.front_cache);
  for (std::size_t i = 1; i + 4 <= size; i += 4) {
    const std::uint8_t op = data[i] % 8;
    const std::uint32_t arg =
        data[i + 1] | (data[i + 2] << 8) | (data[i + 3] << 16);
    if (op <= 3) {  // allocate: sizes 0 .. 16 MiB, log-spread
      const std::size_t bytes = arg & ((std::size_t{1} << (arg % 25)) - 1);
      const std::size_t alignment = op == 3 ? std::size_t{256} << (arg % 8) : 0;
      auto p = a.Allocate(bytes, Stream(), alignment);
      if (p.ok()) {
        const auto address = reinterpret_cast<std::uintptr_t>(*p);
        Check("allocate", shadow.Add(address, bytes, alignment, 0,
                                     static_cast<unsigned char>(arg)));
        shadow.Fill(address);
      } else if (p.status().code() != absl::StatusCode::kResourceExhausted) {
        Fail("allocate", p.status());
      }
    } else if (op <= 5 && !shadow.blocks().empty()) {  // free
      auto it = shadow.blocks().begin();
      std::advance(it, arg % shadow.blocks().size());
      const std::uint64_t address = it->first;
      Check("fill pattern", shadow.CheckFill(address));
      Check("deallocate", a.Deallocate(reinterpret_cast<void*>(address)));
      Check("shadow", shadow.Remove(address));
    } else if (op == 6) {
      Check("trim", a.Trim());
    } else {  // also a free with nothing live, as it always was
      (*sim)->FailNthCall(growth, 1 + arg % 3);
    }
    Check("validate", a.Validate());
    Check("statistics", shadow.CheckStats(a.GetStats()));
  }
  while (!shadow.blocks().empty()) {
    const std::uint64_t address = shadow.blocks().begin()->first;
    Check("final fill pattern", shadow.CheckFill(address));
    Check("final deallocate", a.Deallocate(reinterpret_cast<void*>(address)));
    Check("shadow", shadow.Remove(address));
  }
  Check("final trim", a.Trim());
  if (a.GetStats().bytes_reserved != 0)
    Fail("leak", absl::InternalError("memory left reserved"));
}

}  // namespace gpualloc::fuzz

#endif  // GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_
