// SPDX-License-Identifier: Apache-2.0
// backends/common/scoped_current.h: makes a vendor's "current" thing (CUDA's
// context, HIP's device) the one a backend call needs on the calling thread,
// and puts the thread's previous one back when the call returns, so that a
// thread working on another device (or with none) is left as it was. When
// the wanted one is current already, nothing is set or restored.
//
// The backends' per-call wrapper: OnCurrent runs a call's body with it
// current, answering the switch's error instead when the switch fails.
#ifndef GPUALLOC_BACKENDS_COMMON_SCOPED_CURRENT_H_
#define GPUALLOC_BACKENDS_COMMON_SCOPED_CURRENT_H_

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "backends/layer.h"

namespace gpualloc::common {

// T: the vendor's handle of the current thing (CUcontext, a device ordinal).
template <typename T>
class ScopedCurrent {
 public:
  // `get` reads the current one into its argument, `set` makes its argument
  // current; each answers OK or the vendor's error as a status.
  ScopedCurrent(T wanted, const std::function<absl::Status(T*)>& get,
                std::function<absl::Status(T)> set)
      : set_(std::move(set)) {
    status_ = get(&previous_);
    if (!status_.ok() || previous_ == wanted) return;
    status_ = set_(wanted);
    restore_ = status_.ok();
  }
  ~ScopedCurrent() {
    // Nothing to report to: the call's own result stands.
    if (restore_) (void)set_(previous_);
  }
  ScopedCurrent(const ScopedCurrent&) = delete;
  ScopedCurrent& operator=(const ScopedCurrent&) = delete;

  // OK when the wanted one is current.
  const absl::Status& status() const { return status_; }

 private:
  std::function<absl::Status(T)> set_;
  T previous_{};
  bool restore_ = false;
  absl::Status status_;
};

// Runs `body` (returning Result: a Status or StatusOr) with `current` made
// current (a ScopedCurrent, or anything with status()), or answers why it
// could not be.
template <typename Result, typename Current, typename Body>
Result OnCurrent(const Current& current, Body&& body) {
  if (!current.status().ok()) return current.status();
  return std::forward<Body>(body)();
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_SCOPED_CURRENT_H_
