# SPDX-License-Identifier: Apache-2.0
"""The C library, libgpualloc.so, through ctypes, and the allocator the
CuPy, Numba and ONNX Runtime adapters share (gpualloc.torch loads the
PyTorch hook instead, a library of its own).

The library is looked for next to this package first (the wheel puts it
there), then where `meson install` put it (_paths.py), then by the dynamic
linker's search. One process-wide allocator handle serves every adapter,
made on first use from a configuration string and the environment, with
the defaults of a runtime that grows on demand (gpualloc_create_pytorch's:
preallocate=false, mem_fraction=1; the string and the environment still
win), since CuPy's pool, Numba and ONNX Runtime's arena all grow as needed.
"""
import ctypes
import ctypes.util
import json
import os
import threading

OK = 0
INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ALL_DEVICES = -1

LIBRARY = "libgpualloc.so"
TORCH_LIBRARY = "libgpualloc_torch.so"


class GpuallocError(RuntimeError):
    """A call into gpualloc failed; the message says why."""


class OutOfMemoryError(GpuallocError, MemoryError):
    """An allocation gpualloc could not serve; the message is its report
    (the request, limit, in use, reserved, largest free block and a
    hint)."""


class Stats(ctypes.Structure):
    """gpualloc_stats_t (include/gpualloc/gpualloc.h), field for field
    (tests/bindings/stats_mirror_test.py checks it against the header)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "struct_size", "num_allocs", "bytes_in_use", "peak_bytes_in_use",
        "largest_alloc_size", "bytes_limit", "bytes_reserved",
        "peak_bytes_reserved", "largest_free_block_bytes", "bytes_requested",
        "peak_bytes_requested", "num_ooms", "backend_allocs", "backend_frees",
        "events_recorded", "stream_waits", "host_waits")] + [
        ("fragmentation", ctypes.c_double)] + [
        (name, ctypes.c_uint64) for name in (
            "pool_bytes_reserved", "pool_bytes_in_use", "bytes_sleeping",
            "bytes_release_pending", "front_cache_bytes", "front_cache_hits",
            "front_cache_misses", "bytes_exported", "bytes_held_for_importers",
            "bytes_imported")]


def library_path(name=LIBRARY):
    """Where the library `name` is loaded from when not told: this package's
    directory, then the directory `meson install` wrote into _paths.py, else
    the bare name for the dynamic linker's search."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, name)]
    try:
        from . import _paths
        candidates.append(os.path.normpath(
            os.path.join(here, _paths.LIBRARY_DIR, name)))
    except ImportError:  # the source tree: no _paths.py
        pass
    for path in candidates:
        if os.path.exists(path):
            return path
    stem = name[3:].split(".")[0] if name.startswith("lib") else name
    return ctypes.util.find_library(stem) or name


def open_library(path):
    """ctypes.CDLL(path), or a RuntimeError that says what to do."""
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise RuntimeError(
            f"gpualloc: cannot load {path}: {e}. Install gpualloc's Python "
            "package with `pip install .` (its libraries come inside it), or "
            "after `meson install` make sure the package and the libraries "
            "are the ones installed together (`ldd " + path + "` lists what "
            "is missing); or pass library=PATH.") from None


_lock = threading.RLock()  # check() reads the last error under it
_lib = None
_lib_path = None
_handle = None
_config = None


def _declare(lib):
    P, I, S, U = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64
    handle_out = ctypes.POINTER(ctypes.c_void_p)
    lib.gpualloc_last_error.restype = ctypes.c_char_p
    lib.gpualloc_last_error.argtypes = []
    lib.gpualloc_create_pytorch.argtypes = [ctypes.c_char_p, handle_out]
    lib.gpualloc_malloc.argtypes = [P, I, S, P, handle_out]
    lib.gpualloc_free.argtypes = [P, I, P, P]
    lib.gpualloc_trim.argtypes = [P, I]
    lib.gpualloc_get_stats.argtypes = [P, I, ctypes.POINTER(Stats)]
    lib.gpualloc_reset_peak_stats.argtypes = [P, I]
    lib.gpualloc_release_stream.argtypes = [P, I, P]
    lib.gpualloc_set_memory_limit.argtypes = [P, I, U]
    lib.gpualloc_set_memory_fraction.argtypes = [P, I, ctypes.c_double]
    lib.gpualloc_snapshot_json.argtypes = [
        P, I, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(S)]
    lib.gpualloc_string_free.argtypes = [P]
    lib.gpualloc_cupy_param_create.argtypes = [P, P, handle_out]
    lib.gpualloc_ort_external_set.argtypes = [P, I]
    return lib


