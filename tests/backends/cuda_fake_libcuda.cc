// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_fake_libcuda.cc: a stand-in libcuda.so.1 for
// LoadCudaDriver's tests, so the real dlopen/dlsym path runs on machines
// without a driver.
//
// It exports the driver's resolver (cuGetProcAddress_v2, or with
// GPUALLOC_FAKE_LIBCUDA_V1 only the CUDA 11.x cuGetProcAddress) and forwards
// every request to a function the test installs with
// gpualloc_fake_libcuda_set_forward (the fake driver's resolver in the test
// program).
#include <cuda.h>

extern "C" {

using GpuallocFakeForward = CUresult (*)(const char*, void**, int, cuuint64_t);

namespace {
GpuallocFakeForward g_forward = nullptr;
}  // namespace

__attribute__((visibility("default"))) void gpualloc_fake_libcuda_set_forward(
    GpuallocFakeForward forward) {
  g_forward = forward;
}

#ifdef GPUALLOC_FAKE_LIBCUDA_V1
// cuda.h maps the name to cuGetProcAddress_v2; this is the unversioned CUDA
// 11.3 - 11.8 export.
#undef cuGetProcAddress
__attribute__((visibility("default"))) CUresult cuGetProcAddress(
    const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (g_forward == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return g_forward(symbol, pfn, version, flags);
}
#else
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult* status) {
  if (g_forward == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = g_forward(symbol, pfn, version, flags);
  // A missing symbol is reported through the status only, with a non-null
  // pointer: the test shows the loader trusts the status (the documented
  // contract) rather than the pointer.
  if (r == CUDA_SUCCESS && *pfn == nullptr && status != nullptr) {
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = reinterpret_cast<void*>(0x1);
    return r;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return r;
}
#endif

}  // extern "C"
