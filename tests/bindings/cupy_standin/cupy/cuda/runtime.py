# SPDX-License-Identifier: Apache-2.0
"""cupy.cuda.runtime (cupy_backends/cuda/api/runtime.pyx), the few calls
the stand-in uses: one device, made-up stream handles."""
import itertools

streamDefault = 0
streamNonBlocking = 1
streamPerThread = 2
_device = 0
_handles = itertools.count(0x5000, 0x10)


def getDevice():
    return _device


def setDevice(device):
    global _device
    _device = device


def getDeviceCount():
    return 1


def streamCreateWithPriority(flag, priority):
    return next(_handles)


def streamDestroy(stream):
    pass
