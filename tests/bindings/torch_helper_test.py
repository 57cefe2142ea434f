# SPDX-License-Identifier: Apache-2.0
"""gpualloc.torch and libgpualloc_torch.so driven as PyTorch drives them,
through a stand-in torch (tests/bindings/torch_standin) on the simulator.

Each case runs in a fresh interpreter (torch's allocator is chosen once per
process). Environment, from tests/meson.build:
  HOOK_LIBRARY       the built libgpualloc_torch.so
  STANDIN_TORCH_LIB  the stand-in's libtorch_standin.so
  PYTHONPATH         the stand-in torch and python/ (gpualloc.torch)

    python3 tests/bindings/torch_helper_test.py            # every case
    python3 tests/bindings/torch_helper_test.py CASE       # one, in-process
"""
import os
import subprocess
import sys
import tempfile
import unittest

MiB = 1 << 20
HOOK = os.environ.get("HOOK_LIBRARY", "")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def setup(config="backend=sim,device_memory=8GiB"):
    import torch
    import gpualloc.torch as gt
    gt.enable(config=config, library=HOOK)
    return torch, gt


# --- Cases: each runs alone in a fresh interpreter --------------------------

def case_registrations():
    """enable() registers every hook, each reaches gpualloc."""
    torch, gt = setup()
    check(gt.enabled(), "enabled")
    a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    s = gt.stats()
    check(s["allocated_bytes.all.current"] >= 64 * MiB, s)
    check(s["reserved_bytes.all.current"] >= 64 * MiB, s)
    # PyTorch's defaults: growth on demand, not 75% of the device.
    check(s["reserved_bytes.all.current"] < 1 << 30,
          "grew on demand: %d reserved" % s["reserved_bytes.all.current"])
    del a
    # empty_cache reaches Trim: the free memory goes back.
    check(gt.memory_reserved() > 0, "cached")
    torch.cuda.empty_cache()
    check(gt.memory_reserved() == 0,
          "empty_cache returned it: %d" % gt.memory_reserved())
    check(gt.max_memory_reserved() >= 64 * MiB, "peak kept")
    gt.reset_peak_memory_stats()
    check(gt.max_memory_reserved() == 0, "peak reset")
    print(gt.memory_summary())


def case_record_stream():
    """Tensor.record_stream fences the block: reusing it on its own stream
    then waits for the other stream's work (an event and a wait, or another
    block), where a block without it is reused at once."""
    torch, gt = setup()
    side = torch.cuda.Stream()

    def fences():
        s = gt.stats()
        return (s["gpualloc.events_recorded"] + s["gpualloc.stream_waits"] +
                s["gpualloc.host_waits"])

    a = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    a_ptr, before = a.data_ptr(), fences()
    del a
    c = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    check(c.data_ptr() == a_ptr and fences() == before,
          "without record_stream: reused at once")
    del c
    b = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    b_ptr, before = b.data_ptr(), fences()
    b.record_stream(side)
    del b
    d = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    check(d.data_ptr() != b_ptr or fences() > before,
          "record_stream fenced the block: %#x again, fences %d -> %d" %
          (d.data_ptr(), before, fences()))
    del d
    # A pointer gpualloc never served raises, naming the call.
    try:
        torch._standin._record_stream(0x7000, side.cuda_stream)
    except RuntimeError as e:
        check("record_stream" in str(e) and "0x7000" in str(e), str(e))
    else:
        raise AssertionError("record_stream of an unknown pointer passed")


def _graph_case():
    torch, gt = setup()
    g = torch.cuda.CUDAGraph()
    before = gt.stats()
    with torch.cuda.graph(g):
        static = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
        scratch = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
        del scratch
    s = gt.stats()
    check(s["gpualloc.pool_bytes_in_use"] >= 4 * MiB,
          "the capture allocated from a private pool: %r" % s)
    # After the capture, the default stream allocates outside the pool.
    outside = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    check(gt.stats()["gpualloc.pool_bytes_in_use"] ==
          s["gpualloc.pool_bytes_in_use"], "outside the pool")
    del outside
    # A second graph sharing the pool (graph_pool_handle).
    pool = torch.cuda.graph_pool_handle()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    with torch.cuda.graph(g2, pool=pool):
        y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    del x, y
    g1.reset()
    check(gt.stats()["gpualloc.pool_bytes_reserved"] > 0, "g2 holds the pool")
    g2.reset()
    del static
    g.reset()
    s = gt.stats()
    check(s["gpualloc.pool_bytes_reserved"] == 0,
          "every pool released: %r" % s)
    check(before["gpualloc.pool_bytes_reserved"] == 0, "none before")
    check(gt.last_error() == "", "no error: " + gt.last_error())


