"""A long PyTorch training loop for tests/gpu/validate_bounded.sh: STEPS steps of a small MLP
with a growing list of kept tensors from step 20 to 39 (sustained growth, 8 MiB each), one large
temporary at step 60 (the run's peak: 1 GiB), and at step 80 an allocation larger than the GPU
(the OOM, caught). Prints "peak_reserved N" (torch.cuda.max_memory_reserved) at the end."""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
for step in range(steps):
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if 20 <= step < 40:
        kept.append(torch.empty(8 << 20, dtype=torch.uint8, device="cuda"))
    if step == 60:
        big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        del big
    if step == 80:
        try:
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            print("oom caught")
torch.cuda.synchronize()
print("peak_reserved", torch.cuda.max_memory_reserved())
