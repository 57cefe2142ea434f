// SPDX-License-Identifier: Apache-2.0
/* tests/bindings/miopen_adapter_test.c: gpualloc/miopen.h, compiled as C,
 * through a stand-in MIOpen (tests/bindings/miopen_standin, from MIOpen
 * 3.3.0's miopen.h) on the simulator: miopenFindSolutions without a
 * workspace allocates one through the allocator gpualloc_miopen_set_allocator
 * installed, on the handle's stream, and frees it on the handle's stream;
 * gpualloc's history shows both. Out of memory fails MIOpen's call with
 * gpualloc's report in gpualloc_last_error(). Exits non-zero at the first
 * failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpualloc/gpualloc.h"
#include "gpualloc/miopen.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__, \
              __LINE__, #cond, gpualloc_last_error());                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static const size_t kMiB = (size_t)1 << 20;

/* The stream of the history's events of `action` ("alloc" or "free"),
 * appended to `out` (at most `max`); returns how many. */
static int EventStreams(gpualloc_t* a, const char* action, uint64_t* out,
                        int max) {
  char* json = NULL;
  CHECK(gpualloc_snapshot_json(a, 0, &json, NULL) == GPUALLOC_OK);
  char key[64];
  snprintf(key, sizeof(key), "{\"action\":\"%s\",", action);
  int n = 0;
  for (const char* s = json; (s = strstr(s, key)) != NULL && n < max; ++s) {
    const char* stream = strstr(s, "\"stream\":");
    CHECK(stream != NULL);
    out[n++] = strtoull(stream + strlen("\"stream\":"), NULL, 10);
  }
  gpualloc_string_free(json);
  return n;
}

static miopenStatus_t Find(miopenHandle_t handle, size_t workspace_limit) {
  miopenConvolutionDescriptor_t conv;
  miopenProblem_t problem;
  miopenFindOptions_t options;
  CHECK(miopenCreateConvolutionDescriptor(&conv) == miopenStatusSuccess);
  CHECK(
      miopenCreateConvProblem(&problem, conv, miopenProblemDirectionForward) ==
      miopenStatusSuccess);
  CHECK(miopenCreateFindOptions(&options) == miopenStatusSuccess);
  CHECK(miopenSetFindOptionWorkspaceLimit(options, workspace_limit) ==
        miopenStatusSuccess);
  size_t found = 99;
  miopenSolution_t solutions[1];
  miopenStatus_t status =
      miopenFindSolutions(handle, problem, options, solutions, &found, 1);
  miopenDestroyFindOptions(options);
  miopenDestroyProblem(problem);
  miopenDestroyConvolutionDescriptor(conv);
  return status;
}

static gpualloc_stats_t Stats(gpualloc_t* a) {
  gpualloc_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK(gpualloc_get_stats(a, 0, &s) == GPUALLOC_OK);
  return s;
}

int main(void) {
  gpualloc_t* a = NULL;
  CHECK(gpualloc_create_isolated("backend=sim,device_memory=8GiB,"
                                 "preallocate=false,mem_limit=128MiB,"
                                 "history=1000",
                                 &a) == GPUALLOC_OK);
  hipStream_t first = (hipStream_t)(uintptr_t)0x700;
  hipStream_t second = (hipStream_t)(uintptr_t)0x800;
  miopenHandle_t handle = NULL;
  CHECK(miopenCreateWithStream(&handle, first) == miopenStatusSuccess);
  gpualloc_miopen_context_t context;

  /* A bad call changes nothing and says so the way MIOpen does. */
  CHECK(gpualloc_miopen_set_allocator(handle, NULL, 0, &context) ==
        miopenStatusBadParm);
  CHECK(gpualloc_miopen_set_allocator(handle, a, -1, &context) ==
        miopenStatusBadParm);
  CHECK(gpualloc_miopen_set_allocator(handle, a, 0, NULL) ==
        miopenStatusBadParm);

  /* Find's workspace comes from gpualloc, on the handle's stream, and goes
   * back when Find returns. */
  CHECK(gpualloc_miopen_set_allocator(handle, a, 0, &context) ==
        miopenStatusSuccess);
  CHECK(Find(handle, 16 * kMiB) == miopenStatusSuccess);
  gpualloc_stats_t s = Stats(a);
  CHECK(s.num_allocs == 1);
  CHECK(s.peak_bytes_in_use == 16 * kMiB);
  CHECK(s.bytes_in_use == 0);
  uint64_t streams[8];
  CHECK(EventStreams(a, "alloc", streams, 8) == 1);
  CHECK(streams[0] == 0x700);
  CHECK(EventStreams(a, "free_requested", streams, 8) == 1);
  CHECK(streams[0] == 0x700);

  /* The handle's stream is read at each call. */
  CHECK(miopenSetStream(handle, second) == miopenStatusSuccess);
  CHECK(Find(handle, 16 * kMiB) == miopenStatusSuccess);
  CHECK(EventStreams(a, "alloc", streams, 8) == 2);
  CHECK(streams[1] == 0x800);

  /* Out of memory: MIOpen fails the call; the report is gpualloc's. */
  CHECK(miopenSetStream(handle, first) == miopenStatusSuccess);
  gpualloc_trim(a, 0);
  CHECK(gpualloc_set_memory_limit(a, 0, 32 * kMiB) == GPUALLOC_OK);
  CHECK(Find(handle, 64 * kMiB) == miopenStatusUnknownError);
  CHECK(strstr(gpualloc_last_error(), "out of memory") != NULL);
  CHECK(Stats(a).num_ooms == 1);

  miopenDestroy(handle);
  gpualloc_destroy(a);
  printf("miopen_adapter_test: ok\n");
  return 0;
}
