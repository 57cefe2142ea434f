# SPDX-License-Identifier: Apache-2.0
"""gpualloc as PyTorch's CUDA (or ROCm) allocator.

    import torch
    import gpualloc.torch as gt

    gt.enable()            # before the first CUDA tensor
    ...
    print(gt.max_memory_reserved())
    gt.snapshot("snapshot.pickle")   # for https://pytorch.org/memory_viz

enable() loads libgpualloc_torch.so, makes it torch's allocator
(torch.cuda.memory.CUDAPluggableAllocator) and registers every optional
function torch offers a pluggable allocator: init, empty_cache (reset),
set_per_process_memory_fraction, Tensor.record_stream, and the private pools
of CUDA graphs (torch.cuda.graph, torch.compile(mode="reduce-overhead")).
It needs PyTorch 2.1 or newer built with CUDA or ROCm.

With any pluggable allocator torch raises on its own memory statistics
(torch.cuda.memory_stats, max_memory_reserved, memory_summary,
_record_memory_history, _dump_snapshot); this module gives the same
figures: stats() (PyTorch's key names), memory_allocated(),
max_memory_reserved(), reset_peak_memory_stats(), memory_summary() and
snapshot(path).

Without enable(), torch's own caching allocator can stay on top and take
gpualloc's memory for a pool of its own (PyTorch 2.5+, torch.cuda.MemPool):
mem_pool(tag) makes such a pool, whose segments gpualloc allocates under
`tag`, and sleep(tag) / wake(tag) give a whole pool back and map it again at
the same addresses (vLLM's sleep mode). `with region(tag):` routes the
thread's allocations to the tag's pool (torch_memory_saver's shape).

Configuration: PyTorch's conventions (growth on demand; the whole device
unless a fraction is set), then PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF
/ PYTORCH_HIP_ALLOC_CONF, the GPUALLOC_* variables, and enable(config=...)
("key=value,..."), each over the one before. A bad setting raises
ValueError naming it.
"""
import contextlib
import ctypes
import weakref
import json
import os
import threading

from . import _native

__all__ = [
    "enable", "enabled", "library_path", "last_error", "GpuallocError",
    "stats", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "memory_summary", "snapshot", "snapshot_json", "set_context",
    "release_stream", "tag", "sleep", "wake", "MIN_TORCH",
    "mem_pool", "use_mem_pool", "region", "MIN_TORCH_MEMPOOL",
    "pinned_empty", "host_record_stream", "host_trim", "host_stats",
]

# The oldest PyTorch whose pluggable allocator gpualloc serves fully (2.0's
# graph hooks, set_capture_begin_fn and friends, are not served).
MIN_TORCH = (2, 1)

# The oldest PyTorch with torch.cuda.MemPool (and use_mem_pool).
MIN_TORCH_MEMPOOL = (2, 5)

_LIBRARY = _native.TORCH_LIBRARY
_INVALID_ARGUMENT = _native.INVALID_ARGUMENT

GpuallocError = _native.GpuallocError
_Stats = _native.Stats


# gpualloc_stats_t's fields under PyTorch's memory_stats() names where torch
# has one; the rest under "gpualloc.<field>".
_TORCH_NAMES = {
    "bytes_in_use": "allocated_bytes.all.current",
    "peak_bytes_in_use": "allocated_bytes.all.peak",
    "bytes_reserved": "reserved_bytes.all.current",
    "peak_bytes_reserved": "reserved_bytes.all.peak",
    "bytes_requested": "requested_bytes.all.current",
    "peak_bytes_requested": "requested_bytes.all.peak",
    "num_allocs": "allocation.all.allocated",
    "num_ooms": "num_ooms",
    "backend_allocs": "num_device_alloc",
    "backend_frees": "num_device_free",
}

_lock = threading.Lock()
_lib = None
_path = None
_config = None
_configured = False  # gpualloc_torch_configure ran (enable or mem_pool)
_allocator = None  # torch's CUDAPluggableAllocator made current, kept alive
_pool_allocator = None  # the CUDAPluggableAllocator the MemPools route to


def library_path():
    """Where enable() loads libgpualloc_torch.so from when not told: inside
    this package (the wheel), else where `meson install` put it, else the
    dynamic linker's search."""
    return _native.library_path(_LIBRARY)


