#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that no file includes a header of a higher layer.

The layers, lowest first: arch < core < backends < runtime < bindings < tools.
A file's layer is its folder: arch/, core/, backends/, runtime/, bindings/,
tools/, and for public headers include/gpualloc/<layer>/ (the headers directly
in include/gpualloc/, the C API, are bindings). An included path is placed the
same way: "gpualloc/<layer>/x.h", "gpualloc/x.h" (bindings) or "<layer>/x.h".
Tests and examples may include anything and are not checked.

Usage: check_layers.py SOURCE_ROOT     exit 1 listing every violation
       check_layers.py --self-test     checks the checker on a made-up tree
"""
import os
import re
import sys
import tempfile

LAYERS = ["arch", "core", "backends", "runtime", "bindings", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')
SUFFIXES = (".h", ".cc", ".c", ".cpp", ".hpp", ".in")


def layer_of_file(rel):
    parts = rel.split("/")
    if parts[:2] == ["include", "gpualloc"]:
        if len(parts) == 3:
            return "bindings"
        return parts[2] if parts[2] in RANK else None
    return parts[0] if parts[0] in RANK else None


def layer_of_include(path):
    parts = path.split("/")
    if parts[0] == "gpualloc":
        if len(parts) == 2:
            return "bindings"
        return parts[1] if parts[1] in RANK else None
    return parts[0] if parts[0] in RANK and len(parts) > 1 else None


def violations(root):
    found = []
    for top in LAYERS[:-1] + ["include"]:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                mine = layer_of_file(rel)
                if mine is None:
                    continue
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        theirs = layer_of_include(m.group(1))
                        if theirs is not None and RANK[theirs] > RANK[mine]:
                            found.append(
                                f"{rel}:{lineno}: {mine} includes {m.group(1)}, "
                                f"a header of {theirs}, a higher layer")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        write("include/gpualloc/core/allocator.h", '#include "gpualloc/arch/profiles.h"\n')
        write("core/a.cc", '#include "gpualloc/core/allocator.h"\n#include "core/b.h"\n')
        write("runtime/r.cc", '#include "backends/sim/x.h"\n#include "gpualloc/gpualloc.h"\n')
        write("include/gpualloc/arch/profiles.h", '#include "gpualloc/core/backend.h"\n')
        write("core/c.cc", '#include <gpualloc/runtime/registry.h>\n')
        got = violations(root)
        want = [
            "core/c.cc:1: core includes gpualloc/runtime/registry.h",
            "include/gpualloc/arch/profiles.h:1: arch includes gpualloc/core/backend.h",
            "runtime/r.cc:2: runtime includes gpualloc/gpualloc.h",
        ]
        ok = len(got) == len(want) and all(g.startswith(w) for g, w in zip(sorted(got), want))
        if not ok:
            print("check_layers self-test failed; found:\n  " + "\n  ".join(got))
            return 1
    print("check_layers self-test passed")
    return 0


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    if argv[1] == "--self-test":
        return self_test()
    found = violations(argv[1])
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) from a lower layer to a higher one "
              "(layers: " + " < ".join(LAYERS) + ")")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
