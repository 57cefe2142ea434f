#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gpualloc-tune end to end: exit 0, a ranked table with its best-per-trace and
# per-architecture summary, the CSV header and one CSV row per (configuration,
# trace); then exit 1 on a bad argument.
set -eu
tune=$1
trace=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tune" --base device_memory=80GB,preallocate=false --grid growth=exact\|doubling \
  --grid split_bound=0\|1MiB --csv "$dir/out.csv" --json "$dir/out.json" \
  "$trace" >"$dir/table.txt"
cat "$dir/table.txt"
head -n 1 "$dir/out.csv" | grep -q '^rank,config,trace,error,ops,ooms,peak_bytes_in_use,' \
  || { echo "bad CSV header: $(head -n 1 "$dir/out.csv")"; exit 1; }
rows=$(($(wc -l <"$dir/out.csv") - 1))
[ "$rows" -eq 4 ] || { echo "expected 4 CSV rows, got $rows"; exit 1; }
[ "$(wc -l <"$dir/out.json")" -eq 4 ] || { echo "expected 4 JSON lines"; exit 1; }
grep -q '^ *1 ' "$dir/table.txt" || { echo "no rank 1 in the table"; exit 1; }
# Peaks to about a MiB (GiB with three decimals), and the best configuration
# per trace and per architecture profile (no arch= swept here: one group).
grep -Eq '^ *1 +[0-9]+ +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{3} ' "$dir/table.txt" ||
  { echo "the table's peaks do not have three decimals"; exit 1; }
grep -q '^Best per trace' "$dir/table.txt" &&
  grep -Eq '^  peak\[1\] [^ ]+: [0-9]+\.[0-9]{3} GiB peak reserved, [0-9]+ ooms, rank [0-9]+: device_memory=80GB' "$dir/table.txt" &&
  grep -q '^Best per architecture profile' "$dir/table.txt" &&
  grep -q '^  (arch not set) (4 configurations): rank 1, total ' "$dir/table.txt" ||
  { echo "no best-per-trace and per-architecture summary"; exit 1; }
# It says what it read, and defines its columns with gpualloc-replay's names.
head -n 1 "$dir/table.txt" | grep -q '^Settings from: the command line only' ||
  { echo "the first line does not say what was read"; exit 1; }
grep -q '^  modeled ms ' "$dir/table.txt" || { echo "no legend line for modeled ms"; exit 1; }
"$tune" --help | head -n 5 | grep -q '^Reads: the command line only' ||
  { echo "--help does not begin with what it reads"; exit 1; }
if "$tune" --grid nonsense=1 "$trace" >/dev/null 2>"$dir/err.txt"; then
  echo "a bad --grid key was accepted"; exit 1
fi
grep -q 'unknown key' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
# A repeated grid value is refused, naming it.
if "$tune" --grid growth=exact\|exact "$trace" >/dev/null 2>"$dir/err.txt"; then
  echo "a repeated --grid value was accepted"; exit 1
fi
grep -q 'growth=exact is given twice' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
# Two traces with one file stem keep a column each.
mkdir "$dir/d2"
cp "$trace" "$dir/ok.csv"
cp "$trace" "$dir/d2/ok.csv"
"$tune" --base device_memory=80GB,preallocate=false --grid growth=exact \
  --csv "$dir/two.csv" "$dir/ok.csv" "$dir/d2/ok.csv" >"$dir/two.txt"
grep -q "^peak\[1\]: peak reserved GiB of $dir/ok.csv\$" "$dir/two.txt" &&
  grep -q "^peak\[2\]: peak reserved GiB of $dir/d2/ok.csv\$" "$dir/two.txt" ||
  { echo "the two traces do not have a column each:"; cat "$dir/two.txt"; exit 1; }
grep -q ",$dir/ok.csv,," "$dir/two.csv" && grep -q ",$dir/d2/ok.csv,," "$dir/two.csv" ||
  { echo "the CSV merges the two traces:"; cat "$dir/two.csv"; exit 1; }
echo ok
