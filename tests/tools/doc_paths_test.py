#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The documentation's references stay valid.

1. Every repository path that README.md and docs/*.md name (`core/bfc/bfc.h`,
   `tools/replay/reference*.cc`, `gpualloc/arch/profiles.h` for include/gpualloc/...)
   exists; a glob must match at least one file. Paths under build/ are build
   outputs and are not checked.
2. Every relative Markdown link in them reaches an existing file and, with
   a #fragment, a heading of that file.
3. Every citation of a document section in the source tree, such as
   `(docs/DESIGN.md, "Layers")` in a comment or a message, names a document
   that exists and a heading it has.

When a file moves, update the documents (and the citations) that name it;
run `python3 tests/tools/doc_paths_test.py -v` to list every path and
citation checked. The source root defaults to the directory two above this
file's and can be overridden with GPUALLOC_SOURCE_ROOT.
"""

import glob
import os
import re
import sys
import unittest

ROOT = os.environ.get("GPUALLOC_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The documents checked, relative to ROOT (docs/*.md are found by glob).
DOCUMENTS = ["README.md"] + sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

# Top-level directories whose paths the documents may name, and the public
# headers' include prefix.
PREFIXES = ["arch", "backends", "bindings", "core", "docs", "include",
            "python", "runtime", "tests", "tools"]
PATH_RE = re.compile(
    r"(?:^|(?<=[^A-Za-z0-9_./-]))((?:%s)/[A-Za-z0-9_.*+/-]*|gpualloc/[A-Za-z0-9_]+\.(?:hpp|h)\b)"
    % "|".join(PREFIXES))
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
# docs/NAME.md, then (across comment markers and line breaks) "Section" or,
# in a C++ string, \"Section\".
CITATION_RE = re.compile(
    r'docs/([A-Za-z_]+\.md)(?:[,(\s]|//|\*|#)+\\?"([^"\\\n]+)\\?"')
# Adjacent C++ string literals on two lines, to be read as one.
SPLIT_LITERAL_RE = re.compile(r'(?<!\\)"\s*\n\s*"')
SOURCE_EXTENSIONS = (".cc", ".h", ".c", ".py", ".sh", ".build", ".in",
                     ".txt", ".md")


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path):
    """The headings of a Markdown file, outside code blocks."""
    out = []
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code:
                m = re.match(r"#+ (.*)", line)
                if m:
                    out.append(m.group(1).strip())
    return out


def named_paths(text):
    paths = set()
    for m in PATH_RE.finditer(text):
        paths.add(m.group(1).rstrip(".,:;)"))
    return sorted(p for p in paths if p.rstrip("/"))


def source_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        # Skip version control and build directories.
        dirnames[:] = [
            d for d in dirnames
            if not d.startswith(".") and d != "subprojects" and
            not os.path.exists(os.path.join(dirpath, d, "meson-private"))
        ]
        for name in filenames:
            if name.endswith(SOURCE_EXTENSIONS):
                yield os.path.join(dirpath, name)


class DocPathsTest(unittest.TestCase):

    def test_documents_exist(self):
        self.assertIn("docs/DESIGN.md", DOCUMENTS)
        self.assertIn("docs/REFERENCE.md", DOCUMENTS)
        self.assertIn("docs/MEASUREMENTS.md", DOCUMENTS)

    def test_named_paths_exist(self):
        for doc in DOCUMENTS:
            with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
                text = f.read()
            for path in named_paths(text):
                with self.subTest(document=doc, path=path):
                    on_disk = ("include/" + path
                               if path.startswith("gpualloc/") else path)
                    if "-v" in sys.argv:
                        print("%s: %s" % (doc, path), file=sys.stderr)
                    self.assertTrue(
                        glob.glob(os.path.join(ROOT, on_disk)),
                        "%s names %s, which does not exist" % (doc, path))

    def test_links_reach_their_targets(self):
        for doc in DOCUMENTS:
            path = os.path.join(ROOT, doc)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for m in LINK_RE.finditer(text):
                target = m.group(1)
                if re.match(r"[a-z]+:", target):
                    continue  # a URL
                file_part, _, fragment = target.partition("#")
                target_path = (os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                               if file_part else path)
                with self.subTest(document=doc, link=target):
                    self.assertTrue(os.path.exists(target_path),
                                    "%s links to %s: no such file" %
                                    (doc, target))
                    if fragment and target_path.endswith(".md"):
                        anchors = [slug(h) for h in headings(target_path)]
                        self.assertIn(fragment, anchors,
                                      "%s links to %s: no such heading" %
                                      (doc, target))

    def test_source_citations_name_existing_sections(self):
        cached = {}
        for path in source_files():
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except UnicodeDecodeError:
                continue
            for m in CITATION_RE.finditer(SPLIT_LITERAL_RE.sub("", text)):
                doc, section = m.group(1), m.group(2)
                doc_path = os.path.join(ROOT, "docs", doc)
                where = os.path.relpath(path, ROOT)
                if "-v" in sys.argv:
                    print('%s: docs/%s, "%s"' % (where, doc, section),
                          file=sys.stderr)
                with self.subTest(file=where, document=doc, section=section):
                    self.assertTrue(os.path.exists(doc_path),
                                    "%s cites docs/%s, which does not exist"
                                    % (where, doc))
                    if doc_path not in cached:
                        cached[doc_path] = headings(doc_path)
                    self.assertIn(
                        section, cached[doc_path],
                        '%s cites docs/%s, "%s": no such heading' %
                        (where, doc, section))


if __name__ == "__main__":
    unittest.main()
