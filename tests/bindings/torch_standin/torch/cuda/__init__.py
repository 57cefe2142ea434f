# SPDX-License-Identifier: Apache-2.0
"""torch.cuda, as far as gpualloc's helper and its tests use it; each
function has torch's name and signature (torch/cuda/__init__.py,
torch/cuda/memory.py, torch/cuda/streams.py, torch/cuda/graphs.py)."""
import contextlib
import itertools

import torch

from . import memory  # noqa: F401
from .memory import (empty_cache, max_memory_allocated,  # noqa: F401
                     max_memory_reserved, memory_allocated, memory_reserved,
                     memory_stats, reset_peak_memory_stats,
                     set_per_process_memory_fraction)
from .graphs import CUDAGraph, graph, graph_pool_handle  # noqa: F401
if torch._version_tuple() >= (2, 5):
    from .memory import MemPool, use_mem_pool  # noqa: F401

_initialized = False
_device = 0
_streams = {}  # device -> current Stream
_handles = itertools.count(0x10000, 0x100)


def is_available():
    return torch.version.cuda is not None or torch.version.hip is not None


def is_initialized():
    return _initialized


def _lazy_init():
    global _initialized
    if _initialized:
        return
    if not is_available():
        raise AssertionError("Torch not compiled with CUDA enabled")
    torch._C._cuda_init()
    _initialized = True


def device_count():
    # STANDIN_DEVICE_COUNT: how many devices the stand-in's CUDA reports.
    import os
    return int(os.environ.get("STANDIN_DEVICE_COUNT", "1")) \
        if is_available() else 0


def current_device():
    _lazy_init()
    return _device


def _get_device_index(device, optional=False):
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    text = str(device)
    return int(text.split(":")[1]) if ":" in text else current_device()


class Stream:
    """torch.cuda.Stream(device=None, priority=0): .cuda_stream is the raw
    cudaStream_t as an int; the default stream's is 0."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device_index = _get_device_index(device)
        self.cuda_stream = kwargs.get("_cdata", next(_handles))

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)


def default_stream(device=None):
    return Stream(device, _cdata=0)


def current_stream(device=None):
    index = _get_device_index(device)
    return _streams.get(index) or default_stream(index)


@contextlib.contextmanager
def stream(stream):
    index = stream.device_index
    previous = _streams.get(index)
    _streams[index] = stream
    try:
        yield
    finally:
        if previous is None:
            _streams.pop(index, None)
        else:
            _streams[index] = previous


def synchronize(device=None):
    _lazy_init()
