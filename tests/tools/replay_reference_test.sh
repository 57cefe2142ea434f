#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-replay --reference and gpualloc-tune --reference: the reference
# models' rows beside the configurations' in the table and in --json (with
# "reference" and --repeat's passes), the rows of gpualloc unchanged, and bad
# names refused before any replay.
set -eu
replay=$1
tune=$2
traces=$3
out=$(mktemp)
plain=$(mktemp)
trap 'rm -f "$out" "$plain"' EXIT
fail() { echo "$1"; cat "$out"; exit 1; }
trace="$traces/torch-cs336-medium_1024_inference.csv"
config=name=on-demand,arch=h100,preallocate=false

"$replay" --baseline "$traces/SOURCES.md" --config "$config" \
  --reference pytorch,tf,async "$trace" "$traces/gen-serve.csv" >"$out"
for model in pytorch tf async; do
  [ "$(grep -Ec "^  $model model +[0-9]+ +0 " "$out")" -eq 2 ] ||
    fail "no $model model row for each trace"
done
grep -Eq "^  pytorch model +0\.9[89][0-9]x PyTorch's" "$out" ||
  fail "the pytorch model is not within 2% of PyTorch in the comparison"

"$replay" --json --repeat 2 --config "$config" --reference pytorch \
  "$trace" >"$out"
[ "$(wc -l <"$out")" -eq 2 ] || fail "expected two JSON objects"
grep -q '^{"trace":"torch-cs336-medium_1024_inference","config":"","label":"pytorch model","reference":"pytorch","device":"sim h100 ' "$out" ||
  fail "the reference's JSON object does not name it"
grep '"reference":"pytorch"' "$out" | grep -q '"repeat":2,' ||
  fail "the reference's JSON object lost --repeat"
[ "$(grep -c '"reference"' "$out")" -eq 1 ] ||
  fail "a configuration's JSON object names a reference"

# gpualloc's own objects are the same with and without --reference (but for
# the wall-time fields).
strip() { sed -E 's/"ns_per_op":[^,]*,"timed_page_faults":[0-9]*//' "$1"; }
"$replay" --json --config "$config" "$trace" >"$plain"
"$replay" --json --config "$config" --reference pytorch "$trace" |
  head -n 1 >"$out"
[ "$(strip "$out")" = "$(strip "$plain")" ] ||
  fail "--reference changed the configuration's object"

if "$replay" --reference torch "$trace" >"$out" 2>&1; then
  fail "--reference torch was accepted"
fi
grep -q 'unknown reference "torch" (expected one of pytorch, pytorch-expandable, tf, async)' "$out" ||
  fail "--reference torch: no message naming it"

# A reference's rows must be told apart from the others'.
if "$replay" --reference pytorch,pytorch "$trace" >"$out" 2>&1; then
  fail "--reference pytorch,pytorch was accepted"
fi
grep -q -- '--reference names pytorch twice' "$out" || fail "no message"
if "$replay" --config "name=tf model" --reference tf "$trace" >"$out" 2>&1; then
  fail "a configuration named like a reference was accepted"
fi
grep -q -- '--config "name=tf model" has the name "tf model" of --reference tf' "$out" ||
  fail "no message naming the configuration"

"$tune" --grid preallocate=false --reference pytorch "$trace" >"$out"
grep -Eq '^ +[0-9]+ +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +reference=pytorch$' "$out" ||
  fail "gpualloc-tune: no ranked row for reference=pytorch"
grep -A3 '^Best per architecture' "$out" | grep -q 'reference=' &&
  fail "gpualloc-tune: a reference in the per-architecture summary"
echo ok
