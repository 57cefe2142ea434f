# SPDX-License-Identifier: Apache-2.0
"""torch._C's pluggable-allocator bindings (torch/csrc/cuda/Module.cpp), over
libtorch_standin.so (torch._standin). A C++ exception in an allocator
callback arrives as an error and is raised as RuntimeError, as torch's
HANDLE_TH_ERRORS does. Only names torch._C has."""
import ctypes

import torch._standin

class _cuda_CUDAAllocator:
    pass


def _setter(symbol):
    def set_fn(self, func_ptr):
        getattr(torch._standin._lib, symbol).argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        getattr(torch._standin._lib, symbol)(self._handle, func_ptr)
    return set_fn


class _CUDAPluggableAllocator(_cuda_CUDAAllocator):
    """The methods Module.cpp binds, per torch release."""

    def __init__(self, handle):
        self._handle = handle

    set_init_fn = _setter("standin_set_init_fn")
    set_reset_fn = _setter("standin_set_reset_fn")
    set_memory_fraction_fn = _setter("standin_set_memory_fraction_fn")
    set_base_alloc_fn = _setter("standin_set_base_alloc_fn")
    set_record_stream_fn = _setter("standin_set_record_stream_fn")


if torch._standin._generation == 3:
    _CUDAPluggableAllocator.set_begin_allocate_to_pool = _setter(
        "standin_set_begin_allocate_to_pool")
    _CUDAPluggableAllocator.set_end_allocate_to_pool_fn = _setter(
        "standin_set_end_allocate_to_pool_fn")
    _CUDAPluggableAllocator.set_release_pool = _setter(
        "standin_set_release_pool")
elif torch._standin._generation == 2:
    _CUDAPluggableAllocator.set_begin_allocate_stream_to_pool = _setter(
        "standin_set_begin_allocate_stream_to_pool")
    _CUDAPluggableAllocator.set_end_allocate_stream_to_pool_fn = _setter(
        "standin_set_end_allocate_stream_to_pool_fn")
    _CUDAPluggableAllocator.set_release_pool = _setter(
        "standin_set_release_pool")
else:  # 2.0: hooks gpualloc does not serve; nothing behind them here
    def _unsupported(self, func_ptr):
        raise AssertionError("the stand-in does not drive torch 2.0's hooks")
    for _name in ("set_capture_begin_fn", "set_capture_about_to_end_fn",
                  "set_capture_ended_fn", "set_capture_destroy_fn"):
        setattr(_CUDAPluggableAllocator, _name, _unsupported)
    del _name, _unsupported

_current = None  # a _CUDAPluggableAllocator, or None for the native one


def _cuda_customAllocator(alloc_fn, free_fn):
    return _CUDAPluggableAllocator(
        torch._standin._lib.standin_custom_allocator(alloc_fn, free_fn))


def _cuda_changeCurrentAllocator(allocator):
    global _current
    torch._standin._check(torch._standin._lib.standin_change_current_allocator(allocator._handle))
    _current = allocator


def _cuda_getAllocator():
    return _current


def _cuda_init():
    torch._standin._check(torch._standin._lib.standin_lazy_init(torch.cuda.device_count()))


def _cuda_emptyCache():
    if _current is not None:
        torch._standin._check(torch._standin._lib.standin_empty_cache())
    # Private pools nobody uses any more give their free segments back.
    for pool in list(getattr(torch._standin, "_pools", {}).values()):
        if pool.use_count == 0:
            pool.release_free_segments()


def _cuda_setMemoryFraction(fraction, device):
    if _current is not None:
        torch._standin._check(torch._standin._lib.standin_set_memory_fraction(fraction, device))


def _cuda_memoryStats(device):
    if _current is not None:
        torch._standin._pluggable_unsupported("getDeviceStats")
    raise RuntimeError("the stand-in has no native allocator statistics")


def _cuda_resetPeakMemoryStats(device):
    if _current is not None:
        torch._standin._pluggable_unsupported("resetPeakStats")