def _import_torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"gpualloc.torch needs PyTorch {MIN_TORCH[0]}.{MIN_TORCH[1]} or "
            f"newer built with CUDA or ROCm, and `import torch` failed ({e}): "
            "install it (pip install torch; in a virtual environment made "
            "with --system-site-packages, Debian's python3-torch is seen "
            "too)") from None
    return torch


def _load(path):
    lib = _native.open_library(path)
    lib.gpualloc_torch_last_error.restype = ctypes.c_char_p
    lib.gpualloc_torch_configure.argtypes = [ctypes.c_char_p]
    lib.gpualloc_torch_get_stats.argtypes = [ctypes.c_int,
                                             ctypes.POINTER(_Stats)]
    lib.gpualloc_torch_reset_peak_stats.argtypes = [ctypes.c_int]
    lib.gpualloc_torch_snapshot_pickle.argtypes = [ctypes.c_int,
                                                   ctypes.c_char_p]
    lib.gpualloc_torch_snapshot_json.restype = ctypes.c_void_p
    lib.gpualloc_torch_snapshot_json.argtypes = [ctypes.c_int]
    lib.gpualloc_torch_string_free.argtypes = [ctypes.c_void_p]
    lib.gpualloc_torch_set_context.argtypes = [ctypes.c_char_p]
    lib.gpualloc_torch_release_stream.argtypes = [ctypes.c_void_p]
    lib.gpualloc_torch_set_tag.argtypes = [ctypes.c_uint32]
    lib.gpualloc_torch_sleep.argtypes = [ctypes.c_int, ctypes.c_uint32,
                                         ctypes.c_int]
    lib.gpualloc_torch_wake.argtypes = [ctypes.c_int, ctypes.c_uint32]
    _declare_host(lib)
    lib.gpualloc_torch_export.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t)]
    lib.gpualloc_torch_import.argtypes = [
        ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    lib.gpualloc_torch_close_import.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return lib


def _check_torch(torch):
    """Refuses, saying why, a torch gpualloc cannot serve."""
    version = getattr(torch, "__version__", "unknown")
    try:
        release = tuple(int(p) for p in
                        version.split("+")[0].split(".")[:2])
    except ValueError:
        release = MIN_TORCH
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    if release < MIN_TORCH or not hasattr(memory, "CUDAPluggableAllocator"):
        raise RuntimeError(
            f"gpualloc needs PyTorch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
            f"(this is {version}): older releases have no pluggable "
            "allocator, or (2.0) graph hooks gpualloc does not serve, so CUDA "
            "graphs would capture without a private pool. Upgrade torch.")
    version_info = getattr(torch, "version", None)
    if (getattr(version_info, "cuda", None) is None and
            getattr(version_info, "hip", None) is None):
        raise RuntimeError(
            f"gpualloc: PyTorch {version} was built without CUDA or ROCm "
            "(torch.version.cuda and torch.version.hip are None); install a "
            "CUDA or ROCm build of torch.")
    hooks = getattr(torch._C, "_CUDAPluggableAllocator", None)
    if not (hasattr(hooks, "set_begin_allocate_to_pool") or
            hasattr(hooks, "set_begin_allocate_stream_to_pool")):
        raise RuntimeError(
            f"gpualloc: PyTorch {version}'s pluggable allocator has neither "
            "graph-pool hook gpualloc serves (set_begin_allocate_to_pool, "
            "2.3+; set_begin_allocate_stream_to_pool, 2.1 and 2.2); upgrade "
            "torch.")


def _raise_status(status, what):
    message = _lib.gpualloc_torch_last_error().decode()
    if status == _INVALID_ARGUMENT:
        raise ValueError(f"gpualloc: {message}")
    raise GpuallocError(f"gpualloc: {what}: {message}")


def enable(config=None, library=None):
    """Makes gpualloc PyTorch's allocator, with every hook torch offers.

    Call it once, after `import torch` and before the first CUDA tensor
    (torch cannot swap an allocator that served memory). `config` is a
    configuration string ("key=value,...", e.g. "expandable=true,history=
    100000") that wins over the environment; `library` the path of
    libgpualloc_torch.so (default: library_path()). A second call with the
    same arguments does nothing. Raises RuntimeError when torch is too old,
    has no CUDA/ROCm, or initialized CUDA already; ValueError naming the
    variable or key of a bad setting.
    """
    global _lib, _path, _config, _allocator, _configured
    torch = _import_torch()
    with _lock:
        path = library or library_path()
        if _allocator is not None:
            if (path, config) == (_path, _config):
                return
            raise RuntimeError(
                "gpualloc: enable() ran already with "
                f"library={_path!r}, config={_config!r}; PyTorch's "
                "allocator cannot be swapped again")
        _check_torch(torch)
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "gpualloc: PyTorch initialized CUDA already (a CUDA tensor, "
                "torch.cuda.init() or a CUDA call ran), and torch cannot swap "
                "an allocator that served memory: call gpualloc.torch.enable() "
                "right after `import torch`.")
        if _pool_allocator is not None:
            raise RuntimeError(
                "gpualloc: mem_pool() made torch's caching allocator take "
                "gpualloc's memory already; torch's allocator cannot also be "
                "replaced (use enable() or mem_pool(), not both)")
        _lib = _load(path)
        status = _lib.gpualloc_torch_configure(
            config.encode() if config else None)
        if status != 0:
            _raise_status(status, "setting up")
        _configured = True
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            path, "gpualloc_torch_malloc", "gpualloc_torch_free")
        hooks = allocator.allocator()

        def address(name):
            return ctypes.cast(getattr(_lib, name), ctypes.c_void_p).value

        hooks.set_init_fn(address("gpualloc_torch_init"))
        hooks.set_reset_fn(address("gpualloc_torch_reset"))
        hooks.set_memory_fraction_fn(address("gpualloc_torch_memory_fraction"))
        hooks.set_record_stream_fn(address("gpualloc_torch_record_stream"))
        if hasattr(hooks, "set_begin_allocate_to_pool"):  # 2.3+
            hooks.set_begin_allocate_to_pool(
                address("gpualloc_torch_begin_allocate_to_pool"))
            hooks.set_end_allocate_to_pool_fn(
                address("gpualloc_torch_end_allocate_to_pool"))
        else:  # 2.1, 2.2
            hooks.set_begin_allocate_stream_to_pool(
                address("gpualloc_torch_begin_allocate_stream_to_pool"))
            hooks.set_end_allocate_stream_to_pool_fn(
                address("gpualloc_torch_end_allocate_stream_to_pool"))
        hooks.set_release_pool(address("gpualloc_torch_release_pool"))
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            raise RuntimeError(
                f"gpualloc: torch refused the allocator swap ({e}); call "
                "gpualloc.torch.enable() right after `import torch`, before "
                "any CUDA tensor.") from None
        _allocator, _path, _config = allocator, path, config


