// tests/allocator_fuzz.h: a stateful fuzz target for the allocator.
//
// The input is a program: each 4-byte instruction allocates, frees, trims or
// injects a device fault, with sizes and choices taken from its bytes. After
// every instruction the invariant validator runs and the live blocks' fill
// patterns (host-backed memory) are checked. Any broken invariant aborts, so a
// fuzzer (tests/allocator_fuzzer.cc, clang -fsanitize=fuzzer) finds it, and the
// corpus in tests/fuzz_corpus/ replays as an ordinary test
// (tests/allocator_fuzz_test.cc).
#ifndef GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_
#define GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpualloc/allocator.h"
#include "gpualloc/sim_backend.h"

namespace gpualloc::fuzz {

[[noreturn]] inline void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "allocator fuzz: %s: %s\n", what,
               std::string(status.message()).c_str());
  std::abort();
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
  Options o;
  o.preallocate = (data[0] >> 1) % 2 == 0;
  o.memory_limit = 32u << 20;
  o.growth_policy =
      (data[0] >> 2) % 2 == 0 ? GrowthPolicy::kExact : GrowthPolicy::kDoubling;
  o.max_internal_fragmentation = (data[0] >> 3) % 2 == 0 ? 0 : 4096;
  auto created = CreateAllocator(o, *sim);
  if (!created.ok()) Fail("create", created.status());
  Allocator& a = **created;

  struct Live {
    unsigned char* p;
    std::size_t size;
    unsigned char tag;
  };
  std::vector<Live> live;
  for (std::size_t i = 1; i + 4 <= size; i += 4) {
    const std::uint8_t op = data[i] % 8;
    const std::uint32_t arg =
        data[i + 1] | (data[i + 2] << 8) | (data[i + 3] << 16);
    if (op <= 3) {  // allocate: sizes 0 .. 16 MiB, log-spread
      const std::size_t bytes = arg & ((std::size_t{1} << (arg % 25)) - 1);
      const std::size_t alignment = op == 3 ? std::size_t{256} << (arg % 8) : 0;
      auto p = a.Allocate(bytes, Stream(), alignment);
      if (p.ok()) {
        auto* bytes_ptr = static_cast<unsigned char*>(*p);
        const unsigned char tag = static_cast<unsigned char>(arg);
        const std::size_t touched = bytes < 64 ? bytes : 64;
        std::memset(bytes_ptr, tag, touched);
        live.push_back({bytes_ptr, bytes, tag});
      } else if (p.status().code() != absl::StatusCode::kResourceExhausted) {
        Fail("allocate", p.status());
      }
    } else if (op <= 5 && !live.empty()) {  // free
      const std::size_t k = arg % live.size();
      const Live block = live[k];
      for (std::size_t j = 0; j < block.size && j < 64; ++j) {
        if (block.p[j] != block.tag)
          Fail("fill pattern", absl::DataLossError("overwritten"));
      }
      absl::Status s = a.Deallocate(block.p);
      if (!s.ok()) Fail("deallocate", s);
      live[k] = live.back();
      live.pop_back();
    } else if (op == 6) {
      absl::Status s = a.Trim();
      if (!s.ok()) Fail("trim", s);
    } else {
      (*sim)->FailNthCall(SimOp::kAllocate, 1 + arg % 3);
    }
    absl::Status valid = a.Validate();
    if (!valid.ok()) Fail("validate", valid);
  }
  for (const Live& block : live) {
    absl::Status s = a.Deallocate(block.p);
    if (!s.ok()) Fail("final deallocate", s);
  }
  absl::Status s = a.Trim();
  if (!s.ok()) Fail("final trim", s);
  if (a.GetStats().bytes_reserved != 0)
    Fail("leak", absl::InternalError("memory left reserved"));
}

}  // namespace gpualloc::fuzz

#endif  // GPUALLOC_TESTS_ALLOCATOR_FUZZ_H_
