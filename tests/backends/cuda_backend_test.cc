// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_backend_test.cc: the CUDA backend's own tests, run
// against the fake driver (tests/backends/cuda_fake_driver.h): entry-point
// loading, error mapping, profile choice, device facts, the rules checked
// before driver calls, the primary context, pools, and the registry's answer
// without a driver.
#include "backends/cuda/cuda_backend.h"

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/common/vmm_ledger.h"
#include "backends/cuda/cuda_driver.h"
#include "gmock/gmock.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_walk.h"
#include "tests/backends/cuda_fake_driver.h"

namespace gpualloc::cuda {
namespace {

using common::VmmLedger;
using ::testing::AllOf;
using testing::FakeCudaDriver;
using testing::FakeCudaOptions;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::shared_ptr<CudaBackend> MakeBackend(
    const std::shared_ptr<FakeCudaDriver>& fake) {
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api = fake->Api();
  EXPECT_TRUE(api.ok()) << api.status();
  if (!api.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<CudaBackend>> backend =
      CudaBackend::Create(*api, 0);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *backend : nullptr;
}

FakeCudaOptions SmallDevice() {
  FakeCudaOptions o;
  o.total_bytes = kGiB;
  return o;
}

// --- Entry points
// ---------------------------------------------------------------

TEST(CudaEntryPointsTest, ResolvesEveryBaseNameForTheCompiledVersion) {
  auto fake = FakeCudaDriver::Create();  // a 12.4 driver
  auto api = fake->Api();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ((*api)->driver_version, 12040);
  EXPECT_EQ((*api)->requested_version, std::min(CUDA_VERSION, 12040));
  EXPECT_TRUE((*api)->has_virtual_memory());
  EXPECT_TRUE((*api)->has_pools());
  EXPECT_TRUE((*api)->missing.empty());

  const std::vector<FakeCudaDriver::Request> requests = fake->requests();
  ASSERT_FALSE(requests.empty());
  // The version first, asked for with the ABI every driver has.
  EXPECT_EQ(requests[0].symbol, "cuDriverGetVersion");
  EXPECT_EQ(requests[0].version, 2020);
  std::set<std::string> names;
  for (std::size_t i = 1; i < requests.size(); ++i) {
    const auto& r = requests[i];
    names.insert(r.symbol);
    EXPECT_EQ(r.version, (*api)->requested_version) << r.symbol;
    EXPECT_EQ(r.flags, CU_GET_PROC_ADDRESS_LEGACY_STREAM) << r.symbol;
    // Base names, never the header's versioned spellings.
    EXPECT_THAT(r.symbol, ::testing::Not(HasSubstr("_v"))) << r.symbol;
  }
  for (const char* expected : {"cuMemAlloc",
                               "cuMemFree",
                               "cuMemGetInfo",
                               "cuDeviceTotalMem",
                               "cuEventDestroy",
                               "cuDevicePrimaryCtxRelease",
                               "cuMemCreate",
                               "cuMemMap",
                               "cuMemSetAccess",
                               "cuMemAllocFromPoolAsync",
                               "cuMemFreeAsync",
                               "cuGetErrorName",
                               "cuStreamIsCapturing",
                               "cuThreadExchangeStreamCaptureMode",
                               "cuIpcOpenMemHandle",
                               "cuMemGetAddressRange",
                               "cuMemExportToShareableHandle",
                               "cuMemHostAlloc",
                               "cuMemHostGetDevicePointer",
                               "cuStreamWriteValue64",
                               "cuStreamWaitValue64"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
  EXPECT_EQ(names.size(), 52u);
  EXPECT_TRUE((*api)->has_counters());
}

TEST(CudaEntryPointsTest, ANewerDriverIsAskedForTheCompiledVersion) {
  FakeCudaOptions o;
  o.driver_version = CUDA_VERSION + 1000;
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ((*api)->requested_version, CUDA_VERSION);
}

TEST(CudaEntryPointsTest, AMissingCoreEntryPointIsUnavailableNamingIt) {
  FakeCudaOptions o;
  o.missing_symbols = {"cuMemAlloc", "cuEventQuery"};
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_FALSE(api.ok());
  EXPECT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(),
              AllOf(HasSubstr("fake driver"), HasSubstr("cuMemAlloc"),
                    HasSubstr("cuEventQuery"), HasSubstr("12.4")));
}

TEST(CudaEntryPointsTest, AMissingGroupEntryPointTurnsTheCapabilityOff) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuMemSetAccess", "cuMemFreeAsync"};
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_FALSE((*api)->has_virtual_memory());
  EXPECT_FALSE((*api)->has_pools());
  // The whole group is cleared, not just the missing member.
  EXPECT_EQ((*api)->cuMemMap, nullptr);
  EXPECT_EQ((*api)->cuMemPoolCreate, nullptr);
  EXPECT_THAT((*api)->missing,
              ::testing::UnorderedElementsAre(HasSubstr("cuMemSetAccess"),
                                              HasSubstr("cuMemFreeAsync")));
  auto backend = CudaBackend::Create(*api, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.virtual_memory);
  EXPECT_FALSE((*backend)->info().capabilities.stream_ordered_pools);
  EXPECT_TRUE(
      absl::IsUnimplemented((*backend)->CreatePhysical(2 * kMiB).status()));
  EXPECT_TRUE(absl::IsUnimplemented((*backend)->ConfigurePool({})));
  // The profile's granularity stands in for the driver's.
  EXPECT_EQ((*backend)->info().min_granularity, 2 * kMiB);
}

TEST(CudaEntryPointsTest, AResolverErrorIsUnavailable) {
  CudaDriverApi api;
  api.source = "broken";
  const absl::Status status =
      ResolveEntryPoints([](const char*, void**, int,
                            cuuint64_t) { return CUDA_ERROR_NOT_SUPPORTED; },
                         &api);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cuDriverGetVersion"));
}

TEST(CudaEntryPointsTest, ALibraryThatDoesNotLoadIsUnavailableWithDlerror) {
  auto api = LoadCudaDriver("libgpualloc-no-such-driver.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(),
              AllOf(HasSubstr("libgpualloc-no-such-driver.so.1"),
                    HasSubstr("cannot open shared object file")));
}

TEST(CudaEntryPointsTest, ALibraryWithoutTheResolverIsUnavailable) {
  // libc loads everywhere and has no cuGetProcAddress.
  auto api = LoadCudaDriver("libc.so.6");
  ASSERT_FALSE(api.ok());
  EXPECT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(),
              AllOf(HasSubstr("libc.so.6"), HasSubstr("cuGetProcAddress")));
}

// The fake driver's resolver, reached from the stand-in libcuda through a
// plain function pointer.
ProcAddressResolver* g_forward_to = nullptr;
CUresult ForwardToFake(const char* symbol, void** pfn, int version,
                       cuuint64_t flags) {
  return (*g_forward_to)(symbol, pfn, version, flags);
}

// dlopens the stand-in at `path` and points it at `fake`.
void PointStandInAt(const char* path, FakeCudaDriver& fake,
                    ProcAddressResolver* resolver) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using SetForward =
      void (*)(CUresult(*)(const char*, void**, int, cuuint64_t));
  auto set = reinterpret_cast<SetForward>(
      dlsym(lib, "gpualloc_fake_libcuda_set_forward"));
  ASSERT_NE(set, nullptr);
  *resolver = fake.Resolver();
  g_forward_to = resolver;
  set(&ForwardToFake);
}

TEST(CudaLoaderTest, LoadsThroughDlopenAndCuda12sResolver) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuMemPoolTrimTo"};
  auto fake = FakeCudaDriver::Create(o);
  ProcAddressResolver resolver;
  PointStandInAt(GPUALLOC_FAKE_LIBCUDA_V2, *fake, &resolver);
  auto api = LoadCudaDriver(GPUALLOC_FAKE_LIBCUDA_V2);
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ((*api)->source, GPUALLOC_FAKE_LIBCUDA_V2);
  EXPECT_EQ((*api)->driver_version, 12040);
  // The resolver's status said "not found": the pointer it left is ignored.
  EXPECT_FALSE((*api)->has_pools());
  EXPECT_TRUE((*api)->has_virtual_memory());
  auto backend = CudaBackend::Create(*api, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto p = (*backend)->Allocate(kMiB);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*backend)->Free(*p).ok());
  EXPECT_EQ(fake->count("cuMemAlloc"), 1);
}

