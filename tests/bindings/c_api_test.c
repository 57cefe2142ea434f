// SPDX-License-Identifier: Apache-2.0
/* tests/bindings/c_api_test.c: the C API (gpualloc/gpualloc.h) from a program
 * written and compiled as C: creation from a string and from the environment,
 * errors with their messages, malloc/free on streams, record-stream, stats
 * (with an older, smaller struct and a newer, larger one), snapshot JSON, trim,
 * the per-thread last error, out-of-memory handlers, and host out-of-memory at
 * the boundary. On the
 * simulated device; exits non-zero at the first failed check. */
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
static const uint64_t kGiB = 1024ull * 1024 * 1024;
/* Grows on demand so that trim has something to return. */
static const char* const kConfig =
    "backend=sim,arch=h200,preallocate=false,device_memory=16GiB";

static gpualloc_stats_t Stats(gpualloc_t* a) {
  gpualloc_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  return s;
}

static void TestCreateFromString(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  CHECK(a != NULL);
  int n = 0;
  CHECK_OK(gpualloc_device_count(a, &n));
  CHECK(n == 1);
  gpualloc_destroy(a);
  gpualloc_destroy(NULL); /* a no-op */
}

static void TestBadConfiguration(void) {
  gpualloc_t* a = (gpualloc_t*)0x1; /* must be reset to NULL */
  CHECK_STATUS(gpualloc_create_isolated("backend=sim,mem_fraction=2", &a),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(a == NULL);
  CHECK_ERROR_MENTIONS("mem_fraction");
  CHECK_ERROR_MENTIONS("gpualloc_create_isolated");

  CHECK_STATUS(gpualloc_create_isolated("backend=sim,no_such_key=1", &a),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("no_such_key");
  CHECK_STATUS(gpualloc_create_isolated("backend=sim", NULL),
               GPUALLOC_INVALID_ARGUMENT);

  /* Configurations that could never allocate fail at creation, naming the
   * key and the value as written, not on every later malloc. */
  {
    static const char* const kNever[][3] = {
        {"backend=sim,memory_kind=fine", "memory_kind=\"fine\"", "backend=hip"},
        {"backend=sim,device_memory=255", "device_memory=\"255\"", "255"},
        {"backend=sim,device_memory=256", "device_memory=\"256\"",
         "smaller than one growth granule"},
        {"backend=sim,granularity=3", "granularity=\"3\"", "16 bytes"},
        {"backend=sim,granularity=4KiB,min_block=8KiB", "granularity=\"4KiB\"",
         "min_block=\"8KiB\""},
        {"backend=sim,min_block=9223372036854775808",
         "min_block=\"9223372036854775808\"", "granularity"},
        {"backend=sim,arch=mi300x,device_memory=1GiB,granularity=2064",
         "granularity=\"2064\"", "the profile's min_block=256"},
    };
    for (size_t i = 0; i < sizeof(kNever) / sizeof(kNever[0]); ++i) {
      a = (gpualloc_t*)0x1;
      CHECK_STATUS(gpualloc_create_isolated(kNever[i][0], &a),
                   GPUALLOC_INVALID_ARGUMENT);
      CHECK(a == NULL);
      CHECK_ERROR_MENTIONS(kNever[i][1]);
      CHECK_ERROR_MENTIONS(kNever[i][2]);
    }
  }

  /* A setting only allocator=bfc has, with another mode, fails at creation
   * whatever the backend: before the backend is looked for (on a machine
   * with a GPU the allocator is made only at the first malloc). */
  {
    static const char* const kBackends[] = {"backend=sim", "backend=cuda",
                                            "backend=hip", "backend=auto"};
    static const char* const kBfcOnly[][3] = {
        {"expandable=true,allocator=platform", "expandable=\"true\"",
         "allocator=\"platform\""},
        {"allocator=async,expandable=true", "expandable=\"true\"",
         "allocator=\"async\""},
        {"allocator=platform,size_divisions=4", "size_divisions=\"4\"",
         "allocator=\"platform\""},
        {"allocator=async,history=100", "history=\"100\"",
         "allocator=\"async\""},
        {"allocator=platform,front_cache=4MiB", "front_cache=\"4MiB\"",
         "allocator=\"platform\""},
    };
    char config[128];
    for (size_t b = 0; b < sizeof(kBackends) / sizeof(kBackends[0]); ++b) {
      for (size_t i = 0; i < sizeof(kBfcOnly) / sizeof(kBfcOnly[0]); ++i) {
        snprintf(config, sizeof(config), "%s,%s", kBackends[b], kBfcOnly[i][0]);
        a = (gpualloc_t*)0x1;
        CHECK_STATUS(gpualloc_create_isolated(config, &a),
                     GPUALLOC_INVALID_ARGUMENT);
        CHECK(a == NULL);
        CHECK_ERROR_MENTIONS(kBfcOnly[i][1]);
        CHECK_ERROR_MENTIONS(kBfcOnly[i][2]);
        CHECK_ERROR_MENTIONS("belongs to allocator=bfc");
      }
    }
    /* From the environment too, naming the variable. */
    setenv("GPUALLOC_EXPANDABLE", "true", 1);
    CHECK_STATUS(gpualloc_create("backend=cuda,allocator=platform", &a),
                 GPUALLOC_INVALID_ARGUMENT);
    CHECK(a == NULL);
    CHECK_ERROR_MENTIONS("GPUALLOC_EXPANDABLE=\"true\"");
    CHECK_ERROR_MENTIONS("config string allocator=\"platform\"");
    CHECK_ERROR_MENTIONS("unset GPUALLOC_EXPANDABLE");
    unsetenv("GPUALLOC_EXPANDABLE");
    /* expandable=auto falls back to separate regions: still fine. */
    CHECK_OK(gpualloc_create_isolated(
        "backend=sim,allocator=platform,expandable=auto", &a));
    gpualloc_destroy(a);
  }
}

static void TestCreateFromEnvironment(void) {
  setenv("GPUALLOC_BACKEND", "sim", 1);
  setenv("GPUALLOC_PREALLOCATE", "false", 1);
  setenv("GPUALLOC_MEM_LIMIT", "1GiB", 1);
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create(NULL, &a));
  CHECK(Stats(a).bytes_limit == kGiB);
  gpualloc_destroy(a);

  /* The string wins over the environment. */
  CHECK_OK(gpualloc_create("mem_limit=2GiB", &a));
  CHECK(Stats(a).bytes_limit == 2 * kGiB);
  gpualloc_destroy(a);

  /* _isolated does not read it: backend=sim must come from the string. */
  CHECK_OK(gpualloc_create_isolated("backend=sim,device_memory=16GiB", &a));
  CHECK(Stats(a).bytes_limit != kGiB);
  gpualloc_destroy(a);

  /* A bad variable is an error naming it. */
  setenv("GPUALLOC_MEM_FRACTION", "lots", 1);
  CHECK_STATUS(gpualloc_create(NULL, &a), GPUALLOC_INVALID_ARGUMENT);
  CHECK(a == NULL);
  CHECK_ERROR_MENTIONS("GPUALLOC_MEM_FRACTION");
  unsetenv("GPUALLOC_MEM_FRACTION");

  /* A misspelt variable is an error naming it and the one it resembles;
   * _isolated does not read the environment. */
  setenv("GPUALLOC_PREALOCATE", "false", 1);
  CHECK_STATUS(gpualloc_create(NULL, &a), GPUALLOC_INVALID_ARGUMENT);
  CHECK(a == NULL);
  CHECK_ERROR_MENTIONS("GPUALLOC_PREALOCATE=\"false\"");
  CHECK_ERROR_MENTIONS("did you mean GPUALLOC_PREALLOCATE?");
  CHECK_OK(gpualloc_create_isolated("backend=sim", &a));
  gpualloc_destroy(a);
  unsetenv("GPUALLOC_PREALOCATE");
  unsetenv("GPUALLOC_MEM_LIMIT");
  unsetenv("GPUALLOC_PREALLOCATE");
  unsetenv("GPUALLOC_BACKEND");
}

/* gpualloc_create_pytorch: gpualloc_create with PyTorch's defaults, grow on
 * demand up to the whole device; what the string or a variable sets wins. */
static void TestCreatePytorch(void) {
  setenv("GPUALLOC_BACKEND", "sim", 1);
  setenv("GPUALLOC_DEVICE_MEMORY", "1GiB", 1);
  gpualloc_t* a = (gpualloc_t*)0x1;
  CHECK_OK(gpualloc_create_pytorch(NULL, &a));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 1 << 20, NULL, &p));
  gpualloc_stats_t s = Stats(a);
  CHECK(s.bytes_limit == kGiB);        /* mem_fraction 1: no cap */
  CHECK(s.bytes_reserved < 64 * kMiB); /* nothing preallocated */
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  gpualloc_destroy(a);

  /* gpualloc_create keeps JAX's: 75%, preallocated on first use. */
  CHECK_OK(gpualloc_create(NULL, &a));
  CHECK_OK(gpualloc_malloc(a, 0, 1 << 20, NULL, &p));
  s = Stats(a);
  CHECK(s.bytes_limit == 3 * kGiB / 4);
  CHECK(s.bytes_reserved == s.bytes_limit);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  gpualloc_destroy(a);

  /* Set by the user: wins over PyTorch's defaults. */
  setenv("PYTORCH_CUDA_ALLOC_CONF", "per_process_memory_fraction:0.5", 1);
  CHECK_OK(gpualloc_create_pytorch("preallocate=true", &a));
  CHECK_OK(gpualloc_malloc(a, 0, 1 << 20, NULL, &p));
  s = Stats(a);
  CHECK(s.bytes_limit == kGiB / 2);
  CHECK(s.bytes_reserved == s.bytes_limit);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  gpualloc_destroy(a);

  /* Errors as gpualloc_create's, named after the call. */
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:true", 1);
  a = (gpualloc_t*)0x1;
  CHECK_STATUS(gpualloc_create_pytorch(NULL, &a), GPUALLOC_INVALID_ARGUMENT);
  CHECK(a == NULL);
  CHECK_ERROR_MENTIONS("gpualloc_create_pytorch");
  CHECK_ERROR_MENTIONS("expandable_segments=\"true\"");
  CHECK_ERROR_MENTIONS("not True or False");
  CHECK_STATUS(gpualloc_create_pytorch(NULL, NULL), GPUALLOC_INVALID_ARGUMENT);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("GPUALLOC_DEVICE_MEMORY");
  unsetenv("GPUALLOC_BACKEND");
}

