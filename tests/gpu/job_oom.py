"""A two-rank torchrun job (gloo; both ranks may share one GPU) where rank 1 runs out of memory
under torch.cuda.set_per_process_memory_fraction (a 1 GiB budget) while rank 0 holds 512 MiB and
waits for a barrier it never passes: torchrun then kills rank 0 (SIGTERM), as it ends any job
whose worker failed. Each rank writes PyTorch's own counters to OUTDIR/torch.rankN.json for the
validator. What each still holds when it ends is made explicit, so that "live at exit" has one
right answer: rank 1 leaves with os._exit(1) right after its counters (no unwinding, no
finalization: its tensors are never freed, memory_allocated() then is what it leaves); rank 0,
whose barrier fails as soon as rank 1's socket closes, keeps holding and sleeps until torchrun's
signal kills it (Python's default SIGTERM action: nothing is freed). A rank that instead let its
exception propagate would free its tensors while Python unwinds and finalizes, and correctly show
0 live at exit (memory_allocated() is 0 then). Usage: torchrun ... job_oom.py OUTDIR."""
import json
import os
import sys
import time

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
        try:
            dist.barrier()  # never passed: rank 1 fails
        except Exception:  # gloo: the peer's connection closed
            pass
        time.sleep(600)  # still holding `held`: torchrun's SIGTERM ends this rank here
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
        sys.stderr.flush()
        os._exit(1)  # the blocks stay allocated: what this rank leaves is memory_allocated()


if __name__ == "__main__":
    main()
