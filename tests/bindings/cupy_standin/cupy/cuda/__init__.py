# SPDX-License-Identifier: Apache-2.0
"""cupy.cuda, as far as gpualloc.cupy uses it (CuPy 14.2.0's
cupy/cuda/__init__.py): the allocator functions of cupy.cuda.memory, Stream,
get_current_stream, Device, and using_allocator."""
import contextlib

from . import memory  # noqa: F401
from . import runtime  # noqa: F401
from .device import Device, get_device_id  # noqa: F401
from .memory import (BaseMemory, CFunctionAllocator,  # noqa: F401
                     MemoryPointer, alloc, get_allocator, set_allocator)
from .stream import Stream, get_current_stream  # noqa: F401


@contextlib.contextmanager
def using_allocator(allocator=None):
    if allocator is None:
        allocator = memory._malloc
    previous_allocator = memory._get_thread_local_allocator()
    memory._set_thread_local_allocator(allocator)
    try:
        yield
    finally:
        memory._set_thread_local_allocator(previous_allocator)
