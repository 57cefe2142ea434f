// SPDX-License-Identifier: Apache-2.0
// Stand-in for MIOpen's generated miopen/export.h.
#ifndef GPUALLOC_STANDIN_MIOPEN_EXPORT_H_
#define GPUALLOC_STANDIN_MIOPEN_EXPORT_H_
#define MIOPEN_EXPORT __attribute__((visibility("default")))
#endif  // GPUALLOC_STANDIN_MIOPEN_EXPORT_H_
