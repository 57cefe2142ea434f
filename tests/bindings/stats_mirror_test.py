# SPDX-License-Identifier: Apache-2.0
"""gpualloc.torch's ctypes mirror of gpualloc_stats_t (python/gpualloc/
torch.py, _Stats) against the C header (include/gpualloc/gpualloc.h) and the
table of Stats fields (include/gpualloc/core/stats_fields.h): the same fields, in
the header's order, of the header's types, and every row of the table. The
build checks the C struct against the table; this checks the Python mirror,
which no compiler sees.

    PYTHONPATH=python python3 tests/bindings/stats_mirror_test.py
"""
import ctypes
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
C_TYPES = {"uint64_t": ctypes.c_uint64, "double": ctypes.c_double}
TABLE_TYPES = {"std::uint64_t": "uint64_t", "double": "double"}


def read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def header_fields():
    """gpualloc_stats_t's fields, in order: [(name, C type)]."""
    text = read("include", "gpualloc", "gpualloc.h")
    body = re.search(r"typedef struct gpualloc_stats \{(.*?)\} gpualloc_stats_t;",
                     text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return re.findall(r"^\s*(\w+)\s+(\w+);", body, re.M)


def table_rows():
    """GPUALLOC_STATS_FIELDS's rows, in order: [(name, C type)]."""
    text = read("include", "gpualloc", "core", "stats_fields.h")
    rows = re.findall(r"^\s*X\((\w+), ([\w:]+), (\w+), ", text, re.M)
    return [(name, TABLE_TYPES[kind]) for name, kind, _ in rows]


class StatsMirror(unittest.TestCase):
    def test_parsers_find_the_fields(self):
        self.assertGreater(len(header_fields()), 20)
        self.assertGreater(len(table_rows()), 20)
        self.assertEqual(header_fields()[0], ("uint64_t", "struct_size"))

    def test_header_has_every_row(self):
        header = {name: kind for kind, name in header_fields()}
        for name, kind in table_rows():
            self.assertEqual(header.get(name), kind, name)
        self.assertEqual(len(header), len(table_rows()) + 1)  # struct_size

    def test_python_mirror_is_the_header(self):
        import gpualloc.torch as gt
        mirror = [(name, kind) for name, kind in gt._Stats._fields_]
        want = [(name, C_TYPES[kind]) for kind, name in header_fields()]
        self.assertEqual([n for n, _ in mirror], [n for n, _ in want])
        for (name, got), (_, kind) in zip(mirror, want):
            self.assertIs(got, kind, name)
        self.assertEqual(ctypes.sizeof(gt._Stats), 8 * len(want))


if __name__ == "__main__":
    unittest.main(verbosity=2)
