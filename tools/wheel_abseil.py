#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Lists the Abseil shared libraries the wheel bundles (meson.build, with
-Dpython_wheel=true): every library `pkg-config --libs` names for the given
Abseil components, one line each: its file (symlinks resolved), a tab, and
the name the loader looks for (its SONAME).

Why shared and not static: Debian's libabsl-dev archives are compiled as
position-independent executable code, which no linker puts into a shared
object. They reach the thread-locals they define with the local-exec model
(R_X86_64_TPOFF32 in libabsl_base.a's sysinfo.cc.o, libabsl_raw_hash_set.a
and libabsl_cordz_functions.a) and data of other libraries PC-relative
(R_X86_64_PC32 against glibc's `stderr` in libabsl_str_format_internal.a,
against libstdc++'s basic_ios vtable in libabsl_cord.a): `ld -shared`
refuses both ("recompile with -fPIC"). So the wheel carries the shared
libraries, found through the $ORIGIN run path of the libraries beside them.

Usage: wheel_abseil.py COMPONENT...      (e.g. absl_status absl_strings)
"""
import os
import subprocess
import sys


def soname(path):
    out = subprocess.run(["objdump", "-p", path], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "SONAME":
            return fields[1]
    sys.exit(f"wheel_abseil.py: {path} has no SONAME")


def main(components):
    if not components:
        sys.exit(__doc__)
    flags = subprocess.run(["pkg-config", "--libs"] + components, check=True,
                           capture_output=True, text=True).stdout.split()
    dirs = [f[2:] for f in flags if f.startswith("-L")]
    dirs += subprocess.run(
        ["pkg-config", "--variable=libdir", components[0]], check=True,
        capture_output=True, text=True).stdout.split()
    seen = set()
    for name in (f[2:] for f in flags if f.startswith("-labsl_")):
        if name in seen:
            continue
        seen.add(name)
        found = [os.path.join(d, f"lib{name}.so") for d in dirs
                 if os.path.exists(os.path.join(d, f"lib{name}.so"))]
        if not found:
            sys.exit(f"wheel_abseil.py: lib{name}.so not found in {dirs} "
                     "(Debian: apt install libabsl-dev)")
        path = os.path.realpath(found[0])
        print(f"{path}\t{soname(path)}")


if __name__ == "__main__":
    main(sys.argv[1:])
