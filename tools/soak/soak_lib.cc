// SPDX-License-Identifier: Apache-2.0
// tools/soak/soak_lib.cc: the soak run and its shadow model.
#include "tools/soak/soak_lib.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "tools/cli.h"

namespace gpualloc::soak {
namespace {

// Every injected fault carries this text, so that an error it caused can be
// told from one the allocator made up.
constexpr absl::string_view kFaultMarker = "soak: injected fault";

// Alignments asked for now and then (0, the default, otherwise).
constexpr std::uint64_t kAlignments[] = {512, 4096, 65536,
                                         std::uint64_t{2} << 20};

absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

bool IsInjected(const absl::Status& s) {
  return absl::StrContains(s.message(), kFaultMarker);
}

// A generator per seed, purpose and stream count: the operations and the
// faults draw from separate ones, so that --fault-every does not change the
// sequence of operations.
std::mt19937_64 MakeRng(std::uint64_t seed, std::uint32_t purpose,
                        int streams) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed),
                    static_cast<std::uint32_t>(seed >> 32), purpose,
                    static_cast<std::uint32_t>(streams)};
  return std::mt19937_64(seq);
}

struct Live {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  Stream stream;              // the stream Allocate named
  std::vector<Stream> users;  // every stream that queued work on it
};

int OpenDescriptors() {
  int n = 0;
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
       !error && it != std::filesystem::directory_iterator();
       it.increment(error)) {
    ++n;
  }
  return n;
}

// The process that imports: its device and allocator (null when the mode
// does not share).
struct Importer {
  std::shared_ptr<SimBackend> sim;
  std::unique_ptr<Allocator> allocator;
};

class SoakRun {
 public:
  SoakRun(const SoakMode& mode, const SoakOptions& options,
          std::shared_ptr<SimBackend> sim, std::unique_ptr<Allocator> allocator,
          Importer importer, int descriptors)
      : options_(options),
        sim_(std::move(sim)),
        allocator_(std::move(allocator)),
        isim_(std::move(importer.sim)),
        importer_(std::move(importer.allocator)),
        sharing_(importer_ != nullptr),
        descriptors_at_start_(descriptors),
        rng_(MakeRng(options.seed, 0x50a4, options.streams)),
        fault_rng_(MakeRng(options.seed, 0xfa17, options.streams)),
        log2_max_(std::log2(static_cast<double>(options.max_size))) {
    result_.mode = mode.name;
    result_.streams = options.streams;
    result_.seed = options.seed;
    for (int i = 0; i < options.streams; ++i) {
      streams_.push_back(Stream(static_cast<std::uintptr_t>(i)));
    }
  }

  SoakResult Run() {
    const auto start = std::chrono::steady_clock::now();
    bool ok = true;
    for (std::uint64_t op = 0; ok && op < options_.ops; ++op) {
      if (options_.current_op != nullptr) *options_.current_op = op;
      ok = Step(op);
      CountFiredFaults(op);
      ok = ok && Check(op, /*validate=*/options_.validate_every != 0 &&
                               (op + 1) % options_.validate_every == 0);
      result_.ops = op + 1;
    }
    if (ok) ok = Finish();
    const auto stop = std::chrono::steady_clock::now();
    result_.seconds = std::chrono::duration<double>(stop - start).count();
    return result_;
  }

 private:
  bool Fail(std::uint64_t op, std::string what) {
    if (!result_.ok) return false;
    CountFiredFaults(op);
    result_.ok = false;
    result_.failed_op = op;
    result_.violation = std::move(what);
    if (!last_fault_.empty()) {
      absl::StrAppend(&result_.violation,
                      " (last injected fault: ", last_fault_, ")");
    }
    return false;
  }

