// SPDX-License-Identifier: Apache-2.0
// tools/replay/host_replay.cc: the host rows of a trace (host_alloc,
// host_free) replayed on a simulated device of their own (ReplayHost,
// replay.h), through the host allocator and with no host cache.
//
// The device rows are not allocated here (Replay does that, and its figures
// must not change with the host rows): each one still counts a step of the
// ops model and queues work on its stream, on a small scratch allocation of
// that stream, so that the streams a host buffer is recorded on have the
// work queued they have in the device replay.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/core/host_allocator.h"
#include "gpualloc/runtime/registry.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {
namespace {

// One way of serving the host rows.
class HostServer {
 public:
  virtual ~HostServer() = default;
  virtual absl::StatusOr<void*> Allocate(std::uint64_t bytes) = 0;
  // Work on `stream` uses the live buffer `p`.
  virtual absl::Status Used(void* p, Stream stream) = 0;
  virtual absl::Status Free(void* p) = 0;
  virtual std::uint64_t host_waits() const = 0;
  // A pass starts: the peaks below start again from now.
  virtual void StartPass() = 0;
  // Pinned bytes held at most, and handed out at most, since StartPass.
  virtual std::uint64_t peak_reserved() const = 0;
  virtual std::uint64_t peak_in_use() const = 0;
};

// The host allocator (CreateHostAllocator). Its statistics are read once a
// pass: GetStats asks the device about held blocks, which would change what
// is measured if it were read at every row.
class PoolServer : public HostServer {
 public:
  explicit PoolServer(std::unique_ptr<Allocator> pool)
      : pool_(std::move(pool)) {}
  absl::StatusOr<void*> Allocate(std::uint64_t bytes) override {
    return pool_->Allocate(bytes, kHostStream);
  }
  absl::Status Used(void* p, Stream stream) override {
    return pool_->RecordStream(p, stream);
  }
  absl::Status Free(void* p) override {
    return pool_->Deallocate(p, kHostStream);
  }
  std::uint64_t host_waits() const override {
    return pool_->GetStats().host_waits;
  }
  void StartPass() override { pool_->ResetPeakStats(); }
  std::uint64_t peak_reserved() const override {
    return pool_->GetStats().peak_bytes_reserved;
  }
  std::uint64_t peak_in_use() const override {
    return pool_->GetStats().peak_bytes_in_use;
  }

 private:
  std::unique_ptr<Allocator> pool_;
};

// No host cache: HostAllocate and HostFree for every row. HostFree
// synchronizes the device; a host wait is one made while work was queued.
class UncachedServer : public HostServer {
 public:
  explicit UncachedServer(std::shared_ptr<Backend> backend)
      : backend_(std::move(backend)),
        sim_(std::dynamic_pointer_cast<SimBackend>(backend_)) {}
  absl::StatusOr<void*> Allocate(std::uint64_t bytes) override {
    absl::StatusOr<void*> p = backend_->HostAllocate(bytes);
    if (p.ok()) {
      sizes_[*p] = bytes;
      in_use_ += bytes;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      peak_reserved_ = std::max(peak_reserved_, Held());
    }
    return p;
  }
  absl::Status Used(void*, Stream) override { return absl::OkStatus(); }
  absl::Status Free(void* p) override {
    const bool pending = sim_ != nullptr && sim_->pending_work() > 0;
    absl::Status s = backend_->HostFree(p);
    if (s.ok()) {
      host_waits_ += pending ? 1 : 0;
      in_use_ -= sizes_[p];
      sizes_.erase(p);
    }
    return s;
  }
  std::uint64_t host_waits() const override { return host_waits_; }
  void StartPass() override {
    peak_in_use_ = in_use_;
    peak_reserved_ = Held();
  }
  std::uint64_t peak_reserved() const override { return peak_reserved_; }
  std::uint64_t peak_in_use() const override { return peak_in_use_; }

 private:
  // The simulator's page-rounded bytes; the requested ones elsewhere.
  std::uint64_t Held() const {
    return sim_ != nullptr ? sim_->host_bytes_allocated() : in_use_;
  }

