#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages gpualloc's build, tests and CI need.
#
# Idempotent: every package is checked with dpkg-query first, so on a ready
# machine this does nothing, prints nothing and needs no network. apt-get update
# runs only when something is missing. As non-root it uses sudo when available;
# otherwise it prints the apt-get command to run and exits 1.
#
# Env: GPUALLOC_SKIP_DEPS=1 skips everything (e.g. non-Debian hosts that provide
# the tools another way).
set -euo pipefail

# Required for the build, the tests, the benchmarks, CI's clang build and
# format check, and the install check's CMake consumer (cmake; with it the
# build also installs gpuallocConfigVersion.cmake), and the wheel check's
# `pip install .` (python3-mesonpy, python3-venv, python3-pip; objdump from
# binutils names the Abseil libraries it bundles).
required=(meson ninja-build pkg-config g++ clang clang-format libabsl-dev libgtest-dev
          libgmock-dev libbenchmark-dev python3 cmake python3-mesonpy python3-venv
          python3-pip binutils)
# Optional: HIP headers (meson option hip=auto). Debian ships them for amd64 only,
# so a missing candidate is a warning, not an error.
optional=(libamdhip64-dev)

if [[ "${GPUALLOC_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi

say() { echo "install-deps: $*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1; then
  say "dpkg-query not found (not Debian?); install the equivalents of: ${required[*]} ${optional[*]}"
  if command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1 &&
     command -v pkg-config >/dev/null 2>&1; then
    exit 0
  fi
  exit 1
fi

is_installed() {
  local status
  status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
  [[ "$status" == installed ]]
}

missing_required=()
for p in "${required[@]}"; do
  is_installed "$p" || missing_required+=("$p")
done
missing_optional=()
for p in "${optional[@]}"; do
  is_installed "$p" || missing_optional+=("$p")
done

if (( ${#missing_required[@]} == 0 && ${#missing_optional[@]} == 0 )); then
  exit 0
fi

all_missing=("${missing_required[@]}" "${missing_optional[@]}")

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  say "not root and sudo is not available; as root, run:"
  echo "  apt-get update && apt-get install -y --no-install-recommends ${all_missing[*]}" >&2
  exit 1
fi

apt_env=(env DEBIAN_FRONTEND=noninteractive)
apt_opts=(-y -qq --no-install-recommends -o Dpkg::Use-Pty=0)

say "missing: ${all_missing[*]}; running apt-get update"
"${as_root[@]}" "${apt_env[@]}" apt-get update -qq

to_install=("${missing_required[@]}")
for p in "${missing_optional[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -n "$candidate" && "$candidate" != "(none)" ]]; then
    to_install+=("$p")
  else
    say "warning: optional package $p is not available here; HIP headers will be absent"
  fi
done

if (( ${#to_install[@]} > 0 )); then
  say "installing: ${to_install[*]}"
  "${as_root[@]}" "${apt_env[@]}" apt-get install "${apt_opts[@]}" "${to_install[@]}" >/dev/null
fi

still_missing=()
for p in "${missing_required[@]}"; do
  is_installed "$p" || still_missing+=("$p")
done
if (( ${#still_missing[@]} > 0 )); then
  say "error: still missing after apt-get install: ${still_missing[*]}"
  exit 1
fi
say "done"