def enabled():
    """Whether enable() made gpualloc PyTorch's allocator."""
    return _allocator is not None


def _need():
    if _lib is None:
        raise RuntimeError("gpualloc: call gpualloc.torch.enable() (or "
                           "mem_pool()) first")
    return _lib


def last_error():
    """The latest failure's message from the hook ("" if none)."""
    return _need().gpualloc_torch_last_error().decode()


def _device(device):
    if device is None:
        import torch
        return torch.cuda.current_device() if torch.cuda.is_initialized() \
            else 0
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if index is not None:
        return index
    text = str(device)
    return int(text.split(":")[1]) if ":" in text else _device(None)


def _raw_stats(device):
    lib = _need()
    s = _Stats(struct_size=ctypes.sizeof(_Stats))
    status = lib.gpualloc_torch_get_stats(_device(device), ctypes.byref(s))
    if status != 0:
        _raise_status(status, "stats")
    return s


def stats(device=None):
    """The device's statistics as a dict, with torch.cuda.memory_stats()'s
    key names where torch has them (reserved_bytes.all.peak,
    allocated_bytes.all.current, num_ooms, num_device_alloc, ...) and
    "gpualloc.<field>" for the rest (the limit, largest free block,
    fragmentation, events, waits, graph pools, memory asleep, front
    caches)."""
    s = _raw_stats(device)
    out = {}
    for name, _ in _Stats._fields_[1:]:
        out[_TORCH_NAMES.get(name, "gpualloc." + name)] = getattr(s, name)
    return out


