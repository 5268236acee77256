"""Real-GPU check of DDP's gradient buckets as communication buffers (issue 54 item 2;
collector/pytorch/categories.h rule 1b), on one GPU: DistributedDataParallel on NCCL, world 1, an
unmarked loop of 4 steps under cumemtrace, default settings and gradient_as_bucket_view=True.
Prints '| what | PASS/FAIL | ours / theirs |' rows; exit 1 on any FAIL or error.

Usage: python3 tests/gpu/validate_ddp_buckets.py [BUILD (default build)] [OUT (default
/tmp/cumemtrace-ddp-buckets)]. About 20 s.

What must agree, at the mark `validate:end` the training child makes after its last step (the
final snapshot's end is after destroy_process_group, when DDP has let go of its buckets):
- both modes: the live tensors' blocks add up to torch.cuda.memory_allocated() then, and none is
  "unknown" or "program";
- default: the live "communication" tensors are exactly the live blocks made at DDP's Reducer
  frames (DistributedDataParallel._ddp_init_helper, ._pre_forward: the buckets made at
  construction and rebuilt at the second forward; on NCCL the construction's set stays alive
  beside the rebuilt one until the process group goes) and at least one flat copy of every
  parameter; the gradients are still the parameters' bytes (their own copies);
- gradient_as_bucket_view=True: the buckets are the gradients (the gradient walk's pointers lie
  in them): the blocks the latest gradient walk points into equal the parameters' bytes and are
  all the "gradient" tensors; "communication" is the construction's bucket set while NCCL
  still holds it (the first step's gradients were views of it; freed in the second step in one
  H100 run, alive at the mark in another), plus at most the Reducer's map of used parameters.
Bytes are PyTorch's blocks (each tensor's request rounded up to 512 B), so a category equals the
tensors' bytes up to 511 B a tensor.
"""
import ctypes
import json
import os
import subprocess
import sys


def train(view, truth_path):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda(),
        device_ids=[0], gradient_as_bucket_view=view)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        x = torch.randn(64, 1024, device="cuda")
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    torch.cuda.synchronize()
    ctypes.PyDLL(None).cumemtrace_mark(b"validate:end")
    params = list(model.parameters())
    with open(truth_path, "w") as f:
        json.dump({"param_bytes": sum(p.numel() * p.element_size() for p in params),
                   "n_params": len(params), "allocated": torch.cuda.memory_allocated()}, f)
    dist.destroy_process_group()


DDP_FRAMES = ("DistributedDataParallel._ddp_init_helper", "DistributedDataParallel._pre_forward")


