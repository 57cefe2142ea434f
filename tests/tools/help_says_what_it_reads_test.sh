#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every tool says at the top of its --help what it reads: the command line
# only, or the environment too (gpualloc-info, as a program using the library).
set -eu
status=0
for tool in "$@"; do
  name=$(basename "$tool")
  head=$("$tool" --help | head -n 12)
  case "$name" in
    gpualloc-info) want='Reads: the command line and the environment' ;;
    *) want='Reads: the command line' ;;
  esac
  case "$head" in
    *"$want"*) echo "$name: ok" ;;
    *) echo "$name: the top of --help does not say \"$want\":"; echo "$head"; status=1 ;;
  esac
  case "$name:$head" in
    gpualloc-info:*) ;;
    *"environment"*) ;;
    *) echo "$name: --help does not say whether the environment is read"; status=1 ;;
  esac
done
exit $status
