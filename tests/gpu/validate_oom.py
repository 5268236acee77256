"""GPU proof of the OOM verdict (issue 43, item 1), run where torch 2.11 and a GPU are present:
    python3 tests/gpu/validate_oom.py BUILD_DIR [OUT_DIR]
Three real OOMs, each run under `cumemtrace run` (a second or two each):
  frag     a true fragmentation OOM under set_per_process_memory_fraction (1 GiB): 150 tensors of
           6 MiB (three to each 20 MiB segment, 1000 MiB reserved), every other one freed (a
           checkerboard: 550 MiB free in the cache, in pieces of at most 8 MiB, every segment
           still holding a live tensor), then one 64 MiB request, whose new segment the budget
           refuses;
  exhaust  an exhaustion OOM under the same fraction: ten 100 MiB tensors, the last freed and
           half reused (50 MiB free in the cache), then 200 MiB;
  full     a real device-full OOM, no fraction: 2 GiB tensors until the device refuses one.
Each child catches torch.OutOfMemoryError and writes PyTorch's own message and
torch.cuda.memory_snapshot()'s numbers (reserved, allocated, the largest free block) with the
request to JSON. The validator compares `cumemtrace report --format json`'s `ooms[]` on the OOM
snapshot with them and prints | what | PASS/FAIL | ours / theirs |; exit 1 on any FAIL.
The same file is the child: `validate_oom.py --child frag|exhaust|full OUT_JSON`."""
import json
import os
import re
import subprocess
import sys

MiB = 1 << 20
GiB = 1 << 30
BUDGET = 1 * GiB  # the memory fraction's budget, as bytes of the device
EXPECTED = {"frag": "fragmentation", "exhaust": "exhaustion", "full": "exhaustion"}


def child(kind, out_path):
    import torch

    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    if kind != "full":
        torch.cuda.set_per_process_memory_fraction(BUDGET / total)
    keep = []
    request = 0
    try:
        if kind == "frag":
            blocks = [torch.empty(6 * MiB, dtype=torch.uint8, device="cuda") for _ in range(150)]
            keep = blocks[0::2]  # the checkerboard: every other block freed
            del blocks
            request = 64 * MiB
            torch.empty(request, dtype=torch.uint8, device="cuda")
        elif kind == "exhaust":
            keep = [torch.empty(100 * MiB, dtype=torch.uint8, device="cuda") for _ in range(10)]
            keep.pop()  # its 100 MiB segment back in the cache...
            keep.append(torch.empty(50 * MiB, dtype=torch.uint8, device="cuda"))  # ...half reused
            request = 200 * MiB
            torch.empty(request, dtype=torch.uint8, device="cuda")
        else:
            request = 2 * GiB
            while True:
                keep.append(torch.empty(request, dtype=torch.uint8, device="cuda"))
        raise SystemExit("no OOM")
    except torch.OutOfMemoryError as e:
        message = str(e)
    # The allocator's state at the OOM, before anything is freed.
    segs = torch.cuda.memory_snapshot()
    largest = max((b["size"] for s in segs for b in s["blocks"] if b["state"] == "inactive"),
                  default=0)
    free, capacity = torch.cuda.mem_get_info()
    with open(out_path, "w") as f:
        json.dump({"kind": kind, "message": message, "request": request,
                   "reserved": torch.cuda.memory_reserved(),
                   "allocated": torch.cuda.memory_allocated(),
                   "segments_reserved": sum(s["total_size"] for s in segs),
                   "largest_free": largest, "total": capacity, "free_after": free,
                   "expandable": "expandable_segments:True" in os.environ.get(
                       "PYTORCH_CUDA_ALLOC_CONF", "")}, f)
    del keep


def format_size(n):
    """c10/cuda/CUDACachingAllocator.cpp format_size, as PyTorch's OOM message prints sizes."""
    if n <= 1024:
        return "%d bytes" % n
    if n <= 1048576:
        return "%.2f KiB" % (n / 1024.0)
    if n <= 1073741824:
        return "%.2f MiB" % (n / 1048576.0)
    return "%.2f GiB" % (n / 1073741824.0)


def parse_message(m):
    """Sizes out of PyTorch's OOM message, as the strings it printed."""
    out = {}
    for key, pat in (("tried", r"Tried to allocate ([\d.]+ \w+)"),
                     ("free", r"of which ([\d.]+ \w+) is free"),
                     ("allocated", r"Of the allocated memory ([\d.]+ \w+) is allocated by PyTorch"),
                     ("unallocated", r"and ([\d.]+ \w+) is reserved by PyTorch but unallocated")):
        g = re.search(pat, m)
        out[key] = g.group(1) if g else None
    return out