  std::uint64_t Draw(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  Stream RandomStream() { return Revived(streams_[Draw(streams_.size())]); }
  // A stream about to be used: one the soak destroyed is made again (a new
  // stream that got the old handle, no order implied).
  Stream Revived(Stream s) {
    if (destroyed_.erase(s.handle) != 0) sim_->OrderStreams(s, s);
    return s;
  }

  // 1 B .. max_size, log-uniform.
  std::uint64_t DrawSize() {
    const double u = std::ldexp(static_cast<double>(rng_() >> 11), -53);
    const auto bytes = static_cast<std::uint64_t>(std::exp2(u * log2_max_));
    return std::clamp<std::uint64_t>(bytes, 1, options_.max_size);
  }

  // --- Phases -----------------------------------------------------------

  bool NewPhase(std::uint64_t op) {
    filling_ = !filling_;
    const std::uint64_t live = live_.size();
    const std::uint64_t lo = options_.min_live;
    const std::uint64_t hi = std::max(lo, options_.max_live);
    if (filling_) {
      const std::uint64_t from = std::clamp(live, lo, hi);
      target_ = from + Draw(hi - from + 1);
    } else {
      const std::uint64_t to = std::clamp(live, lo, hi);
      target_ = lo + Draw(to - lo + 1);
    }
    phase_end_ =
        op + std::max<std::uint64_t>(
                 1, options_.phase_ops / 2 + Draw(options_.phase_ops + 1));
    // Half of the phase changes return what is free to the device.
    if (op > 0 && Draw(2) == 0) {
      ++result_.trims;
      absl::Status s = allocator_->Trim();
      if (!s.ok()) {
        if (IsInjected(s)) {
          ++result_.failed_by_fault;
        } else {
          return Fail(op, absl::StrCat("Trim failed: ", s.ToString()));
        }
      }
    }
    return true;
  }

  // --- Fault injection --------------------------------------------------

  struct ArmedFault {
    bool active = false;
    std::uint64_t fires_at_call = 0;  // calls(op) once it has fired
  };

  // One device's armed faults.
  struct Faults {
    ArmedFault armed[kNumSimOps];
    int active = 0;
  };

  // Counts the armed faults that have fired; `op` is the operation they
  // fired in, for messages.
  void CountFiredFaults(std::uint64_t op) {
    CountFiredFaults(op, *sim_, faults_, "");
    if (sharing_) CountFiredFaults(op, *isim_, ifaults_, "the importer's ");
  }
  void CountFiredFaults(std::uint64_t op, SimBackend& sim, Faults& faults,
                        absl::string_view whose) {
    for (int i = 0; i < kNumSimOps && faults.active > 0; ++i) {
      ArmedFault& a = faults.armed[i];
      if (a.active && sim.calls(static_cast<SimOp>(i)) >= a.fires_at_call) {
        ++result_.faults_injected;
        a.active = false;
        --faults.active;
        last_fault_ = absl::StrFormat("%s%s in operation %d", whose,
                                      SimOpName(static_cast<SimOp>(i)), op);
      }
    }
  }

  void ArmFault(std::uint64_t op) {
    if (options_.fault_ops.empty()) return;
    CountFiredFaults(op);
    // With an importer, every other fault goes into its device.
    const bool importer = sharing_ && fault_rng_() % 2 == 0;
    static const std::vector<SimOp> kImporterOps = ImporterFaultOps();
    const std::vector<SimOp>& ops =
        importer ? kImporterOps : options_.fault_ops;
    SimBackend& sim = importer ? *isim_ : *sim_;
    Faults& faults = importer ? ifaults_ : faults_;
    const SimOp call = ops[fault_rng_() % ops.size()];
    const std::uint64_t k = 1 + fault_rng_() % 3;
    const std::string message =
        absl::StrCat(kFaultMarker, " into ", SimOpName(call));
    const absl::Status status = fault_rng_() % 2 == 0
                                    ? absl::ResourceExhaustedError(message)
                                    : absl::InternalError(message);
    sim.FailNthCall(call, k, status);
    ArmedFault& a = faults.armed[static_cast<int>(call)];
    if (!a.active) ++faults.active;
    a = {true, sim.calls(call) + k};
    ++result_.faults_armed;
  }

  // The soak's own event calls may meet an injected fault too: it fires once,
  // so the call is retried once.
  template <typename F>
  auto HarnessCall(F&& call) {
    auto r = call();
    if (!r.ok() && IsInjected(ToStatus(r))) {
      ++result_.harness_faults;
      r = call();
    }
    return r;
  }

  // Real code orders a second user after the earlier ones (it reads what they
  // wrote): an event on each earlier user, waited for by `s`.
  bool OrderAfter(std::uint64_t op, const Live& l, Stream s) {
    for (Stream u : l.users) {
      if (u == s) continue;
      if (destroyed_.contains(u.handle)) {
        // The program ordered its work before destroying the stream (an
        // event it kept); the simulator is told so without a call on it.
        sim_->OrderStreams(s, u);
        continue;
      }
      absl::StatusOr<EventHandle> e =
          HarnessCall([&] { return sim_->CreateEvent(); });
      absl::Status st = e.status();
      if (st.ok()) st = HarnessCall([&] { return sim_->RecordEvent(*e, u); });
      if (st.ok()) {
        st = HarnessCall([&] { return sim_->StreamWaitEvent(s, *e); });
      }
      if (e.ok()) {
        const absl::Status destroyed =
            HarnessCall([&] { return sim_->DestroyEvent(*e); });
        if (st.ok()) st = destroyed;
      }
      if (!st.ok()) {
        return Fail(op, absl::StrCat("the soak's own event call failed: ",
                                     st.ToString()));
      }
    }
    return true;
  }

  // --- Operations -------------------------------------------------------

  bool Step(std::uint64_t op) {
    if (op == phase_end_ && !NewPhase(op)) return false;
    if (options_.fault_every != 0 && (op + 1) % options_.fault_every == 0) {
      ArmFault(op);
    }
    const bool multi = streams_.size() > 1;
    const std::uint64_t r = Draw(100);
    if (multi && r < 10 && !live_.empty()) return RecordStreamOp(op);
    if (multi && r == 10 && Draw(8) == 0) return ReleaseStreamOp(op);
    if (r < (multi ? 15u : 5u)) return CompleteOp();
    if (sharing_ && r < (multi ? 20u : 10u)) return SharingOp(op);
    const bool below = live_.size() < target_;
    if (live_.empty() || Draw(100) < (below ? 70u : 30u)) return AllocOp(op);
    return FreeOp(op);
  }

  bool AllocOp(std::uint64_t op) {
    const std::uint64_t bytes = DrawSize();
    const std::uint64_t alignment =
        Draw(32) == 0 ? kAlignments[Draw(std::size(kAlignments))] : 0;
    const Stream s = RandomStream();
    absl::StatusOr<void*> p = allocator_->Allocate(bytes, s, alignment);
    if (!p.ok()) {
      if (IsInjected(p.status())) {
        ++result_.failed_by_fault;
      } else if (absl::IsResourceExhausted(p.status())) {
        ++result_.ooms;
      } else {
        return Fail(op, absl::StrFormat("Allocate(%d, stream %d, alignment "
                                        "%d) failed unexpectedly: %s",
                                        bytes, s.handle, alignment,
                                        p.status().ToString()));
      }
      return true;
    }
    ++result_.allocs;
    const auto address =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(*p));
    if (address == 0) return Fail(op, "Allocate returned null");
    if (alignment != 0 && address % alignment != 0) {
      return Fail(op,
                  absl::StrFormat("Allocate(%d, alignment %d) returned %#x, "
                                  "not aligned",
                                  bytes, alignment, address));
    }
    // No overlap with a live block: the next block starts at or after the
    // new one's end, the previous one ends at or before its start.
    auto next = blocks_.lower_bound(address);
    if (next != blocks_.end() && next->first < address + bytes) {
      return Fail(
          op, absl::StrFormat(
                  "Allocate(%d) returned [%#x, %#x), which overlaps "
                  "the live block [%#x, %#x)",
                  bytes, address, address + bytes, next->first, next->second));
    }
    if (next != blocks_.begin() && std::prev(next)->second > address) {
      return Fail(op, absl::StrFormat(
                          "Allocate(%d) returned [%#x, %#x), inside the live "
                          "block [%#x, %#x)",
                          bytes, address, address + bytes,
                          std::prev(next)->first, std::prev(next)->second));
    }
    blocks_.emplace_hint(next, address, address + bytes);
    requested_ += bytes;
    live_.push_back({address, bytes, s, {s}});
    sim_->Use(s, address, bytes);
    return true;
  }

