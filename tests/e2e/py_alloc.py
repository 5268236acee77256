"""A Python program that allocates through the fake driver while holding the GIL (ctypes.PyDLL
keeps it), so cumemtrace's Python-aware stacks must name load_weights() and its caller."""
import ctypes
import sys

cuda = ctypes.PyDLL("libcuda.so.1")


def check(rc):
    if rc != 0:
        sys.exit(f"driver call failed: {rc}")


def setup():
    check(cuda.cuInit(0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))


def load_weights(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))  # PY_ALLOC_LINE
    return ptr.value


def build_model():
    return load_weights(3 << 20)  # PY_CALLER_LINE


setup()
build_model()  # MODULE_CALL_LINE
