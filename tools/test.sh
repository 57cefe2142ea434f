#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: install missing deps, configure, build, run every
# test, then print one summary line counted per GoogleTest testcase:
#     tests: N passed, M failed, K skipped
#
#   tools/test.sh [meson test args...]     e.g. tools/test.sh --suite core
#
# Env: BUILD_DIR (default build), MESON_ARGS (extra `meson setup` args, e.g.
# "-Db_sanitize=address,undefined"), NINJA_JOBS, GPUALLOC_SKIP_DEPS=1, meson's
# own MESON_TESTTHREADS, and GPUALLOC_TEST_LABEL (replaces "tests" before the
# colon; .ci/run labels its extra runs so only the main run reads "word: N passed").
# Exits non-zero when the build or `meson test` fails, when any testcase fails,
# or when no test ran. Tests must use `protocol: 'gtest'` to be counted per
# testcase; other tests count once each.
set -euo pipefail
# shellcheck source=tools/lib-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-build.sh"

ga_install_deps
ga_setup
# shellcheck disable=SC2119  # ga_compile takes ninja targets, not our args
ga_compile

stamp="$GPUALLOC_BUILD_DIR/meson-private/gpualloc-test.stamp"
touch "$stamp"
meson_rc=0
meson test -C "$GPUALLOC_BUILD_DIR" --print-errorlogs "$@" || meson_rc=$?
summary_rc=0
python3 "$GPUALLOC_ROOT/tools/test_summary.py" --build-dir "$GPUALLOC_BUILD_DIR" \
  --since "$stamp" --meson-rc "$meson_rc" --label "${GPUALLOC_TEST_LABEL:-tests}" || summary_rc=$?
if (( meson_rc != 0 )); then
  exit "$meson_rc"
fi
exit "$summary_rc"