def case_graph_pools():
    """torch 2.3+: begin_allocate_to_pool with the capture's filter."""
    _graph_case()


def case_graph_pools_torch_2_2():
    """torch 2.1/2.2: begin_allocate_stream_to_pool."""
    _graph_case()


def case_memory_fraction():
    """set_per_process_memory_fraction sets the limit; past it, allocation
    raises, naming gpualloc's out-of-memory report."""
    torch, gt = setup()
    torch.cuda.set_per_process_memory_fraction(0.25)
    limit = gt.stats()["gpualloc.bytes_limit"]
    check(limit == 2 << 30, "a quarter of 8 GiB: %d" % limit)
    try:
        torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    except RuntimeError as e:
        check("out of memory" in str(e), str(e))
    else:
        raise AssertionError("3 GiB under a 2 GiB limit passed")
    a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    del a
    check(gt.stats()["num_ooms"] == 1, gt.stats())
    torch.cuda.set_per_process_memory_fraction(1.0)
    b = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    del b


def case_init_checks_devices():
    """torch's CUDA initialization reaches the hook's init, which refuses a
    backend that sees fewer devices than torch (the simulator's one here,
    where the stand-in's CUDA reports two)."""
    torch, gt = setup()
    try:
        torch.empty(MiB, dtype=torch.uint8, device="cuda")
    except RuntimeError as e:
        check("PyTorch sees 2 device(s)" in str(e) and
              "GPUALLOC_BACKEND" in str(e), str(e))
    else:
        raise AssertionError("init passed with 2 devices for 1")


def case_bad_setting():
    """A bad setting raises ValueError at enable(), naming it."""
    import torch  # noqa: F401
    import gpualloc.torch as gt
    try:
        gt.enable(config="backend=sim,mem_fraction=1.5", library=HOOK)
    except ValueError as e:
        check("mem_fraction" in str(e) and "1.5" in str(e), str(e))
    else:
        raise AssertionError("mem_fraction=1.5 passed")


def case_snapshot():
    """stats() and snapshot() replace what torch raises on."""
    torch, gt = setup("backend=sim,device_memory=8GiB,history=1000")
    gt.set_context("forward")
    a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    gt.set_context(None)
    for fn in (torch.cuda.memory_stats, torch.cuda.max_memory_reserved):
        try:
            fn()
        except RuntimeError as e:
            check("CUDAPluggableAllocator" in str(e), str(e))
        else:
            raise AssertionError(fn.__name__ + " did not raise")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "snapshot.pickle")
        gt.snapshot(path)
        import pickle
        with open(path, "rb") as f:
            snap = pickle.load(f)
        check("segments" in snap and "device_traces" in snap, list(snap))
    j = gt.snapshot_json()
    check(isinstance(j, dict) and j, "json snapshot")
    del a


def case_export_import():
    """export() / import_tensor() between two gpualloc handles of one
    process (the simulator's fake memory shares between its instances):
    the import is closed when its tensor dies, and a freed exported block
    is held until then."""
    torch, gt = setup()
    a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    description = gt.export(a)
    check(isinstance(description, bytes) and len(description) > 64,
          description)
    check(gt.export(a) == description, "the same description")
    check(gt.stats()["gpualloc.bytes_exported"] >= MiB, gt.stats())
    # Its own description is refused (an import is another process's).
    try:
        gt.import_tensor(description, (MiB,), torch.uint8)
    except ValueError as e:
        check("exported by this allocator" in str(e), str(e))
    else:
        raise AssertionError("imported its own block")
    try:
        gt.import_tensor(description[:-1], (MiB,), torch.uint8)
    except ValueError as e:
        check("not valid" in str(e), str(e))
    else:
        raise AssertionError("imported a truncated description")
    del a
    check(gt.stats()["gpualloc.bytes_exported"] == 0, gt.stats())


def case_refusals():
    """Too old a torch, or one without CUDA/ROCm, is refused clearly."""
    import torch
    import gpualloc.torch as gt
    try:
        gt.enable(config="backend=sim", library=HOOK)
    except RuntimeError as e:
        msg = str(e)
    else:
        raise AssertionError("enable() passed")
    if torch.version.cuda is None and torch.version.hip is None:
        check("without CUDA or ROCm" in msg, msg)
    else:
        check("2.1 or newer" in msg and torch.__version__ in msg, msg)
    check(not gt.enabled(), "not enabled")


