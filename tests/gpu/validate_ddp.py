"""Checks the snapshots of a 2-rank torchrun job: one per rank, each rank's allocations on its
own device ordinal, NCCL's own allocations included. Usage: validate_ddp.py TRACEDIR."""
import glob
import json
import sys

snaps = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*.json")]
ranks = {}
for s in snaps:
    t = s["cumemtrace"]
    if "RANK" in t["rank"] and t["events_total"]:
        ranks[int(t["rank"]["RANK"])] = s
ok = sorted(ranks) == [0, 1]
details = []
for r, s in sorted(ranks.items()):
    devices = {d["device"] for d in s["cumemtrace"]["devices"] if d["allocations"]}
    owned = [x.get("frames", []) for tr in s["device_traces"] for x in tr if x["action"] == "alloc"]
    owned += [h["frames"] for h in s["cumemtrace"]["vmm_handles"]] + [g["frames"] for g in s["segments"]]
    nccl = sum(1 for fr in owned if any("nccl" in (f["name"] + f["filename"]).lower() for f in fr))
    peak = max(d["peak_bytes"] for d in s["cumemtrace"]["devices"])
    ok = ok and devices == {r} and nccl > 0
    details.append(f"rank {r}: devices {sorted(devices)}, {nccl} NCCL allocations, peak {peak / 2**20:.0f} MiB")
print(f"| torchrun 2 ranks: one snapshot per rank, right device, NCCL seen | {'PASS' if ok else 'FAIL'} | "
      f"{len(snaps)} snapshots; " + "; ".join(details))
sys.exit(0 if ok else 1)