TEST(CudaLoaderTest, FallsBackToCuda11sResolver) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  ProcAddressResolver resolver;
  PointStandInAt(GPUALLOC_FAKE_LIBCUDA_V1, *fake, &resolver);
  auto api = LoadCudaDriver(GPUALLOC_FAKE_LIBCUDA_V1);
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_TRUE((*api)->has_pools());
  auto backend = CudaBackend::Create(*api, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->info().name, "NVIDIA H200");
}

TEST(CudaEntryPointsTest, TheSharedDriverLoadsOrSaysWhy) {
  auto api = SharedCudaDriver();
  if (api.ok()) {
    EXPECT_EQ((*api)->source, "libcuda.so.1");
    EXPECT_GT((*api)->driver_version, 0);
    return;
  }
  EXPECT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(), HasSubstr("libcuda.so.1"));
  // The same answer every time.
  EXPECT_EQ(SharedCudaDriver().status(), api.status());
}

// --- Error mapping
// --------------------------------------------------------------

TEST(CudaErrorTest, CodesMapByWhatTheCallerShouldDo) {
  const struct {
    CUresult result;
    absl::StatusCode code;
  } cases[] = {
      {CUDA_SUCCESS, absl::StatusCode::kOk},
      {CUDA_ERROR_OUT_OF_MEMORY, absl::StatusCode::kResourceExhausted},
      {CUDA_ERROR_INVALID_VALUE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_INVALID_HANDLE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_INVALID_DEVICE, absl::StatusCode::kInvalidArgument},
      {CUDA_ERROR_NOT_INITIALIZED, absl::StatusCode::kUnavailable},
      {CUDA_ERROR_NO_DEVICE, absl::StatusCode::kUnavailable},
      {CUDA_ERROR_STUB_LIBRARY, absl::StatusCode::kUnavailable},
      {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, absl::StatusCode::kUnavailable},
      {CUDA_ERROR_NOT_SUPPORTED, absl::StatusCode::kUnimplemented},
      {CUDA_ERROR_ILLEGAL_ADDRESS, absl::StatusCode::kInternal},
      {CUDA_ERROR_UNKNOWN, absl::StatusCode::kInternal},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(CudaStatusCode(c.result), c.code) << c.result;
  }
}

