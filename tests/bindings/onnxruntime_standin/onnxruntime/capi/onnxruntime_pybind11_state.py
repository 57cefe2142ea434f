# SPDX-License-Identifier: Apache-2.0
"""The exception types ONNX Runtime's Python module raises (its pybind11
state module)."""


class Fail(Exception):
    pass


class RuntimeException(Exception):
    pass
