#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wheel, as a new user makes it (pyproject.toml): in a fresh virtual
# environment that sees Debian's python3-mesonpy, `pip install
# --no-build-isolation .` from a clean clone of the committed tree; then
#   - the wheel's tag names the platform (not py3-none-any);
#   - gpualloc.torch.library_path() lies inside the environment and loads
#     with ctypes, and so does libgpualloc.so;
#   - every Abseil library the two need resolves inside the package, and
#     (where a mount namespace can be made) they load with the system's
#     Abseil hidden;
#   - the Python tests run against the installed copy (PYTHONPATH holds the
#     runtimes' stand-ins only, not python/): the CuPy, Numba and ONNX
#     Runtime adapters, and the PyTorch helper with the stand-in torch of
#     BUILD_DIR (when it was built there).
#   tools/wheel-check/run.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
python="${WHEEL_PYTHON:-/usr/bin/python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel-check: $*" >&2; exit 1; }

git clone -q "$root" "$work/src"
"$python" -m venv --system-site-packages "$work/v"
# Offline (--no-index: nothing is downloaded) and bounded: the build is the
# project's own, a few minutes on 2 cores.
(cd "$work/src" &&
  timeout 1200 "$work/v/bin/pip" install --no-index --no-build-isolation \
    --no-input -v . >"$work/pip.log" 2>&1) ||
  { tail -n 40 "$work/pip.log" >&2; fail "pip install failed (or ran past 20 minutes)"; }
wheel="$(grep -o 'gpualloc-[^ /]*\.whl' "$work/pip.log" | head -n 1)"
[[ "$wheel" == *-linux_"$(uname -m)".whl ]] || fail "wheel tag: '$wheel' does not name the platform"

cd "$work"  # away from the source tree: only the installed copy is importable
site="$("$work/v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
for lib in libgpualloc_torch.so libgpualloc.so; do
  path="$("$work/v/bin/python" -c '
import ctypes, sys
from gpualloc import _native
p = _native.library_path(sys.argv[1])
ctypes.CDLL(p)
print(p)' "$lib")"
  [[ "$path" == "$site/gpualloc/$lib" ]] || fail "$lib found at $path, not in $site/gpualloc"
  outside="$(ldd "$path" | grep absl | grep -v "=> $site/gpualloc/" || true)"
  [[ -z "$outside" ]] || fail "$lib takes Abseil from outside the package: $outside"
done
# Where a mount namespace can be made (root, as on CI): both load with the
# system's Abseil libraries hidden, as on a machine without them.
if unshare -m true 2>/dev/null; then
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare -m bash -c '
    for f in /usr/lib/*/libabsl_*.so.* /usr/lib/libabsl_*.so.*; do
      [[ -e "$f" ]] && mount --bind /dev/null "$f"
    done
    "$1" -c "
import ctypes
from gpualloc import _native
for n in (\"libgpualloc_torch.so\", \"libgpualloc.so\"):
    ctypes.CDLL(_native.library_path(n))"' _ "$work/v/bin/python" ||
    fail "the wheel's libraries do not load with the system's Abseil hidden"
fi
"$work/v/bin/python" -c 'import gpualloc.torch as gt; print(gt.library_path())' |
  grep -q "^$work/v/" || fail "gpualloc.torch.library_path() is not inside the environment"

for t in cupy_adapter:cupy_standin numba_adapter:numba_standin \
  onnxruntime_external:onnxruntime_standin; do
  env -u ADAPTER_LIBRARY PYTHONPATH="$root/tests/bindings/${t#*:}" \
    "$work/v/bin/python" "$root/tests/bindings/${t%%:*}_test.py" >/dev/null ||
    fail "${t%%:*}_test.py failed against the installed wheel"
done
if [[ -e "$build/tests/libtorch_standin.so" ]]; then
  env -u HOOK_LIBRARY PYTHONPATH="$root/tests/bindings/torch_standin" \
    STANDIN_TORCH_LIB="$build/tests/libtorch_standin.so" \
    "$work/v/bin/python" "$root/tests/bindings/torch_helper_test.py" >/dev/null ||
    fail "torch_helper_test.py failed against the installed wheel"
fi
echo "wheel-check: $wheel installs; gpualloc.torch and libgpualloc.so load from $site/gpualloc with Abseil from the package; the adapters' Python tests pass against it"
