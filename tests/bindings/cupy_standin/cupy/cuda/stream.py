# SPDX-License-Identifier: Apache-2.0
"""cupy.cuda.Stream and get_current_stream (cupy/cuda/stream.pyx): a stream
made current by `with stream:` on this thread; Stream.null (handle 0) is the
current one otherwise."""
import threading

from . import runtime

_current = threading.local()


class Stream:
    null = None
    ptds = None

    def __init__(self, null=False, non_blocking=False, ptds=False,
                 priority=None):
        if null:
            self.ptr, self.device_id = 0, -1
        elif ptds:
            self.ptr, self.device_id = runtime.streamPerThread, -1
        else:
            flag = runtime.streamNonBlocking if non_blocking \
                else runtime.streamDefault
            self.ptr = runtime.streamCreateWithPriority(flag, priority or 0)
            self.device_id = runtime.getDevice()

    def use(self):
        _current.stream = self
        return self

    def __enter__(self):
        stack = _current.__dict__.setdefault("stack", [])
        stack.append(getattr(_current, "stream", None))
        _current.stream = self
        return self

    def __exit__(self, *exc):
        _current.stream = _current.stack.pop()

    def __del__(self):
        if getattr(self, "ptr", 0) not in (0, runtime.streamPerThread):
            runtime.streamDestroy(self.ptr)


Stream.null = Stream(null=True)
Stream.ptds = Stream(ptds=True)


def get_current_stream(device_id=-1):
    return getattr(_current, "stream", None) or Stream.null
