// SPDX-License-Identifier: Apache-2.0
/* Stand-in for ONNX Runtime 1.24's
 * include/onnxruntime/core/session/onnxruntime_c_api.h (ORT_API_VERSION 24),
 * the part gpualloc/onnxruntime.h and its test use: the calling-convention
 * macros, OrtErrorCode, OrtAllocatorType, OrtMemType, the OrtAllocator
 * struct as 1.24 has it (Reserve from 1.18, GetStats and AllocOnStream from
 * 1.23), OrtApiBase / OrtGetApiBase, and an OrtApi holding only the members
 * used here, with ORT's names and types. ORT's OrtApi has some 400 members
 * in a fixed order: this one is source-compatible with it for these
 * members, not binary-compatible. The definitions are in ort_standin.cc,
 * with the model of a session that uses them (RegisterAllocator,
 * CreateTensorAsOrtValue, AllocatorGetStats, CreateSyncStreamForEpDevice).
 */
#ifndef GPUALLOC_STANDIN_ONNXRUNTIME_C_API_H_
#define GPUALLOC_STANDIN_ONNXRUNTIME_C_API_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ORT_API_VERSION 24

#ifdef __cplusplus
extern "C" {
#endif

#define _In_
#define _In_opt_
#define _Out_
#define _Outptr_
#define _Inout_
#define _Frees_ptr_opt_
#define _Check_return_
#define _Ret_maybenull_
#define ORT_ALL_ARGS_NONNULL __attribute__((nonnull))
#define ORT_EXPORT
#define ORT_API_CALL
#define ORT_MUST_USE_RESULT __attribute__((warn_unused_result))

#ifdef __cplusplus
#define NO_EXCEPTION noexcept
#else
#define NO_EXCEPTION
#endif

#define ORT_API_T(RETURN_TYPE, NAME, ...) \
  RETURN_TYPE(ORT_API_CALL* NAME)(__VA_ARGS__) NO_EXCEPTION
#define ORT_API2_STATUS(NAME, ...)                                             \
  _Check_return_ _Ret_maybenull_ OrtStatusPtr(ORT_API_CALL* NAME)(__VA_ARGS__) \
      NO_EXCEPTION ORT_MUST_USE_RESULT
#define ORT_CLASS_RELEASE(X) \
  void(ORT_API_CALL * Release##X)(_Frees_ptr_opt_ Ort##X * input)

typedef enum OrtErrorCode {
  ORT_OK,
  ORT_FAIL,
  ORT_INVALID_ARGUMENT,
  ORT_NO_SUCHFILE,
  ORT_NO_MODEL,
  ORT_ENGINE_ERROR,
  ORT_RUNTIME_EXCEPTION,
  ORT_INVALID_PROTOBUF,
  ORT_MODEL_LOADED,
  ORT_NOT_IMPLEMENTED,
  ORT_INVALID_GRAPH,
  ORT_EP_FAIL,
  ORT_MODEL_LOAD_CANCELED,
  ORT_MODEL_REQUIRES_COMPILATION,
  ORT_NOT_FOUND,
} OrtErrorCode;

typedef enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
} ONNXTensorElementDataType;

#define ORT_RUNTIME_CLASS(X) \
  struct Ort##X;             \
  typedef struct Ort##X Ort##X

ORT_RUNTIME_CLASS(Env);
ORT_RUNTIME_CLASS(Status);
ORT_RUNTIME_CLASS(MemoryInfo);
ORT_RUNTIME_CLASS(Value);
ORT_RUNTIME_CLASS(EpDevice);
ORT_RUNTIME_CLASS(KeyValuePairs);
ORT_RUNTIME_CLASS(SyncStream);

typedef OrtStatus* OrtStatusPtr;

typedef struct OrtAllocator {
  uint32_t version;
  void*(ORT_API_CALL* Alloc)(struct OrtAllocator* this_, size_t size);
  void(ORT_API_CALL* Free)(struct OrtAllocator* this_, void* p);
  const struct OrtMemoryInfo*(ORT_API_CALL* Info)(
      const struct OrtAllocator* this_);
  void*(ORT_API_CALL* Reserve)(struct OrtAllocator* this_, size_t size);
  ORT_API2_STATUS(GetStats, _In_ const struct OrtAllocator* this_,
                  _Outptr_ OrtKeyValuePairs** out);
  void*(ORT_API_CALL* AllocOnStream)(struct OrtAllocator* this_, size_t size,
                                     OrtSyncStream* stream);
} OrtAllocator;

typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE,
  ORT_LOGGING_LEVEL_INFO,
  ORT_LOGGING_LEVEL_WARNING,
  ORT_LOGGING_LEVEL_ERROR,
  ORT_LOGGING_LEVEL_FATAL,
} OrtLoggingLevel;

typedef enum OrtAllocatorType {
  OrtInvalidAllocator = -1,
  OrtDeviceAllocator = 0,
  OrtArenaAllocator = 1,
  OrtReadOnlyAllocator = 2,
} OrtAllocatorType;

