"""Real-GPU check of DDP's gradient buckets as communication buffers (issue 54 item 2;
collector/pytorch/categories.h rule 1b), on one GPU: DistributedDataParallel on NCCL, world 1, an
unmarked loop of 4 steps under cumemtrace, default settings and gradient_as_bucket_view=True.
Prints '| what | PASS/FAIL | ours / theirs |' rows; exit 1 on any FAIL or error.

Usage: python3 tests/gpu/validate_ddp_buckets.py [BUILD (default build)] [OUT (default
/tmp/cumemtrace-ddp-buckets)]. About 20 s.

What must agree, at the end of the trace (the tensors alive then, by their category):
- default: the live "communication" tensors' bytes equal the parameters' bytes (one flat bucket
  copy of every gradient), plus at most the Reducer's map of used parameters (one block); the
  gradients are still the parameters' bytes (their own copies);
- gradient_as_bucket_view=True: the buckets are the gradients (the gradient walk's pointers lie
  in them): no "communication" bytes beyond that map, and the "gradient" tensors' bytes equal the
  parameters' bytes.
Bytes are PyTorch's blocks (each tensor's request rounded up to 512 B): equal up to 511 B a
tensor.
"""
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
    params = list(model.parameters())
    with open(truth_path, "w") as f:
        json.dump({"param_bytes": sum(p.numel() * p.element_size() for p in params),
                   "n_params": len(params)}, f)
    dist.destroy_process_group()


def live_by_category(snap):
    live = {}
    for e in snap["device_traces"][0]:
        if e.get("source") != "pytorch":
            continue
        if e["action"] == "alloc":
            live[e["addr"]] = (e.get("category"), e["size"])
        elif e["action"] in ("free_requested", "free_completed"):
            live.pop(e["addr"], None)
    out = {}
    for cat, size in live.values():
        out[cat] = out.get(cat, 0) + size
    return out


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
        live = live_by_category(json.load(open(os.path.join(t_dir, snaps[0]))))
        # A trace entry's size is PyTorch's block (the request rounded up to 512 B): each of at
        # most n_params buckets or gradients may hold up to 511 B more; the used map one block.
        p_bytes, n = truth["param_bytes"], truth["n_params"]
        slack = 512 * n
        comm, grads = live.get("communication", 0), live.get("gradient", 0)
        if mode == "copy":
            row("default: communication = parameters' bytes (+ used map)",
                p_bytes <= comm <= p_bytes + slack + 512, "%d / %d" % (comm, p_bytes))
        else:
            row("gradient_as_bucket_view: no communication beyond the used map",
                comm <= 512, "%d / at most 512" % comm)
        row("%s: gradients = parameters' bytes" % mode, p_bytes <= grads <= p_bytes + slack,
            "%d / %d" % (grads, p_bytes))
    print("| %-62s | result | ours / theirs" % "check")
    print("\n".join(rows))
    print("%d checks, %d failed" % (len(rows), len(failed)))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