def live_at_mark(snap):
    """({category: bytes}, bytes of the blocks made at DDP's Reducer frames) of the PyTorch
    tensors alive at the validate:end mark, or (None, None) without that mark. A trace entry's
    size is the request, as in PyTorch's own snapshots; counted here as PyTorch's block, the
    request rounded up to 512 B (what memory_allocated() adds up)."""
    marks = [a["time_us"] for a in snap.get("external_annotations", [])
             if a["name"] == "validate:end"]
    if not marks:
        return None, None
    live = {}
    for e in snap["device_traces"][0]:
        if e["time_us"] > marks[0]:
            break
        if e.get("source") != "pytorch":
            continue
        if e["action"] == "alloc":
            py = [f for f in e.get("frames", []) if f.get("filename", "").endswith(".py")]
            ddp = bool(py) and py[0].get("name") in DDP_FRAMES
            live[e["addr"]] = (e.get("category"), -(-e["size"] // 512) * 512, ddp)
        elif e["action"] in ("free_requested", "free_completed"):
            live.pop(e["addr"], None)
    out, ddp_bytes = {}, 0
    for cat, size, ddp in live.values():
        out[cat] = out.get(cat, 0) + size
        ddp_bytes += size if ddp else 0
    # The blocks holding the latest gradient walk's tensors (made before the mark): the
    # gradients now, whatever an older bucket still alive was labelled.
    walks = [w for w in snap.get("cumemtrace", {}).get("ownership", [])
             if w["role"] == "gradient" and w["time_us"] <= marks[0]]
    held = set()
    if walks:
        for ptr, _ in max(walks, key=lambda w: w["time_us"])["tensors"]:
            held.update(a for a, (_, size, _) in live.items() if a <= ptr < a + size)
    out["latest gradient walk"] = sum(live[a][1] for a in held)
    return out, ddp_bytes


rows, failed = [], []


def row(what, ok, detail):
    rows.append("| %-62s | %s | %s" % (what, "PASS" if ok else "FAIL", detail))
    if not ok:
        failed.append(what)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--train":
        train(sys.argv[2] == "view", sys.argv[3])
        return 0
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    build_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cumemtrace-ddp-buckets"
    ct = os.path.join(build_dir, "bin", "cumemtrace")
    os.makedirs(out, exist_ok=True)
    for mode in ("copy", "view"):
        t_dir = os.path.join(out, "t_" + mode)
        truth_path = os.path.join(out, "truth_%s.json" % mode)
        subprocess.run(["rm", "-rf", t_dir])
        p = subprocess.run([ct, "run", "-q", "-o", t_dir, "--", sys.executable,
                            os.path.abspath(__file__), "--train", mode, truth_path],
                           capture_output=True, text=True)
        if p.returncode != 0:
            row("%s: traced run" % mode, False, p.stderr.strip()[-300:])
            continue
        snaps = [f for f in os.listdir(t_dir) if f.endswith(".json") and ".oom." not in f]
        if len(snaps) != 1:
            row("%s: one snapshot" % mode, False, str(snaps))
            continue
        truth = json.load(open(truth_path))
        live, ddp_bytes = live_at_mark(json.load(open(os.path.join(t_dir, snaps[0]))))
        if live is None:
            row("%s: the validate:end mark in the snapshot" % mode, False, "no such mark")
            continue
        # Blocks (live_at_mark): each of at most n_params buckets or gradients may hold up to
        # 511 B more than its tensor; the used map is one block.
        p_bytes, n = truth["param_bytes"], truth["n_params"]
        slack = 512 * n
        total = sum(b for c, b in live.items() if c != "latest gradient walk")
        row("%s: live blocks at validate:end = memory_allocated()" % mode,
            total == truth["allocated"], "%d / %d" % (total, truth["allocated"]))
        odd = {c: b for c, b in live.items() if c in ("unknown", "program", None)}
        row("%s: nothing unknown or the program's at validate:end" % mode, not odd, str(odd))
        comm, grads = live.get("communication", 0), live.get("gradient", 0)
        if mode == "copy":
            sets = comm / p_bytes if p_bytes else 0
            row("default: communication = blocks made at DDP's Reducer frames",
                comm == ddp_bytes, "%d / %d" % (comm, ddp_bytes))
            row("default: communication >= one copy of the parameters (%.2f sets)" % sets,
                p_bytes <= comm and (comm - p_bytes * round(sets)) <= round(sets) * (slack + 512),
                "%d / %d x %d" % (comm, round(sets), p_bytes))
        else:
            # The construction's set, which the first step's gradients were views of, is the
            # communication still held (by NCCL's work) once the rebuilt bucket holds them.
            stale = ddp_bytes - live["latest gradient walk"]
            row("gradient_as_bucket_view: communication = the construction's set if still held",
                stale <= comm <= stale + 512, "%d / %d (+ at most 512)" % (comm, stale))
        if mode == "copy":
            row("copy: gradients = parameters' bytes", p_bytes <= grads <= p_bytes + slack,
                "%d / %d" % (grads, p_bytes))
            continue
        now = live["latest gradient walk"]
        row("view: the latest gradient walk's blocks (the bucket) = parameters' bytes",
            p_bytes <= now <= p_bytes + slack, "%d / %d" % (now, p_bytes))
        row("view: gradients = the bucket", grads == now, "%d / %d" % (grads, now))
    print("| %-62s | result | ours / theirs" % "check")
    print("\n".join(rows))
    print("%d checks, %d failed" % (len(rows), len(failed)))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