  bool FreeOp(std::uint64_t op) {
    const std::size_t i = Draw(live_.size());
    Live l = std::move(live_[i]);
    live_[i] = std::move(live_.back());
    live_.pop_back();
    Stream stream = Revived(l.stream);
    const std::uint64_t n = streams_.size();
    if (n > 1 &&
        Draw(100) < static_cast<std::uint64_t>(options_.cross_free_percent)) {
      // Another stream than the allocation's. Half the time its work used
      // the block last (ordered after the earlier users), as when the freeing
      // stream is the last user; otherwise it is only named.
      stream = Revived(streams_[(l.stream.handle + 1 + Draw(n - 1)) % n]);
      ++result_.cross_frees;
      if (Draw(2) == 0) {
        if (!OrderAfter(op, l, stream)) return false;
        sim_->Use(stream, l.address, l.bytes);
      }
    }
    const auto exported = exported_.find(l.address);
    const std::uint64_t exported_before =
        exported != exported_.end() ? allocator_->GetStats().bytes_exported : 0;
    absl::Status s =
        allocator_->Deallocate(reinterpret_cast<void*>(l.address), stream);
    // A free the device refused (platform mode's Free) changes nothing: the
    // block is still live and counted, and the program frees it again.
    while (!s.ok() && IsInjected(s)) {
      ++result_.failed_by_fault;
      CountFiredFaults(op);
      const Stats st = allocator_->GetStats();
      if (!SettleHeld(op, st.bytes_held_for_importers)) return false;
      if (st.bytes_requested != requested_ + HeldRequested()) {
        return Fail(op, absl::StrFormat("a refused Deallocate(%#x) changed "
                                        "bytes_requested to %d (expected %d)",
                                        l.address, st.bytes_requested,
                                        requested_ + HeldRequested()));
      }
      s = allocator_->Deallocate(reinterpret_cast<void*>(l.address), stream);
    }
    if (!s.ok()) {
      return Fail(
          op, absl::StrFormat("Deallocate(%#x, stream %d) of a live "
                              "block of %d bytes failed: %s",
                              l.address, stream.handle, l.bytes, s.ToString()));
    }
    ++result_.frees;
    blocks_.erase(l.address);
    requested_ -= l.bytes;
    if (exported != exported_.end()) {
      // Open in an importer: held, its chunk leaving bytes_exported.
      // Otherwise the export is over and its description stale.
      if (OpenImports(l.address) > 0) {
        const std::uint64_t chunk =
            exported_before - allocator_->GetStats().bytes_exported;
        held_[l.address] = Held{l.bytes, chunk, exported->second};
        ++result_.held;
      } else {
        Stale(exported->second);
      }
      exported_.erase(exported);
    }
    return true;
  }

