# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of ONNX Runtime's Python API gpualloc.onnxruntime
touches, written from ONNX Runtime 1.24's source:
onnxruntime/python/onnxruntime_inference_collection.py (InferenceSession:
path_or_bytes, sess_options, providers as names or (name, options) pairs,
provider_options; get_providers, get_provider_options, run) and the CUDA
execution provider's external allocator
(onnxruntime/core/providers/cuda/cuda_allocator.cc, CUDAExternalAllocator:
the gpu_external_alloc / gpu_external_free / gpu_external_empty_cache
options, each a function's address in decimal; Alloc enforces a non-null
result, Reserve remembers the block, Free calls empty_cache after freeing a
reserved block).

There is no device and the model is not read: a session with the CUDA
provider and an external allocator runs a fixed workload through it, the
stand-in's own model of one: at creation it reserves three 1 MiB
initializers; each run() allocates four 4 MiB activations in turn and frees
them at its end; the session frees its initializers when it goes.
"""
import ctypes

# (Its exceptions live in onnxruntime.capi.onnxruntime_pybind11_state, as in
# ORT, and are not re-exported here.)
from .capi.onnxruntime_pybind11_state import Fail as _Fail
from .capi.onnxruntime_pybind11_state import RuntimeException as _RuntimeException

__version__ = "1.24.0"

MiB = 1 << 20
_INITIALIZERS = [1 * MiB] * 3
_ACTIVATIONS = [4 * MiB] * 4

_alloc_type = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_free_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_empty_cache_type = ctypes.CFUNCTYPE(None)


def get_available_providers():
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


class SessionOptions:
    def __init__(self):
        self._config = {}

    def add_session_config_entry(self, key, value):
        self._config[key] = value


class _CUDAExternalAllocator:
    """CUDAExternalAllocator: Alloc, Free, Reserve over the three
    functions."""

    def __init__(self, alloc, free, empty_cache):
        self._alloc = _alloc_type(alloc)
        self._free = _free_type(free)
        self._empty_cache = _empty_cache_type(empty_cache) \
            if empty_cache else None
        self._reserved = set()

    def Alloc(self, size):
        p = None
        if size > 0:
            p = self._alloc(size)
            if not p:  # ORT_ENFORCE(p != nullptr)
                raise _RuntimeException(
                    "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
                    "cuda_allocator.cc CUDAExternalAllocator::Alloc "
                    "p != nullptr was false.")
        return p

    def Free(self, p):
        self._free(p)
        if p in self._reserved:
            self._reserved.discard(p)
            if self._empty_cache:
                self._empty_cache()

    def Reserve(self, size):
        p = self.Alloc(size)
        if not p:
            return None
        self._reserved.add(p)
        return p


def _parse_address(options, key):
    # ProviderOptions values are strings; ORT parses the address as size_t.
    text = str(options.get(key, "0"))
    try:
        value = int(text)
    except ValueError:
        raise _Fail(f"[ONNXRuntimeError] : 1 : FAIL : Failed to parse "
                   f"provider option \"{key}\": \"{text}\"") from None
    return value


class InferenceSession:
    def __init__(self, path_or_bytes, sess_options=None, providers=None,
                 provider_options=None, **kwargs):
        self._providers = []
        self._provider_options = {}
        for i, p in enumerate(providers or ["CPUExecutionProvider"]):
            name, options = (p if isinstance(p, tuple) else
                             (p, (provider_options or [{}] * (i + 1))[i]))
            self._providers.append(name)
            self._provider_options[name] = {k: str(v)
                                            for k, v in options.items()}
        self._allocator = None
        self._initializers = []
        cuda = self._provider_options.get("CUDAExecutionProvider")
        if cuda is not None:
            alloc = _parse_address(cuda, "gpu_external_alloc")
            free = _parse_address(cuda, "gpu_external_free")
            empty = _parse_address(cuda, "gpu_external_empty_cache")
            if alloc and free:
                self._allocator = _CUDAExternalAllocator(alloc, free, empty)
                for size in _INITIALIZERS:
                    self._initializers.append(self._allocator.Reserve(size))

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {k: dict(v) for k, v in self._provider_options.items()}

    def run(self, output_names, input_feed, run_options=None):
        if self._allocator is None:
            return []
        live = []
        try:
            for size in _ACTIVATIONS:
                live.append(self._allocator.Alloc(size))
        finally:
            for p in live:
                self._allocator.Free(p)
        return []

    def __del__(self):
        allocator = getattr(self, "_allocator", None)
        for p in getattr(self, "_initializers", []):
            allocator.Free(p)
