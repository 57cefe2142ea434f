// SPDX-License-Identifier: Apache-2.0
/* gpualloc/gpualloc.h: the C API, for runtimes and foreign-function
 * interfaces that cannot use the C++ one.
 *
 * A gpualloc_t is an opaque handle on one allocator per device, created
 * lazily on first use of the device, all from one configuration (the keys and
 * variables are listed in gpualloc/core/config.h and docs/REFERENCE.md,
 * "Configuration reference"):
 *
 *   gpualloc_t* a = NULL;
 *   if (gpualloc_create("backend=sim,preallocate=false", &a) != GPUALLOC_OK) {
 *     fprintf(stderr, "%s\n", gpualloc_last_error());
 *   }
 *   void* p = NULL;
 *   gpualloc_malloc(a, 0, 1 << 20, stream, &p);
 *   ...
 *   gpualloc_free(a, 0, p, stream);
 *   gpualloc_destroy(a);
 *
 * Errors: every call that can fail returns a gpualloc_status_t, whose values
 * are those of absl::StatusCode; GPUALLOC_OK is 0. A failing call also sets
 * the calling thread's last-error message (gpualloc_last_error), which names
 * what was wrong (the configuration key, the address, the out-of-memory
 * report). A rejected call changes nothing. No C++ exception crosses this
 * interface: one that would becomes GPUALLOC_RESOURCE_EXHAUSTED
 * (std::bad_alloc) or GPUALLOC_INTERNAL, with a message saying so (a fixed
 * one when even the message cannot be allocated).
 *
 * Streams are opaque handles (a cudaStream_t or hipStream_t cast to void*);
 * NULL is the default stream. Devices are ordinals from 0.
 *
 * Thread safety: every function may be called from any thread at once, except
 * gpualloc_destroy, which must be the last call on its handle.
 */
#ifndef GPUALLOC_GPUALLOC_H_
#define GPUALLOC_GPUALLOC_H_

/* A header of the bindings layer: the library's lower layers may not include it
 * (docs/DESIGN.md, "Layers"). */
#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 4
#error \
    "gpualloc/gpualloc.h belongs to the bindings layer; a lower layer of the library may not include it"
#endif

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GPUALLOC_API
#else
#define GPUALLOC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The values of absl::StatusCode. */
typedef enum gpualloc_status {
  GPUALLOC_OK = 0,
  GPUALLOC_CANCELLED = 1,
  GPUALLOC_UNKNOWN = 2,
  GPUALLOC_INVALID_ARGUMENT = 3,
  GPUALLOC_DEADLINE_EXCEEDED = 4,
  GPUALLOC_NOT_FOUND = 5,
  GPUALLOC_ALREADY_EXISTS = 6,
  GPUALLOC_PERMISSION_DENIED = 7,
  GPUALLOC_RESOURCE_EXHAUSTED = 8, /* out of memory */
  GPUALLOC_FAILED_PRECONDITION = 9,
  GPUALLOC_ABORTED = 10,
  GPUALLOC_OUT_OF_RANGE = 11,
  GPUALLOC_UNIMPLEMENTED = 12,
  GPUALLOC_INTERNAL = 13,
  GPUALLOC_UNAVAILABLE = 14, /* e.g. no driver */
  GPUALLOC_DATA_LOSS = 15,
  GPUALLOC_UNAUTHENTICATED = 16
} gpualloc_status_t;

/* Opaque: the allocators of every device, from one configuration. */
typedef struct gpualloc_handle gpualloc_t;

/* TensorFlow's allocator statistics (gpualloc::Stats, every row of
 * gpualloc/core/stats_fields.h; the build checks that). ABI evolution: fields
 * are only ever added at the end, and the caller sets struct_size to
 * sizeof(gpualloc_stats_t) as it was compiled. The library fills the fields
 * both it and the caller know: a caller built against an older header (a
 * smaller struct) gets the fields that fit, and nothing past them is written;
 * a caller built against a newer header (a larger struct) than the library's
 * gets the library's fields, and the fields the library does not know are
 * left as the caller set them (set them to a value meaning "unknown" first).
 * struct_size is left as the caller set it; a size smaller than the
 * struct_size field itself is refused. */
