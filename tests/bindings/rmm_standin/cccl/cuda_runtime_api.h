// SPDX-License-Identifier: Apache-2.0
// Stand-in for the CUDA runtime's cuda_runtime_api.h (CUDA 12.x), the names
// RMM's and CCCL's stream headers use: cudaStream_t and the two special
// stream handles (driver_types.h). No function: there is no device.
#ifndef GPUALLOC_STANDIN_CUDA_RUNTIME_API_H_
#define GPUALLOC_STANDIN_CUDA_RUNTIME_API_H_

typedef struct CUstream_st* cudaStream_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#endif  // GPUALLOC_STANDIN_CUDA_RUNTIME_API_H_