  std::shared_ptr<Backend> backend_;
  std::shared_ptr<SimBackend> sim_;
  std::map<void*, std::uint64_t> sizes_;
  std::uint64_t in_use_ = 0, peak_in_use_ = 0, peak_reserved_ = 0;
  std::uint64_t host_waits_ = 0;
};

// One run of the host rows on a fresh device.
class HostRun {
 public:
  HostRun(const Trace& trace, const ReplayOptions& options,
          std::shared_ptr<Backend> backend, HostServer& server)
      : trace_(trace),
        options_(options),
        backend_(std::move(backend)),
        sim_(std::dynamic_pointer_cast<SimBackend>(backend_)),
        server_(server) {}

  absl::StatusOr<HostFigures> Run();

 private:
  absl::Status HostOp(const HostTraceOp& op, std::uint64_t k);
  void DeviceOp(const TraceOp& op);
  void Step();
  void Before(std::uint64_t time_ns);
  absl::Status Timed(const std::function<absl::Status()>& call);

  const Trace& trace_;
  const ReplayOptions& options_;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<SimBackend> sim_;
  HostServer& server_;
  bool multi_stream_ = false;
  std::uint64_t every_ = 0, work_ns_ = 0, steps_ = 0, lag_ns_ = 0;
  std::map<std::uint64_t, DeviceAddress> scratch_;  // per stream
  std::vector<void*> ptrs_;
  std::vector<std::uint64_t> stream_of_;      // per host id
  std::vector<std::uint64_t> device_stream_;  // per device id
  std::uint64_t ops_ = 0;
  double ns_ = 0;
};

// The timestamp model's host: each row at its trace time, later by as much
// as waits have held the host up (replay_internal.h's HostClock).
void HostRun::Before(std::uint64_t time_ns) {
  if (work_ns_ == 0 || sim_ == nullptr) return;
  const std::uint64_t now = sim_->now_ns();
  const std::uint64_t at = time_ns + lag_ns_;
  if (at >= now) {
    sim_->AdvanceClock(at - now);
  } else {
    lag_ns_ = now - time_ns;
  }
}

// A step of the ops model: a device row or a drain free.
void HostRun::Step() {
  ++steps_;
  if (sim_ != nullptr && every_ != 0 && steps_ % every_ == 0) {
    sim_->CompleteAll();
  }
}

// A device row: work on its stream (a free on another stream than its
// allocation's: the freeing stream after the allocating one, as Replay's
// handover), and a step.
void HostRun::DeviceOp(const TraceOp& op) {
  Before(op.time_ns);
  if (multi_stream_) {
    if (op.kind == TraceOp::Kind::kAlloc) {
      device_stream_[op.id] = op.stream;
    } else if (op.stream != device_stream_[op.id]) {
      sim_->OrderStreams(Stream(op.stream), Stream(device_stream_[op.id]));
    }
    sim_->Use(Stream(op.stream), scratch_[op.stream], 256, work_ns_);
  }
  Step();
}

absl::Status HostRun::Timed(const std::function<absl::Status()>& call) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = call();
  ns_ += std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now() - start)
             .count();
  ++ops_;
  return s;
}

absl::Status HostRun::HostOp(const HostTraceOp& op, std::uint64_t k) {
  Before(op.time_ns);
  const std::uint64_t gid = k * trace_.num_host_allocs + op.id;
  const Stream stream(op.stream);
  if (op.kind == HostTraceOp::Kind::kAlloc) {
    absl::StatusOr<void*> p;
    if (absl::Status s = Timed([&] {
          p = server_.Allocate(op.size);
          return p.status();
        });
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(trace_.name, ": host allocation ", op.id,
                                 " of ", op.size, " bytes: ", s.message()));
    }
    ptrs_[gid] = *p;
    stream_of_[op.id] = op.stream;
    if (multi_stream_) {
      sim_->Use(stream, reinterpret_cast<std::uintptr_t>(*p), op.size,
                work_ns_);
    }
    if (absl::Status s = server_.Used(*p, stream); !s.ok()) return s;
  } else {
    void* p = ptrs_[gid];
    if (op.stream != stream_of_[op.id]) {
      // Used there too: after the work of the allocating stream.
      if (multi_stream_) {
        sim_->OrderStreams(stream, Stream(stream_of_[op.id]));
        sim_->Use(stream, reinterpret_cast<std::uintptr_t>(p), op.size,
                  work_ns_);
      }
      if (absl::Status s = server_.Used(p, stream); !s.ok()) return s;
    }
    if (absl::Status s = Timed([&] { return server_.Free(p); }); !s.ok()) {
      return s;
    }
    ptrs_[gid] = nullptr;
  }
  return absl::OkStatus();
}

