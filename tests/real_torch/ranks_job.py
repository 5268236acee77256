"""A two-rank job of the real torch.distributed (gloo, on the CPU) for test_ranks.py, started by the
real launchers: every rank keeps 2 MiB of fake-driver memory at exit, rank 1 keeps 1 MiB more (the
skew), and the ranks all-reduce a CPU tensor, which must give the sum of their ranks + 1.

  torchrun --standalone --nproc-per-node 2 ranks_job.py torchrun
        each worker joins the group through torchrun's environment (env://) after its first
        CUDA call, so the rank reaches the preload both ways (RANK and init_process_group).
  ranks_job.py spawn INIT_FILE
        torch.multiprocessing.spawn: no launcher variables; the rank is spawn's argument, given to
        init_process_group (file:// store); rank 0 joins before its first CUDA call, rank 1 after.
"""
import ctypes
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing

MiB = 1 << 20
WORLD = 2


def check(rc):
    if rc != 0:
        sys.exit(f"driver call failed: {rc}")


def allocate(rank):
    cuda = ctypes.PyDLL("libcuda.so.1")
    check(cuda.cuInit(0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))
    for nbytes in [2 * MiB] + [MiB] * rank:
        ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))


def all_reduce():
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    if t.item() != WORLD * (WORLD + 1) / 2:
        sys.exit(f"all_reduce gave {t.item()}")
    dist.destroy_process_group()


def spawned(rank, init_file):
    join = lambda: dist.init_process_group(  # noqa: E731
        "gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    if rank == 0:
        join()
        allocate(rank)
    else:
        allocate(rank)
        join()
    all_reduce()


if __name__ == "__main__":
    if sys.argv[1] == "torchrun":
        import os

        allocate(int(os.environ["RANK"]))
        dist.init_process_group("gloo")
        all_reduce()
    elif sys.argv[1] == "spawn":
        torch.multiprocessing.spawn(spawned, args=(sys.argv[2],), nprocs=WORLD)
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
