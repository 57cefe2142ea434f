# SPDX-License-Identifier: Apache-2.0
"""cupy.cuda.memory (CuPy 14.2.0's cupy/cuda/memory.pyx), the allocator
path: set_allocator / get_allocator / alloc, CFunctionAllocator, which calls
C functions
    void* malloc(void* param, size_t size, int device_id)
    void  free(void* param, void* ptr, int device_id)
(called here through ctypes), BaseMemory, MemoryPointer and OutOfMemoryError. The default
allocator (_malloc, device memory through cudaMalloc) is absent: there is
no device."""
import ctypes
import threading

from . import device

_malloc_func_type = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_int)
_free_func_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int)


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        self._size = size
        self._total = total
        self._limit = limit
        if limit == 0:
            msg = 'Out of memory allocating {:,} bytes'.format(size)
            if total != -1:
                msg += ' (allocated so far: {:,} bytes).'.format(total)
        else:
            msg = ('Out of memory allocating {:,} bytes '
                   '(allocated so far: {:,} bytes, limit set to: {:,} '
                   'bytes).'.format(size, total, limit))
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self._size, self._total, self._limit))


class BaseMemory:
    ptr = 0
    size = 0
    device_id = -1

    def __int__(self):
        return self.ptr

    @property
    def device(self):
        return device.Device(self.device_id)


class CFunctionAllocatorMemory(BaseMemory):
    def __init__(self, size, param, malloc_func, free_func, device_id):
        self._param = param
        self._free_func = free_func
        self.device_id = device_id
        self.size = size
        self.ptr = 0
        if size > 0:
            self.ptr = _malloc_func_type(malloc_func)(param, size,
                                                      device_id) or 0

    def __del__(self):  # CuPy's __dealloc__
        if self.ptr:
            _free_func_type(self._free_func)(self._param, self.ptr,
                                             self.device_id)


class CFunctionAllocator:
    def __init__(self, param, malloc_func, free_func, owner):
        self._param = param
        self._malloc_func = malloc_func
        self._free_func = free_func
        self._owner = owner

    def malloc(self, size):
        mem = CFunctionAllocatorMemory(size, self._param, self._malloc_func,
                                       self._free_func,
                                       device.get_device_id())
        return MemoryPointer(mem, 0)


class MemoryPointer:
    def __init__(self, mem, offset):
        assert mem.ptr != 0 or offset == 0
        self.ptr = mem.ptr + offset
        self.device_id = mem.device_id
        self.mem = mem

    def __int__(self):
        return self.ptr

    @property
    def device(self):
        return device.Device(self.device_id)


def _malloc(size):
    raise RuntimeError("the stand-in CuPy has no device memory of its own: "
                       "set an allocator first")


_current_allocator = _malloc
_thread_local = threading.local()


def _get_thread_local_allocator():
    return getattr(_thread_local, "allocator", None)


def _set_thread_local_allocator(allocator):
    _thread_local.allocator = allocator


def alloc(size):
    return get_allocator()(size)


def set_allocator(allocator=None):
    global _current_allocator
    if allocator is None:
        allocator = _malloc
    if getattr(_thread_local, 'allocator', None) is not None:
        raise ValueError('Can\'t change the global allocator inside '
                         '`using_allocator` context manager')
    _current_allocator = allocator


def get_allocator():
    allocator = getattr(_thread_local, "allocator", None)
    return _current_allocator if allocator is None else allocator