static void TestMallocFreeStreams(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* const s1 = (void*)0x1000;
  void* const s2 = (void*)0x2000;

  void* p = NULL;
  void* q = NULL;
  void* z = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 1000000, s1, &p));
  CHECK_OK(gpualloc_malloc(a, 0, 4096, NULL, &q));
  CHECK_OK(gpualloc_malloc(a, 0, 0, s2, &z)); /* 0 bytes: unique, non-null */
  CHECK(p != NULL && q != NULL && z != NULL && p != q && q != z && p != z);
  gpualloc_stats_t s = Stats(a);
  CHECK(s.num_allocs == 3);
  CHECK(s.bytes_requested == 1000000 + 4096);
  CHECK(s.bytes_in_use >= s.bytes_requested);
  CHECK(s.bytes_reserved >= s.bytes_in_use);

  void* aligned = NULL;
  CHECK_OK(gpualloc_malloc_aligned(a, 0, 100, 1 << 20, s1, &aligned));
  CHECK(((uintptr_t)aligned & ((1u << 20) - 1)) == 0);
  void* rejected = (void*)0x1;
  CHECK_STATUS(gpualloc_malloc_aligned(a, 0, 100, 3, s1, &rejected),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(rejected == NULL);
  CHECK_ERROR_MENTIONS("gpualloc_malloc_aligned");

  /* p is also used on s2; its free names s1. */
  CHECK_OK(gpualloc_record_stream(a, 0, p, s2));
  CHECK_OK(gpualloc_validate(a, 0));
  CHECK_OK(gpualloc_free(a, 0, p, s1));
  CHECK_OK(gpualloc_free(a, 0, q, NULL));
  CHECK_OK(gpualloc_free(a, 0, z, s2));
  CHECK_OK(gpualloc_free(a, 0, aligned, s1));
  CHECK_OK(gpualloc_free(a, 0, NULL, s2)); /* a no-op */
  CHECK_OK(gpualloc_validate(a, 0));
  s = Stats(a);
  CHECK(s.bytes_in_use == 0);
  CHECK(s.num_allocs == 4);

  /* record_stream on a pointer that is not live. */
  CHECK(gpualloc_record_stream(a, 0, p, s2) != GPUALLOC_OK);
  CHECK_ERROR_MENTIONS("gpualloc_record_stream");

  /* Streams about to be destroyed: on one device, on all; never seen. */
  CHECK_OK(gpualloc_release_stream(a, 0, s2));
  CHECK_OK(gpualloc_release_stream(a, GPUALLOC_ALL_DEVICES, s1));
  CHECK_OK(gpualloc_release_stream(a, 0, (void*)0x7700));
  CHECK_OK(gpualloc_validate(a, 0));
  CHECK_STATUS(gpualloc_release_stream(NULL, 0, s1), GPUALLOC_INVALID_ARGUMENT);

  /* Out of memory: ResourceExhausted with a report, *out NULL, counted. */
  void* big = (void*)0x1;
  CHECK_STATUS(gpualloc_malloc(a, 0, (size_t)64 * kGiB, s1, &big),
               GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(big == NULL);
  CHECK(strlen(gpualloc_last_error()) > 20);
  CHECK(Stats(a).num_ooms == 1);

  /* A device that does not exist, and no handle. */
  CHECK_STATUS(gpualloc_malloc(a, 3, 16, NULL, &big),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("ordinal 3");
  CHECK_STATUS(gpualloc_malloc(NULL, 0, 16, NULL, &big),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("NULL");
  gpualloc_destroy(a);
}

static void TestBadFreeChangesNothing(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 1 << 20, NULL, &p));
  const gpualloc_stats_t before = Stats(a);

  char* interior = (char*)p + 256;
  char expected[40];
  snprintf(expected, sizeof(expected), "%#" PRIxPTR, (uintptr_t)interior);
  CHECK(gpualloc_free(a, 0, interior, NULL) != GPUALLOC_OK);
  CHECK_ERROR_MENTIONS(expected);
  CHECK_ERROR_MENTIONS("gpualloc_free");

  const gpualloc_stats_t after = Stats(a);
  CHECK(memcmp(&before, &after, sizeof(before)) == 0);
  CHECK_OK(gpualloc_validate(a, 0));

  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  /* A second free is an error naming the address too. */
  snprintf(expected, sizeof(expected), "%#" PRIxPTR, (uintptr_t)p);
  CHECK(gpualloc_free(a, 0, p, NULL) != GPUALLOC_OK);
  CHECK_ERROR_MENTIONS(expected);
  CHECK(Stats(a).bytes_in_use == 0);
  gpualloc_destroy(a);
}

/* An older caller's struct: only the fields up to bytes_reserved. The library
 * fills those and nothing past them. */
typedef struct {
  uint64_t struct_size;
  uint64_t num_allocs;
  uint64_t bytes_in_use;
  uint64_t peak_bytes_in_use;
  uint64_t largest_alloc_size;
  uint64_t bytes_limit;
  uint64_t bytes_reserved;
} old_stats_t;

static void TestStatsStructSize(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 5000, NULL, &p));

  struct {
    old_stats_t old;
    uint64_t guard;
  } buf;
  memset(&buf, 0xAB, sizeof(buf));
  buf.old.struct_size = sizeof(old_stats_t);
  CHECK_OK(gpualloc_get_stats(a, 0, (gpualloc_stats_t*)&buf.old));
  CHECK(buf.old.struct_size == sizeof(old_stats_t));
  CHECK(buf.old.num_allocs == 1);
  CHECK(buf.old.bytes_in_use >= 5000);
  CHECK(buf.old.bytes_limit == 12 * kGiB); /* 0.75 of 16 GiB */
  CHECK(buf.guard == 0xABABABABABABABABull);

  /* A newer caller's struct (fields appended that this library does not
   * know): this library's fields are filled, the new ones left alone. */
  struct {
    gpualloc_stats_t known;
    uint64_t newer_field;
    double newer_ratio;
    uint64_t guard;
  } newer;
  memset(&newer, 0xCD, sizeof(newer));
  newer.known.struct_size = offsetof(__typeof__(newer), guard);
  CHECK_OK(gpualloc_get_stats(a, 0, (gpualloc_stats_t*)&newer));
  CHECK(newer.known.struct_size == offsetof(__typeof__(newer), guard));
  CHECK(newer.known.num_allocs == 1);
  CHECK(newer.known.bytes_in_use >= 5000);
  CHECK(newer.known.bytes_limit == 12 * kGiB);
  CHECK(newer.known.fragmentation >= 0.0 && newer.known.fragmentation <= 1.0);
  CHECK(newer.newer_field == 0xCDCDCDCDCDCDCDCDull);
  {
    uint64_t ratio_bits;
    memcpy(&ratio_bits, &newer.newer_ratio, sizeof(ratio_bits));
    CHECK(ratio_bits == 0xCDCDCDCDCDCDCDCDull);
  }
  CHECK(newer.guard == 0xCDCDCDCDCDCDCDCDull);

  /* Too small to hold even struct_size: refused. */
  gpualloc_stats_t s;
  memset(&s, 0, sizeof(s));
  CHECK_STATUS(gpualloc_get_stats(a, 0, &s), GPUALLOC_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("struct_size");
  s.struct_size = sizeof(s.struct_size) - 1;
  CHECK_STATUS(gpualloc_get_stats(a, 0, &s), GPUALLOC_INVALID_ARGUMENT);
  s.struct_size = sizeof(s.struct_size); /* only the size: nothing to fill */
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  CHECK(s.num_allocs == 0);

  /* A size between two field boundaries: whole fields only, never half of
   * one. 12 bytes hold struct_size and half of num_allocs; 20 hold
   * num_allocs and half of bytes_in_use. */
  memset(&s, 0xEE, sizeof(s));
  s.struct_size = 12;
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  CHECK(s.struct_size == 12);
  CHECK(s.num_allocs == 0xEEEEEEEEEEEEEEEEull);
  CHECK(s.bytes_in_use == 0xEEEEEEEEEEEEEEEEull);
  s.struct_size = 20;
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  CHECK(s.num_allocs == 1);
  CHECK(s.bytes_in_use == 0xEEEEEEEEEEEEEEEEull);
  /* all but the last byte of fragmentation */
  s.struct_size = offsetof(gpualloc_stats_t, fragmentation) + 7;
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  CHECK(s.bytes_in_use >= 5000);
  {
    uint64_t bits;
    memcpy(&bits, &s.fragmentation, sizeof(bits));
    CHECK(bits == 0xEEEEEEEEEEEEEEEEull);
  }
  CHECK(s.pool_bytes_reserved == 0xEEEEEEEEEEEEEEEEull);
  s.struct_size = sizeof(s);
  CHECK_OK(gpualloc_get_stats(a, 0, &s));
  CHECK(s.pool_bytes_reserved == 0 && s.pool_bytes_in_use == 0);

  /* Peaks: reset to the current values. */
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  CHECK(Stats(a).peak_bytes_in_use >= 5000);
  CHECK_OK(gpualloc_reset_peak_stats(a, 0));
  CHECK(Stats(a).peak_bytes_in_use == 0);
  gpualloc_destroy(a);
}

