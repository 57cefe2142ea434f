// SPDX-License-Identifier: Apache-2.0
// gpualloc/onnxruntime.h: gpualloc as an ONNX Runtime OrtAllocator.
// Header-only C++ over the C API (gpualloc/gpualloc.h); compile it with
// ONNX Runtime's onnxruntime_c_api.h.
//
//   const OrtApi* api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
//   gpualloc::OnnxRuntimeAllocator* allocator = nullptr;
//   OrtStatus* status = gpualloc::OnnxRuntimeAllocator::Create(
//       api, handle, /*device=*/0, &allocator);      // nullptr: success
//   api->RegisterAllocator(env, allocator);           // shared by sessions
//   // sessions with session.use_env_allocators=1 take it for "Cuda" memory
//   ...
//   api->UnregisterAllocator(env, allocator->Info(allocator));
//   gpualloc::OnnxRuntimeAllocator::Destroy(allocator);
//
// What each member does (the OrtAllocator of the header compiled against;
// Reserve from ORT_API_VERSION 18, GetStats and AllocOnStream from 23):
//   Alloc(size)             a block on the legacy default stream (NULL);
//   AllocOnStream(size, s)  a block on the native stream of `s`
//                           (OrtApi::SyncStream_GetHandle: a cudaStream_t or
//                           hipStream_t), remembered for its free;
//   Reserve(size)           as Alloc, counted under NumReserves (ORT
//                           reserves a session's initializers);
//   Free(p)                 on the stream the block was allocated on (ORT's
//                           Free carries none; gpualloc then reuses it at
//                           once on that stream, and on another once the
//                           work queued there before the free completed);
//   Info()                  an OrtMemoryInfo named `name` ("Cuda", or "Hip"
//                           for ROCm), OrtDeviceAllocator, the device,
//                           OrtMemTypeDefault;
//   GetStats(out)           ORT's keys: Limit, InUse, TotalAllocated (bytes
//                           reserved from the device), MaxInUse, NumAllocs,
//                           NumReserves, NumArenaExtensions and
//                           NumArenaShrinkages (device allocations and
//                           frees), MaxAllocSize.
// Shrink (ORT_API_VERSION 25) is left null (not implemented);
// gpualloc_trim returns free memory.
//
// Errors: a member ORT calls cannot throw and an allocation answers nullptr
// when it fails (ORT then fails the session's call with its own message);
// gpualloc_last_error() on that thread has gpualloc's report (out of memory:
// the request, limit, in use, reserved and a hint). A failed Free (a pointer
// this allocator did not hand out, a second free) changes nothing and is
// written to stderr once. Create answers an OrtStatus naming the argument
// that is wrong; with a null `api` none can be made, so it answers nullptr
// with *out null: check *out too.
#ifndef GPUALLOC_ONNXRUNTIME_H_
#define GPUALLOC_ONNXRUNTIME_H_

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "gpualloc/gpualloc.h"

namespace gpualloc {

class OnnxRuntimeAllocator final : public OrtAllocator {
 public:
  // Makes the allocator of `device` of `allocator` (which must outlive it and
  // every block it hands out); *out is released with Destroy. Returns nullptr
  // on success, else an OrtStatus (ORT_INVALID_ARGUMENT naming the argument,
  // ORT_FAIL with ORT's reason) that the caller releases with
  // api->ReleaseStatus. A NULL api leaves *out NULL and returns nullptr: no
  // status can be made without it.
  static OrtStatus* Create(const OrtApi* api, gpualloc_t* allocator, int device,
                           OnnxRuntimeAllocator** out,
                           const char* name = "Cuda") noexcept {
    if (api == nullptr) {  // no OrtStatus can be made without it
      if (out != nullptr) *out = nullptr;
      return nullptr;
    }
    if (out == nullptr) {
      return api->CreateStatus(
          ORT_INVALID_ARGUMENT,
          "gpualloc::OnnxRuntimeAllocator::Create: out is NULL");
    }
    *out = nullptr;
    if (allocator == nullptr) {
      return api->CreateStatus(ORT_INVALID_ARGUMENT,
                               "gpualloc::OnnxRuntimeAllocator::Create: the "
                               "gpualloc allocator handle is NULL");
    }
    if (device < 0) {
      const std::string message =
          "gpualloc::OnnxRuntimeAllocator::Create: device " +
          std::to_string(device) + " is not a device ordinal (0, 1, ...)";
      return api->CreateStatus(ORT_INVALID_ARGUMENT, message.c_str());
    }
    OrtMemoryInfo* info = nullptr;
    if (OrtStatus* status = api->CreateMemoryInfo(
            name, OrtDeviceAllocator, device, OrtMemTypeDefault, &info)) {
      return status;
    }
    *out =
        new (std::nothrow) OnnxRuntimeAllocator(api, allocator, device, info);
    if (*out == nullptr) {
      api->ReleaseMemoryInfo(info);
      return api->CreateStatus(ORT_FAIL,
                               "gpualloc::OnnxRuntimeAllocator::Create: out "
                               "of host memory");
    }
    return nullptr;
  }

  static void Destroy(OnnxRuntimeAllocator* allocator) noexcept {
    delete allocator;
  }

  OnnxRuntimeAllocator(const OnnxRuntimeAllocator&) = delete;
  OnnxRuntimeAllocator& operator=(const OnnxRuntimeAllocator&) = delete;

