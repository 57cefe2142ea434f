# SPDX-License-Identifier: Apache-2.0
"""What the adapters' Python tests share (cupy_adapter_test.py,
numba_adapter_test.py, onnxruntime_external_test.py): each test module's
case_* functions, each run in a fresh interpreter (gpualloc's allocator is
process-wide), or one of them in-process when named on the command line."""
import subprocess
import sys
import unittest


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def in_use_chunks():
    """The chunks in use on device 0, from gpualloc's JSON snapshot."""
    from gpualloc import _native
    return [c for r in _native.snapshot_json(0)["regions"]
            for c in r["chunks"] if c["state"] == "in_use"]


def _case_test(script, name):
    def run(self):
        r = subprocess.run([sys.executable, script, name],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            self.fail(f"case {name} failed:\n{r.stdout}\n{r.stderr}")
    return run


def main(namespace, suite):
    """`script CASE` runs that case here; `script` runs every case, each in
    a fresh interpreter, as the unittest TestCase `suite`."""
    cases = {name[5:]: fn for name, fn in namespace.items()
             if name.startswith("case_")}
    if len(sys.argv) == 2 and sys.argv[1] in cases:
        cases[sys.argv[1]]()
        print("ok:", sys.argv[1])
        return
    tests = type(suite, (unittest.TestCase,), {
        "test_" + name: _case_test(namespace["__file__"], name)
        for name in cases})
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(tests))
    sys.exit(0 if result.wasSuccessful() else 1)
