"""Rows of tests/gpu/validate_ranks.sh from `cumemtrace report DIR --format json`'s rank table and
each rank's PyTorch counters (ddp_skew.py's torch.rankN.json). Usage: validate_ranks.py OUT RC."""
import glob
import json
import sys

out, rc = sys.argv[1], int(sys.argv[2])
GiB = 1 << 30


failed = 0


def row(name, ok, detail=""):
    global failed
    failed += not ok
    print(f"| {name:<62} | {'PASS' if ok else 'FAIL'} | {detail}")


row("report DIR exits 0", rc == 0, f"exit {rc}")
try:
    table = json.load(open(f"{out}/report.json"))["ranks"]
except Exception as e:  # no table: every row below fails
    row("report DIR --format json has a rank table", False, repr(e))
    sys.exit(1)
# Each rank's own device is its slot 0 (a rank may have touched another device too).
rows = {r["rank"]: r for r in table["rows"] if r["slot"] == 0}
row("one row per rank (0 and 1)", sorted(k for k in rows if k is not None) == [0, 1],
    str(sorted(rows, key=str)))
r0, r1 = rows.get(0, {}), rows.get(1, {})
row("rank 1 flagged, rank 0 not", bool(r1.get("flagged")) and not r0.get("flagged"),
    f"rank 1 {r1.get('flagged')}, rank 0 {r0.get('flagged')}")
lines = r1.get("lines", [])
top = lines[0] if lines else {}
row("the difference's first line is the planted one, +1 GiB", "ddp_skew.py:37" in top.get("site", "")
    and top.get("change_bytes") == GiB, f"{top.get('site')} {top.get('change_bytes')}")
div = r1.get("divergence") or {}
# The 1 GiB is made after step 6's optimizer step, so the first step end that holds it is 7's.
row("rank 1 first diverges at step 7", div.get("step") == 7, json.dumps(div))
for rank, r in sorted((k, v) for k, v in rows.items() if k is not None):
    try:
        torch = json.load(open(f"{out}/torch/torch.rank{rank}.json"))
    except OSError as e:
        row(f"rank {rank}: PyTorch's counters", False, repr(e))
        continue
    v = r["values"]
    res = v.get("reserved peak")
    row(f"rank {rank}: reserved peak = max_memory_reserved()",
        res == torch["max_memory_reserved"], f"{res} vs {torch['max_memory_reserved']}")
    alloc = v.get("allocated peak")
    diff = (alloc or 0) - torch["max_memory_allocated"]
    # The trace records requested sizes; memory_allocated counts blocks rounded to 512 B.
    row(f"rank {rank}: allocated peak vs max_memory_allocated() (within 0.1%)",
        alloc is not None and abs(diff) <= torch["max_memory_allocated"] / 1000,
        f"{alloc} vs {torch['max_memory_allocated']} ({diff:+d} B)")
    row(f"rank {rank}: on its own device (cuda:{torch['local_device']})",
        r["device"] == torch["local_device"], f"device {r['device']}")
sys.exit(1 if failed else 0)