  // --- Sharing with another process ---------------------------------------

  bool SharingOp(std::uint64_t op) {
    const std::uint64_t r = Draw(20);
    if (r < 7) return ExportOp(op);
    if (r < 14) return ImportOp(op);
    return CloseOp(op);
  }

  bool ExportOp(std::uint64_t op) {
    if (live_.empty()) return true;
    const Live& l = live_[Draw(live_.size())];
    absl::StatusOr<std::string> d =
        allocator_->Export(reinterpret_cast<void*>(l.address));
    if (!d.ok()) {
      if (IsInjected(d.status())) {
        ++result_.failed_by_fault;
        return true;
      }
      return Fail(op, absl::StrFormat("Export(%#x) of a live block failed: %s",
                                      l.address, d.status().ToString()));
    }
    auto [it, inserted] = exported_.emplace(l.address, *d);
    if (!inserted && it->second != *d) {
      return Fail(op, absl::StrFormat("Export(%#x) again gave another "
                                      "description",
                                      l.address));
    }
    ++result_.exports;
    return true;
  }

  bool ImportOp(std::uint64_t op) {
    // Now and then a description whose export is over: refused.
    if (!stale_.empty() && Draw(6) == 0) {
      const std::string& d = stale_[Draw(stale_.size())];
      absl::StatusOr<ImportedBlock> b = importer_->Import(d);
      if (b.ok()) {
        return Fail(op, absl::StrFormat("a description whose export was over "
                                        "imported %d bytes at %p",
                                        b->bytes, b->ptr));
      }
      if (IsInjected(b.status())) {
        ++result_.failed_by_fault;
        return true;
      }
      if (!absl::StrContains(b.status().message(), "stale")) {
        return Fail(op, absl::StrCat("a stale description was refused for "
                                     "another reason: ",
                                     b.status().ToString()));
      }
      ++result_.stale_refused;
      return true;
    }
    // A live export, or a held block some importer still has open.
    const std::uint64_t n = exported_.size() + held_.size();
    if (n == 0) return true;
    std::uint64_t pick = Draw(n);
    std::uint64_t source = 0;
    const std::string* d = nullptr;
    for (const auto& [address, description] : exported_) {
      if (pick-- == 0) {
        source = address;
        d = &description;
        break;
      }
    }
    if (d == nullptr) {
      for (const auto& [address, h] : held_) {
        if (pick-- == 0) {
          if (OpenImports(address) == 0) return true;  // releasable: over
          source = address;
          d = &h.description;
          break;
        }
      }
    }
    absl::StatusOr<ImportedBlock> b = importer_->Import(*d);
    if (!b.ok()) {
      if (IsInjected(b.status())) {
        ++result_.failed_by_fault;
        return true;
      }
      return Fail(op, absl::StrFormat("Import of the block at %#x failed: %s",
                                      source, b.status().ToString()));
    }
    const auto ptr =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(b->ptr));
    if (imported_at_[ptr]++ == 0) imported_bytes_ += b->bytes;
    imports_.push_back({ptr, b->bytes, source});
    ++open_[source];
    ++result_.imports;
    return true;
  }

  bool CloseOp(std::uint64_t op) {
    if (imports_.empty()) return true;
    const std::size_t i = Draw(imports_.size());
    const Import imp = imports_[i];
    absl::Status s = importer_->CloseImport(reinterpret_cast<void*>(imp.ptr));
    if (!s.ok()) {
      if (IsInjected(s)) {  // still open: closed again later
        ++result_.failed_by_fault;
        return true;
      }
      return Fail(op, absl::StrFormat("CloseImport(%#x) failed: %s", imp.ptr,
                                      s.ToString()));
    }
    imports_[i] = imports_.back();
    imports_.pop_back();
    if (--imported_at_[imp.ptr] == 0) {
      imported_at_.erase(imp.ptr);
      imported_bytes_ -= imp.bytes;
    }
    if (--open_[imp.source] == 0) open_.erase(imp.source);
    ++result_.closes;
    return true;
  }

  int OpenImports(std::uint64_t source) const {
    const auto it = open_.find(source);
    return it == open_.end() ? 0 : it->second;
  }
  std::uint64_t HeldRequested() const {
    std::uint64_t n = 0;
    for (const auto& [address, h] : held_) n += h.requested;
    return n;
  }
  void Stale(const std::string& description) {
    // The newest ones: their descriptor numbers are the likeliest reused.
    if (stale_.size() == 64) stale_.erase(stale_.begin());
    stale_.push_back(description);
  }

  // The held blocks the allocator released since (every importer had closed
  // them), found from bytes_held_for_importers: gone from the shadow, their
  // descriptions stale.
  bool SettleHeld(std::uint64_t op, std::uint64_t held_now) {
    if (held_.empty() && held_now == 0) return true;
    std::uint64_t open_bytes = 0;
    std::vector<std::map<std::uint64_t, Held>::iterator> closed;
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (OpenImports(it->first) > 0) {
        open_bytes += it->second.chunk;
      } else {
        closed.push_back(it);
      }
    }
    // Find which of the closed ones are still held: all, none, or (a
    // release that failed) the subset whose chunks add up.
    std::uint64_t closed_bytes = 0;
    for (const auto& it : closed) closed_bytes += it->second.chunk;
    if (held_now == open_bytes + closed_bytes) return true;  // none released
    const std::size_t n = held_now == open_bytes ? 0 : closed.size();
    if (n > 16) {
      return Fail(op, absl::StrFormat(
                          "bytes_held_for_importers is %d: some of the %d held "
                          "blocks every importer closed were released, too "
                          "many to tell which",
                          held_now, closed.size()));
    }
    for (std::uint64_t mask = (std::uint64_t{1} << n) - 1;; --mask) {
      std::uint64_t sum = open_bytes;
      for (std::size_t i = 0; i < n; ++i) {
        if ((mask >> i) & 1) sum += closed[i]->second.chunk;
      }
      if (sum == held_now) {
        for (std::size_t i = 0; i < closed.size(); ++i) {
          if (i >= n || ((mask >> i) & 1) == 0) {
            Stale(closed[i]->second.description);
            held_.erase(closed[i]);
          }
        }
        return true;
      }
      if (mask == 0) break;
    }
    return Fail(
        op, absl::StrFormat("bytes_held_for_importers is %d, and the shadow's "
                            "held blocks (%d, %d of them closed by every "
                            "importer) add up to no such figure",
                            held_now, held_.size(), closed.size()));
  }

  bool RecordStreamOp(std::uint64_t op) {
    Live& l = live_[Draw(live_.size())];
    const Stream s = RandomStream();
    absl::Status st =
        allocator_->RecordStream(reinterpret_cast<void*>(l.address), s);
    if (!st.ok()) {
      return Fail(op, absl::StrFormat("RecordStream(%#x, stream %d) failed: %s",
                                      l.address, s.handle, st.ToString()));
    }
    ++result_.record_streams;
    if (!OrderAfter(op, l, s)) return false;
    sim_->Use(s, l.address, l.bytes);
    if (std::find(l.users.begin(), l.users.end(), s) == l.users.end()) {
      l.users.push_back(s);
    }
    return true;
  }

  // The program destroys a side stream (work queued on it still runs; live
  // blocks it allocated or used live on): ReleaseStream first, then the
  // simulator fails and counts any later call naming it (Check) until the
  // soak uses the handle again (Revived: a new stream).
  bool ReleaseStreamOp(std::uint64_t op) {
    const Stream s = streams_[1 + Draw(streams_.size() - 1)];
    if (destroyed_.contains(s.handle)) return true;
    absl::Status st = allocator_->ReleaseStream(s);
    if (!st.ok()) {
      if (IsInjected(st)) {  // nothing changed: the stream lives on
        ++result_.failed_by_fault;
        return true;
      }
      return Fail(op, absl::StrFormat("ReleaseStream(stream %d) failed: %s",
                                      s.handle, st.ToString()));
    }
    sim_->DestroyStream(s);
    destroyed_.insert(s.handle);
    ++result_.streams_released;
    return true;
  }

  bool CompleteOp() {
    ++result_.completions;
    if (Draw(4) == 0) {
      sim_->CompleteAll();
    } else {
      sim_->CompleteStream(RandomStream());
    }
    return true;
  }

  // --- Checks -----------------------------------------------------------

  bool Check(std::uint64_t op, bool validate) {
    if (const std::uint64_t n = sim_->calls_on_destroyed_streams(); n != 0) {
      return Fail(op, absl::StrFormat("%d backend calls named a stream after "
                                      "its ReleaseStream",
                                      n));
    }
    if (const std::uint64_t h = sim_->hazards(); h != 0) {
      result_.hazards = h;
      std::vector<SimHazard> log = sim_->hazard_log();
      return Fail(op, log.empty() ? absl::StrCat(h, " hazards")
                                  : log.front().ToString());
    }
    if (const std::uint64_t v = sim_->access_violations(); v != 0) {
      result_.access_violations = v;
      std::vector<SimHazard> log = sim_->access_violation_log();
      return Fail(op, log.empty() ? absl::StrCat(v, " access violations")
                                  : log.front().ToString());
    }
    // (An async allocator's reserved figure is the pool's usage as last
    // read: compared with the device's only when this read worked.)
    const std::uint64_t usage_failures =
        sim_->failed_calls(SimOp::kGetPoolUsage);
    const Stats stats = allocator_->GetStats();
    const bool reserved_fresh =
        sim_->failed_calls(SimOp::kGetPoolUsage) == usage_failures;
    // Held blocks (freed, open in an importer) are still allocated there.
    if (!SettleHeld(op, stats.bytes_held_for_importers)) return false;
    if (stats.bytes_requested != requested_ + HeldRequested()) {
      return Fail(op, absl::StrFormat(
                          "bytes_requested is %d, the live blocks asked for %d "
                          "(%d blocks) and the held ones %d (%d blocks)",
                          stats.bytes_requested, requested_, live_.size(),
                          HeldRequested(), held_.size()));
    }
    if (sharing_) {
      const Stats imported = importer_->GetStats();
      if (imported.bytes_imported != imported_bytes_) {
        return Fail(op, absl::StrFormat("the importer's bytes_imported is %d, "
                                        "its open imports hold %d (%d)",
                                        imported.bytes_imported,
                                        imported_bytes_, imports_.size()));
      }
      if (validate) {
        absl::Status v = importer_->Validate();
        if (!v.ok()) {
          return Fail(op,
                      absl::StrCat("the importer's Validate: ", v.ToString()));
        }
        if (isim_->bytes_held() != imported.bytes_reserved) {
          return Fail(op, absl::StrFormat(
                              "the importer's device holds %d bytes, its "
                              "allocator counts %d reserved (imported memory "
                              "is the exporter's)",
                              isim_->bytes_held(), imported.bytes_reserved));
        }
      }
    }
    if (stats.bytes_in_use < stats.bytes_requested) {
      return Fail(op,
                  absl::StrFormat("bytes_in_use %d < bytes_requested %d",
                                  stats.bytes_in_use, stats.bytes_requested));
    }
    result_.peak_live =
        std::max<std::uint64_t>(result_.peak_live, live_.size());
    result_.peak_bytes_requested =
        std::max(result_.peak_bytes_requested, requested_);
    if (validate) {
      ++result_.validator_runs;
      absl::Status v = allocator_->Validate();
      if (!v.ok()) {
        return Fail(op, absl::StrCat("Validate: ", v.ToString()));
      }
      // Nothing lost or uncounted: what the device holds is what the
      // allocator says it reserved.
      if (reserved_fresh && sim_->bytes_held() != stats.bytes_reserved) {
        return Fail(op, absl::StrFormat(
                            "the device holds %d bytes, but the allocator "
                            "counts %d reserved (%d of them release pending)",
                            sim_->bytes_held(), stats.bytes_reserved,
                            stats.bytes_release_pending));
      }
      result_.peak_release_pending =
          std::max(result_.peak_release_pending, stats.bytes_release_pending);
    }
    return true;
  }

  // Frees every live block on its allocation stream with the faults off; then
  // nothing may stay in use, and the device must get all its memory back.
  bool Finish() {
    const std::uint64_t op = options_.ops;
    if (options_.current_op != nullptr) *options_.current_op = op;
    sim_->ClearFaults();
    faults_ = Faults{};
    if (sharing_) {
      isim_->ClearFaults();
      ifaults_ = Faults{};
      // Every import closed: the held blocks go back at the next call.
      while (!imports_.empty()) {
        if (!CloseOp(op)) return false;
      }
    }
    while (!live_.empty()) {
      const Live l = std::move(live_.back());
      live_.pop_back();
      absl::Status s = allocator_->Deallocate(
          reinterpret_cast<void*>(l.address), Revived(l.stream));
      if (!s.ok()) {
        return Fail(op,
                    absl::StrFormat("final Deallocate(%#x, stream %d) of "
                                    "a live block failed: %s",
                                    l.address, l.stream.handle, s.ToString()));
      }
      ++result_.frees;
      blocks_.erase(l.address);
      requested_ -= l.bytes;
    }
    sim_->CompleteAll();
    if (!Check(op, /*validate=*/true)) return false;
    Stats stats = allocator_->GetStats();
    if (stats.bytes_in_use != 0) {
      return Fail(op, absl::StrFormat("every block freed, but bytes_in_use is "
                                      "%d (lost bytes)",
                                      stats.bytes_in_use));
    }
    absl::Status trimmed = allocator_->Trim();
    if (!trimmed.ok()) {
      return Fail(op, absl::StrCat("final Trim failed: ", trimmed.ToString()));
    }
    if (!Check(op, /*validate=*/true)) return false;
    stats = allocator_->GetStats();
    if (stats.bytes_held_for_importers != 0 || !held_.empty()) {
      return Fail(op, absl::StrFormat("every import closed and Trim made, but "
                                      "%d bytes stay held for importers",
                                      stats.bytes_held_for_importers));
    }
    result_.events_recorded = stats.events_recorded;
    if (sharing_) {
      importer_.reset();
      if (isim_->bytes_allocated() != 0 || isim_->physical_bytes() != 0 ||
          isim_->mapped_bytes() != 0 || isim_->reserved_address_bytes() != 0) {
        return Fail(
            op, absl::StrFormat(
                    "after destroying the importer its device still "
                    "holds memory: allocated %d, physical %d, mapped "
                    "%d, reserved address %d",
                    isim_->bytes_allocated(), isim_->physical_bytes(),
                    isim_->mapped_bytes(), isim_->reserved_address_bytes()));
      }
    }
    allocator_.reset();
    // The allocator is gone: the device must have all its memory back.
    absl::StatusOr<std::uint64_t> free_bytes = sim_->FreeBytes();
    if (!free_bytes.ok() || *free_bytes != sim_->info().total_bytes ||
        sim_->bytes_allocated() != 0 || sim_->physical_bytes() != 0 ||
        sim_->mapped_bytes() != 0 || sim_->reserved_address_bytes() != 0) {
      return Fail(
          op, absl::StrFormat("after destroying the allocator the device still "
                              "holds memory: free %s of %d, allocated %d, "
                              "physical %d, mapped %d, reserved address %d",
                              free_bytes.ok() ? absl::StrCat(*free_bytes)
                                              : free_bytes.status().ToString(),
                              sim_->info().total_bytes, sim_->bytes_allocated(),
                              sim_->physical_bytes(), sim_->mapped_bytes(),
                              sim_->reserved_address_bytes()));
    }
    if (sim_->live_events() != 0) {
      return Fail(op, absl::StrFormat("after destroying the allocator %d "
                                      "events are still alive",
                                      sim_->live_events()));
    }
    // (The simulators live on with the run: their own descriptors count.)
    if (const int fds = OpenDescriptors(); fds != descriptors_at_start_) {
      return Fail(op, absl::StrFormat("the process has %d open descriptors, "
                                      "%d when the run began (leaked or "
                                      "closed twice)",
                                      fds, descriptors_at_start_));
    }
    return true;
  }

  const SoakOptions options_;
  std::shared_ptr<SimBackend> sim_;
  std::unique_ptr<Allocator> allocator_;
  // The importing process (null unless the mode shares).
  std::shared_ptr<SimBackend> isim_;
  std::unique_ptr<Allocator> importer_;
  const bool sharing_;
  const int descriptors_at_start_;
  std::mt19937_64 rng_;
  std::mt19937_64 fault_rng_;
  const double log2_max_;
  std::vector<Stream> streams_;
  absl::flat_hash_set<std::uintptr_t> destroyed_;  // released, not yet reused
  SoakResult result_;

  std::vector<Live> live_;
  // Live blocks by address: start -> end.
  std::map<std::uint64_t, std::uint64_t> blocks_;
  std::uint64_t requested_ = 0;
  bool filling_ = false;
  std::uint64_t target_ = 0;
  std::uint64_t phase_end_ = 0;
  Faults faults_;   // the exporter's device
  Faults ifaults_;  // the importer's
  // Sharing: live exported blocks (address -> description), freed ones held
  // for importers, the importer's open imports, the opens per exported
  // block, and descriptions whose export is over (the newest 64).
  struct Held {
    std::uint64_t requested = 0;
    std::uint64_t chunk = 0;  // what it counts in bytes_held_for_importers
    std::string description;
  };
  struct Import {
    std::uint64_t ptr = 0;
    std::uint64_t bytes = 0;
    std::uint64_t source = 0;  // the exporter's block
  };
  std::map<std::uint64_t, std::string> exported_;
  std::map<std::uint64_t, Held> held_;
  std::vector<Import> imports_;
  absl::flat_hash_map<std::uint64_t, int> open_;
  absl::flat_hash_map<std::uint64_t, int> imported_at_;  // ptr -> imports
  std::uint64_t imported_bytes_ = 0;
  std::vector<std::string> stale_;
  std::string last_fault_;  // the latest fault that fired, for messages
};

}  // namespace

