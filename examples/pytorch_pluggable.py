# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch_pluggable.py: PyTorch allocating through gpualloc.

    GPUALLOC_PREALLOCATE=false python3 examples/pytorch_pluggable.py \
        /usr/local/lib/x86_64-linux-gnu/libgpualloc_torch.so

The allocator must be swapped before PyTorch's first CUDA allocation. The
configuration comes from the environment (GPUALLOC_* variables).
"""
import ctypes
import sys

import torch

path = sys.argv[1] if len(sys.argv) > 1 else "libgpualloc_torch.so"
allocator = torch.cuda.memory.CUDAPluggableAllocator(
    path, "gpualloc_torch_malloc", "gpualloc_torch_free")
torch.cuda.memory.change_current_allocator(allocator)

x = torch.randn(4096, 4096, device="cuda")
y = x @ x
torch.cuda.synchronize()
del x, y


class Stats(ctypes.Structure):
    """gpualloc_stats_t (include/gpualloc/gpualloc.h), first fields."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "struct_size", "num_allocs", "bytes_in_use", "peak_bytes_in_use",
        "largest_alloc_size", "bytes_limit", "bytes_reserved",
        "peak_bytes_reserved")]


lib = ctypes.CDLL(path)
stats = Stats(struct_size=ctypes.sizeof(Stats))
if lib.gpualloc_torch_get_stats(torch.cuda.current_device(),
                                ctypes.byref(stats)) != 0:
    lib.gpualloc_torch_last_error.restype = ctypes.c_char_p
    sys.exit(lib.gpualloc_torch_last_error().decode())
print(f"gpualloc: {stats.num_allocs} allocations, "
      f"peak reserved {stats.peak_bytes_reserved / 2**30:.2f} GiB")
