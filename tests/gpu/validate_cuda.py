"""Checks cumemtrace's snapshots of the nvcc/driver-API programs against their known allocations
and against compute-sanitizer's leak report. Prints one table row per check; exit 1 on a FAIL.
Usage: validate_cuda.py OUTDIR (with traces/<prog>/*.json and sanitizer/<prog>.txt)."""
import glob
import json
import re
import sys

MiB = 1 << 20
out = sys.argv[1]
rows = []


def row(name, ok, detail):
    rows.append((name, "PASS" if ok else "FAIL", detail))


def snap(prog):
    files = glob.glob(f"{out}/traces/{prog}/*.json")
    return json.load(open(files[0])) if len(files) == 1 else None


def live(s):
    return sorted(seg["total_size"] for seg in s["segments"])


def sites(s):
    names = set()
    for seg in s["segments"]:
        for f in seg["frames"]:
            if not f["name"].startswith(("libcudart", "cuda", "cu")) and "+0x" not in f["name"]:
                names.add(f["name"].split("(")[0])
                break
    return names


def sanitizer_leaks(prog):
    text = open(f"{out}/sanitizer/{prog}.txt").read()
    m = re.search(r"LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


for prog in ("ap_static", "ap_shared"):
    s = snap(prog)
    if s is None:
        row(prog, False, "no snapshot")
        continue
    acts = [e["action"] for e in s["device_traces"][0]]
    ok = (live(s) == [2 * MiB, 4 * MiB] and acts.count("alloc") == 5 and acts.count("segment_free") == 3
          and {"load_weights", "make_workspace"} <= sites(s) and s["cumemtrace"]["events_dropped"] == 0)
    row(f"{prog}: counts, bytes, leak sites", ok,
        f"live={live(s)} allocs={acts.count('alloc')} frees={acts.count('segment_free')} sites={sorted(sites(s))}")
    sb, sn = sanitizer_leaks(prog)
    ours = sum(live(s))
    row(f"{prog}: agrees with compute-sanitizer", (sb, sn) == (ours, len(live(s))),
        f"compute-sanitizer {sb} B in {sn}; cumemtrace {ours} B in {len(live(s))}")

s = snap("driver_api")
if s is None:
    row("driver_api", False, "no snapshot")
else:
    t = s["cumemtrace"]
    gran = t["vmm_handles"][0]["size"] if t["vmm_handles"] else 0
    acts = [e["action"] for e in s["device_traces"][0]]
    mapped = [g for g in s["segments"] if g["is_expandable"]]
    plain = sorted(g["total_size"] for g in s["segments"] if not g["is_expandable"])
    ok = (plain == [MiB, 2 * MiB] and len(mapped) == 1 and len(t["vmm_handles"]) == 1
          and acts.count("segment_map") == 2 and acts.count("segment_unmap") == 1
          and [h["size"] for h in t["host_allocations"]] == [64 << 10]
          and {"leak_plain", "leak_async"} <= sites(s))
    row("driver_api (-lcuda): alloc/async/managed/VMM/pinned exact", ok,
        f"plain={plain} mapped={len(mapped)} handles={len(t['vmm_handles'])}x{gran} "
        f"maps={acts.count('segment_map')}/{acts.count('segment_unmap')} "
        f"host={[h['size'] for h in t['host_allocations']]} sites={sorted(sites(s))}")
    sb, sn = sanitizer_leaks("driver_api")
    row("driver_api: leak verdict agrees with compute-sanitizer", (sb > 0) == (len(plain) > 0),
        f"compute-sanitizer {sb} B in {sn}; cumemtrace {sum(plain)} B in {len(plain)} allocations "
        f"+ {gran} B VMM + 64 KiB pinned")

for name, verdict, detail in rows:
    print(f"| {name:58} | {verdict} | {detail}")
sys.exit(0 if all(v == "PASS" for _, v, _ in rows) else 1)
