"""GPU proof of the PyTorch block capture (issue 15), run where torch 2.11 and a GPU are present:
    python3 tests/gpu/validate_torch_blocks.py BUILD_DIR [OUT_DIR]
For the default allocator and expandable_segments:True it runs a small training script under
`cumemtrace run` with PyTorch's own _record_memory_history on in the same process, dumps PyTorch's
snapshot, and compares one to one: PyTorch's trace entries vs cumemtrace's pytorch-sourced entries
(action, address, size, in order) and the final segments and blocks (address, size, state). Also a
SIGKILL run (entries kept up to the kill) and a set_per_process_memory_fraction OOM (the oom.json
names the Python line of the failing request), and backend:cudaMallocAsync: at a sentinel
allocation PyTorch's own memory_reserved()/memory_allocated() equal cumemtrace's pool layers
(reserved = the pool sample at or before it, allocated = live async_pool allocations), and the
installed torch's TraceEntry header passes the attach-time layout check. Prints a verdict table;
exit 1 on any FAIL.
The same file is the traced child: `validate_torch_blocks.py --child MODE TORCH_PICKLE`."""
import glob
import json
import os
import pickle
import signal
import subprocess
import sys

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom")


SENTINEL_BYTES = 123_456_512  # the async child's last allocation, a size nothing else asks for


def async_child(stats_path):
    """backend:cudaMallocAsync: train, wait past the pool sampler's 10 ms interval, allocate the
    sentinel (its pool sample is taken then), write PyTorch's own figures, exit normally."""
    import time

    import torch

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.Adam(model.parameters())
    for step in range(20):
        x = torch.randn(256 + 32 * (step % 4), 1024, device="cuda")
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    time.sleep(0.05)
    sentinel = torch.empty(SENTINEL_BYTES, dtype=torch.uint8, device="cuda")
    stats = {"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated(),
             "backend": torch.cuda.memory.get_allocator_backend()}
    with open(stats_path, "w") as f:
        json.dump(stats, f)
    del sentinel
    sys.exit(0)


def pool_layers_at_sentinel(snap):
    """(reserved, allocated) cumemtrace's pool layers give right after the sentinel allocation,
    or None when it is not in the trace."""
    tr = snap["device_traces"][0]
    at = next((i for i, e in enumerate(tr) if e["action"] == "alloc" and e.get("async_pool")
               and e["size"] == SENTINEL_BYTES), None)
    if at is None:
        return None
    live = {}
    for e in tr[:at + 1]:
        if e.get("source") == "pytorch":
            continue
        if e["action"] == "segment_alloc" and e.get("async_pool"):
            live[e["addr"]] = e["size"]
        elif e["action"] == "segment_free":
            live.pop(e["addr"], None)
    latest = {}
    for m in sorted(snap["cumemtrace"].get("pool_memory", []), key=lambda m: m["time_us"]):
        if m["device"] == 0 and m["time_us"] <= tr[at]["time_us"]:
            latest[m["pool"]] = m["reserved_bytes"]
    allocated = sum(live.values())
    return max(sum(latest.values()), allocated), allocated


def child(mode, pickle_path):
    import torch

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.Adam(model.parameters())
    steps = 3 if mode == "kill" else 20
    for step in range(steps):
        x = torch.randn(256 + 32 * (step % 4), 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if mode == "oom":
        torch.cuda.set_per_process_memory_fraction(
            (torch.cuda.memory_reserved() + (64 << 20)) / torch.cuda.get_device_properties(0).total_memory)
        try:
            big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # OOM-LINE
            del big
        except torch.cuda.OutOfMemoryError:
            pass
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    with open(pickle_path, "wb") as f:
        pickle.dump(snap, f)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)  # no interpreter teardown: the allocator's state at exit is the one dumped


def oom_line():
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if "# OOM-LINE" in line and "next(" not in line)


def theirs_entries(snap):
    return [(e["action"], e.get("addr", 0) if e["action"] != "oom" else 0, e["size"])
            for e in snap["device_traces"][0] if e["action"] in ACTIONS]


def ours_entries(snap):
    return [(e["action"], e.get("addr", 0) if e["action"] != "oom" else 0, e["size"])
            for e in snap["device_traces"][0] if e.get("source") == "pytorch"]


def layout(segments):
    return sorted((s["address"], s["total_size"], s["segment_type"], bool(s["is_expandable"]),
                   tuple((b["address"], b["size"], b["state"]) for b in s["blocks"]))
                  for s in segments if s.get("device", 0) == 0)