typedef struct gpualloc_stats {
  uint64_t struct_size;
  uint64_t num_allocs;   /* successful allocations, ever */
  uint64_t bytes_in_use; /* sum of the sizes of in-use chunks */
  uint64_t peak_bytes_in_use;
  uint64_t largest_alloc_size; /* largest chunk since the last peak reset */
  uint64_t bytes_limit;
  uint64_t bytes_reserved; /* sum of region sizes */
  uint64_t peak_bytes_reserved;
  uint64_t largest_free_block_bytes;
  uint64_t bytes_requested; /* sum of the sizes as asked */
  uint64_t peak_bytes_requested;
  uint64_t num_ooms; /* out-of-memory answers (final ones) */
  uint64_t backend_allocs;
  uint64_t backend_frees;
  uint64_t events_recorded; /* stream-ordered frees: backend events */
  uint64_t stream_waits;
  uint64_t host_waits;
  /* 1 - largest free block / total free bytes (0 when nothing is free). */
  double fragmentation;
  /* Private pools: the memory they hold (in bytes_reserved) and, of it, what
   * they handed out (in bytes_in_use). */
  uint64_t pool_bytes_reserved;
  uint64_t pool_bytes_in_use;
  /* Memory of tags asleep (gpualloc_sleep): given back to the device, not in
   * bytes_reserved. */
  uint64_t bytes_sleeping;
  /* Memory the device refused to take back (a failed unmap or release):
   * still held, counted in bytes_reserved, released later. */
  uint64_t bytes_release_pending;
  /* Front caches (front_cache=SIZE): bytes of freed blocks they hold (not in
   * bytes_in_use), allocations they served, and allocations that found no
   * block of their size there. */
  uint64_t front_cache_bytes;
  uint64_t front_cache_hits;
  uint64_t front_cache_misses;
  /* Sharing blocks with other processes (gpualloc_export): live blocks
   * exported (in bytes_in_use), exported blocks freed while an importer
   * still has them open (kept, not reusable), and memory of other processes
   * imported here (gpualloc_import; not in bytes_reserved). */
  uint64_t bytes_exported;
  uint64_t bytes_held_for_importers;
  uint64_t bytes_imported;
} gpualloc_stats_t;

/* Every device: the device argument of gpualloc_trim, gpualloc_release_stream
 * and gpualloc_set_oom_handler. */
#define GPUALLOC_ALL_DEVICES (-1)

/* Creates a handle from `config` ("key=value,...", NULL or "" for none) over
 * the process environment (GPUALLOC_* variables, their JAX/XLA/TF aliases and
 * PyTorch's PYTORCH_*ALLOC_CONF): the string wins, then the environment, then
 * the defaults (JAX's: preallocate 75% of total memory on first use). A bad
 * key or value is GPUALLOC_INVALID_ARGUMENT with a message naming the key or
 * variable as set, the value as written and the fix; *out is then NULL. No
 * device is touched until its first use (a GPU's settings are checked
 * against it then, at its first gpualloc_malloc, with messages of the same
 * kind). */
GPUALLOC_API gpualloc_status_t gpualloc_create(const char* config,
                                               gpualloc_t** out);
/* gpualloc_create with PyTorch's defaults, for gpualloc loaded as PyTorch's
 * allocator (CUDAPluggableAllocator; the PyTorch hook calls it): the string
 * wins, then the environment (GPUALLOC_*, the JAX/XLA/TF aliases and
 * PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF), then
 * PyTorch's defaults instead of JAX's: memory grows on demand
 * (preallocate=false) up to the whole device (mem_fraction=1), as PyTorch's
 * caching allocator has no cap unless per_process_memory_fraction sets one.
 * What the string or a variable sets still wins (GPUALLOC_PREALLOCATE=true
 * preallocates, GPUALLOC_MEM_FRACTION or per_process_memory_fraction caps).
 * Errors as gpualloc_create. */
GPUALLOC_API gpualloc_status_t gpualloc_create_pytorch(const char* config,
                                                       gpualloc_t** out);