memory_stats = stats


def memory_allocated(device=None):
    return _raw_stats(device).bytes_in_use


def max_memory_allocated(device=None):
    return _raw_stats(device).peak_bytes_in_use


def memory_reserved(device=None):
    return _raw_stats(device).bytes_reserved


def max_memory_reserved(device=None):
    return _raw_stats(device).peak_bytes_reserved


def reset_peak_memory_stats(device=None):
    status = _need().gpualloc_torch_reset_peak_stats(_device(device))
    if status != 0:
        _raise_status(status, "reset_peak_memory_stats")


def _gib(n):
    return f"{n / 2**30:10.3f} GiB"


def memory_summary(device=None):
    """A short text table of the device's memory, as memory_summary gives."""
    s = _raw_stats(device)
    rows = [
        ("allocated (in use)", s.bytes_in_use, s.peak_bytes_in_use),
        ("requested", s.bytes_requested, s.peak_bytes_requested),
        ("reserved", s.bytes_reserved, s.peak_bytes_reserved),
    ]
    lines = [f"gpualloc memory summary, device {_device(device)}",
             f"{'':20} {'current':>14} {'peak':>14}"]
    lines += [f"{name:20} {_gib(cur)} {_gib(peak)}" for name, cur, peak in rows]
    lines.append(f"{'limit':20} {_gib(s.bytes_limit)}")
    lines.append(f"{'largest free block':20} {_gib(s.largest_free_block_bytes)}"
                 f"   fragmentation {s.fragmentation:.3f}")
    lines.append(f"allocations {s.num_allocs}, out of memory {s.num_ooms}, "
                 f"device allocs/frees {s.backend_allocs}/{s.backend_frees}, "
                 f"host waits {s.host_waits}")
    return "\n".join(lines)


def snapshot(path, device=None):
    """Writes the device's memory snapshot as the pickle
    torch.cuda.memory._dump_snapshot writes (open it in
    https://pytorch.org/memory_viz); with the history on (config
    "history=N" or GPUALLOC_HISTORY=N) it holds the allocation trace."""
    status = _need().gpualloc_torch_snapshot_pickle(_device(device),
                                                    os.fsencode(path))
    if status != 0:
        _raise_status(status, f"snapshot({path!r})")


def snapshot_json(device=None):
    """The device's regions and blocks as a dict (gpualloc's JSON
    snapshot)."""
    lib = _need()
    text = lib.gpualloc_torch_snapshot_json(_device(device))
    if not text:
        raise GpuallocError("gpualloc: snapshot_json: " + last_error())
    try:
        return json.loads(ctypes.string_at(text).decode())
    finally:
        lib.gpualloc_torch_string_free(text)


def set_context(text):
    """The calling thread's context (an op name, a stack) for the history's
    events; None clears it. Keep the set of texts bounded."""
    _need().gpualloc_torch_set_context(text.encode() if text else None)


def release_stream(stream):
    """Call before destroying `stream` (a torch.cuda.Stream or its
    cuda_stream int): gpualloc never records on or waits for it again."""
    handle = getattr(stream, "cuda_stream", stream)
    status = _need().gpualloc_torch_release_stream(handle)
    if status != 0:
        _raise_status(status, "release_stream")


# Tags: an int from 1 to 2**31 - 1, or a name (torch_memory_saver's and
# vLLM's "weights", "kv_cache"), which gets a value from 2**31 up, the same
# for the life of the process.
_NAMED_TAGS_FROM = 1 << 31
_named_tags = {}
_thread = threading.local()  # .tag: the value this thread allocates with


def _tag_value(value):
    if isinstance(value, str) and value:
        with _lock:
            return _named_tags.setdefault(
                value, _NAMED_TAGS_FROM + len(_named_tags))
    if isinstance(value, int) and not isinstance(value, bool) and \
            (0 < value < _NAMED_TAGS_FROM or value in _named_tags.values()):
        return value
    raise ValueError(f"gpualloc: tag {value!r}: a tag is an int from 1 to "
                     f"{_NAMED_TAGS_FROM - 1} or a non-empty name")


