"""A small PyTorch training loop for tests/gpu/validate_metrics.sh: at known moments (after the
model is built, after each of 3 steps, after emptying the cache) it writes one line to the file
named by argv[1] -- the moment, torch.cuda.memory_allocated() and memory_reserved(), its pid --
and blocks until a line arrives on the FIFO named by argv[2] (the script has scraped /metrics)."""
import json
import os
import sys

import torch

out = open(sys.argv[1], "w", buffering=1)
go = open(sys.argv[2])


def moment(name):
    torch.cuda.synchronize()
    out.write(json.dumps({"moment": name, "pid": os.getpid(),
                          "device": torch.cuda.current_device(),
                          "allocated": torch.cuda.memory_allocated(),
                          "reserved": torch.cuda.memory_reserved()}) + "\n")
    if not go.readline():
        sys.exit("validate_metrics: the script went away")


model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 2048)).cuda()
opt = torch.optim.Adam(model.parameters())
moment("model built")
for step in range(3):
    x = torch.randn(512, 2048, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    moment(f"after step {step + 1}")
del x, loss
torch.cuda.empty_cache()
moment("after empty_cache")
out.write('{"moment": "end"}\n')
