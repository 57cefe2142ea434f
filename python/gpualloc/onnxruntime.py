# SPDX-License-Identifier: Apache-2.0
"""gpualloc as ONNX Runtime's CUDA memory, through the CUDA execution
provider's options gpu_external_alloc / gpu_external_free /
gpu_external_empty_cache.

    import onnxruntime as ort
    import gpualloc.onnxruntime as go

    options = {"device_id": 0, **go.provider_options(device=0)}
    session = ort.InferenceSession("model.onnx",
                                   providers=[("CUDAExecutionProvider", options)])
    print(go.stats())          # the keys of ORT's OrtAllocator GetStats

The three functions are C functions of gpualloc's library
(gpualloc/adapters.h); each option's value is a function's address. They
carry no context: one allocator and one device per process, the device given
here (ORT's device_id). They carry no stream either: every block is allocated
and freed on the legacy default stream, and reused at once, as ORT's own
arena does for the work it queues on its compute stream. ORT calls
empty_cache after freeing memory it reserved at session creation (its
initializers): gpualloc then returns every fully free region.

A C or C++ program that creates its sessions through ORT's C API can give
ORT an OrtAllocator instead, with streams: gpualloc/onnxruntime.h.
"""
from . import _native

__all__ = ["provider_options", "stats", "last_error"]

# gpualloc_stats_t fields under the keys ORT's OrtAllocator::GetStats uses
# (onnxruntime_c_api.h), in its order.
_ORT_STATS = (
    ("Limit", "bytes_limit"),
    ("InUse", "bytes_in_use"),
    ("TotalAllocated", "bytes_reserved"),
    ("MaxInUse", "peak_bytes_in_use"),
    ("NumAllocs", "num_allocs"),
    ("NumReserves", None),
    ("NumArenaExtensions", "backend_allocs"),
    ("NumArenaShrinkages", "backend_frees"),
    ("MaxAllocSize", "largest_alloc_size"),
)

_device = None


def provider_options(config=None, library=None, device=0):
    """The CUDA execution provider's options that make gpualloc its
    allocator on `device`, as a dict of decimal strings to merge into the
    provider's options. config ("key=value,...", over the environment) and
    library are used when gpualloc's allocator is first made."""
    global _device
    if not isinstance(device, int) or device < 0:
        raise ValueError(f"gpualloc.onnxruntime: device={device!r}: the "
                         "device must be an ordinal from 0 (ORT's device_id)")
    lib = _native.load(library)
    handle = _native.allocator(config, library)
    _native.check(lib.gpualloc_ort_external_set(handle, device),
                  "provider_options")
    _device = device
    return {
        "gpu_external_alloc":
            str(_native.function_address("gpualloc_ort_external_alloc")),
        "gpu_external_free":
            str(_native.function_address("gpualloc_ort_external_free")),
        "gpu_external_empty_cache":
            str(_native.function_address("gpualloc_ort_external_empty_cache")),
    }


def stats(device=None):
    """The device's statistics under the keys of ORT's OrtAllocator
    GetStats (Limit, InUse, TotalAllocated, MaxInUse, NumAllocs,
    NumReserves, NumArenaExtensions, NumArenaShrinkages, MaxAllocSize), as
    ints. NumReserves is 0: the external functions cannot tell a reserve
    from an allocation."""
    if device is None:
        device = 0 if _device is None else _device
    s = _native.stats(device)
    return {key: (s[field] if field else 0) for key, field in _ORT_STATS}


def last_error():
    """Why the latest call of the external functions on this thread failed:
    ORT's own error for a failed allocation says only that the pointer was
    null."""
    return _native.last_error()