absl::StatusOr<HostFigures> HostRun::Run() {
  multi_stream_ = sim_ != nullptr;
  const bool timed_model = options_.work_us > 0 && trace_.timed &&
                           trace_.num_streams > 1 && sim_ != nullptr;
  every_ = timed_model ? 0 : options_.complete_every;
  work_ns_ = timed_model ? options_.work_us * 1000 : 0;
  if (multi_stream_) {
    for (const TraceOp& op : trace_.ops) {
      if (scratch_.contains(op.stream)) continue;
      absl::StatusOr<DeviceAddress> a = backend_->Allocate(256);
      if (!a.ok()) return a.status();
      scratch_[op.stream] = *a;
    }
  }
  device_stream_.assign(trace_.num_allocs, 0);
  const std::uint64_t reps = options_.repeat;
  const bool drain = reps > 1;
  ptrs_.assign(reps * trace_.num_host_allocs, nullptr);
  stream_of_.assign(trace_.num_host_allocs, 0);
  HostFigures f;
  auto counts = [&](HostPassFigures* c) {
    if (sim_ != nullptr) {
      c->host_allocs = sim_->calls(SimOp::kHostAllocate);
      c->host_frees = sim_->calls(SimOp::kHostFree);
      c->modeled_ns = sim_->modeled_ns();
    }
    c->host_waits = server_.host_waits();
  };
  HostPassFigures before;
  counts(&before);
  for (std::uint64_t k = 0; k < reps; ++k) {
    server_.StartPass();
    std::size_t h = 0;
    const std::vector<HostTraceOp>& host = trace_.host_ops;
    for (std::size_t i = 0; i <= trace_.ops.size(); ++i) {
      for (; h < host.size() && host[h].before == i; ++h) {
        if (absl::Status s = HostOp(host[h], k); !s.ok()) return s;
      }
      if (i < trace_.ops.size()) DeviceOp(trace_.ops[i]);
    }
    if (drain) {
      // Replay's drain: what the pass left live freed on its stream.
      for (std::uint64_t d = trace_.num_frees; d < trace_.num_allocs; ++d) {
        Step();
      }
      for (std::uint64_t id = 0; id < trace_.num_host_allocs; ++id) {
        void* p = ptrs_[k * trace_.num_host_allocs + id];
        if (p == nullptr) continue;
        if (absl::Status s = Timed([&] { return server_.Free(p); }); !s.ok()) {
          return s;
        }
        ptrs_[k * trace_.num_host_allocs + id] = nullptr;
      }
    }
    HostPassFigures now;
    counts(&now);
    HostPassFigures pass;
    pass.host_allocs = now.host_allocs - before.host_allocs;
    pass.host_frees = now.host_frees - before.host_frees;
    pass.modeled_ns = now.modeled_ns - before.modeled_ns;
    pass.host_waits = now.host_waits - before.host_waits;
    pass.peak_bytes_reserved = server_.peak_reserved();
    f.repetitions.push_back(pass);
    before = now;
    f.peak_bytes_reserved =
        std::max(f.peak_bytes_reserved, pass.peak_bytes_reserved);
    f.peak_bytes_in_use = std::max(f.peak_bytes_in_use, server_.peak_in_use());
  }
  for (const HostPassFigures& p : f.repetitions) {
    f.host_allocs += p.host_allocs;
    f.host_frees += p.host_frees;
    f.modeled_ns += p.modeled_ns;
    f.host_waits += p.host_waits;
  }
  // What the trace left live goes back (untimed, after every figure was
  // read), so that the pool has nothing to report when it goes.
  for (void*& p : ptrs_) {
    if (p != nullptr) (void)server_.Free(p);
    p = nullptr;
  }
  if (sim_ != nullptr) {
    f.hazards = sim_->hazards();
    f.access_violations = sim_->access_violations();
  }
  f.ops = ops_;
  f.ns_per_op = ops_ == 0 ? 0 : ns_ / static_cast<double>(ops_);
  return f;
}

