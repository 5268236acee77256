"""Tests for the pytest plugin's own test (test_wheel.py runs pytest --cumemtrace on this file):
device memory comes from the fake CUDA driver through ctypes, so no GPU is needed. Exactly two
tests break their limit: test_leaks (allocate_leaked keeps 2 MiB) and test_over_peak
(allocate_block twice: 6 MiB at once, limit 4 MiB). The limits hold whether or not a peak counts
memory another test left allocated before."""
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


def allocate_block(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))  # BLOCK_LINE
    return ptr.value


def allocate_leaked(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))  # LEAK_LINE
    kept.append(ptr.value)


def free(ptr):
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)))


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks():
    allocate_leaked(2 * MiB)


@pytest.mark.limit_gpu_leaks("0 B")
def test_clean():
    free(allocate_block(2 * MiB))


@pytest.mark.limit_gpu_memory("4 MiB")
def test_over_peak():
    a = allocate_block(3 * MiB)
    b = allocate_block(3 * MiB)
    free(a)
    free(b)


@pytest.mark.limit_gpu_memory("4 MiB")
def test_under_peak():
    free(allocate_block(1 * MiB))
