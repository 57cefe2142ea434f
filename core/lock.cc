// SPDX-License-Identifier: Apache-2.0
// core/lock.cc: the contended paths of core::Lock (Linux futex).
#include "core/lock.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpualloc::core {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void Lock::LockSlow() {
  // The critical sections are short: spin a little before sleeping.
  for (int i = 0; i < 64; ++i) {
    CpuRelax();
    std::uint32_t expected = kFree;
    if (state_.load(std::memory_order_relaxed) == kFree &&
        state_.compare_exchange_weak(expected, kLocked,
                                     std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
  }
  // Announce a sleeper; whoever unlocks sees kContended and wakes one.
  while (state_.exchange(kContended, std::memory_order_acquire) != kFree) {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_),
            FUTEX_WAIT_PRIVATE, kContended, nullptr, nullptr, 0);
  }
}

void Lock::Wake() {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_),
          FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace gpualloc::core
#endif  // __linux__
