// SPDX-License-Identifier: Apache-2.0
/* Stand-in for MIOpen 3.3.0's include/miopen/miopen.h (ROCm/MIOpen,
 * rocm_setup_version 3.3.0), the declarations gpualloc/miopen.h and its test
 * use, with MIOpen's names and signatures: the handle (create, with a
 * stream, destroy, set and get its stream), miopenStatus_t, the custom
 * allocator (miopenAllocatorFunction, miopenDeallocatorFunction,
 * miopenSetAllocator), and the Find 2.0 calls that allocate through it when
 * no workspace is given (convolution descriptor, problem, find options,
 * miopenFindSolutions). The definitions are in miopen_standin.cc. */
#ifndef MIOPEN_GUARD_MIOPEN_H_
#define MIOPEN_GUARD_MIOPEN_H_

#include <miopen/config.h>
#include <miopen/export.h>
#include <stdbool.h>
#include <stddef.h>

#if MIOPEN_BACKEND_HIP
#include <hip/hip_runtime_api.h>
#endif

#define MIOPEN_DECLARE_OBJECT(name) \
  struct name {};                   \
  typedef struct name* name##_t;

#ifdef __cplusplus
extern "C" {
#endif

#if MIOPEN_BACKEND_HIP
typedef hipStream_t miopenAcceleratorQueue_t;
#endif

MIOPEN_DECLARE_OBJECT(miopenHandle);

typedef enum {
  miopenStatusSuccess = 0,
  miopenStatusNotInitialized = 1,
  miopenStatusInvalidValue = 2,
  miopenStatusBadParm = 3,
  miopenStatusAllocFailed = 4,
  miopenStatusInternalError = 5,
  miopenStatusNotImplemented = 6,
  miopenStatusUnknownError = 7,
  miopenStatusUnsupportedOp = 8,
  miopenStatusGpuOperationsSkipped = 9,
  miopenStatusVersionMismatch = 10,
} miopenStatus_t;

MIOPEN_EXPORT const char* miopenGetErrorString(miopenStatus_t error);

typedef void* (*miopenAllocatorFunction)(void* context, size_t sizeBytes);
typedef void (*miopenDeallocatorFunction)(void* context, void* memory);

MIOPEN_EXPORT miopenStatus_t miopenCreate(miopenHandle_t* handle);
MIOPEN_EXPORT miopenStatus_t
miopenCreateWithStream(miopenHandle_t* handle, miopenAcceleratorQueue_t stream);
MIOPEN_EXPORT miopenStatus_t miopenDestroy(miopenHandle_t handle);
MIOPEN_EXPORT miopenStatus_t miopenSetStream(miopenHandle_t handle,
                                             miopenAcceleratorQueue_t streamID);
MIOPEN_EXPORT miopenStatus_t
miopenGetStream(miopenHandle_t handle, miopenAcceleratorQueue_t* streamID);
MIOPEN_EXPORT miopenStatus_t miopenSetAllocator(
    miopenHandle_t handle, miopenAllocatorFunction allocator,
    miopenDeallocatorFunction deallocator, void* allocatorContext);

MIOPEN_DECLARE_OBJECT(miopenConvolutionDescriptor);
MIOPEN_EXPORT miopenStatus_t
miopenCreateConvolutionDescriptor(miopenConvolutionDescriptor_t* convDesc);
MIOPEN_EXPORT miopenStatus_t
miopenDestroyConvolutionDescriptor(miopenConvolutionDescriptor_t convDesc);

MIOPEN_DECLARE_OBJECT(miopenProblem);
typedef enum {
  miopenProblemDirectionForward = 0,
  miopenProblemDirectionBackward = 1,
  miopenProblemDirectionBackwardWeights = 2,
} miopenProblemDirection_t;
MIOPEN_EXPORT miopenStatus_t miopenCreateConvProblem(
    miopenProblem_t* problem, miopenConvolutionDescriptor_t operatorDesc,
    miopenProblemDirection_t direction);
MIOPEN_EXPORT miopenStatus_t miopenDestroyProblem(miopenProblem_t problem);

MIOPEN_DECLARE_OBJECT(miopenFindOptions);
MIOPEN_EXPORT miopenStatus_t
miopenCreateFindOptions(miopenFindOptions_t* options);
MIOPEN_EXPORT miopenStatus_t
miopenDestroyFindOptions(miopenFindOptions_t options);
MIOPEN_EXPORT miopenStatus_t
miopenSetFindOptionWorkspaceLimit(miopenFindOptions_t options, size_t value);

MIOPEN_DECLARE_OBJECT(miopenSolution);
MIOPEN_EXPORT miopenStatus_t miopenFindSolutions(
    miopenHandle_t handle, miopenProblem_t problem, miopenFindOptions_t options,
    miopenSolution_t* solutions, size_t* numSolutions, size_t maxSolutions);

#ifdef __cplusplus
}
#endif

#endif  // MIOPEN_GUARD_MIOPEN_H_
