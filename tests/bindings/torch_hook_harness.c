// SPDX-License-Identifier: Apache-2.0
/* tests/bindings/torch_hook_harness.c: drives libgpualloc_torch.so from C,
 * without PyTorch or a GPU: dlopen by path, dlsym of the entry points, then a
 * bundled trace replayed through the C callers' malloc (try_malloc, NULL on
 * failure) and free (with record_stream and empty_cache mixed in) on the
 * simulated backend (GPUALLOC_BACKEND=sim). The callbacks PyTorch calls that
 * throw are driven from C++ by tests/bindings/torch_helper_test.py; the
 * 2.1/2.2 graph-pool hooks, whose MempoolId_t (a pair of unsigned long long)
 * C passes as a struct of two, are driven here too. Checks the statistics
 * through gpualloc_torch_get_stats, the error paths, an out-of-memory handler
 * (gpualloc_torch_set_oom_handler) that frees a cached block and retries,
 * and that the library exports
 * nothing but its entry points. Fails loudly at the first problem.
 *
 *   torch_hook_harness LIBRARY TRACE.csv */
#include <dlfcn.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpualloc/gpualloc.h" /* the types only */

typedef void* (*malloc_fn)(size_t, int, void*);
typedef void (*free_fn)(void*, size_t, int, void*);
typedef int (*empty_cache_fn)(void);
typedef int (*record_stream_fn)(void*, void*);
typedef const char* (*last_error_fn)(void);
typedef int (*get_stats_fn)(int, gpualloc_stats_t*);
typedef char* (*snapshot_fn)(int);
typedef void (*string_free_fn)(char*);
typedef int (*set_oom_handler_fn)(gpualloc_oom_handler_t, void*);

static malloc_fn torch_malloc;
static free_fn torch_free;
static empty_cache_fn torch_empty_cache;
static record_stream_fn torch_record_stream;
typedef void (*release_stream_fn)(void*);
static release_stream_fn torch_release_stream;
static last_error_fn torch_last_error;
static get_stats_fn torch_get_stats;
static snapshot_fn torch_snapshot_json;
static string_free_fn torch_string_free;
static set_oom_handler_fn torch_set_oom_handler;

static void Die(const char* what, long line) {
  fprintf(stderr,
          "torch_hook_harness: FAILED: %s (line %ld)\n  last error: %s\n", what,
          line, torch_last_error != NULL ? torch_last_error() : "-");
  exit(1);
}
#define CHECK(cond)                    \
  do {                                 \
    if (!(cond)) Die(#cond, __LINE__); \
  } while (0)

static void* Symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "torch_hook_harness: %s not exported: %s\n", name,
            dlerror());
    exit(1);
  }
  return f;
}

static gpualloc_stats_t Stats(void) {
  gpualloc_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK(torch_get_stats(0, &s) == 0);
  return s;
}

/* One parsed trace line: "seq,action,addr_or_id,size,stream". */
typedef struct {
  int is_alloc;
  uint64_t id;
  uint64_t size;
  uint64_t stream;
} Op;

static Op* LoadTrace(const char* path, size_t* count, uint64_t* max_id) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    perror(path);
    exit(1);
  }
  size_t capacity = 1024;
  Op* ops = malloc(capacity * sizeof(Op));
  CHECK(ops != NULL);
  char line[512];
  CHECK(fgets(line, sizeof(line), f) != NULL);
  CHECK(strncmp(line, "seq,action,addr_or_id,size,stream", 33) == 0);
  *count = 0;
  *max_id = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    unsigned long long seq, id, size, stream;
    char action[16];
    if (sscanf(line, "%llu,%15[a-z],%llu,%llu,%llu", &seq, action, &id, &size,
               &stream) != 5) {
      fprintf(stderr, "torch_hook_harness: %s: bad line: %s", path, line);
      exit(1);
    }
    CHECK(strcmp(action, "alloc") == 0 || strcmp(action, "free") == 0);
    if (*count == capacity) {
      capacity *= 2;
      ops = realloc(ops, capacity * sizeof(Op));
      CHECK(ops != NULL);
    }
    ops[*count].is_alloc = strcmp(action, "alloc") == 0;
    ops[*count].id = id;
    ops[*count].size = size;
    ops[*count].stream = stream;
    if (id > *max_id) *max_id = id;
    ++*count;
  }
  fclose(f);
  return ops;
}

