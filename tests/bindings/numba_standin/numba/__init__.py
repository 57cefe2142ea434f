# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of Numba's CUDA target (numba-cuda 0.30.4) that
gpualloc.numba touches, written from numba_cuda/numba/cuda/cudadrv/driver.py
(BaseCUDAMemoryManager, HostOnlyCUDAMemoryManager, GetIpcHandleMixin,
MemoryPointer, AutoFreePointer, MemoryInfo, IpcHandle, set_memory_manager,
_ensure_memory_manager, _PendingDeallocs, Context) and
numba_cuda/numba/cuda/device_init.py (what numba.cuda exports). Every name
is Numba's, with its signature; there is no driver: one device, contexts
made on first use, and host allocations (memhostalloc, mempin) refused."""
