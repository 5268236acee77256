"""The fake torch (tests/fake_torch) holding known tensors for test_metrics.py: PyTorch's caching
rules put 1000 bytes (rounded to 1024) in a 2 MiB small-pool segment and 3 MiB in a 20 MiB
large-pool segment; it prints "ready PID" and holds them until a line arrives on stdin."""
import os
import sys

import torch

MiB = 1 << 20
a = torch.cuda.alloc(1000)
b = torch.cuda.alloc(3 * MiB)
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
torch.cuda.free(b)
torch.cuda.free(a)