/* gpualloc_create without reading the environment: the configuration string
 * and the defaults only (reproducible; for tests and tools). */
GPUALLOC_API gpualloc_status_t gpualloc_create_isolated(const char* config,
                                                        gpualloc_t** out);
/* Releases the handle and every allocator's memory. Memory still allocated
 * is released with it. NULL is a no-op. */
GPUALLOC_API void gpualloc_destroy(gpualloc_t* allocator);

/* Number of devices the configured backend sees. */
GPUALLOC_API gpualloc_status_t gpualloc_device_count(gpualloc_t* allocator,
                                                     int* out);

/* Device memory of at least `size` bytes for work on `stream`, aligned to the
 * minimum block size (256 B). 0 bytes gives a unique non-null pointer. Out of
 * memory is GPUALLOC_RESOURCE_EXHAUSTED with a report; *out is then NULL. */
GPUALLOC_API gpualloc_status_t gpualloc_malloc(gpualloc_t* allocator,
                                               int device, size_t size,
                                               void* stream, void** out);
/* As gpualloc_malloc, aligned to `alignment` (a power of two; 0: default). */
GPUALLOC_API gpualloc_status_t gpualloc_malloc_aligned(gpualloc_t* allocator,
                                                       int device, size_t size,
                                                       size_t alignment,
                                                       void* stream,
                                                       void** out);
/* As gpualloc_malloc_aligned, labelled with `tag` (0: none) for gpualloc_sleep
 * and gpualloc_wake: allocator=bfc with expandable regions carves a tag's
 * memory from granules of its own. A tag that is asleep, or a stream that
 * allocates to a private pool, is GPUALLOC_FAILED_PRECONDITION. */
GPUALLOC_API gpualloc_status_t gpualloc_malloc_tagged(gpualloc_t* allocator,
                                                      int device, size_t size,
                                                      size_t alignment,
                                                      void* stream,
                                                      uint32_t tag, void** out);
/* Releases `ptr`; `stream` is the stream its last use was queued on. A pointer
 * this allocator did not hand out, an interior pointer or a second free is
 * GPUALLOC_INVALID_ARGUMENT or GPUALLOC_FAILED_PRECONDITION with the address
 * in the message, and changes nothing. NULL is a no-op. */
GPUALLOC_API gpualloc_status_t gpualloc_free(gpualloc_t* allocator, int device,
                                             void* ptr, void* stream);
/* Declares that work on `stream` also uses the live allocation `ptr`
 * (PyTorch's record_stream): its memory is reused on other streams only once
 * that work has completed too. */
GPUALLOC_API gpualloc_status_t gpualloc_record_stream(gpualloc_t* allocator,
                                                      int device, void* ptr,
                                                      void* stream);
/* The runtime is about to destroy `stream` (cudaStreamDestroy,
 * hipStreamDestroy): once this returns, the allocator never records on or
 * waits for it again, while the work already queued on it still guards the
 * memory it may use (one last event recorded here). The handle may later name
 * a new stream. GPUALLOC_ALL_DEVICES releases it on every device created so
 * far. A stream the allocator never saw costs nothing. */
GPUALLOC_API gpualloc_status_t gpualloc_release_stream(gpualloc_t* allocator,
                                                       int device,
                                                       void* stream);

/* Private memory pools for graph capture (CUDA/HIP graphs), as PyTorch's
 * graph_pool_handle / beginAllocateToPool / endAllocateToPool / releasePool.
 * gpualloc_create_pool makes a pool of `device` with one reference (*out: its
 * id, never 0). Between gpualloc_begin_allocate_to_pool and
 * gpualloc_end_allocate_to_pool, every allocation on `stream` is served by
 * the pool; memory freed from a pool stays in it. Several graphs may share a
 * pool by id (each holding a reference: gpualloc_retain_pool). When the last
 * reference is released the pool's memory goes back to the device's
 * allocator, usable on other streams once the work queued on `last_use`
 * (where the graph was last launched) and on every stream that used the
 * pool's memory has completed. While a capturing stream allocates to a pool
 * the allocator records, queries and waits for no event and returns no
 * memory to the device. Only allocator=bfc has pools (GPUALLOC_UNIMPLEMENTED
 * otherwise). The C++ API's Allocator::CreatePool says more. */
