"""torch.multiprocessing.spawn's ranks (no launcher variables: the rank is known only to
init_process_group): each rank allocates 64 MiB << rank on its own GPU and writes PyTorch's
counters to OUTDIR/torch.rankN.json. Usage: mp_spawn_ranks.py OUTDIR."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, out, world):
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if torch.cuda.device_count() >= world else "gloo",
                            init_method="tcp://127.0.0.1:29533", rank=rank, world_size=world)
    x = torch.empty((64 << 20) << rank, dtype=torch.uint8, device="cuda")
    dist.barrier()
    with open(os.path.join(out, f"torch.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "memory_allocated": torch.cuda.memory_allocated(),
                   "max_memory_allocated": torch.cuda.max_memory_allocated()}, f)
    del x
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1], 2), nprocs=2)
