// SPDX-License-Identifier: Apache-2.0
// tools/cuda/device_bench_calls.cc: gpualloc-device-bench's second table: each
// virtual memory call, and cuMemAlloc / cuMemFree, timed on its own at 2 MiB,
// 20 MiB and 1 GiB next to the simulator's cost model for the same calls, and
// the ratio ten 2 MiB handles : one 20 MiB.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"
#include "tools/cuda/device_bench.h"

namespace gpualloc::device_bench {
namespace {

// The driver calls timed one by one, with the simulator's operation for each.
struct CallRow {
  const char* name;
  gpualloc::SimOp op;
};
constexpr CallRow kCallRows[] = {
    {"cuMemCreate", gpualloc::SimOp::kCreatePhysical},
    {"cuMemMap", gpualloc::SimOp::kMap},
    {"cuMemSetAccess", gpualloc::SimOp::kSetAccess},
    {"cuMemUnmap", gpualloc::SimOp::kUnmap},
    {"cuMemRelease", gpualloc::SimOp::kReleasePhysical},
    {"cuMemAlloc", gpualloc::SimOp::kAllocate},
    {"cuMemFree", gpualloc::SimOp::kFree}};
constexpr int kCalls = sizeof(kCallRows) / sizeof(kCallRows[0]);

// The simulator's cost model for the device's profile.
struct CostModel {
  absl::StatusOr<std::shared_ptr<gpualloc::SimBackend>> model;
  double Us(gpualloc::SimOp op, std::uint64_t bytes) const {
    return model.ok() ? double((*model)->CallCostNs(op, bytes)) / 1000.0 : -1.0;
  }
};

CostModel MakeCostModel(Bench& b) {
  gpualloc::SimOptions model_options;
  model_options.profile =
      std::string(b.backend->profile_choice().profile->name);
  model_options.total_bytes = 1024 * kGiB;  // any size: only costs are read
  CostModel m{gpualloc::SimBackend::Create(model_options)};
  if (!m.model.ok()) {
    b.errors.push_back(
        absl::StrCat("cost model: ", m.model.status().ToString()));
  }
  return m;
}

// The VMM calls of one repetition at `size`, each timed into t[0..4]; an
// error stops the repetition.
absl::Status TimeVmmCalls(const Bench& b, std::uint64_t size, double* t) {
  CudaBackend& backend = *b.backend;
  const gpualloc::DeviceAddress va = *b.va;
  Clock::time_point t0 = Clock::now();
  absl::StatusOr<gpualloc::PhysicalHandle> h = backend.CreatePhysical(size);
  t[0] = ElapsedNs(t0);
  if (!h.ok()) return h.status();
  absl::Status s;
  t0 = Clock::now();
  s = backend.Map(va, size, *h);
  t[1] = ElapsedNs(t0);
  if (s.ok()) {
    t0 = Clock::now();
    s = backend.SetAccess(va, size);
    t[2] = ElapsedNs(t0);
    t0 = Clock::now();
    const absl::Status u = backend.Unmap(va, size);
    t[3] = ElapsedNs(t0);
    if (s.ok()) s = u;
  }
  t0 = Clock::now();
  const absl::Status r = backend.ReleasePhysical(*h);
  t[4] = ElapsedNs(t0);
  if (s.ok()) s = r;
  return s;
}

// cuMemAlloc and cuMemFree of one repetition at `size`, timed into t[5..6].
std::string TimeAllocCalls(const Bench& b, std::uint64_t size, double* t) {
  const CudaDriverApi& d = b.d;
  CUdeviceptr p = 0;
  Clock::time_point t0 = Clock::now();
  CUresult r = d.cuMemAlloc(&p, size);
  t[5] = ElapsedNs(t0);
  if (r != CUDA_SUCCESS) {
    return gpualloc::cuda::CudaError(d, "cuMemAlloc", r).ToString();
  }
  t0 = Clock::now();
  r = d.cuMemFree(p);
  t[6] = ElapsedNs(t0);
  if (r != CUDA_SUCCESS) {
    return gpualloc::cuda::CudaError(d, "cuMemFree", r).ToString();
  }
  return "";
}

// Each call's median us at `size` (already rounded to the granularity; -1:
// not measured); an error goes to b.errors.
std::vector<double> MeasureCalls(Bench& b, std::uint64_t size) {
  std::vector<std::vector<double>> ns(kCalls);
  const int reps = RepsFor(b.args, size);
  std::string error;
  for (int i = -1; i < reps && error.empty(); ++i) {  // -1: warm-up
    double t[kCalls] = {};
    if (b.va.ok()) {
      const absl::Status s = TimeVmmCalls(b, size, t);
      if (!s.ok()) {
        error = s.ToString();
        break;
      }
    }
    error = TimeAllocCalls(b, size, t);
    if (!error.empty()) break;
    if (i < 0) continue;
    for (int c = b.va.ok() ? 0 : 5; c < kCalls; ++c) ns[c].push_back(t[c]);
  }
  if (!error.empty()) {
    b.errors.push_back(absl::StrCat("calls at ", Human(size), ": ", error));
  }
  std::vector<double> measured(kCalls, -1);
  for (int c = 0; c < kCalls; ++c) measured[c] = MedianUs(ns[c]);
  return measured;
}

// Ten 2 MiB handles vs one 20 MiB handle: create + map + set access, and
// cuMemMap alone. `measured` is by size (2 MiB, 20 MiB) and call.
std::string RatioLine(const std::vector<std::vector<double>>& measured,
                      const std::vector<std::uint64_t>& call_sizes,
                      const CostModel& model) {
  auto grow = [&](std::size_t z, bool use_model) {
    double sum = 0;
    for (int c = 0; c < 3; ++c) {
      const double us =
          use_model ? model.Us(kCallRows[c].op, call_sizes[z]) : measured[z][c];
      if (us < 0) return -1.0;
      sum += us;
    }
    return sum;
  };
  auto ratio = [&](bool use_model) {
    const double small = grow(0, use_model), large = grow(1, use_model);
    return small < 0 || large <= 0
               ? std::string("n/a")
               : absl::StrFormat("%.1fx", 10 * small / large);
  };
  auto map_ratio = [&](bool use_model) {
    const double small =
        use_model ? model.Us(kCallRows[1].op, 2 * kMiB) : measured[0][1];
    const double large =
        use_model ? model.Us(kCallRows[1].op, 20 * kMiB) : measured[1][1];
    return small < 0 || large <= 0
               ? std::string("n/a")
               : absl::StrFormat("%.1fx", 10 * small / large);
  };
  return absl::StrFormat(
      "- ten 2 MiB handles vs one 20 MiB: create+map+access %s measured, "
      "%s modeled; cuMemMap alone %s measured, %s modeled",
      ratio(false), ratio(true), map_ratio(false), map_ratio(true));
}

}  // namespace

CallTable TimeCalls(Bench& b) {
  CallTable table;
  const CostModel model = MakeCostModel(b);
  std::vector<std::uint64_t> call_sizes;
  for (std::uint64_t s : {2 * kMiB, 20 * kMiB, kGiB}) {
    if (s <= b.args.max_size) call_sizes.push_back(s);
  }
  // measured[size][call], median us (-1: not measured).
  std::vector<std::vector<double>> measured;
  for (std::uint64_t s : call_sizes) {
    measured.push_back(MeasureCalls(b, RoundUp(s, b.gran)));
  }
  std::string header = "| call |";
  std::string rule = "|---|";
  for (std::uint64_t size : call_sizes) {
    absl::StrAppend(&header, " ", Human(size), " measured | ", Human(size),
                    " model |");
    absl::StrAppend(&rule, "---:|---:|");
  }
  table.rows.push_back(header);
  table.rows.push_back(rule);
  for (int c = 0; c < kCalls; ++c) {
    std::string row = absl::StrCat("| ", kCallRows[c].name, " |");
    for (std::size_t z = 0; z < call_sizes.size(); ++z) {
      const std::uint64_t size = RoundUp(call_sizes[z], b.gran);
      absl::StrAppend(&row, " ", Cell(measured[z][c]), " | ",
                      Cell(model.Us(kCallRows[c].op, size)), " |");
    }
    table.rows.push_back(row);
  }
  if (call_sizes.size() >= 2 && call_sizes[0] == 2 * kMiB &&
      call_sizes[1] == 20 * kMiB) {
    table.ratio_line = RatioLine(measured, call_sizes, model);
  }
  return table;
}

}  // namespace gpualloc::device_bench
