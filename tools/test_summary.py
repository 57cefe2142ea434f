#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints one summary line for a `meson test` run, counted per GoogleTest testcase.

    tools/test_summary.py --build-dir build [--since STAMP_FILE] [--meson-rc RC]

Output (stdout, exactly one line; one word and a colon, as CI harnesses expect):
    tests: N passed, M failed, K skipped

Where the numbers come from (meson 1.0.1):
  * For a test declared with `protocol: 'gtest'`, meson appends
    `--gtest_output=xml:<name>.xml` and runs it with cwd = the test's workdir, so
    the XML lands at `<workdir>/<name>.xml`, or `<build dir>/<name>.xml` when the
    test sets no workdir (a '/' in the name makes a subdirectory). The test list
    and workdirs are read from `<build dir>/meson-info/intro-tests.json`.
  * `<build dir>/meson-logs/testlog.json` (one JSON object per line, rewritten by
    every `meson test`) says which tests ran in the last run and their results,
    so `meson test --suite X` or a test-name filter are counted correctly.
  * Each gtest testcase counts once: failed if it has a <failure>/<error>,
    skipped if gtest skipped it (GTEST_SKIP) or it is DISABLED_, else passed.
  * A gtest program that meson reports failed (crash, timeout, sanitizer or leak
    report at exit) without a failing testcase in a fresh XML counts as one more
    failure; a non-gtest test (exitcode/TAP) counts once by meson's result.
  * XML files older than --since (a stamp file touched before `meson test`) are
    ignored as stale.

Without testlog.json it falls back to every gtest XML file under the build dir
(newer than --since). Exit status: 0 when nothing failed, --meson-rc is 0 and at
least one test passed; 1 otherwise; 2 on usage errors.
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

OK_RESULTS = {"OK", "EXPECTEDFAIL"}
SKIP_RESULTS = {"SKIP"}


def note(msg):
    print(f"test_summary: {msg}", file=sys.stderr)


class Counts:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped


def parse_gtest_xml(path, strict=False):
    """Counts of one gtest XML file, or None if it is not gtest output.

    strict: also require gtest's root name="AllTests" (used when scanning a tree,
    where other JUnit-style XML files may lie)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        note(f"cannot parse {path}: {e}")
        return None
    if root.tag != "testsuites" or (strict and root.get("name") != "AllTests"):
        return None
    c = Counts()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            c.failed += 1
        elif (case.get("result") in ("skipped", "suppressed")
              or case.get("status") == "notrun"
              or case.find("skipped") is not None):
            c.skipped += 1
        else:
            c.passed += 1
    return c


def is_fresh(path, since):
    try:
        return os.path.getmtime(path) >= since
    except OSError:
        return False


def load_json_lines(path):
    entries = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return entries


def match_test(log_name, tests_by_name):
    """Maps a testlog name ('name' or 'project:suite / name') to intro-tests entries."""
    if log_name in tests_by_name:
        return tests_by_name[log_name]
    if " / " in log_name:
        return tests_by_name.get(log_name.split(" / ", 1)[1], [])
    return []


def summarize_from_log(build_dir, since, log_entries, intro_tests):
    tests_by_name = {}
    for t in intro_tests:
        tests_by_name.setdefault(t["name"], []).append(t)
    total = Counts()
    seen_xml = set()
    for entry in log_entries:
        name = entry.get("name", "?")
        result = entry.get("result", "")
        candidates = match_test(name, tests_by_name)
        gtest = [t for t in candidates if t.get("protocol") == "gtest"]
        if not gtest:
            c = Counts()
            if result in OK_RESULTS:
                c.passed = 1
            elif result in SKIP_RESULTS:
                c.skipped = 1
            else:
                c.failed = 1
            total.add(c)
            continue
        t = gtest[0]
        xml_path = os.path.join(t.get("workdir") or build_dir, t["name"] + ".xml")
        c = None
        if xml_path not in seen_xml and os.path.isfile(xml_path) and is_fresh(xml_path, since):
            c = parse_gtest_xml(xml_path)
            seen_xml.add(xml_path)
        if c is None:
            c = Counts()
            if result in OK_RESULTS:
                note(f"'{name}': {result} but no fresh gtest XML at {xml_path}; counted as 1 passed")
                c.passed = 1
            elif result in SKIP_RESULTS:
                c.skipped = 1
            else:
                note(f"'{name}': {result} (exit {entry.get('returncode')}) and no gtest XML; "
                     "counted as 1 failed")
                c.failed = 1
        elif result not in OK_RESULTS and result not in SKIP_RESULTS and c.failed == 0:
            note(f"'{name}': {result} (exit {entry.get('returncode')}) although no testcase failed "
                 "(crash, timeout or sanitizer report?); counted as 1 more failed")
            c.failed += 1
        total.add(c)
    return total


def summarize_from_xml_scan(build_dir, since):
    total = Counts()
    for dirpath, dirnames, filenames in os.walk(build_dir):
        dirnames[:] = [d for d in dirnames if d not in ("meson-logs", "meson-private", "meson-info")]
        for fn in filenames:
            if not fn.endswith(".xml"):
                continue
            path = os.path.join(dirpath, fn)
            if not is_fresh(path, since):
                continue
            c = parse_gtest_xml(path, strict=True)
            if c is not None:
                total.add(c)
    return total


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--since", help="stamp file; XML files older than it are ignored")
    ap.add_argument("--meson-rc", type=int, default=0, help="exit status of `meson test`")
    ap.add_argument("--label", default="tests", help="the one word before the colon")
    args = ap.parse_args(argv)

    build_dir = os.path.abspath(args.build_dir)
    since = 0.0
    if args.since:
        try:
            since = os.path.getmtime(args.since)
        except OSError:
            note(f"stamp {args.since} missing; not filtering stale XML")

    log_path = os.path.join(build_dir, "meson-logs", "testlog.json")
    intro_path = os.path.join(build_dir, "meson-info", "intro-tests.json")
    log_entries = None
    if os.path.isfile(log_path) and is_fresh(log_path, since):
        log_entries = load_json_lines(log_path)
    intro_tests = []
    if os.path.isfile(intro_path):
        with open(intro_path, encoding="utf-8") as f:
            intro_tests = json.load(f)

    if log_entries is not None:
        total = summarize_from_log(build_dir, since, log_entries, intro_tests)
    else:
        note(f"no fresh {log_path}; scanning {build_dir} for gtest XML")
        total = summarize_from_xml_scan(build_dir, since)

    print(f"{args.label}: {total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    sys.stdout.flush()

    if total.passed + total.failed == 0:
        note("no tests ran")
        return 1
    if total.failed or args.meson_rc != 0:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
