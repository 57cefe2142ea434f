#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions and L1 data-cache misses per allocate/free pair of the random
# benchmark, by live-allocation count, counted by valgrind's cachegrind (stable
# on a shared machine, unlike time). Needs valgrind and a build with
# -Dbenchmarks=enabled:
#   tools/bench/instructions.sh [BUILD_DIR] [PAIRS]
set -euo pipefail
build="${1:-build-bench}"
pairs="${2:-200000}"
bin="$build/tools/bench/random_pairs"
[[ -x "$bin" ]] || { echo "instructions.sh: $bin not built (-Dbenchmarks=enabled)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 1; }
count() {  # live pairs -> "instructions d1_misses"
  valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
    awk '/I *refs:/ {gsub(",", "", $4); ir = $4} /D1 *misses:/ {gsub(",", "", $4); d1 = $4}
         END {print ir, d1}'
}
printf '%8s %14s %14s\n' live instr/pair D1-miss/pair
for live in 100 1000 10000 100000; do
  read -r base_ir base_d1 < <(count "$live" 0)
  read -r ir d1 < <(count "$live" "$pairs")
  awk -v l="$live" -v a="$base_ir" -v b="$ir" -v c="$base_d1" -v d="$d1" -v n="$pairs" \
    'BEGIN {printf "%8d %14.0f %14.1f\n", l, (b - a) / n, (d - c) / n}'
done
