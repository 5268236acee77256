"""A library op that allocates device memory, as cuBLAS does inside a layer's forward: wraps a
module class's forward so that each call first takes `nbytes` from the driver (the fake driver
under `cumemtrace run`; the GIL released around the call, as PyTorch's ops release it). Its
frames are library code only when the reader is told so (--library-code device_ops.py), as a
package's would be by its path."""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc):
    if rc != 0:
        sys.exit("driver call failed: %d" % rc)


def init():
    ctx = ctypes.c_void_p()
    for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
               cuda.cuCtxSetCurrent(ctx)):
        check(rc)


def allocating(forward, nbytes):
    def forward_allocating(self, *args, **kwargs):
        ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
        return forward(self, *args, **kwargs)
    return forward_allocating
