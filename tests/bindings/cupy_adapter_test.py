# SPDX-License-Identifier: Apache-2.0
"""gpualloc.cupy driven as CuPy drives it, through a stand-in CuPy
(tests/bindings/cupy_standin, written from CuPy 14.2.0) on the simulator:
cupy.cuda.CFunctionAllocator calls gpualloc's C malloc and free.

Each case runs in a fresh interpreter (the allocator is process-wide).
Environment, from tests/meson.build:
  ADAPTER_LIBRARY  the built libgpualloc.so
  PYTHONPATH       the stand-in CuPy and python/ (gpualloc)

    python3 tests/bindings/cupy_adapter_test.py           # every case
    python3 tests/bindings/cupy_adapter_test.py CASE      # one, in-process
"""
import gc
import os

from adapter_cases import check, in_use_chunks
import adapter_cases

MiB = 1 << 20
LIBRARY = os.environ.get("ADAPTER_LIBRARY") or None
CONFIG = "backend=sim,device_memory=8GiB"


def case_allocate_free_stats():
    """enable() makes gpualloc CuPy's allocator; arrays allocate and free
    through it; the pool-like calls read gpualloc's statistics."""
    import cupy
    import gpualloc.cupy
    pool = gpualloc.cupy.enable(config=CONFIG, library=LIBRARY)
    check(cupy.cuda.get_allocator() == pool.malloc, "the current allocator")
    a = cupy.empty(MiB // 8)  # 1 MiB of float64
    check(a.data.ptr != 0, "an address")
    check(pool.used_bytes() == MiB, f"used {pool.used_bytes()}")
    check(pool.total_bytes() >= MiB, f"total {pool.total_bytes()}")
    check(pool.free_bytes() == pool.total_bytes() - MiB, "free bytes")
    check(pool.stats()["num_allocs"] == 1, pool.stats())
    del a
    gc.collect()
    check(pool.used_bytes() == 0, f"freed: used {pool.used_bytes()}")
    pool.free_all_blocks()
    check(pool.total_bytes() == 0, f"trimmed: total {pool.total_bytes()}")
    pool.set_limit(size=64 * MiB)
    check(pool.get_limit() == 64 * MiB, f"limit {pool.get_limit()}")


def case_stream():
    """CuPy gives no stream: the block is allocated on the current CuPy
    stream, freed on the same one, and reused at once there."""
    import cupy
    import gpualloc.cupy
    gpualloc.cupy.enable(config=CONFIG, library=LIBRARY)
    s = cupy.cuda.Stream()
    with s:
        a = cupy.empty(MiB)
    chunks = in_use_chunks()
    check(len(chunks) == 1 and chunks[0]["stream"] == s.ptr,
          f"allocated on stream {s.ptr:#x}: {chunks}")
    address = a.data.ptr
    del a
    gc.collect()
    with s:
        b = cupy.empty(MiB)
    check(b.data.ptr == address, "reused at once on the same stream")
    c = cupy.empty(MiB)  # the null stream: another block
    chunks = sorted(in_use_chunks(), key=lambda c: c["address"])
    check({c["stream"] for c in chunks} == {0, s.ptr},
          f"one block per stream: {chunks}")
    del b, c


def case_using_allocator():
    """Allocator.malloc works as a thread's allocator too
    (cupy.cuda.using_allocator)."""
    import cupy
    import gpualloc.cupy
    pool = gpualloc.cupy.Allocator(config=CONFIG, library=LIBRARY)
    with cupy.cuda.using_allocator(pool.malloc):
        a = cupy.empty(1000)
    check(pool.used_bytes() >= 8000, f"used {pool.used_bytes()}")
    del a


def case_bad_calls():
    """Out of memory is CuPy's OutOfMemoryError with gpualloc's report; a
    bad limit or setting names what was set."""
    import cupy
    import gpualloc.cupy
    pool = gpualloc.cupy.enable(config=CONFIG + ",mem_limit=64MiB",
                                library=LIBRARY)
    try:
        cupy.empty(16 * MiB)  # 128 MiB of float64
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("out of memory" in str(e) and "limit" in str(e), str(e))
    else:
        raise AssertionError("an allocation over the limit passed")
    for kwargs in ({}, {"size": MiB, "fraction": 0.5}):
        try:
            pool.set_limit(**kwargs)
        except ValueError as e:
            check("size= or fraction=" in str(e), str(e))
        else:
            raise AssertionError(f"set_limit({kwargs}) passed")
    try:
        pool.set_limit(fraction=1.5)
    except ValueError as e:
        check("1.5" in str(e), str(e))
    else:
        raise AssertionError("set_limit(fraction=1.5) passed")


def case_bad_setting():
    """A misspelt key fails creation with a ValueError naming it."""
    import gpualloc.cupy
    try:
        gpualloc.cupy.enable(config="backend=sim,preallocat=false",
                             library=LIBRARY)
    except ValueError as e:
        check("preallocat" in str(e) and "preallocate" in str(e), str(e))
    else:
        raise AssertionError("a misspelt key passed")


if __name__ == "__main__":
    adapter_cases.main(globals(), "CupyAdapter")
