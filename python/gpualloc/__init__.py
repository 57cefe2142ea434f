# SPDX-License-Identifier: Apache-2.0
"""gpualloc's Python helpers. gpualloc.torch makes gpualloc PyTorch's CUDA
or ROCm allocator: `import gpualloc.torch as gt; gt.enable()`."""
