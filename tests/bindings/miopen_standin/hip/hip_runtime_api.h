// SPDX-License-Identifier: Apache-2.0
// Stand-in for HIP's hip/hip_runtime_api.h (ROCm 5.2, Debian's
// libamdhip64-dev), the one name miopen.h needs: hipStream_t.
#ifndef GPUALLOC_STANDIN_HIP_RUNTIME_API_H_
#define GPUALLOC_STANDIN_HIP_RUNTIME_API_H_

typedef struct ihipStream_t* hipStream_t;

#endif  // GPUALLOC_STANDIN_HIP_RUNTIME_API_H_