GPUALLOC_API gpualloc_status_t gpualloc_create_pool(gpualloc_t* allocator,
                                                    int device, uint64_t* out);
GPUALLOC_API gpualloc_status_t gpualloc_retain_pool(gpualloc_t* allocator,
                                                    int device, uint64_t pool);
GPUALLOC_API gpualloc_status_t gpualloc_release_pool(gpualloc_t* allocator,
                                                     int device, uint64_t pool,
                                                     void* last_use);
GPUALLOC_API gpualloc_status_t gpualloc_begin_allocate_to_pool(
    gpualloc_t* allocator, int device, uint64_t pool, void* stream);
GPUALLOC_API gpualloc_status_t
gpualloc_end_allocate_to_pool(gpualloc_t* allocator, int device, uint64_t pool);

/* Sleep and wake (vLLM's sleep mode, RL weight offloading): gpualloc_sleep
 * waits for the work queued on the streams that allocated, freed or recorded
 * (gpualloc_record_stream) the tag's memory, then
 * releases the physical memory of every granule holding only that tag's
 * memory, keeping the addresses: the tag's pointers (and graphs captured
 * with them) are valid again after gpualloc_wake, which maps fresh memory at
 * the same addresses. The content is lost unless `backup` (non-zero) copied
 * it to host memory, which gpualloc_wake copies back. While asleep, freeing
 * or allocating with the tag is GPUALLOC_FAILED_PRECONDITION. Needs
 * allocator=bfc with expandable regions on a backend with virtual memory
 * (GPUALLOC_FAILED_PRECONDITION naming what is missing otherwise); a wake
 * for which the limit has no room is GPUALLOC_RESOURCE_EXHAUSTED and leaves
 * the tag asleep. `report` (may be NULL; set report->struct_size first)
 * receives what happened. The C++ API's Allocator::Sleep says more. */
typedef struct gpualloc_sleep_report {
  uint64_t struct_size;     /* set by the caller, as gpualloc_stats_t's */
  uint64_t allocations;     /* the tag's live allocations, now asleep */
  uint64_t bytes_in_use;    /* their bytes */
  uint64_t bytes_released;  /* physical memory given back */
  uint64_t bytes_kept;      /* granules shared with other memory, kept */
  uint64_t bytes_backed_up; /* copied to host memory */
} gpualloc_sleep_report_t;
GPUALLOC_API gpualloc_status_t gpualloc_sleep(gpualloc_t* allocator, int device,
                                              uint32_t tag, int backup,
                                              gpualloc_sleep_report_t* report);
GPUALLOC_API gpualloc_status_t gpualloc_wake(gpualloc_t* allocator, int device,
                                             uint32_t tag);

/* Fills *out (see gpualloc_stats_t: set out->struct_size first). A device not
 * used yet is created, so its bytes_limit is known. */
GPUALLOC_API gpualloc_status_t gpualloc_get_stats(gpualloc_t* allocator,
                                                  int device,
                                                  gpualloc_stats_t* out);
/* Resets the peak statistics to the current values. */
GPUALLOC_API gpualloc_status_t gpualloc_reset_peak_stats(gpualloc_t* allocator,
                                                         int device);

/* Every region and chunk of the device's allocator, with its statistics, as a
 * JSON document (the schema is in docs/REFERENCE.md, "Snapshot JSON"). *out
 * is a NUL-terminated string the caller releases with gpualloc_string_free;
 * *out_length (when not NULL) receives its length. */
GPUALLOC_API gpualloc_status_t gpualloc_snapshot_json(gpualloc_t* allocator,
                                                      int device, char** out,
                                                      size_t* out_length);
GPUALLOC_API void gpualloc_string_free(char* text);

/* The device's snapshot with its allocation history (the history option) as
 * the pickle PyTorch's torch.cuda.memory._dump_snapshot writes, for
 * https://pytorch.org/memory_viz (gpualloc/core/torch_snapshot.h), written to
 * the file `path`. A file that cannot be written is GPUALLOC_UNAVAILABLE naming
 * it. */