std::vector<SimOp> DefaultFaultOps() {
  return {SimOp::kAllocate,        SimOp::kPoolAllocate, SimOp::kMap,
          SimOp::kCreatePhysical,  SimOp::kCreateEvent,  SimOp::kRecordEvent,
          SimOp::kQueryEvent,      SimOp::kSetAccess,    SimOp::kUnmap,
          SimOp::kReleasePhysical, SimOp::kGetIpcHandle, SimOp::kExportMapping};
}

std::vector<SimOp> ImporterFaultOps() {
  return {SimOp::kOpenIpcHandle,
          SimOp::kCloseIpcHandle,
          SimOp::kImportPhysical,
          SimOp::kReserveAddress,
          SimOp::kMap,
          SimOp::kSetAccess,
          SimOp::kReleasePhysical,
          SimOp::kUnmap,
          SimOp::kFreeAddress};
}

absl::StatusOr<std::vector<SimOp>> ParseFaultOps(absl::string_view list) {
  std::vector<SimOp> ops;
  if (list.empty()) return ops;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    bool found = false;
    for (int i = 0; i < kNumSimOps && !found; ++i) {
      if (SimOpName(static_cast<SimOp>(i)) == name) {
        ops.push_back(static_cast<SimOp>(i));
        found = true;
      }
    }
    if (!found) {
      std::vector<std::string> names;
      for (int i = 0; i < kNumSimOps; ++i) {
        names.emplace_back(SimOpName(static_cast<SimOp>(i)));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown backend call ", cli::Quote(name),
                       "; calls: ", absl::StrJoin(names, ", ")));
    }
  }
  return ops;
}

