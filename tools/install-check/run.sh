#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a built tree into a staging directory, then compiles and runs a
# consumer against it through pkg-config alone (the C++ consumer, and the C
# example examples/embed.c linked shared and static, and the README's C++ and C
# examples as the README builds them), runs the installed snapshot converter
# command (when the tools are built), loads the installed PyTorch hook, builds
# a Meson project that takes gpualloc as a subproject (and checks that it
# leaves gpualloc's tools and tests out), and a CMake project that finds it
# with find_package (tools/install-check/cmake); the Python package and the
# runtime adapters' headers against the stand-ins of tests/bindings; and that
# gpualloc.pc is relocatable (its prefix relative to its own directory).
#   tools/install-check/run.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

meson install -C "$build" --destdir "$work/stage" >/dev/null
pc="$(find "$work/stage" -name gpualloc.pc -print -quit)"
[[ -n "$pc" ]] || { echo "install-check: no gpualloc.pc installed" >&2; exit 1; }
# Relocatable: its prefix is relative to its own directory, so the staged
# copy points into the stage (no PKG_CONFIG_SYSROOT_DIR needed).
grep -q '^prefix=${pcfiledir}/' "$pc" ||
  { echo "install-check: gpualloc.pc is not relocatable: $(grep '^prefix=' "$pc")" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
# gpualloc.pc lies in LIBDIR/pkgconfig.
libdir="$(dirname "$(dirname "$pc")")"
for f in "$libdir/libgpualloc.so" "$libdir/libgpualloc.a" \
  "$libdir/libgpualloc_torch.so"; do
  [[ -e "$f" ]] || { echo "install-check: ${f#"$work/stage"} not installed" >&2; exit 1; }
done
[[ -n "$(find "$work/stage" -path '*/include/gpualloc/gpualloc.h' -print -quit)" ]] ||
  { echo "install-check: gpualloc/gpualloc.h not installed" >&2; exit 1; }
[[ -n "$(find "$work/stage" -path '*/share/doc/gpualloc/LICENSE' -print -quit)" ]] ||
  { echo "install-check: share/doc/gpualloc/LICENSE not installed" >&2; exit 1; }
# The tools, when the build has them: the PyTorch snapshot converter is a
# command beside them (gpualloc-torch-snapshot-to-csv), executable, run by its
# shebang, and converts a bundled snapshot to its CSV byte for byte.
bindir="$(find "$work/stage" -path '*/bin/gpualloc-replay' -printf '%h\n' -quit)"
if [[ -n "$bindir" ]]; then
  converter="$bindir/gpualloc-torch-snapshot-to-csv"
  [[ -x "$converter" ]] ||
    { echo "install-check: ${converter#"$work/stage"} not installed or not executable" >&2; exit 1; }
  [[ "$(head -n 1 "$converter")" == '#!/usr/bin/env python3' ]] ||
    { echo "install-check: ${converter#"$work/stage"} does not start with #!/usr/bin/env python3" >&2; exit 1; }
  if command -v python3 >/dev/null; then
    traces="$root/tests/data/traces"
    "$converter" "$traces/torch-cs336-medium_1024_inference.pickle" -o "$work/converted.csv"
    cmp -s "$work/converted.csv" "$traces/torch-cs336-medium_1024_inference.csv" ||
      { echo "install-check: gpualloc-torch-snapshot-to-csv converts the bundled snapshot differently" >&2; exit 1; }
  fi
fi
# The staged shared library is not on the loader's path.
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck disable=SC2046  # pkg-config prints several flags
"${CXX:-c++}" -std=c++20 "$root/tools/install-check/consumer.cc" \
  $(pkg-config --cflags --libs gpualloc) -o "$work/consumer"
"$work/consumer"

# The C example, as its comment says to build it (shared library), then
# against the static archive: pkg-config --static adds the C++ runtime.
# shellcheck disable=SC2046
"${CC:-cc}" "$root/examples/embed.c" $(pkg-config --cflags --libs gpualloc) \
  -o "$work/embed"
"$work/embed"
# shellcheck disable=SC2046
"${CC:-cc}" "$root/examples/embed.c" $(pkg-config --cflags gpualloc) \
  $(pkg-config --static --libs gpualloc | sed 's/-lgpualloc\b/-l:libgpualloc.a/') \
  -o "$work/embed-static"
# (Outputs are captured before grep: with pipefail, grep -q leaving early
# would fail the pipeline when the writer gets SIGPIPE.)
if grep -q 'libgpualloc\.so' <<<"$(ldd "$work/embed-static")"; then
  echo "install-check: embed-static links the shared library" >&2
  exit 1
fi
"$work/embed-static" >/dev/null

# The installed PyTorch hook, driven by the harness when the tests were built.
if [[ -x "$build/tests/torch_hook_harness" ]]; then
  # Its error-path checks print the hook's one-time message: shown on failure.
  out="$("$build/tests/torch_hook_harness" "$libdir/libgpualloc_torch.so" \
    "$root/tests/data/traces/torch-cs336-medium_1024_inference.csv" 2>&1)" ||
    { echo "$out" >&2; exit 1; }
fi

# The installed Python package (gpualloc.torch, .cupy, .numba, .onnxruntime):
# it finds the installed libraries relative to itself (_paths.py), so in the
# staged tree too; with the stand-ins of tests/bindings, each adapter runs a
# case of its test against the installed copy.
helper="$(find "$work/stage" -path '*/gpualloc/torch.py' -print -quit)"
[[ -n "$helper" ]] || { echo "install-check: gpualloc/torch.py not installed" >&2; exit 1; }
site="$(dirname "$(dirname "$helper")")"
for module in _native cupy numba onnxruntime; do
  [[ -e "$site/gpualloc/$module.py" ]] ||
    { echo "install-check: gpualloc/$module.py not installed" >&2; exit 1; }
done
for lib in libgpualloc.so libgpualloc_torch.so; do
  want="$(PYTHONPATH="$site" python3 -c \
    'import sys; from gpualloc import _native; print(_native.library_path(sys.argv[1]))' "$lib")"
  [[ "$(realpath "$want")" == "$(realpath "$libdir/$lib")" ]] ||
    { echo "install-check: the gpualloc package finds $want, not the installed $libdir/$lib" >&2; exit 1; }
done
if [[ -e "$build/tests/libtorch_standin.so" ]]; then
  out="$(PYTHONPATH="$root/tests/bindings/torch_standin:$site" \
    STANDIN_TORCH_LIB="$build/tests/libtorch_standin.so" \
    HOOK_LIBRARY="$libdir/libgpualloc_torch.so" \
    python3 "$root/tests/bindings/torch_helper_test.py" registrations 2>&1)" ||
    { echo "$out" >&2; exit 1; }
fi
for adapter in cupy_adapter:cupy_standin numba_adapter:numba_standin \
  onnxruntime_external:onnxruntime_standin; do
  out="$(env -u ADAPTER_LIBRARY PYTHONPATH="$root/tests/bindings/${adapter#*:}:$site" \
    python3 "$root/tests/bindings/${adapter%%:*}_test.py" allocate_free_stats 2>&1)" ||
    { echo "$out" >&2; exit 1; }
done

# The adapters' installed headers, against the stand-ins of their runtimes:
# gpualloc/rmm.hpp for both RMM interfaces, gpualloc/onnxruntime.h, and
# gpualloc/miopen.h as C, which the MIOpen adapter test then drives.
include_dir="$(find "$work/stage" -path '*/include/gpualloc/gpualloc.h' -printf '%h\n' -quit)"
include_dir="$(dirname "$include_dir")"
for h in adapters.h rmm.hpp onnxruntime.h miopen.h; do
  [[ -e "$include_dir/gpualloc/$h" ]] ||
    { echo "install-check: gpualloc/$h not installed" >&2; exit 1; }
done
standins="$root/tests/bindings"
for rmm in rmm-25.08 rmm-26.06; do
  echo '#include "gpualloc/rmm.hpp"' |
    "${CXX:-c++}" -std=c++20 -fsyntax-only -x c++ - -I"$include_dir" \
      -I"$standins/rmm_standin/$rmm" -I"$standins/rmm_standin/common" \
      -I"$standins/rmm_standin/cccl"
done
printf '#include "gpualloc/onnxruntime.h"\n#include "gpualloc/adapters.h"\n' |
  "${CXX:-c++}" -std=c++20 -fsyntax-only -x c++ - -I"$include_dir" \
    -I"$standins/onnxruntime_standin/c"
# shellcheck disable=SC2046
"${CC:-cc}" -c "$standins/miopen_adapter_test.c" -I"$standins/miopen_standin" \
  $(pkg-config --cflags gpualloc) -o "$work/miopen_adapter_test.o"
# shellcheck disable=SC2046
"${CXX:-c++}" -std=c++20 "$work/miopen_adapter_test.o" \
  "$standins/miopen_standin/miopen_standin.cc" -I"$standins/miopen_standin" \
  $(pkg-config --libs gpualloc) -o "$work/miopen_adapter_test"
"$work/miopen_adapter_test" >/dev/null

# The README's example programs (the C++ and the C block with a main), built
# as the README says: shared, and static with Abseil's archives too.
python3 - "$root/README.md" "$work" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
found = {}
for lang, body in re.findall(r"```(c\+\+|c)\n(.*?)```", text, re.S):
    name = "app.cc" if lang == "c++" else "app.c"
    if "int main" in body and name not in found:
        found[name] = body
for name in ("app.cc", "app.c"):
    if name not in found:
        sys.exit("install-check: README.md has no complete %s example" % name)
    open("%s/%s" % (sys.argv[2], name), "w").write(found[name])
PY
# shellcheck disable=SC2046
"${CXX:-c++}" -std=c++20 "$work/app.cc" $(pkg-config --cflags --libs gpualloc) -o "$work/app-cc"
"$work/app-cc" >/dev/null
# shellcheck disable=SC2046
"${CC:-cc}" "$work/app.c" $(pkg-config --cflags --libs gpualloc) -o "$work/app-c"
"$work/app-c" >/dev/null
static_libs="$(pkg-config --static --libs gpualloc | sed -E 's/-l(gpualloc|absl_[a-z0-9_]+)/-l:lib\1.a/g')"
# shellcheck disable=SC2046,SC2086
"${CXX:-c++}" -std=c++20 "$work/app.cc" $(pkg-config --cflags gpualloc) $static_libs \
  -o "$work/app-cc-static"
# shellcheck disable=SC2046
"${CC:-cc}" -c "$work/app.c" $(pkg-config --cflags gpualloc) -o "$work/app.o"
# shellcheck disable=SC2086
"${CXX:-c++}" "$work/app.o" $static_libs -o "$work/app-c-static"
for app in app-cc-static app-c-static; do
  if grep -Eq 'libgpualloc|libabsl' <<<"$(ldd "$work/$app")"; then
    echo "install-check: $app links a shared gpualloc or Abseil:" >&2
    ldd "$work/$app" >&2
    exit 1
  fi
  "$work/$app" >/dev/null
done

# As a Meson subproject: dependency('gpualloc') resolved by
# override_dependency. With no options given, the subproject builds the
# library and the PyTorch hook, not gpualloc's tools and tests.
mkdir -p "$work/sub/subprojects"
ln -s "$root" "$work/sub/subprojects/gpualloc"
cp "$root/tools/install-check/consumer.cc" "$work/sub/"
cat >"$work/sub/meson.build" <<'MESON'
project('gpualloc-subproject-check', 'cpp', default_options: ['cpp_std=c++20'])
gpualloc = dependency('gpualloc', fallback: ['gpualloc', 'gpualloc_dep'])
executable('consumer', 'consumer.cc', dependencies: gpualloc)
MESON
unset PKG_CONFIG_PATH
meson setup "$work/sub/build" "$work/sub" >/dev/null
sub_targets="$(ninja -C "$work/sub/build" -t targets all)"
if grep -Eq '^subprojects/gpualloc/(tests|tools)/' <<<"$sub_targets"; then
  echo "install-check: as a subproject, gpualloc builds its tools or tests by default" >&2
  exit 1
fi
ninja -C "$work/sub/build" ${NINJA_JOBS:+-j "$NINJA_JOBS"} >/dev/null
"$work/sub/build/consumer"

# As a CMake package: find_package(gpualloc) in the staged prefix gives the
# C++ consumer the shared library and the C example the static archive.
prefix="$(meson introspect "$build" --buildoptions | python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')"
for f in gpuallocConfig.cmake gpuallocConfigVersion.cmake; do
  [[ -n "$(find "$work/stage" -path "*/cmake/gpualloc/$f" -print -quit)" ]] ||
    { echo "install-check: $f not installed" >&2; exit 1; }
done
out="$(cmake -G Ninja -S "$root/tools/install-check/cmake" -B "$work/cmake" \
  -DCMAKE_PREFIX_PATH="$work/stage$prefix" 2>&1 &&
  cmake --build "$work/cmake" 2>&1)" || { echo "$out" >&2; exit 1; }
[[ "$(ldd "$work/cmake/consumer")" == *libgpualloc.so* ]] ||
  { echo "install-check: the CMake consumer does not link the shared library" >&2; exit 1; }
if [[ "$(ldd "$work/cmake/embed-static")" == *libgpualloc.so* ]]; then
  echo "install-check: the CMake embed-static links the shared library" >&2
  exit 1
fi
"$work/cmake/consumer"
"$work/cmake/embed-static" >/dev/null
echo "install-check: installed copy (C++ consumer, C example shared and static, the README's examples shared and static, PyTorch hook, the Python package and its adapters, the adapters' headers, the snapshot converter command when tools are built), subproject (library only by default) and CMake package all work"
