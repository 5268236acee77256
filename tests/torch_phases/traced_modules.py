"""A real-PyTorch CPU model with no cumemtrace code in it, run under `cumemtrace run` by
test_modules.py: device allocations made inside its modules' forwards (through the fake driver,
with the GIL released as PyTorch's ops do) must carry the calling modules on their frames. The
model sits in a wrapper with a `module` attribute (as DDP does): names are the wrapped model's.
One allocation outside any module call. Sizes say where each was made."""
import ctypes
import sys

import torch
import torch.nn as nn

cuda = ctypes.CDLL("libcuda.so.1")  # CDLL: the GIL is released around each call
MiB = 1 << 20


def check(rc):
    if rc != 0:
        sys.exit("driver call failed: %d" % rc)


def device_alloc(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))


class Block(nn.Module):
    def __init__(self, nbytes):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.nbytes = nbytes

    def forward(self, x):
        device_alloc(self.nbytes)
        return self.fc(x)


class Head(nn.Module):
    def forward(self, x):
        device_alloc(3 * MiB)
        return x.sum()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(1 * MiB), Block(2 * MiB)])
        self.head = Head()

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        device_alloc(5 * MiB)  # in Net itself, between its children
        return self.head(x)


class Wrapper(nn.Module):  # like DistributedDataParallel: the model is its `module`
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


ctx = ctypes.c_void_p()
for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
           cuda.cuCtxSetCurrent(ctx)):
    check(rc)
device_alloc(4 * MiB)  # outside any module
model = Wrapper(Net())
model(torch.randn(2, 4))
