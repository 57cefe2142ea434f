#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where `meson install` puts the gpualloc Python package (python/meson.build),
asked of the interpreter that will import it. Prints three lines: the
directory, "yes" when that interpreter reads it without PYTHONPATH (else
"no"), and LIBDIR relative to the package's directory (DIR/gpualloc), which
the package finds its libraries by (a tree moved as a whole still works).

  python_install_dir.py PREFIX LIBDIR

The choice, first that applies:
  - run from a virtual environment: its site-packages (as Meson's own
    python.install_env=auto), whatever the prefix;
  - a site-packages directory of the interpreter in PREFIX/lib (Debian's
    python3 with /usr/local: /usr/local/lib/python3.X/dist-packages, which it
    reads; Meson 1.0 would choose /usr/local/lib/python3/dist-packages, which
    it does not);
  - PREFIX/lib/pythonX.Y/site-packages: the interpreter does not read it, and
    the summary of `meson setup` says to set PYTHONPATH.
"""
import os
import site
import sys
import sysconfig


def install_dir(prefix):
    if sys.prefix != sys.base_prefix:
        return sysconfig.get_path("purelib")
    prefix = os.path.realpath(prefix)
    for d in site.getsitepackages():
        # PREFIX/lib...: for /usr, /usr/lib/python3/dist-packages, not
        # /usr/local/lib/... (another prefix's).
        if os.path.realpath(d).startswith(os.path.join(prefix, "lib") + os.sep):
            return d
    return sysconfig.get_path("purelib", "posix_prefix",
                              vars={"base": prefix, "platbase": prefix})


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d = install_dir(sys.argv[1])
    read = {os.path.realpath(p) for p in sys.path if p}
    print(d)
    print("yes" if os.path.realpath(d) in read else "no")
    print(os.path.relpath(sys.argv[2], os.path.join(d, "gpualloc")))


if __name__ == "__main__":
    main()
