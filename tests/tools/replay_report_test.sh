#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-replay's text report as the demo (tools/demo.sh) prints it: what it
# read first, the table grouped by trace, a legend line for every column, and
# the comparison with PyTorch computed from the run; then a multi-stream trace
# with its no-wait bound, --compare-one-stream, --repeat's pass columns, and
# --one-stream.
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

"$replay" --repeat 2 --compare-one-stream \
  --config name=bfc-expandable,arch=h100,preallocate=false \
  "$traces/gen-serve.csv" >"$out"
header=$(grep '^  config ' "$out") || fail "no header row (multi-stream)"
for column in 'no-wait bound' 'peak reserved' 'one-stream peak' 'pass 1 peak' \
  'pass 2 peak' 'waits/100 frees' 'completion/100 frees'; do
  case "$header" in *"$column"*) ;; *) fail "no column $column" ;; esac
  grep -q "^  $column  " "$out" || fail "no legend line for $column"
done
grep -Eq '^  bfc-expandable +[0-9]+ +0 +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB' "$out" ||
  fail "no figures under the bound, one-stream and pass columns"
"$replay" --one-stream --config arch=h100,preallocate=false \
  "$traces/gen-serve.csv" >"$out"
grep -q '^gen-serve (every stream replayed as stream 0)$' "$out" ||
  fail "--one-stream: the heading does not say so"
"$replay" --json --one-stream --config arch=h100,preallocate=false \
  "$traces/gen-serve.csv" >"$out"
grep -q '"nowait_bound_bytes":null,"one_stream":true,' "$out" ||
  fail "--one-stream: the JSON does not say so"
echo ok
