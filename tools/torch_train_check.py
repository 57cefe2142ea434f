#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Trains a small transformer for a few steps on the GPU and reports its memory.

    tools/torch_train_check.py --allocator native
    tools/torch_train_check.py --allocator gpualloc --hook build/.../libgpualloc_torch.so

tools/device-check.sh runs it once with PyTorch's own caching allocator and once
with gpualloc made PyTorch's allocator by the Python helper (gpualloc.torch,
python/ in the source tree: every hook torch offers registered), each in a
fresh process (the allocator must be chosen before the first CUDA
allocation), and compares the peaks. Both runs exercise what PyTorch users
rely on: a memory fraction (torch.cuda.set_per_process_memory_fraction), a
tensor used on a side stream (Tensor.record_stream), a captured CUDA graph
replayed and checked, and torch.cuda.empty_cache at the end.

Memory is measured two ways:
  * peak_device_bytes: device memory in use (cudaMemGetInfo: total - free) above
    what was in use before the model was made, sampled after every forward,
    backward and optimizer step; it sees whatever either allocator holds.
  * max_memory_reserved: the allocator's own peak reserved bytes:
    torch.cuda.max_memory_reserved() for PyTorch's allocator, and
    gpualloc.torch.max_memory_reserved() for gpualloc (torch raises on its
    own statistics with any pluggable allocator).

Prints one JSON object on the last line of stdout. Exit status 0 on success, 1
on failure; without a CUDA device it says so and exits 0.
"""

import argparse
import json
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocator", choices=["native", "gpualloc"], default="native")
    parser.add_argument("--hook", help="path of libgpualloc_torch.so (gpualloc only)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.9,
                        help="torch.cuda.set_per_process_memory_fraction")
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
        sys.path.insert(0, os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import gpualloc.torch as gt
        gt.enable(library=args.hook)

    torch.manual_seed(0)
    device = torch.device("cuda", 0)
    torch.cuda.init()
    torch.cuda.set_per_process_memory_fraction(args.fraction, device)
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

    side = torch.cuda.Stream(device)
    losses = []
    start = time.time()
    for _ in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq), device=device)
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        # A tensor of the main stream read on a side stream, then dropped:
        # record_stream keeps its memory from reuse until the side is done.
        probe = logits.detach().clone()
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            probe_sum = probe.float().sum()
        probe.record_stream(side)
        del probe
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
    torch.cuda.current_stream(device).wait_stream(side)
    del probe_sum

    # A CUDA graph: captured into a private pool, replayed, checked.
    lin = nn.Linear(args.d_model, args.d_model).to(device)
    static_in = torch.randn(args.batch, args.d_model, device=device)
    warm = torch.cuda.Stream(device)
    warm.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(warm), torch.no_grad():
        for _ in range(3):
            lin(static_in)
    torch.cuda.current_stream(device).wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad():
        with torch.cuda.graph(graph):
            static_out = lin(static_in)
        graph_ok = True
        for _ in range(3):
            static_in.copy_(torch.randn_like(static_in))
            graph.replay()
            torch.cuda.synchronize()
            graph_ok &= bool(torch.allclose(static_out, lin(static_in),
                                            atol=1e-4))
    del graph, static_out, static_in, lin
    torch.cuda.synchronize()

    if args.allocator == "native":
        reserved = int(torch.cuda.max_memory_reserved(device))
        torch.cuda.empty_cache()
        after_empty = int(torch.cuda.memory_reserved(device))
    else:
        reserved = gt.max_memory_reserved(device.index)
        torch.cuda.empty_cache()
        after_empty = gt.memory_reserved(device.index)
    result = {
        "allocator": args.allocator,
        "steps": args.steps,
        "loss_first": round(losses[0], 4),
        "loss_last": round(losses[-1], 4),
        "peak_device_bytes": int(peak),
        "max_memory_reserved": reserved,
        "reserved_after_empty_cache": after_empty,
        "graph_ok": graph_ok,
        "fraction": args.fraction,
        "seconds": round(seconds, 2),
        "torch": torch.__version__,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
