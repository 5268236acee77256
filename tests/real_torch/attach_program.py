"""The real torch 2.11 under `cumemtrace run` (test_attach.py): what our sitecustomize does at
`import torch`, then the attach itself. One fake-driver allocation first, so that the process is
traced and writes a snapshot. CUDA cannot come up here (PyTorch's runtime refuses the fake
driver), so torch never runs its lazy calls; the program then calls attach as CUDA's lazy
initialisation would, and prints one JSON line of what it saw."""
import ctypes
import json
import sys

cuda = ctypes.PyDLL("libcuda.so.1")
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
           cuda.cuCtxSetCurrent(ctx),
           cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))):
    if rc != 0:
        sys.exit("driver call failed: %d" % rc)

import torch  # noqa: E402

import cumemtrace_torch  # noqa: E402  (already imported by our sitecustomize: the same module)

seen = {"version": torch.__version__, "available": torch.cuda.is_available(),
        "queued": [fn is cumemtrace_torch.attach for fn, _ in torch.cuda._queued_calls].count(True),
        "ranks_wrapped": getattr(torch.distributed.init_process_group, "_cumemtrace_ranks", False)}
try:
    torch.cuda.init()
except RuntimeError:
    pass
seen["attached_by_torch"] = cumemtrace_torch._attached
cumemtrace_torch.attach()
try:
    cumemtrace_torch._find_tracker_method(cumemtrace_torch.layout_for(torch.__version__))
    seen["tracker_method"] = "found"
except ValueError as e:
    seen["tracker_method"] = str(e)
print(json.dumps(seen))
