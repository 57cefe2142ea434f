# SPDX-License-Identifier: Apache-2.0
"""numba.cuda.cudadrv.driver (numba-cuda 0.30.4), the External Memory
Management (EMM) plugin interface and what calls it: a Context per device
whose memory_manager is the plugin class set_memory_manager chose (or the
one NUMBA_CUDA_MEMORY_MANAGER names, by its module's
_numba_memory_manager), prepared with initialize() on first use; frees queued
in _PendingDeallocs. Numba's own memory manager (cuMemAlloc) is absent: there
is no driver, so the default manager refuses to allocate."""
import contextlib
import ctypes
import importlib
import os
import weakref
from abc import ABCMeta, abstractmethod
from collections import deque, namedtuple

CUDA_DEALLOCS_COUNT = 10  # numba.cuda.core.config's defaults
CUDA_DEALLOCS_RATIO = 0.2


class CudaAPIError(Exception):
    def __init__(self, code, msg):
        self.code = code
        self.msg = msg
        super().__init__(code, msg)


class _SizeNotSet(int):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, 0)


_SizeNotSet = _SizeNotSet()


class _PendingDeallocs:
    def __init__(self, capacity=_SizeNotSet):
        self._cons = deque()
        self._disable_count = 0
        self._size = 0
        self.memory_capacity = capacity

    @property
    def _max_pending_bytes(self):
        return int(self.memory_capacity * CUDA_DEALLOCS_RATIO)

    def add_item(self, dtor, handle, size=_SizeNotSet):
        self._cons.append((dtor, handle, size))
        self._size += int(size)
        if (len(self._cons) > CUDA_DEALLOCS_COUNT or
                self._size > self._max_pending_bytes):
            self.clear()

    def clear(self):
        if not self.is_disabled:
            while self._cons:
                [dtor, handle, size] = self._cons.popleft()
                dtor(handle)
            self._size = 0

    @contextlib.contextmanager
    def disable(self):
        self._disable_count += 1
        try:
            yield
        finally:
            self._disable_count -= 1
            assert self._disable_count >= 0

    @property
    def is_disabled(self):
        return self._disable_count > 0

    def __len__(self):
        return len(self._cons)


MemoryInfo = namedtuple("MemoryInfo", "free,total")


class BaseCUDAMemoryManager(object, metaclass=ABCMeta):
    def __init__(self, *args, **kwargs):
        if "context" not in kwargs:
            raise RuntimeError("Memory manager requires a context")
        self.context = kwargs.pop("context")

    @abstractmethod
    def memalloc(self, size):
        """Allocates on-device memory in the current context."""

    @abstractmethod
    def memhostalloc(self, size, mapped, portable, wc):
        """Allocates pinned host memory."""

    @abstractmethod
    def mempin(self, owner, pointer, size, mapped):
        """Pins host memory."""

    @abstractmethod
    def initialize(self):
        """Prepares the plugin for the current context."""

    @abstractmethod
    def get_ipc_handle(self, memory):
        """An IpcHandle for a GPU allocation."""

    @abstractmethod
    def get_memory_info(self):
        """(free, total) memory in bytes in the context."""

    @abstractmethod
    def reset(self):
        """Clears up all memory allocated in this context."""

    @abstractmethod
    def defer_cleanup(self):
        """A context manager deferring cleanup while active."""

    @property
    @abstractmethod
    def interface_version(self):
        """The EMM plugin interface version (1)."""


class HostOnlyCUDAMemoryManager(BaseCUDAMemoryManager):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = {}
        self.deallocations = _PendingDeallocs()

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        raise CudaAPIError(100, "the stand-in has no driver for host memory")

    def mempin(self, owner, pointer, size, mapped=False):
        raise CudaAPIError(100, "the stand-in has no driver for host memory")

    def reset(self):
        self.allocations.clear()
        self.deallocations.clear()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.deallocations.disable():
            yield


