# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of CuPy gpualloc.cupy touches, written from
CuPy 14.2.0's source: cupy/cuda/memory.pyx (CFunctionAllocator,
CFunctionAllocatorMemory, BaseMemory, MemoryPointer, set_allocator,
get_allocator, alloc, OutOfMemoryError), cupy/cuda/__init__.py
(using_allocator), cupy/cuda/stream.pyx (Stream, get_current_stream) and
cupy/cuda/device.pyx (Device). Every name here is CuPy's, with its
signature. There is no device: a Stream's handle is a made-up number, and
cupy.empty allocates through the current allocator without touching the
memory (gpualloc runs on its simulator, whose addresses are never touched).
"""
from . import cuda  # noqa: F401

__version__ = "14.2.0"


class ndarray:
    """cupy.ndarray, as far as its memory goes: .data is the MemoryPointer
    from the current allocator, freed when the array goes."""

    def __init__(self, shape, dtype=float, memptr=None):
        import numbers
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        self.shape = tuple(shape)
        self.itemsize = 8 if dtype in (float, "float64") else 4 \
            if dtype in ("float32", "int32") else 1
        size = 1
        for n in self.shape:
            size *= n
        self.nbytes = size * self.itemsize
        self.data = memptr if memptr is not None else cuda.alloc(self.nbytes)


def empty(shape, dtype=float, order="C"):
    return ndarray(shape, dtype)