/* The history option and the PyTorch snapshot pickle written to a file. */
static void TestTorchSnapshotPickle(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(
      "backend=sim,device_memory=1GiB,preallocate=false,history=64", &a));
  gpualloc_set_context("c test");
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 4096, NULL, &p));
  gpualloc_set_context(NULL);
  char* json = NULL;
  CHECK_OK(gpualloc_snapshot_json(a, 0, &json, NULL));
  CHECK(strstr(json, "\"action\":\"alloc\"") != NULL);
  CHECK(strstr(json, "\"context\":\"c test\"") != NULL);
  gpualloc_string_free(json);
  char path[] = "/tmp/gpualloc_c_api_test_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK_OK(gpualloc_snapshot_torch_pickle(a, 0, path));
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  unsigned char head[2] = {0, 0};
  CHECK(fread(head, 1, 2, f) == 2);
  CHECK(head[0] == 0x80 && head[1] == 2); /* pickle protocol 2 */
  fclose(f);
  remove(path);
  CHECK_STATUS(gpualloc_snapshot_torch_pickle(a, 0, NULL),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_STATUS(gpualloc_snapshot_torch_pickle(a, 0, "/nonexistent/dir/x"),
               GPUALLOC_UNAVAILABLE);
  CHECK(strstr(gpualloc_last_error(), "/nonexistent/dir/x") != NULL);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  gpualloc_destroy(a);
}

