# SPDX-License-Identifier: Apache-2.0
"""torch.cuda.memory: the pluggable allocator and what torch raises on with
one (torch/cuda/memory.py)."""
import ctypes

import torch

__all__ = ["CUDAPluggableAllocator", "change_current_allocator",
           "empty_cache", "set_per_process_memory_fraction", "memory_stats",
           "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "reset_peak_memory_stats"]


def empty_cache() -> None:
    if torch.cuda.is_initialized():
        torch._C._cuda_emptyCache()


def set_per_process_memory_fraction(fraction, device=None) -> None:
    torch.cuda._lazy_init()
    if device is None:
        device = torch.cuda.current_device()
    device = torch.cuda._get_device_index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    torch._C._cuda_setMemoryFraction(fraction, device)


def memory_stats(device=None):
    if not torch.cuda.is_initialized():
        return {}
    return torch._C._cuda_memoryStats(torch.cuda._get_device_index(device))


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    torch._C._cuda_resetPeakMemoryStats(torch.cuda._get_device_index(device))


class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


if torch._version_tuple() >= (2, 0):
    class CUDAPluggableAllocator(_CUDAAllocator):
        def __init__(self, path_to_so_file: str, alloc_fn_name: str,
                     free_fn_name: str):
            allocator = ctypes.CDLL(path_to_so_file)
            alloc_fn = ctypes.cast(getattr(allocator, alloc_fn_name),
                                   ctypes.c_void_p).value
            free_fn = ctypes.cast(getattr(allocator, free_fn_name),
                                  ctypes.c_void_p).value
            assert alloc_fn is not None
            assert free_fn is not None
            self._allocator = torch._C._cuda_customAllocator(alloc_fn, free_fn)

    def change_current_allocator(allocator: _CUDAAllocator) -> None:
        torch._C._cuda_changeCurrentAllocator(allocator.allocator())

    def _get_current_allocator() -> _CUDAAllocator:
        return _CUDAAllocator(torch._C._cuda_getAllocator())


# torch.cuda.MemPool and use_mem_pool, as torch/cuda/memory.py of PyTorch 2.8
# has them (MemPool came in 2.5: the stand-in offers both from 2.5).
if torch._version_tuple() >= (2, 5):
    __all__ += ["MemPool", "use_mem_pool"]

    class MemPool(torch._C._MemPool):
        # torch 2.8's signature; 2.5 had MemPool(allocator=None) only. The
        # adapter passes the allocator alone, which both accept.
        def __init__(self, allocator=None, use_on_oom=False, symmetric=False):
            super().__init__(allocator, True, use_on_oom, symmetric)

        @property
        def id(self):
            return super().id

        @property
        def allocator(self):
            return super().allocator

        def use_count(self):
            return super().use_count()

    import contextlib as _contextlib

    @_contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        device_index = (torch.cuda.current_device() if device is None
                        else torch.cuda._get_device_index(device))
        torch._C._cuda_beginAllocateCurrentThreadToPool(device_index, pool.id)
        try:
            yield
        finally:
            torch._C._cuda_endAllocateToPool(device_index, pool.id)
            torch._C._cuda_releasePool(device_index, pool.id)
