// SPDX-License-Identifier: Apache-2.0
// Stand-in for MIOpen's generated miopen/config.h: the HIP backend.
#ifndef GPUALLOC_STANDIN_MIOPEN_CONFIG_H_
#define GPUALLOC_STANDIN_MIOPEN_CONFIG_H_
#define MIOPEN_BACKEND_OPENCL 0
#define MIOPEN_BACKEND_HIP 1
#endif  // GPUALLOC_STANDIN_MIOPEN_CONFIG_H_
