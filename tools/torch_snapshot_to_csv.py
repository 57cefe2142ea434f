#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Convert a PyTorch CUDA memory snapshot to a gpualloc trace CSV.

Usage:
    gpualloc-torch-snapshot-to-csv SNAPSHOT.pickle [-o OUT.csv] [--device N]
    tools/torch_snapshot_to_csv.py SNAPSHOT.pickle [-o OUT.csv] [--device N]

(the first installed into $PREFIX/bin by meson install, the second the same
script run from the source tree).

SNAPSHOT.pickle is what torch.cuda.memory._dump_snapshot writes (after
_record_memory_history). The CSV goes to stdout unless -o is given. The device
is the one whose trace has allocations (alloc or free_requested events); if
several have, --device N picks one. Standard library only; PyTorch is not
needed. Pickled class references (none in the bundled snapshots) are never
imported: they load as an inert stand-in object.

Output: header `seq,action,addr_or_id,size,stream`, '\\n' line endings. The rules
(tests/data/traces/SOURCES.md, "Exact rules"):
  1. Walk device_traces[dev] in order. `alloc` at A: body row alloc of the
     event's size, live at A. `free_requested` at A: if A is live, body row free
     with that alloc's id and size; otherwise a prelude alloc of the event's size
     (new id) and a body free of it. Other actions are skipped.
  2. For each segment (in list order) on dev (`device`, default 0), walk its
     blocks from the segment `address`, advancing by each block's `size`; an
     `active_allocated` / `active_pending_free` block whose address is not live
     after step 1 becomes a prelude alloc of its `requested_size` (or `size`
     when missing or 0) on the segment's `stream`.
  3. Rows = prelude (step 1's, then step 2's) + body; ids renumbered 0, 1, ...
     in order of the alloc rows; seq counts rows from 0.
  4. Stream 0 stays 0; any other raw stream gets the next number (1, 2, ...)
     when first met, in the order rows are produced by steps 1 then 2.
     A free row carries the stream of its free_requested event.

Expected errors (unreadable file, not a pickle, wrong layout, a size below 0
or above 2^64 - 1, which no trace row can carry) print one line on stderr
naming the file (and the event or block) and exit 1. A pickle can reference
one object many times: the events and blocks walked are at most one per byte
of the pickle (a real snapshot has hundreds of bytes per event), so the
output is bounded by the input; a snapshot past that is refused the same way.
"""

import argparse
import io
import pickle
import sys


class ConvertError(Exception):
    """An expected failure; its message is printed as one line."""


class _Budget:
    """Events and blocks a conversion may walk: one per byte of the pickle.

    Shared references let a few kilobytes of pickle stand for millions of
    events; a real snapshot spends hundreds of bytes on each."""

    def __init__(self, pickle_bytes):
        self.pickle_bytes = pickle_bytes
        self.left = pickle_bytes

    def spend(self):
        self.left -= 1
        if self.left < 0:
            raise ConvertError(
                "the pickle's %d bytes stand for more than %d events and "
                "blocks: it references the same ones again and again (not a "
                "snapshot torch wrote); refused"
                % (self.pickle_bytes, self.pickle_bytes))


class _Unbounded:
    def spend(self):
        pass


class _StandIn:
    """Inert replacement for any class a pickle references (e.g. from torch)."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __setstate__(self, state):
        self.state = state

    def __call__(self, *args, **kwargs):
        return _StandIn(*args, **kwargs)


class _SafeUnpickler(pickle.Unpickler):
    """Never imports anything: every global becomes the stand-in class."""

    def find_class(self, module, name):
        return _StandIn


def load_snapshot(data):
    """Unpickle bytes without importing any referenced class."""
    try:
        return _SafeUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # pickle raises many types on garbage input
        raise ConvertError("not a readable pickle (%s: %s)"
                           % (type(e).__name__, e)) from None


def _need(obj, key, kind, where):
    if not isinstance(obj, dict):
        raise ConvertError("expected %s to be a dict, got %s"
                           % (where, type(obj).__name__))
    if key not in obj:
        raise ConvertError("expected key '%s' in %s" % (key, where))
    value = obj[key]
    if not _is(value, kind):
        raise ConvertError("expected %s['%s'] to be %s, got %s"
                           % (where, key, _kind_name(kind), type(value).__name__))
    return value


def _is(value, kind):
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind_name(kind):
    return {int: "an int", list: "a list", str: "a str", dict: "a dict"}[kind]


# The sizes gpualloc-replay reads: unsigned 64-bit decimals.
MAX_SIZE = (1 << 64) - 1


def _number(value):
    """The number as a message shows it: in full up to 2^256, else its size
    (Python refuses to print more than 4300 digits, and nobody reads them)."""
    if value.bit_length() <= 256:
        return "%d" % value
    return "%sof %d digits" % ("-" if value < 0 else "",
                               int(value.bit_length() * 0.30103) + 1)


def _check_size(value, key, where):
    """Refuses a size no trace row can carry, naming where it was found."""
    if not 0 <= value <= MAX_SIZE:
        raise ConvertError("%s: %s %s is out of range: sizes are 0 to %d bytes "
                           "(unsigned 64-bit, what gpualloc-replay reads)"
                           % (where, key, _number(value), MAX_SIZE))
    return value


def _at(addr):
    if addr.bit_length() > 256:
        return "an address " + _number(addr)
    return ("-%#x" % -addr) if addr < 0 else ("%#x" % addr)


