// SPDX-License-Identifier: Apache-2.0
// runtime/layer.h: included by every header of runtime/, so that a file of a
// lower layer (backends/, core/ or arch/) that includes one fails to build.
// Each layer's Meson library compiles with -DGPUALLOC_LAYER=<its level>
// (meson.build: arch 0, core 1, backends 2, runtime 3, bindings 4, tools 5);
// tests define none and may include anything.
#ifndef GPUALLOC_RUNTIME_LAYER_H_
#define GPUALLOC_RUNTIME_LAYER_H_

#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 3
#error \
    "runtime/ is a higher layer than the file including this header: the layers are arch < core < backends < runtime < bindings < tools, and a layer may include only its own headers and those below it"
#endif

#endif  // GPUALLOC_RUNTIME_LAYER_H_
