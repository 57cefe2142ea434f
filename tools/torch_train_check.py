#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Trains a small transformer for a few steps on the GPU and reports its memory.

    tools/torch_train_check.py --allocator native
    tools/torch_train_check.py --allocator gpualloc --hook build/.../libgpualloc_torch.so

tools/device-check.sh runs it once with PyTorch's own caching allocator and once
with gpualloc plugged in through PyTorch's pluggable-allocator hook
(torch.cuda.memory.CUDAPluggableAllocator with gpualloc_torch_malloc /
gpualloc_torch_free), each in a fresh process (the allocator must be chosen
before the first CUDA allocation), and compares the peaks.

Memory is measured two ways:
  * peak_device_bytes: device memory in use (cudaMemGetInfo: total - free) above
    what was in use before the model was made, sampled after every forward,
    backward and optimizer step; it sees whatever either allocator holds.
  * max_memory_reserved: the allocator's own peak reserved bytes:
    torch.cuda.max_memory_reserved() for PyTorch's allocator, and for gpualloc
    peak_bytes_reserved read through the hook's gpualloc_torch_get_stats
    (ctypes; the leading fields of gpualloc_stats_t, include/gpualloc/gpualloc.h).

Prints one JSON object on the last line of stdout. Exit status 0 on success, 1
on failure; without a CUDA device it says so and exits 0.
"""

import argparse
import ctypes
import json
import sys
import time


class _StatsPrefix(ctypes.Structure):
    """The leading fields of gpualloc_stats_t; struct_size tells the library
    how much of the struct this caller has."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "struct_size", "num_allocs", "bytes_in_use", "peak_bytes_in_use",
        "largest_alloc_size", "bytes_limit", "bytes_reserved",
        "peak_bytes_reserved")]


def gpualloc_peak_reserved(hook_path, device_index):
    lib = ctypes.CDLL(hook_path)
    stats = _StatsPrefix(struct_size=ctypes.sizeof(_StatsPrefix))
    if lib.gpualloc_torch_get_stats(device_index, ctypes.byref(stats)) != 0:
        lib.gpualloc_torch_last_error.restype = ctypes.c_char_p
        raise RuntimeError(lib.gpualloc_torch_last_error().decode())
    return int(stats.peak_bytes_reserved)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocator", choices=["native", "gpualloc"], default="native")
    parser.add_argument("--hook", help="path of libgpualloc_torch.so (gpualloc only)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()

    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    if args.allocator == "gpualloc":
        if not args.hook:
            print("--allocator gpualloc needs --hook", file=sys.stderr)
            return 1
        hook = torch.cuda.memory.CUDAPluggableAllocator(
            args.hook, "gpualloc_torch_malloc", "gpualloc_torch_free")
        torch.cuda.memory.change_current_allocator(hook)

    torch.manual_seed(0)
    device = torch.device("cuda", 0)
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info(device)
    baseline = total - free0
    peak = 0

    def sample():
        nonlocal peak
        free, _ = torch.cuda.mem_get_info(device)
        peak = max(peak, total - free - baseline)

    vocab = 8192
    layer = nn.TransformerEncoderLayer(
        d_model=args.d_model, nhead=8, dim_feedforward=4 * args.d_model,
        dropout=0.0, batch_first=True)
    model = nn.Sequential(
        nn.Embedding(vocab, args.d_model),
        nn.TransformerEncoder(layer, num_layers=args.layers),
        nn.Linear(args.d_model, vocab),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    sample()

    losses = []
    start = time.time()
    for _ in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq), device=device)
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        torch.cuda.synchronize()
        sample()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.cuda.synchronize()
        sample()
        optimizer.step()
        torch.cuda.synchronize()
        sample()
        losses.append(float(loss.item()))
    seconds = time.time() - start

    if args.allocator == "native":
        reserved = int(torch.cuda.max_memory_reserved(device))
    else:
        reserved = gpualloc_peak_reserved(args.hook, device.index)
    result = {
        "allocator": args.allocator,
        "steps": args.steps,
        "loss_first": round(losses[0], 4),
        "loss_last": round(losses[-1], 4),
        "peak_device_bytes": int(peak),
        "max_memory_reserved": reserved,
        "seconds": round(seconds, 2),
        "torch": torch.__version__,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
