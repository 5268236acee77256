#!/usr/bin/env python3
"""`cumemtrace convert` end to end on a real PyTorch snapshot (torch 2.11 fixture).

  convert_test.py --cumemtrace BIN --fixture SNAPSHOT.json --out DIR

pickle: checked by check_pickle.py (opcodes, batches, every field the viewers read).
perfetto: trace-event structure (ph C/i/X/M, integer µs ts, pid/tid), one live-bytes sample per
  alloc/free that changed it, one instant per alloc, marks as slices.
collapsed: well-formed folded lines; at exit they add up to the bytes the snapshot's segments
  hold in active blocks (PyTorch's own account of what was live when it was written).
The fixture is the repository's (tests/fixtures/torch-2.11): its absence fails.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "snapshot"))  # check_pickle: the pickle checks
import check_pickle  # noqa: E402


def run(*args, expect=0):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"{' '.join(map(str, args))}: exit {p.returncode}, wanted {expect}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cumemtrace", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    fixture = Path(a.fixture)
    torch_pickle = fixture.with_name("snapshot.pickle")
    facts = json.loads(fixture.with_name("facts.json").read_text())  # PyTorch's own counts
    out = Path(a.out)
    # Outputs are never overwritten (convert refuses an existing file without -f): start empty.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    src = json.loads(fixture.read_text())

    pk = out / "fixture.pickle"
    run(a.cumemtrace, "convert", fixture, "--to", "pickle", "-o", pk)
    check_pickle.check_fixture(pk, fixture)

    pf = out / "fixture.perfetto.json"
    run(a.cumemtrace, "convert", fixture, "--to", "perfetto", "-o", pf)
    trace = json.loads(pf.read_text())
    events = trace["traceEvents"]
    kinds = {}
    for e in events:
        assert e["ph"] in ("M", "C", "i", "X"), e
        assert isinstance(e["pid"], int), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], int) and e["ts"] > 10**15, e
        if e["ph"] in ("i", "X"):
            assert isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        kinds.setdefault((e["ph"], e.get("cat", e.get("name"))), 0)
        kinds[(e["ph"], e.get("cat", e.get("name")))] += 1
    actions = [x["action"] for tr in src["device_traces"] for x in tr]
    assert kinds[("i", "alloc")] == facts["last1500_actions"]["alloc"], kinds
    live_samples = kinds[("C", "live")]
    # One sample per change, plus the state before the trace when memory was live then.
    assert 0 < live_samples <= actions.count("alloc") + actions.count("free_completed") + 1, kinds
    starts = sum(1 for m in src.get("external_annotations", []) if m["stage"] == "START")
    assert kinds.get(("X", "mark"), 0) >= 1 if starts else True, kinds
    for e in events:
        if "sf" in e:
            assert e["sf"] in trace["stackFrames"], e
        if e.get("cat") == "alloc":
            # Perfetto shows args only: the stack must be readable there too.
            assert isinstance(e["args"]["stack"], str) and e["args"]["stack"], e
    print(f"ok perfetto: {len(events)} events {sorted(kinds.items())}")

    folded = {}
    for when in ("peak", "exit"):
        f = out / f"fixture.{when}.folded"
        run(a.cumemtrace, "convert", fixture, "--to", "collapsed", "--at", when, "-o", f)
        total = 0
        for line in f.read_text().splitlines():
            m = re.fullmatch(r"(cuda:\d+(?:;[^;]+)+) (\d+)", line)
            assert m, f"malformed folded line: {line!r}"
            total += int(m.group(2))
        folded[when] = total
    held = sum(b.get("requested_size") or b["size"] for s in src["segments"] for b in s["blocks"]
               if b["state"] in ("active_allocated", "active_pending_free"))
    assert folded["exit"] == held, f"folded at exit {folded['exit']} != live blocks {held}"
    assert folded["peak"] >= folded["exit"], folded
    print(f"ok collapsed: peak {folded['peak']} bytes, exit {folded['exit']} bytes")

    # PyTorch's own pickle as input (the whole recording), back out as our pickle.
    rt = out / "from-torch-pickle.pickle"
    run(a.cumemtrace, "convert", torch_pickle, "--to", "pickle", "-o", rt)
    check_pickle.check_fixture(rt, torch_pickle)
    # Every offline command takes the pickle as it is, and `convert --to json` gives the
    # JSON those commands read the same from: report prints the same for both.
    as_json = out / "from-torch-pickle.json"
    run(a.cumemtrace, "convert", torch_pickle, "--to", "json", "-o", as_json)
    assert json.loads(as_json.read_text()) == json.loads(
        subprocess.run([a.cumemtrace, "convert", rt, "--to", "json", "-o", "-"],
                       capture_output=True, text=True, check=True).stdout)
    report_pickle = run(a.cumemtrace, "report", torch_pickle, "--format", "json").stdout
    report_json = run(a.cumemtrace, "report", as_json, "--format", "json").stdout
    assert report_pickle == report_json.replace(str(as_json), str(torch_pickle))
    run(a.cumemtrace, "check", torch_pickle)
    run(a.cumemtrace, "diff", torch_pickle, as_json)
    print("ok: report, check, diff and convert --to json read PyTorch's pickle as it is")

    # Unreadable input: exit 2 and one line saying what.
    p = run(a.cumemtrace, "convert", out / "missing.json", "--to", "pickle", expect=2)
    assert p.stderr.count("\n") == 1 and "missing.json" in p.stderr, p.stderr
    bad = out / "truncated.pickle"
    bad.write_bytes(pk.read_bytes()[:1000])
    p = run(a.cumemtrace, "html", bad, "-o", out / "bad.html", expect=2)
    assert p.stderr.count("\n") == 1 and "truncated" in p.stderr, p.stderr
    print("ok: missing and truncated inputs exit 2 with one line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
