// SPDX-License-Identifier: Apache-2.0
// core/streams/oracle.h: what the core asks about streams, and the two
// answers that need no device: every stream's work complete (a backend
// without streams) and what is known already (during a graph capture).
// The device's answer is the stream order (core/streams/stream_order.h).
//
// Thread safety: none; the allocator facade's lock guards them.
#ifndef GPUALLOC_CORE_STREAMS_ORACLE_H_
#define GPUALLOC_CORE_STREAMS_ORACLE_H_

#include <cstdint>

#include "core/layer.h"

namespace gpualloc::core {

// A point in a stream's work: the work queued on `stream` before the free
// stamped `stamp` (core/streams/condition.h).
struct StreamStamp {
  std::uintptr_t stream = 0;
  std::uint64_t stamp = 0;
};

class ReuseOracle {
 public:
  enum class Verdict {
    kReady,    // the work has completed: usable on any stream
    kWaited,   // the new stream was made to wait for the work: usable on it
    kBlocked,  // neither: look elsewhere
    kError,    // the device could not be asked: stop looking (the oracle
               // keeps the error for the caller to report)
  };

  // How far Prepare may go to make memory usable.
  enum class Ask : std::uint8_t {
    kIfCheap,  // ask the device only as the budget for questions allows
    kQuery,    // ask the device (record a marker if none covers the free)
    kWait,     // also make the new stream wait, as the policy allows
  };

  virtual ~ReuseOracle() = default;

  // Whether the work queued on `stream` before the free stamped `stamp` is
  // known to have completed. No device call.
  virtual bool KnownComplete(std::uintptr_t stream,
                             std::uint64_t stamp) const = 0;
  // Whether work queued on `to` from now on is known to start after that
  // work: it completed, or `to` was made to wait for it. No device call.
  virtual bool KnownOrdered(std::uintptr_t to, std::uintptr_t from,
                            std::uint64_t stamp) const {
    return KnownComplete(from, stamp) || to == from;
  }
  // Makes memory freed on `from` at `stamp` usable on `to` (to != from), by
  // asking the device whether the work completed or, with Ask::kWait and
  // as the policy allows, making `to` wait for it.
  virtual Verdict Prepare(std::uintptr_t from, std::uint64_t stamp,
                          std::uintptr_t to, Ask ask) = 0;
};

// An oracle to which all work is complete: a backend without streams (its
// work runs in call order), or conditions that no longer matter.
class AllComplete final : public ReuseOracle {
 public:
  bool KnownComplete(std::uintptr_t, std::uint64_t) const override {
    return true;
  }
  Verdict Prepare(std::uintptr_t, std::uint64_t, std::uintptr_t, Ask) override {
    return Verdict::kReady;
  }
};

// The oracle while a graph capture is underway: what `known` already knows,
// and no device call (a query or a wait would break the capture).
class KnownOnly final : public ReuseOracle {
 public:
  explicit KnownOnly(const ReuseOracle& known) : known_(known) {}
  bool KnownComplete(std::uintptr_t stream,
                     std::uint64_t stamp) const override {
    return known_.KnownComplete(stream, stamp);
  }
  bool KnownOrdered(std::uintptr_t to, std::uintptr_t from,
                    std::uint64_t stamp) const override {
    return known_.KnownOrdered(to, from, stamp);
  }
  Verdict Prepare(std::uintptr_t from, std::uint64_t stamp, std::uintptr_t to,
                  Ask) override {
    if (KnownComplete(from, stamp)) return Verdict::kReady;
    return KnownOrdered(to, from, stamp) ? Verdict::kWaited : Verdict::kBlocked;
  }

 private:
  const ReuseOracle& known_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_STREAMS_ORACLE_H_