static void* StreamOf(uint64_t stream) { return (void*)(uintptr_t)stream; }

/* The out-of-memory handler's state: a block it may free, and its calls. */
static void* oom_cached = NULL;
static size_t oom_cached_size = 0;
static int oom_calls = 0;
static size_t oom_size = 0;

/* Frees the cached block through the hook (handlers run without the
 * allocator's lock) and asks for a retry; with nothing cached, fails. */
static int FreeCacheAndRetry(const gpualloc_oom_info_t* info, void* user_data) {
  CHECK(user_data == &oom_calls);
  CHECK(info->message != NULL && strstr(info->message, "out of memory"));
  ++oom_calls;
  oom_size = info->size;
  if (oom_cached == NULL) return 0;
  torch_free(oom_cached, oom_cached_size, info->device, NULL);
  oom_cached = NULL;
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: torch_hook_harness LIBRARY TRACE.csv\n");
    return 2;
  }
  /* Before the first call: the hook reads the environment then. */
  setenv("GPUALLOC_BACKEND", "sim", 1);
  setenv("GPUALLOC_PREALLOCATE", "false", 1);

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "torch_hook_harness: dlopen: %s\n", dlerror());
    return 1;
  }
  torch_malloc = (malloc_fn)Symbol(lib, "gpualloc_torch_try_malloc");
  torch_free = (free_fn)Symbol(lib, "gpualloc_torch_free");
  torch_empty_cache = (empty_cache_fn)Symbol(lib, "gpualloc_torch_empty_cache");
  torch_record_stream =
      (record_stream_fn)Symbol(lib, "gpualloc_torch_try_record_stream");
  torch_release_stream =
      (release_stream_fn)Symbol(lib, "gpualloc_torch_release_stream");
  torch_last_error = (last_error_fn)Symbol(lib, "gpualloc_torch_last_error");
  torch_get_stats = (get_stats_fn)Symbol(lib, "gpualloc_torch_get_stats");
  torch_snapshot_json =
      (snapshot_fn)Symbol(lib, "gpualloc_torch_snapshot_json");
  torch_string_free = (string_free_fn)Symbol(lib, "gpualloc_torch_string_free");
  torch_set_oom_handler =
      (set_oom_handler_fn)Symbol(lib, "gpualloc_torch_set_oom_handler");

  /* The gpualloc library inside stays private: neither its C API nor its
   * C++ symbols are visible. */
  CHECK(dlsym(lib, "gpualloc_create") == NULL);
  CHECK(dlsym(lib, "gpualloc_malloc") == NULL);
  CHECK(dlsym(lib,
              "_ZN8gpualloc15CreateAllocatorERKNS_7OptionsESt10shared_"
              "ptrINS_7BackendEE") == NULL);
  CHECK(torch_last_error()[0] == '\0');

  size_t count = 0;
  uint64_t max_id = 0;
  Op* ops = LoadTrace(argv[2], &count, &max_id);
  void** live = calloc(max_id + 1, sizeof(void*));
  uint64_t* live_stream = calloc(max_id + 1, sizeof(uint64_t));
  size_t* live_size = calloc(max_id + 1, sizeof(size_t));
  CHECK(live != NULL && live_stream != NULL && live_size != NULL);

  uint64_t allocs = 0, frees = 0, recorded = 0, empties = 0;
  uint64_t requested_now = 0, peak_requested = 0;
  for (size_t i = 0; i < count; ++i) {
    const Op* op = &ops[i];
    if (op->is_alloc) {
      CHECK(live[op->id] == NULL);
      void* p = torch_malloc(op->size, 0, StreamOf(op->stream));
      if (p == NULL) Die("gpualloc_torch_malloc returned NULL", (long)i);
      live[op->id] = p;
      live_stream[op->id] = op->stream;
      live_size[op->id] = op->size;
      requested_now += op->size;
      if (requested_now > peak_requested) peak_requested = requested_now;
      ++allocs;
      /* Every 16th block is also used on a side stream. */
      if (allocs % 16 == 0) {
        CHECK(torch_record_stream(p, StreamOf(0x5100)) == 0);
        ++recorded;
      }
    } else {
      void* p = live[op->id];
      CHECK(p != NULL);
      torch_free(p, op->size, 0, StreamOf(live_stream[op->id]));
      live[op->id] = NULL;
      requested_now -= op->size;
      ++frees;
    }
    /* The side stream is destroyed and made again now and then. */
    if (i % 1000 == 499) {
      torch_release_stream(StreamOf(0x5100));
      CHECK(torch_last_error()[0] == '\0');
    }
    if (i % 1000 == 999) {
      CHECK(torch_empty_cache() == 0);
      ++empties;
    }
  }
  CHECK(torch_last_error()[0] == '\0');

  gpualloc_stats_t s = Stats();
  CHECK(s.num_allocs == allocs);
  CHECK(s.peak_bytes_requested == peak_requested);
  CHECK(s.peak_bytes_reserved >= s.peak_bytes_in_use);
  CHECK(s.num_ooms == 0);
  CHECK(recorded > 0);

  char* json = torch_snapshot_json(0);
  CHECK(json != NULL && json[0] == '{');
  torch_string_free(json);

  /* What the trace left live is freed now: nothing may leak. */
  uint64_t left = 0;
  for (uint64_t id = 0; id <= max_id; ++id) {
    if (live[id] != NULL) {
      torch_free(live[id], live_size[id], 0, StreamOf(live_stream[id]));
      ++left;
    }
  }
  s = Stats();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.bytes_requested == 0);
  CHECK(torch_empty_cache() == 0);
  s = Stats();
  CHECK(s.bytes_reserved == 0);
  CHECK(torch_last_error()[0] == '\0');

  /* Error paths: NULL from malloc with the reason kept; a bad free and an
   * unknown record_stream pointer are reported, and change nothing. */
  CHECK(torch_malloc((size_t)1 << 50, 0, NULL) == NULL);
  CHECK(strstr(torch_last_error(), "gpualloc_malloc") != NULL);
  CHECK(torch_malloc(16, 42, NULL) == NULL);
  CHECK(strstr(torch_last_error(), "ordinal 42") != NULL);
  torch_free((void*)0x7000, 16, 0, NULL);
  CHECK(strstr(torch_last_error(), "0x7000") != NULL);
  void* p = torch_malloc(1000, 0, NULL);
  CHECK(p != NULL);
  torch_free(p, 1000, 0, NULL);
  /* no longer live */
  CHECK(torch_record_stream(p, StreamOf(0x5100)) == GPUALLOC_NOT_FOUND);
  CHECK(strstr(torch_last_error(), "not a live allocation") != NULL);
  s = Stats();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.num_ooms == 1);

  /* A free with another size than the block was allocated with is reported
   * and frees nothing; an interior pointer keeps the allocator's reason. */
  p = torch_malloc(1000, 0, NULL);
  CHECK(p != NULL);
  const uint64_t in_use = Stats().bytes_in_use;
  torch_free(p, 999, 0, NULL);
  CHECK(strstr(torch_last_error(), "999 bytes") != NULL);
  CHECK(strstr(torch_last_error(), "allocated with 1000 bytes; not freed") !=
        NULL);
  CHECK(Stats().bytes_in_use == in_use);
  torch_free((char*)p + 256, 1000, 0, NULL);
  CHECK(strstr(torch_last_error(), "interior pointer, 256 bytes into") != NULL);
  CHECK(Stats().bytes_in_use == in_use);
  torch_free(p, 1000, 0, NULL);
  s = Stats();
  CHECK(s.bytes_in_use == 0);
  gpualloc_stats_t bad;
  memset(&bad, 0, sizeof(bad));
  CHECK(torch_get_stats(0, &bad) == GPUALLOC_INVALID_ARGUMENT);

  /* A private pool through PyTorch 2.1/2.2's hooks, as a CUDA graph capture
   * would use it (not capturing here): the stream's blocks come from the pool
   * until the pool is released; a second release is reported. */
  {
    typedef struct {
      unsigned long long first, second;
    } mempool_id; /* std::pair<unsigned long long, unsigned long long> */
    typedef void (*begin_fn)(int, void*, mempool_id);
    typedef void (*end_fn)(int, void*);
    typedef void (*release_fn)(int, mempool_id);
    begin_fn begin =
        (begin_fn)Symbol(lib, "gpualloc_torch_begin_allocate_stream_to_pool");
    end_fn end =
        (end_fn)Symbol(lib, "gpualloc_torch_end_allocate_stream_to_pool");
    release_fn release = (release_fn)Symbol(lib, "gpualloc_torch_release_pool");
    const mempool_id id = {7, 0};
    begin(0, StreamOf(0x6000), id);
    void* in_pool = torch_malloc(4096, 0, StreamOf(0x6000));
    CHECK(in_pool != NULL);
    end(0, StreamOf(0x6000));
    CHECK(Stats().pool_bytes_in_use == 4096);
    torch_free(in_pool, 4096, 0, StreamOf(0x6000));
    release(0, id);
    CHECK(Stats().pool_bytes_reserved == 0);
    release(0, id);
    CHECK(strstr(torch_last_error(), "pool (7, 0) of device 0") != NULL);
  }

  /* Sleep and wake through the current tag: the tagged block's memory goes
   * back to the device and comes back at the same address. */
  {
    typedef void (*set_tag_fn)(uint32_t);
    typedef int (*sleep_fn)(int, uint32_t, int);
    typedef int (*wake_fn)(int, uint32_t);
    set_tag_fn set_tag = (set_tag_fn)Symbol(lib, "gpualloc_torch_set_tag");
    sleep_fn sleep = (sleep_fn)Symbol(lib, "gpualloc_torch_sleep");
    wake_fn wake = (wake_fn)Symbol(lib, "gpualloc_torch_wake");
    set_tag(3);
    void* weights = torch_malloc(5u << 20, 0, NULL);
    set_tag(0);
    CHECK(weights != NULL);
    CHECK(sleep(0, 3, 0) == 0);
    CHECK(Stats().bytes_sleeping == (6u << 20));
    CHECK(sleep(0, 3, 0) == GPUALLOC_FAILED_PRECONDITION);
    CHECK(strstr(torch_last_error(), "asleep") != NULL);
    CHECK(wake(0, 3) == 0);
    CHECK(Stats().bytes_sleeping == 0);
    torch_free(weights, 5u << 20, 0, NULL);
  }

  /* Out-of-memory handler: a request too large for the limit calls it once
   * and still fails (counted); half the limit twice succeeds only because the
   * handler frees the first half. */
  CHECK(torch_set_oom_handler(FreeCacheAndRetry, &oom_calls) == 0);
  const uint64_t limit = Stats().bytes_limit;
  const uint64_t ooms = Stats().num_ooms;
  CHECK(torch_malloc((size_t)1 << 50, 0, NULL) == NULL);
  CHECK(oom_calls == 1 && oom_size == (size_t)1 << 50);
  CHECK(Stats().num_ooms == ooms + 1);
  oom_cached_size = (size_t)(limit / 2 + (4u << 20));
  oom_cached = torch_malloc(oom_cached_size, 0, NULL);
  CHECK(oom_cached != NULL);
  p = torch_malloc((size_t)(limit / 2), 0, NULL);
  CHECK(p != NULL);
  CHECK(oom_calls == 2 && oom_cached == NULL);
  CHECK(Stats().num_ooms == ooms + 1);
  torch_free(p, (size_t)(limit / 2), 0, NULL);
  CHECK(torch_set_oom_handler(NULL, NULL) == 0);
  CHECK(torch_malloc((size_t)1 << 50, 0, NULL) == NULL);
  CHECK(oom_calls == 2);
  s = Stats();
  CHECK(s.bytes_in_use == 0);

  printf("torch_hook_harness: %s: %" PRIu64 " allocs, %" PRIu64
         " frees (+%" PRIu64 " left live by the trace), %" PRIu64
         " record_stream, %" PRIu64 " empty_cache; peak requested %" PRIu64
         ", peak reserved %" PRIu64 ", backend allocs/frees %" PRIu64
         "/%" PRIu64 "\n",
         argv[2], allocs, frees, left, recorded, empties, peak_requested,
         s.peak_bytes_reserved, s.backend_allocs, s.backend_frees);
  free(ops);
  free(live);
  free(live_stream);
  free(live_size);
  /* The library is not closed: like PyTorch, the process keeps it. */
  return 0;
}
