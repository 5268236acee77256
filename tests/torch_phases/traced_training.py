"""A real-PyTorch CPU training loop with no cumemtrace code in it, run under `cumemtrace run` by
test_traced.py: the automatic phases must reach the snapshot's external_annotations. One device
allocation through the (fake) driver first, so that the process is traced and a snapshot is
written; then an MLP with Adam and a loss module for two steps, then one forward in inference."""
import ctypes
import sys

import torch
import torch.nn as nn

cuda = ctypes.PyDLL("libcuda.so.1")
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
           cuda.cuCtxSetCurrent(ctx), cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))):
    if rc != 0:
        sys.exit("driver call failed: %d" % rc)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
loss_fn = nn.MSELoss()
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(2, 8), torch.randn(2, 4)
for _ in range(2):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
with torch.no_grad():
    model(x)
