// core/lock.h: the allocator's lock: a std::mutex with Abseil's thread-safety
// annotations, so clang's -Wthread-safety checks every guarded member.
//
// Why not absl::Mutex: Debian's Abseil is built with its debug checks on. Measured
// on the 2-core CI machine (tools/bench, BM_LockUnlock): an uncontended
// absl::Mutex Lock+Unlock costs ~105 ns with deadlock detection on and ~40 ns
// with it switched off (a process-wide setting a library should not flip),
// against ~12 ns for std::mutex (a futex fast path). The allocator takes the lock
// twice per allocate/free pair, so the choice alone is worth ~60-190 ns a pair.
#ifndef GPUALLOC_CORE_LOCK_H_
#define GPUALLOC_CORE_LOCK_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace gpualloc::core {

class ABSL_LOCKABLE Lock {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE LockGuard {
 public:
  explicit LockGuard(Lock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
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
