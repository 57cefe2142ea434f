# SPDX-License-Identifier: Apache-2.0
"""gpualloc.onnxruntime's provider options driven as ONNX Runtime's CUDA
provider drives gpu_external_alloc / _free / _empty_cache, through a
stand-in onnxruntime (tests/bindings/onnxruntime_standin, written from ONNX
Runtime 1.24) on the simulator.

Each case runs in a fresh interpreter (the functions serve one allocator per
process). Environment, from tests/meson.build:
  ADAPTER_LIBRARY  the built libgpualloc.so
  PYTHONPATH       the stand-in onnxruntime and python/ (gpualloc)

    python3 tests/bindings/onnxruntime_external_test.py       # every case
    python3 tests/bindings/onnxruntime_external_test.py CASE  # one
"""
import gc
import os

from adapter_cases import check
import adapter_cases

MiB = 1 << 20
LIBRARY = os.environ.get("ADAPTER_LIBRARY") or None
CONFIG = "backend=sim,device_memory=8GiB"


def session(options):
    import onnxruntime as ort
    return ort.InferenceSession(
        b"model", providers=[("CUDAExecutionProvider",
                              {"device_id": 0, **options}),
                             "CPUExecutionProvider"])


def case_allocate_free_stats():
    """A session reserves its initializers and allocates its activations
    through gpualloc; the stats carry the keys of ORT's GetStats; freeing
    the reserved memory empties the cache."""
    import gpualloc.onnxruntime as go
    from gpualloc import _native
    options = go.provider_options(config=CONFIG, library=LIBRARY)
    check(set(options) == {"gpu_external_alloc", "gpu_external_free",
                           "gpu_external_empty_cache"}, options)
    check(all(v.isdigit() and int(v) for v in options.values()), options)
    s = session(options)
    stats = go.stats()
    check(list(stats) == ["Limit", "InUse", "TotalAllocated", "MaxInUse",
                          "NumAllocs", "NumReserves", "NumArenaExtensions",
                          "NumArenaShrinkages", "MaxAllocSize"], stats)
    check(stats["InUse"] == 3 * MiB and stats["NumAllocs"] == 3, stats)
    s.run(None, {})
    stats = go.stats()
    check(stats["NumAllocs"] == 7 and stats["InUse"] == 3 * MiB, stats)
    check(stats["MaxInUse"] == 19 * MiB, stats)
    check(stats["MaxAllocSize"] == 4 * MiB, stats)
    check(_native.stats(0)["bytes_reserved"] > 0, "reserved")
    del s
    gc.collect()
    check(go.stats()["InUse"] == 0, go.stats())
    check(go.stats()["TotalAllocated"] == 0,
          f"empty_cache returned the regions: {go.stats()}")


def case_legacy_default_stream():
    """The functions carry no stream: blocks are allocated and freed on the
    legacy default stream (0) and reused at once, run after run."""
    import gpualloc.onnxruntime as go
    from gpualloc import _native
    s = session(go.provider_options(config=CONFIG, library=LIBRARY))
    chunks = [c for r in _native.snapshot_json(0)["regions"]
              for c in r["chunks"] if c["state"] == "in_use"]
    check(chunks and all(c["stream"] == 0 for c in chunks), chunks)
    s.run(None, {})
    reserved = _native.stats(0)["backend_allocs"]
    for _ in range(3):
        s.run(None, {})
    check(_native.stats(0)["backend_allocs"] == reserved,
          "later runs reuse the first run's memory")
    check(_native.stats(0)["events_recorded"] == 0, _native.stats(0))


def case_bad_calls():
    """Out of memory: ORT's enforce fails and last_error() has gpualloc's
    report; a bad device and a second allocator are refused, naming them."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException
    import gpualloc.onnxruntime as go
    s = session(go.provider_options(config=CONFIG + ",mem_limit=8MiB",
                                     library=LIBRARY))
    try:
        s.run(None, {})
    except RuntimeException as e:
        check("p != nullptr" in str(e), str(e))
    else:
        raise AssertionError("a run over the limit passed")
    check("out of memory" in go.last_error(), go.last_error())
    try:
        go.provider_options(device=-1)
    except ValueError as e:
        check("device=-1" in str(e), str(e))
    else:
        raise AssertionError("device=-1 passed")
    try:
        go.provider_options(device=1)
    except RuntimeError as e:
        check("device 0" in str(e) and "device 1" in str(e), str(e))
    else:
        raise AssertionError("a second device passed")


if __name__ == "__main__":
    adapter_cases.main(globals(), "OnnxRuntimeExternal")
