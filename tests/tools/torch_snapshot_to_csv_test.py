#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests for tools/torch_snapshot_to_csv.py (installed as
gpualloc-torch-snapshot-to-csv).

Run as `python3 tests/tools/torch_snapshot_to_csv_test.py` from anywhere; the source
root defaults to the directory two above this file's and can be overridden with
GPUALLOC_SOURCE_ROOT (meson test sets it, and GPUALLOC_BUILD_ROOT, the build
directory whose install list is checked).
"""

import os
import pickle
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("GPUALLOC_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("GPUALLOC_BUILD_ROOT")
INSTALLED_NAME = "gpualloc-torch-snapshot-to-csv"
TOOL = os.path.join(ROOT, "tools", "torch_snapshot_to_csv.py")
TRACES = os.path.join(ROOT, "tests", "data", "traces")
BUNDLED = [
    "torch-cs336-medium_128_training",
    "torch-cs336-medium_1024_training",
    "torch-cs336-medium_1024_inference",
    "torch-opt125m-zo-finetune",
]


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, timeout=300)


def first_difference(got, want):
    g, w = got.split(b"\n"), want.split(b"\n")
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b:
            return "line %d: got %r, expected %r" % (i + 1, a, b)
    return "line %d: one output ends early (got %d lines, expected %d)" % (
        min(len(g), len(w)) + 1, len(g), len(w))


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path


class BundledTraces(TempDirCase):
    def test_bundled_pickles_reproduce_csvs(self):
        for name in BUNDLED:
            with self.subTest(trace=name):
                out = os.path.join(self.tmp, name + ".csv")
                r = run_tool(os.path.join(TRACES, name + ".pickle"), "-o", out)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                with open(out, "rb") as f:
                    got = f.read()
                with open(os.path.join(TRACES, name + ".csv"), "rb") as f:
                    want = f.read()
                if got != want:
                    self.fail("%s: %s" % (name, first_difference(got, want)))


# A hand-made snapshot covering the prelude and stream rules. Raw streams 7, 9
# and 11 are met in that order (11 only in step 2); device 1's segment is
# ignored.
TINY = {
    "device_traces": [
        [
            {"action": "segment_alloc", "addr": 0x1000, "size": 4096, "stream": 7},
            {"action": "alloc", "addr": 0x1000, "size": 100, "stream": 7},
            # Free with no alloc: prelude alloc of its size.
            {"action": "free_requested", "addr": 0x9000, "size": 50, "stream": 9},
            {"action": "free_completed", "addr": 0x9000, "size": 50, "stream": 9},
            {"action": "alloc", "addr": 0x2000, "size": 30, "stream": 0},
            # The free row takes the alloc's size, not the event's.
            {"action": "free_requested", "addr": 0x2000, "size": 999, "stream": 0},
            {"action": "alloc", "addr": 0x3000, "size": 64, "stream": 7},
            {"action": "oom", "addr": 0, "size": 1 << 40, "stream": 0},
        ],
        [],
    ],
    "segments": [
        {"device": 0, "address": 0x1000, "stream": 7, "blocks": [
            {"size": 512, "requested_size": 100, "state": "active_allocated"},  # live: skip
            {"size": 512, "requested_size": 200, "state": "active_allocated"},  # prelude 200
            {"size": 1024, "requested_size": 0, "state": "inactive"},
            {"size": 512, "requested_size": 0, "state": "active_pending_free"},  # prelude 512
        ]},
        {"device": 1, "address": 0x5000, "stream": 3, "blocks": [
            {"size": 512, "requested_size": 512, "state": "active_allocated"},
        ]},
        {"address": 0x6000, "stream": 11, "blocks": [  # device defaults to 0
            {"size": 256, "state": "active_allocated"},  # no requested_size: 256
        ]},
    ],
    "allocator_settings": {},
}

TINY_CSV = (
    "seq,action,addr_or_id,size,stream\n"
    "0,alloc,0,50,2\n"
    "1,alloc,1,200,1\n"
    "2,alloc,2,512,1\n"
    "3,alloc,3,256,3\n"
    "4,alloc,4,100,1\n"
    "5,free,0,50,2\n"
    "6,alloc,5,30,0\n"
    "7,free,5,30,0\n"
    "8,alloc,6,64,1\n"
).encode()


class HandMade(TempDirCase):
    def test_prelude_and_stream_rules(self):
        path = self.write("tiny.pickle", pickle.dumps(TINY))
        r = run_tool(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        if r.stdout != TINY_CSV:
            self.fail(first_difference(r.stdout, TINY_CSV))

    def test_several_devices_need_device_flag(self):
        snap = dict(TINY, device_traces=[TINY["device_traces"][0],
                                         [{"action": "alloc", "addr": 0x5000,
                                           "size": 8, "stream": 3}]])
        path = self.write("two.pickle", pickle.dumps(snap))
        r = run_tool(path)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"--device", r.stderr)
        r = run_tool(path, "--device", "1")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stdout, b"seq,action,addr_or_id,size,stream\n"
                                   b"0,alloc,0,8,1\n")

    def test_no_allocations(self):
        path = self.write("empty.pickle", pickle.dumps(
            {"device_traces": [[], []], "segments": []}))
        r = run_tool(path)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"no device trace has allocations", r.stderr)


class Malformed(TempDirCase):
    def check_error(self, name, data, expect):
        path = self.write(name, data)
        r = run_tool(path)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 1, err)
        self.assertEqual(r.stdout, b"")
        self.assertNotIn("Traceback", err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(path, err)
        self.assertIn(expect, err)

    def test_garbage_bytes(self):
        self.check_error("garbage.pickle", b"\x00\xffnot a pickle at all\x13\x37",
                         "not a readable pickle")

    def test_empty_file(self):
        self.check_error("empty.pickle", b"", "not a readable pickle")

    def test_pickle_of_a_list(self):
        self.check_error("list.pickle", pickle.dumps([1, 2, 3]),
                         "expected the snapshot to be a dict")

    def test_dict_without_device_traces(self):
        self.check_error("nodt.pickle", pickle.dumps({"segments": []}),
                         "expected key 'device_traces'")

    def test_event_with_wrong_type(self):
        snap = {"device_traces": [[{"action": "alloc", "addr": "x", "size": 1,
                                    "stream": 0}]], "segments": []}
        self.check_error("badev.pickle", pickle.dumps(snap), "'addr'] to be an int")

    def test_missing_file(self):
        path = os.path.join(self.tmp, "does-not-exist.pickle")
        r = run_tool(path)
        self.assertEqual(r.returncode, 1)
        self.assertIn(path.encode(), r.stderr)
        self.assertNotIn(b"Traceback", r.stderr)

    def test_foreign_class_is_not_imported(self):
        # A GLOBAL opcode naming os.system must not be resolved.
        data = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
        self.check_error("global.pickle", data, "expected the snapshot to be a dict")


class SizesOutOfRange(TempDirCase):
    """A size gpualloc-replay cannot read (below 0, above 2^64 - 1) is refused
    at conversion, naming the event or block, not written into a row."""

    check_error = Malformed.check_error

    def snapshot(self, events, blocks=()):
        return pickle.dumps({
            "device_traces": [events],
            "segments": [{"device": 0, "address": 0x1000, "stream": 0,
                          "blocks": list(blocks)}],
        })

    def test_negative_alloc_size(self):
        self.check_error("neg.pickle", self.snapshot([
            {"action": "alloc", "addr": 0x1000, "size": 64, "stream": 0},
            {"action": "alloc", "addr": 0x2000, "size": -5, "stream": 0},
        ]), "device_traces[0][1] (alloc at 0x2000): size -5 is out of range")

    def test_huge_free_size(self):
        # A free with no alloc becomes a prelude alloc of the event's size.
        self.check_error("huge.pickle", self.snapshot([
            {"action": "free_requested", "addr": 0x3000, "size": 1 << 70,
             "stream": 0},
        ]), "device_traces[0][0] (free_requested at 0x3000): size %d is out "
            "of range" % (1 << 70))

    def test_the_largest_size_converts(self):
        path = self.write("max.pickle", self.snapshot([
            {"action": "alloc", "addr": 0x2000, "size": (1 << 64) - 1,
             "stream": 0},
        ]))
        r = run_tool(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertTrue(r.stdout.endswith(b"0,alloc,0,18446744073709551615,0\n"),
                        r.stdout)

    def test_huge_requested_size_of_a_block(self):
        self.check_error("block.pickle", self.snapshot(
            [{"action": "alloc", "addr": 0x1000, "size": 64, "stream": 0}],
            [{"size": 512, "requested_size": 64, "state": "active_allocated"},
             {"size": 512, "requested_size": 1 << 70,
              "state": "active_allocated"}]),
            "segments[0]['blocks'][1] (active_allocated at 0x1200): "
            "requested_size %d is out of range" % (1 << 70))

    def test_negative_block_size(self):
        self.check_error("negblock.pickle", self.snapshot(
            [{"action": "alloc", "addr": 0x1000, "size": 64, "stream": 0}],
            [{"size": -512, "requested_size": 0, "state": "inactive"}]),
            "segments[0]['blocks'][0] (inactive at 0x1000): size -512 is out "
            "of range")


class HostileInput(TempDirCase):
    """What a crafted pickle can ask for stays bounded, and every refusal is
    one line."""

    check_error = Malformed.check_error

    def test_shared_references_cannot_amplify_the_output(self):
        # A few kilobytes naming one segment of 2000 blocks 2000 times: four
        # million blocks (and as many prelude rows) from one object each.
        blk = {"size": 512, "requested_size": 64, "state": "active_allocated"}
        seg = {"device": 0, "address": 0x1000, "stream": 0,
               "blocks": [blk] * 2000}
        data = pickle.dumps({
            "device_traces": [[{"action": "alloc", "addr": 0x1000, "size": 64,
                                "stream": 0}]],
            "segments": [seg] * 2000,
        })
        self.assertLess(len(data), 16384)
        self.check_error("amplified.pickle", data,
                         "references the same ones again and again")

    def test_shared_events_within_the_bound_convert(self):
        # Repeated references below one per byte: converted, output bounded.
        ev = {"action": "free_requested", "addr": 0x1000, "size": 64,
              "stream": 0}
        data = pickle.dumps({"device_traces": [[ev] * 1000], "segments": []})
        path = self.write("repeated.pickle", data)
        r = run_tool(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertLess(len(r.stdout), 64 * len(data))

    def test_a_size_of_5000_digits_is_one_line(self):
        self.check_error("digits.pickle", pickle.dumps({
            "device_traces": [[{"action": "alloc", "addr": 0x1000,
                                "size": 10 ** 5000, "stream": 0}]],
            "segments": []}),
            "size of 5001 digits is out of range")

    def test_an_address_of_5000_digits_is_one_line(self):
        self.check_error("address.pickle", pickle.dumps({
            "device_traces": [[{"action": "alloc", "addr": 10 ** 5000,
                                "size": -1, "stream": 0}]],
            "segments": []}),
            "(alloc at an address of 5001 digits): size -1 is out of range")


class InstalledCommand(TempDirCase):
    """meson install puts the script into bindir as gpualloc-torch-snapshot-to-csv,
    executable, and it runs by its shebang under that name."""

    def test_shebang_and_mode(self):
        with open(TOOL, "rb") as f:
            self.assertEqual(f.readline(), b"#!/usr/bin/env python3\n")
        self.assertTrue(os.access(TOOL, os.X_OK), TOOL + " is not executable")

    def test_runs_under_its_installed_name(self):
        # As installed: a copy under the command's name, run by its shebang.
        path = os.path.join(self.tmp, INSTALLED_NAME)
        with open(TOOL, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o755)
        r = subprocess.run([path, "--help"], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(b"usage: " + INSTALLED_NAME.encode()), r.stdout)
        self.assertIn(b"Reads: the command line", r.stdout)
        name = "torch-cs336-medium_1024_inference"
        out = os.path.join(self.tmp, "out.csv")
        r = subprocess.run([path, os.path.join(TRACES, name + ".pickle"), "-o", out],
                           capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as got, open(os.path.join(TRACES, name + ".csv"), "rb") as want:
            self.assertEqual(got.read(), want.read())

    @unittest.skipUnless(BUILD, "GPUALLOC_BUILD_ROOT not set (meson test sets it)")
    def test_meson_installs_it_into_bindir(self):
        import json
        with open(os.path.join(BUILD, "meson-info", "intro-installed.json")) as f:
            installed = json.load(f)
        with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
            options = {o["name"]: o["value"] for o in json.load(f)}
        bindir = os.path.join(options["prefix"], options["bindir"])
        targets = [dest for src, dest in installed.items()
                   if os.path.realpath(src) == os.path.realpath(TOOL)]
        self.assertEqual(targets, [os.path.join(bindir, INSTALLED_NAME)])


if __name__ == "__main__":
    unittest.main(verbosity=2)
