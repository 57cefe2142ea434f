// SPDX-License-Identifier: Apache-2.0
/* tests/bindings/c_api_host_test.c: the C API's pinned host memory pool
 * (gpualloc_host_*) from a program written and compiled as C, on the
 * simulated device: alloc, record-stream, free and reuse, stats, trim, the
 * limit key and its out-of-memory message, bad arguments. Exits non-zero at
 * the first failed check. */
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpualloc/gpualloc.h"

static int checks = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__, \
              __LINE__, #cond, gpualloc_last_error());                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_OK(call)                                                   \
  do {                                                                   \
    gpualloc_status_t s_ = (call);                                       \
    ++checks;                                                            \
    if (s_ != GPUALLOC_OK) {                                             \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, \
              #call, gpualloc_status_name(s_), gpualloc_last_error());   \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

#define CHECK_STATUS(call, expected)                                         \
  do {                                                                       \
    gpualloc_status_t s_ = (call);                                           \
    ++checks;                                                                \
    if (s_ != (expected)) {                                                  \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, \
              __LINE__, #call, gpualloc_status_name(s_),                     \
              gpualloc_status_name(expected), gpualloc_last_error());        \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define CHECK_ERROR_MENTIONS(text)                                          \
  do {                                                                      \
    ++checks;                                                               \
    if (strstr(gpualloc_last_error(), (text)) == NULL) {                    \
      fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", \
              __FILE__, __LINE__, gpualloc_last_error(), (text));           \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static const uint64_t kMiB = 1024ull * 1024;

static gpualloc_stats_t HostStats(gpualloc_t* a) {
  gpualloc_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK_OK(gpualloc_host_get_stats(a, &s));
  return s;
}

static void TestAllocRecordFreeReuse(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated("backend=sim,preallocate=false", &a));
  gpualloc_stats_t s = HostStats(a); /* creates the pool: nothing reserved */
  CHECK(s.bytes_reserved == 0 && s.num_allocs == 0);
  void* p = NULL;
  CHECK_OK(gpualloc_host_alloc(a, 3 * kMiB, &p));
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0);
  s = HostStats(a);
  CHECK(s.bytes_in_use >= 3 * kMiB && s.bytes_reserved >= 3 * kMiB);
  CHECK(s.backend_allocs == 1);
  /* A copy stream used it: the free records an event there. */
  CHECK_OK(gpualloc_host_record_stream(a, p, (void*)0x100));
  CHECK_OK(gpualloc_host_free(a, p));
  /* Nothing is queued on the simulated stream: complete at once, reused. */
  void* q = NULL;
  CHECK_OK(gpualloc_host_alloc(a, 3 * kMiB, &q));
  CHECK(q == p);
  s = HostStats(a);
  CHECK(s.backend_allocs == 1 && s.events_recorded == 1 && s.host_waits == 0);
  CHECK_OK(gpualloc_host_free(a, q));
  CHECK_OK(gpualloc_host_free(a, NULL));
  /* Trim returns the regions. */
  CHECK_OK(gpualloc_host_trim(a));
  s = HostStats(a);
  CHECK(s.bytes_reserved == 0 && s.backend_frees == 1);
  /* The device's allocator is another pool. */
  gpualloc_stats_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  CHECK_OK(gpualloc_get_stats(a, 0, &d));
  CHECK(d.num_allocs == 0);
  gpualloc_destroy(a);
}

static void TestLimitAndErrors(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated("backend=sim,host_memory_limit=8MiB", &a));
  CHECK(HostStats(a).bytes_limit == 8 * kMiB);
  void* p = NULL;
  CHECK_STATUS(gpualloc_host_alloc(a, 9 * kMiB, &p),
               GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(p == NULL);
  CHECK_ERROR_MENTIONS("host_memory_limit");
  CHECK(HostStats(a).num_ooms == 1);
  CHECK_STATUS(gpualloc_host_alloc(a, kMiB, NULL), GPUALLOC_INVALID_ARGUMENT);
  CHECK_OK(gpualloc_host_alloc(a, kMiB, &p));
  CHECK_STATUS(gpualloc_host_free(a, (char*)p + 256),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_STATUS(gpualloc_host_record_stream(a, (char*)p + 256, NULL),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_OK(gpualloc_host_free(a, p));
  CHECK_STATUS(gpualloc_host_free(a, p), GPUALLOC_FAILED_PRECONDITION);
  CHECK_STATUS(gpualloc_host_alloc(NULL, kMiB, &p), GPUALLOC_INVALID_ARGUMENT);
  CHECK_STATUS(gpualloc_host_get_stats(a, NULL), GPUALLOC_INVALID_ARGUMENT);
  gpualloc_destroy(a);
}

static void TestLimitFromTheEnvironment(void) {
  setenv("GPUALLOC_HOST_MEMORY_LIMIT", "16MiB", 1);
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create("backend=sim", &a));
  CHECK(HostStats(a).bytes_limit == 16 * kMiB);
  gpualloc_destroy(a);
  setenv("GPUALLOC_HOST_MEMORY_LIMIT", "0", 1);
  CHECK_STATUS(gpualloc_create("backend=sim", &a), GPUALLOC_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("GPUALLOC_HOST_MEMORY_LIMIT");
  unsetenv("GPUALLOC_HOST_MEMORY_LIMIT");
}

int main(void) {
  TestAllocRecordFreeReuse();
  TestLimitAndErrors();
  TestLimitFromTheEnvironment();
  printf("c_api_host_test: %d checks passed\n", checks);
  return 0;
}
