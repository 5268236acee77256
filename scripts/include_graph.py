#!/usr/bin/env python3
"""The preload's include graph, by file and by layer (preload/CMakeLists.txt names the layers).

  scripts/include_graph.py            prints each file's includes inside preload/
  scripts/include_graph.py --check    exit 1 naming every pair of files that include each other
                                      and every include of a higher layer; exit 0 otherwise

The layers, top to bottom, are read from the comment block of preload/CMakeLists.txt (lines
`#   NAME/  what it holds`), so the order is written once."""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload")


def layers():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    return re.findall(r"^#   ([a-z]+)/ ", text, re.M)


def graph():
    edges = collections.defaultdict(set)
    for folder, _, names in os.walk(ROOT):
        for name in names:
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.relpath(os.path.join(folder, name), ROOT)
            for inc in re.findall(r'^#include "([^"]+)"', open(os.path.join(ROOT, path)).read(), re.M):
                if os.path.exists(os.path.join(ROOT, inc)):
                    edges[path].add(inc)
    return edges


def unit(path):
    """A header and its source are one unit: "core/log"."""
    return path.rsplit(".", 1)[0]


def problems(edges, order):
    out = []
    units = collections.defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if unit(a) != unit(b):
                units[unit(a)].add(unit(b))
    for a, bs in sorted(units.items()):
        for b in sorted(bs):
            if a < b and a in units.get(b, ()):
                out.append(f"{a} and {b} include each other")
    for a, bs in sorted(edges.items()):
        la = a.split("/")[0]
        if la not in order:
            out.append(f"{a}: folder {la}/ is not a layer in preload/CMakeLists.txt")
            continue
        for b in sorted(bs):
            lb = b.split("/")[0]
            if lb in order and order.index(lb) < order.index(la):
                out.append(f"{a} includes {b}: {lb}/ is above {la}/")
    return out


def main():
    edges, order = graph(), layers()
    if sys.argv[1:] == ["--check"]:
        found = problems(edges, order)
        for line in found:
            print(line)
        print(f"{len(edges)} files, layers {' > '.join(order)}: "
              f"{len(found)} problem(s)")
        return 1 if found or not order else 0
    for a in sorted(edges):
        print(a, "->", " ".join(sorted(edges[a])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
