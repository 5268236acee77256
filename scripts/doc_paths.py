#!/usr/bin/env python3
"""Every repository path the docs name exists, so that a file moved or renamed is not left named
in README.md or docs/*.md (the preload's move into layer folders left several).

  scripts/doc_paths.py [PAGE...]    default: README.md and docs/*.md; exit 1 naming each
                                    PAGE:LINE: PATH that matches no file, else exit 0

A path is a word that starts with one of the repository's top folders and a slash
(`preload/core/config.h`, collector/live/, bench/gpu/*); a glob must match at least one file.
Build outputs (build/bin/...) and installed paths (lib/cumemtrace/...) are not repository paths
and are not checked."""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TOP = r"(?:preload|collector|tests|bench|scripts|docs|schemas|include|python|cmake|\.ci)"
# Not preceded by a path character: /work/main/tests/... or build/bin/... is not one of ours.
PATH = re.compile(r"(?<![\w./~$-])(" + TOP + r"/[\w./*+-]*)")


def missing(page):
    out = []
    with open(page, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            for match in PATH.finditer(line):
                path = match.group(1).rstrip(".,:;")
                if not glob.glob(os.path.join(ROOT, path)):
                    out.append(f"{os.path.relpath(page, ROOT)}:{number}: {path}")
    return out


def main(pages):
    if not pages:
        pages = [os.path.join(ROOT, "README.md")]
        pages += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    bad = [entry for page in pages for entry in missing(page)]
    print("\n".join(bad) if bad else f"{len(pages)} pages: every path they name exists")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
