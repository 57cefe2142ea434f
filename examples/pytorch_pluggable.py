# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch_pluggable.py: PyTorch allocating through gpualloc.

    python3 examples/pytorch_pluggable.py            # the installed hook
    python3 examples/pytorch_pluggable.py build/bindings/torch/libgpualloc_torch.so

gpualloc.torch must enable gpualloc before PyTorch's first CUDA allocation.
Settings come from the environment (GPUALLOC_*, PYTORCH_CUDA_ALLOC_CONF) or
enable(config=...). From a source tree without installing, put python/ on
PYTHONPATH.
"""
import sys

import torch

import gpualloc.torch as gt

gt.enable(library=sys.argv[1] if len(sys.argv) > 1 else None)

x = torch.randn(4096, 4096, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    y = x @ x                       # x is read on the side stream ...
x.record_stream(side)               # ... so its memory waits for that work
del x
torch.cuda.current_stream().wait_stream(side)
del y
torch.cuda.empty_cache()            # every fully free region goes back

s = gt.stats()
print(f"gpualloc: {s['allocation.all.allocated']} allocations, peak reserved "
      f"{s['reserved_bytes.all.peak'] / 2**30:.2f} GiB, now "
      f"{s['reserved_bytes.all.current'] / 2**30:.2f} GiB")
print(gt.memory_summary())
