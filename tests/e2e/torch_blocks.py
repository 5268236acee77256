"""Drives the fake torch (tests/fake_torch) for test_torch_blocks.py: one scenario per argv[1].
Each allocation is on its own line, so the tests can name the Python line of a request."""
import os
import signal
import sys

import torch

MiB = 1 << 20


def basic():
    a = torch.cuda.alloc(1000)  # LINE basic-a
    b = torch.cuda.alloc(3 * MiB)
    torch.cuda.alloc(5 * MiB + 100)
    torch.cuda.alloc(11 * MiB)
    torch.cuda.free(a, deferred=True)
    torch.cuda.free(b)
    e = torch.cuda.alloc(30 * MiB)
    torch.cuda.free(e)
    torch.cuda.empty_cache()


def expandable():
    torch.cuda.alloc(1000)
    torch.cuda.alloc(3 * MiB)
    c = torch.cuda.alloc(25 * MiB)
    torch.cuda.free(c)
    torch.cuda.empty_cache()


def expandable_split():
    torch.cuda.alloc(3 * MiB)
    b = torch.cuda.alloc(5 * MiB + 100)
    c = torch.cuda.alloc(11 * MiB)
    torch.cuda.free(b)
    torch.cuda.free(c, deferred=True)


def oom():
    torch.cuda.set_memory_limit(22 * MiB)
    torch.cuda.alloc(3 * MiB)
    try:
        torch.cuda.alloc(30 * MiB)  # LINE oom-request
    except torch.cuda.OutOfMemoryError as e:
        print("caught:", e, flush=True)


def kill():
    torch.cuda.alloc(1000)
    torch.cuda.alloc(3 * MiB)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    {"basic": basic, "expandable": expandable, "expandable_split": expandable_split, "oom": oom,
     "kill": kill}[sys.argv[1]]()
