# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of PyTorch gpualloc's PyTorch helper touches.

Written from torch's source: every name here exists in torch with the same
signature (torch.__version__, torch.version, torch.empty, torch.as_tensor
(over __cuda_array_interface__), Tensor.data_ptr,
Tensor.record_stream, torch.uint8/float32, torch.frombuffer, torch.cuda.*). What torch does
in C++ for a pluggable allocator is done by libtorch_standin.so
(standin.cc). Chosen by environment, for the tests:
  STANDIN_TORCH_VERSION  torch.__version__ (default "2.5.1"); below 2.3 the
                         graph-pool hooks take their 2.1/2.2 form, below
                         2.1 they are 2.0's (capture_begin...), below 2.0
                         there is no CUDAPluggableAllocator
  STANDIN_TORCH_BUILD    cuda (default), rocm or cpu
  STANDIN_TORCH_LIB      path of libtorch_standin.so
  STANDIN_DEVICE_COUNT   devices torch.cuda.device_count() reports (1)
"""
import os

__version__ = os.environ.get("STANDIN_TORCH_VERSION", "2.5.1")


def _version_tuple():
    return tuple(int(p) for p in __version__.split("+")[0].split(".")[:2])


from . import version  # noqa: E402
from . import _C  # noqa: E402
from . import _standin  # noqa: E402


class dtype:
    def __init__(self, name, itemsize):
        self._name = name
        self.itemsize = itemsize

    def __repr__(self):
        return "torch." + self._name


uint8 = dtype("uint8", 1)
float32 = dtype("float32", 4)


class Tensor:
    """A CUDA tensor's storage: allocated through the current allocator on
    the current device and stream, freed by the DataPtr's deleter."""

    def __init__(self, nbytes, device):
        from . import cuda
        cuda._lazy_init()
        self._device = device
        stream = cuda.current_stream(device).cuda_stream
        # Within use_mem_pool, the caching allocator serves it from the
        # pool (torch._standin._PrivatePool).
        self._pool = _standin._routed_pool(device)
        if self._pool is not None:
            self._ptr = self._pool.allocate(nbytes, device, stream)
        else:
            self._ptr = _standin._allocate(nbytes, device, stream)

    def data_ptr(self):
        return self._ptr

    def record_stream(self, stream):
        _standin._record_stream(self._ptr, stream.cuda_stream)

    def __del__(self):
        if getattr(self, "_ptr", None):
            if getattr(self, "_pool", None) is not None:
                self._pool.free(self._ptr)
            else:
                _standin._raw_delete(self._ptr)
            self._ptr = None


class _ForeignTensor(Tensor):
    """A tensor over memory it does not own (torch.as_tensor of an object
    with __cuda_array_interface__): it keeps the object alive, as torch's
    DataPtr context does, and frees nothing."""

    def __init__(self, owner, device):
        self._device = device
        self._owner = owner
        self._ptr = None
        self._data = owner.__cuda_array_interface__["data"][0]

    def data_ptr(self):
        return self._data

    def __del__(self):
        self._owner = None


def as_tensor(data, dtype=None, device=None):
    if not hasattr(data, "__cuda_array_interface__"):
        raise RuntimeError("the stand-in's as_tensor takes CUDA arrays only")
    from . import cuda
    index = cuda.current_device()
    if device is not None and ":" in str(device):
        index = int(str(device).split(":")[1])
    return _ForeignTensor(data, index)


def empty(*size, dtype=None, device=None):
    if device is None or not str(device).startswith("cuda"):
        raise RuntimeError("the stand-in makes CUDA tensors only")
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    n = 1
    for s in size:
        n *= s
    from . import cuda
    index = cuda.current_device()
    if ":" in str(device):
        index = int(str(device).split(":")[1])
    return Tensor(n * (dtype or float32).itemsize, index)


class _CpuTensor:
    """A CPU tensor over a Python buffer (torch.frombuffer's): its storage
    keeps the buffer alive, as torch's does."""

    def __init__(self, buffer, dtype):
        import ctypes
        self._buffer = buffer
        self.dtype = dtype
        self._ptr = ctypes.addressof(ctypes.c_char.from_buffer(buffer))

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return memoryview(self._buffer).nbytes // self.dtype.itemsize


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    if count != -1 or offset != 0 or requires_grad:
        raise RuntimeError("the stand-in's frombuffer takes the whole buffer")
    return _CpuTensor(buffer, dtype)


from . import cuda  # noqa: E402