def layout_diff(ours, theirs, limit=40):
    """Lines naming every segment and block where the two layouts differ (at most `limit`): a
    segment only one side has, else its blocks as (offset, size, state) only one side has."""
    a = {s[0]: s for s in ours}
    b = {s[0]: s for s in theirs}
    lines = []
    for addr in sorted(set(a) | set(b)):
        if addr not in b:
            lines.append("  segment 0x%x: only ours (%d B, %s)" % (addr, a[addr][1], a[addr][2]))
            continue
        if addr not in a:
            lines.append("  segment 0x%x: only PyTorch's (%d B, %s)" % (addr, b[addr][1], b[addr][2]))
            continue
        if a[addr] == b[addr]:
            continue
        sa, sb = a[addr], b[addr]
        lines.append("  segment 0x%x: ours %d B %s expandable=%s, PyTorch's %d B %s expandable=%s" % (
            addr, sa[1], sa[2], sa[3], sb[1], sb[2], sb[3]))
        blocks_a = set((blk[0] - addr, blk[1], blk[2]) for blk in sa[4])
        blocks_b = set((blk[0] - addr, blk[1], blk[2]) for blk in sb[4])
        for off, size, state in sorted(blocks_a | blocks_b):
            if (off, size, state) in blocks_a and (off, size, state) in blocks_b:
                continue
            side = "ours     " if (off, size, state) in blocks_a else "PyTorch's"
            lines.append("    %s +0x%x %d B %s" % (side, off, size, state))
    if len(lines) > limit:
        lines = lines[:limit] + ["  ... %d more lines" % (len(lines) - limit)]
    return lines


def run(build, out, name, mode, env_extra):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    pkl = os.path.join(d, "torch.pickle")
    env = dict(os.environ, **env_extra)
    p = subprocess.run([os.path.join(build, "bin", "cumemtrace"), "run", "-o", d, "--",
                        sys.executable, os.path.abspath(__file__), "--child", mode, pkl],
                       env=env, capture_output=True, text=True, timeout=600)
    files = {os.path.basename(f): json.load(open(f)) for f in glob.glob(os.path.join(d, "*.json"))}
    theirs = pickle.load(open(pkl, "rb")) if os.path.exists(pkl) else None
    return p, files, theirs


