// SPDX-License-Identifier: Apache-2.0
// core/lock.h: the allocator's lock, with Abseil's thread-safety annotations so
// that clang's -Wthread-safety checks every guarded member.
//
// A three-state futex mutex (Drepper, "Futexes Are Tricky", mutex #3): the
// uncontended path is one compare-and-swap to lock and one exchange to unlock;
// a contended lock spins briefly, then sleeps in the kernel; unlock wakes a
// sleeper only when one announced itself. Off Linux it is a std::mutex.
//
// While the process has a single thread (glibc's __libc_single_threaded, the
// flag glibc's own locks consult for the same purpose), lock and unlock are a
// plain load and store: no other thread can observe the lock, and the first
// thread the process creates clears the flag before it runs, so a lock taken
// on the plain path is released on the atomic one if a thread appeared
// meanwhile (it can only have been created by the lock's holder). Measured on
// the 2-core CI machine (BM_LockUnlock_*): ~0.6 ns per Lock+Unlock single-
// threaded against ~10 ns with the atomics; std::mutex does the same (~3 ns).
//
// Why not absl::Mutex: Debian's Abseil is built with its debug checks on.
// Measured on the 2-core CI machine (tools/bench, BM_LockUnlock_*): an
// uncontended absl::Mutex Lock+Unlock costs ~95 ns with deadlock detection on
// and ~37 ns with it off (a process-wide switch a library should not flip),
// std::mutex ~10 ns, this lock less. The allocator locks twice per
// allocate/free pair, and the target for the whole pair is 70 ns.
#ifndef GPUALLOC_CORE_LOCK_H_
#define GPUALLOC_CORE_LOCK_H_

#include <atomic>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "core/layer.h"

#if defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
#include <sys/single_threaded.h>
#define GPUALLOC_HAVE_SINGLE_THREADED_FLAG 1
#endif

namespace gpualloc::core {

class ABSL_LOCKABLE Lock {
 public:
  Lock() = default;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

#if defined(__linux__)
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (SingleThreaded() && state_.load(std::memory_order_relaxed) == kFree) {
      state_.store(kLocked, std::memory_order_relaxed);
      return;
    }
    std::uint32_t expected = kFree;
    if (!state_.compare_exchange_strong(expected, kLocked,
                                        std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      LockSlow();
    }
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    // Single-threaded, nobody can sleep on the lock (kContended cannot be
    // seen then; the check costs nothing and keeps a future glibc that sets
    // the flag again when threads exit on the safe side).
    if (SingleThreaded() && state_.load(std::memory_order_relaxed) == kLocked) {
      state_.store(kFree, std::memory_order_relaxed);
      return;
    }
    if (state_.exchange(kFree, std::memory_order_release) == kContended) Wake();
  }

  // For tests: whether a thread announced itself asleep on the lock.
  bool HasSleeperForTesting() const {
    return state_.load(std::memory_order_relaxed) == kContended;
  }

 private:
  static bool SingleThreaded() {
#if defined(GPUALLOC_HAVE_SINGLE_THREADED_FLAG)
    return __libc_single_threaded != 0;
#else
    return false;
#endif
  }
  static constexpr std::uint32_t kFree = 0;
  static constexpr std::uint32_t kLocked = 1;     // held, nobody sleeping
  static constexpr std::uint32_t kContended = 2;  // held, sleepers may exist
  void LockSlow();
  void Wake();
  std::atomic<std::uint32_t> state_{kFree};
#else
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
#endif
};

class ABSL_SCOPED_LOCKABLE LockGuard {
 public:
  explicit LockGuard(Lock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock)
      : lock_(lock) {
    lock_->lock();
  }
  ~LockGuard() ABSL_UNLOCK_FUNCTION() { lock_->unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Lock* const lock_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_LOCK_H_
