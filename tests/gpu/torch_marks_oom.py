"""PyTorch loop with torch.cuda.nvtx.range per step (marks with no code change under
`cumemtrace run`), then an induced out-of-memory error that is caught."""
import torch

x = []
for step in range(5):
    with torch.cuda.nvtx.range(f"step{step}"):
        x.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))  # leaks 16 MiB per step
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    print("caught OOM")
