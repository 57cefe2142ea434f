# SPDX-License-Identifier: Apache-2.0
"""numba.cuda, the names gpualloc.numba and its test use (numba-cuda
0.30.4's device_init.py exports them from cudadrv.driver)."""
import contextlib

from .cudadrv.driver import (BaseCUDAMemoryManager,  # noqa: F401
                             GetIpcHandleMixin, HostOnlyCUDAMemoryManager,
                             IpcHandle, MemoryInfo, MemoryPointer,
                             set_memory_manager)
from .cudadrv import driver as _driver


def current_context(devnum=0):
    return _driver.get_context(devnum)


@contextlib.contextmanager
def defer_cleanup():
    with current_context().defer_cleanup():
        yield


class DeviceNDArray:
    """numba.cuda.cudadrv.devicearray.DeviceNDArray, as far as its memory
    goes: gpu_data is what the context's memory manager returned."""

    def __init__(self, shape, itemsize, gpu_data):
        self.shape = shape
        self.alloc_size = gpu_data.size
        self.gpu_data = gpu_data
        self.itemsize = itemsize

    @property
    def device_ctypes_pointer(self):
        return self.gpu_data.device_ctypes_pointer


def device_array(shape, dtype=None, strides=None, order="C", stream=0):
    # numba.cuda.device_array: the current context's memalloc; it takes a
    # stream for its copies, and gives the allocator none.
    if isinstance(shape, int):
        shape = (shape,)
    itemsize = getattr(dtype, "itemsize", 8)
    size = itemsize
    for n in shape:
        size *= n
    return DeviceNDArray(tuple(shape), itemsize,
                         current_context().memalloc(size))


class stream:
    """numba.cuda.stream(): a blocking stream (made-up handle)."""
    _next = 0x7000

    def __init__(self):
        stream._next += 0x10
        self.handle = stream._next
