"""Two-rank DistributedDataParallel training on NCCL for the multi-GPU test (run with torchrun)."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    rank = int(os.environ["LOCAL_RANK"])
    # Before the process group: otherwise NCCL's first barrier puts 2 MiB of every rank on
    # device 0 (cumemtrace shows it; a classic DDP mistake).
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(20):
        x = torch.randn(64, 1024, device="cuda")
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
