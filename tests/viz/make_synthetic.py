#!/usr/bin/env python3
"""Writes a synthetic cumemtrace snapshot (JSON) of about N trace events, for the browser test
and for measuring the HTML report on large traces.

  make_synthetic.py --events N OUT.json

A training-like loop on cuda:0: each step allocates activations from a few Python sites, frees
them FIFO, with marks around steps; one site, `leaky_cache_grow` (cache.py:42), keeps one block
per 50 steps forever: the leak the report must list at exit. One OOM near the end. Events follow
cumemtrace's pattern (transient blocks all freed at the end): segment_alloc+alloc per allocation, free_requested+free_completed+
segment_free per free, live blocks listed as one-block segments.
"""
import argparse
import json

T0 = 1795312050000000
SITES = [
    ("forward", "model.py", 31, 8 << 20),
    ("attention", "layers.py", 112, 24 << 20),
    ("mlp", "layers.py", 140, 16 << 20),
    ("backward", "autograd.py", 77, 12 << 20),
    ("optimizer_step", "optim.py", 19, 4 << 20),
    ("collate", "data.py", 55, 1 << 20),
    ("embedding", "model.py", 12, 2 << 20),
]
LEAK = ("leaky_cache_grow", "cache.py", 42, 6 << 20)


def frames(site):
    name, filename, line, _ = site
    return [{"filename": filename, "line": line, "name": name},
            {"filename": "train.py", "line": 200, "name": "train_step"},
            {"filename": "train.py", "line": 260, "name": "main"}]


def tool_section(start_us, end_us):
    """cumemtrace's own section, as the collector writes it for a program that exited."""
    return {"schema_version": 1, "tool_version": "0.1.0", "pid": 4242, "ppid": 1,
            "exe": "/usr/bin/python3", "argv": ["python3", "train.py"], "hostname": "synthetic",
            "rank": {}, "start_time_us": start_us, "end_time_us": end_us, "reason": "exit",
            "ended": {"how": "exit", "code": 0, "signal": 0}, "events_total": 0,
            "events_dropped": 0, "trace_entries_dropped": 0, "devices": [], "vmm_handles": [],
            "imported_mappings": [], "host_allocations": [], "anomalies": [], "threads": {},
            "driver_memory": []}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--started-before-us", type=int, default=None,
                    help="add cumemtrace's section: the traced program started this long before "
                         "the first event (the origin of the times every view shows)")
    ap.add_argument("out")
    a = ap.parse_args()
    rendered = {s: json.dumps(frames(s), separators=(",", ":")) for s in SITES + [LEAK]}
    out = []
    live = {}  # addr -> (size, site)
    fifo = []
    t = T0
    addr_next = 0x7F0000000000
    marks = []
    step = 0
    ev = 0

    def alloc(site, size):
        nonlocal addr_next, ev
        addr = addr_next
        addr_next += (size + 0xFFFFF) & ~0xFFFFF
        out.append(f'{{"action":"segment_alloc","addr":{addr},"size":{size},"stream":0,"time_us":{t}}}')
        out.append(f'{{"action":"alloc","addr":{addr},"size":{size},"stream":0,"time_us":{t},'
                   f'"frames":{rendered[site]}}}')
        live[addr] = (size, site)
        ev += 2
        return addr

    def free(addr):
        nonlocal ev
        size, _ = live.pop(addr)
        for action in ("free_requested", "free_completed", "segment_free"):
            out.append(f'{{"action":"{action}","addr":{addr},"size":{size},"stream":0,"time_us":{t}}}')
        ev += 3

    while ev < a.events:
        marks.append({"name": "step", "stage": "START", "device": 0, "time_us": t})
        for i, site in enumerate(SITES):
            size = site[3] + (step % 7) * 4096 * (i + 1)
            fifo.append(alloc(site, size))
            t += 40 + i
        if step % 50 == 0:
            alloc(LEAK, LEAK[3])
        while len(fifo) > 3 * len(SITES):
            free(fifo.pop(0))
            t += 15
        t += 200
        marks.append({"name": "step", "stage": "END", "device": 0, "time_us": t})
        step += 1
    # Training ends: activations go, the leak stays.
    while fifo:
        free(fifo.pop(0))
        t += 15
    out.append(f'{{"action":"oom","device_free":{64 << 20},"size":{80 << 30},"stream":0,'
               f'"time_us":{t},"frames":{rendered[SITES[1]]}}}')
    segments = []
    for addr, (size, site) in sorted(live.items()):
        segments.append({
            "device": 0, "address": addr, "total_size": size, "allocated_size": size,
            "active_size": size, "requested_size": size, "stream": 0, "segment_type": "large",
            "segment_pool_id": [0, 0], "is_expandable": False, "frames": frames(site),
            "blocks": [{"address": addr, "size": size, "requested_size": size,
                        "state": "active_allocated", "frames": frames(site)}]})
    with open(a.out, "w") as f:
        f.write('{"segments":' + json.dumps(segments) + ',\n"device_traces":[[\n')
        f.write(",\n".join(out))
        f.write("]],\n\"allocator_settings\":{},\n\"external_annotations\":" + json.dumps(marks))
        if a.started_before_us is not None:
            f.write(',\n"cumemtrace":' + json.dumps(tool_section(T0 - a.started_before_us, t)))
        f.write("}\n")
    print(f"{a.out}: {len(out)} events, {step} steps, {len(live)} live blocks at the end")


if __name__ == "__main__":
    main()
