# SPDX-License-Identifier: Apache-2.0
"""gpualloc as Numba's device memory manager (an EMM plugin).

    from numba import cuda
    import gpualloc.numba
    gpualloc.numba.enable()                 # cuda.set_memory_manager(...)
    d = cuda.device_array(1 << 20)          # allocated by gpualloc

or, before Numba starts: NUMBA_CUDA_MEMORY_MANAGER=gpualloc.numba (the
configuration then comes from the environment, or from configure()).

MemoryManager is a numba.cuda.HostOnlyCUDAMemoryManager: Numba keeps its
pinned and mapped host memory, and gpualloc serves memalloc. Numba's
interface (version 1) carries no stream, so every block is allocated and
freed on the legacy default stream (stream 0) and handed out again at once
by the next allocation. That is safe for work on the default stream, which
runs in order. Work on another stream (numba.cuda.stream(), an external
stream) that uses an array must be synchronized before the array is
dropped: the free queues nothing on that stream, so the block's next owner
could overwrite it while that work still runs.
Frees go through Numba's deallocation queue, so cuda.defer_cleanup() holds
them back, as it does Numba's own. get_memory_info() is (limit - in use,
limit); get_ipc_handle is refused (gpualloc makes no CUDA IPC handles).
"""
import ctypes
import weakref

from . import _native

__all__ = ["MemoryManager", "configure", "enable"]


def _numba_cuda():
    try:
        from numba import cuda
    except ImportError as e:
        raise ImportError(
            f"gpualloc.numba needs Numba's CUDA target, and `from numba "
            f"import cuda` failed ({e}): install it (pip install "
            "numba-cuda)") from None
    return cuda


_cuda = _numba_cuda()
_settings = {"config": None, "library": None}


def configure(config=None, library=None):
    """The configuration string and library path the memory manager's
    allocator is made with (before Numba's first allocation)."""
    _settings.update(config=config, library=library)


def _free(device, ptr):
    # Numba calls this from its deallocation queue; a failure is reported
    # and changes nothing.
    try:
        _native.free(device, ptr)
    except Exception as e:  # never raise out of Numba's cleanup
        import sys
        print(f"gpualloc.numba: {e}", file=sys.stderr)


class MemoryManager(_cuda.HostOnlyCUDAMemoryManager):
    """Numba's EMM plugin over gpualloc's process-wide allocator; Numba
    makes one per context."""

    def _device(self):
        return self.context.device.id

    def initialize(self):
        _native.allocator(_settings["config"], _settings["library"])
        # Numba flushes its deallocation queue past this many bytes.
        self.deallocations.memory_capacity = self.get_memory_info().total

    def memalloc(self, size):
        _native.allocator(_settings["config"], _settings["library"])
        device = self._device()
        try:
            ptr = _native.malloc(device, size)
        except _native.OutOfMemoryError:
            self.deallocations.clear()  # frees held back; then once more
            ptr = _native.malloc(device, size)
        deallocations = self.deallocations

        def finalizer():
            deallocations.add_item(lambda p: _free(device, p), ptr, size)
        return _cuda.MemoryPointer(weakref.proxy(self.context),
                                   ctypes.c_void_p(ptr), size,
                                   finalizer=finalizer)

    def get_memory_info(self):
        stats = _native.stats(self._device())
        return _cuda.MemoryInfo(
            free=stats["bytes_limit"] - stats["bytes_in_use"],
            total=stats["bytes_limit"])

    def get_ipc_handle(self, memory):
        raise RuntimeError(
            "gpualloc.numba: gpualloc makes no CUDA IPC handles for Numba; "
            "share a block with gpualloc's own export (the C API's "
            "gpualloc_export and gpualloc_import), or use Numba's default "
            "memory manager for IPC")

    def reset(self):
        """Frees what Numba's queue holds back, then returns every fully
        free region of this context's device."""
        super().reset()
        _native.trim(self._device())

    @property
    def interface_version(self):
        return 1

    def stats(self):
        """gpualloc_stats_t of this context's device, as a dict."""
        return _native.stats(self._device())


# NUMBA_CUDA_MEMORY_MANAGER=gpualloc.numba makes Numba import this module
# and take this class.
_numba_memory_manager = MemoryManager


def enable(config=None, library=None):
    """configure(config, library), then numba.cuda.set_memory_manager: call
    before Numba's first use of the device."""
    configure(config, library)
    _cuda.set_memory_manager(MemoryManager)
