"""A two-rank DistributedDataParallel job where rank 1 keeps an extra 1 GiB from step 5 on (the
planted skew of the rank table's validation). Run with torchrun; with one GPU, both ranks share
it (CUMEMTRACE_SHARED_GPU=1, gloo instead of NCCL). Each rank writes PyTorch's own counters to
OUTDIR/torch.rankN.json for the validator. Usage: torchrun ... ddp_skew.py OUTDIR [STEPS]."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    rank = int(os.environ["RANK"])
    shared = os.environ.get("CUMEMTRACE_SHARED_GPU") == "1"
    local = 0 if shared else int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    if shared:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda(),
        device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = None
    for step in range(steps):
        x = torch.randn(64, 1024, device="cuda")
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 1 and step == 5:
            extra = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # the planted skew
    torch.cuda.synchronize()
    counters = {
        "rank": rank,
        "local_device": local,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_allocated": torch.cuda.memory_allocated(),
        "extra_bytes": extra.numel() if extra is not None else 0,
    }
    with open(os.path.join(out, f"torch.rank{rank}.json"), "w") as f:
        json.dump(counters, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