@contextlib.contextmanager
def tag(value):
    """Within the block, this thread's allocations carry `value` (an int or
    a name, e.g. "weights"), for sleep() and wake(); the tag of an
    enclosing block comes back at its end."""
    lib = _need()
    value = _tag_value(value)
    previous = getattr(_thread, "tag", 0)
    lib.gpualloc_torch_set_tag(value)
    _thread.tag = value
    try:
        yield
    finally:
        lib.gpualloc_torch_set_tag(previous)
        _thread.tag = previous


def sleep(tag_value, backup=False, device=None):
    """Gives the tag's physical memory back to the device, keeping its
    addresses (needs expandable regions); backup=True keeps the content in
    host memory. With mem_pool(), the whole pool's segments; allocate
    nothing into that pool until wake(): torch places a tensor that fits a
    segment it holds without asking gpualloc."""
    value = _tag_value(tag_value)
    status = _need().gpualloc_torch_sleep(_device(device), value,
                                          1 if backup else 0)
    if status != 0:
        _raise_status(status, f"sleep({tag_value!r})")


def wake(tag_value, device=None):
    """Maps memory again under the tag's addresses (and restores a
    backup)."""
    value = _tag_value(tag_value)
    status = _need().gpualloc_torch_wake(_device(device), value)
    if status != 0:
        _raise_status(status, f"wake({tag_value!r})")


# --- torch.cuda.MemPool over gpualloc ----------------------------------------
# torch's caching allocator stays torch's allocator and keeps its segments in
# a private pool; the pool's CUDAPluggableAllocator, this hook, allocates each
# segment (2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB, above that
# the request rounded to 2 MiB), so gpualloc sees one call per segment, not
# per tensor. Each pool carries a tag, set on the thread while its segments
# are allocated, so sleep(tag) gives the whole pool back.

_region_pools = {}  # tag value -> the MemPool region() uses


def _check_mempool(torch):
    version = getattr(torch, "__version__", "unknown")
    if not (hasattr(torch.cuda, "MemPool") and
            hasattr(torch.cuda, "use_mem_pool")):
        raise RuntimeError(
            f"gpualloc: mem_pool() needs torch.cuda.MemPool and "
            f"torch.cuda.use_mem_pool (PyTorch {MIN_TORCH_MEMPOOL[0]}."
            f"{MIN_TORCH_MEMPOOL[1]} or newer; this is {version}); upgrade "
            "torch, or use enable() with tag() instead")


def mem_pool(tag_value, config=None, library=None):
    """A torch.cuda.MemPool whose segments gpualloc allocates under
    `tag_value` (an int or a name). Allocate into it with
    use_mem_pool(pool) or region(tag_value); sleep(tag_value) and
    wake(tag_value) then act on all of it. `config` and `library` as for
    enable(), used by the first call. Refused after enable(): with gpualloc
    as torch's allocator there is no caching allocator above it to pool."""
    global _lib, _path, _config, _configured, _pool_allocator
    torch = _import_torch()
    value = _tag_value(tag_value)
    _check_torch(torch)
    _check_mempool(torch)
    with _lock:
        if _allocator is not None:
            raise RuntimeError(
                "gpualloc: enable() made gpualloc torch's allocator, so torch "
                "has no caching allocator above it to keep a MemPool: use "
                "`with gt.tag(...)` to label allocations instead")
        path = library or _path or library_path()
        if _configured and (path, config) != (_path, _config) and \
                (library is not None or config is not None):
            raise RuntimeError(
                f"gpualloc: the hook was set up already with library="
                f"{_path!r}, config={_config!r}")
        if not _configured:
            _lib = _load(path)
            status = _lib.gpualloc_torch_configure(
                config.encode() if config else None)
            if status != 0:
                _raise_status(status, "setting up")
            _path, _config, _configured = path, config, True
        if _pool_allocator is None:
            _pool_allocator = torch.cuda.memory.CUDAPluggableAllocator(
                _path, "gpualloc_torch_malloc", "gpualloc_torch_free")
    pool = torch.cuda.MemPool(_pool_allocator.allocator())
    pool._gpualloc_tag = value
    return pool


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    """torch.cuda.use_mem_pool(pool, device) for a pool mem_pool() made,
    with the thread's allocations labelled with the pool's tag (a segment
    allocated under torch.cuda.use_mem_pool alone carries no tag)."""
    value = getattr(pool, "_gpualloc_tag", None)
    if value is None:
        raise ValueError("gpualloc: use_mem_pool takes a pool "
                         "gpualloc.torch.mem_pool() made")
    torch = _import_torch()
    with torch.cuda.use_mem_pool(pool, device), tag(value):
        yield


