"""What lending the backward caller's frames costs (preload/stacks/backward_caller.h): once per
outermost backward, cumemtrace_phases calls cumemtrace_torch_backward_caller(2) at its start and
(-1) at its end. Run under the preload (the fake driver needs no GPU):

  LD_LIBRARY_PATH=build/fake:build/lib build/bin/cumemtrace run -q -o /tmp/bc -- \\
      python3 bench/bench_backward_caller.py [DEPTH] [PAIRS]

DEPTH Python frames on the stack (default 30: a Trainer's backward is about that deep), PAIRS
lend/take-back pairs (default 20000). Prints the median ns per pair over 5 rounds. A driver
allocation first starts the session, as a training run's first tensor does."""
import ctypes
import statistics
import sys
import time

depth = int(sys.argv[1]) if len(sys.argv) > 1 else 30
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
lib = ctypes.PyDLL(None)
lend = lib.cumemtrace_torch_backward_caller
lend.argtypes, lend.restype = [ctypes.c_int], ctypes.c_int
cuda = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
cuda.cuInit(0)
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
cuda.cuCtxSetCurrent(ctx)
ptr = ctypes.c_uint64()
cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))


def rounds():
    times = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            lend(2)
            lend(-1)
        times.append((time.perf_counter_ns() - t0) / pairs)
    return times


def nest(n):
    return nest(n - 1) if n > 1 else (lend(2), rounds())


lent, times = nest(depth)
print("frames lent %d, %.0f ns per lend + take-back (median of 5 rounds of %d)" % (
    lent, statistics.median(times), pairs))