 private:
  OnnxRuntimeAllocator(const OrtApi* api, gpualloc_t* allocator, int device,
                       OrtMemoryInfo* info) noexcept
      : OrtAllocator{},
        api_(api),
        allocator_(allocator),
        device_(device),
        info_(info) {
    version = ORT_API_VERSION;
    OrtAllocator::Alloc = &AllocImpl;
    OrtAllocator::Free = &FreeImpl;
    OrtAllocator::Info = &InfoImpl;
#if ORT_API_VERSION >= 18
    OrtAllocator::Reserve = &ReserveImpl;
#endif
#if ORT_API_VERSION >= 23
    OrtAllocator::GetStats = &GetStatsImpl;
    OrtAllocator::AllocOnStream = &AllocOnStreamImpl;
#endif
  }
  ~OnnxRuntimeAllocator() { api_->ReleaseMemoryInfo(info_); }

  static OnnxRuntimeAllocator* Self(OrtAllocator* a) noexcept {
    return static_cast<OnnxRuntimeAllocator*>(a);
  }
  static const OnnxRuntimeAllocator* Self(const OrtAllocator* a) noexcept {
    return static_cast<const OnnxRuntimeAllocator*>(a);
  }

  void* Allocate(std::size_t size, void* stream) noexcept {
    void* p = nullptr;
    if (gpualloc_malloc(allocator_, device_, size, stream, &p) != GPUALLOC_OK) {
      return nullptr;
    }
    if (stream != nullptr) {
      try {
        std::lock_guard<std::mutex> lock(mu_);
        streams_[p] = stream;
      } catch (...) {  // no room to remember it: give it back
        gpualloc_free(allocator_, device_, p, stream);
        return nullptr;
      }
    }
    return p;
  }

  static void* ORT_API_CALL AllocImpl(OrtAllocator* self,
                                      size_t size) noexcept {
    return Self(self)->Allocate(size, nullptr);
  }
  static void* ORT_API_CALL ReserveImpl(OrtAllocator* self,
                                        size_t size) noexcept {
    void* p = Self(self)->Allocate(size, nullptr);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(Self(self)->mu_);
      ++Self(self)->reserves_;
    }
    return p;
  }
#if ORT_API_VERSION >= 23
  static void* ORT_API_CALL AllocOnStreamImpl(OrtAllocator* self, size_t size,
                                              OrtSyncStream* stream) noexcept {
    void* handle = stream == nullptr
                       ? nullptr
                       : Self(self)->api_->SyncStream_GetHandle(stream);
    return Self(self)->Allocate(size, handle);
  }
#endif
  static void ORT_API_CALL FreeImpl(OrtAllocator* self, void* p) noexcept {
    OnnxRuntimeAllocator* a = Self(self);
    void* stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(a->mu_);
      auto it = a->streams_.find(p);
      if (it != a->streams_.end()) {
        stream = it->second;
        a->streams_.erase(it);
      }
    }
    if (gpualloc_free(a->allocator_, a->device_, p, stream) != GPUALLOC_OK) {
      std::lock_guard<std::mutex> lock(a->mu_);
      if (!a->reported_) {
        a->reported_ = true;
        std::fprintf(stderr,
                     "gpualloc::OnnxRuntimeAllocator: %s (reported once; "
                     "later failures: gpualloc_last_error())\n",
                     gpualloc_last_error());
      }
    }
  }
  static const OrtMemoryInfo* ORT_API_CALL
  InfoImpl(const OrtAllocator* self) noexcept {
    return Self(self)->info_;
  }
#if ORT_API_VERSION >= 23
  static OrtStatus* ORT_API_CALL GetStatsImpl(const OrtAllocator* self,
                                              OrtKeyValuePairs** out) noexcept {
    const OnnxRuntimeAllocator* a = Self(self);
    if (out == nullptr) {
      return a->api_->CreateStatus(
          ORT_INVALID_ARGUMENT,
          "gpualloc's OrtAllocator GetStats: out is null (nowhere to put the "
          "statistics)");
    }
    gpualloc_stats_t s{};
    s.struct_size = sizeof(s);
    if (gpualloc_get_stats(a->allocator_, a->device_, &s) != GPUALLOC_OK) {
      return a->api_->CreateStatus(ORT_FAIL, gpualloc_last_error());
    }
    std::uint64_t reserves;
    {
      std::lock_guard<std::mutex> lock(a->mu_);
      reserves = a->reserves_;
    }
    const struct {
      const char* key;
      std::uint64_t value;
    } rows[] = {{"Limit", s.bytes_limit},
                {"InUse", s.bytes_in_use},
                {"TotalAllocated", s.bytes_reserved},
                {"MaxInUse", s.peak_bytes_in_use},
                {"NumAllocs", s.num_allocs},
                {"NumReserves", reserves},
                {"NumArenaExtensions", s.backend_allocs},
                {"NumArenaShrinkages", s.backend_frees},
                {"MaxAllocSize", s.largest_alloc_size}};
    a->api_->CreateKeyValuePairs(out);
    for (const auto& row : rows) {
      char value[24];
      std::snprintf(value, sizeof(value), "%llu",
                    static_cast<unsigned long long>(row.value));
      a->api_->AddKeyValuePair(*out, row.key, value);
    }
    return nullptr;
  }
#endif

  const OrtApi* api_;
  gpualloc_t* allocator_;
  int device_;
  OrtMemoryInfo* info_;
  mutable std::mutex mu_;
  // Blocks allocated on a stream other than the default, with it (Free
  // carries no stream).
  std::unordered_map<void*, void*> streams_;
  std::uint64_t reserves_ = 0;
  bool reported_ = false;
};

}  // namespace gpualloc

#endif  // GPUALLOC_ONNXRUNTIME_H_