def _one_line(text, limit=300):
    """A message as one line of at most about `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "... (%d characters)" % len(text)


def _producing(trace, budget):
    for e in trace:
        budget.spend()
        if isinstance(e, dict) and e.get("action") in ("alloc", "free_requested"):
            return True
    return False


def pick_device(snapshot, device=None, budget=None):
    """The device index to convert (see module docstring)."""
    budget = budget or _Unbounded()
    traces = _need(snapshot, "device_traces", list, "the snapshot")
    if device is not None:
        if not 0 <= device < len(traces):
            raise ConvertError("--device %d out of range: the snapshot has %d device trace(s)"
                               % (device, len(traces)))
        return device
    found = []
    for d, t in enumerate(traces):
        budget.spend()
        if isinstance(t, list) and _producing(t, budget):
            found.append(d)
    if not found:
        raise ConvertError("no device trace has allocations")
    if len(found) > 1:
        raise ConvertError("devices %s all have allocations; choose one with --device"
                           % ", ".join(map(str, found)))
    return found[0]


def convert(snapshot, device=None, pickle_bytes=None):
    """Return the CSV text for a loaded snapshot dict (walking at most one
    event or block per byte of the pickle, when its size is given)."""
    budget = _Budget(pickle_bytes) if pickle_bytes is not None else _Unbounded()
    if not isinstance(snapshot, dict):
        raise ConvertError("expected the snapshot to be a dict, got %s"
                           % type(snapshot).__name__)
    dev = pick_device(snapshot, device, budget)
    trace = snapshot["device_traces"][dev]
    if not isinstance(trace, list):
        raise ConvertError("expected device_traces[%d] to be a list, got %s"
                           % (dev, type(trace).__name__))
    segments = _need(snapshot, "segments", list, "the snapshot")

    streams = {0: 0}

    def stream_of(raw):
        if raw not in streams:
            streams[raw] = len(streams)
        return streams[raw]

    # Rows are [action, key, size, stream]; key is a provisional alloc key
    # (creation order), renumbered in output order at the end.
    prelude, body = [], []
    live = {}  # address -> (key, size)
    next_key = 0

    for i, ev in enumerate(trace):
        budget.spend()
        where = "device_traces[%d][%d]" % (dev, i)
        action = _need(ev, "action", str, where)
        if action not in ("alloc", "free_requested"):
            continue
        addr = _need(ev, "addr", int, where)
        size = _check_size(_need(ev, "size", int, where), "size",
                           "%s (%s at %s)" % (where, action, _at(addr)))
        stream = stream_of(_need(ev, "stream", int, where))
        if action == "alloc":
            body.append(["alloc", next_key, size, stream])
            live[addr] = (next_key, size)
            next_key += 1
        elif addr in live:
            key, asize = live.pop(addr)
            body.append(["free", key, asize, stream])
        else:
            prelude.append(["alloc", next_key, size, stream])
            body.append(["free", next_key, size, stream])
            next_key += 1

    for si, seg in enumerate(segments):
        budget.spend()
        where = "segments[%d]" % si
        if not isinstance(seg, dict):
            raise ConvertError("expected %s to be a dict, got %s"
                               % (where, type(seg).__name__))
        seg_dev = seg.get("device", 0)
        if not _is(seg_dev, int):
            raise ConvertError("expected %s['device'] to be an int" % where)
        if seg_dev != dev:
            continue
        addr = _need(seg, "address", int, where)
        blocks = _need(seg, "blocks", list, where)
        raw_stream = _need(seg, "stream", int, where)
        for bi, blk in enumerate(blocks):
            budget.spend()
            bwhere = "%s['blocks'][%d]" % (where, bi)
            bsize = _need(blk, "size", int, bwhere)
            state = _need(blk, "state", str, bwhere)
            named = "%s (%s at %s)" % (bwhere, state, _at(addr))
            _check_size(bsize, "size", named)
            if state in ("active_allocated", "active_pending_free") and addr not in live:
                req = blk.get("requested_size")
                if req is not None and not _is(req, int):
                    raise ConvertError("expected %s['requested_size'] to be an int" % bwhere)
                if req is not None:
                    _check_size(req, "requested_size", named)
                prelude.append(["alloc", next_key, req or bsize, stream_of(raw_stream)])
                next_key += 1
            addr += bsize

    ids = {}
    out = ["seq,action,addr_or_id,size,stream\n"]
    for seq, (action, key, size, stream) in enumerate(prelude + body):
        if action == "alloc":
            ids[key] = len(ids)
        out.append("%d,%s,%d,%d,%d\n" % (seq, action, ids[key], size, stream))
    return "".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Reads: the command line and SNAPSHOT.pickle only; the "
        "environment is not read. Converts a PyTorch memory snapshot pickle "
        "to a gpualloc trace CSV.")
    p.add_argument("snapshot", metavar="SNAPSHOT.pickle")
    p.add_argument("-o", "--output", metavar="OUT.csv", help="output file (default stdout)")
    p.add_argument("--device", type=int, metavar="N", help="device index to convert")
    args = p.parse_args(argv)
    try:
        try:
            with open(args.snapshot, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ConvertError("cannot read: %s" % (e.strerror or e)) from None
        text = convert(load_snapshot(data), args.device, len(data))
    except ConvertError as e:
        print("%s: %s: %s" % (p.prog, _one_line(args.snapshot, 200), _one_line(e)),
              file=sys.stderr)
        return 1
    except RecursionError:
        print("%s: %s: snapshot nested too deeply" % (p.prog, _one_line(args.snapshot, 200)),
              file=sys.stderr)
        return 1
    try:
        if args.output:
            with open(args.output, "w", newline="\n") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    except OSError as e:
        print("%s: %s: cannot write: %s" % (p.prog, args.output or "<stdout>",
                                            e.strerror or e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
