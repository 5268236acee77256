"""Checks the snapshots of a 2-rank torchrun job: one per rank, each rank's allocations on its
own device ordinal, NCCL's own allocations included (its cuMem buffers: segment_map entries whose
stack runs through libnccl), and NCCL's retain/release and imported peer buffers understood (no
stray-release anomaly). Usage: validate_ddp.py TRACEDIR."""
import glob
import json
import sys


def nccl(frames):
    return any("nccl" in (f["name"] + f["filename"]).lower() for f in frames)


snaps = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*.json")]
ranks = {}
for s in snaps:
    t = s["cumemtrace"]
    if "RANK" in t["rank"] and t["events_total"]:
        ranks[int(t["rank"]["RANK"])] = s
ok = sorted(ranks) == [0, 1]
details = []
for r, s in sorted(ranks.items()):
    t = s["cumemtrace"]
    devices = {d["device"] for d in t["devices"] if d["allocations"]}
    # A device whose only activity is a VMM handle created and released without ever being mapped
    # (no trace entry, nothing live, at most one 2 MiB granule): on the H200 host rank 1 makes one
    # on device 0 during init_process_group, 0.4 s before NCCL's first buffer. Reported, not
    # counted as the rank's memory.
    probes = {d["device"] for d in t["devices"] if d["device"] != r and d["allocations"]
              and d["allocations"] == d["frees"] and d["live_bytes"] == 0
              and d["peak_bytes"] <= 2 << 20 and not s["device_traces"][d["device"]]}
    devices -= probes
    owned = [(x["action"], x["size"], x.get("frames", [])) for tr in s["device_traces"] for x in tr
             if x["action"] in ("alloc", "segment_map")]
    by_nccl = [o for o in owned if nccl(o[2])]
    vmm = sum(1 for o in by_nccl if o[0] == "segment_map")
    imported = t.get("imported_mappings", [])
    stray = [a for a in t["anomalies"] if a["kind"] == "release_unknown_handle"]
    peak = max(d["peak_bytes"] for d in t["devices"])
    ok = ok and devices == {r} and len(by_nccl) > 0 and not stray
    details.append(f"rank {r}: devices {sorted(devices)}, {len(by_nccl)} NCCL allocations "
                   f"({vmm} cuMem, {sum(o[1] for o in by_nccl) / 2**20:.0f} MiB), "
                   f"{len(imported)} peer mappings imported at exit, {len(stray)} stray releases, "
                   f"peak {peak / 2**20:.0f} MiB"
                   + (f", probe-only on device {sorted(probes)}" if probes else ""))
print(f"| torchrun 2 ranks: one snapshot per rank, right device, NCCL seen | {'PASS' if ok else 'FAIL'} | "
      f"{len(snaps)} snapshots; " + "; ".join(details))
sys.exit(0 if ok else 1)
