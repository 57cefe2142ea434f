# SPDX-License-Identifier: Apache-2.0
"""Not a torch module: the stand-in's own plumbing (the ctypes binding of
libtorch_standin.so and what torch does in C++ for tensors), kept apart so
that torch._C holds only names torch has."""

import ctypes
import os

import torch

_lib = ctypes.CDLL(os.environ["STANDIN_TORCH_LIB"])
_lib.standin_last_error.restype = ctypes.c_char_p
_lib.standin_custom_allocator.restype = ctypes.c_void_p
_lib.standin_custom_allocator.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
_lib.standin_change_current_allocator.argtypes = [ctypes.c_void_p]
_lib.standin_allocate.argtypes = [ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_void_p,
                                  ctypes.POINTER(ctypes.c_void_p)]
_lib.standin_raw_delete.argtypes = [ctypes.c_void_p]
_lib.standin_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
_lib.standin_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_lib.standin_capture_begin.restype = ctypes.c_void_p
_lib.standin_capture_begin.argtypes = [ctypes.c_int, ctypes.c_ulonglong,
                                       ctypes.c_ulonglong, ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_int)]
for _name in ("standin_capture_end", "standin_graph_reset"):
    getattr(_lib, _name).argtypes = [ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_ulonglong, ctypes.c_ulonglong]

_generation = 3
if torch._version_tuple() < (2, 3):
    _generation = 2
if torch._version_tuple() < (2, 1):
    _generation = 1
_lib.standin_set_generation(_generation)


def _check(status):
    if status != 0:
        raise RuntimeError(_lib.standin_last_error().decode())


def _allocate(nbytes, device, stream):
    out = ctypes.c_void_p()
    _check(_lib.standin_allocate(nbytes, device, stream, ctypes.byref(out)))
    return out.value


def _raw_delete(ptr):
    _check(_lib.standin_raw_delete(ptr))


def _record_stream(ptr, stream):
    _check(_lib.standin_record_stream(ptr, stream))


_graph_uid = 0


def _next_graph_uid():
    global _graph_uid
    _graph_uid += 1
    return _graph_uid


def _pluggable_unsupported(what):
    raise RuntimeError(
        f"CUDAPluggableAllocator does not yet support {what}. If you need "
        "it, please file an issue describing your use case.")
