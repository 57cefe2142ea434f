# SPDX-License-Identifier: Apache-2.0
"""gpualloc.numba driven as Numba drives an EMM plugin, through a stand-in
numba.cuda (tests/bindings/numba_standin, written from numba-cuda 0.30.4)
on the simulator.

Each case runs in a fresh interpreter (Numba's memory manager is chosen
once per process). Environment, from tests/meson.build:
  ADAPTER_LIBRARY  the built libgpualloc.so
  PYTHONPATH       the stand-in numba and python/ (gpualloc)

    python3 tests/bindings/numba_adapter_test.py          # every case
    python3 tests/bindings/numba_adapter_test.py CASE     # one, in-process
"""
import gc
import os

from adapter_cases import check, in_use_chunks
import adapter_cases

MiB = 1 << 20
LIBRARY = os.environ.get("ADAPTER_LIBRARY") or None
CONFIG = "backend=sim,device_memory=8GiB,mem_limit=1GiB"


def case_allocate_free_stats():
    """set_memory_manager(gpualloc.numba.MemoryManager): device arrays come
    from gpualloc, get_memory_info is (limit - in use, limit), frees go
    through Numba's deallocation queue."""
    from numba import cuda
    import gpualloc.numba
    gpualloc.numba.enable(config=CONFIG, library=LIBRARY)
    ctx = cuda.current_context()
    check(isinstance(ctx.memory_manager, gpualloc.numba.MemoryManager),
          type(ctx.memory_manager))
    a = cuda.device_array(MiB // 8)  # 1 MiB
    check(a.gpu_data.device_pointer_value, "an address")
    info = ctx.get_memory_info()
    check(info.total == 1 << 30, info)
    check(info.free == (1 << 30) - MiB, info)
    stats = ctx.memory_manager.stats()
    check(stats["num_allocs"] == 1 and stats["bytes_in_use"] == MiB, stats)
    del a
    gc.collect()
    mm = ctx.memory_manager
    check(len(mm.deallocations) == 1, "the free waits in Numba's queue")
    mm.deallocations.clear()
    check(mm.stats()["bytes_in_use"] == 0, mm.stats())
    ctx.reset()
    check(mm.stats()["bytes_reserved"] == 0, "reset returns the memory")


def case_legacy_default_stream():
    """Numba's EMM interface carries no stream: every block is allocated and
    freed on the legacy default stream (0), whatever stream the program
    uses, and a freed block is reused at once."""
    from numba import cuda
    import gpualloc.numba
    gpualloc.numba.enable(config=CONFIG, library=LIBRARY)
    s = cuda.stream()
    a = cuda.device_array(MiB, stream=s)
    chunks = in_use_chunks()
    check(len(chunks) == 1 and chunks[0]["stream"] == 0,
          f"on stream 0: {chunks}")
    address = a.gpu_data.device_pointer_value
    del a
    gc.collect()
    cuda.current_context().memory_manager.deallocations.clear()
    b = cuda.device_array(MiB, stream=s)
    check(b.gpu_data.device_pointer_value == address, "reused at once")
    check(cuda.current_context().memory_manager.stats()["events_recorded"]
          == 0, "no event: the free named the allocation's stream")


def case_defer_cleanup():
    """cuda.defer_cleanup() holds gpualloc's frees back, as Numba's own."""
    from numba import cuda
    import gpualloc.numba
    gpualloc.numba.enable(config=CONFIG, library=LIBRARY)
    mm = cuda.current_context().memory_manager
    with cuda.defer_cleanup():
        arrays = [cuda.device_array(MiB) for _ in range(16)]
        del arrays
        gc.collect()
        mm.deallocations.clear()  # a flush while deferred does nothing
        check(mm.stats()["bytes_in_use"] == 16 * 8 * MiB, mm.stats())
    mm.deallocations.clear()
    check(mm.stats()["bytes_in_use"] == 0, mm.stats())


def case_environment_variable():
    """NUMBA_CUDA_MEMORY_MANAGER=gpualloc.numba selects the plugin, with
    the configuration from configure() (or the environment)."""
    os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "gpualloc.numba"
    import gpualloc.numba
    gpualloc.numba.configure(config=CONFIG, library=LIBRARY)
    from numba import cuda
    a = cuda.device_array(1000)
    check(cuda.current_context().memory_manager.stats()["num_allocs"] == 1,
          "allocated by gpualloc")
    del a


def case_bad_calls():
    """Out of memory raises gpualloc's report (after flushing the queue and
    trying once more); IPC is refused naming the alternative."""
    from numba import cuda
    import gpualloc.numba
    gpualloc.numba.enable(config=CONFIG, library=LIBRARY)
    try:
        cuda.device_array(256 * MiB)  # 2 GiB of float64
    except MemoryError as e:
        check("out of memory" in str(e) and "limit" in str(e), str(e))
    else:
        raise AssertionError("an allocation over the limit passed")
    a = cuda.device_array(1000)
    try:
        cuda.current_context().get_ipc_handle(a.gpu_data)
    except RuntimeError as e:
        check("gpualloc_export" in str(e), str(e))
    else:
        raise AssertionError("get_ipc_handle passed")


if __name__ == "__main__":
    adapter_cases.main(globals(), "NumbaAdapter")