def main():
    build = os.path.abspath(sys.argv[1])
    out = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "torch_blocks_validation")
    rows = []
    diffs = []

    def verdict(name, ok, detail):
        rows.append((name, "PASS" if ok else "FAIL", detail))

    for name, conf in (("default", ""), ("expandable", "expandable_segments:True")):
        p, files, theirs = run(build, out, name, "train", {"PYTORCH_CUDA_ALLOC_CONF": conf})
        finals = [s for n, s in files.items() if not n.endswith(".oom.json")]
        if p.returncode != 0 or len(finals) != 1 or theirs is None:
            verdict(name, False, "run failed (rc %d): %s" % (p.returncode, p.stderr[-400:]))
            continue
        ours = finals[0]
        info = ours["cumemtrace"].get("pytorch", {})
        verdict(name + ": capture", info.get("capture") == "blocks", json.dumps(info))
        a, b = ours_entries(ours), theirs_entries(theirs)
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        verdict(name + ": trace entries", a == b,
                "%d ours vs %d PyTorch's%s" % (len(a), len(b),
                                              "" if first is None else ", first difference at %d: %s vs %s" % (first, a[first], b[first])))
        la = layout([s for s in ours["segments"] if s.get("source") == "pytorch"])
        lb = layout(theirs["segments"])
        verdict(name + ": final segments and blocks", la == lb,
                "%d segments, %d blocks ours; %d, %d PyTorch's" % (
                    len(la), sum(len(s[4]) for s in la), len(lb), sum(len(s[4]) for s in lb)))
        if la != lb:
            diffs.append((name + ": final segments and blocks (ours vs PyTorch's)",
                          layout_diff(la, lb)))
        reserved = sum(s["total_size"] for s in ours["segments"] if s.get("source") == "pytorch")
        theirs_reserved = sum(s["total_size"] for s in theirs["segments"])
        verdict(name + ": reserved", reserved == theirs_reserved, "%d B vs %d B" % (reserved, theirs_reserved))

    # The attach-time TraceEntry check on the installed wheel's own header.
    try:
        sys.path.insert(0, os.path.join(build, "lib", "cumemtrace", "python"))
        import cumemtrace_torch
        import torch

        inc = os.path.join(os.path.dirname(torch.__file__), "include")
        # The row the attach picks for the installed torch (preload/hooks/torch_layouts.h).
        row_no = cumemtrace_torch.layout_for(torch.__version__)
        cumemtrace_torch.check_trace_entry_layout(inc, row_no)
        rel = cumemtrace_torch.cumemtrace_torch_layouts.LAYOUTS[row_no - 1]["header"]
        found = cumemtrace_torch.trace_entry_declaration(open(os.path.join(inc, rel)).read())
        verdict("TraceEntry header", bool(found), "torch %s, row %d, %s: %s" % (
            torch.__version__, row_no, rel, ", ".join(" ".join(m) for m in found[0])))
    except Exception as e:  # the verdict says what failed
        verdict("TraceEntry header", False, str(e))

    d = os.path.join(out, "async")
    os.makedirs(d, exist_ok=True)
    stats_path = os.path.join(d, "torch_stats.json")
    p = subprocess.run([os.path.join(build, "bin", "cumemtrace"), "run", "-o", d, "--",
                        sys.executable, os.path.abspath(__file__), "--async-child", stats_path],
                       env=dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync"),
                       capture_output=True, text=True, timeout=600)
    snaps = [json.load(open(f)) for f in glob.glob(os.path.join(d, "*.json"))
             if not f.endswith("torch_stats.json") and not f.endswith(".oom.json")]
    ok, detail = False, "rc %d, %d snapshots" % (p.returncode, len(snaps))
    if p.returncode == 0 and len(snaps) == 1 and os.path.exists(stats_path):
        theirs_stats = json.load(open(stats_path))
        ours = pool_layers_at_sentinel(snaps[0])
        ok = ours == (theirs_stats["reserved"], theirs_stats["allocated"])
        detail = "at the sentinel: reserved %s = allocated %s ours; reserved %d, allocated %d " \
                 "PyTorch's (%d pool samples)" % (
                     ours[0] if ours else "?", ours[1] if ours else "?", theirs_stats["reserved"],
                     theirs_stats["allocated"], len(snaps[0]["cumemtrace"].get("pool_memory", [])))
        line = next((ln for ln in p.stderr.splitlines() if "device 0 at exit: reserved" in ln), "")
        ok = ok and bool(line)
        detail += "; summary %s" % ("has the exit layers" if line else "lacks the exit layers")
    verdict("cudaMallocAsync pool layers", ok, detail)

    p, files, theirs = run(build, out, "kill", "kill", {"PYTORCH_CUDA_ALLOC_CONF": ""})
    snaps = list(files.values())
    ok = p.returncode == 128 + 9 and len(snaps) == 1 and theirs is not None
    detail = "rc %d" % p.returncode
    if ok:
        a, b = ours_entries(snaps[0]), theirs_entries(theirs)
        ok = a == b and snaps[0]["cumemtrace"]["ended"]["how"] == "signal"
        detail += ", %d entries ours vs %d PyTorch's at the kill" % (len(a), len(b))
    verdict("SIGKILL", ok, detail)

    p, files, theirs = run(build, out, "oom", "oom", {"PYTORCH_CUDA_ALLOC_CONF": ""})
    ooms = [s for n, s in files.items() if n.endswith(".oom.json")]
    ok, detail = False, "rc %d, %d oom files" % (p.returncode, len(ooms))
    if ooms:
        ent = [e for e in ooms[-1]["device_traces"][0] if e["action"] == "oom" and e.get("source") == "pytorch"]
        if ent:
            frames = ent[-1].get("frames", [])
            ok = any(f["filename"].endswith("validate_torch_blocks.py") and f["line"] == oom_line()
                     for f in frames) and ent[-1]["size"] == 1 << 30
            detail += ", oom size %d, Python line %d %s" % (ent[-1]["size"], oom_line(),
                                                            "named" if ok else "missing")
    verdict("fraction OOM", ok, detail)

    width = max(len(r[0]) for r in rows)
    for name, v, detail in rows:
        print("| %-*s | %s | %s" % (width, name, v, detail))
    for title, lines in diffs:
        print("\n" + title)
        print("\n".join(lines))
    sys.exit(0 if all(r[1] == "PASS" for r in rows) else 1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--async-child":
        async_child(sys.argv[2])
    else:
        main()