static void TestSnapshotAndTrim(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 3 << 20, (void*)0x77, &p));

  char* json = NULL;
  size_t length = 0;
  CHECK_OK(gpualloc_snapshot_json(a, 0, &json, &length));
  CHECK(json != NULL);
  CHECK(length == strlen(json) && length > 0);
  CHECK(json[0] == '{' && json[length - 1] == '}');
  CHECK(strstr(json, "\"format\":\"gpualloc-snapshot\"") != NULL);
  CHECK(strstr(json, "\"regions\":[{") != NULL);
  CHECK(strstr(json, "\"state\":\"in_use\"") != NULL);
  CHECK(strstr(json, "\"requested\":3145728") != NULL);
  CHECK(strstr(json, "\"stream\":119") != NULL); /* 0x77 */
  CHECK(strstr(json, "\"bytes_in_use\":") != NULL);
  gpualloc_string_free(json);
  CHECK_OK(gpualloc_snapshot_json(a, 0, &json, NULL));
  gpualloc_string_free(json);
  CHECK_STATUS(gpualloc_snapshot_json(a, 0, NULL, NULL),
               GPUALLOC_INVALID_ARGUMENT);

  /* Trim returns the region once it is fully free. */
  CHECK(Stats(a).bytes_reserved > 0);
  CHECK_OK(gpualloc_trim(a, 0));
  CHECK(Stats(a).bytes_reserved > 0); /* p is still live */
  CHECK_OK(gpualloc_free(a, 0, p, (void*)0x77));
  CHECK_OK(gpualloc_trim(a, GPUALLOC_ALL_DEVICES));
  gpualloc_stats_t s = Stats(a);
  CHECK(s.bytes_reserved == 0);
  CHECK(s.backend_frees >= 1);
  CHECK_OK(gpualloc_validate(a, 0));
  CHECK_STATUS(gpualloc_trim(a, 7), GPUALLOC_INVALID_ARGUMENT);

  /* The limit moves at run time: by fraction of the device, or bytes. */
  const uint64_t total_limit = Stats(a).bytes_limit;
  CHECK_STATUS(gpualloc_set_memory_fraction(a, 0, 1.5),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(strstr(gpualloc_last_error(), "fraction 1.5 is not in (0, 1]") != NULL);
  CHECK_STATUS(gpualloc_set_memory_fraction(a, 0, 0.0 / 0.0),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(Stats(a).bytes_limit == total_limit);
  CHECK_OK(gpualloc_set_memory_fraction(a, 0, 0.5));
  CHECK(Stats(a).bytes_limit > 0 && Stats(a).bytes_limit < total_limit);
  CHECK_OK(gpualloc_set_memory_limit(a, 0, 64ull << 20));
  CHECK(Stats(a).bytes_limit == 64ull << 20);
  CHECK_STATUS(gpualloc_set_memory_limit(a, 0, 0), GPUALLOC_INVALID_ARGUMENT);
  CHECK_STATUS(gpualloc_set_memory_limit(a, 7, 64ull << 20),
               GPUALLOC_INVALID_ARGUMENT);
  gpualloc_destroy(a);
}

/* The last error belongs to the thread that failed. */
struct ThreadArgs {
  gpualloc_t* a;
  char initial[64];
  char own[512];
};

static void* OtherThread(void* arg) {
  struct ThreadArgs* t = (struct ThreadArgs*)arg;
  snprintf(t->initial, sizeof(t->initial), "%s", gpualloc_last_error());
  void* p = NULL;
  if (gpualloc_malloc(t->a, 9, 16, NULL, &p) == GPUALLOC_OK) return NULL;
  snprintf(t->own, sizeof(t->own), "%s", gpualloc_last_error());
  return NULL;
}

static void TestLastErrorPerThread(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  CHECK(gpualloc_free(a, 0, (void*)0x12345600, NULL) != GPUALLOC_OK);
  CHECK_ERROR_MENTIONS("0x12345600");
  char mine[512];
  snprintf(mine, sizeof(mine), "%s", gpualloc_last_error());

  struct ThreadArgs t;
  memset(&t, 0, sizeof(t));
  t.a = a;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, OtherThread, &t) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(t.initial[0] == '\0');               /* a new thread starts clean */
  CHECK(strstr(t.own, "ordinal 9") != NULL); /* it saw its own failure */
  CHECK(strcmp(gpualloc_last_error(), mine) == 0); /* ours is untouched */

  /* A successful call leaves the message as it was (like errno). */
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 16, NULL, &p));
  CHECK(strcmp(gpualloc_last_error(), mine) == 0);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  gpualloc_destroy(a);
}

