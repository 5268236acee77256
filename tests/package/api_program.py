"""Uses the cumemtrace Python API (test_wheel.py runs it traced and untraced): a mark, a range
around one 4 MiB allocation through the fake driver, and a snapshot. Prints one JSON line:
whether it was traced and the snapshot path (null when not traced)."""
import ctypes
import json
import sys

import cumemtrace

cuda = ctypes.PyDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0

cumemtrace.mark("before")
with cumemtrace.range("phase"):
    ptr = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4 << 20)) == 0  # ALLOC_LINE
path = cumemtrace.snapshot("api test")
json.dump({"traced": cumemtrace.is_traced(), "snapshot": path}, sys.stdout)