def load(library=None):
    """libgpualloc.so, loaded once per process (`library`: its path; a
    second call naming another path is refused)."""
    global _lib, _lib_path
    with _lock:
        path = library or library_path()
        if _lib is not None:
            if library is not None and os.path.realpath(library) != \
                    os.path.realpath(_lib_path):
                raise RuntimeError(
                    f"gpualloc: {_lib_path} is loaded already; library="
                    f"{library!r} cannot replace it in this process")
            return _lib
        _lib = _declare(open_library(path))
        _lib_path = path
        return _lib


def last_error():
    """The calling thread's latest failure in the C library ("" if none)."""
    return load().gpualloc_last_error().decode()


def check(status, what):
    """Raises for a failed status: ValueError naming the setting for
    INVALID_ARGUMENT, OutOfMemoryError for RESOURCE_EXHAUSTED, GpuallocError
    otherwise."""
    if status == OK:
        return
    message = last_error()
    if status == INVALID_ARGUMENT:
        raise ValueError(f"gpualloc: {what}: {message}")
    if status == RESOURCE_EXHAUSTED:
        raise OutOfMemoryError(f"gpualloc: {what}: {message}")
    raise GpuallocError(f"gpualloc: {what}: {message}")


def allocator(config=None, library=None):
    """The process-wide allocator handle (an int), made on the first call
    from `config` ("key=value,...", over the environment). A later call
    with another config is refused: the adapters of one process share one
    allocator, and so one limit per device."""
    global _handle, _config
    lib = load(library)
    with _lock:
        if _handle is not None:
            if config is not None and config != _config:
                raise ValueError(
                    f"gpualloc: the allocator was made already with config="
                    f"{_config!r}; config={config!r} cannot change it (set "
                    "the configuration once, before the first allocation)")
            return _handle
        out = ctypes.c_void_p()
        status = lib.gpualloc_create_pytorch(
            config.encode() if config else None, ctypes.byref(out))
        check(status, "creating the allocator")
        _handle, _config = out.value, config
        return _handle


def function_address(name):
    """The address of one of the library's functions, as an int."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value


def malloc(device, size, stream=None):
    out = ctypes.c_void_p()
    check(load().gpualloc_malloc(allocator(), device, size, stream,
                                 ctypes.byref(out)),
          f"allocating {size} bytes on device {device}")
    return out.value


def free(device, ptr, stream=None):
    check(load().gpualloc_free(allocator(), device, ptr, stream),
          f"freeing {ptr:#x} on device {device}")


def stats(device):
    """gpualloc_stats_t of `device` as a dict of its field names."""
    s = Stats(struct_size=ctypes.sizeof(Stats))
    check(load().gpualloc_get_stats(allocator(), device, ctypes.byref(s)),
          f"stats of device {device}")
    return {name: getattr(s, name) for name, _ in Stats._fields_[1:]}


def trim(device=ALL_DEVICES):
    check(load().gpualloc_trim(allocator(), device), "trim")


def release_stream(stream, device=ALL_DEVICES):
    check(load().gpualloc_release_stream(allocator(), device, stream),
          "release_stream")


def set_limit(device, size=None, fraction=None):
    lib = load()
    if (size is None) == (fraction is None):
        raise ValueError("gpualloc: set_limit takes size= or fraction=, one "
                         "of them")
    if size is not None:
        check(lib.gpualloc_set_memory_limit(allocator(), device, size),
              f"set_limit(size={size})")
    else:
        check(lib.gpualloc_set_memory_fraction(allocator(), device, fraction),
              f"set_limit(fraction={fraction})")


def snapshot_json(device):
    """Every region and block of `device` (docs/REFERENCE.md, "Snapshot
    JSON") as a dict."""
    lib = load()
    text = ctypes.c_void_p()
    check(lib.gpualloc_snapshot_json(allocator(), device, ctypes.byref(text),
                                     None), "snapshot_json")
    try:
        return json.loads(ctypes.string_at(text.value).decode())
    finally:
        lib.gpualloc_string_free(text)
