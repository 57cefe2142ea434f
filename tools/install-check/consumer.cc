// SPDX-License-Identifier: Apache-2.0
// tools/install-check/consumer.cc: a program built only from an installed
// gpualloc (headers, library and gpualloc.pc), by tools/install-check/run.sh.
#include <cstdio>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"

int main() {
  auto sim = gpualloc::SimBackend::Create(gpualloc::SimOptions());
  if (!sim.ok()) return 1;
  auto allocator = gpualloc::CreateAllocator(gpualloc::Options(), *sim);
  if (!allocator.ok()) return 1;
  auto p = (*allocator)->Allocate(1000);
  if (!p.ok()) return 1;
  std::printf(
      "installed gpualloc: allocated %p; %llu bytes reserved\n", *p,
      static_cast<unsigned long long>((*allocator)->GetStats().bytes_reserved));
  return (*allocator)->Deallocate(*p).ok() ? 0 : 1;
}
