// SPDX-License-Identifier: Apache-2.0
// tests/core/lock_test.cc: the allocator's futex mutex (core::Lock, LockGuard).
//
// Every ordering here is established with atomics and latches, never with
// sleeps, and nothing asserts on timing: a broken lock shows up as a lost
// increment, two threads inside a critical section at once, or (under
// ThreadSanitizer) a data race on the unsynchronized counters.
#include "core/lock.h"

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "gtest/gtest.h"

namespace gpualloc::core {
namespace {

static_assert(!std::is_copy_constructible_v<Lock>);
static_assert(!std::is_copy_assignable_v<Lock>);
static_assert(!std::is_move_constructible_v<Lock>);
static_assert(!std::is_copy_constructible_v<LockGuard>);
static_assert(!std::is_copy_assignable_v<LockGuard>);

// The standard's BasicLockable requirements: lock() and unlock().
template <typename T>
concept BasicLockable = requires(T& m) {
  m.lock();
  m.unlock();
};
static_assert(BasicLockable<Lock>);

// Lets a waiting thread give up its CPU (the CI machine has two cores) while
// it polls an atomic. Only ever used to wait for an atomic condition, never to
// order anything by elapsed time.
template <typename Pred>
void SpinUntil(Pred pred) {
  while (!pred()) std::this_thread::yield();
}

// Counts threads inside a critical section; a second entrant is a violation.
class ExclusionChecker {
 public:
  void Enter() {
    if (inside_.fetch_add(1, std::memory_order_relaxed) != 0) {
      violations_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  void Leave() { inside_.fetch_sub(1, std::memory_order_relaxed); }
  int violations() const { return violations_.load(); }

 private:
  std::atomic<int> inside_{0};
  std::atomic<int> violations_{0};
};

// Unlocks a Lock that clang's analysis cannot see is held (its ownership went
// through std::unique_lock::release).
void UnlockWithoutAnalysis(Lock* mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  mu->unlock();
}

struct GuardedCounter {
  Lock mu;
  // Deliberately not atomic: only the lock makes the increments safe.
  std::uint64_t value ABSL_GUARDED_BY(mu) = 0;
};

TEST(LockTest, UncontendedLockUnlock) {
  Lock mu;
  for (int i = 0; i < 1000; ++i) {
    mu.lock();
    mu.unlock();
  }
  GuardedCounter c;
  {
    LockGuard g(&c.mu);
    c.value = 1;
  }
  {
    LockGuard g(&c.mu);
    EXPECT_EQ(c.value, 1u);
  }
}

TEST(LockTest, MutualExclusionUnderLockGuard) {
  for (int threads : {4, 8}) {
    SCOPED_TRACE(threads);
    constexpr int kIters = 100000;
    GuardedCounter counter;
    ExclusionChecker checker;
    std::latch start(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        start.arrive_and_wait();  // all threads contend from the first lock
        for (int i = 0; i < kIters; ++i) {
          LockGuard g(&counter.mu);
          checker.Enter();
          counter.value = counter.value + 1;
          checker.Leave();
        }
      });
    }
    for (auto& th : pool) th.join();
    LockGuard g(&counter.mu);
    EXPECT_EQ(counter.value, static_cast<std::uint64_t>(threads) * kIters);
    EXPECT_EQ(checker.violations(), 0);
  }
}

TEST(LockTest, ContendedHandoff) {
  // The main thread holds the lock while the others arrive and block on it;
  // nobody may get in before the holder lets go, and every waiter gets in
  // exactly once afterwards. Many rounds, so that the sleeping (futex) path
  // and the wake on unlock are taken even on a two-core machine.
  constexpr int kWaiters = 6;
  constexpr int kRounds = 200;
  Lock mu;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> arrived{0};
    std::atomic<bool> released{false};
    std::atomic<int> early{0};  // waiters that got in before the release
    ExclusionChecker checker;
    std::vector<int> order;  // guarded by mu
    mu.lock();
    std::vector<std::thread> waiters;
    for (int w = 0; w < kWaiters; ++w) {
      waiters.emplace_back([&, w] {
        arrived.fetch_add(1);
        mu.lock();
        checker.Enter();
        if (!released.load()) early.fetch_add(1);
        order.push_back(w);
        checker.Leave();
        mu.unlock();
      });
    }
    // Every waiter is at (or past) its lock() call. Yielding a little more
    // gives them time to go to sleep in the kernel; correctness does not
    // depend on whether they did.
    SpinUntil([&] { return arrived.load() == kWaiters; });
    for (int i = 0; i < 100; ++i) std::this_thread::yield();
    EXPECT_TRUE(order.empty());  // nobody got in while we held the lock
    released.store(true);
    mu.unlock();
    for (auto& th : waiters) th.join();
    std::vector<int> got;
    {
      LockGuard g(&mu);
      got = order;
    }
    ASSERT_EQ(got.size(), static_cast<std::size_t>(kWaiters))
        << "round " << round;
    std::vector<int> seen(kWaiters, 0);
    for (int w : got) ++seen.at(static_cast<std::size_t>(w));
    for (std::size_t w = 0; w < seen.size(); ++w) {
      EXPECT_EQ(seen[w], 1) << "waiter " << w << ", round " << round;
    }
    ASSERT_EQ(early.load(), 0) << "round " << round;
    ASSERT_EQ(checker.violations(), 0) << "round " << round;
  }
}

#if defined(GPUALLOC_HAVE_SINGLE_THREADED_FLAG)
// Locked while the process had one thread (the plain path), then a thread is
// created that sleeps on the lock: the unlock must see the thread and wake
// it. Run in a fresh process (a threadsafe death test re-executes the test
// binary), where no thread exists yet. A lost wake-up hangs the test.
// Whether thread `tid` of this process sleeps in the kernel ('S' in
// /proc/self/task/TID/stat).
bool ThreadSleeps(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() &&
         text[paren + 2] == 'S';
}

void LockSingleThreadedThenWakeANewThread() {
  if (!__libc_single_threaded) std::_Exit(2);
  Lock mu;
  mu.lock();  // no other thread: the plain store
  std::atomic<bool> got_in{false};
  std::atomic<pid_t> waiter_tid{0};
  std::thread waiter([&] {
    waiter_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    mu.lock();
    got_in.store(true);
    mu.unlock();
  });
  if (__libc_single_threaded) std::_Exit(3);
  // The waiter announced itself and sleeps on the futex: only a wake-up from
  // the unlock below lets it in.
  SpinUntil([&] { return mu.HasSleeperForTesting(); });
  SpinUntil([&] { return ThreadSleeps(waiter_tid.load()); });
  mu.unlock();
  waiter.join();
  std::_Exit(got_in.load() ? 0 : 1);
}

TEST(LockDeathTest, TakenSingleThreadedReleasedToAThreadCreatedMeanwhile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LockSingleThreadedThenWakeANewThread(),
              ::testing::ExitedWithCode(0), "");
}
#endif