class IpcHandle:
    def __init__(self, base, handle, size, source_info=None, offset=0):
        self.base = base
        self.handle = handle
        self.size = size
        self.source_info = source_info
        self.offset = offset


class GetIpcHandleMixin:
    def get_ipc_handle(self, memory):
        raise CudaAPIError(100, "the stand-in has no driver for IPC")


class NumbaCUDAMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    def initialize(self):
        pass

    def memalloc(self, size):
        raise CudaAPIError(100, "the stand-in has no driver: set an EMM "
                                "plugin (set_memory_manager)")

    def get_memory_info(self):
        raise CudaAPIError(100, "the stand-in has no driver")

    @property
    def interface_version(self):
        return _SUPPORTED_EMM_INTERFACE_VERSION


_SUPPORTED_EMM_INTERFACE_VERSION = 1
_memory_manager = None


def _ensure_memory_manager():
    global _memory_manager
    if _memory_manager:
        return
    name = os.environ.get("NUMBA_CUDA_MEMORY_MANAGER", "default")
    if name == "default":
        _memory_manager = NumbaCUDAMemoryManager
        return
    try:
        mgr_module = importlib.import_module(name)
        set_memory_manager(mgr_module._numba_memory_manager)
    except Exception:
        raise RuntimeError("Failed to use memory manager from %s" % name)


def set_memory_manager(mm_plugin):
    global _memory_manager
    dummy = mm_plugin(context=None)
    iv = dummy.interface_version
    if iv != _SUPPORTED_EMM_INTERFACE_VERSION:
        err = "EMM Plugin interface has version %d - version %d required" % (
            iv, _SUPPORTED_EMM_INTERFACE_VERSION)
        raise RuntimeError(err)
    _memory_manager = mm_plugin


class MemoryPointer:
    __cuda_memory__ = True

    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        if isinstance(pointer, ctypes.c_void_p):
            pointer = pointer.value or 0  # Numba: binding.CUdeviceptr
        self.context = context
        self.device_pointer = pointer
        self.size = size
        self._cuda_memsize_ = size
        self.is_managed = finalizer is not None
        self.refct = 1
        self.handle = self.device_pointer
        self._owner = owner
        if finalizer is not None:
            self._finalizer = weakref.finalize(self, finalizer)

    @property
    def owner(self):
        return self if self._owner is None else self._owner

    def free(self):
        if self.is_managed:
            if not self._finalizer.alive:
                raise RuntimeError("Freeing dead memory")
            self._finalizer()
            assert not self._finalizer.alive

    @property
    def device_ctypes_pointer(self):
        return ctypes.c_size_t(int(self.device_pointer))

    @property
    def device_pointer_value(self):
        return int(self.device_pointer) or None


class AutoFreePointer(MemoryPointer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.refct -= 1


class Device:
    def __init__(self, devnum):
        self.id = devnum


class Context:
    def __init__(self, device, handle):
        self.device = device
        self.handle = handle
        self.allocations = {}
        self.deallocations = _PendingDeallocs()
        _ensure_memory_manager()
        self.memory_manager = _memory_manager(context=self)

    def prepare_for_use(self):
        self.memory_manager.initialize()

    def reset(self):
        self.memory_manager.reset()
        self.deallocations.clear()

    def get_memory_info(self):
        return self.memory_manager.get_memory_info()

    def memalloc(self, bytesize):
        return self.memory_manager.memalloc(bytesize)

    def get_ipc_handle(self, memory):
        return self.memory_manager.get_ipc_handle(memory)

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.memory_manager.defer_cleanup():
            with self.deallocations.disable():
                yield


_devices = {}
_contexts = {}


def get_context(devnum=0):
    """The device's primary context, made and prepared on first use (the
    Driver's get_active_context / Device.get_primary_context path)."""
    ctx = _contexts.get(devnum)
    if ctx is None:
        device = _devices.setdefault(devnum, Device(devnum))
        ctx = _contexts[devnum] = Context(weakref.proxy(device),
                                          handle=devnum + 1)
        ctx.prepare_for_use()
    return ctx
