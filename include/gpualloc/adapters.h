// SPDX-License-Identifier: Apache-2.0
/* gpualloc/adapters.h: entry points shaped the way two runtimes take an
 * outside allocator as C function pointers, compiled into libgpualloc (the
 * shared library and the archive): CuPy's CFunctionAllocator and ONNX
 * Runtime's CUDA provider options gpu_external_alloc / gpu_external_free /
 * gpu_external_empty_cache. gpualloc.cupy and gpualloc.onnxruntime (Python)
 * hand them to the runtime; a C or C++ program can take their addresses too.
 *
 * Runtimes whose interface is a type of their own get a header-only adapter,
 * compiled against that runtime's headers: gpualloc/rmm.hpp (RAPIDS RMM),
 * gpualloc/onnxruntime.h (an OrtAllocator), gpualloc/miopen.h (MIOpen).
 *
 * None of these functions throws, and none can return a gpualloc_status_t
 * where the runtime's signature has no room for one: a failed allocation
 * returns NULL, a failed free changes nothing, and both leave the reason in
 * gpualloc_last_error() (the calling thread's). A failed free is also
 * written to stderr, once per process (the runtime calls it from a
 * destructor and cannot be told).
 */
#ifndef GPUALLOC_ADAPTERS_H_
#define GPUALLOC_ADAPTERS_H_

#include "gpualloc/gpualloc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- CuPy ---------------------------------------------------------------
 * cupy.cuda.CFunctionAllocator(param, malloc, free, owner) calls
 *   void* malloc(void* param, size_t size, int device)
 *   void  free(void* param, void* ptr, int device)
 * with the device current when it allocated. It gives no stream, so the
 * param carries one: gpualloc.cupy makes a param per CuPy stream and hands
 * CuPy the param of the current stream at each allocation. A block is
 * allocated on that stream and freed on the same one, as CuPy's own memory
 * pool keeps a block in the arena of the stream it was allocated on: it is
 * reused at once on that stream, and on another only once the work queued on
 * its stream before the free has completed. The stream must outlive its live
 * blocks, or be released (gpualloc_release_stream) before it is destroyed.
 */
typedef struct gpualloc_cupy_param gpualloc_cupy_param_t;

/* A param for allocations of `allocator` on `stream` (NULL: the legacy
 * default stream). It must stay until every block allocated through it is
 * freed; gpualloc_cupy_param_destroy then releases it (NULL does nothing). */
GPUALLOC_API gpualloc_status_t gpualloc_cupy_param_create(
    gpualloc_t* allocator, void* stream, gpualloc_cupy_param_t** out);
GPUALLOC_API void gpualloc_cupy_param_destroy(gpualloc_cupy_param_t* param);
/* CuPy's malloc: `size` bytes on `device`, on the param's stream; NULL on
 * failure (out of memory: the report is in gpualloc_last_error()). */
GPUALLOC_API void* gpualloc_cupy_malloc(void* param, size_t size, int device);
/* CuPy's free: `ptr` on `device`, on the param's stream. */
GPUALLOC_API void gpualloc_cupy_free(void* param, void* ptr, int device);

/* --- ONNX Runtime: CUDA provider options ---------------------------------
 * The CUDA execution provider takes three functions with no context:
 *   gpu_external_alloc        void* (size_t)
 *   gpu_external_free         void  (void*)
 *   gpu_external_empty_cache  void  ()
 * (each option's value is the function's address in decimal). Since they
 * carry no context, they serve one allocator and one device per process,
 * set here first: ONNX Runtime's device_id. They carry no stream either:
 * every block is allocated and freed on the legacy default stream (NULL), so
 * a freed block is reused at once by the next allocation, as ONNX Runtime's
 * own arena does for the work it queues on its compute stream.
 * empty_cache returns every fully free region (gpualloc_trim); ONNX Runtime
 * calls it after freeing memory reserved at session creation. */

/* The allocator and device the three functions serve. NULL `allocator`
 * detaches them (later calls fail). Setting another one while one is set is
 * GPUALLOC_FAILED_PRECONDITION naming both: detach first, once ONNX Runtime
 * has freed what it holds. */
GPUALLOC_API gpualloc_status_t gpualloc_ort_external_set(gpualloc_t* allocator,
                                                         int device);
GPUALLOC_API void* gpualloc_ort_external_alloc(size_t size);
GPUALLOC_API void gpualloc_ort_external_free(void* ptr);
GPUALLOC_API void gpualloc_ort_external_empty_cache(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUALLOC_ADAPTERS_H_ */