/* Host out-of-memory at the boundary. This program replaces the C++ library's
 * operator new(size_t) (its Itanium-ABI name, _Znwm, on LP64): while
 * fail_new is set on a thread, every allocation there throws std::bad_alloc
 * (through libstdc++'s own __throw_bad_alloc). A call must then come back
 * GPUALLOC_RESOURCE_EXHAUSTED with a message, never terminate the program:
 * the handler and the last-error store must not allocate again, or fall back
 * to a fixed message when they cannot. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GPUALLOC_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GPUALLOC_TEST_SANITIZED 1
#endif
/* Not under a sanitizer: its runtime owns operator new and would see our
 * malloc-backed blocks freed by its operator delete as a mismatch. */
#if defined(__GNUC__) && defined(__linux__) && defined(__LP64__) && \
    !defined(GPUALLOC_TEST_SANITIZED)
#define GPUALLOC_TEST_FAILING_NEW 1
static _Thread_local int fail_new = 0;

void _ZSt17__throw_bad_allocv(void) __attribute__((noreturn));
void* _Znwm(size_t size);
void* _Znwm(size_t size) {
  if (!fail_new) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p != NULL) return p;
  }
  _ZSt17__throw_bad_allocv();
}

struct OomArgs {
  gpualloc_t* a;
  gpualloc_status_t status;
  char error[256];
};

