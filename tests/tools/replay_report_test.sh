#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-replay's text report as the demo (tools/demo.sh) prints it: what it
# read first, the table grouped by trace, a legend line for every column, and
# the comparison with PyTorch computed from the run.
set -eu
replay=$1
traces=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$replay" --baseline "$traces/SOURCES.md" \
  --config name=bfc-expandable,arch=h100,preallocate=false \
  --config name=bfc-regions,arch=h100,preallocate=false,expandable=false \
  "$traces/torch-cs336-medium_1024_inference.csv" \
  "$traces/torch-opt125m-zo-finetune.csv" >"$out"
fail() { echo "$1"; cat "$out"; exit 1; }
head -n 1 "$out" | grep -q '^Settings from: the command line only' ||
  fail "the first line does not say what was read"
grep -q '^torch-opt125m-zo-finetune (PyTorch peak reserved 1.768 GiB)$' "$out" ||
  fail "no heading for the trace"
header=$(grep '^  config ' "$out") || fail "no header row"
# Every column of the header has its line in the legend.
for column in ops ooms 'peak requested' 'peak reserved' utilization frag@peak \
  'backend a/f' 'modeled ms' ns/op ours/PyTorch; do
  case "$header" in *"$column"*) ;; *) fail "no column $column" ;; esac
  grep -q "^  $column  " "$out" || fail "no legend line for $column"
done
grep -q '1 - largest free chunk / all free bytes' "$out" || fail "frag@peak undefined"
grep -q '^Compared with PyTorch on the same runs' "$out" || fail "no comparison"
grep -Eq '^  bfc-expandable +0\.[0-9]{3}x to 0\.[0-9]{3}x PyTorch' "$out" ||
  fail "no computed range for bfc-expandable"
echo ok
