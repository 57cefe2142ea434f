#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-replay and gpualloc-tune check every configuration and output path
# before the first replay: a bad one fails the run at once (exit 1, nothing
# replayed, nothing printed on stdout) with a message naming it. So does
# gpualloc-soak (exit 2) for arguments that contradict each other.
set -eu
replay=$1
tune=$2
trace=$3
soak=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# expect_early_failure NEEDLE COMMAND...
expect_early_failure() {
  needle=$1
  shift
  if "$@" >"$dir/out" 2>"$dir/err"; then
    echo "succeeded: $*"
    exit 1
  fi
  if [ -s "$dir/out" ]; then
    echo "replayed before failing: $*"
    head -n 3 "$dir/out"
    exit 1
  fi
  grep -qF -- "$needle" "$dir/err" || {
    echo "the error does not name \"$needle\": $*"
    cat "$dir/err"
    exit 1
  }
}

expect_early_failure "$dir/no/such/dir/out.svg" \
  "$replay" --json --svg "$dir/no/such/dir/out.svg" "$trace"
expect_early_failure "is a directory" \
  "$replay" --json --svg "$dir" "$trace"
expect_early_failure "colour" \
  "$replay" --json --config arch=h100 --config colour=blue "$trace"
expect_early_failure "device_memory=256" \
  "$replay" --json --config arch=h100 --config device_memory=256 "$trace"
# Two configurations with one name would give rows no one can tell apart.
expect_early_failure 'name "a"' \
  "$replay" --json --config arch=h100,name=a --config arch=a100,name=a "$trace"
expect_early_failure '"arch=h100"' \
  "$replay" --json --config arch=h100 --config arch=h100 "$trace"
expect_early_failure "$dir/no/such/dir/out.csv" \
  "$tune" --grid growth=exact --csv "$dir/no/such/dir/out.csv" "$trace"
expect_early_failure "$dir/no/such/dir/out.json" \
  "$tune" --grid growth=exact --csv "$dir/ok.csv" \
  --json "$dir/no/such/dir/out.json" "$trace"
# A range whose low end is above its high end names both ends.
expect_early_failure "--min-live 10 is above --max-live 5" \
  "$soak" --ops 10 --min-live 10 --max-live 5
expect_early_failure "--min-live 5000 is above --max-live 3000" \
  "$soak" --ops 10 --min-live 5000
# The check leaves no file behind.
[ ! -e "$dir/ok.csv" ] || { echo "the check left $dir/ok.csv behind"; exit 1; }
echo ok