/* A fresh thread: its last-error string has no room yet, so even the message
 * cannot be stored and the fixed one stands in. */
static void* OomThread(void* arg) {
  struct OomArgs* t = (struct OomArgs*)arg;
  int n = -1;
  fail_new = 1;
  t->status = gpualloc_device_count(NULL, &n); /* its message allocates */
  fail_new = 0;
  snprintf(t->error, sizeof(t->error), "%s", gpualloc_last_error());
  return NULL;
}
#endif

static void TestOutOfHostMemoryAtTheBoundary(void) {
#ifdef GPUALLOC_TEST_FAILING_NEW
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 4096, NULL, &p));
  /* A long message first, so that this thread's last error has room. */
  CHECK(gpualloc_free(a, 0, (void*)0x12345600, NULL) != GPUALLOC_OK);

  /* (Calls whose error message goes through absl::StrFormat are not used
   * here: its sink flushes in a destructor, so an allocation failure there
   * terminates inside Abseil whatever the caller does.) */
  gpualloc_t* b = (gpualloc_t*)0x1;
  int n = -1;
  fail_new = 1;
  const gpualloc_status_t created = gpualloc_create_isolated(kConfig, &b);
  const gpualloc_status_t counted = gpualloc_device_count(NULL, &n);
  fail_new = 0;
  CHECK_STATUS(created, GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(b == NULL);
  CHECK_STATUS(counted, GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(n == -1);
  CHECK_ERROR_MENTIONS(
      "gpualloc_device_count: out of host memory (std::bad_alloc)");

  struct OomArgs t;
  memset(&t, 0, sizeof(t));
  t.a = a;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, OomThread, &t) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK_STATUS(t.status, GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(strcmp(t.error, "gpualloc: out of host memory (std::bad_alloc)") == 0);

  /* Nothing changed: the block is still live and freed normally. */
  CHECK(Stats(a).bytes_in_use >= 4096);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  CHECK_OK(gpualloc_validate(a, 0));
  gpualloc_destroy(a);
#else
  printf("c_api_test: out-of-host-memory check skipped on this platform\n");
#endif
}

/* An out-of-memory handler that frees the block it caches (through the same
 * handle: handlers run without the allocator's lock) and asks for a retry. */
struct OomCache {
  gpualloc_t* a;
  void* cached;
  int calls;
  gpualloc_oom_info_t last;
  char message[64];
};

static int FreeCacheAndRetry(const gpualloc_oom_info_t* info, void* user_data) {
  struct OomCache* cache = (struct OomCache*)user_data;
  ++cache->calls;
  cache->last = *info;
  snprintf(cache->message, sizeof(cache->message), "%s", info->message);
  cache->last.message = cache->message;
  if (cache->cached == NULL) return 0;
  if (gpualloc_free(cache->a, info->device, cache->cached, NULL) !=
      GPUALLOC_OK) {
    return 0;
  }
  cache->cached = NULL;
  return 1;
}

static void TestOomHandler(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(
      "backend=sim,arch=h200,preallocate=false,device_memory=16GiB,"
      "mem_limit=64MiB",
      &a));
  struct OomCache cache;
  memset(&cache, 0, sizeof(cache));
  cache.a = a;
  /* Before the device's first use: it gets the handler when it is created. */
  CHECK_OK(gpualloc_set_oom_handler(a, GPUALLOC_ALL_DEVICES, FreeCacheAndRetry,
                                    &cache));
  const size_t half = 32u << 20;
  void* kept = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, half, NULL, &kept));
  CHECK_OK(gpualloc_malloc(a, 0, half, NULL, &cache.cached));
  CHECK(cache.calls == 0);

  /* The handler frees the cached block: the request succeeds. */
  void* stream = (void*)(uintptr_t)0x10;
  void* p = NULL;
  CHECK_OK(gpualloc_malloc_aligned(a, 0, half / 2, 4096, stream, &p));
  CHECK(p != NULL);
  CHECK(cache.calls == 1);
  CHECK(cache.cached == NULL);
  CHECK(cache.last.device == 0);
  CHECK(cache.last.size == half / 2);
  CHECK(cache.last.alignment == 4096);
  CHECK(cache.last.stream == stream);
  CHECK(cache.last.bytes_limit == 64u << 20);
  CHECK(cache.last.bytes_in_use == 64u << 20);
  CHECK(strstr(cache.message, "out of memory") == cache.message);
  CHECK(Stats(a).num_ooms == 0); /* retried successfully: not counted */

  /* Nothing left to free: the handler says fail, once, and the error is the
   * report it was shown. */
  void* q = NULL;
  CHECK_STATUS(gpualloc_malloc(a, 0, half, NULL, &q),
               GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(q == NULL);
  CHECK(cache.calls == 2);
  CHECK_ERROR_MENTIONS(cache.message);
  CHECK(Stats(a).num_ooms == 1);

  /* Removed: not called any more. */
  CHECK_OK(gpualloc_set_oom_handler(a, 0, NULL, NULL));
  CHECK_STATUS(gpualloc_malloc(a, 0, half, NULL, &q),
               GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(cache.calls == 2);
  CHECK(Stats(a).num_ooms == 2);
  CHECK_STATUS(gpualloc_set_oom_handler(a, 7, NULL, NULL),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_STATUS(gpualloc_set_oom_handler(NULL, 0, NULL, NULL),
               GPUALLOC_INVALID_ARGUMENT);

  CHECK_OK(gpualloc_free(a, 0, p, stream));
  CHECK_OK(gpualloc_free(a, 0, kept, NULL));
  gpualloc_destroy(a);
}

/* Private pools: a stream's allocations come from its pool while it
 * allocates to it; the pool's memory goes back at the last release. */
static void TestPrivatePools(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* const s1 = (void*)0x1000;
  uint64_t pool = 0;
  CHECK_OK(gpualloc_create_pool(a, 0, &pool));
  CHECK(pool != 0);
  CHECK_OK(gpualloc_retain_pool(a, 0, pool));
  CHECK_OK(gpualloc_begin_allocate_to_pool(a, 0, pool, s1));
  CHECK_STATUS(gpualloc_begin_allocate_to_pool(a, 0, pool, s1),
               GPUALLOC_FAILED_PRECONDITION);
  CHECK_ERROR_MENTIONS("already allocates to pool");
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(a, 0, 1000, s1, &p));
  CHECK_OK(gpualloc_end_allocate_to_pool(a, 0, pool));
  gpualloc_stats_t s = Stats(a);
  CHECK(s.pool_bytes_in_use == 1024);
  CHECK(s.pool_bytes_reserved >= 1024);
  CHECK_OK(gpualloc_free(a, 0, p, s1));
  CHECK_OK(gpualloc_release_pool(a, 0, pool, s1));
  CHECK(Stats(a).pool_bytes_reserved > 0); /* one reference left */
  CHECK_OK(gpualloc_release_pool(a, 0, pool, s1));
  CHECK(Stats(a).pool_bytes_reserved == 0);
  CHECK_STATUS(gpualloc_release_pool(a, 0, pool, s1), GPUALLOC_NOT_FOUND);
  CHECK_ERROR_MENTIONS("released");
  CHECK_STATUS(gpualloc_create_pool(a, 0, NULL), GPUALLOC_INVALID_ARGUMENT);
  CHECK_OK(gpualloc_validate(a, 0));
  gpualloc_destroy(a);
}

/* Sharing a block: two isolated handles stand for two processes (the
 * simulator's fake memory shares between instances of one process). */
static void TestExportImport(void) {
  gpualloc_t* exporter = NULL;
  gpualloc_t* importer = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &exporter));
  CHECK_OK(gpualloc_create_isolated(kConfig, &importer));
  void* p = NULL;
  CHECK_OK(gpualloc_malloc(exporter, 0, kMiB, NULL, &p));
  size_t length = 0;
  char small[4];
  CHECK_STATUS(gpualloc_export(exporter, 0, p, small, sizeof(small), &length),
               GPUALLOC_RESOURCE_EXHAUSTED);
  CHECK(length > sizeof(small));
  CHECK_ERROR_MENTIONS("*length");
  char description[1024];
  CHECK(length <= sizeof(description));
  CHECK_OK(gpualloc_export(exporter, 0, p, description, sizeof(description),
                           &length));
  CHECK(Stats(exporter).bytes_exported >= kMiB);
  void* q = NULL;
  size_t bytes = 0;
  CHECK_OK(gpualloc_import(importer, 0, description, length, &q, &bytes));
  CHECK(q != NULL);
  CHECK(bytes >= kMiB);
  CHECK(Stats(importer).bytes_imported == bytes);
  /* Freed while imported: held until the import is closed. */
  CHECK_OK(gpualloc_free(exporter, 0, p, NULL));
  CHECK(Stats(exporter).bytes_held_for_importers == bytes);
  CHECK_OK(gpualloc_close_import(importer, 0, q));
  CHECK_STATUS(gpualloc_close_import(importer, 0, q),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK_OK(gpualloc_trim(exporter, 0));
  CHECK(Stats(exporter).bytes_held_for_importers == 0);
  CHECK(Stats(exporter).bytes_in_use == 0);
  /* A garbled description. */
  description[length / 2] ^= 0x40;
  CHECK_STATUS(gpualloc_import(importer, 0, description, length, &q, &bytes),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(q == NULL);
  CHECK_ERROR_MENTIONS("description");
  /* Any length is an answer, none a crash: one no description has. */
  q = description;
  CHECK_STATUS(gpualloc_import(importer, 0, description, SIZE_MAX, &q, &bytes),
               GPUALLOC_INVALID_ARGUMENT);
  CHECK(q == NULL);
  CHECK_ERROR_MENTIONS("longer than any description");
  CHECK_STATUS(
      gpualloc_import(importer, 0, description, (size_t)1 << 40, &q, &bytes),
      GPUALLOC_INVALID_ARGUMENT);
  gpualloc_destroy(importer);
  gpualloc_destroy(exporter);
}

/* Sleep and wake: a tag's memory is given back and mapped again at the same
 * address; a sleeping tag refuses frees and allocations. */
static void TestSleepWake(void) {
  gpualloc_t* a = NULL;
  CHECK_OK(gpualloc_create_isolated(kConfig, &a));
  void* p = NULL;
  void* untagged = NULL;
  CHECK_OK(gpualloc_malloc_tagged(a, 0, 3u << 20, 0, NULL, 5, &p));
  CHECK_OK(gpualloc_malloc(a, 0, 1000, NULL, &untagged));
  const uint64_t reserved = Stats(a).bytes_reserved;
  gpualloc_sleep_report_t report;
  memset(&report, 0, sizeof(report));
  CHECK_STATUS(gpualloc_sleep(a, 0, 5, 0, &report), GPUALLOC_INVALID_ARGUMENT);
  report.struct_size = sizeof(report);
  /* The simulated device's addresses are numbers only: no host copies. */
  CHECK_STATUS(gpualloc_sleep(a, 0, 5, 1, &report),
               GPUALLOC_FAILED_PRECONDITION);
  CHECK_ERROR_MENTIONS("host_copy");
  CHECK_OK(gpualloc_sleep(a, 0, 5, 0, &report));
  CHECK(report.allocations == 1 && report.bytes_released == (4u << 20));
  CHECK(report.bytes_kept == 0 && report.bytes_backed_up == 0);
  gpualloc_stats_t s = Stats(a);
  CHECK(s.bytes_sleeping == (4u << 20));
  CHECK(s.bytes_reserved == reserved - (4u << 20));
  void* q = NULL;
  CHECK_STATUS(gpualloc_malloc_tagged(a, 0, 10, 0, NULL, 5, &q),
               GPUALLOC_FAILED_PRECONDITION);
  CHECK_ERROR_MENTIONS("asleep");
  CHECK_STATUS(gpualloc_free(a, 0, p, NULL), GPUALLOC_FAILED_PRECONDITION);
  CHECK_OK(gpualloc_validate(a, 0));
  CHECK_OK(gpualloc_wake(a, 0, 5));
  CHECK_STATUS(gpualloc_wake(a, 0, 5), GPUALLOC_FAILED_PRECONDITION);
  CHECK(Stats(a).bytes_sleeping == 0);
  CHECK_OK(gpualloc_free(a, 0, p, NULL));
  CHECK_OK(gpualloc_free(a, 0, untagged, NULL));
  CHECK_STATUS(gpualloc_sleep(a, 0, 0, 0, NULL), GPUALLOC_INVALID_ARGUMENT);
  CHECK_OK(gpualloc_validate(a, 0));
  gpualloc_destroy(a);
}

static void TestNames(void) {
  CHECK(strcmp(gpualloc_status_name(GPUALLOC_OK), "OK") == 0);
  CHECK(strcmp(gpualloc_status_name(GPUALLOC_RESOURCE_EXHAUSTED),
               "RESOURCE_EXHAUSTED") == 0);
  CHECK(strcmp(gpualloc_status_name((gpualloc_status_t)99), "UNKNOWN_STATUS") ==
        0);
  CHECK(strlen(gpualloc_version()) > 0);
}

int main(void) {
  TestCreateFromString();
  TestBadConfiguration();
  TestCreateFromEnvironment();
  TestCreatePytorch();
  TestMallocFreeStreams();
  TestBadFreeChangesNothing();
  TestStatsStructSize();
  TestSnapshotAndTrim();
  TestTorchSnapshotPickle();
  TestLastErrorPerThread();
  TestOutOfHostMemoryAtTheBoundary();
  TestOomHandler();
  TestPrivatePools();
  TestSleepWake();
  TestExportImport();
  TestNames();
  printf("c_api_test: %d checks passed (gpualloc %s)\n", checks,
         gpualloc_version());
  return 0;
}
