"""Tests for test_pytest_plugin.py (pytest --cumemtrace, serially and with -n 2): device memory
from the fake CUDA driver through ctypes. Each test's numbers must be its own, whatever ran before
it in the same process: test_leaks leaves 2 MiB allocated that the later tests must not be charged
with (test_own_peak's limit holds only without them), test_frees_what_another_left frees it when
it ran before it and is charged with neither; TestGroup.test_method's leak stack ends at it."""
import ctypes

import pytest

MiB = 1 << 20
cuda = ctypes.PyDLL("libcuda.so.1")
kept = []


def check(rc):
    assert rc == 0, f"driver call failed: {rc}"


@pytest.fixture(autouse=True, scope="module")
def context():
    check(cuda.cuInit(0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))


def allocate(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))  # ALLOC_LINE
    return ptr.value


def free(ptr):
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)))


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks():
    kept.append(allocate(2 * MiB))  # LEAKS_LINE


@pytest.mark.limit_gpu_memory("3 MiB")
@pytest.mark.limit_gpu_leaks(0)
def test_own_peak():
    free(allocate(3 * MiB))


@pytest.mark.limit_gpu_memory("1 MiB")
@pytest.mark.limit_gpu_leaks("0 B")
def test_frees_what_another_left():
    while kept:
        free(kept.pop())
    free(allocate(1 * MiB))


@pytest.mark.limit_gpu_memory("5 MiB")
def test_over_peak():
    a, b = allocate(3 * MiB), allocate(3 * MiB)  # OVER_PEAK_LINE
    free(a)
    free(b)


class TestGroup:
    @pytest.mark.limit_gpu_leaks("512 KiB")
    def test_method(self):
        kept.append(allocate(1 * MiB))  # METHOD_LINE
