#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-replay and gpualloc-tune check every configuration and output path
# before the first replay: a bad one fails the run at once (exit 1, nothing
# replayed, nothing printed on stdout) with a message naming it.
set -eu
replay=$1
tune=$2
trace=$3
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
expect_early_failure "$dir/no/such/dir/out.csv" \
  "$tune" --grid growth=exact --csv "$dir/no/such/dir/out.csv" "$trace"
expect_early_failure "$dir/no/such/dir/out.json" \
  "$tune" --grid growth=exact --csv "$dir/ok.csv" \
  --json "$dir/no/such/dir/out.json" "$trace"
# The check leaves no file behind.
[ ! -e "$dir/ok.csv" ] || { echo "the check left $dir/ok.csv behind"; exit 1; }
echo ok
