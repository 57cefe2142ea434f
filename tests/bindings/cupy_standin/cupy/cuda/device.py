# SPDX-License-Identifier: Apache-2.0
"""cupy.cuda.Device (cupy/cuda/device.pyx): .id, and a context manager that
makes it current."""
from . import runtime


def get_device_id():
    return runtime.getDevice()


class Device:
    def __init__(self, device=None):
        self.id = runtime.getDevice() if device is None else int(device)
        self._previous = []

    def use(self):
        runtime.setDevice(self.id)

    def __enter__(self):
        self._previous.append(runtime.getDevice())
        runtime.setDevice(self.id)
        return self

    def __exit__(self, *exc):
        runtime.setDevice(self._previous.pop())
