// SPDX-License-Identifier: Apache-2.0
// tests/runtime/registry_test.cc: backends chosen by configuration and the
// per-device allocator registry.
#include "gpualloc/runtime/registry.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;
using testing::kGiB;
using testing::kMiB;
using ::testing::Not;

Config Resolve(const std::string& config_string) {
  auto c = ResolveConfig(config_string, MapEnvironment({}));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config();
}

TEST(RegistryTest, SimBackendFromConfig) {
  const Config config = Resolve("backend=sim,device_memory=80GB,arch=h100");
  auto backend = CreateBackend(config, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const DeviceInfo& d = (*backend)->info();
  EXPECT_EQ(d.backend, "sim");
  EXPECT_EQ(d.vendor, Vendor::kNvidia);
  EXPECT_EQ(d.arch_id, "sm_90");
  EXPECT_THAT(d.name, HasSubstr("h100"));
  EXPECT_EQ(d.total_bytes, 80'000'000'000u);
  EXPECT_EQ(d.ordinal, 0);
}

TEST(RegistryTest, SimAutoArchIsH200WithItsMemory) {
  const Config config = Resolve("backend=sim");
  auto backend = CreateBackend(config, 2);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_THAT((*backend)->info().name, HasSubstr("h200"));
  EXPECT_EQ((*backend)->info().total_bytes, 143771 * kMiB);
  EXPECT_EQ((*backend)->info().ordinal, 2);
}

TEST(RegistryTest, SimOtherVendor) {
  const Config config = Resolve("backend=sim,arch=mi300x");
  auto backend = CreateBackend(config, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->info().vendor, Vendor::kAmd);
  EXPECT_EQ((*backend)->info().arch_id, "gfx942");
  EXPECT_EQ((*backend)->info().total_bytes, 192 * kGiB);
}

TEST(RegistryTest, SimErrorsAreReturned) {
  // Generic profiles have no memory size: the device must be sized.
  auto backend = CreateBackend(Resolve("backend=sim,arch=generic-amd"), 0);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backend.status().message(), HasSubstr("total_bytes"));

  // Not a whole number of 256 B allocation units.
  backend = CreateBackend(Resolve("backend=sim,device_memory=1000B"), 0);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);

  backend = CreateBackend(Resolve("backend=sim"), -1);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, VendorBackendsAreNotInThisBuild) {
  struct Case {
    std::string config;
    std::string vendor;
  };
  for (const Case& t :
       {Case{"backend=cuda", "CUDA"}, Case{"backend=hip", "HIP"}}) {
    SCOPED_TRACE(t.config);
    const Config config = Resolve(t.config);
    auto backend = CreateBackend(config, 0);
    if (!absl::IsUnimplemented(backend.status())) {
      // This build has the backend (its headers were found): it answers from
      // the driver, Unavailable with the reason on a machine without one
      // (tests/backends/cuda_backend_test.cc and
      // tests/backends/hip_backend_test.cc check it).
      EXPECT_TRUE(backend.ok() || absl::IsUnavailable(backend.status()))
          << backend.status();
      continue;
    }
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(
        backend.status().message(),
        HasSubstr("this build of gpualloc has no " + t.vendor + " backend"));
    EXPECT_THAT(backend.status().message(), HasSubstr("backend=sim"));
    auto count = DeviceCount(config);
    ASSERT_FALSE(count.ok());
    EXPECT_EQ(count.status(), backend.status());
  }
}

// Only AMD devices have fine-grained memory: other backends refuse it.
TEST(RegistryTest, FineMemoryNeedsTheHipBackend) {
  for (const char* text :
       {"backend=sim,memory_kind=fine", "backend=cuda,memory_kind=fine"}) {
    SCOPED_TRACE(text);
    auto backend = CreateBackend(Resolve(text), 0);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(backend.status().message(), HasSubstr("memory_kind=\"fine\""));
    EXPECT_THAT(backend.status().message(), HasSubstr("backend=hip"));
  }
  auto coarse = CreateBackend(Resolve("backend=sim,memory_kind=coarse"), 0);
  EXPECT_TRUE(coarse.ok()) << coarse.status();
}

