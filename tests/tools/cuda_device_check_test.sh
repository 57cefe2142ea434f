#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/tools/cuda_device_check_test.sh DEVICE_CHECK: tools/device-check.sh on a
# machine without an NVIDIA GPU says so, writes that to its report file and
# exits 0 at once. Skipped (77) where a GPU is present: there the script is the
# real device check, run by hand.
set -euo pipefail
script="$1"
probe=$("$script" --probe)
if [[ "$probe" != "no NVIDIA GPU: "* ]]; then
  echo "a GPU is here ($probe): skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
out=$(cd "$tmp" && "$script" report.md)
echo "$out"
[[ "$out" == "no NVIDIA GPU here ("*"): nothing to check." ]] || { echo "unexpected output"; exit 1; }
grep -qF "$out" "$tmp/report.md" || { echo "report.md lacks the message"; exit 1; }
# The default report name, relative to the working directory.
(cd "$tmp" && "$script" >/dev/null)
[[ -f "$tmp/device-check.md" ]] || { echo "no device-check.md"; exit 1; }
(( SECONDS - start < 30 )) || { echo "took $((SECONDS - start)) s"; exit 1; }
# A bad option is a usage error.
if "$script" --bogus 2>/dev/null; then echo "--bogus accepted"; exit 1; fi
echo "ok"