std::string FaultOpsString(const std::vector<SimOp>& ops) {
  return absl::StrJoin(ops, ",", [](std::string* out, SimOp op) {
    absl::StrAppend(out, SimOpName(op));
  });
}

const std::vector<SoakMode>& AllModes() {
  static const auto* const modes = new std::vector<SoakMode>{
      {"bfc-expandable", "allocator=bfc,preallocate=false,expandable=true"},
      {"bfc-regions", "allocator=bfc,preallocate=false,expandable=false"},
      {"bfc-prealloc", "allocator=bfc,preallocate=true"},
      {"platform", "allocator=platform"},
      {"async", "allocator=async"},
  };
  return *modes;
}

absl::StatusOr<SoakMode> FindMode(absl::string_view name) {
  std::vector<std::string> names;
  for (const SoakMode& m : AllModes()) {
    if (m.name == name) return m;
    names.push_back(m.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown mode ", cli::Quote(name),
                   "; modes: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<SoakResult> RunSoak(const SoakMode& mode,
                                   const SoakOptions& options) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError("streams must be at least 1");
  }
  if (options.max_size < 1) {
    return absl::InvalidArgumentError("max_size must be at least 1");
  }
  if (options.cross_free_percent < 0 || options.cross_free_percent > 100) {
    return absl::InvalidArgumentError("cross_free_percent must be 0..100");
  }
  // An empty environment: a soak must not depend on the caller's GPUALLOC_*
  // variables, or the same command could run differently.
  const std::string config_string =
      absl::StrCat(mode.config, mode.config.empty() ? "" : ",",
                   "backend=sim,device_memory=", options.device_memory);
  absl::StatusOr<Config> config =
      ResolveConfig(config_string, MapEnvironment({}));
  if (!config.ok()) return config.status();
  const int descriptors = OpenDescriptors();
  const auto make = [&]() -> absl::StatusOr<Importer> {
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateBackend(*config, 0);
    if (!backend.ok()) return backend.status();
    Importer p;
    p.sim = std::dynamic_pointer_cast<SimBackend>(*backend);
    if (p.sim == nullptr) {
      return absl::InternalError("backend=sim did not give a simulator");
    }
    absl::StatusOr<std::unique_ptr<Allocator>> allocator =
        CreateAllocator(config->options, p.sim);
    if (!allocator.ok()) return allocator.status();
    p.allocator = *std::move(allocator);
    return p;
  };
  absl::StatusOr<Importer> exporter = make();
  if (!exporter.ok()) return exporter.status();
  // A second simulated device and allocator stand for the process that
  // imports (the async mode does not share: its pool owns its memory).
  Importer importer;
  if (config->options.mode != AllocatorMode::kAsync) {
    absl::StatusOr<Importer> made = make();
    if (!made.ok()) return made.status();
    importer = *std::move(made);
  }
  SoakRun run(mode, options, std::move(exporter->sim),
              std::move(exporter->allocator), std::move(importer), descriptors);
  return run.Run();
}

ReplayParts ReplayCommandParts(absl::string_view mode, int streams,
                               const SoakOptions& options) {
  ReplayParts parts;
  parts.before_ops =
      absl::StrFormat("gpualloc-soak --seed %d --modes %s --streams %d --ops ",
                      options.seed, mode, streams);
  parts.after_ops = absl::StrFormat(
      " --max-size %d --device-memory %d --cross-free-percent %d "
      "--fault-every %d --fault-ops '%s' --phase-ops %d --min-live %d "
      "--max-live %d --validate-every 1",
      options.max_size, options.device_memory, options.cross_free_percent,
      options.fault_every, FaultOpsString(options.fault_ops), options.phase_ops,
      options.min_live, options.max_live);
  return parts;
}

std::string ReplayCommand(const SoakResult& result,
                          const SoakOptions& options) {
  SoakOptions o = options;
  o.seed = result.seed;
  const ReplayParts parts = ReplayCommandParts(result.mode, result.streams, o);
  const std::uint64_t ops = std::min(result.failed_op + 1, options.ops);
  return absl::StrCat(parts.before_ops, ops, parts.after_ops);
}

}  // namespace gpualloc::soak