TEST(RegistryTest, AutoSaysWhatItTriedAndPointsAtTheSimulator) {
  const Config config = Resolve("");
  auto backend = CreateBackend(config, 0);
  if (backend.ok()) GTEST_SKIP() << "a GPU backend works on this machine";
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(), HasSubstr("backend=auto"));
  // Either this build has no CUDA backend, or it has one and says why the
  // driver did not answer.
  EXPECT_THAT(backend.status().message(),
              ::testing::AnyOf(HasSubstr("cuda (not in this build)"),
                               HasSubstr("cuda (the CUDA driver is not"),
                               HasSubstr("cuda (backend=cuda")));
  // hip is either not in this build or tried and failed (no AMD GPU here).
  EXPECT_THAT(backend.status().message(),
              ::testing::AnyOf(HasSubstr("hip (not in this build)"),
                               HasSubstr("hip (")));
  EXPECT_THAT(backend.status().message(), HasSubstr("GPUALLOC_BACKEND=sim"));
  auto count = DeviceCount(config);
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RegistryTest, DeviceMemoryNeedsTheSimulator) {
  for (const char* text :
       {"backend=cuda,device_memory=80GB", "backend=hip,device_memory=80GB",
        "device_memory=80GB"}) {
    SCOPED_TRACE(text);
    auto backend = CreateBackend(Resolve(text), 0);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(backend.status().message(), HasSubstr("device_memory"));
    EXPECT_THAT(backend.status().message(), HasSubstr("backend=sim"));
  }
}

TEST(RegistryTest, SimDeviceCountIsOne) {
  auto count = DeviceCount(Resolve("backend=sim"));
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 1);
}

TEST(RegistryTest, GetCreatesOnceAndReturnsTheSamePointer) {
  auto registry =
      DeviceRegistry::Create(Resolve("backend=sim,device_memory=80GB"));
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->num_devices(), 1);
  EXPECT_EQ((*registry)->config().backend, BackendKind::kSim);
  auto a = (*registry)->Get(0);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = (*registry)->Get(0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->device().total_bytes, 80'000'000'000u);
  // It is a working allocator.
  auto p = (*a)->Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status();
  GPUALLOC_EXPECT_OK((*a)->Deallocate(*p));
  GPUALLOC_EXPECT_OK((*a)->Validate());
}

TEST(RegistryTest, AllocatorTakesTheConfigOptions) {
  auto registry = DeviceRegistry::Create(Resolve(
      "backend=sim,device_memory=80GiB,mem_limit=40GiB,mem_fraction=0.5,"
      "preallocate=false,name=reg"));
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto a = (*registry)->Get(0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->GetStats().bytes_limit, 40 * kGiB);  // the limit decides
  EXPECT_FALSE((*a)->options().preallocate);
  EXPECT_EQ((*a)->options().name, "reg");
}

TEST(RegistryTest, OutOfRangeOrdinal) {
  auto registry = DeviceRegistry::Create(Resolve("backend=sim"));
  ASSERT_TRUE(registry.ok()) << registry.status();
  for (int ordinal : {-1, 1, 100}) {
    auto a = (*registry)->Get(ordinal);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(),
                HasSubstr("ordinal " + std::to_string(ordinal)));
  }
}