def _cuda_memorySnapshot(*args):
    if _current is not None:
        torch._standin._pluggable_unsupported("snapshot")


def _cuda_record_memory_history(*args, **kwargs):
    if _current is not None:
        torch._standin._pluggable_unsupported("recordHistory")


def _graph_pool_handle():
    # graph_pool_handle(): (0, uid), told apart from a graph's own (uid, 0).
    return (0, torch._standin._next_graph_uid())


class _CUDAGraph:
    """CUDAGraph (aten/src/ATen/cuda/CUDAGraph.cpp), allocator calls only."""

    def __init__(self):
        self._capture = None
        self._pool = None
        self._device = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        import torch.cuda
        stream = torch.cuda.current_stream()
        if stream.cuda_stream == 0:
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream.")
        self._device = torch.cuda.current_device()
        if pool is not None and (pool[0] != 0 or pool[1] != 0):
            self._pool = tuple(pool)
        else:
            self._pool = (torch._standin._next_graph_uid(), 0)
        status = ctypes.c_int()
        self._capture = torch._standin._lib.standin_capture_begin(
            self._device, self._pool[0], self._pool[1], stream.cuda_stream,
            ctypes.byref(status))
        torch._standin._check(status.value)

    def capture_end(self):
        torch._standin._check(torch._standin._lib.standin_capture_end(self._capture, self._device,
                                        self._pool[0], self._pool[1]))

    def replay(self):
        pass

    def reset(self):
        if self._capture is not None:
            capture, self._capture = self._capture, None
            torch._standin._check(torch._standin._lib.standin_graph_reset(capture, self._device,
                                            self._pool[0], self._pool[1]))

    def pool(self):
        return self._pool

    def __del__(self):  # ~CUDAGraph
        self.reset()


del _setter


# MemPool's C++ half (torch/csrc/cuda/MemPool.cpp and the pool calls of
# torch/csrc/cuda/Module.cpp, PyTorch 2.8): a user-created pool's id is
# (0, uid); a thread's allocations on a device route to a pool between
# _cuda_beginAllocateCurrentThreadToPool and _cuda_endAllocateToPool, each
# begin taking a reference the matching _cuda_releasePool drops. The
# caching allocator itself is torch._standin's _PrivatePool.
if torch._version_tuple() >= (2, 5):
    class _MemPool:
        def __init__(self, allocator=None, is_user_created=True,
                     use_on_oom=False, symmetric=False):
            if allocator is None:
                raise RuntimeError("the stand-in's MemPool needs an "
                                   "allocator (it has no native one)")
            uid = torch._standin._next_graph_uid()
            self._id = (0, uid) if is_user_created else (uid, 0)
            self._allocator = allocator
            self._use_on_oom = use_on_oom
            self._symmetric = symmetric
            torch._standin._pools[self._id] = torch._standin._PrivatePool(
                allocator._handle)

        @property
        def id(self):
            return self._id

        @property
        def allocator(self):
            return self._allocator

        @property
        def is_symmetric(self):
            return self._symmetric

        def use_count(self):
            pool = torch._standin._pools.get(self._id)
            return pool.use_count if pool else 0

        def __del__(self):  # ~MemPool: releasePool, then emptyCache(id)
            pool = torch._standin._pools.get(getattr(self, "_id", None))
            if pool is not None:
                pool.use_count -= 1
                pool.release_free_segments()

    def _cuda_beginAllocateCurrentThreadToPool(device, mempool_id):
        pools = torch._standin._routing.__dict__.setdefault("pools", {})
        pools.setdefault(device, []).append(tuple(mempool_id))
        torch._standin._pools[tuple(mempool_id)].use_count += 1

    def _cuda_endAllocateToPool(device, mempool_id):
        stack = torch._standin._routing.pools[device]
        stack.remove(tuple(mempool_id))

    def _cuda_releasePool(device, mempool_id):
        torch._standin._pools[tuple(mempool_id)].use_count -= 1
