#!/usr/bin/env python3
"""The include graph of a layered folder (preload/, collector/), by file and by layer.

  scripts/include_graph.py [ROOT]            prints each file's includes inside ROOT (default preload)
  scripts/include_graph.py --check [ROOT...] exit 1 naming every pair of files that include each
                                             other and every include of a higher layer, in each
                                             ROOT (default: preload and collector); exit 0 otherwise

A ROOT's layers, top to bottom, are read from the comment block of ROOT/CMakeLists.txt (lines
`#   NAME/  what it holds`), so each order is written once. A file's layer is its first folder under
ROOT; includes are "folder/file.h", resolved against ROOT (others, such as the collector's
"wire/wire_format.h" from the preload, are outside the graph)."""
import collections
import os
import re
import sys

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
ROOTS = ["preload", "collector"]


def layers(root):
    text = open(os.path.join(REPO, root, "CMakeLists.txt")).read()
    return re.findall(r"^#   ([a-z_]+)/ ", text, re.M)


def graph(root):
    top = os.path.join(REPO, root)
    edges = collections.defaultdict(set)
    for folder, _, names in os.walk(top):
        for name in names:
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.relpath(os.path.join(folder, name), top)
            for inc in re.findall(r'^#include "([^"]+)"', open(os.path.join(top, path)).read(), re.M):
                if os.path.exists(os.path.join(top, inc)):
                    edges[path].add(inc)
    return edges


def unit(path):
    """A header and its source are one unit: "core/log"."""
    return path.rsplit(".", 1)[0]


def problems(root, edges, order):
    out = []
    units = collections.defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if unit(a) != unit(b):
                units[unit(a)].add(unit(b))
    for a, bs in sorted(units.items()):
        for b in sorted(bs):
            if a < b and a in units.get(b, ()):
                out.append(f"{root}/{a} and {root}/{b} include each other")
    for a, bs in sorted(edges.items()):
        la = a.split("/")[0]
        if la not in order:
            out.append(f"{root}/{a}: folder {la}/ is not a layer in {root}/CMakeLists.txt")
            continue
        for b in sorted(bs):
            lb = b.split("/")[0]
            if lb in order and order.index(lb) < order.index(la):
                out.append(f"{root}/{a} includes {b}: {lb}/ is above {la}/")
    return out


def check(root):
    edges, order = graph(root), layers(root)
    found = problems(root, edges, order)
    for line in found:
        print(line)
    print(f"{root}: {len(edges)} files, layers {' > '.join(order) or '(none found)'}: "
          f"{len(found)} problem(s)")
    return bool(found) or not order


def main():
    args = sys.argv[1:]
    if args[:1] == ["--check"]:
        failed = [check(root) for root in (args[1:] or ROOTS)]
        return 1 if any(failed) else 0
    edges = graph(args[0] if args else "preload")
    for a in sorted(edges):
        print(a, "->", " ".join(sorted(edges[a])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
