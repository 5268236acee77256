"""Tests for test_pytest_plugin.py's no-CUDA case (issue 57): a test that makes no CUDA allocation
(a training loop fallen back to the CPU) gives nothing to judge. A test with a marker fails as not
judged, whatever its size and whatever ran before it (test_marked_on_the_gpu, run first or last,
changes nothing); one without a marker passes unmeasured."""
import ctypes

import pytest

MiB = 1 << 20


@pytest.mark.limit_gpu_leaks("0 B")
@pytest.mark.limit_gpu_memory("1 GiB")
def test_marked_on_the_cpu():
    assert sum(range(10)) == 45


def test_unmarked_on_the_cpu():
    assert sum(range(10)) == 45


@pytest.mark.limit_gpu_memory("1 GiB")
def test_marked_on_the_gpu():
    # The fake CUDA driver (test_pytest_plugin.py puts it on the library path).
    cuda = ctypes.PyDLL("libcuda.so.1")
    ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(MiB)) == 0
    assert cuda.cuMemFree_v2(ctypes.c_uint64(ptr.value)) == 0
