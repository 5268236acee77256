#!/usr/bin/env python3
"""Writes a synthetic cumemtrace snapshot (JSON) of about N trace events, for the browser test
and for measuring the HTML report on large traces.

  make_synthetic.py --events N OUT.json
  make_synthetic.py --pytorch-steps N OUT.json

The second form is a PyTorch training run as the collector writes it with the automatic phases:
see pytorch_run().

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


MiB = 1 << 20


def pytorch_run(steps, path, leak_mib=0, idle_us=0, extra_mib=0, rank=None, world_size=None,
                oom_mib=0, modules=False):
    """N steps of a small training loop on PyTorch's caching allocator, with categories and the
    automatic phases (auto:forward / auto:backward / auto:optimizer START/END, an auto:step MARK
    after each step) and a user range "epoch" around them all. Two PyTorch segments: 32 MiB of
    parameters (4 x 8 MiB) and one of 224 MiB that every later tensor reuses (its free part is
    PyTorch's cache); cuBLAS's 8 MiB workspace at driver level. Per step: forward keeps 6 x 8 MiB
    of activations and frees 2 x 4 MiB temporaries; backward makes 4 x 8 MiB gradients and frees
    its 2 x 4 MiB autograd buffers and the activations; the first optimizer step makes 8 x 8 MiB
    of optimizer state; zero_grad(set_to_none) frees the gradients.
    `leak_mib`: forward also keeps LEAK_MiB of activation a step at train.py:79 forever (in the
    pool's last 32 MiB: steps x leak_mib <= 32). `idle_us`: the program idles that long between
    building the model and the first step (imports, data loading: the start-up that squeezes the
    steps on a time axis). `extra_mib`: from step 2's forward on, one more tensor of that many
    MiB (a segment of its own) at train.py:88, held to the end: a rank that holds more than the
    others. `rank`, `world_size`: the launcher's variables (torchrun's), as the preload records
    them. `oom_mib`: after the last step, PyTorch's allocator refuses a request of that many MiB
    at train.py:95."""
    assert steps * leak_mib <= 32, "the leak must fit the pool's free tail"
    t = T0
    out, marks = [], []
    user = [{"filename": "/work/train.py", "line": 40, "name": "train"}]

    def fr(name, line):
        torch = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"
        call = []
        if modules and name == "forward":  # `modules`: the Linear's call names its module
            call = [{"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
                     "line": 1775, "name": "Module._wrapped_call_impl",
                     "module": "blocks.%d" % (line % 2)}]
        return [{"filename": torch, "line": 134, "name": "Linear.forward"}] + call + [
            {"filename": "/work/train.py", "line": line, "name": name}] + user

    def entry(action, addr, size, category, frames=None, source="pytorch"):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
             "category": category}
        if source:
            e["source"] = source
        if frames:
            e["frames"] = frames
        out.append(json.dumps(e, separators=(",", ":")))

    def mark(name, stage):
        marks.append({"name": name, "stage": stage, "device": 0, "time_us": t})

    params, pool, cublas, extra = 0x7F0000000000, 0x7F1000000000, 0x7E0000000000, 0x7D0000000000
    cublas_frames = [{"filename": "/venv/nvidia/lib/libcublasLt.so.13", "line": 0,
                      "name": "cublasLtMatmul"}] + fr("forward", 22)
    mark("epoch", "START")
    entry("segment_alloc", params, 32 * MiB, "unknown", fr("build", 12))
    for i in range(4):
        entry("alloc", params + i * 8 * MiB, 8 * MiB, "parameter", fr("build", 12))
        t += 10
    t += idle_us
    entry("segment_alloc", pool, 224 * MiB, "unknown", fr("forward", 22))
    for step in range(steps):
        t += 100
        mark("auto:forward", "START")
        if step == 0:
            entry("segment_alloc", cublas, 8 * MiB, "library", source=None)
            entry("alloc", cublas, 8 * MiB, "library", cublas_frames, source=None)
        for i in range(6):
            entry("alloc", pool + i * 8 * MiB, 8 * MiB, "activation", fr("forward", 22))
            t += 20
        for i in range(2):
            entry("alloc", pool + 48 * MiB + i * 4 * MiB, 4 * MiB, "temporary", fr("forward", 23))
            t += 5
        for i in range(2):
            entry("free_completed", pool + 48 * MiB + i * 4 * MiB, 4 * MiB, "temporary")
        if extra_mib and step == 1:
            entry("segment_alloc", extra, extra_mib * MiB, "unknown", fr("forward", 88))
            entry("alloc", extra, extra_mib * MiB, "activation", fr("forward", 88))
        if leak_mib:
            entry("alloc", pool + 192 * MiB + step * leak_mib * MiB, leak_mib * MiB, "activation",
                  fr("forward", 79))
        t += 50
        mark("auto:forward", "END")
        mark("auto:backward", "START")
        for i in range(4):
            entry("alloc", pool + 64 * MiB + i * 8 * MiB, 8 * MiB, "gradient", fr("step", 30))
            t += 20
        for i in range(2):
            entry("alloc", pool + 96 * MiB + i * 4 * MiB, 4 * MiB, "autograd", fr("step", 30))
            t += 5
        for i in range(2):
            entry("free_completed", pool + 96 * MiB + i * 4 * MiB, 4 * MiB, "autograd")
        for i in range(6):
            entry("free_completed", pool + i * 8 * MiB, 8 * MiB, "activation")
            t += 5
        t += 50
        mark("auto:backward", "END")
        mark("auto:optimizer", "START")
        if step == 0:
            for i in range(8):
                entry("alloc", pool + 128 * MiB + i * 8 * MiB, 8 * MiB, "optimizer_state",
                      fr("step", 31))
                t += 10
        t += 40
        mark("auto:optimizer", "END")
        mark("auto:step", "MARK")
        for i in range(4):
            entry("free_completed", pool + 64 * MiB + i * 8 * MiB, 8 * MiB, "gradient")
        t += 10
    if oom_mib:
        # PyTorch's allocator refused a request at train.py:95 (the run went on: a caught OOM).
        out.append(json.dumps({"action": "oom", "addr": 0, "size": oom_mib * MiB, "stream": 0,
                               "time_us": t, "device_free": 0, "source": "pytorch",
                               "frames": fr("forward", 95)}, separators=(",", ":")))
        t += 10
    mark("epoch", "END")

    def block(addr, size, state, frames):
        b = {"address": addr, "size": size, "requested_size": size if state != "inactive" else 0,
             "state": state}
        if frames:
            b["frames"] = frames
        return b

    def segment(addr, size, blocks, source="pytorch"):
        g = {"device": 0, "address": addr, "total_size": size,
             "allocated_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
             "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
             "requested_size": sum(b["requested_size"] for b in blocks), "stream": 0,
             "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": False,
             "frames": blocks[0].get("frames", []), "blocks": blocks}
        if source:
            g["source"] = source
        return g

    segments = [
        segment(params, 32 * MiB, [block(params + i * 8 * MiB, 8 * MiB, "active_allocated",
                                         fr("build", 12)) for i in range(4)]),
        segment(pool, 224 * MiB, [block(pool, 128 * MiB, "inactive", None)] +
                [block(pool + 128 * MiB + i * 8 * MiB, 8 * MiB, "active_allocated",
                       fr("step", 31)) for i in range(8)] +
                [block(pool + 192 * MiB + i * leak_mib * MiB, leak_mib * MiB, "active_allocated",
                       fr("forward", 79)) for i in range(steps if leak_mib else 0)] +
                ([block(pool + 192 * MiB + steps * leak_mib * MiB,
                        (32 - steps * leak_mib) * MiB, "inactive", None)]
                 if steps * leak_mib < 32 else [])),
        segment(cublas, 8 * MiB, [block(cublas, 8 * MiB, "active_allocated", cublas_frames)],
                source=None),
    ]
    if extra_mib and steps > 1:
        segments.append(segment(extra, extra_mib * MiB, [block(extra, extra_mib * MiB,
                                                               "active_allocated",
                                                               fr("forward", 88))]))
    tool = tool_section(T0 - 1000000, t)
    if rank is not None:
        tool["rank"] = {"RANK": str(rank), "LOCAL_RANK": str(rank),
                        "WORLD_SIZE": str(world_size or rank + 1)}
        tool["pid"] = 4242 + rank
    tool["pytorch"] = {"version": "2.11.0", "backend": "native", "expandable_segments": False,
                       "capture": "blocks", "why": ""}
    with open(path, "w") as f:
        f.write('{"segments":' + json.dumps(segments) + ',\n"device_traces":[[\n')
        f.write(",\n".join(out))
        f.write("]],\n\"allocator_settings\":{},\n\"external_annotations\":" + json.dumps(marks))
        f.write(',\n"cumemtrace":' + json.dumps(tool) + "}\n")
    print(f"{path}: {len(out)} events, {steps} steps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int)
    ap.add_argument("--pytorch-steps", type=int,
                    help="write a PyTorch run with categories and automatic phases instead")
    ap.add_argument("--leak-mib", type=int, default=0,
                    help="with --pytorch-steps: forward keeps this many MiB a step forever")
    ap.add_argument("--idle-us", type=int, default=0,
                    help="with --pytorch-steps: idle this long before the first step")
    ap.add_argument("--extra-mib", type=int, default=0,
                    help="with --pytorch-steps: one more tensor of this many MiB from step 2 on")
    ap.add_argument("--rank", type=int, default=None, help="with --pytorch-steps: torchrun's RANK")
    ap.add_argument("--world-size", type=int, default=None,
                    help="with --pytorch-steps: torchrun's WORLD_SIZE")
    ap.add_argument("--oom-mib", type=int, default=0,
                    help="with --pytorch-steps: an OOM of a request this large after the steps")
    ap.add_argument("--started-before-us", type=int, default=None,
                    help="add cumemtrace's section: the traced program started this long before "
                         "the first event (the origin of the times every view shows)")
    ap.add_argument("--modules", action="store_true",
                    help="with --pytorch-steps: forward's Linear calls name their module "
                         "(blocks.0 at even lines, blocks.1 at odd ones)")
    ap.add_argument("out")
    a = ap.parse_args()
    if a.pytorch_steps:
        pytorch_run(a.pytorch_steps, a.out, a.leak_mib, a.idle_us, a.extra_mib, a.rank,
                    a.world_size, a.oom_mib, a.modules)
        return
    if a.events is None:
        ap.error("--events or --pytorch-steps is required")
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