GPUALLOC_API gpualloc_status_t gpualloc_snapshot_torch_pickle(
    gpualloc_t* allocator, int device, const char* path);

/* Sets the calling thread's context, stored with each history event it
 * causes (a Python stack, an op name); NULL or "" clears it. Each distinct
 * text is kept for the life of the process: use a bounded set. */
GPUALLOC_API void gpualloc_set_context(const char* context);

/* A failed request, as an out-of-memory handler sees it (gpualloc::
 * OutOfMemoryInfo): the numbers of the moment it failed. */
typedef struct gpualloc_oom_info {
  int device;
  size_t size;      /* as asked */
  size_t alignment; /* as asked (0: the default) */
  void* stream;
  uint64_t bytes_limit;
  uint64_t bytes_in_use;
  uint64_t bytes_reserved;
  uint64_t largest_free_block_bytes;
  /* The report gpualloc_last_error gives if the handler returns 0; valid
   * during the call only. */
  const char* message;
} gpualloc_oom_info_t;

/* Called when an allocation is about to fail with GPUALLOC_RESOURCE_EXHAUSTED,
 * before it returns; nonzero asks to try the request once more (after the
 * handler freed memory, e.g. a cache of its own), 0 lets it fail. It runs on
 * the failing thread without the allocator's lock, so it may call this API
 * again (gpualloc_free, gpualloc_get_stats, gpualloc_trim, even
 * gpualloc_malloc); an allocation that fails inside a handler calls no handler.
 * It may run on several threads at once, must not call gpualloc_destroy, and
 * is not called again for the retry. */
typedef int (*gpualloc_oom_handler_t)(const gpualloc_oom_info_t* info,
                                      void* user_data);

/* Installs `handler` (with `user_data`) on `device`, or with
 * GPUALLOC_ALL_DEVICES on every device, those used later included (a later
 * call naming one device overrides it there). A NULL handler removes it. Safe
 * while other threads allocate; a failure already calling the previous
 * handler still uses it. Statistics count only the final failures
 * (num_ooms). */
GPUALLOC_API gpualloc_status_t
gpualloc_set_oom_handler(gpualloc_t* allocator, int device,
                         gpualloc_oom_handler_t handler, void* user_data);

/* Returns every fully free region of `device` (or of every device used so far,
 * with GPUALLOC_ALL_DEVICES) to the device. */
GPUALLOC_API gpualloc_status_t gpualloc_trim(gpualloc_t* allocator, int device);
/* Changes `device`'s limit while it runs (PyTorch's
 * torch.cuda.set_per_process_memory_fraction): to `bytes`, or to `fraction`
 * (in (0, 1]) of the device's total memory, rounded down to the growth
 * granularity. Raising it lets later growth use more. Lowering it below what
 * is reserved first returns every fully free region (as gpualloc_trim); if
 * more stays reserved the call is GPUALLOC_FAILED_PRECONDITION saying how
 * much, and the limit is unchanged. A limit below one granule or above the
 * device's memory is GPUALLOC_INVALID_ARGUMENT. The device is created if
 * not used yet. */
GPUALLOC_API gpualloc_status_t gpualloc_set_memory_limit(gpualloc_t* allocator,
                                                         int device,
                                                         uint64_t bytes);
GPUALLOC_API gpualloc_status_t gpualloc_set_memory_fraction(
    gpualloc_t* allocator, int device, double fraction);
/* Checks every invariant of the device's allocator; the message names a broken
 * one (GPUALLOC_INTERNAL). */
GPUALLOC_API gpualloc_status_t gpualloc_validate(gpualloc_t* allocator,
                                                 int device);

/* The message of the last failing call made on the calling thread, or "" if
 * none failed yet. Successful calls leave it unchanged (like errno). The
 * pointer stays valid until the thread's next failing call. */
GPUALLOC_API const char* gpualloc_last_error(void);
/* "OK", "INVALID_ARGUMENT", ... ; "UNKNOWN_STATUS" for other values. */
GPUALLOC_API const char* gpualloc_status_name(gpualloc_status_t status);
/* The library's version, e.g. "0.1.0". */
GPUALLOC_API const char* gpualloc_version(void);

