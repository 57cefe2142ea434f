# SPDX-License-Identifier: Apache-2.0
"""Not a torch module: the stand-in's own plumbing (the ctypes binding of
libtorch_standin.so and what torch does in C++ for tensors), kept apart so
that torch._C holds only names torch has."""

import ctypes
import os
import threading

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


# --- The caching allocator above a MemPool's allocator ----------------------
# What c10/cuda/CUDACachingAllocator.cpp does for a private pool whose
# allocator is a CUDAPluggableAllocator (torch.cuda.MemPool(allocator)):
# requests round up to 512 bytes; a request is served from a free block of
# the pool's small (up to 1 MiB) or large blocks, on the same stream, best
# fit; without one, a segment is allocated through the pool's allocator
# (raw_alloc: 2 MiB for small requests, 20 MiB below 10 MiB, else the
# request rounded up to 2 MiB) and split (the rest kept when it is at least
# 512 bytes, for small blocks, or more than 1 MiB); a freed block merges
# with free neighbours of its segment. A segment goes back (raw_delete) only
# when wholly free and the pool is emptied. Not modelled: expandable
# segments, record_stream, events, garbage collection, OOM retry.
_lib.standin_allocator_raw_alloc.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p)]
_lib.standin_allocator_raw_delete.argtypes = [ctypes.c_void_p,
                                              ctypes.c_void_p]

kMinBlockSize = 512
kSmallSize = 1 << 20
kSmallBuffer = 2 << 20
kLargeBuffer = 20 << 20
kMinLargeAlloc = 10 << 20
kRoundLarge = 2 << 20


def _round_size(size):
    if size < kMinBlockSize:
        return kMinBlockSize
    return kMinBlockSize * ((size + kMinBlockSize - 1) // kMinBlockSize)


def _allocation_size(size):
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return kLargeBuffer
    return kRoundLarge * ((size + kRoundLarge - 1) // kRoundLarge)


class _Segment:
    def __init__(self, ptr, size, stream, small):
        self.ptr, self.size, self.stream, self.small = ptr, size, stream, small
        self.blocks = [[0, size, False]]  # [offset, size, allocated], in order


class _PrivatePool:
    """One MemPool's blocks and segments on one device."""

    def __init__(self, allocator_handle):
        self.allocator = allocator_handle
        self.segments = []
        self.use_count = 1  # the MemPool's own reference
        self.live = {}  # block address -> (segment, offset)

    def allocate(self, nbytes, device, stream):
        size = _round_size(nbytes)
        small = size <= kSmallSize
        best = None
        for seg in self.segments:
            if seg.small != small or seg.stream != stream:
                continue
            for i, (off, bsize, used) in enumerate(seg.blocks):
                if not used and bsize >= size and \
                        (best is None or bsize < best[2]):
                    best = (seg, i, bsize)
        if best is None:
            out = ctypes.c_void_p()
            seg_size = _allocation_size(size)
            _check(_lib.standin_allocator_raw_alloc(
                self.allocator, seg_size, device, stream, ctypes.byref(out)))
            seg = _Segment(out.value, seg_size, stream, small)
            self.segments.append(seg)
            best = (seg, 0, seg_size)
        seg, i, bsize = best
        off = seg.blocks[i][0]
        rest = bsize - size
        if (small and rest >= kMinBlockSize) or (not small and
                                                 rest > kSmallSize):
            seg.blocks[i] = [off, size, True]
            seg.blocks.insert(i + 1, [off + size, rest, False])
        else:
            seg.blocks[i][2] = True
        self.live[seg.ptr + off] = (seg, off)
        return seg.ptr + off

    def free(self, ptr):
        seg, off = self.live.pop(ptr)
        i = next(i for i, b in enumerate(seg.blocks) if b[0] == off)
        seg.blocks[i][2] = False
        if i + 1 < len(seg.blocks) and not seg.blocks[i + 1][2]:
            seg.blocks[i][1] += seg.blocks.pop(i + 1)[1]
        if i > 0 and not seg.blocks[i - 1][2]:
            seg.blocks[i - 1][1] += seg.blocks.pop(i)[1]

    def release_free_segments(self):
        for seg in [s for s in self.segments if len(s.blocks) == 1 and
                    not s.blocks[0][2]]:
            _check(_lib.standin_allocator_raw_delete(self.allocator,
                                                     seg.ptr))
            self.segments.remove(seg)


_pools = {}  # MempoolId_t -> _PrivatePool
_routing = threading.local()  # .pools: {device: [MempoolId_t, ...]}


def _routed_pool(device):
    """The pool the calling thread's allocations on `device` go to, if
    any (beginAllocateToPool for the current thread)."""
    stack = getattr(_routing, "pools", {}).get(device)
    return _pools[stack[-1]] if stack else None