@contextlib.contextmanager
def region(tag_value, config=None, library=None):
    """Within the block, the thread's allocations go to the tag's pool
    (made by the first region of that tag, kept for the process): then
    sleep(tag_value) / wake(tag_value), as torch_memory_saver's
    region / pause / resume."""
    value = _tag_value(tag_value)
    pool = _region_pools.get(value)
    if pool is None:
        pool = mem_pool(tag_value, config, library)
        _region_pools.setdefault(value, pool)
        pool = _region_pools[value]
    with use_mem_pool(pool):
        yield


# --- Pinned host memory ------------------------------------------------
# PyTorch offers no pluggable host allocator (pin_memory() and
# torch.empty(..., pin_memory=True) always use its own CachingHostAllocator),
# so gpualloc's pool of pinned host memory is reached through these calls,
# not through torch: pinned_empty gives a uint8 CPU tensor over pool memory,
# freed through the pool when the tensor dies.

def _declare_host(lib):
    if not hasattr(lib, "gpualloc_torch_host_alloc"):
        return  # an older library: the calls below raise
    lib.gpualloc_torch_host_alloc.argtypes = [
        ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.gpualloc_torch_host_free.argtypes = [ctypes.c_void_p]
    lib.gpualloc_torch_host_record_stream.argtypes = [ctypes.c_void_p,
                                                      ctypes.c_void_p]
    lib.gpualloc_torch_host_get_stats.argtypes = [ctypes.POINTER(_Stats)]


class _PinnedBlock:
    """One pool allocation; frees it when the last reference goes (the
    ctypes array the tensor's storage holds keeps the only one)."""

    def __init__(self, lib, address):
        self._lib = lib
        self.address = address

    def __del__(self):
        status = self._lib.gpualloc_torch_host_free(self.address)
        if status != 0:  # never raise from a finalizer
            import sys
            print("gpualloc: pinned_empty's free: " +
                  self._lib.gpualloc_torch_last_error().decode(),
                  file=sys.stderr)


def pinned_empty(nbytes):
    """A uint8 CPU tensor of `nbytes` over page-locked memory of gpualloc's
    host pool (limit: host_memory_limit). The memory goes back to the pool
    when the tensor and every view of it are gone; before that, name the
    streams whose copies use it with host_record_stream: the pool reuses it
    only once their work completed."""
    import torch
    lib = _need()
    if nbytes <= 0:
        raise ValueError(f"gpualloc: pinned_empty({nbytes}): the size must "
                         "be positive")
    out = ctypes.c_void_p()
    status = lib.gpualloc_torch_host_alloc(nbytes, ctypes.byref(out))
    if status != 0:
        _raise_status(status, f"pinned_empty({nbytes})")
    buffer = (ctypes.c_uint8 * nbytes).from_address(out.value)
    # The tensor's storage holds the array, the array the block: the free
    # comes when the storage goes.
    buffer._gpualloc_block = _PinnedBlock(lib, out.value)
    return torch.frombuffer(buffer, dtype=torch.uint8)


def host_record_stream(tensor, stream):
    """Declares that work queued on `stream` (a torch.cuda.Stream or its
    cuda_stream int) uses the pinned tensor from pinned_empty."""
    handle = getattr(stream, "cuda_stream", stream)
    status = _need().gpualloc_torch_host_record_stream(tensor.data_ptr(),
                                                       handle)
    if status != 0:
        _raise_status(status, "host_record_stream")


def host_trim():
    """Returns the host pool's fully free regions."""
    status = _need().gpualloc_torch_host_trim()
    if status != 0:
        _raise_status(status, "host_trim")


def host_stats():
    """The host pool's gpualloc_stats_t fields as a dict."""
    stats = _Stats(struct_size=ctypes.sizeof(_Stats))
    status = _need().gpualloc_torch_host_get_stats(ctypes.byref(stats))
    if status != 0:
        _raise_status(status, "host_stats")
    return {name: getattr(stats, name) for name, _ in _Stats._fields_
            if name != "struct_size"}
# --- Sharing tensors with another process -----------------------------------
# torch's CUDAPluggableAllocator refuses torch's own IPC (share_memory_,
# CUDA tensors through torch.multiprocessing), so gpualloc shares the block
# behind a tensor itself: export() in one process, import_tensor() in the
# other (docs/REFERENCE.md, "Export descriptions").

def _tensor_device(tensor):
    device = getattr(tensor, "device", None)
    index = getattr(device, "index", None)
    if index is None:
        index = getattr(tensor, "_device", None)
    return _device(index)


def export(tensor):
    """The description (bytes) of the block behind `tensor`'s storage, for
    import_tensor() in another process on the same machine. The block stays
    allocated until this process frees it and every importer has closed it.
    """
    lib = _need()
    storage = getattr(tensor, "untyped_storage", None)
    ptr = storage().data_ptr() if storage is not None else tensor.data_ptr()
    device = _tensor_device(tensor)
    length = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(512)
    status = lib.gpualloc_torch_export(device, ctypes.c_void_p(ptr), buf,
                                       len(buf), ctypes.byref(length))
    if status == 8 and length.value > len(buf):  # RESOURCE_EXHAUSTED
        buf = ctypes.create_string_buffer(length.value)
        status = lib.gpualloc_torch_export(device, ctypes.c_void_p(ptr), buf,
                                           len(buf), ctypes.byref(length))
    if status != 0:
        _raise_status(status, "export")
    return buf.raw[:length.value]


# The imports alive, by address, for close(); weak, so that the tensor alone
# keeps its import open.
_imports = weakref.WeakValueDictionary()

# __cuda_array_interface__ type strings of torch's dtypes.
_TYPESTR = {"uint8": "|u1", "int8": "|i1", "bool": "|b1", "int16": "<i2",
            "int32": "<i4", "int64": "<i8", "float16": "<f2",
            "float32": "<f4", "float64": "<f8"}


class _Imported:
    """Owns one import: closed when the last tensor over it dies (torch's
    tensor keeps the object it was made from alive)."""

    def __init__(self, device, ptr, nbytes, shape, typestr):
        self.device, self.ptr, self.nbytes = device, ptr, nbytes
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "strides": None,
            "data": (ptr, False), "version": 3}

    def close(self):
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            status = _need().gpualloc_torch_close_import(
                self.device, ctypes.c_void_p(ptr))
            if status != 0:
                _raise_status(status, "close")

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to tell
            pass


