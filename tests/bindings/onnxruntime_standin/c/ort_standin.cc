// SPDX-License-Identifier: Apache-2.0
// The definitions behind the stand-in onnxruntime_c_api.h (ONNX Runtime
// 1.24): statuses, memory infos, key-value pairs, an environment whose
// registered allocators sessions share, tensors allocated through an
// OrtAllocator (CreateTensorAsOrtValue: Alloc, ReleaseValue: Free, as ORT's
// Tensor does with an allocator it is given), AllocatorGetStats (the
// allocator's GetStats, or an empty set without one) and one CUDA EP device
// whose sync streams have made-up native handles (CreateSyncStreamForEpDevice,
// SyncStream_GetHandle). ORT's AllocatorGetStats and the allocator wrapper
// of a registered OrtAllocator call the struct's function pointers as this
// does.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "onnxruntime_c_api.h"

struct OrtStatus {
  OrtErrorCode code;
  std::string message;
};
struct OrtMemoryInfo {
  std::string name;
  OrtAllocatorType type;
  int id;
  OrtMemType mem_type;
};
struct OrtKeyValuePairs {
  std::map<std::string, std::string> entries;
  std::vector<const char*> keys, values;
};
struct OrtEnv {
  std::vector<OrtAllocator*> allocators;
};
struct OrtValue {
  OrtAllocator* allocator;
  void* data;
};
struct OrtEpDevice {
  const char* ep_name;
};
struct OrtSyncStream {
  void* handle;
};

