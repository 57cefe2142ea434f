// SPDX-License-Identifier: Apache-2.0
/* gpualloc/miopen.h: gpualloc as MIOpen's allocator (its workspace and the
 * buffers its Find calls allocate). Header-only C over the C API
 * (gpualloc/gpualloc.h); compile it with MIOpen's miopen/miopen.h (HIP
 * backend).
 *
 *   gpualloc_miopen_context_t context;   // must outlive the handle's use
 *   if (gpualloc_miopen_set_allocator(handle, allocator, 0, &context) !=
 *       miopenStatusSuccess) { ... }
 *
 * miopenSetAllocator(handle, allocate, deallocate, context) takes
 *   void* allocate(void* context, size_t bytes)
 *   void  deallocate(void* context, void* memory)
 * with no stream: these use the handle's stream (miopenGetStream), where
 * MIOpen queues the work that uses the memory. A block is allocated on the
 * handle's stream at the time and freed on its stream at the time of the
 * free (gpualloc also waits for the stream it was allocated on, so a stream
 * changed in between is safe).
 *
 * Errors: a failed allocation returns NULL; MIOpen then fails the call that
 * asked (miopenStatusUnknownError from its "Custom allocator failed to
 * allocate memory" exception), and gpualloc_last_error() on that thread has
 * gpualloc's report (out of memory: the request, limit, in use, reserved and
 * a hint). A failed free changes nothing and is written to stderr once.
 * MIOpen has no statistics call: read gpualloc_get_stats.
 */
#ifndef GPUALLOC_MIOPEN_H_
#define GPUALLOC_MIOPEN_H_

#include <miopen/miopen.h>
#include <stdio.h>

#include "gpualloc/gpualloc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the callbacks get as their context: the gpualloc allocator and
 * device, and the MIOpen handle whose stream they use. */
typedef struct gpualloc_miopen_context {
  gpualloc_t* allocator;
  int device;
  miopenHandle_t handle;
  int reported; /* a failed free was written to stderr */
} gpualloc_miopen_context_t;

/* The handle's stream now (NULL, the default stream, when MIOpen cannot say).
 */
static inline void* gpualloc_miopen_stream(gpualloc_miopen_context_t* c) {
  miopenAcceleratorQueue_t stream = NULL;
  if (miopenGetStream(c->handle, &stream) != miopenStatusSuccess) return NULL;
  return (void*)stream;
}

static inline void* gpualloc_miopen_allocate(void* context, size_t bytes) {
  gpualloc_miopen_context_t* c = (gpualloc_miopen_context_t*)context;
  void* p = NULL;
  if (gpualloc_malloc(c->allocator, c->device, bytes, gpualloc_miopen_stream(c),
                      &p) != GPUALLOC_OK) {
    return NULL;
  }
  return p;
}

static inline void gpualloc_miopen_deallocate(void* context, void* memory) {
  gpualloc_miopen_context_t* c = (gpualloc_miopen_context_t*)context;
  if (gpualloc_free(c->allocator, c->device, memory,
                    gpualloc_miopen_stream(c)) != GPUALLOC_OK &&
      !c->reported) {
    c->reported = 1;
    fprintf(stderr,
            "gpualloc_miopen_deallocate: %s (reported once; later failures: "
            "gpualloc_last_error())\n",
            gpualloc_last_error());
  }
}

/* Fills *context and makes gpualloc `handle`'s allocator for `device`
 * (miopenSetAllocator). *context must stay until the handle is destroyed or
 * given another allocator, and `allocator` until every block is freed. A
 * NULL allocator or context, or a negative device, is miopenStatusBadParm,
 * and changes nothing. */
static inline miopenStatus_t gpualloc_miopen_set_allocator(
    miopenHandle_t handle, gpualloc_t* allocator, int device,
    gpualloc_miopen_context_t* context) {
  if (allocator == NULL || context == NULL || device < 0) {
    return miopenStatusBadParm;
  }
  context->allocator = allocator;
  context->device = device;
  context->handle = handle;
  context->reported = 0;
  return miopenSetAllocator(handle, gpualloc_miopen_allocate,
                            gpualloc_miopen_deallocate, context);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUALLOC_MIOPEN_H_ */