/* --- Pinned host memory ------------------------------------------------
 * A caching pool of page-locked host memory (cuMemHostAlloc / hipHostMalloc)
 * for copies between host and device, one per handle, created on first use
 * over device 0's backend (gpualloc/core/host_allocator.h). Its limit is the
 * configuration key host_memory_limit (GPUALLOC_HOST_MEMORY_LIMIT; default:
 * the machine's physical memory). A backend without page-locked host memory
 * answers GPUALLOC_FAILED_PRECONDITION naming the capability.
 *
 * The record-stream rule: a buffer is allocated for the host, with no
 * stream. Before freeing it, name every stream whose queued work (a copy)
 * reads or writes it with gpualloc_host_record_stream; gpualloc_host_free
 * then records an event on each of them, and the buffer is reused only once
 * those events completed (never by making the host wait, except when the
 * limit is reached). A buffer no stream was recorded for is reusable at once.
 */
/* At least `bytes` of pinned host memory in *out (page-aligned when at least a
 * page). Out of the pool's limit is GPUALLOC_RESOURCE_EXHAUSTED naming it. */
GPUALLOC_API gpualloc_status_t gpualloc_host_alloc(gpualloc_t* allocator,
                                                   size_t bytes, void** out);
/* Frees what gpualloc_host_alloc returned (NULL does nothing). */
GPUALLOC_API gpualloc_status_t gpualloc_host_free(gpualloc_t* allocator,
                                                  void* ptr);
/* Declares that work queued on `stream` (a cudaStream_t / hipStream_t; NULL
 * is the default stream) uses the live buffer `ptr`. */
GPUALLOC_API gpualloc_status_t
gpualloc_host_record_stream(gpualloc_t* allocator, void* ptr, void* stream);
/* Returns the pool's fully free regions (cuMemFreeHost synchronizes the
 * device). Nothing to do when the pool was never used. */
GPUALLOC_API gpualloc_status_t gpualloc_host_trim(gpualloc_t* allocator);
/* The pool's statistics, as gpualloc_get_stats (set out->struct_size first);
 * the pool is created if not used yet. */
GPUALLOC_API gpualloc_status_t gpualloc_host_get_stats(gpualloc_t* allocator,
                                                       gpualloc_stats_t* out);
/* --- Sharing a block with another process --------------------------------
 * gpualloc_export writes into `buffer` (`capacity` bytes) the description of
 * the live block `ptr` of `device`: a byte string to send to another process
 * on the same machine over any channel (a socket, a pipe, a file); *length
 * is its size. A buffer too small (or NULL) is GPUALLOC_RESOURCE_EXHAUSTED
 * with *length set: call again with that many bytes (256 are enough for a
 * block of separate regions). Exporting the same block again gives the same
 * bytes. gpualloc_import, in the other process, maps the block on `device`
 * and sets *ptr to it (and *bytes to its size when not NULL);
 * gpualloc_close_import unmaps it. Lifetime: the exporter's gpualloc_free
 * of a block an importer still has open keeps it allocated (not reusable)
 * until every importer closed it or exited. Separate regions
 * (expandable_segments=false) share the region's IPC handle; expandable
 * ones share descriptors the importer takes with pidfd_getfd, which needs
 * ptrace permission over the exporter. A description garbled or of another
 * version is GPUALLOC_INVALID_ARGUMENT; a device without the capability the
 * region kind needs, or the async allocator, GPUALLOC_UNIMPLEMENTED. See
 * Allocator::Export in gpualloc/core/allocator.h. */
GPUALLOC_API gpualloc_status_t gpualloc_export(gpualloc_t* allocator,
                                               int device, void* ptr,
                                               void* buffer, size_t capacity,
                                               size_t* length);
GPUALLOC_API gpualloc_status_t gpualloc_import(gpualloc_t* allocator,
                                               int device,
                                               const void* description,
                                               size_t length, void** ptr,
                                               size_t* bytes);
GPUALLOC_API gpualloc_status_t gpualloc_close_import(gpualloc_t* allocator,
                                                     int device, void* ptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUALLOC_GPUALLOC_H_ */
