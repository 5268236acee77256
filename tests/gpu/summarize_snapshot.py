"""Prints one line per cumemtrace snapshot: actions, devices, live bytes, top allocation frames."""
import collections
import json
import sys


def main():
    for path in sys.argv[1:]:
        d = json.load(open(path))
        t = d["cumemtrace"]
        acts = collections.Counter(e["action"] for tr in d["device_traces"] for e in tr)
        live = sum(s["total_size"] for s in d["segments"])
        sites = collections.Counter()
        for s in d["segments"]:
            fr = [f"{f['name']}:{f['line']}" for f in s["frames"]
                  if not f["filename"].endswith(("libcudart.so.13", "libcuda.so.1"))][:2]
            sites[" <- ".join(fr) or "?"] += s["total_size"]
        print(f"{path}: ended={t['ended']} events={t['events_total']} dropped={t['events_dropped']} "
              f"devices={[(x['device'], x['peak_bytes'], x['live_bytes']) for x in t['devices']]} "
              f"live={live} vmm_handles={len(t['vmm_handles'])} host={len(t['host_allocations'])} "
              f"anomalies={len(t['anomalies'])} actions={dict(acts)}")
        for site, b in sites.most_common(4):
            print(f"    live {b:>12} at {site[:200]}")


if __name__ == "__main__":
    main()
