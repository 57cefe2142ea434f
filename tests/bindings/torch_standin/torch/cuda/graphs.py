# SPDX-License-Identifier: Apache-2.0
"""torch.cuda.graphs: CUDAGraph, graph and graph_pool_handle."""
import torch


def graph_pool_handle():
    return torch._C._graph_pool_handle()


class CUDAGraph(torch._C._CUDAGraph):
    def capture_begin(self, pool=None, capture_error_mode="global"):
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self):
        super().capture_end()


class graph:
    """with torch.cuda.graph(g, pool=None, stream=None): captures on a side
    stream (torch's default_capture_stream) unless one is given."""
    default_capture_stream = None

    def __init__(self, cuda_graph, pool=None, stream=None,
                 capture_error_mode="global"):
        if self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = torch.cuda.Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = (stream if stream is not None
                               else self.__class__.default_capture_stream)
        self.stream_ctx = torch.cuda.stream(self.capture_stream)
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.cuda.synchronize()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(
            *self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type, exc_value, traceback):
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(exc_type, exc_value, traceback)
