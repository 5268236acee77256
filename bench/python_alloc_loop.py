"""Allocation pairs through the fake driver from a deep Python stack, for bench_python_stacks.sh.

  python_alloc_loop.py PAIRS DEPTH

Calls cuMemAlloc_v2/cuMemFree_v2 through ctypes.CDLL (the GIL released around each call, as
PyTorch's bindings do) PAIRS times from DEPTH + 2 Python frames of a long function, whose line
table is as long as those of torch's Module._call_impl, and prints the loop's wall time:
"python: W ns per alloc+free pair".
"""
import ctypes
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
ptr = ctypes.c_uint64()


def check(rc):
    if rc != 0:
        sys.exit(f"driver call failed: {rc}")


def loop(pairs):
    alloc, free, ref = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2, ctypes.byref(ptr)
    t = time.perf_counter_ns()
    for _ in range(pairs):
        alloc(ref, 4096)
        free(ptr)
    return time.perf_counter_ns() - t


def long_function(pairs, depth):
    # Forty statements over ten lines before the call: the call's instruction is far into the
    # line table, as in real framework code.
    a = 1; b = 2; c = a + b; d = c * 2; e = d - 1; f = e + a; g = f * b; h = g - c  # noqa: E702
    a = 1; b = 2; c = a + b; d = c * 2; e = d - 1; f = e + a; g = f * b; h = g - c  # noqa: E702
    a = 1; b = 2; c = a + b; d = c * 2; e = d - 1; f = e + a; g = f * b; h = g - c  # noqa: E702
    a = 1; b = 2; c = a + b; d = c * 2; e = d - 1; f = e + a; g = f * b; h = g - c  # noqa: E702
    a = 1; b = 2; c = a + b; d = c * 2; e = d - 1; f = e + a; g = f * b; h = g - c  # noqa: E702
    if depth > 0:
        return long_function(pairs, depth - 1)
    return loop(pairs)


check(cuda.cuInit(0))
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
check(cuda.cuCtxSetCurrent(ctx))
PAIRS, DEPTH = int(sys.argv[1]), int(sys.argv[2])
loop(1000)  # warm-up: first-sight announcements, page faults of the ring
print(f"python: {long_function(PAIRS, DEPTH) / PAIRS:.1f} ns per alloc+free pair")
