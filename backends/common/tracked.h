// SPDX-License-Identifier: Apache-2.0
// backends/common/tracked.h: giving back something a backend handed out and
// keeps in its books (a plain block, an event, a pool block).
//
// The entry leaves the books before the vendor call, under the books' lock,
// so that two threads cannot give the same thing back twice; the call runs
// without the lock; when it fails the entry goes back into the books: the
// thing is still the caller's, and a retry (or the backend's destructor)
// gives it back.
#ifndef GPUALLOC_BACKENDS_COMMON_TRACKED_H_
#define GPUALLOC_BACKENDS_COMMON_TRACKED_H_

#include <utility>

#include "absl/status/status.h"
#include "backends/layer.h"

namespace gpualloc::common {

// Guard: the scoped lock type for Mutex. Books: a map or set with node
// extraction (absl's and std's). `unknown()` answers a key that is not in
// the books; `release(node)` makes the vendor call with the extracted node
// (node.key(), node.mapped() or node.value()).
template <typename Guard, typename Mutex, typename Books, typename Unknown,
          typename Release>
absl::Status ReleaseTracked(Mutex* mu, Books* books,
                            const typename Books::key_type& key,
                            Unknown unknown, Release release) {
  typename Books::node_type node;
  {
    Guard guard(mu);
    node = books->extract(key);
  }
  if (node.empty()) return unknown();
  absl::Status status = release(node);
  if (!status.ok()) {
    Guard guard(mu);
    books->insert(std::move(node));
  }
  return status;
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_TRACKED_H_
