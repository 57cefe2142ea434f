#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch memory snapshot export (gpualloc/core/torch_snapshot.h) end to end.

    torch_snapshot_test.py WRITER TOOL

WRITER is tests/tools/torch_snapshot_writer (replays a bundled trace on the
simulator with the allocation history on and writes PREFIX.pickle and
PREFIX.json), TOOL is gpualloc-torch-snapshot. Checked:
  - round trip: tools/torch_snapshot_to_csv.py turns the exported pickle back
    into the bundled CSV, byte for byte (separate and expandable regions);
  - the exported segments and blocks are the allocator's regions and chunks
    (the JSON snapshot written from the same GetSnapshot());
  - schema: every field MemoryViz.js (pytorch.org/memory_viz) reads exists
    with its type, and the key sets are those of a real PyTorch dump;
  - gpualloc-torch-snapshot writes the same bytes from the JSON snapshot.
Standard library only; GPUALLOC_SOURCE_ROOT overrides the source root.
"""

import json
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("GPUALLOC_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = os.path.join(ROOT, "tests", "data", "traces")
CONVERTER = os.path.join(ROOT, "tools", "torch_snapshot_to_csv.py")
REAL = os.path.join(TRACES, "torch-cs336-medium_1024_inference.pickle")
WRITER = TOOL = None

# (trace, configuration) pairs replayed.
CASES = [
    ("torch-cs336-medium_1024_inference", "preallocate=false,expandable=false"),
    ("torch-cs336-medium_1024_inference", "preallocate=false,expandable=true"),
    ("torch-opt125m-zo-finetune", "preallocate=false,expandable=false"),
]

INT, STR, LIST, BOOL = "int", "str", "list", "bool"


def is_type(value, kind):
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {STR: str, LIST: list, BOOL: bool}[kind])


# What MemoryViz.js reads (annotate_snapshot, MemoryView, process_alloc_data,
# format_frames, snapshot_change).
VIZ_SEGMENT = {"device": INT, "address": INT, "total_size": INT,
               "stream": INT, "frames": LIST, "blocks": LIST}
VIZ_BLOCK = {"size": INT, "requested_size": INT, "state": STR, "frames": LIST}
VIZ_EVENT = {"action": STR, "addr": INT, "size": INT, "stream": INT,
             "frames": LIST}
VIZ_FRAME = {"name": STR, "filename": STR, "line": INT}
# The opcodes MemoryViz.js's own unpickler knows (its `unpickle`).
VIZ_OPCODES = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE",
               "NEWTRUE", "NONE", "BINGET", "BININT", "BININT1", "BININT2",
               "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET",
               "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS",
               "SETITEM", "DICT", "SHORT_BINUNICODE", "BINUNICODE", "STOP",
               "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT"}


class Export(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = {}
        for trace, config in CASES:
            prefix = os.path.join(cls.tmp.name, "%s-%d" % (trace, len(cls.out)))
            subprocess.run([WRITER, os.path.join(TRACES, trace + ".csv"),
                            config, prefix], check=True, timeout=600)
            with open(prefix + ".pickle", "rb") as f:
                data = f.read()
            with open(prefix + ".json") as f:
                snap = json.load(f)
            cls.out[(trace, config)] = (prefix, data, pickle.loads(data), snap)
        with open(REAL, "rb") as f:
            cls.real = pickle.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_round_trip_to_the_bundled_csv(self):
        for (trace, config), (prefix, _, _, _) in self.out.items():
            with self.subTest(trace=trace, config=config):
                got = subprocess.run(
                    [sys.executable, CONVERTER, prefix + ".pickle"],
                    capture_output=True, check=True, timeout=300).stdout
                with open(os.path.join(TRACES, trace + ".csv"), "rb") as f:
                    want = f.read()
                self.assertEqual(got, want)

    def test_segments_are_the_allocators_regions(self):
        for (trace, config), (_, _, snap, doc) in self.out.items():
            with self.subTest(trace=trace, config=config):
                segments = snap["segments"]
                self.assertEqual(len(segments), len(doc["regions"]))
                expandable = "expandable=true" in config
                self.assertEqual(doc["region_kind"], "expandable"
                                 if expandable else "separate")
                self.assertIs(snap["allocator_settings"]["expandable_segments"],
                              expandable)
                for seg, region in zip(segments, doc["regions"]):
                    self.assertEqual(seg["address"], region["base"])
                    self.assertEqual(seg["total_size"], region["size"])
                    self.assertIs(seg["is_expandable"], expandable)
                    got = [(b["address"], b["size"], b["state"],
                            b["requested_size"]) for b in seg["blocks"]]
                    want = [(c["address"], c["size"],
                             "active_allocated" if c["state"] == "in_use"
                             else "inactive", c["requested"])
                            for c in region["chunks"]]
                    self.assertEqual(got, want)
                    self.assertEqual(seg["allocated_size"], sum(
                        c["size"] for c in region["chunks"]
                        if c["state"] == "in_use"))
                    self.assertEqual(sum(b["size"] for b in seg["blocks"]),
                                     seg["total_size"])
                history = doc["history"]
                self.assertEqual(history["dropped"], 0)
                self.assertEqual(len(snap["device_traces"][0]),
                                 len(history["events"]))

    def check_fields(self, obj, fields, where):
        for key, kind in fields.items():
            self.assertIn(key, obj, where)
            self.assertTrue(is_type(obj[key], kind),
                            "%s[%r] is %r" % (where, key, obj[key]))

    def test_memory_viz_fields(self):
        for (trace, config), (_, _, snap, _) in self.out.items():
            with self.subTest(trace=trace, config=config):
                self.assertIsInstance(snap["segments"], list)
                self.assertIsInstance(snap["device_traces"], list)
                self.assertIsInstance(snap["allocator_settings"], dict)
                spans = []
                for i, seg in enumerate(snap["segments"]):
                    self.check_fields(seg, VIZ_SEGMENT, "segments[%d]" % i)
                    spans.append((seg["address"],
                                  seg["address"] + seg["total_size"]))
                    for j, b in enumerate(seg["blocks"]):
                        self.check_fields(b, VIZ_BLOCK, "block %d.%d" % (i, j))
                        self.assertIn(b["state"],
                                      ("active_allocated", "inactive"))
                        for frame in b["frames"]:
                            self.check_fields(frame, VIZ_FRAME, "frame")
                for trace_list in snap["device_traces"]:
                    self.assertIsInstance(trace_list, list)
                events = snap["device_traces"][0]
                self.assertTrue(events)
                for k, e in enumerate(events):
                    self.check_fields(e, VIZ_EVENT, "event %d" % k)
                    for frame in e["frames"]:
                        self.check_fields(frame, VIZ_FRAME, "frame")
                    if e["action"] == "oom":
                        self.assertTrue(is_type(e["device_free"], INT))
                allocs = [e for e in events if e["action"] == "alloc"]
                self.assertEqual(allocs[0]["frames"],
                                 [{"filename": "", "line": 0, "name": "op0"}])
                # Every live block lies in a segment (MemoryView's
                # find_segment), and a free_completed follows each
                # free_requested at once (memory_viz shows one "free").
                for seg in snap["segments"]:
                    for b in seg["blocks"]:
                        self.assertTrue(any(lo <= b["address"] < hi
                                            for lo, hi in spans))
                for k, e in enumerate(events):
                    if e["action"] == "free_requested":
                        nxt = events[k + 1]
                        self.assertEqual((nxt["action"], nxt["addr"]),
                                         ("free_completed", e["addr"]))

    def test_only_opcodes_memory_viz_reads(self):
        for (trace, config), (_, data, _, _) in self.out.items():
            with self.subTest(trace=trace, config=config):
                used = {op.name for op, _, _ in pickletools.genops(data)}
                self.assertLessEqual(used, VIZ_OPCODES)
                # Lists and dicts come in batches of at most 1000 items, as
                # Python's pickler writes them (the viewer spreads each
                # batch into one call).
                self.assertIn("APPENDS", used)

    def test_key_sets_match_a_real_pytorch_dump(self):
        real = self.real
        real_seg = real["segments"][0]
        real_event = real["device_traces"][0][0]
        for (trace, config), (_, _, snap, _) in self.out.items():
            with self.subTest(trace=trace, config=config):
                self.assertEqual(set(snap), set(real))
                self.assertEqual(set(snap["allocator_settings"]),
                                 set(real["allocator_settings"]))
                for seg in snap["segments"]:
                    self.assertEqual(set(seg), set(real_seg))
                    for b in seg["blocks"]:
                        self.assertEqual(set(b), set(real_seg["blocks"][0]))
                for e in snap["device_traces"][0]:
                    extra = {"device_free"} if e["action"] == "oom" else set()
                    self.assertEqual(set(e), set(real_event) | extra)
                for key in ("segment_pool_id",):
                    self.assertEqual(type(snap["segments"][0][key]),
                                     type(real_seg[key]))

    def test_the_tool_writes_the_same_bytes_from_the_json(self):
        for (trace, config), (prefix, data, _, _) in self.out.items():
            with self.subTest(trace=trace, config=config):
                out = prefix + ".tool.pickle"
                subprocess.run([TOOL, prefix + ".json", "-o", out],
                               check=True, timeout=300)
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), data)
                on_two = subprocess.run([TOOL, prefix + ".json", "--device", "2"],
                                        capture_output=True, check=True,
                                        timeout=300).stdout
                snap = pickle.loads(on_two)
                self.assertEqual([len(t) for t in snap["device_traces"][:2]],
                                 [0, 0])
                self.assertEqual({s["device"] for s in snap["segments"]}, {2})

    def test_the_tool_rejects_bad_input(self):
        bad = os.path.join(self.tmp.name, "bad.json")
        with open(bad, "w") as f:
            f.write("{}")
        r = subprocess.run([TOOL, bad], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"format", r.stderr)
        r = subprocess.run([TOOL], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 2)


class InconsistentJson(unittest.TestCase):
    """gpualloc-torch-snapshot refuses a JSON snapshot whose regions and chunks
    are not what an allocator writes (memory_viz could not open the pickle, or
    would draw what never was), naming the first inconsistency, and writes
    nothing."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A small real snapshot: three live blocks and a free one, with a
        # private pool's region besides.
        trace = os.path.join(cls.tmp.name, "small.csv")
        with open(trace, "w") as f:
            f.write("seq,action,addr_or_id,size,stream\n"
                    "0,alloc,0,1000,0\n1,alloc,1,3000,0\n2,alloc,2,600,0\n"
                    "3,alloc,3,5000,0\n4,free,2,600,0\n")
        prefix = os.path.join(cls.tmp.name, "small")
        subprocess.run([WRITER, trace, "preallocate=false,expandable=false",
                        prefix], check=True, timeout=120)
        with open(prefix + ".json") as f:
            cls.doc = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_tool(self, doc):
        path = os.path.join(self.tmp.name, "in.json")
        out = os.path.join(self.tmp.name, "out.pickle")
        if os.path.exists(out):
            os.remove(out)
        with open(path, "w") as f:
            json.dump(doc, f)
        r = subprocess.run([TOOL, path, "-o", out], capture_output=True,
                           timeout=60)
        return r, os.path.exists(out)

    def refused(self, mutate, *needles):
        doc = json.loads(json.dumps(self.doc))
        mutate(doc)
        r, wrote = self.run_tool(doc)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 1, err)
        self.assertFalse(wrote, "a pickle was written: " + err)
        self.assertEqual(err.count("\n"), 1, err)
        for needle in needles:
            self.assertIn(needle, err)

    def test_the_snapshot_as_written_converts(self):
        region = self.doc["regions"][0]
        self.assertGreaterEqual(len(region["chunks"]), 4)
        r, wrote = self.run_tool(self.doc)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertTrue(wrote)

    def test_a_long_string_is_quoted_cut(self):
        # One line of bounded length for a 5 MB value, not the value.
        def long_format(doc):
            doc["format"] = "x" * 5000000
        self.refused(long_format, "format", "(5000000 bytes)")
        doc = json.loads(json.dumps(self.doc))
        doc["format"] = "x" * 5000000
        r, _ = self.run_tool(doc)
        self.assertLess(len(r.stderr), 1000)

    def test_chunks_that_leave_a_gap(self):
        def gap(doc):
            c = doc["regions"][0]["chunks"]
            c[1]["address"] += 512
            c[1]["size"] -= 512
        c1 = self.doc["regions"][0]["chunks"][1]
        self.refused(gap, "regions[0].chunks[1].address: %d" % (c1["address"] + 512),
                     "expected %d" % c1["address"], "tile")

    def test_chunks_that_overlap(self):
        def overlap(doc):
            doc["regions"][0]["chunks"][0]["size"] += 512
        self.refused(overlap, "regions[0].chunks[1].address", "tile")

    def test_chunks_that_stop_short_of_the_end(self):
        def short(doc):
            doc["regions"][0]["chunks"].pop()
        self.refused(short, "regions[0].chunks[", "the region's end")

    def test_first_chunk_not_at_the_base(self):
        def moved(doc):
            doc["regions"][0]["base"] -= 512
            doc["regions"][0]["size"] += 512
        self.refused(moved, "regions[0].chunks[0].address", "base")

    def test_region_without_chunks(self):
        def empty(doc):
            doc["regions"][0]["chunks"] = []
        self.refused(empty, "regions[0].chunks", "tile")

    def test_zero_size_region(self):
        def zero(doc):
            doc["regions"].append({"base": 1 << 40, "size": 0, "chunks": []})
        self.refused(zero, "regions[%d].size: 0" % len(self.doc["regions"]))

    def test_zero_size_chunk(self):
        def zero(doc):
            c = doc["regions"][0]["chunks"]
            c.insert(1, dict(c[1], size=0, state="free", requested=0))
        self.refused(zero, "regions[0].chunks[1].size: 0")

    def test_duplicate_region(self):
        def dup(doc):
            doc["regions"].append(json.loads(json.dumps(doc["regions"][-1])))
        n = len(self.doc["regions"])
        self.refused(dup, "regions[%d].base" % n, "regions[%d]" % (n - 1))

    def test_overlapping_regions(self):
        def overlap(doc):
            last = doc["regions"][-1]
            doc["regions"].append({
                "base": last["base"] + 512, "size": last["size"],
                "chunks": [{"address": last["base"] + 512,
                            "size": last["size"], "requested": 0,
                            "state": "free", "stream": 0}]})
        n = len(self.doc["regions"])
        self.refused(overlap, "regions[%d].base" % n, "overlaps")

    def test_region_size_past_the_address_space(self):
        def huge(doc):
            r = doc["regions"][0]
            r["size"] = (1 << 64) - 1
            r["chunks"][-1]["size"] = (1 << 64) - 1
        self.refused(huge, "regions[0].size: 18446744073709551615")

    def test_requested_above_size(self):
        def over(doc):
            c = doc["regions"][0]["chunks"][0]
            c["requested"] = c["size"] + 1
        size = self.doc["regions"][0]["chunks"][0]["size"]
        self.refused(over, "regions[0].chunks[0].requested: %d" % (size + 1),
                     "size %d" % size)

    def test_pool_chunks_are_checked_too(self):
        def pool(doc):
            doc["pools"] = [{"id": 1, "references": 1, "streams": [],
                             "bytes_reserved": 1024, "bytes_in_use": 0,
                             "regions": [{"base": 1 << 40, "size": 1024,
                                          "chunks": [{"address": 1 << 40,
                                                      "size": 512,
                                                      "requested": 0,
                                                      "state": "free",
                                                      "stream": 0}]}]}]
        self.refused(pool, "pools[0].regions[0].chunks[0]", "the region's end")