def import_tensor(description, shape, dtype, device=None):
    """A CUDA tensor of `shape` and `dtype` over the block another process
    exported (export()), on `device` (the current one by default). The
    import is closed when the tensor (and every view of it) is gone; close()
    closes it earlier."""
    import torch
    lib = _need()
    index = _device(device)
    name = str(dtype).replace("torch.", "")
    if name not in _TYPESTR:
        raise ValueError(f"gpualloc: import_tensor: dtype {dtype} has no "
                         "__cuda_array_interface__ type string")
    ptr = ctypes.c_void_p(0)
    nbytes = ctypes.c_size_t(0)
    data = bytes(description)
    status = lib.gpualloc_torch_import(index, data, len(data),
                                       ctypes.byref(ptr), ctypes.byref(nbytes))
    if status != 0:
        _raise_status(status, "import_tensor")
    count = 1
    for n in shape:
        count *= n
    owner = _Imported(index, ptr.value, nbytes.value, shape, _TYPESTR[name])
    _imports[ptr.value] = owner
    if count * dtype.itemsize > nbytes.value:
        owner.close()
        raise ValueError(f"gpualloc: import_tensor: {tuple(shape)} of {dtype} "
                         f"needs {count * dtype.itemsize} bytes and the block "
                         f"has {nbytes.value}")
    return torch.as_tensor(owner, device=f"cuda:{index}")


def close(tensor):
    """Closes the import behind a tensor import_tensor() made, now (the
    tensor and its views must not be used afterwards)."""
    owner = _imports.get(tensor.data_ptr())
    if owner is None:
        raise ValueError("gpualloc: close: not a tensor import_tensor() made, "
                         "or closed already")
    owner.close()
