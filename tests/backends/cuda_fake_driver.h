// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_fake_driver.h: a fake CUDA driver for the CUDA backend's
// tests on machines without a GPU.
//
// It serves every entry point the backend resolves, through a
// cuGetProcAddress-like resolver (so tests go through ResolveEntryPoints as
// the real loader does), records every call, keeps a small model of device
// memory (plain allocations, reservations, physical handles, mappings and
// access, one pool, events) and returns the CUresult a real driver would for
// misuse, or one a test chose (FailNext). It also serves IPC handles (a fake
// encoding carrying the fake process that made it: SetProcess switches the
// calling "process", and opening a handle in the process that made it is
// refused with CUDA_ERROR_INVALID_CONTEXT as the real driver does), physical
// memory exported as real file descriptors (memfds, so a test can check who
// owns and closes them; importing one gives a handle sharing the exporter's
// memory and bytes), page-locked host memory (real, malloc'd, page
// aligned, filled with 0xa5 as real memory is not zeroed) and the stream
// memory operations of completion counters (a mapped block has a device
// address of its own; cuStreamWriteValue64 stores into the host memory
// behind it at once, or, while work is pending, when that work completes;
// cuStreamWaitValue64 checks its arguments only). Fake addresses are numbers
// only;
// the bytes cuMemcpyHtoD writes behind them are kept per allocation, pool
// block or physical handle (fake_device_bytes.h) for cuMemcpyDtoH to read.
//
// The entry points are plain functions, so one fake at a time is "installed"
// (the newest one alive). Thread-safe.
#ifndef GPUALLOC_TESTS_CUDA_FAKE_DRIVER_H_
#define GPUALLOC_TESTS_CUDA_FAKE_DRIVER_H_

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_driver.h"
#include "tests/backends/fake_device_bytes.h"

namespace gpualloc::cuda::testing {

struct FakeCudaOptions {
  std::string name = "NVIDIA H200";
  int major = 9;
  int minor = 0;
  std::uint64_t total_bytes = std::uint64_t{143771} << 20;
  int device_count = 1;
  int driver_version = 12040;
  bool vmm_supported = true;    // the device attribute
  bool pools_supported = true;  // the device attribute
  std::uint64_t min_granularity = std::uint64_t{2} << 20;
  std::uint64_t recommended_granularity = std::uint64_t{2} << 20;
  CUresult init_result = CUDA_SUCCESS;
  // Entry points the resolver says the driver does not have.
  std::set<std::string> missing_symbols;
  // Whether the resolver knows cuGetErrorName's names.
  bool error_names = true;
  // CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING and
  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (or the
  // error reading the latter answers, as on a driver older than CUDA 10.2).
  bool unified_addressing = true;
  bool posix_fd_supported = true;
  CUresult posix_fd_attribute_result = CUDA_SUCCESS;
  // cuMemHostAlloc answers out of memory above this many bytes.
  std::uint64_t host_bytes = std::uint64_t{64} << 30;
  // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, and
  // CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (and its _V1, or the
  // error reading either answers).
  bool can_map_host_memory = true;
  bool stream_mem_ops_64 = true;
  CUresult stream_mem_ops_attribute_result = CUDA_SUCCESS;
};

class FakeCudaDriver {
 public:
  // One resolver request: the base name, version and flags asked for.
  struct Request {
    std::string symbol;
    int version = 0;
    cuuint64_t flags = 0;
  };

  // Creates and installs the fake; the newest fake alive serves the calls.
  static std::shared_ptr<FakeCudaDriver> Create(FakeCudaOptions options = {});
  ~FakeCudaDriver();

  // The resolver over the fake's entry points (records each request).
  ProcAddressResolver Resolver();
  // ResolveEntryPoints(Resolver()) into a table that keeps the fake alive.
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> Api();

  // The k-th call of `function` (base name, e.g. "cuMemMap") from now on
  // returns `result` without doing anything.
  void FailNext(const std::string& function, CUresult result, int k = 1);
  // Every call of `function` returns `result` until StopFailing(function).
  void FailAlways(const std::string& function, CUresult result);
  void StopFailing(const std::string& function);
  // While true, recorded events stay not ready until synchronized, and
  // counter writes (cuStreamWriteValue64) wait, queued, for the work before
  // them: they land when an event recorded after them on their stream is
  // synchronized, when the device synchronizes (cuMemFree, cuMemFreeHost) or
  // at CompletePendingWork.
  void SetWorkPending(bool pending);
  // Everything pending completes: every recorded event is ready and every
  // queued counter write lands, in queue order.
  void CompletePendingWork();
  // Counter writes queued and not landed.
  std::size_t pending_counter_writes() const;
  // cuMemHostAlloc blocks mapped for the device (DEVICEMAP) and not freed.
  std::size_t live_mapped_host_blocks() const;
  // The flags of the last cuStreamWriteValue64 and cuStreamWaitValue64 (~0u
  // before one).
  unsigned int last_write_flags() const;
  unsigned int last_wait_flags() const;
  // What cuStreamIsCapturing answers for `stream` (NONE until set). The
  // capture mode cuThreadExchangeStreamCaptureMode exchanges is per thread,
  // as in the driver.
  // The raw value (any int: a newer driver may answer values the headers
  // do not name).
  void SetCaptureStatus(std::uintptr_t stream, int status);

  // The fake process the following calls come from (0 until set). An IPC
  // handle opens only in a process other than the one that made it.
  void SetProcess(int process);

  std::vector<Request> requests() const;
  std::vector<std::string> calls() const;
  int count(const std::string& function) const;
  // Calls whose name starts with `prefix` ("cuMem").
  int count_prefix(const std::string& prefix) const;
  std::uint64_t used_bytes() const;
  int primary_context_refs() const;
  int live_events() const;
  std::size_t live_mappings() const;
  std::size_t live_reservations() const;
  // Physical handles alive (created or imported, not yet gone).
  std::size_t live_handles() const;
  // The requestedHandleTypes of the last cuMemCreate (-1 before one).
  int last_requested_handle_types() const;
  // Allocations opened through IPC handles and not closed.
  std::size_t live_opened() const;
  // cuMemHostAlloc blocks not freed, and the last call's flags.
  std::size_t live_host_blocks() const;
  unsigned int last_host_flags() const;
  // The last value set for a pool attribute (0 when never set).
  std::uint64_t pool_attribute(CUmemPool_attribute attribute) const;

  const FakeCudaOptions& options() const { return options_; }

  // The current context is per thread, as in the driver. Besides the primary
  // context the fake knows one other: ForeignContext() stands for whatever
  // the calling code had current (another device's context, a framework's
  // own). cuCtxSetCurrent accepts it; calls that need a context refuse it, so
  // a backend call made with it current fails. ThreadContext() and
  // SetThreadContext() read and set the calling thread's current context
  // without going through (or being recorded as) a driver call.
  static CUcontext PrimaryContext();
  static CUcontext ForeignContext();
  static CUcontext ThreadContext();
  static void SetThreadContext(CUcontext context);

  // The entry points' bodies (public for the trampolines in the .cc).
  CUresult Enter(const char* function);
  struct State;
  State& state() { return *state_; }
  absl::Mutex& mu() const { return mu_; }

 private:
  explicit FakeCudaDriver(FakeCudaOptions options);

  const FakeCudaOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<State> state_;
  std::weak_ptr<FakeCudaDriver> self_;
  CudaDriverApi api_;
};

}  // namespace gpualloc::cuda::testing

#endif  // GPUALLOC_TESTS_CUDA_FAKE_DRIVER_H_