class SleepAndRegionKind(unittest.TestCase):
    """Memory given back by Sleep is not shown as reserved (PyTorch lists
    only the mapped parts of an expandable segment), Sleep and Wake are
    segment_unmap and segment_map in the trace, and is_expandable comes from
    the allocator, whatever the history holds."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def write(self, config):
        prefix = os.path.join(self.tmp.name, "sleep-%d" % len(os.listdir(
            self.tmp.name)))
        subprocess.run([WRITER, "--sleep", config, prefix], check=True,
                       timeout=120)
        out = {}
        for when in ("asleep", "awake"):
            with open("%s.%s.pickle" % (prefix, when), "rb") as f:
                data = f.read()
            with open("%s.%s.json" % (prefix, when)) as f:
                doc = json.load(f)
            out[when] = (prefix + "." + when, data, pickle.loads(data), doc)
        return out

    def test_sleeping_memory_is_not_in_the_segments(self):
        out = self.write("expandable=true,preallocate=false,history=64")
        _, _, snap, doc = out["asleep"]
        stats = doc["stats"]
        self.assertEqual(stats["bytes_sleeping"], 64 << 20)
        segments = snap["segments"]
        self.assertEqual(sum(s["total_size"] for s in segments),
                         stats["bytes_reserved"])
        asleep = [(c["address"], c["size"]) for r in doc["regions"]
                  for c in r["chunks"] if c.get("asleep")]
        self.assertEqual([size for _, size in asleep], [64 << 20])
        lo, size = asleep[0]
        for seg in segments:
            self.assertTrue(seg["is_expandable"])
            self.assertEqual(sum(b["size"] for b in seg["blocks"]),
                             seg["total_size"])
            self.assertFalse(seg["address"] < lo + size and
                             lo < seg["address"] + seg["total_size"])
        self.assertIs(snap["allocator_settings"]["expandable_segments"], True)
        events = snap["device_traces"][0]
        self.assertEqual((events[-1]["action"], events[-1]["addr"],
                          events[-1]["size"]), ("segment_unmap", lo, size))
        # Awake: the tag's memory is a segment again, its allocation a block
        # of its own, and the trace maps it back.
        _, _, snap, doc = out["awake"]
        self.assertEqual(sum(s["total_size"] for s in snap["segments"]),
                         doc["stats"]["bytes_reserved"])
        blocks = {b["address"]: b for s in snap["segments"]
                  for b in s["blocks"]}
        self.assertEqual(blocks[lo]["state"], "active_allocated")
        self.assertEqual(blocks[lo]["requested_size"], (64 << 20) - 1000)
        self.assertEqual(blocks[lo]["frames"][0]["name"], "weights")
        actions = [(e["action"], e["addr"], e["size"])
                   for e in snap["device_traces"][0]]
        unmap = actions.index(("segment_unmap", lo, size))
        self.assertIn(("segment_map", lo, size), actions[unmap + 1:])
        # gpualloc-torch-snapshot writes the same from the JSON.
        for when in ("asleep", "awake"):
            prefix, data, _, _ = out[when]
            got = subprocess.run([TOOL, prefix + ".json"], capture_output=True,
                                 check=True, timeout=60).stdout
            self.assertEqual(got, data, when)

    def test_expandable_flag_without_map_events_in_the_history(self):
        # No history at all, and a ring of 2 that wrapped past the last map.
        for config in ("expandable=true,preallocate=false",
                       "expandable=true,preallocate=false,history=2",
                       "expandable=true,preallocate=true,history=2"):
            with self.subTest(config=config):
                out = self.write(config)
                prefix, data, snap, doc = out["awake"]
                self.assertNotIn("segment_map", [
                    e["action"] for e in snap["device_traces"][0]])
                self.assertIs(
                    snap["allocator_settings"]["expandable_segments"], True)
                self.assertTrue(snap["segments"])
                for seg in snap["segments"]:
                    self.assertIs(seg["is_expandable"], True)
                self.assertEqual(doc["region_kind"], "expandable")
                got = subprocess.run([TOOL, prefix + ".json"],
                                     capture_output=True, check=True,
                                     timeout=60).stdout
                self.assertEqual(got, data)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: torch_snapshot_test.py WRITER TOOL [unittest args]")
    WRITER, TOOL = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
