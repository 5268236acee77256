"""A two-rank torchrun job (gloo; both ranks may share one GPU) where rank 1 runs out of memory
under torch.cuda.set_per_process_memory_fraction (a 1 GiB budget) while rank 0 holds 512 MiB and
waits in a barrier it never leaves: torchrun then kills rank 0, as it ends any job whose worker
failed. Each rank writes PyTorch's own counters to OUTDIR/torch.rankN.json for the validator
(rank 1 at its OOM, before it re-raises). Usage: torchrun ... job_oom.py OUTDIR."""
import json
import os
import sys

import torch
import torch.distributed as dist

MiB = 1 << 20


def counters(out, rank, **extra):
    c = {"rank": rank, "memory_allocated": torch.cuda.memory_allocated(),
         "memory_reserved": torch.cuda.memory_reserved(), **extra}
    with open(os.path.join(out, f"torch.rank{rank}.json"), "w") as f:
        json.dump(c, f)


def main():
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    shared = os.environ.get("CUMEMTRACE_SHARED_GPU") == "1"
    local = 0 if shared else int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("gloo")
    if rank == 0:
        held = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        counters(out, rank)
        dist.barrier()  # rank 1 starts growing now
        dist.barrier()  # never passed: rank 1 fails, torchrun kills this rank
        del held
        return
    total = torch.cuda.get_device_properties(local).total_memory
    torch.cuda.set_per_process_memory_fraction((1 << 30) / total, local)
    dist.barrier()
    blocks = []
    try:
        while True:
            blocks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))  # THE OOM
    except torch.cuda.OutOfMemoryError:
        counters(out, rank, blocks=len(blocks), requested=256 * MiB)
        raise


if __name__ == "__main__":
    main()
