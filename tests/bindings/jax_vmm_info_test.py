# SPDX-License-Identifier: Apache-2.0
"""gpualloc-info under XLA_PYTHON_CLIENT_ALLOCATOR=vmm names the reason for
the allocator and expandable settings it takes from it.

    python3 tests/bindings/jax_vmm_info_test.py build/tools/gpualloc-info
"""
import os
import subprocess
import sys

WANT = ("XLA_PYTHON_CLIENT_ALLOCATOR (XLA's VMM allocator: gpualloc's BFC "
        "over expandable regions)")


def main():
    env = dict(os.environ, XLA_PYTHON_CLIENT_ALLOCATOR="vmm")
    out = subprocess.run([sys.argv[1], "--sim", "h100"], env=env, check=True,
                         capture_output=True, text=True).stdout
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.strip().startswith(("allocator ", "expandable "))}
    for key, value in (("allocator", "bfc"), ("expandable", "true")):
        row = rows.get(key, "")
        if value not in row.split() or WANT not in row:
            sys.exit(f"gpualloc-info's {key} row: {row!r}; want {value} "
                     f"from {WANT}\n{out}")
    print("ok: gpualloc-info names XLA_PYTHON_CLIENT_ALLOCATOR=vmm's reason")


if __name__ == "__main__":
    main()
