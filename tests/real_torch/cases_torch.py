"""Tests for test_plugin.py (pytest --cumemtrace by the torch venv's Python): each imports the real
torch and trains a small model on the CPU (real tensors, the automatic phases' hooks installed by
our sitecustomize), with device memory from the fake driver through ctypes. Every test's verdict
and bytes must be its own, as with no torch; the API test reads its own snapshot."""
import ctypes
import json

import pytest
import torch

import cumemtrace

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


def train(steps):
    """Full-batch gradient descent on a fixed problem: the loss falls every step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    return losses


@pytest.mark.limit_gpu_leaks("0 B")
def test_trains_and_leaks():
    train(3)
    kept.append(allocate(2 * MiB))  # LEAKS_LINE


@pytest.mark.limit_gpu_memory("3 MiB")
@pytest.mark.limit_gpu_leaks(0)
def test_trains_within_its_peak():
    a = allocate(3 * MiB)
    train(3)
    free(a)


@pytest.mark.limit_gpu_memory("5 MiB")
def test_over_peak_while_training():
    a = allocate(3 * MiB)
    train(2)
    b = allocate(3 * MiB)  # OVER_PEAK_LINE
    free(a)
    free(b)


def test_api_with_torch():
    """The Python API in a traced process with torch: a range around an allocation, a mark, and
    a snapshot holding them next to the automatic phases of the real training loop."""
    assert cumemtrace.is_traced()
    train(2)
    cumemtrace.mark("trained")
    with cumemtrace.range("inner"):
        free(allocate(MiB))
    with open(cumemtrace.snapshot("api")) as f:
        notes = [(a["name"], a["stage"]) for a in json.load(f)["external_annotations"]]
    # No auto:forward: this test's model is a root first called after the session's first step
    # (test_trains_and_leaks'), which the phases miss (docs/pytorch.md, cumemtrace_phases.py).
    step = [("auto:zero_grad", "START"), ("auto:zero_grad", "END"), ("auto:backward", "START"),
            ("auto:backward", "END"), ("auto:optimizer", "START"), ("auto:optimizer", "END"),
            ("auto:step", "MARK")]
    # From the start of this test's range (the plugin's, named after its node id) on.
    (start,) = [n for n in notes if n[0].endswith("cases_torch.py::test_api_with_torch")]
    assert start[0].startswith("pytest:") and start[1] == "START", notes
    assert notes[notes.index(start):] == [start] + step * 2 + [
        ("trained", "MARK"), ("inner", "START"), ("inner", "END")], notes


@pytest.mark.limit_gpu_growth_per_step("1 MiB")
def test_growth_needs_tensors_on_a_device():
    """Real automatic steps, but their tensors are on the CPU: the gate cannot judge, so the test
    fails saying why (a gate that could not judge never passes)."""
    train(4)
