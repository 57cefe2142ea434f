// SPDX-License-Identifier: Apache-2.0
// tools/cuda/counter_check.cc: gpualloc-counter-check, tools/device-check.sh's
// leg for the ways the allocator can learn that a stream's work completed, on
// a real GPU (device 0):
//
//  1. The host time of each mechanism's calls, median of many, in
//     microseconds per call, next to the simulator's cost model for the
//     device's profile: cuEventRecord, cuEventQuery of a complete and of a
//     not-complete event, cuStreamWaitEvent, cuStreamWriteValue64, a load of
//     a counter (not a call), cuStreamWaitValue64, cuStreamQuery of an idle
//     and of a busy stream; and the backend calls the allocator makes
//     (CudaBackend::RecordEvent, QueryEvent, WriteCounter, WaitCounter: the
//     driver call, the backend's books and the context switch).
//  2. Ordering, through the backend's counters: a counter written
//     (WriteCounter) after a memset of 256 MiB queued behind a gate (a
//     stream waiting for a host-written value) is still 0 while the gate is
//     closed, becomes 1 once it opens, and once it reads 1 the memset's bytes
//     are there; a stream made to wait (WaitCounter) for a later value does
//     not run until that value is written.
//
// "Not complete" work is made without a kernel: a stream waits
// (cuStreamWaitValue64) for a value the host writes later into mapped
// page-locked memory, and everything queued behind the wait stays pending.
//
// Markdown on stdout. Without a CUDA device: "skipped: no CUDA device" and
// exit status 0. Exit status 1 when a check failed.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace {

using gpualloc::Backend;
using gpualloc::CounterBlock;
using gpualloc::SimOp;
using gpualloc::Stream;
using gpualloc::cuda::CudaBackend;
using gpualloc::cuda::CudaDriverApi;
using Clock = std::chrono::steady_clock;

constexpr int kDefaultReps = 2001;
// Queued operations between two synchronizations of a timed stream (well
// below any driver's queue depth).
constexpr int kSyncEvery = 64;
constexpr std::uint64_t kMemsetBytes = std::uint64_t{256} << 20;
constexpr auto kPatience = std::chrono::seconds(10);

// Where the timed loads go, so that they are not optimized away.
volatile std::uint64_t g_sink = 0;

// Driver calls the backend's table does not hold, by their exported names.
struct ExtraCalls {
  CUresult (*stream_create)(CUstream*, unsigned int) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*stream_query)(CUstream) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t,
                              CUstream) = nullptr;
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  bool ok() const {
    return stream_create && stream_destroy && stream_query &&
           stream_synchronize && memset_d8_async && memset_d8 &&
           ctx_synchronize;
  }
};

ExtraCalls LoadExtraCalls() {
  ExtraCalls c;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return c;
  const auto find = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(
        dlsym(lib, name));
  };
  find(c.stream_create, "cuStreamCreate");
  find(c.stream_destroy, "cuStreamDestroy_v2");
  find(c.stream_query, "cuStreamQuery");
  find(c.stream_synchronize, "cuStreamSynchronize");
  find(c.memset_d8_async, "cuMemsetD8Async");
  find(c.memset_d8, "cuMemsetD8_v2");
  find(c.ctx_synchronize, "cuCtxSynchronize");
  return c;
}

double MedianUs(std::vector<double> ns) {
  if (ns.empty()) return -1;
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2] / 1000.0;
}

