#!/usr/bin/env python3
"""Checks pickles written by cumemtrace against what PyTorch's viewers need.

  check_pickle.py pairs DIR            every DIR/X.pickle against DIR/X.json: equal objects
  check_pickle.py samples WRITER DIR   runs `WRITER DIR` (tests/snapshot/write_samples.cpp), then `pairs`
  check_pickle.py fixture PICKLE SRC   a converted PyTorch snapshot against its source (JSON or
                                       PyTorch's own pickle)

Every pickle must: start with PROTO 4; use only the opcodes MemoryViz.js's unpickler knows
(torch-snapshot-format.md section 3.2); put at most 1000 items between a MARK and its
APPENDS/SETITEMS; load with pickle.loads. `pairs` then demands equality with json.load (with
segment_pool_id as a tuple, as PyTorch pickles it); `fixture` demands that what the viewers read
(segments, blocks, trace entries, frames) survived, field by field.
"""
import json
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

ALLOWED = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "SETITEM",
    "SETITEMS", "DICT", "APPEND", "APPENDS", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "NONE", "NEWTRUE", "NEWFALSE", "BININT1", "BININT2", "BININT", "LONG1", "BINFLOAT",
    "SHORT_BINUNICODE", "BINUNICODE", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
}
BATCH = 1000


def batches(data):
    """Largest MARK..APPENDS/SETITEMS batch, counted in items (pairs for SETITEMS)."""
    stack = []  # items since each open MARK
    largest = 0
    for op, _, pos in pickletools.genops(data):
        n = op.name
        if n == "MARK":
            stack.append(0)
            continue
        if n in ("APPENDS", "SETITEMS"):
            items = stack.pop()
            if n == "SETITEMS":
                assert items % 2 == 0, f"odd SETITEMS batch at {pos}"
                items //= 2
            assert items <= BATCH, f"{n} at {pos} has {items} items (max {BATCH})"
            # The container itself was counted in the enclosing batch when it was pushed.
            largest = max(largest, items)
            continue
        if not stack:
            continue
        if n in ("APPEND", "TUPLE2"):
            stack[-1] -= 1  # APPEND consumes a value; TUPLE2 turns two into one
        elif n in ("MEMOIZE", "STOP", "PROTO", "FRAME"):
            pass
        else:
            stack[-1] += 1
    return largest


def load(path):
    data = Path(path).read_bytes()
    used = set()
    for op, _, pos in pickletools.genops(data):
        assert op.name in ALLOWED, f"{path}: opcode {op.name} at {pos} is not understood by MemoryViz.js"
        used.add(op.name)
    assert data[:2] == b"\x80\x04", f"{path}: not a protocol-4 pickle: {data[:2]!r}"
    largest = batches(data)
    return pickle.loads(data), used, largest


def load_source(path):
    """A snapshot as PyTorch wrote it: JSON, or PyTorch's own pickle."""
    path = Path(path)
    if path.suffix == ".pickle":
        return pickle.loads(path.read_bytes())
    return json.loads(path.read_text())


def tuples_for_pool_ids(snapshot):
    for seg in snapshot.get("segments", []):
        if "segment_pool_id" in seg:
            seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return snapshot


def check_pairs(directory):
    pickles = sorted(Path(directory).glob("*.pickle"))
    assert pickles, f"no pickles in {directory}"
    for p in pickles:
        obj, used, largest = load(p)
        expected = tuples_for_pool_ids(json.loads(p.with_suffix(".json").read_text()))
        assert obj == expected, f"{p}: pickle.loads differs from the JSON"
        print(f"ok {p.name}: equal to its JSON; opcodes {sorted(used)}; largest batch {largest}")


def check_fixture(pickle_path, json_path):
    obj, used, largest = load(pickle_path)
    src = load_source(json_path)
    assert len(obj["segments"]) == len(src["segments"])
    for got, want in zip(obj["segments"], src["segments"]):
        for k in ("device", "address", "total_size", "stream"):
            assert got[k] == want[k], f"segment {k}: {got[k]} != {want[k]}"
        assert got["segment_pool_id"] == (0, 0)
        assert len(got["blocks"]) == len(want["blocks"])
        assert [b["size"] for b in got["blocks"]] == [b["size"] for b in want["blocks"]]
        assert [b["state"] for b in got["blocks"]] == [b["state"] for b in want["blocks"]]
        # _memory_viz stats asserts that blocks tile their segment.
        assert sum(b["size"] for b in got["blocks"]) == got["total_size"]
    assert len(obj["device_traces"]) == len(src["device_traces"])
    entries = 0
    for got_tr, want_tr in zip(obj["device_traces"], src["device_traces"]):
        assert len(got_tr) == len(want_tr)
        for got, want in zip(got_tr, want_tr):
            for k in ("action", "size", "stream", "time_us"):
                assert got[k] == want.get(k, 0), f"entry {entries} {k}: {got[k]} != {want.get(k)}"
            key = "device_free" if want["action"] == "oom" else "addr"
            assert got[key] == want[key]
            # cumemtrace keeps stacks of allocations (and OOMs) only, as its JSON writer does.
            if want.get("frames") and want["action"] in ("alloc", "oom"):
                assert got["frames"] == [
                    {"filename": f["filename"], "line": f["line"], "name": f["name"]} for f in want["frames"]
                ], f"entry {entries}: frames differ"
            entries += 1
    print(f"ok {pickle_path}: {entries} entries match {json_path}; opcodes {sorted(used)}; "
          f"largest batch {largest}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "pairs":
        check_pairs(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "samples":
        Path(sys.argv[3]).mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.argv[2], sys.argv[3]], check=True)
        check_pairs(sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "fixture":
        check_fixture(sys.argv[2], sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