def case_after_cuda_init():
    """enable() after torch initialized CUDA says to call it earlier."""
    import torch
    import gpualloc.torch as gt
    torch.cuda.current_device()  # initializes CUDA
    try:
        gt.enable(config="backend=sim", library=HOOK)
    except RuntimeError as e:
        check("right after `import torch`" in str(e), str(e))
    else:
        raise AssertionError("enable() after CUDA init passed")


def case_pinned_host():
    """pinned_empty: a uint8 CPU tensor over the host pool's memory, freed
    through the pool when the tensor goes; host_record_stream records the
    stream whose copy used it (torch has no pluggable host allocator)."""
    import gc
    import torch
    import gpualloc.torch as gt
    gt.enable(config="backend=sim", library=HOOK)
    t = gt.pinned_empty(3 << 20)
    p = t.data_ptr()
    check(p % 4096 == 0, f"pinned_empty's memory at {p:#x}")
    check(t.numel() == 3 << 20, f"{t.numel()} bytes")
    check(gt.host_stats()["bytes_in_use"] >= 3 << 20, "host pool in use")
    gt.host_record_stream(t, torch.cuda.current_stream())
    del t
    gc.collect()
    check(gt.host_stats()["events_recorded"] == 1, "an event at the free")
    t = gt.pinned_empty(3 << 20)  # nothing queued: the block is reused
    check(t.data_ptr() == p, "reused")
    check(gt.host_stats()["backend_allocs"] == 1, "one region pinned")
    del t
    gc.collect()
    gt.host_trim()
    check(gt.host_stats()["bytes_reserved"] == 0, "trimmed")
    try:
        gt.pinned_empty(0)
    except ValueError:
        pass
    else:
        raise AssertionError("pinned_empty(0) passed")


def _mempool_setup():
    import torch
    import gpualloc.torch as gt
    gt.mem_pool("weights", config="backend=sim,device_memory=8GiB",
                library=HOOK)  # sets the hook up
    return torch, gt


def case_mempool_segments():
    """A MemPool over gpualloc: torch's caching allocator stays on top and
    calls gpualloc once per segment (2 MiB for small tensors), on the stream
    it allocates on, with the pool's tag; every tensor of a segment comes
    out of that one call."""
    torch, gt = _mempool_setup()
    pool = gt.mem_pool("weights")
    check(isinstance(pool, torch.cuda.MemPool), type(pool))
    side = torch.cuda.Stream()
    before = gt.stats()["allocation.all.allocated"]
    with torch.cuda.stream(side), gt.use_mem_pool(pool):
        tensors = [torch.empty(64 << 10, dtype=torch.uint8, device="cuda")
                   for _ in range(16)]
    s = gt.stats()
    check(s["allocation.all.allocated"] - before == 1,
          f"one segment for 16 tensors: {s}")
    check(s["allocated_bytes.all.current"] == 2 * MiB, s)
    chunks = [c for r in gt.snapshot_json()["regions"] for c in r["chunks"]
              if c["state"] == "in_use"]
    check(len(chunks) == 1 and chunks[0]["size"] == 2 * MiB, chunks)
    check(chunks[0].get("tag") == gt._tag_value("weights"), chunks[0])
    # A tag's memory is a pool of its own, whose chunks the snapshot lists
    # with the streams they were allocated on.
    pool_chunks = [c for p in gt.snapshot_json()["pools"]
                   if p["id"] == gt._tag_value("weights")
                   for r in p["regions"] for c in r["chunks"]]
    check([c["stream"] for c in pool_chunks] == [side.cuda_stream],
          f"allocated on the side stream: {pool_chunks}")
    # A large tensor: a segment of its own, rounded to 2 MiB.
    with gt.use_mem_pool(pool):
        big = torch.empty(11 * MiB, dtype=torch.uint8, device="cuda")
    check(gt.stats()["allocated_bytes.all.current"] == 14 * MiB, gt.stats())
    del tensors, big
    import gc
    gc.collect()
    # torch keeps the freed segments cached in the pool: nothing freed yet.
    check(gt.stats()["allocated_bytes.all.current"] == 14 * MiB, gt.stats())
    del pool
    gc.collect()  # ~MemPool: its free segments go back to gpualloc
    check(gt.stats()["allocated_bytes.all.current"] == 0, gt.stats())