// The simulated machine's pinned memory (SimOptions::host_memory_bytes 0).
constexpr std::uint64_t kSimHostBytes = std::uint64_t{1} << 40;

// The host pool's options: those of the configuration it takes (host
// allocator.h), and as its limit the configuration's host_memory_limit, else
// on the simulator the simulated machine's pinned memory: not this
// machine's (a replay must not depend on where it runs), nor the device's
// limit.
Options HostOptions(const Config& config, const Backend& backend) {
  const Options& device = config.options;
  Options o;
  o.name = device.name;
  o.garbage_collection = device.garbage_collection;
  o.min_block_size = device.min_block_size;
  o.max_internal_fragmentation = device.max_internal_fragmentation;
  o.size_divisions = device.size_divisions;
  o.history = device.history;
  o.growth_granularity = device.growth_granularity;
  o.preallocate = false;
  o.expandable = Tristate::kOff;
  o.front_cache = 0;
  o.memory_limit = config.host_memory_limit;
  if (o.memory_limit == 0 &&
      dynamic_cast<const SimBackend*>(&backend) != nullptr) {
    o.memory_limit = kSimHostBytes;
  }
  return o;
}

// Peak live requested bytes of the host rows over one pass.
std::uint64_t HostPeakRequested(const Trace& trace) {
  std::uint64_t live = 0, peak = 0;
  for (const HostTraceOp& op : trace.host_ops) {
    if (op.kind == HostTraceOp::Kind::kAlloc) {
      live += op.size;
      peak = std::max(peak, live);
    } else {
      live -= op.size;
    }
  }
  return peak;
}

}  // namespace

absl::StatusOr<HostReplayResult> ReplayHost(const Trace& trace,
                                            const std::string& config_string,
                                            const ReplayOptions& options) {
  if (options.repeat == 0) {
    return absl::InvalidArgumentError("expected a repeat count of at least 1");
  }
  if (options.one_stream) {
    ReplayOptions merged = options;
    merged.one_stream = false;
    return ReplayHost(OneStream(trace), config_string, merged);
  }
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(config_string);
  if (!overrides.ok()) return overrides.status();
  if (!overrides->backend.has_value()) overrides->backend = BackendKind::kSim;
  absl::StatusOr<Config> config = ResolveConfig(*overrides, MapEnvironment({}));
  if (!config.ok()) return config.status();
  const SimClock clock =
      options.work_us > 0 && trace.timed && trace.num_streams > 1
          ? SimClock::kModeled
          : SimClock::kManual;
  HostReplayResult result;
  result.peak_bytes_requested = HostPeakRequested(trace);
  for (bool pool : {true, false}) {
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateBackend(*config, 0, clock);
    if (!backend.ok()) return backend.status();
    std::unique_ptr<HostServer> server;
    if (pool) {
      absl::StatusOr<std::unique_ptr<Allocator>> a =
          CreateHostAllocator(HostOptions(*config, **backend), *backend);
      if (!a.ok()) return a.status();
      server = std::make_unique<PoolServer>(std::move(*a));
    } else {
      server = std::make_unique<UncachedServer>(*backend);
    }
    absl::StatusOr<HostFigures> f =
        HostRun(trace, options, *backend, *server).Run();
    if (!f.ok()) return f.status();
    (pool ? result.pool : result.no_cache) = std::move(*f);
  }
  return result;
}

}  // namespace gpualloc::replay
