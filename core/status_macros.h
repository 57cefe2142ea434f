// SPDX-License-Identifier: Apache-2.0
// core/status_macros.h: the two status-propagation macros Debian's Abseil
// lacks, and the debug-check macros selected by the debug_checks build option.
#ifndef GPUALLOC_CORE_STATUS_MACROS_H_
#define GPUALLOC_CORE_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "core/layer.h"

#define GPUALLOC_CONCAT_INNER_(a, b) a##b
#define GPUALLOC_CONCAT_(a, b) GPUALLOC_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define GPUALLOC_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status gpualloc_status_ = (expr);            \
    if (!gpualloc_status_.ok()) return gpualloc_status_; \
  } while (false)

// `lhs = *expr` when the absl::StatusOr `expr` is OK; returns its status
// otherwise.
#define GPUALLOC_ASSIGN_OR_RETURN(lhs, expr)                                \
  GPUALLOC_ASSIGN_OR_RETURN_IMPL_(GPUALLOC_CONCAT_(gpualloc_or_, __LINE__), \
                                  lhs, expr)
#define GPUALLOC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(*tmp)

#ifndef GPUALLOC_DEBUG_CHECKS
#define GPUALLOC_DEBUG_CHECKS 1
#endif

// Internal assertion: a broken invariant is a bug in gpualloc, never a user
// error, so it aborts with the location. Compiled in at debug_checks >= 1.
#if GPUALLOC_DEBUG_CHECKS >= 1
#define GPUALLOC_DCHECK(cond)                                                \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "gpualloc: internal check failed at %s:%d: %s\n", \
                   __FILE__, __LINE__, #cond);                               \
      std::abort();                                                          \
    }                                                                        \
  } while (false)
#else
#define GPUALLOC_DCHECK(cond) \
  do {                        \
  } while (false && (cond))
#endif

// debug_checks=2: after every allocator operation, the facades validate and
// stop the process at the first broken invariant, naming it.
#if GPUALLOC_DEBUG_CHECKS >= 2
#define GPUALLOC_VALIDATE_EACH_OP(expr)                         \
  do {                                                          \
    const ::absl::Status gpualloc_v_ = (expr);                  \
    if (!gpualloc_v_.ok()) {                                    \
      std::fprintf(stderr, "gpualloc: %s\n",                    \
                   std::string(gpualloc_v_.message()).c_str()); \
      std::abort();                                             \
    }                                                           \
  } while (false)
#else
#define GPUALLOC_VALIDATE_EACH_OP(expr) \
  do {                                  \
  } while (false)
#endif

#endif  // GPUALLOC_CORE_STATUS_MACROS_H_
