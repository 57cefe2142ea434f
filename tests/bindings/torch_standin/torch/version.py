# SPDX-License-Identifier: Apache-2.0
"""torch.version: the CUDA or HIP version torch was built with, or None."""
import os

_build = os.environ.get("STANDIN_TORCH_BUILD", "cuda")
cuda = "12.4" if _build == "cuda" else None
hip = "6.1.40091" if _build == "rocm" else None