def case_region_sleep_wake():
    """`with gt.region(tag):` (torch_memory_saver's shape): the pool of the
    tag; sleep gives the whole pool back keeping its addresses, wake maps
    it again; a new segment for a sleeping pool is refused (a tensor that
    fits a segment torch already holds is torch's to place: the program must
    not allocate into a pool while it sleeps, as with vLLM's)."""
    torch, gt = _mempool_setup()
    with gt.region("kv_cache"):
        kv = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
        w = torch.empty(256 << 10, dtype=torch.uint8, device="cuda")
    address = kv.data_ptr()
    s = gt.stats()
    check(s["reserved_bytes.all.current"] >= 22 * MiB, s)
    gt.sleep("kv_cache")
    s = gt.stats()
    check(s["gpualloc.bytes_sleeping"] == 22 * MiB, f"20 + 2 MiB asleep: {s}")
    try:
        with gt.region("kv_cache"):
            torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    except RuntimeError as e:
        check("asleep" in str(e), str(e))
    else:
        raise AssertionError("allocated into a sleeping pool")
    gt.wake("kv_cache")
    check(gt.stats()["gpualloc.bytes_sleeping"] == 0, gt.stats())
    check(kv.data_ptr() == address, "same address after wake")
    del kv, w


def case_mempool_refusals():
    """A bad tag, a pool not made by mem_pool, mem_pool after enable(),
    and MemPool before PyTorch 2.5, each say what to do."""
    import torch
    import gpualloc.torch as gt
    for bad in (0, -1, 1 << 31, "", 1.5):
        try:
            gt.mem_pool(bad, config="backend=sim", library=HOOK)
        except ValueError as e:
            check("tag" in str(e) and repr(bad) in str(e), str(e))
        else:
            raise AssertionError(f"mem_pool({bad!r}) passed")
    try:
        with gt.use_mem_pool(object()):
            pass
    except ValueError as e:
        check("mem_pool()" in str(e), str(e))
    else:
        raise AssertionError("use_mem_pool of a foreign pool passed")
    gt.enable(config="backend=sim", library=HOOK)
    try:
        gt.mem_pool(1)
    except RuntimeError as e:
        check("gt.tag" in str(e), str(e))
    else:
        raise AssertionError("mem_pool() after enable() passed")


def case_mempool_old_torch():
    """torch 2.4 has no MemPool: mem_pool() names the version needed."""
    import gpualloc.torch as gt
    try:
        gt.mem_pool(1, config="backend=sim", library=HOOK)
    except RuntimeError as e:
        check("2.5 or newer" in str(e) and "2.4.1" in str(e), str(e))
    else:
        raise AssertionError("mem_pool() on torch 2.4 passed")


def case_without_torch():
    """enable() where torch is not installed says what to install."""
    import gpualloc.torch as gt
    try:
        gt.enable(config="backend=sim", library=HOOK)
    except ImportError as e:
        check("pip install torch" in str(e) and "No module named" in str(e),
              str(e))
    else:
        raise AssertionError("enable() without torch passed")


CASES = {name[5:]: fn for name, fn in globals().items()
         if name.startswith("case_")}
# The stand-in torch each case runs against.
ENV = {
    "graph_pools_torch_2_2": {"STANDIN_TORCH_VERSION": "2.2.2"},
    "refusals": {"STANDIN_TORCH_VERSION": "2.0.1"},
    "init_checks_devices": {"STANDIN_DEVICE_COUNT": "2"},
    "mempool_old_torch": {"STANDIN_TORCH_VERSION": "2.4.1"},
}


class TorchHelper(unittest.TestCase):
    pass


def _make(name):
    def run(self):
        env = dict(os.environ, **ENV.get(name, {}))
        if name == "without_torch":  # gpualloc's package only, no torch
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                if "torch_standin" not in p)
            if subprocess.run([sys.executable, "-c", "import torch"],
                              env=env, capture_output=True).returncode == 0:
                self.skipTest("a real torch is installed")
        r = subprocess.run([sys.executable, __file__, name], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            self.fail(f"case {name} failed:\n{r.stdout}\n{r.stderr}")
    return run


for _name in CASES:
    setattr(TorchHelper, "test_" + _name, _make(_name))


def _refusal_without_cuda(self):
    env = dict(os.environ, STANDIN_TORCH_BUILD="cpu")
    r = subprocess.run([sys.executable, __file__, "refusals"], env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        self.fail(f"refusals (cpu build) failed:\n{r.stdout}\n{r.stderr}")


TorchHelper.test_refusals_cpu_build = _refusal_without_cuda


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in CASES:
        CASES[sys.argv[1]]()
        print("ok:", sys.argv[1])
    else:
        unittest.main(verbosity=2)
