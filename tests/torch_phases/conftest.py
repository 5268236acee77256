"""Shared helpers for the automatic phases' tests: a recording sink and an installed Phases on
the real PyTorch (tests run by the torch venv's Python, CPU tensors: device filter "cpu")."""
import importlib
import io
import os
import socket
import sys
import threading

import pytest
import torch
import torch.distributed as dist

SOURCE = os.environ.get("CT_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(SOURCE, "preload", "python"))

import cumemtrace_phases  # noqa: E402

MODULE = importlib.import_module("torch.nn.modules.module")
OPTIM = importlib.import_module("torch.optim.optimizer")
ENGINE_RUN = torch.autograd._engine_run_backward


class Recorder:
    """A sink that records what the preload would: ("START"|"END"|"MARK", name) with END named
    after its thread's innermost START (as the collector resolves it), and
    ("OWNERS", role, [(data pointer, bytes)])."""

    def __init__(self):
        self.events = []
        self.callers = []  # backward_caller's frames (None: taken back)
        self._open = {}

    def push(self, name):
        self._open.setdefault(threading.get_ident(), []).append(name.decode())
        self.events.append(("START", name.decode()))

    def pop(self):
        self.events.append(("END", self._open[threading.get_ident()].pop()))

    def mark(self, name):
        self.events.append(("MARK", name.decode()))

    def backward_caller(self, skip):
        """The frames the preload would lend to autograd's engine threads, as (file's base
        name, function, line) innermost first; skip < 0 takes them back."""
        if skip < 0:
            self.callers.append(None)
            return
        f, frames = sys._getframe(1 + skip), []
        while f is not None:
            frames.append((os.path.basename(f.f_code.co_filename), f.f_code.co_name, f.f_lineno))
            f = f.f_back
        self.callers.append(frames)

    def owners(self, role, flat):
        self.events.append(("OWNERS", role, list(zip(flat[0::2], flat[1::2]))))

    def marks(self):
        return [e for e in self.events if e[0] != "OWNERS"]

    def walks(self):
        return [e[1:] for e in self.events if e[0] == "OWNERS"]


def hooks_left():
    """The global hooks that disable Module._call_impl's fast path, and the optimizer's."""
    return (len(MODULE._global_forward_pre_hooks) + len(MODULE._global_forward_hooks)
            + len(MODULE._global_forward_hooks_always_called)
            + len(OPTIM._global_optimizer_pre_hooks) + len(OPTIM._global_optimizer_post_hooks))


@pytest.fixture
def phases():
    """(Phases, Recorder, stderr) installed with the CPU filter; removed afterwards, and checked
    to leave torch as it found it."""
    assert hooks_left() == 0
    rec, err = Recorder(), io.StringIO()
    ph = cumemtrace_phases.Phases(torch, rec, "cpu", err)
    ph.install()
    yield ph, rec, err
    ph.uninstall()
    assert hooks_left() == 0
    assert torch.autograd._engine_run_backward is ENGINE_RUN


def fwd():
    return [("START", "auto:forward"), ("END", "auto:forward")]


def loss():
    return [("START", "auto:loss"), ("END", "auto:loss")]


def zg():
    return [("START", "auto:zero_grad"), ("END", "auto:zero_grad")]


def bwd():
    return [("START", "auto:backward"), ("END", "auto:backward")]


def opt_step():
    return [("START", "auto:optimizer"), ("END", "auto:optimizer"), ("MARK", "auto:step")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def process_group(request):
    """world size 1 on gloo, or 2 on PyTorch's fake process group (no peers: shapes and local
    shards are real, the collectives do nothing)."""
    world = request.param
    if world == 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
    else:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    yield world
    dist.destroy_process_group()