TEST(CudaErrorTest, MessageNamesTheCallTheErrorAndTheCode) {
  auto fake = FakeCudaDriver::Create();
  auto api = fake->Api();
  ASSERT_TRUE(api.ok());
  const absl::Status status = CudaError(
      **api, "cuMemMap(0x200000, 2097152 bytes)", CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_EQ(status.message(),
            "cuMemMap(0x200000, 2097152 bytes) failed: "
            "CUDA_ERROR_INVALID_VALUE (1)");
  EXPECT_TRUE(CudaError(**api, "cuInit(0)", CUDA_SUCCESS).ok());
}

TEST(CudaErrorTest, WithoutANameTheNumberStands) {
  CudaDriverApi empty;  // no cuGetErrorName
  EXPECT_EQ(
      CudaError(empty, "cuMemFree(0x10)", CUDA_ERROR_ILLEGAL_ADDRESS).message(),
      "cuMemFree(0x10) failed: CUresult 700");
  FakeCudaOptions o;
  o.error_names = false;  // the driver does not know the code
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_TRUE(api.ok());
  EXPECT_EQ(CudaErrorName(**api, static_cast<CUresult>(12345)),
            "CUresult 12345");
}

// --- Profile choice
// -------------------------------------------------------------

TEST(CudaProfileTest, ArchIds) {
  EXPECT_EQ(ArchIdFor(8, 0), "sm_80");
  EXPECT_EQ(ArchIdFor(9, 0), "sm_90");
  EXPECT_EQ(ArchIdFor(8, 9), "sm_89");
  EXPECT_EQ(ArchIdFor(12, 0), "sm_120");
}

TEST(CudaProfileTest, ChoosesByNameThenArchitectureThenGeneric) {
  const struct {
    const char* name;
    int major, minor;
    std::uint64_t memory;
    const char* profile;
    const char* reason;
  } cases[] = {
      {"NVIDIA H200", 9, 0, 143771 * kMiB, "h200", "names the H200"},
      {"NVIDIA H100 80GB HBM3", 9, 0, 81559 * kMiB, "h100", "names the H100"},
      // The NVL's 94 GB is closer to nothing in particular: the name decides.
      {"NVIDIA H100 NVL", 9, 0, 95830 * kMiB, "h100", "names the H100"},
      {"NVIDIA A100-SXM4-80GB", 8, 0, 81920 * kMiB, "a100", "names the A100"},
      {"nvidia a100-pcie-40gb", 8, 0, 40 * kGiB, "a100", "names the A100"},
      // No name match: architecture and memory size.
      {"NVIDIA A30", 8, 0, 24 * kGiB, "a100", "chosen by architecture sm_80"},
      {"NVIDIA GH200 480GB", 9, 0, 97871 * kMiB, "h100",
       "chosen by architecture sm_90"},
      // Nothing lists the architecture: generic.
      {"NVIDIA L40S", 8, 9, 46068 * kMiB, "generic-nvidia",
       "no profile lists sm_89"},
      {"NVIDIA B200", 10, 0, 183359 * kMiB, "generic-nvidia",
       "no profile lists sm_100"},
      // A name that disagrees with the compute capability is not trusted.
      {"NVIDIA H100 (modded)", 8, 6, 24 * kGiB, "generic-nvidia",
       "is not that profile's"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const ProfileChoice choice =
        ChooseNvidiaProfile(c.name, c.major, c.minor, c.memory);
    ASSERT_NE(choice.profile, nullptr) << choice.reason;
    EXPECT_EQ(choice.profile->name, c.profile);
    EXPECT_THAT(choice.reason, HasSubstr(c.reason));
  }
}

// --- Device facts
// -----------------------------------------------------------------

TEST(CudaBackendTest, InfoComesFromTheDriver) {
  FakeCudaOptions o;
  o.recommended_granularity = 8 * kMiB;  // not the profile's 2 MiB
  o.driver_version = 12080;
  auto fake = FakeCudaDriver::Create(o);
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  const DeviceInfo& d = backend->info();
  EXPECT_EQ(d.backend, "cuda");
  EXPECT_EQ(d.vendor, Vendor::kNvidia);
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.arch_id, "sm_90");
  EXPECT_EQ(d.ordinal, 0);
  EXPECT_EQ(d.total_bytes, 143771 * kMiB);
  EXPECT_EQ(d.min_granularity, 2 * kMiB);
  EXPECT_EQ(d.recommended_granularity, 8 * kMiB);
  EXPECT_EQ(d.allocation_alignment, 256u);
  EXPECT_FALSE(d.page_sizes.empty());
  EXPECT_EQ(d.driver_version, "12.8");
  EXPECT_TRUE(d.capabilities.virtual_memory);
  EXPECT_TRUE(d.capabilities.streams);
  EXPECT_TRUE(d.capabilities.stream_ordered_pools);
  EXPECT_FALSE(d.capabilities.host_accessible);
  EXPECT_EQ(backend->profile_choice().profile->name, "h200");
  EXPECT_THAT(backend->profile_choice().reason, HasSubstr("NVIDIA H200"));
  EXPECT_EQ(fake->primary_context_refs(), 1);
}

TEST(CudaBackendTest, DeviceAttributesTurnCapabilitiesOff) {
  FakeCudaOptions o = SmallDevice();
  o.vmm_supported = false;
  o.pools_supported = false;
  auto fake = FakeCudaDriver::Create(o);
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  EXPECT_FALSE(backend->info().capabilities.virtual_memory);
  EXPECT_FALSE(backend->info().capabilities.stream_ordered_pools);
  EXPECT_EQ(fake->count("cuMemGetAllocationGranularity"), 0);
  const absl::Status map = backend->Map(0, 2 * kMiB, 1);
  EXPECT_TRUE(absl::IsUnimplemented(map)) << map;
  EXPECT_THAT(map.message(), HasSubstr("virtual_memory"));
}

TEST(CudaBackendTest, CreationErrors) {
  {
    FakeCudaOptions o;
    o.init_result = CUDA_ERROR_NO_DEVICE;
    auto fake = FakeCudaDriver::Create(o);
    auto backend = CudaBackend::Create(*fake->Api(), 0);
    EXPECT_TRUE(absl::IsUnavailable(backend.status())) << backend.status();
    EXPECT_THAT(backend.status().message(),
                AllOf(HasSubstr("backend=cuda"), HasSubstr("cuInit(0)"),
                      HasSubstr("CUDA_ERROR_NO_DEVICE (100)")));
  }
  {
    auto fake = FakeCudaDriver::Create();
    auto backend = CudaBackend::Create(*fake->Api(), 1);
    EXPECT_TRUE(absl::IsUnavailable(backend.status())) << backend.status();
    EXPECT_THAT(backend.status().message(),
                HasSubstr("CUDA device 1 does not exist: the driver sees 1 "
                          "device"));
    EXPECT_EQ(fake->primary_context_refs(), 0);
    backend = CudaBackend::Create(*fake->Api(), -1);
    EXPECT_TRUE(absl::IsInvalidArgument(backend.status()));
    EXPECT_TRUE(
        absl::IsInvalidArgument(CudaBackend::Create(nullptr, 0).status()));
  }
  {
    auto fake = FakeCudaDriver::Create();
    fake->FailNext("cuDevicePrimaryCtxRetain", CUDA_ERROR_UNKNOWN);
    auto backend = CudaBackend::Create(*fake->Api(), 0);
    EXPECT_TRUE(absl::IsInternal(backend.status())) << backend.status();
    EXPECT_THAT(backend.status().message(),
                HasSubstr("cuDevicePrimaryCtxRetain failed: "
                          "CUDA_ERROR_UNKNOWN (999)"));
  }
  {
    // A failure after the context was retained releases it.
    auto fake = FakeCudaDriver::Create();
    fake->FailNext("cuMemGetAllocationGranularity", CUDA_ERROR_INVALID_VALUE);
    auto backend = CudaBackend::Create(*fake->Api(), 0);
    EXPECT_TRUE(absl::IsInvalidArgument(backend.status()));
    EXPECT_EQ(fake->primary_context_refs(), 0);
  }
  {
    // The retained context cannot be made current: the retain is given back
    // all the same, and the thread keeps its own context.
    auto fake = FakeCudaDriver::Create();
    auto api = fake->Api();
    ASSERT_TRUE(api.ok());
    FakeCudaDriver::SetThreadContext(FakeCudaDriver::ForeignContext());
    fake->FailAlways("cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
    auto backend = CudaBackend::Create(*api, 0);
    EXPECT_TRUE(absl::IsInternal(backend.status())) << backend.status();
    EXPECT_THAT(backend.status().message(), HasSubstr("cuCtxSetCurrent"));
    EXPECT_EQ(fake->count("cuDevicePrimaryCtxRetain"), 1);
    EXPECT_EQ(fake->primary_context_refs(), 0);
    EXPECT_EQ(FakeCudaDriver::ThreadContext(),
              FakeCudaDriver::ForeignContext());
    fake->StopFailing("cuCtxSetCurrent");
    FakeCudaDriver::SetThreadContext(nullptr);
  }
}

// --- Driver errors through the backend
// ----------------------------------------

TEST(CudaBackendTest, DriverErrorsBecomeStatusesAndChangeNothing) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);

  fake->FailNext("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  auto a = backend->Allocate(4096);
  EXPECT_TRUE(absl::IsResourceExhausted(a.status())) << a.status();
  EXPECT_THAT(a.status().message(),
              AllOf(HasSubstr("cuMemAlloc(4096 bytes) failed: "
                              "CUDA_ERROR_OUT_OF_MEMORY (2)"),
                    HasSubstr("bytes free")));

  auto kept = backend->Allocate(4096);
  ASSERT_TRUE(kept.ok());
  fake->FailNext("cuMemFree", CUDA_ERROR_ILLEGAL_ADDRESS);
  const absl::Status freed = backend->Free(*kept);
  EXPECT_TRUE(absl::IsInternal(freed)) << freed;
  EXPECT_THAT(freed.message(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS (700)"));
  // Still recorded: the retry frees it.
  EXPECT_TRUE(backend->Free(*kept).ok());

  auto handle = backend->CreatePhysical(2 * kMiB);
  ASSERT_TRUE(handle.ok());
  auto va = backend->ReserveAddress(4 * kMiB, 0);
  ASSERT_TRUE(va.ok());
  fake->FailNext("cuMemMap", CUDA_ERROR_INVALID_VALUE);
  const absl::Status map = backend->Map(*va, 2 * kMiB, *handle);
  EXPECT_TRUE(absl::IsInvalidArgument(map));
  EXPECT_THAT(map.message(), HasSubstr("cuMemMap("));
  EXPECT_THAT(map.message(), HasSubstr("failed: CUDA_ERROR_INVALID_VALUE (1)"));
  // Nothing was recorded: the same map now succeeds.
  EXPECT_TRUE(backend->Map(*va, 2 * kMiB, *handle).ok());

  fake->FailNext("cuMemCreate", CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(
      absl::IsUnimplemented(backend->CreatePhysical(2 * kMiB).status()));
  fake->FailNext("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(
      absl::IsResourceExhausted(backend->CreatePhysical(2 * kMiB).status()));

  auto event = backend->CreateEvent();
  ASSERT_TRUE(event.ok());
  fake->FailNext("cuEventRecord", CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(absl::IsInternal(backend->RecordEvent(*event, Stream())));
  fake->FailNext("cuEventQuery", CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(absl::IsInvalidArgument(backend->QueryEvent(*event).status()));

  // A failed destroy leaves the event the backend's: still usable, and the
  // retry destroys it.
  fake->FailNext("cuEventDestroy", CUDA_ERROR_ILLEGAL_ADDRESS);
  const absl::Status destroyed = backend->DestroyEvent(*event);
  EXPECT_TRUE(absl::IsInternal(destroyed)) << destroyed;
  EXPECT_THAT(destroyed.message(), HasSubstr("cuEventDestroy("));
  EXPECT_EQ(fake->live_events(), 1);
  EXPECT_TRUE(backend->RecordEvent(*event, Stream()).ok());
  EXPECT_TRUE(backend->DestroyEvent(*event).ok());
  EXPECT_EQ(fake->live_events(), 0);

  // The same for a pool block whose free fails.
  ASSERT_TRUE(backend->ConfigurePool(PoolOptions()).ok());
  auto block = backend->PoolAllocate(kMiB, Stream(3));
  ASSERT_TRUE(block.ok()) << block.status();
  fake->FailNext("cuMemFreeAsync", CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(absl::IsInternal(backend->PoolFree(*block, Stream(3))));
  EXPECT_TRUE(backend->PoolFree(*block, Stream(3)).ok());
}

TEST(CudaBackendTest, OversizedRequestsAreResourceExhaustedWithoutACall) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  const int before = fake->count_prefix("cuMem");
  const std::uint64_t huge = ~std::uint64_t{0};
  auto a = backend->Allocate(huge);
  EXPECT_TRUE(absl::IsResourceExhausted(a.status()));
  EXPECT_THAT(a.status().message(), HasSubstr("more than the device's total"));
  EXPECT_TRUE(absl::IsResourceExhausted(
      backend->PoolAllocate(2 * kGiB, Stream()).status()));
  EXPECT_TRUE(
      absl::IsResourceExhausted(backend->CreatePhysical(2 * kGiB).status()));
  EXPECT_EQ(fake->count_prefix("cuMem"), before);
}

// --- Virtual memory: rules before calls
// -------------------------------------------

TEST(CudaBackendTest, VirtualMemoryRulesAreCheckedBeforeAnyDriverCall) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  const std::uint64_t g = backend->info().min_granularity;
  auto va = backend->ReserveAddress(8 * g, 0);
  ASSERT_TRUE(va.ok()) << va.status();
  auto h1 = backend->CreatePhysical(2 * g);
  auto h2 = backend->CreatePhysical(g);
  ASSERT_TRUE(h1.ok() && h2.ok());
  ASSERT_TRUE(backend->Map(*va, 2 * g, *h1).ok());
  ASSERT_TRUE(backend->Map(*va + 2 * g, g, *h2).ok());
  const int calls_before = fake->count_prefix("cuMem");

  const struct {
    const char* what;
    absl::Status status;
    const char* rule;
  } cases[] = {
      {"reserve 0", backend->ReserveAddress(0, 0).status(), "size is 0"},
      {"reserve partial granule", backend->ReserveAddress(g + 1, 0).status(),
       "not a multiple of the granularity"},
      {"reserve odd alignment", backend->ReserveAddress(g, 3 * g).status(),
       "not a power of two"},
      {"reserve small alignment", backend->ReserveAddress(g, g / 2).status(),
       "alignment is not a multiple"},
      {"create partial", backend->CreatePhysical(g / 2).status(),
       "not a multiple of the granularity"},
      {"map unknown handle", backend->Map(*va + 4 * g, g, 12345),
       "not a live handle"},
      {"map part of a handle", backend->Map(*va + 4 * g, g, *h1),
       "covers its whole handle"},
      {"map over a mapping", backend->Map(*va + g, 2 * g, *h1), "overlaps"},
      {"map outside", backend->Map(*va + 7 * g, 2 * g, *h1),
       "not inside one reservation"},
      {"map unaligned", backend->Map(*va + g / 2, g, *h2),
       "address is not a multiple"},
      {"unmap part", backend->Unmap(*va, g), "ends inside the mapping"},
      {"unmap from the middle", backend->Unmap(*va + g, g),
       "no mapping starts"},
      {"unmap past the end", backend->Unmap(*va, 4 * g), "nothing is mapped"},
      {"access a hole", backend->SetAccess(*va, 4 * g), "not mapped"},
      {"free a mapped reservation", backend->FreeAddress(*va, 8 * g),
       "still mapped"},
      {"free part of a reservation", backend->FreeAddress(*va, 4 * g),
       "not a whole reservation"},
      {"release unknown", backend->ReleasePhysical(777), "not a live handle"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_TRUE(absl::IsInvalidArgument(c.status)) << c.status;
    EXPECT_THAT(c.status.message(), HasSubstr(c.rule));
  }
  EXPECT_EQ(fake->count_prefix("cuMem"), calls_before)
      << "a broken rule reached the driver";

  // What follows the rules works: access across both mappings, unmap both at
  // once (one cuMemUnmap each), release, free.
  EXPECT_TRUE(backend->SetAccess(*va, 3 * g).ok());
  EXPECT_EQ(fake->count("cuMemSetAccess"), 1);
  EXPECT_TRUE(backend->Unmap(*va, 3 * g).ok());
  EXPECT_EQ(fake->count("cuMemUnmap"), 2);
  EXPECT_TRUE(backend->ReleasePhysical(*h1).ok());
  EXPECT_TRUE(backend->ReleasePhysical(*h2).ok());
  EXPECT_TRUE(backend->FreeAddress(*va, 8 * g).ok());
  EXPECT_EQ(fake->used_bytes(), 0u);
  EXPECT_TRUE(absl::IsInvalidArgument(backend->ReleasePhysical(*h1)));
}

TEST(CudaBackendTest, ReleasedHandleStaysMappedUntilUnmapped) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  const std::uint64_t g = backend->info().min_granularity;
  auto va = backend->ReserveAddress(2 * g, 4 * g);
  ASSERT_TRUE(va.ok());
  EXPECT_EQ(*va % (4 * g), 0u);
  auto h = backend->CreatePhysical(2 * g);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(backend->Map(*va, 2 * g, *h).ok());
  ASSERT_TRUE(backend->SetAccess(*va, 2 * g).ok());
  ASSERT_TRUE(backend->ReleasePhysical(*h).ok());
  EXPECT_EQ(fake->used_bytes(), 2 * g);
  // A released handle cannot be mapped again.
  auto va2 = backend->ReserveAddress(2 * g, 0);
  ASSERT_TRUE(va2.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(backend->Map(*va2, 2 * g, *h)));
  ASSERT_TRUE(backend->Unmap(*va, 2 * g).ok());
  EXPECT_EQ(fake->used_bytes(), 0u);
}

// --- Events, context, pool, cleanup
// ---------------------------------------------

TEST(CudaBackendTest, EventsReportPendingWork) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  auto event = backend->CreateEvent();
  ASSERT_TRUE(event.ok());
  fake->SetWorkPending(true);
  ASSERT_TRUE(backend->RecordEvent(*event, Stream(0x77)).ok());
  auto done = backend->QueryEvent(*event);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(*done);
  EXPECT_TRUE(backend->StreamWaitEvent(Stream(0x78), *event).ok());
  EXPECT_TRUE(backend->SynchronizeEvent(*event).ok());
  done = backend->QueryEvent(*event);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_TRUE(backend->DestroyEvent(*event).ok());
  // Stale handles never reach the driver.
  const int before = fake->count_prefix("cuEvent");
  EXPECT_TRUE(absl::IsInvalidArgument(backend->SynchronizeEvent(*event)));
  EXPECT_TRUE(absl::IsInvalidArgument(backend->DestroyEvent(*event)));
  EXPECT_EQ(fake->count_prefix("cuEvent"), before);
}

TEST(CudaBackendTest, CaptureStatusAndModeTranslate) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->info().capabilities.graph_capture);
  fake->SetCaptureStatus(0x10, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  fake->SetCaptureStatus(0x20, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  fake->SetCaptureStatus(0x30, 7);  // no CUstreamCaptureStatus
  for (const auto& [stream, capturing] :
       std::vector<std::pair<std::uintptr_t, bool>>{
           {0, false}, {0x10, true}, {0x20, true}, {0x40, false}}) {
    absl::StatusOr<bool> answer = backend->IsCapturing(Stream(stream));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, capturing) << stream;
  }
  absl::StatusOr<bool> unknown = backend->IsCapturing(Stream(0x30));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(unknown.status().message(), HasSubstr("capture status 7"));
  fake->FailNext("cuStreamIsCapturing", CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  absl::StatusOr<bool> failed = backend->IsCapturing(Stream());
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(),
              HasSubstr("cuStreamIsCapturing(stream 0) failed: "
                        "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"));

  // The driver's mode goes round: each exchange answers the one before.
  const std::vector<std::pair<CaptureMode, CaptureMode>> exchanges = {
      {CaptureMode::kRelaxed, CaptureMode::kGlobal},
      {CaptureMode::kThreadLocal, CaptureMode::kRelaxed},
      {CaptureMode::kGlobal, CaptureMode::kThreadLocal}};
  for (const auto& [set, previous] : exchanges) {
    absl::StatusOr<CaptureMode> answer = backend->ExchangeCaptureMode(set);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, previous);
  }
  fake->FailNext("cuThreadExchangeStreamCaptureMode", CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(absl::IsInvalidArgument(
      backend->ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
}

TEST(CudaBackendTest, WithoutTheCaptureEntryPointsCaptureIsOff) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuThreadExchangeStreamCaptureMode"};
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_FALSE((*api)->has_capture());
  // The group goes whole.
  EXPECT_EQ((*api)->cuStreamIsCapturing, nullptr);
  EXPECT_THAT(
      (*api)->missing,
      ::testing::ElementsAre(HasSubstr("cuThreadExchangeStreamCaptureMode")));
  auto backend = CudaBackend::Create(*api, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.graph_capture);
  EXPECT_TRUE(
      absl::IsUnimplemented((*backend)->IsCapturing(Stream()).status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      (*backend)->ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
}

TEST(CudaBackendTest, HostCopiesGoThroughTheDriver) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->info().capabilities.host_copy);
  absl::StatusOr<DeviceAddress> a = backend->Allocate(3 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<unsigned char> out(3 * kMiB), in(3 * kMiB, 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<unsigned char>(i * 13 + 5);
  }
  const CUcontext before = FakeCudaDriver::ThreadContext();
  EXPECT_TRUE(backend->CopyFromHost(*a, out.data(), out.size()).ok());
  EXPECT_TRUE(backend->CopyToHost(in.data(), *a, in.size()).ok());
  EXPECT_EQ(in, out);
  EXPECT_EQ(fake->count("cuMemcpyHtoD"), 1);
  EXPECT_EQ(fake->count("cuMemcpyDtoH"), 1);
  // The primary context was current for them (the fake refuses them
  // otherwise), and the thread's own context is back.
  EXPECT_EQ(FakeCudaDriver::ThreadContext(), before);

  // 0 bytes and a null host pointer never reach the driver.
  EXPECT_TRUE(backend->CopyToHost(nullptr, *a, 0).ok());
  const absl::Status null_host = backend->CopyFromHost(*a, nullptr, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(null_host)) << null_host;
  EXPECT_THAT(null_host.message(), HasSubstr("null"));
  EXPECT_EQ(fake->count_prefix("cuMemcpy"), 2);

  // Driver errors translate, naming the call, the address and the size.
  fake->FailNext("cuMemcpyDtoH", CUDA_ERROR_ILLEGAL_ADDRESS);
  const absl::Status illegal = backend->CopyToHost(in.data(), *a, 16);
  EXPECT_EQ(illegal.code(), absl::StatusCode::kInternal) << illegal;
  EXPECT_THAT(illegal.message(),
              AllOf(HasSubstr("cuMemcpyDtoH(" + absl::StrFormat("%#x", *a) +
                              ", 16 bytes) failed"),
                    HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS")));
  fake->FailNext("cuMemcpyHtoD", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(
      absl::IsResourceExhausted(backend->CopyFromHost(*a, out.data(), 16)));
  // The fake answers CUDA_ERROR_INVALID_VALUE for a range it did not hand
  // out, as the driver does.
  EXPECT_TRUE(absl::IsInvalidArgument(backend->CopyToHost(in.data(), 16, 16)));
  EXPECT_TRUE(backend->Free(*a).ok());
}

TEST(CudaBackendTest, WithoutTheCopyEntryPointsHostCopyIsOff) {
  FakeCudaOptions o = SmallDevice();
  o.missing_symbols = {"cuMemcpyHtoD"};
  auto fake = FakeCudaDriver::Create(o);
  auto api = fake->Api();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_FALSE((*api)->has_host_copy());
  // The group goes whole, and the missing one is noted.
  EXPECT_EQ((*api)->cuMemcpyDtoH, nullptr);
  EXPECT_THAT((*api)->missing,
              ::testing::ElementsAre(HasSubstr("cuMemcpyHtoD")));
  auto backend = CudaBackend::Create(*api, 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_FALSE((*backend)->info().capabilities.host_copy);
  EXPECT_TRUE((*backend)->info().capabilities.virtual_memory);
  unsigned char host[16] = {};
  const absl::Status to = (*backend)->CopyToHost(host, 0x1000, sizeof(host));
  EXPECT_TRUE(absl::IsUnimplemented(to)) << to;
  EXPECT_THAT(to.message(), HasSubstr("host_copy"));
  EXPECT_TRUE(absl::IsUnimplemented(
      (*backend)->CopyFromHost(0x1000, host, sizeof(host))));
  EXPECT_EQ(fake->count_prefix("cuMemcpy"), 0);
}

TEST(CudaBackendTest, EveryThreadGetsThePrimaryContext) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  // The fake refuses memory calls without the primary context current. A new
  // thread has no context; it has none again after the call.
  absl::StatusOr<DeviceAddress> from_thread;
  CUcontext after = FakeCudaDriver::PrimaryContext();
  std::thread([&] {
    from_thread = backend->Allocate(1 << 20);
    after = FakeCudaDriver::ThreadContext();
  }).join();
  ASSERT_TRUE(from_thread.ok()) << from_thread.status();
  EXPECT_EQ(after, nullptr);
  // A thread with the primary context current already: nothing is set.
  FakeCudaDriver::SetThreadContext(FakeCudaDriver::PrimaryContext());
  const int sets = fake->count("cuCtxSetCurrent");
  ASSERT_TRUE(backend->Allocate(256).ok());
  EXPECT_EQ(fake->count("cuCtxSetCurrent"), sets);
  EXPECT_EQ(FakeCudaDriver::ThreadContext(), FakeCudaDriver::PrimaryContext());
  EXPECT_TRUE(backend->Free(*from_thread).ok());
  FakeCudaDriver::SetThreadContext(nullptr);
}

// Every call runs with the backend's primary context current (the fake
// refuses memory and stream calls otherwise) and leaves the calling thread's
// own context current afterwards: a framework thread working on another
// device must not find itself moved to this one.
TEST(CudaBackendTest, CallsLeaveTheThreadsContextAsTheyFoundIt) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto api = fake->Api();
  ASSERT_TRUE(api.ok());
  for (CUcontext mine : {FakeCudaDriver::ForeignContext(), CUcontext{nullptr},
                         FakeCudaDriver::PrimaryContext()}) {
    SCOPED_TRACE(mine == nullptr ? "no context"
                 : mine == FakeCudaDriver::PrimaryContext()
                     ? "the primary context"
                     : "another context");
    FakeCudaDriver::SetThreadContext(mine);
    const auto kept = [&](absl::string_view step) {
      EXPECT_EQ(FakeCudaDriver::ThreadContext(), mine) << "after " << step;
    };
    {
      auto created = CudaBackend::Create(*api, 0);
      ASSERT_TRUE(created.ok()) << created.status();
      kept("Create");
      CudaBackend& b = **created;
      ASSERT_NO_FATAL_FAILURE(
          gpualloc::testing::CallEveryOperation(b, 4096, Stream(0x78), kept));
      // A failing call restores it too.
      fake->FailNext("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
      EXPECT_FALSE(b.Allocate(4096).ok());
      kept("a failed Allocate");
      ASSERT_TRUE(b.Allocate(4096).ok());  // left for the destructor
    }
    kept("destruction");
    EXPECT_EQ(fake->used_bytes(), 0u);
    EXPECT_EQ(fake->primary_context_refs(), 0);
  }
  FakeCudaDriver::SetThreadContext(nullptr);
}

TEST(CudaBackendTest, ContextIsPerThread) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  FakeCudaDriver::SetThreadContext(nullptr);
  CUcontext worker_after = nullptr;
  absl::StatusOr<DeviceAddress> a;
  std::thread([&] {
    FakeCudaDriver::SetThreadContext(FakeCudaDriver::ForeignContext());
    a = backend->Allocate(4096);
    worker_after = FakeCudaDriver::ThreadContext();
  }).join();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(worker_after, FakeCudaDriver::ForeignContext());
  EXPECT_EQ(FakeCudaDriver::ThreadContext(), nullptr);
  EXPECT_TRUE(backend->Free(*a).ok());
}

TEST(CudaBackendTest, PoolAttributesAndUsage) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  auto backend = MakeBackend(fake);
  ASSERT_NE(backend, nullptr);
  PoolOptions options;
  options.release_threshold = 256 * kMiB;
  options.reuse.opportunistic = false;
  ASSERT_TRUE(backend->ConfigurePool(options).ok());
  EXPECT_EQ(fake->pool_attribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD),
            256 * kMiB);
  EXPECT_EQ(
      fake->pool_attribute(CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES),
      1u);
  EXPECT_EQ(fake->pool_attribute(CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC),
            0u);
  EXPECT_EQ(
      fake->pool_attribute(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES),
      1u);
  EXPECT_EQ(fake->count("cuMemPoolCreate"), 1);

  auto a = backend->PoolAllocate(3 * kMiB, Stream(5));
  ASSERT_TRUE(a.ok()) << a.status();
  auto usage = backend->GetPoolUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used, 4 * kMiB);  // the fake's whole granules
  EXPECT_EQ(usage->reserved, 4 * kMiB);
  EXPECT_TRUE(absl::IsInvalidArgument(backend->PoolFree(*a + 256, Stream(5))));
  EXPECT_TRUE(absl::IsInvalidArgument(backend->Free(*a)))
      << "a pool block is not a plain allocation";
  ASSERT_TRUE(backend->PoolFree(*a, Stream(5)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(backend->PoolFree(*a, Stream(5))));
  ASSERT_TRUE(backend->PoolTrim(0).ok());
  usage = backend->GetPoolUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->reserved, 0u);
  EXPECT_EQ(usage->peak_reserved, 4 * kMiB);
  EXPECT_EQ(fake->count("cuMemPoolCreate"), 1);
}

TEST(CudaBackendTest, DestructionReturnsEverythingAndReleasesTheContext) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  {
    auto backend = MakeBackend(fake);
    ASSERT_NE(backend, nullptr);
    const std::uint64_t g = backend->info().min_granularity;
    ASSERT_TRUE(backend->Allocate(5 * kMiB).ok());
    auto va = backend->ReserveAddress(4 * g, 0);
    auto h = backend->CreatePhysical(g);
    ASSERT_TRUE(va.ok() && h.ok());
    ASSERT_TRUE(backend->Map(*va, g, *h).ok());
    ASSERT_TRUE(backend->CreateEvent().ok());
    ASSERT_TRUE(backend->PoolAllocate(kMiB, Stream()).ok());
    EXPECT_GT(fake->used_bytes(), 0u);
  }
  EXPECT_EQ(fake->used_bytes(), 0u);
  EXPECT_EQ(fake->live_mappings(), 0u);
  EXPECT_EQ(fake->live_reservations(), 0u);
  EXPECT_EQ(fake->live_events(), 0);
  EXPECT_EQ(fake->primary_context_refs(), 0);
}

TEST(CudaBackendTest, DestructionReleasesTheContextEvenWhenItCannotBeMade) {
  auto fake = FakeCudaDriver::Create(SmallDevice());
  {
    auto backend = MakeBackend(fake);
    ASSERT_NE(backend, nullptr);
    ASSERT_TRUE(backend->Allocate(kMiB).ok());
    EXPECT_EQ(fake->primary_context_refs(), 1);
    FakeCudaDriver::SetThreadContext(FakeCudaDriver::ForeignContext());
    fake->FailAlways("cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
  }
  fake->StopFailing("cuCtxSetCurrent");
  // The memory could not be returned without the context, but the retain is.
  EXPECT_EQ(fake->primary_context_refs(), 0);
  EXPECT_EQ(fake->count("cuMemFree"), 0);
  EXPECT_EQ(FakeCudaDriver::ThreadContext(), FakeCudaDriver::ForeignContext());
  FakeCudaDriver::SetThreadContext(nullptr);
}

// --- The ledger alone
// -------------------------------------------------------------

TEST(VmmLedgerTest, SetAccessMaySpanMappingsAndStartInside) {
  VmmLedger ledger(2 * kMiB);
  ledger.AddReservation(0x40000000, 16 * kMiB);
  ledger.AddHandle(1, 4 * kMiB);
  ledger.AddHandle(2, 2 * kMiB);
  ledger.AddMapping(0x40000000, 4 * kMiB, 1);
  ledger.AddMapping(0x40000000 + 4 * kMiB, 2 * kMiB, 2);
  EXPECT_TRUE(ledger.CheckSetAccess(0x40000000 + 2 * kMiB, 4 * kMiB).ok());
  EXPECT_FALSE(ledger.CheckSetAccess(0x40000000 + 2 * kMiB, 6 * kMiB).ok());
  auto both = ledger.CheckUnmap(0x40000000, 6 * kMiB);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->size(), 2u);
  EXPECT_TRUE(
      absl::IsInvalidArgument(ledger.CheckRelease(3)));  // never created
  EXPECT_TRUE(absl::IsInvalidArgument(
      ledger.CheckUnmap(~std::uint64_t{0} - 2 * kMiB + 1, 4 * kMiB).status()));
}

// --- The registry
// -----------------------------------------------------------------

TEST(CudaRegistryTest, BackendCudaReachesTheCudaBackend) {
  auto config = ResolveConfig("backend=cuda", MapEnvironment({}));
  ASSERT_TRUE(config.ok()) << config.status();
  auto backend = CreateBackend(*config, 0);
  if (backend.ok()) {  // a machine with a GPU
    EXPECT_EQ((*backend)->info().backend, "cuda");
    return;
  }
  EXPECT_TRUE(absl::IsUnavailable(backend.status())) << backend.status();
  if (!SharedCudaDriver().ok()) {
    EXPECT_THAT(
        backend.status().message(),
        AllOf(HasSubstr("libcuda.so.1"),
              HasSubstr(std::string(SharedCudaDriver().status().message()))));
  }
}

}  // namespace
}  // namespace gpualloc::cuda