double ElapsedNs(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

std::uint64_t Load(const std::uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

// The state the measurements share.
struct Check {
  Check(const CudaDriverApi& driver, const ExtraCalls& extra, CudaBackend& b,
        int repetitions)
      : d(driver), x(extra), backend(b), reps(repetitions) {}

  const CudaDriverApi& d;
  const ExtraCalls& x;
  CudaBackend& backend;
  int reps = kDefaultReps;
  std::vector<std::string> failures;
  std::vector<std::string> rows;  // Markdown table rows
  CUstream s1 = nullptr;
  CUstream s2 = nullptr;
  // Mapped page-locked memory of the check's own: [0] the gate, [1] the
  // timing counter.
  std::uint64_t* host = nullptr;
  CUdeviceptr device = 0;

  bool Ok(CUresult r, const char* call) {
    if (r == CUDA_SUCCESS) return true;
    failures.push_back(gpualloc::cuda::CudaError(d, call, r).ToString());
    return false;
  }
  bool Ok(const absl::Status& s, const char* call) {
    if (s.ok()) return true;
    failures.push_back(absl::StrCat(call, ": ", s.ToString()));
    return false;
  }
  void Row(const std::string& call, double us, double model_us,
           const std::string& note) {
    rows.push_back(absl::StrFormat(
        "| %s | %s | %s | %s |", call,
        us < 0 ? "n/a" : absl::StrFormat("%.3f", us),
        model_us < 0 ? "-" : absl::StrFormat("%.1f", model_us), note));
  }
  // Stores `value` into the gate, as the host would open it.
  void OpenGate(std::uint64_t value) {
    __atomic_store_n(&host[0], value, __ATOMIC_RELEASE);
  }
};

// The simulator's modeled host cost of `op` on the device's profile, in us
// (-1 when the model cannot be made).
double ModelUs(const CudaBackend& b, SimOp op) {
  gpualloc::SimOptions o;
  o.profile = std::string(b.profile_choice().profile->name);
  o.total_bytes = std::uint64_t{1} << 40;  // any size: only costs are read
  absl::StatusOr<std::shared_ptr<gpualloc::SimBackend>> sim =
      gpualloc::SimBackend::Create(o);
  return sim.ok() ? double((*sim)->CallCostNs(op, 0)) / 1000.0 : -1;
}

// Times `call` `reps` times (each sample one call), synchronizing `stream`
// every kSyncEvery calls outside the timing; the median in us.
template <typename Call>
double Time(Check& c, CUstream stream, Call call) {
  std::vector<double> ns;
  ns.reserve(c.reps);
  for (int i = 0; i < c.reps; ++i) {
    const Clock::time_point t0 = Clock::now();
    const bool ok = call(i);
    ns.push_back(ElapsedNs(t0));
    if (!ok) return -1;
    if (stream != nullptr && (i + 1) % kSyncEvery == 0) {
      if (!c.Ok(c.x.stream_synchronize(stream), "cuStreamSynchronize")) {
        return -1;
      }
    }
  }
  if (stream != nullptr)
    c.Ok(c.x.stream_synchronize(stream), "cuStreamSynchronize");
  return MedianUs(std::move(ns));
}

// Waits on the host until `done()`, at most kPatience; whether it happened.
template <typename Done>
bool Poll(Done done) {
  const Clock::time_point until = Clock::now() + kPatience;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

// The event calls; with `counters` (the device has 64-bit stream memory
// operations) also those behind a closed gate and the counter mechanism.
void TimeDriverCalls(Check& c, bool counters) {
  const CudaDriverApi& d = c.d;
  CUevent event = nullptr;
  if (!c.Ok(d.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
            "cuEventCreate")) {
    return;
  }
  const double record = Time(c, c.s1, [&](int) {
    return c.Ok(d.cuEventRecord(event, c.s1), "cuEventRecord");
  });
  c.Row("cuEventRecord", record, ModelUs(c.backend, SimOp::kRecordEvent),
        "idle stream");
  c.Ok(d.cuEventRecord(event, c.s1), "cuEventRecord");
  c.Ok(d.cuEventSynchronize(event), "cuEventSynchronize");
  const double query_done = Time(c, nullptr, [&](int) {
    return c.Ok(d.cuEventQuery(event), "cuEventQuery");
  });
  c.Row("cuEventQuery", query_done, ModelUs(c.backend, SimOp::kQueryEvent),
        "complete");
  const double wait_event = Time(c, c.s2, [&](int) {
    return c.Ok(d.cuStreamWaitEvent(c.s2, event, 0), "cuStreamWaitEvent");
  });
  c.Row("cuStreamWaitEvent", wait_event,
        ModelUs(c.backend, SimOp::kStreamWaitEvent), "event complete");
  const double stream_idle = Time(c, nullptr, [&](int) {
    return c.Ok(c.x.stream_query(c.s1), "cuStreamQuery");
  });
  c.Row("cuStreamQuery", stream_idle, -1, "idle stream");
  if (!counters) {
    c.Ok(d.cuEventDestroy(event), "cuEventDestroy");
    return;
  }

  // Behind a closed gate: an event recorded there is not complete, the
  // stream busy.
  c.OpenGate(0);
  const std::uint64_t gate = 1;
  if (c.Ok(
          d.cuStreamWaitValue64(c.s1, c.device, gate, CU_STREAM_WAIT_VALUE_GEQ),
          "cuStreamWaitValue64(gate)") &&
      c.Ok(d.cuEventRecord(event, c.s1), "cuEventRecord")) {
    const double query_pending = Time(c, nullptr, [&](int) {
      const CUresult r = d.cuEventQuery(event);
      if (r == CUDA_ERROR_NOT_READY) return true;
      c.failures.push_back(absl::StrCat(
          "cuEventQuery behind a closed gate answered ",
          gpualloc::cuda::CudaErrorName(d, r), ", not CUDA_ERROR_NOT_READY"));
      return false;
    });
    c.Row("cuEventQuery", query_pending, ModelUs(c.backend, SimOp::kQueryEvent),
          "not complete");
    const double stream_busy = Time(c, nullptr, [&](int) {
      const CUresult r = c.x.stream_query(c.s1);
      if (r == CUDA_ERROR_NOT_READY) return true;
      c.failures.push_back(absl::StrCat(
          "cuStreamQuery behind a closed gate answered ",
          gpualloc::cuda::CudaErrorName(d, r), ", not CUDA_ERROR_NOT_READY"));
      return false;
    });
    c.Row("cuStreamQuery", stream_busy, -1, "busy stream");
  }
  c.OpenGate(gate);
  c.Ok(c.x.stream_synchronize(c.s1), "cuStreamSynchronize");

  // The counter mechanism: a write per call, increasing; a wait for a value
  // already written (it does not hold the stream); a load.
  const CUdeviceptr counter = c.device + sizeof(std::uint64_t);
  const double write = Time(c, c.s1, [&](int i) {
    return c.Ok(d.cuStreamWriteValue64(c.s1, counter, i + 1,
                                       CU_STREAM_WRITE_VALUE_DEFAULT),
                "cuStreamWriteValue64");
  });
  c.Row("cuStreamWriteValue64", write, ModelUs(c.backend, SimOp::kWriteCounter),
        "idle stream");
  if (Load(&c.host[1]) != static_cast<std::uint64_t>(c.reps)) {
    c.failures.push_back(
        absl::StrCat("after ", c.reps,
                     " cuStreamWriteValue64 and a synchronization the "
                     "counter holds ",
                     Load(&c.host[1])));
  }
  const double wait_value = Time(c, c.s2, [&](int i) {
    return c.Ok(d.cuStreamWaitValue64(c.s2, counter, i % c.reps + 1,
                                      CU_STREAM_WAIT_VALUE_GEQ),
                "cuStreamWaitValue64");
  });
  c.Row("cuStreamWaitValue64", wait_value,
        ModelUs(c.backend, SimOp::kWaitCounter), "value already written");
  // Loads are too fast for one clock reading each: 1000 per sample.
  std::vector<double> loads;
  for (int i = 0; i < c.reps; ++i) {
    const Clock::time_point t0 = Clock::now();
    std::uint64_t sum = 0;
    for (int k = 0; k < 1000; ++k) sum += Load(&c.host[1]);
    loads.push_back(ElapsedNs(t0) / 1000.0);
    g_sink = g_sink + sum;
  }
  c.Row("counter load", MedianUs(std::move(loads)), 0,
        "acquire load of mapped page-locked memory, no call");
  c.Ok(d.cuEventDestroy(event), "cuEventDestroy");
}

void TimeBackendCalls(Check& c) {
  Backend& b = c.backend;
  const Stream s1 = Stream::FromHandle(c.s1);
  const Stream s2 = Stream::FromHandle(c.s2);
  absl::StatusOr<gpualloc::EventHandle> event = b.CreateEvent();
  if (!c.Ok(event.status(), "CreateEvent")) return;
  const double record = Time(c, c.s1, [&](int) {
    return c.Ok(b.RecordEvent(*event, s1), "RecordEvent");
  });
  c.Row("CudaBackend::RecordEvent", record,
        ModelUs(c.backend, SimOp::kRecordEvent), "idle stream");
  c.Ok(b.SynchronizeEvent(*event), "SynchronizeEvent");
  const double query = Time(c, nullptr, [&](int) {
    return c.Ok(b.QueryEvent(*event).status(), "QueryEvent");
  });
  c.Row("CudaBackend::QueryEvent", query,
        ModelUs(c.backend, SimOp::kQueryEvent), "complete");
  c.Ok(b.DestroyEvent(*event), "DestroyEvent");
  if (!b.info().capabilities.completion_counters) return;
  absl::StatusOr<CounterBlock> block = b.CreateCounters(1);
  if (!c.Ok(block.status(), "CreateCounters")) return;
  const double write = Time(c, c.s1, [&](int i) {
    return c.Ok(b.WriteCounter(block->handle, 0, i + 1, s1), "WriteCounter");
  });
  c.Row("CudaBackend::WriteCounter", write,
        ModelUs(c.backend, SimOp::kWriteCounter), "idle stream");
  const double wait = Time(c, c.s2, [&](int i) {
    return c.Ok(b.WaitCounter(block->handle, 0, i % c.reps + 1, s2),
                "WaitCounter");
  });
  c.Row("CudaBackend::WaitCounter", wait,
        ModelUs(c.backend, SimOp::kWaitCounter), "value already written");
  c.Ok(c.x.ctx_synchronize(), "cuCtxSynchronize");
  c.Ok(b.DestroyCounters(block->handle), "DestroyCounters");
}

// The ordering checks, through the backend's counters; a line each.
std::vector<std::string> CheckOrdering(Check& c) {
  std::vector<std::string> lines;
  Backend& b = c.backend;
  if (!b.info().capabilities.completion_counters) {
    lines.push_back("- ordering: skipped (completion_counters off)");
    return lines;
  }
  const CudaDriverApi& d = c.d;
  const Stream s1 = Stream::FromHandle(c.s1);
  const Stream s2 = Stream::FromHandle(c.s2);
  absl::StatusOr<CounterBlock> block = b.CreateCounters(1);
  if (!c.Ok(block.status(), "CreateCounters")) return lines;
  CUdeviceptr buffer = 0;
  if (!c.Ok(d.cuMemAlloc(&buffer, kMemsetBytes), "cuMemAlloc")) return lines;
  c.Ok(c.x.memset_d8(buffer, 0, kMemsetBytes), "cuMemsetD8");
  c.Ok(c.x.ctx_synchronize(), "cuCtxSynchronize");

  // s1: gate, memset, WriteCounter(1).
  c.OpenGate(0);
  const std::uint64_t* value = block->values;
  bool ok =
      c.Ok(d.cuStreamWaitValue64(c.s1, c.device, 1, CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue64(gate)") &&
      c.Ok(c.x.memset_d8_async(buffer, 0x5a, kMemsetBytes, c.s1),
           "cuMemsetD8Async") &&
      c.Ok(b.WriteCounter(block->handle, 0, 1, s1), "WriteCounter");
  // s2: waits for 2, which nobody has written yet (a device allows it; the
  // allocator never does it, and the simulator would refuse it).
  CUevent after_wait = nullptr;
  ok = ok && c.Ok(b.WaitCounter(block->handle, 0, 2, s2), "WaitCounter") &&
       c.Ok(d.cuEventCreate(&after_wait, CU_EVENT_DISABLE_TIMING),
            "cuEventCreate") &&
       c.Ok(d.cuEventRecord(after_wait, c.s2), "cuEventRecord");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t before = Load(value);
  lines.push_back(absl::StrFormat(
      "- a counter written after a memset of %d MiB behind a closed gate, "
      "20 ms later: %d (%s)",
      kMemsetBytes >> 20, before,
      before == 0 ? "ok" : "FAILED: written early"));
  if (before != 0) c.failures.push_back("the counter was written early");
  const Clock::time_point opened = Clock::now();
  c.OpenGate(1);
  const bool seen = ok && Poll([&] { return Load(value) == 1; });
  const double seen_us = ElapsedNs(opened) / 1000.0;
  // Seen: the memset is done. A synchronous copy on the legacy stream does
  // not wait for a non-blocking stream, so it shows the bytes as they are.
  std::vector<unsigned char> head(4096), tail(4096);
  const bool copied =
      seen &&
      c.Ok(d.cuMemcpyDtoH(head.data(), buffer, head.size()), "cuMemcpyDtoH") &&
      c.Ok(d.cuMemcpyDtoH(tail.data(), buffer + kMemsetBytes - tail.size(),
                          tail.size()),
           "cuMemcpyDtoH");
  const auto all = [](const std::vector<unsigned char>& v) {
    return std::all_of(v.begin(), v.end(),
                       [](unsigned char x) { return x == 0x5a; });
  };
  const bool bytes_there = copied && all(head) && all(tail);
  lines.push_back(absl::StrFormat(
      "- once the gate opened: the counter read 1 after %.1f us, and the "
      "memset's bytes were there: %s",
      seen_us,
      !seen         ? "FAILED (the counter never read 1)"
      : bytes_there ? "ok"
                    : "FAILED (the counter was seen before the work)"));
  if (!seen || !bytes_there) c.failures.push_back("counter ordering");

  // s2 waited for 2: still not run.
  const CUresult pending = after_wait != nullptr ? d.cuEventQuery(after_wait)
                                                 : CUDA_ERROR_INVALID_HANDLE;
  const bool held = pending == CUDA_ERROR_NOT_READY;
  c.Ok(b.WriteCounter(block->handle, 0, 2, s1), "WriteCounter");
  const bool released = after_wait != nullptr && Poll([&] {
                          return d.cuEventQuery(after_wait) == CUDA_SUCCESS;
                        });
  lines.push_back(absl::StrFormat(
      "- a stream waiting (WaitCounter) for 2: held while the counter was 1 "
      "(%s), ran once 2 was written (%s)",
      held ? "ok" : "FAILED", released ? "ok" : "FAILED"));
  if (!held || !released) c.failures.push_back("counter wait");
  c.OpenGate(1);
  c.Ok(c.x.ctx_synchronize(), "cuCtxSynchronize");
  if (after_wait != nullptr)
    c.Ok(d.cuEventDestroy(after_wait), "cuEventDestroy");
  c.Ok(d.cuMemFree(buffer), "cuMemFree");
  c.Ok(b.DestroyCounters(block->handle), "DestroyCounters");
  return lines;
}

int Run(int reps) {
  std::printf("## Completion counters and events\n\n");
  absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api =
      gpualloc::cuda::SharedCudaDriver();
  if (!api.ok()) {
    std::printf("- skipped: no CUDA device (%s)\n",
                std::string(api.status().message()).c_str());
    return 0;
  }
  absl::StatusOr<std::shared_ptr<CudaBackend>> made =
      CudaBackend::Create(*api, 0);
  if (!made.ok()) {
    std::printf("- %s: %s\n",
                absl::IsUnavailable(made.status()) ? "skipped: no CUDA device"
                                                   : "FAILED",
                std::string(made.status().message()).c_str());
    return absl::IsUnavailable(made.status()) ? 0 : 1;
  }
  const CudaDriverApi& d = **api;
  CudaBackend& backend = **made;
  for (const std::string& note : backend.notes()) {
    if (note.rfind("completion_counters", 0) == 0) {
      std::printf("- %s\n", note.c_str());
    }
  }
  const ExtraCalls x = LoadExtraCalls();
  if (!x.ok() || !d.has_host_copy()) {
    std::printf(
        "- FAILED: the driver lacks calls this check needs (cuStreamCreate, "
        "cuStreamDestroy_v2, cuStreamQuery, cuStreamSynchronize, "
        "cuMemsetD8Async, cuMemsetD8_v2, cuCtxSynchronize, cuMemcpyDtoH)\n");
    return 1;
  }
  Check c(d, x, backend, reps);
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (!c.Ok(d.cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !c.Ok(d.cuDevicePrimaryCtxRetain(&context, device),
            "cuDevicePrimaryCtxRetain") ||
      !c.Ok(d.cuCtxSetCurrent(context), "cuCtxSetCurrent")) {
    std::printf("- FAILED: %s\n", c.failures.front().c_str());
    return 1;
  }
  // The counter rows and the ordering checks need what the backend's
  // capability needs: mapped host memory and 64-bit stream memory operations.
  const bool counters = backend.info().capabilities.completion_counters;
  void* mapped = nullptr;
  bool ready =
      c.Ok(x.stream_create(&c.s1, CU_STREAM_NON_BLOCKING), "cuStreamCreate") &&
      c.Ok(x.stream_create(&c.s2, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  if (ready && counters) {
    ready = c.Ok(d.cuMemHostAlloc(
                     &mapped, 4096,
                     CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
                 "cuMemHostAlloc") &&
            c.Ok(d.cuMemHostGetDevicePointer(&c.device, mapped, 0),
                 "cuMemHostGetDevicePointer");
    if (ready) {
      c.host = static_cast<std::uint64_t*>(mapped);
      std::memset(mapped, 0, 4096);
    }
  }
  if (ready) {
    TimeDriverCalls(c, counters);
    TimeBackendCalls(c);
    const std::vector<std::string> lines = CheckOrdering(c);
    std::printf(
        "\nHost time per call, median of %d (us); the model column is the "
        "simulator's cost for the device's profile (0: not a call; -: not "
        "modeled).\n\n| call | host us | model us | case |\n|---|---:|---:|---|"
        "\n",
        c.reps);
    for (const std::string& row : c.rows) std::printf("%s\n", row.c_str());
    std::printf("\n");
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  }
  if (c.host != nullptr) c.OpenGate(~std::uint64_t{0} >> 1);
  if (x.ctx_synchronize != nullptr) x.ctx_synchronize();
  if (c.s1 != nullptr) x.stream_destroy(c.s1);
  if (c.s2 != nullptr) x.stream_destroy(c.s2);
  if (mapped != nullptr) d.cuMemFreeHost(mapped);
  d.cuDevicePrimaryCtxRelease(device);
  if (!c.failures.empty()) {
    std::printf("\nFailures:\n");
    for (const std::string& f : c.failures) std::printf("- %s\n", f.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = kDefaultReps;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: gpualloc-counter-check [--reps N]\n"
                   "Times events against completion counters on CUDA device "
                   "0 and checks a counter's ordering; without a device it "
                   "says so and exits 0.\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  return Run(reps);
}
