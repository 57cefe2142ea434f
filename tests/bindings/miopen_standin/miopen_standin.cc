// SPDX-License-Identifier: Apache-2.0
// The definitions behind the stand-in miopen/miopen.h (MIOpen 3.3.0), as
// src/handle_api.cpp, src/hip/handlehip.cpp, src/include/miopen/allocator.hpp
// and src/problem.cpp do them: a handle holds its stream and an allocator
// (default: hipMalloc, absent here: a handle without a custom allocator
// cannot allocate); an allocation through a custom allocator that returns
// NULL for a non-zero size throws "Custom allocator failed to allocate
// memory for buffer size N", which the C API turns into
// miopenStatusUnknownError; the memory goes back through the deallocator
// when its owner goes (RAII). miopenFindSolutions without a preallocated
// workspace allocates the workspace, min(the options' limit, the
// convolution's workspace size), runs no kernel (none here) and frees it:
// the stand-in's convolution needs 64 MiB of workspace.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "miopen/miopen.h"

namespace {

constexpr std::size_t kWorkspaceMax = std::size_t{64} << 20;

struct Exception : std::runtime_error {
  Exception(miopenStatus_t s, const std::string& msg)
      : std::runtime_error(msg), status(s) {}
  miopenStatus_t status;
};

struct Allocator {
  miopenAllocatorFunction allocator = nullptr;
  miopenDeallocatorFunction deallocator = nullptr;
  void* context = nullptr;
};

struct Handle : miopenHandle {
  miopenAcceleratorQueue_t stream = nullptr;
  Allocator allocator;

  // Handle::Create(sz): the allocator's buffer, released by its deleter.
  std::shared_ptr<void> Create(std::size_t sz) {
    if (allocator.allocator == nullptr) {
      throw Exception(miopenStatusNotImplemented,
                      "the stand-in has no default (hipMalloc) allocator");
    }
    void* result = allocator.allocator(allocator.context, sz);
    if (result == nullptr && sz != 0) {
      throw Exception(miopenStatusUnknownError,
                      "Custom allocator failed to allocate memory for buffer "
                      "size " +
                          std::to_string(sz) + ": ");
    }
    Allocator a = allocator;
    return std::shared_ptr<void>(result,
                                 [a](void* p) { a.deallocator(a.context, p); });
  }
};

struct Problem : miopenProblem {};
struct FindOptions : miopenFindOptions {
  std::size_t workspace_limit = SIZE_MAX;
};

template <typename F>
miopenStatus_t Try(F f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.status;
  } catch (...) {
    return miopenStatusUnknownError;
  }
  return miopenStatusSuccess;
}

}  // namespace

extern "C" {

const char* miopenGetErrorString(miopenStatus_t error) {
  switch (error) {
    case miopenStatusSuccess:
      return "miopenStatusSuccess";
    case miopenStatusBadParm:
      return "miopenStatusBadParm";
    case miopenStatusAllocFailed:
      return "miopenStatusAllocFailed";
    case miopenStatusUnknownError:
      return "miopenStatusUnknownError";
    default:
      return "Unknown Error";
  }
}

miopenStatus_t miopenCreate(miopenHandle_t* handle) {
  return miopenCreateWithStream(handle, nullptr);
}

miopenStatus_t miopenCreateWithStream(miopenHandle_t* handle,
                                      miopenAcceleratorQueue_t stream) {
  if (handle == nullptr) return miopenStatusBadParm;
  auto* h = new Handle;
  h->stream = stream;
  *handle = h;
  return miopenStatusSuccess;
}

miopenStatus_t miopenDestroy(miopenHandle_t handle) {
  delete static_cast<Handle*>(handle);
  return miopenStatusSuccess;
}

miopenStatus_t miopenSetStream(miopenHandle_t handle,
                               miopenAcceleratorQueue_t streamID) {
  if (handle == nullptr) return miopenStatusBadParm;
  static_cast<Handle*>(handle)->stream = streamID;
  return miopenStatusSuccess;
}

miopenStatus_t miopenGetStream(miopenHandle_t handle,
                               miopenAcceleratorQueue_t* streamID) {
  if (handle == nullptr || streamID == nullptr) return miopenStatusBadParm;
  *streamID = static_cast<Handle*>(handle)->stream;
  return miopenStatusSuccess;
}

miopenStatus_t miopenSetAllocator(miopenHandle_t handle,
                                  miopenAllocatorFunction allocator,
                                  miopenDeallocatorFunction deallocator,
                                  void* allocatorContext) {
  if (handle == nullptr) return miopenStatusBadParm;
  Allocator& a = static_cast<Handle*>(handle)->allocator;
  a.allocator = allocator;
  a.deallocator = deallocator;
  a.context = allocatorContext;
  return miopenStatusSuccess;
}

miopenStatus_t miopenCreateConvolutionDescriptor(
    miopenConvolutionDescriptor_t* convDesc) {
  *convDesc = new miopenConvolutionDescriptor;
  return miopenStatusSuccess;
}

miopenStatus_t miopenDestroyConvolutionDescriptor(
    miopenConvolutionDescriptor_t convDesc) {
  delete convDesc;
  return miopenStatusSuccess;
}

miopenStatus_t miopenCreateConvProblem(miopenProblem_t* problem,
                                       miopenConvolutionDescriptor_t,
                                       miopenProblemDirection_t) {
  *problem = new Problem;
  return miopenStatusSuccess;
}

miopenStatus_t miopenDestroyProblem(miopenProblem_t problem) {
  delete static_cast<Problem*>(problem);
  return miopenStatusSuccess;
}

miopenStatus_t miopenCreateFindOptions(miopenFindOptions_t* options) {
  *options = new FindOptions;
  return miopenStatusSuccess;
}

miopenStatus_t miopenDestroyFindOptions(miopenFindOptions_t options) {
  delete static_cast<FindOptions*>(options);
  return miopenStatusSuccess;
}

miopenStatus_t miopenSetFindOptionWorkspaceLimit(miopenFindOptions_t options,
                                                 size_t value) {
  static_cast<FindOptions*>(options)->workspace_limit = value;
  return miopenStatusSuccess;
}

miopenStatus_t miopenFindSolutions(miopenHandle_t handle,
                                   miopenProblem_t problem,
                                   miopenFindOptions_t options,
                                   miopenSolution_t*, size_t* numSolutions,
                                   size_t) {
  if (handle == nullptr || problem == nullptr) return miopenStatusBadParm;
  return Try([&] {
    std::size_t limit = SIZE_MAX;
    if (options != nullptr) {
      limit = static_cast<FindOptions*>(options)->workspace_limit;
    }
    const std::size_t workspace_size =
        limit < kWorkspaceMax ? limit : kWorkspaceMax;
    std::shared_ptr<void> workspace;
    if (workspace_size != 0) {
      workspace = static_cast<Handle*>(handle)->Create(workspace_size);
    }
    if (numSolutions != nullptr) *numSolutions = 0;
  });
}

}  // extern "C"
