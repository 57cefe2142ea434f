# SPDX-License-Identifier: Apache-2.0
"""gpualloc as CuPy's allocator.

    import cupy
    import gpualloc.cupy

    pool = gpualloc.cupy.enable()     # cupy.cuda.set_allocator(pool.malloc)
    x = cupy.zeros(1 << 20)
    print(pool.used_bytes(), pool.total_bytes())

CuPy takes the allocator through cupy.cuda.CFunctionAllocator: C functions
malloc(param, size, device) and free(param, ptr, device) that gpualloc's
library exports (gpualloc/adapters.h), so CuPy frees without running Python.
Its call carries no stream; Allocator.malloc hands CuPy the param of the
current CuPy stream (cupy.cuda.get_current_stream()), and a block is freed on
the stream it was allocated on, as CuPy's own memory pool keeps a block in
its stream's arena. A stream must outlive the blocks allocated on it, or be
given to release_stream() before it is destroyed.

The pool-like calls of cupy.cuda.MemoryPool read gpualloc's statistics of
the current device: used_bytes() (bytes_in_use), total_bytes()
(bytes_reserved), free_bytes() (their difference), free_all_blocks() (every
fully free region back to the device), set_limit(size=, fraction=) and
get_limit() (bytes_limit); stats() gives every gpualloc_stats_t field.
"""
import ctypes
import threading

from . import _native

__all__ = ["Allocator", "enable"]


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError(
            f"gpualloc.cupy needs CuPy, and `import cupy` failed ({e}): "
            "install it (pip install cupy-cuda12x, or the build matching "
            "your CUDA or ROCm)") from None
    return cupy


def _out_of_memory_type():
    base = getattr(_cupy().cuda.memory, "OutOfMemoryError", MemoryError)

    class OutOfMemoryError(base):
        """cupy.cuda.memory.OutOfMemoryError with gpualloc's report as its
        message."""

        def __init__(self, size, total, limit, report):
            try:
                super().__init__(size, total, limit)
            except TypeError:  # a base of another signature
                super().__init__(report)
            self.report = report

        def __str__(self):
            return self.report
    return OutOfMemoryError


# What Allocator.malloc raises out of memory: a subclass of
# cupy.cuda.memory.OutOfMemoryError (a MemoryError) whose message is
# gpualloc's report, made with the first Allocator (CuPy is imported then).
OutOfMemoryError = None


class Allocator:
    """A CuPy allocator over gpualloc's process-wide allocator (config:
    "key=value,..." over the environment, used when that allocator is made;
    library: the path of libgpualloc.so). Pass its malloc to
    cupy.cuda.set_allocator or cupy.cuda.using_allocator."""

    def __init__(self, config=None, library=None):
        global OutOfMemoryError
        cupy = _cupy()
        self._cuda = cupy.cuda
        self._lib = _native.load(library)
        self._handle = _native.allocator(config, library)
        self._malloc_fn = _native.function_address("gpualloc_cupy_malloc")
        self._free_fn = _native.function_address("gpualloc_cupy_free")
        self._lock = threading.Lock()
        # CuPy stream pointer -> its CFunctionAllocator. The params live as
        # long as the process: a block keeps only the raw param, which must
        # stay valid until it is freed (one small param per stream handle).
        self._by_stream = {}
        if OutOfMemoryError is None:
            OutOfMemoryError = _out_of_memory_type()

    def _for_stream(self, ptr):
        alloc = self._by_stream.get(ptr)
        if alloc is not None:
            return alloc
        with self._lock:
            alloc = self._by_stream.get(ptr)
            if alloc is None:
                param = ctypes.c_void_p()
                _native.check(self._lib.gpualloc_cupy_param_create(
                    self._handle, ptr or None, ctypes.byref(param)),
                    "making a CuPy param")
                alloc = self._cuda.memory.CFunctionAllocator(
                    param.value, self._malloc_fn, self._free_fn, self)
                self._by_stream[ptr] = alloc
        return alloc

    def malloc(self, size):
        """CuPy's allocator call: a MemoryPointer to `size` bytes on the
        current device, allocated on the current stream."""
        stream = self._cuda.get_current_stream()
        memory = self._for_stream(stream.ptr).malloc(size)
        if size and not memory.ptr:
            report = _native.last_error()
            if ": out of memory" in report:
                raise OutOfMemoryError(size, self.total_bytes(),
                                       self.get_limit(), report)
            raise _native.GpuallocError(report)
        return memory

    def _device(self):
        return self._cuda.Device().id

    def stats(self, device=None):
        """gpualloc_stats_t of the device (default: the current one)."""
        return _native.stats(self._device() if device is None else device)

    def used_bytes(self):
        return self.stats()["bytes_in_use"]

    def total_bytes(self):
        return self.stats()["bytes_reserved"]

    def free_bytes(self):
        s = self.stats()
        return s["bytes_reserved"] - s["bytes_in_use"]

    def free_all_blocks(self, stream=None):
        """Returns every fully free region of the current device (CuPy's
        stream argument selects nothing here: gpualloc's free memory
        belongs to no stream once its work is done)."""
        _native.trim(self._device())

    def set_limit(self, size=None, fraction=None):
        """The current device's limit, as MemoryPool.set_limit: size in
        bytes, or fraction of the device's total memory (0 < f <= 1)."""
        _native.set_limit(self._device(), size=size, fraction=fraction)

    def get_limit(self):
        return self.stats()["bytes_limit"]

    def release_stream(self, stream):
        """Call before destroying `stream` (a cupy.cuda.Stream) while blocks
        allocated on it are live: gpualloc records on it no more."""
        _native.release_stream(stream.ptr or None)


def enable(config=None, library=None):
    """Makes gpualloc CuPy's allocator for every thread
    (cupy.cuda.set_allocator) and returns the Allocator."""
    allocator = Allocator(config, library)
    _cupy().cuda.set_allocator(allocator.malloc)
    return allocator
