"""One rank of a DDP job under torchrun (gloo, CPU), with no cumemtrace code in its loop: the
automatic phases record into a recording sink, and the rank writes what they sent to
OUT/rank<R>.json for test_trainers.py. Usage (torchrun sets RANK, WORLD_SIZE, MASTER_*):
  python -m torch.distributed.run --standalone --nproc_per_node 2 ddp_ranks.py OUT"""
import io
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.environ["CT_SOURCE"], "preload", "python"))
import cumemtrace_phases  # noqa: E402
from conftest import Recorder  # noqa: E402

out_dir = sys.argv[1]
# Where DDP's C++ Reducer is built and rebuilds its gradient buckets, seen by its callers: the
# collector's rule for DDP's buckets (collector/pytorch/categories.h, rule 1b) names these frames.
reducer_calls = []


class Reducer(dist.Reducer):
    def __init__(self, *args, **kwargs):
        reducer_calls.append(["Reducer", sys._getframe(1).f_code.co_qualname])
        super().__init__(*args, **kwargs)

    def _rebuild_buckets(self):
        rebuilt = super()._rebuild_buckets()
        if rebuilt:
            reducer_calls.append(["_rebuild_buckets", sys._getframe(1).f_code.co_qualname])
        return rebuilt


dist.Reducer = Reducer
dist.init_process_group("gloo")
rank = dist.get_rank()
rec, err = Recorder(), io.StringIO()
phases = cumemtrace_phases.Phases(torch, rec, "cpu", err)
phases.install()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
torch.manual_seed(rank)
x, y = torch.randn(2, 8), torch.randn(2, 4)
for _ in range(2):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
phases.uninstall()
params = list(model.parameters())
with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
    json.dump({"marks": rec.marks(), "walks": rec.walks(), "err": err.getvalue(),
               "reducer_calls": reducer_calls,
               "params": sum(p.nbytes for p in params),
               "grads": sorted([p.grad.data_ptr(), p.grad.nbytes] for p in params),
               "state": sum(v.nbytes for s in opt.state.values() for v in s.values()
                            if torch.is_tensor(v))}, f)
dist.destroy_process_group()