TEST(LockTest, HandoffBetweenTwoThreadsAlternatesStrictly) {
  // Two threads take turns through a condition_variable_any on the Lock, so
  // the lock changes hands (and sleeping threads are woken) on every step.
  constexpr int kSteps = 5000;
  Lock mu;
  std::condition_variable_any cv;
  int turn = 0;              // guarded by mu
  std::vector<int> history;  // guarded by mu
  history.reserve(2 * kSteps);
  const auto player = [&](int me) {
    for (int i = 0; i < kSteps; ++i) {
      std::unique_lock<Lock> lk(mu);
      cv.wait(lk, [&] { return turn == me; });
      history.push_back(me);
      turn = 1 - me;
      cv.notify_one();
    }
  };
  std::thread a(player, 0);
  std::thread b(player, 1);
  a.join();
  b.join();
  std::lock_guard<Lock> g(mu);
  ASSERT_EQ(history.size(), static_cast<std::size_t>(2 * kSteps));
  for (std::size_t i = 0; i < history.size(); ++i) {
    ASSERT_EQ(history[i], static_cast<int>(i % 2)) << "step " << i;
  }
}

TEST(LockTest, WorksWithStdLockGuardAndUniqueLock) {
  Lock mu;
  std::atomic<bool> other_arrived{false};
  std::atomic<bool> other_acquired{false};
  std::thread other;
  {
    std::lock_guard<Lock> g(mu);
    other = std::thread([&] {
      other_arrived.store(true);
      std::lock_guard<Lock> g2(mu);
      other_acquired.store(true);
    });
    SpinUntil([&] { return other_arrived.load(); });
    for (int i = 0; i < 100; ++i) std::this_thread::yield();
    // We still hold the lock, so the other thread cannot have it.
    EXPECT_FALSE(other_acquired.load());
  }
  other.join();
  EXPECT_TRUE(other_acquired.load());

  // unique_lock: deferred locking, unlock/relock, release of ownership.
  std::unique_lock<Lock> lk(mu, std::defer_lock);
  EXPECT_FALSE(lk.owns_lock());
  lk.lock();
  EXPECT_TRUE(lk.owns_lock());
  lk.unlock();
  EXPECT_FALSE(lk.owns_lock());
  lk.lock();
  Lock* released = lk.release();  // still locked, now owned by us
  EXPECT_EQ(released, &mu);
  EXPECT_FALSE(lk.owns_lock());
  UnlockWithoutAnalysis(released);
  {
    std::unique_lock<Lock> locked(mu);
    EXPECT_TRUE(locked.owns_lock());
  }
  {
    std::scoped_lock<Lock> s(mu);  // one mutex: only BasicLockable needed
  }
  // Unlocked again: a fresh LockGuard gets it at once.
  LockGuard g(&mu);
}

TEST(LockTest, StdLockGuardMutualExclusion) {
  // The same exclusion guarantee through the std wrappers, mixed with
  // LockGuard, from threads that each use a different way in.
  constexpr int kThreads = 6;
  constexpr int kIters = 50000;
  Lock mu;
  std::uint64_t value = 0;  // guarded by mu (through std wrappers)
  ExclusionChecker checker;
  std::latch start(kThreads);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kIters; ++i) {
        switch (t % 3) {
          case 0: {
            std::lock_guard<Lock> g(mu);
            checker.Enter();
            ++value;
            checker.Leave();
            break;
          }
          case 1: {
            std::unique_lock<Lock> g(mu);
            checker.Enter();
            ++value;
            checker.Leave();
            break;
          }
          default: {
            mu.lock();
            checker.Enter();
            ++value;
            checker.Leave();
            mu.unlock();
            break;
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  std::lock_guard<Lock> g(mu);
  EXPECT_EQ(value, static_cast<std::uint64_t>(kThreads) * kIters);
  EXPECT_EQ(checker.violations(), 0);
}

}  // namespace
}  // namespace gpualloc::core