typedef enum OrtMemType {
  OrtMemTypeCPUInput = -2,
  OrtMemTypeCPUOutput = -1,
  OrtMemTypeCPU = OrtMemTypeCPUOutput,
  OrtMemTypeDefault = 0,
} OrtMemType;

struct OrtApi;
typedef struct OrtApi OrtApi;

struct OrtApiBase {
  const OrtApi*(ORT_API_CALL* GetApi)(uint32_t version)NO_EXCEPTION;
  const char*(ORT_API_CALL* GetVersionString)(void)NO_EXCEPTION;
};
typedef struct OrtApiBase OrtApiBase;

ORT_EXPORT const OrtApiBase* ORT_API_CALL OrtGetApiBase(void) NO_EXCEPTION;

struct OrtApi {
  OrtStatus*(ORT_API_CALL* CreateStatus)(
      OrtErrorCode code, _In_ const char* msg)NO_EXCEPTION ORT_ALL_ARGS_NONNULL;
  OrtErrorCode(ORT_API_CALL* GetErrorCode)(_In_ const OrtStatus* status)
      NO_EXCEPTION ORT_ALL_ARGS_NONNULL;
  const char*(ORT_API_CALL* GetErrorMessage)(_In_ const OrtStatus* status)
      NO_EXCEPTION ORT_ALL_ARGS_NONNULL;
  ORT_API2_STATUS(CreateEnv, OrtLoggingLevel log_severity_level,
                  _In_ const char* logid, _Outptr_ OrtEnv** out);
  ORT_API2_STATUS(CreateTensorAsOrtValue, _Inout_ OrtAllocator* allocator,
                  _In_ const int64_t* shape, size_t shape_len,
                  ONNXTensorElementDataType type, _Outptr_ OrtValue** out);
  ORT_API2_STATUS(GetTensorMutableData, _In_ OrtValue* value,
                  _Outptr_ void** out);
  ORT_API2_STATUS(CreateMemoryInfo, _In_ const char* name,
                  enum OrtAllocatorType type, int id, enum OrtMemType mem_type,
                  _Outptr_ OrtMemoryInfo** out);
  ORT_API2_STATUS(MemoryInfoGetName, _In_ const OrtMemoryInfo* ptr,
                  _Out_ const char** out);
  ORT_API2_STATUS(MemoryInfoGetId, _In_ const OrtMemoryInfo* ptr,
                  _Out_ int* out);
  ORT_API2_STATUS(AllocatorAlloc, _Inout_ OrtAllocator* ort_allocator,
                  size_t size, _Outptr_ void** out);
  ORT_API2_STATUS(AllocatorFree, _Inout_ OrtAllocator* ort_allocator, void* p);
  ORT_CLASS_RELEASE(Env);
  ORT_CLASS_RELEASE(Status);
  ORT_CLASS_RELEASE(MemoryInfo);
  ORT_CLASS_RELEASE(Value);
  ORT_API2_STATUS(RegisterAllocator, _Inout_ OrtEnv* env,
                  _In_ OrtAllocator* allocator);
  ORT_API2_STATUS(UnregisterAllocator, _Inout_ OrtEnv* env,
                  _In_ const OrtMemoryInfo* mem_info);
  void(ORT_API_CALL* CreateKeyValuePairs)(_Outptr_ OrtKeyValuePairs** out);
  void(ORT_API_CALL* AddKeyValuePair)(_In_ OrtKeyValuePairs* kvps,
                                      _In_ const char* key,
                                      _In_ const char* value);
  const char*(ORT_API_CALL* GetKeyValue)(_In_ const OrtKeyValuePairs* kvps,
                                         _In_ const char* key);
  void(ORT_API_CALL* GetKeyValuePairs)(_In_ const OrtKeyValuePairs* kvps,
                                       _Outptr_ const char* const** keys,
                                       _Outptr_ const char* const** values,
                                       _Out_ size_t* num_entries);
  ORT_CLASS_RELEASE(KeyValuePairs);
  ORT_API2_STATUS(GetEpDevices, _In_ const OrtEnv* env,
                  _Outptr_ const OrtEpDevice* const** ep_devices,
                  _Out_ size_t* num_ep_devices);
  ORT_API2_STATUS(AllocatorGetStats, _In_ const OrtAllocator* ort_allocator,
                  _Outptr_ OrtKeyValuePairs** out);
  ORT_API2_STATUS(CreateSyncStreamForEpDevice,
                  _In_ const OrtEpDevice* ep_device,
                  _In_opt_ const OrtKeyValuePairs* stream_options,
                  _Outptr_ OrtSyncStream** stream);
  ORT_API_T(void*, SyncStream_GetHandle, _In_ OrtSyncStream* stream);
  ORT_CLASS_RELEASE(SyncStream);
};

#ifdef __cplusplus
}
#endif

#endif  // GPUALLOC_STANDIN_ONNXRUNTIME_C_API_H_