TEST(RegistryTest, CreateFailsWhenDevicesCannotBeCounted) {
  auto registry = DeviceRegistry::Create(Resolve("backend=auto"));
  // (Where a GPU backend works, auto counts its devices.)
  if (!CreateBackend(Resolve(""), 0).ok()) {
    ASSERT_FALSE(registry.ok());
    EXPECT_EQ(registry.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  registry = DeviceRegistry::Create(Resolve("backend=sim"), nullptr, -1);
  ASSERT_FALSE(registry.ok());
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, FactoryPerOrdinal) {
  std::vector<int> made;
  auto registry = DeviceRegistry::Create(
      Resolve("backend=sim"),
      [&](int ordinal) -> absl::StatusOr<std::shared_ptr<Backend>> {
        made.push_back(ordinal);
        SimOptions o;
        o.profile = "h100";
        o.ordinal = ordinal;
        return SimBackend::Create(o);
      },
      4);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->num_devices(), 4);
  EXPECT_TRUE(made.empty());  // lazy
  std::vector<Allocator*> allocators;
  for (int i : {3, 1, 3, 0, 1}) {
    auto a = (*registry)->Get(i);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ((*a)->device().ordinal, i);
    allocators.push_back(*a);
  }
  EXPECT_EQ(made, (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(allocators[0], allocators[2]);
  EXPECT_EQ(allocators[1], allocators[4]);
  EXPECT_NE(allocators[0], allocators[1]);
}

TEST(RegistryTest, ConcurrentGetCreatesOneAllocator) {
  constexpr int kThreads = 8;
  std::atomic<int> calls{0};
  std::atomic<int> in_flight{0};
  std::atomic<int> max_in_flight{0};
  // Threads about to call Get. The factory waits until every thread has
  // arrived, so that all of them call Get while the first creation is still
  // in flight, whatever the scheduling.
  std::atomic<int> arrived{0};
  auto registry = DeviceRegistry::Create(
      Resolve("backend=sim"),
      [&](int ordinal) -> absl::StatusOr<std::shared_ptr<Backend>> {
        calls.fetch_add(1);
        const int now = in_flight.fetch_add(1) + 1;
        int seen = max_in_flight.load();
        while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
        }
        while (arrived.load() < kThreads) std::this_thread::yield();
        in_flight.fetch_sub(1);
        SimOptions o;
        o.ordinal = ordinal;
        return SimBackend::Create(o);
      },
      1);
  ASSERT_TRUE(registry.ok()) << registry.status();
  std::vector<Allocator*> got(kThreads, nullptr);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      arrived.fetch_add(1);
      auto a = (*registry)->Get(0);
      if (a.ok()) got[t] = *a;
    });
  }
  go.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(max_in_flight.load(), 1);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(got[t], nullptr) << "thread " << t;
    EXPECT_EQ(got[t], got[0]);
  }
}

TEST(RegistryTest, FailureIsNotCached) {
  int calls = 0;
  auto registry = DeviceRegistry::Create(
      Resolve("backend=sim"),
      [&](int ordinal) -> absl::StatusOr<std::shared_ptr<Backend>> {
        if (++calls == 1) return absl::UnavailableError("driver is busy");
        SimOptions o;
        o.ordinal = ordinal;
        return SimBackend::Create(o);
      },
      1);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto a = (*registry)->Get(0);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(a.status().message(), HasSubstr("driver is busy"));
  auto b = (*registry)->Get(0);
  ASSERT_TRUE(b.ok()) << b.status();
  auto c = (*registry)->Get(0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*b, *c);
  EXPECT_EQ(calls, 2);
}

TEST(RegistryTest, AllocatorErrorsAreReturnedAndNotCached) {
  // A limit beyond the device: CreateAllocator refuses, every time.
  int calls = 0;
  auto registry = DeviceRegistry::Create(
      Resolve("backend=sim,mem_limit=200GiB"),
      [&](int) -> absl::StatusOr<std::shared_ptr<Backend>> {
        ++calls;
        return SimBackend::Create(SimOptions());
      },
      1);
  ASSERT_TRUE(registry.ok()) << registry.status();
  for (int i = 0; i < 2; ++i) {
    auto a = (*registry)->Get(0);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    // Checked at the device's first use, as on a GPU: the message names the
    // key as the user wrote it, not the Options field.
    EXPECT_THAT(a.status().message(),
                HasSubstr("config string mem_limit=\"200GiB\" is more than "
                          "the device's total memory"));
    EXPECT_THAT(a.status().message(), HasSubstr("set mem_limit in the config "
                                                "string to at most"));
    EXPECT_THAT(a.status().message(), Not(HasSubstr("Options.")));
  }
  EXPECT_EQ(calls, 2);
}

TEST(RegistryTest, NullBackendFromFactoryIsAnError) {
  auto registry = DeviceRegistry::Create(
      Resolve("backend=sim"),
      [](int) -> absl::StatusOr<std::shared_ptr<Backend>> { return nullptr; },
      1);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto a = (*registry)->Get(0);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gpualloc