def main():
    build = os.path.abspath(sys.argv[1])
    out = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "oom_validation")
    os.makedirs(out, exist_ok=True)
    ct = os.path.join(build, "bin", "cumemtrace")
    me = os.path.abspath(__file__)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    rows = []

    def check(what, ok, ours, theirs):
        rows.append((what, "PASS" if ok else "FAIL", "%s / %s" % (ours, theirs)))

    for kind in ("frag", "exhaust", "full"):
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        truth_path = os.path.join(out, kind + ".truth.json")
        p = subprocess.run([ct, "run", "-q", "-o", d, "--", sys.executable, me, "--child", kind,
                            truth_path], env=env, capture_output=True, text=True, timeout=300)
        ooms = sorted(f for f in os.listdir(d) if f.endswith(".oom.json"))
        lines = [l for l in p.stderr.splitlines() if "out of memory on" in l]
        check(kind + ": run exits 0 (the program caught its OOM)", p.returncode == 0,
              p.returncode, 0)
        if p.returncode != 0 or not ooms or not os.path.exists(truth_path):
            rows.append((kind + ": OOM snapshot and PyTorch's numbers", "FAIL",
                         "%d OOM files; stderr %s" % (len(ooms), p.stderr[-300:])))
            continue
        t = json.load(open(truth_path))
        with open(os.path.join(out, kind + ".message.txt"), "w") as f:
            f.write(t["message"])
        r = subprocess.run([ct, "report", "--format", "json", os.path.join(d, ooms[0])],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            rows.append((kind + ": report --format json", "FAIL", r.stderr.strip()[-300:]))
            continue
        with open(os.path.join(out, kind + ".report.json"), "w") as f:
            f.write(r.stdout)
        text = subprocess.run([ct, "report", os.path.join(d, ooms[0])], capture_output=True,
                              text=True, timeout=120).stdout
        with open(os.path.join(out, kind + ".report.txt"), "w") as f:
            f.write(text)
        got = json.loads(r.stdout)["ooms"]
        check(kind + ": one OOM in the OOM snapshot", len(got) == 1, len(got), 1)
        check(kind + ": one 'out of memory' line on stderr", len(lines) == 1, len(lines), 1)
        if not got:
            continue
        o = got[0]
        msg = parse_message(t["message"])
        check(kind + ": verdict", o["verdict"] == EXPECTED[kind], o["verdict"], EXPECTED[kind])
        check(kind + ": source", o["source"] == "pytorch", o["source"], "pytorch")
        check(kind + ": request = the script's", o["requested_bytes"] == t["request"],
              o["requested_bytes"], t["request"])
        check(kind + ": request as PyTorch's message prints it",
              format_size(o["requested_bytes"]) == msg["tried"],
              format_size(o["requested_bytes"]), msg["tried"])
        check(kind + ": reserved = memory_reserved()", o["reserved_bytes"] == t["reserved"],
              o["reserved_bytes"], t["reserved"])
        check(kind + ": allocated = memory_allocated()", o["allocated_bytes"] == t["allocated"],
              o["allocated_bytes"], t["allocated"])
        check(kind + ": allocated as PyTorch's message prints it",
              format_size(o["allocated_bytes"]) == msg["allocated"],
              format_size(o["allocated_bytes"]), msg["allocated"])
        check(kind + ": cached free = reserved - allocated (message: 'reserved but unallocated')",
              format_size(o["cached_free_bytes"]) == msg["unallocated"]
              and o["cached_free_bytes"] == t["reserved"] - t["allocated"],
              o["cached_free_bytes"], "%d (%s)" % (t["reserved"] - t["allocated"],
                                                   msg["unallocated"]))
        check(kind + ": largest free block = memory_snapshot()'s largest inactive block",
              o["largest_free_bytes"] == t["largest_free"], o["largest_free_bytes"],
              t["largest_free"])
        check(kind + ": device free as PyTorch's message prints it",
              format_size(o["device_free_bytes"]) == msg["free"],
              format_size(o["device_free_bytes"]), msg["free"])
        if kind == "full":
            # Held on the device + its free bytes: the device, less what other processes hold.
            check(kind + ": budget within the device's capacity, at least reserved + free",
                  t["reserved"] + o["device_free_bytes"] <= o["budget_bytes"] <= t["total"],
                  o["budget_bytes"], "%d .. %d" % (t["reserved"] + o["device_free_bytes"],
                                                   t["total"]))
            check(kind + ": no budget below the device", not o["budget_below_device"],
                  o["budget_below_device"], False)
        else:
            # Under a fraction the budget is what the fraction allowed, as PyTorch computes it
            # (the fraction is recorded, issue 55 item 3): int(fraction * total).
            allowed = int(BUDGET / t["total"] * t["total"])
            check(kind + ": a budget below the device (the fraction)", o["budget_below_device"],
                  o["budget_below_device"], True)
            check(kind + ": budget = the fraction's allowed bytes",
                  o["budget_bytes"] == allowed, o["budget_bytes"], allowed)
        if kind == "frag":
            advice = " ".join(o["advice"])
            check(kind + ": advice names expandable segments (off in this run)",
                  "expandable_segments:True" in advice, "yes" if "expandable_segments:True" in
                  advice else "no", "yes")
            w = o.get("whatif")
            check(kind + ": the replay under expandable_segments:True answers",
                  w is not None and w["alloc_conf"] == "expandable_segments:True",
                  json.dumps(w), "an answer")
        if EXPECTED[kind] == "exhaustion":
            check(kind + ": shortfall = request - cached free - headroom under the budget",
                  o["shortfall_bytes"] == t["request"] - (t["reserved"] - t["allocated"])
                  - (int(BUDGET / t["total"] * t["total"]) - t["reserved"])
                  if kind != "full" else
                  o["shortfall_bytes"] == t["request"] - (t["reserved"] - t["allocated"])
                  - o["device_free_bytes"],
                  o["shortfall_bytes"], "request - free")
            check(kind + ": who holds it: by line, adding up to allocated",
                  sum(h["bytes"] for h in o["held_by_site"]) == t["allocated"]
                  or len(o["held_by_site"]) == 10,
                  sum(h["bytes"] for h in o["held_by_site"]), t["allocated"])

    print("| %-78s | %-4s | %s" % ("what", "", "ours / theirs"))
    for what, verdict, detail in rows:
        print("| %-78s | %s | %s" % (what, verdict, detail))
    return 1 if any(v == "FAIL" for _, v, _ in rows) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
