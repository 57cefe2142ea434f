// SPDX-License-Identifier: Apache-2.0
/* examples/embed.c: a C program using gpualloc through its C API only, built
 * against an installed copy:
 *
 *   cc embed.c $(pkg-config --cflags --libs gpualloc) -o embed
 *   ./embed                      # the simulated device (backend=sim)
 *   GPUALLOC_BACKEND=cuda ./embed '' # a real one, from the environment
 *
 * The first argument is a configuration string ("key=value,..."); the
 * environment (GPUALLOC_* variables) fills what it leaves out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpualloc/gpualloc.h"

static int Fail(const char* what, gpualloc_status_t status) {
  fprintf(stderr, "embed: %s failed: %s: %s\n", what,
          gpualloc_status_name(status), gpualloc_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* config = argc > 1 ? argv[1] : "backend=sim,preallocate=false";
  gpualloc_t* a = NULL;
  gpualloc_status_t s = gpualloc_create(config, &a);
  if (s != GPUALLOC_OK) return Fail("gpualloc_create", s);

  /* Streams are the runtime's handles (cudaStream_t, hipStream_t); NULL is
   * the default stream. The simulator accepts any value. */
  void* const stream = NULL;
  void* blocks[8];
  for (int i = 0; i < 8; ++i) {
    s = gpualloc_malloc(a, 0, (size_t)(i + 1) << 20, stream, &blocks[i]);
    if (s != GPUALLOC_OK) return Fail("gpualloc_malloc", s);
  }
  for (int i = 0; i < 8; i += 2) {
    s = gpualloc_free(a, 0, blocks[i], stream);
    if (s != GPUALLOC_OK) return Fail("gpualloc_free", s);
  }

  gpualloc_stats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats);
  s = gpualloc_get_stats(a, 0, &stats);
  if (s != GPUALLOC_OK) return Fail("gpualloc_get_stats", s);
  printf("gpualloc %s: %llu bytes in use, %llu reserved, fragmentation %.3f\n",
         gpualloc_version(), (unsigned long long)stats.bytes_in_use,
         (unsigned long long)stats.bytes_reserved, stats.fragmentation);

  char* json = NULL;
  size_t length = 0;
  s = gpualloc_snapshot_json(a, 0, &json, &length);
  if (s != GPUALLOC_OK) return Fail("gpualloc_snapshot_json", s);
  printf("snapshot: %zu bytes of JSON\n", length);
  gpualloc_string_free(json);

  for (int i = 1; i < 8; i += 2) {
    s = gpualloc_free(a, 0, blocks[i], stream);
    if (s != GPUALLOC_OK) return Fail("gpualloc_free", s);
  }
  s = gpualloc_trim(a, GPUALLOC_ALL_DEVICES);
  if (s != GPUALLOC_OK) return Fail("gpualloc_trim", s);
  s = gpualloc_get_stats(a, 0, &stats);
  if (s != GPUALLOC_OK) return Fail("gpualloc_get_stats", s);
  printf("after free and trim: %llu bytes in use, %llu reserved\n",
         (unsigned long long)stats.bytes_in_use,
         (unsigned long long)stats.bytes_reserved);
  gpualloc_destroy(a);
  return stats.bytes_in_use == 0 ? 0 : 1;
}