namespace {

OrtEpDevice cuda_device{"CUDAExecutionProvider"};
const OrtEpDevice* devices[] = {&cuda_device};
std::uintptr_t next_stream = 0x9000;

OrtStatus* Status(OrtErrorCode code, const std::string& message) {
  return new OrtStatus{code, message};
}

size_t ElementSize(ONNXTensorElementDataType type) {
  return type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT ? 4 : 1;
}

OrtApi MakeApi() {
  OrtApi api{};
  api.CreateStatus = [](OrtErrorCode code, const char* msg) noexcept {
    return Status(code, msg);
  };
  api.GetErrorCode = [](const OrtStatus* s) noexcept { return s->code; };
  api.GetErrorMessage = [](const OrtStatus* s) noexcept {
    return s->message.c_str();
  };
  api.CreateEnv = [](OrtLoggingLevel, const char*,
                     OrtEnv** out) noexcept -> OrtStatus* {
    *out = new OrtEnv;
    return nullptr;
  };
  api.CreateTensorAsOrtValue = [](OrtAllocator* allocator, const int64_t* shape,
                                  size_t shape_len,
                                  ONNXTensorElementDataType type,
                                  OrtValue** out) noexcept -> OrtStatus* {
    size_t bytes = ElementSize(type);
    for (size_t i = 0; i < shape_len; ++i) bytes *= shape[i];
    void* data = allocator->Alloc(allocator, bytes);
    if (data == nullptr && bytes != 0) {
      return Status(ORT_FAIL, "Failed to allocate memory for the tensor");
    }
    *out = new OrtValue{allocator, data};
    return nullptr;
  };
  api.GetTensorMutableData = [](OrtValue* value,
                                void** out) noexcept -> OrtStatus* {
    *out = value->data;
    return nullptr;
  };
  api.CreateMemoryInfo = [](const char* name, OrtAllocatorType type, int id,
                            OrtMemType mem_type,
                            OrtMemoryInfo** out) noexcept -> OrtStatus* {
    if (std::string(name) != "Cpu" && std::string(name) != "Cuda" &&
        std::string(name) != "Hip") {
      return Status(ORT_INVALID_ARGUMENT,
                    "Specified device is not supported: " + std::string(name));
    }
    *out = new OrtMemoryInfo{name, type, id, mem_type};
    return nullptr;
  };
  api.MemoryInfoGetName = [](const OrtMemoryInfo* info,
                             const char** out) noexcept -> OrtStatus* {
    *out = info->name.c_str();
    return nullptr;
  };
  api.MemoryInfoGetId = [](const OrtMemoryInfo* info,
                           int* out) noexcept -> OrtStatus* {
    *out = info->id;
    return nullptr;
  };
  api.AllocatorAlloc = [](OrtAllocator* a, size_t size,
                          void** out) noexcept -> OrtStatus* {
    *out = a->Alloc(a, size);
    return nullptr;
  };
  api.AllocatorFree = [](OrtAllocator* a, void* p) noexcept -> OrtStatus* {
    a->Free(a, p);
    return nullptr;
  };
  api.ReleaseEnv = [](OrtEnv* env) { delete env; };
  api.ReleaseStatus = [](OrtStatus* s) { delete s; };
  api.ReleaseMemoryInfo = [](OrtMemoryInfo* info) { delete info; };
  api.ReleaseValue = [](OrtValue* value) {
    if (value != nullptr && value->data != nullptr) {
      value->allocator->Free(value->allocator, value->data);
    }
    delete value;
  };
  api.RegisterAllocator = [](OrtEnv* env,
                             OrtAllocator* allocator) noexcept -> OrtStatus* {
    const OrtMemoryInfo* info = allocator->Info(allocator);
    for (OrtAllocator* a : env->allocators) {
      const OrtMemoryInfo* other = a->Info(a);
      if (other->name == info->name && other->id == info->id) {
        return Status(ORT_INVALID_ARGUMENT,
                      "An allocator for this device has already been "
                      "registered for sharing.");
      }
    }
    env->allocators.push_back(allocator);
    return nullptr;
  };
  api.UnregisterAllocator =
      [](OrtEnv* env, const OrtMemoryInfo* info) noexcept -> OrtStatus* {
    for (auto it = env->allocators.begin(); it != env->allocators.end(); ++it) {
      const OrtMemoryInfo* other = (*it)->Info(*it);
      if (other->name == info->name && other->id == info->id) {
        env->allocators.erase(it);
        return nullptr;
      }
    }
    return Status(ORT_INVALID_ARGUMENT, "No allocator for this device");
  };
  api.CreateKeyValuePairs = [](OrtKeyValuePairs** out) noexcept {
    *out = new OrtKeyValuePairs;
  };
  api.AddKeyValuePair = [](OrtKeyValuePairs* kvps, const char* key,
                           const char* value) noexcept {
    kvps->entries[key] = value;
  };
  api.GetKeyValue = [](const OrtKeyValuePairs* kvps,
                       const char* key) noexcept -> const char* {
    auto it = kvps->entries.find(key);
    return it == kvps->entries.end() ? nullptr : it->second.c_str();
  };
  api.GetKeyValuePairs =
      [](const OrtKeyValuePairs* kvps, const char* const** keys,
         const char* const** values, size_t* num_entries) noexcept {
        auto* self = const_cast<OrtKeyValuePairs*>(kvps);
        self->keys.clear();
        self->values.clear();
        for (const auto& [k, v] : kvps->entries) {
          self->keys.push_back(k.c_str());
          self->values.push_back(v.c_str());
        }
        *keys = self->keys.data();
        *values = self->values.data();
        *num_entries = self->keys.size();
      };
  api.ReleaseKeyValuePairs = [](OrtKeyValuePairs* kvps) { delete kvps; };
  api.GetEpDevices = [](const OrtEnv*, const OrtEpDevice* const** out,
                        size_t* n) noexcept -> OrtStatus* {
    *out = devices;
    *n = 1;
    return nullptr;
  };
  api.AllocatorGetStats = [](const OrtAllocator* a,
                             OrtKeyValuePairs** out) noexcept -> OrtStatus* {
    if (a->version >= 23 && a->GetStats != nullptr) {
      return a->GetStats(a, out);
    }
    *out = new OrtKeyValuePairs;
    return nullptr;
  };
  api.CreateSyncStreamForEpDevice =
      [](const OrtEpDevice* device, const OrtKeyValuePairs*,
         OrtSyncStream** out) noexcept -> OrtStatus* {
    if (device == nullptr) return Status(ORT_INVALID_ARGUMENT, "no device");
    next_stream += 0x10;
    *out = new OrtSyncStream{reinterpret_cast<void*>(next_stream)};
    return nullptr;
  };
  api.SyncStream_GetHandle = [](OrtSyncStream* s) noexcept -> void* {
    return s->handle;
  };
  api.ReleaseSyncStream = [](OrtSyncStream* s) { delete s; };
  return api;
}

const OrtApi the_api = MakeApi();

}  // namespace

extern "C" const OrtApiBase* ORT_API_CALL OrtGetApiBase(void) noexcept {
  static const OrtApiBase base{[](uint32_t version) noexcept -> const OrtApi* {
                                 return version <= ORT_API_VERSION ? &the_api
                                                                   : nullptr;
                               },
                               []() noexcept { return "1.24.0"; }};
  return &base;
}
