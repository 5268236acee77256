"""The automatic phases and ownership walks (preload/python/cumemtrace_phases.py) on the real
PyTorch, CPU tensors, through a recording sink: exact mark sequences and walk bytes."""
import io
import json
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import cumemtrace_phases
from conftest import (ENGINE_RUN, MODULE, OPTIM, SOURCE, Recorder, bwd, fwd, hooks_left, loss,
                      opt_step, zg)

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMETER, GRADIENT, OPTIMIZER_STATE, INPUT = 1, 2, 3, 4


def owner_walks(rec):
    """The walks of parameters, gradients and optimizer state (input walks apart)."""
    return [w for w in rec.walks() if w[0] != INPUT]


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))  # 212 floats: 848 bytes


def batch():
    return torch.randn(2, 8), torch.randn(2, 4)


def train(model, opt, steps, micro=1, set_to_none=True, loss_fn=None, data=None):
    loss_fn = loss_fn or nn.MSELoss()
    x, y = data or batch()
    for _ in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        for _ in range(micro):
            loss_fn(model(x), y).backward()
        opt.step()


def one_step_marks():
    # the model and the loss module are both roots (called at depth 0 outside backward); the
    # loss module's call is marked auto:loss
    return zg() + fwd() + loss() + bwd() + opt_step()


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def test_mlp_adam_three_steps_marks(phases):
    ph, rec, err = phases
    model = mlp()
    train(model, torch.optim.Adam(model.parameters()), 3)
    assert rec.marks() == one_step_marks() * 3
    assert err.getvalue() == ""


def test_walk_bytes_are_the_parameters_and_the_optimizer_state(phases):
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1)
    walks = owner_walks(rec)
    assert [role for role, _ in walks] == [PARAMETER, GRADIENT, OPTIMIZER_STATE]
    params = list(model.parameters())
    # before the first step: the root's parameters at its first forward
    assert walks[0][1] == [(p.data_ptr(), p.numel() * p.element_size()) for p in params]
    assert sum(b for _, b in walks[0][1]) == tensor_bytes(params) == 848
    assert walks[1][1] == [(p.grad.data_ptr(), 4 * p.numel()) for p in params]
    state = [v for s in opt.state.values() for v in s.values()]
    assert len(state) == 12  # exp_avg, exp_avg_sq and step (a 4-byte scalar on the CPU) each
    assert sorted(walks[2][1]) == sorted((t.data_ptr(), t.numel() * t.element_size())
                                         for t in state)
    assert sum(b for _, b in walks[2][1]) == tensor_bytes(state) == 2 * 848 + 4 * 4


def test_autograd_engine_thread_is_backward_s(phases, monkeypatch):
    """On a GPU, autograd runs backward on its device thread, whose own state says nothing of a
    backward: only torch._C._current_graph_task_id() says a graph task runs there, so a module
    called there (a custom Function's backward, checkpoint's recompute) opens no auto:forward and
    a backward started there no auto:backward. The CPU runs backward on the calling thread, where
    that id is never consulted: it is monkeypatched here to what the engine's thread reads."""
    ph, rec, err = phases
    model = mlp()
    x, y = batch()
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), 1)
    before = rec.marks()
    assert before == one_step_marks()

    def on_a_thread():
        nn.functional.mse_loss(model(x), y).backward()

    for graph_task, added in ((7, []), (-1, fwd() + bwd())):
        monkeypatch.setattr(ph, "_graph_task_id", lambda: graph_task)
        t = threading.Thread(target=on_a_thread)
        t.start()
        t.join()
        assert rec.marks() == before + added, graph_task
        before = rec.marks()
    assert err.getvalue() == ""


def test_walk_keeps_only_the_traced_device_type():
    rec = Recorder()
    ph = cumemtrace_phases.Phases(torch, rec, "cuda")  # every tensor here is a CPU tensor
    ph.install()
    try:
        model = mlp()
        train(model, torch.optim.Adam(model.parameters()), 2)
    finally:
        ph.uninstall()
    assert rec.walks() == []  # nothing sent: an empty list is sent only to clear a sent one
    assert rec.marks() == one_step_marks() * 2


def test_tied_parameters_count_once(phases):
    ph, rec, err = phases
    torch.manual_seed(0)
    emb = nn.Embedding(10, 6)
    head = nn.Linear(6, 10, bias=False)
    head.weight = emb.weight  # tied, as in language models
    model = nn.Sequential(emb, head)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.tensor([[1, 2, 3]])
    model(x).sum().backward()
    opt.step()
    walks = dict(rec.walks())
    assert walks[PARAMETER] == [(emb.weight.data_ptr(), 240)]
    assert walks[GRADIENT] == [(emb.weight.grad.data_ptr(), 240)]
    assert walks[OPTIMIZER_STATE] == [(opt.state[emb.weight]["momentum_buffer"].data_ptr(), 240)]


def test_walk_not_sent_again_when_nothing_changed(phases):
    ph, rec, err = phases
    model = mlp()
    train(model, torch.optim.Adam(model.parameters()), 3, set_to_none=False)
    # gradients zeroed in place and Adam's state updated in place: the same lists every step
    # (the same batch each step: one input walk)
    assert [role for role, _ in rec.walks()] == [PARAMETER, INPUT, GRADIENT, OPTIMIZER_STATE]
    assert [e[0] for e in rec.events].count("OWNERS") == 4
    assert rec.events[-1] == ("MARK", "auto:step")


def test_gradients_sent_again_when_they_moved(phases):
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, opt, 1)
    first = dict(rec.walks())[GRADIENT]
    opt.zero_grad(set_to_none=True)
    keep = [torch.empty(1 << 16) for _ in range(4)]  # so that the new gradients land elsewhere
    train(model, opt, 1, set_to_none=False)
    del keep
    roles = [role for role, _ in owner_walks(rec)]
    assert roles == [PARAMETER, GRADIENT, GRADIENT]  # SGD without momentum has no state
    assert owner_walks(rec)[-1][1] == [(p.grad.data_ptr(), 4 * p.numel()) for p in model.parameters()]
    assert owner_walks(rec)[-1][1] != first


def test_gradient_accumulation(phases):
    ph, rec, err = phases
    model = mlp()
    train(model, torch.optim.AdamW(model.parameters()), 2, micro=4)
    micro = fwd() + loss() + bwd()
    assert rec.marks() == (zg() + micro * 4 + opt_step()) * 2


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_recompute_is_backward(phases, reentrant):
    ph, rec, err = phases
    model = mlp()
    calls = []
    model.register_forward_pre_hook(lambda m, a: calls.append(torch.is_grad_enabled()))
    opt = torch.optim.Adam(model.parameters())
    x, y = batch()
    x.requires_grad_(True)  # the reentrant variant needs an input that requires grad
    for _ in range(2):
        opt.zero_grad()
        out = checkpoint(model, x, use_reentrant=reentrant)  # the root itself is recomputed
        nn.functional.mse_loss(out, y).backward()
        opt.step()
    assert len(calls) == 4  # it was recomputed in each backward
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2
    assert err.getvalue() == ""


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_block_inside_the_model(phases, reentrant):
    ph, rec, err = phases
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            x = self.a(x)
            x = checkpoint(self.b, x, use_reentrant=reentrant)
            return self.c(x)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    for _ in range(3):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 3


def test_autocast_bfloat16(phases):
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    x, y = batch()
    for _ in range(2):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2
    assert sum(b for _, b in dict(rec.walks())[PARAMETER]) == 848


def test_inference_forward_only(phases):
    ph, rec, err = phases
    model = mlp().eval()
    x, _ = batch()
    with torch.no_grad():
        for _ in range(3):
            model(x)
    assert rec.marks() == fwd() * 3
    assert rec.walks() == [(PARAMETER, [(p.data_ptr(), p.nbytes) for p in model.parameters()]),
                           (INPUT, [(x.data_ptr(), 64)])]  # the same x each time: sent once
    # the second call of a known root ended discovery: only the root's own hooks are left
    assert len(MODULE._global_forward_pre_hooks) == len(MODULE._global_forward_hooks) == 0
    assert (len(model._forward_pre_hooks), len(model._forward_hooks)) == (1, 1)


def test_no_global_hooks_after_the_first_step(phases):
    ph, rec, err = phases
    model = mlp()
    loss_fn = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters())
    x, y = batch()
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    assert len(MODULE._global_forward_pre_hooks) == 1  # still discovering
    loss.backward()  # the first backward ends discovery
    assert len(MODULE._global_forward_pre_hooks) == 0
    assert len(MODULE._global_forward_hooks) == len(MODULE._global_forward_hooks_always_called) == 0
    # per-module hooks on the two roots only: every other module keeps the fast path
    for m in (model, loss_fn):
        assert (len(m._forward_pre_hooks), len(m._forward_hooks)) == (1, 1)
    for m in model.children():
        assert not (m._forward_pre_hooks or m._forward_hooks)
    opt.step()
    train(model, opt, 1, loss_fn=loss_fn)
    assert rec.marks() == one_step_marks() * 2


def test_loss_inside_no_module_still_steps(phases):
    """A functional loss: the model is the only root."""
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    for _ in range(2):
        opt.zero_grad()
        torch.autograd.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2


def test_autograd_grad_is_backward_but_not_inside_a_forward(phases):
    ph, rec, err = phases
    torch.manual_seed(0)

    class Physics(nn.Module):  # calls autograd.grad inside its forward
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, x):
            u = self.lin(x)
            (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
            return du

    model = Physics()
    x = torch.randn(4, 3, requires_grad=True)
    model(x)
    (g,) = torch.autograd.grad(model(x).sum(), model.lin.weight, allow_unused=True)
    assert rec.marks() == fwd() + fwd() + bwd()


def test_a_hook_failing_turns_phases_off_and_the_loop_runs(phases):
    ph, rec, err = phases

    class Failing(Recorder):
        def mark(self, name):
            raise RuntimeError("ring gone")

    failing = Failing()
    ph._sink = failing
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    train(model, opt, 3)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    assert err.getvalue() == ("cumemtrace: automatic phases off (optimizer step post-hook: "
                              "RuntimeError: ring gone)\n")
    assert failing.marks() == one_step_marks()[:-1]  # nothing after the failure
    assert hooks_left() == 0
    assert torch.autograd._engine_run_backward is ENGINE_RUN
    assert not (model._forward_pre_hooks or model._forward_hooks)


def test_a_forward_hook_failing(phases):
    ph, rec, err = phases

    class Failing(Recorder):
        def owners(self, role, flat):
            raise ValueError("bad walk")

    ph._sink = failing = Failing()
    model = mlp()
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)
    assert err.getvalue() == ("cumemtrace: automatic phases off (forward pre-hook: "
                              "ValueError: bad walk)\n")
    assert failing.events == zg() + [("START", "auto:forward")]  # the failure left it open
    assert hooks_left() == 0


def test_optimizer_step_raising_leaves_no_stale_state(phases):
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(TypeError):
        opt.step(closure=3)  # the user's own error: the post-hook does not run
    opt.step()
    assert rec.marks() == fwd() + bwd() + [("START", "auto:optimizer"),
                                           ("START", "auto:optimizer"),
                                           ("END", "auto:optimizer"), ("MARK", "auto:step")]
    train(model, opt, 1)
    assert rec.marks()[-len(fwd() + bwd() + opt_step()):] == fwd() + bwd() + opt_step()


def test_no_optimizer_hooks_in_an_older_torch(monkeypatch):
    monkeypatch.delattr(OPTIM, "register_optimizer_step_pre_hook")
    rec, err = Recorder(), io.StringIO()
    ph = cumemtrace_phases.Phases(torch, rec, "cpu", err)
    ph.install()
    try:
        model = mlp()
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)
    finally:
        ph.uninstall()
    assert err.getvalue() == ("cumemtrace: torch %s has no global optimizer step hooks: no "
                              "auto:optimizer phases or ownership walks\n" % torch.__version__)
    assert rec.marks() == (zg() + fwd() + loss() + bwd()) * 2
    assert hooks_left() == 0


def test_no_always_call_in_an_older_torch(monkeypatch):
    real = MODULE.register_module_forward_hook

    def old_signature(hook, *, with_kwargs=False):
        return real(hook, with_kwargs=with_kwargs)

    monkeypatch.setattr(MODULE, "register_module_forward_hook", old_signature)
    real_module_hook = nn.Module.register_forward_hook

    def old_module_hook(self, hook, *, prepend=False, with_kwargs=False):
        return real_module_hook(self, hook, prepend=prepend, with_kwargs=with_kwargs)

    monkeypatch.setattr(nn.Module, "register_forward_hook", old_module_hook)
    rec, err = Recorder(), io.StringIO()
    ph = cumemtrace_phases.Phases(torch, rec, "cpu", err)
    ph.install()
    try:
        model = mlp()
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)
    finally:
        ph.uninstall()
    assert err.getvalue() == ("cumemtrace: torch %s has no always_call forward hooks: a forward "
                              "that raises leaves its phase open\n" % torch.__version__)
    assert rec.marks() == one_step_marks() * 2
    assert hooks_left() == 0


def compiled_run(mode, hooks):
    p = subprocess.run([sys.executable, os.path.join(HERE, "compile_probe.py"), mode, hooks],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, CT_SOURCE=SOURCE))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1]), p.stderr


@pytest.mark.parametrize("mode", ["wrapper", "inplace_block"])
def test_compile_adds_no_graph_breaks_or_frames(mode):
    off, _ = compiled_run(mode, "off")
    on, stderr = compiled_run(mode, "on")
    assert off["graph_breaks"] == on["graph_breaks"]
    assert off["frames"] == on["frames"]
    assert on["frames"]["ok"] >= 1  # something was compiled
    assert off["marks"] == []
    assert on["marks"] == [m for step in [[
        "START auto:zero_grad", "END auto:zero_grad", "START auto:forward", "END auto:forward", "START auto:backward", "END auto:backward",
        "START auto:optimizer", "END auto:optimizer", "MARK auto:step"]] * 3 for m in step]
    assert on["errors"] == ""
    assert "global hooks" not in stderr  # torch.compile's warning about global hooks


def test_sparse_gradients_are_not_walked(phases):
    ph, rec, err = phases
    torch.manual_seed(0)
    emb = nn.Embedding(10, 6, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        emb(torch.tensor([1, 2])).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
    assert err.getvalue() == ""
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2
    assert owner_walks(rec) == [(PARAMETER, [(emb.weight.data_ptr(), 240)])]


def test_input_walk_is_what_enters_the_root_forward(phases):
    """Positional and keyword tensors, one level into lists and dicts; a loss module's inputs
    (the model's output) are not walked; a keyword argument is seen in the first step (the
    global hook's caller) and after discovery (the root's own hook)."""
    ph, rec, err = phases
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x, extra=None, batch=None):
            return self.lin(x + extra[0] + batch["b"])

    model, loss_fn = Net(), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sent = []
    for _ in range(2):
        x, e, b, y = torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 4)
        opt.zero_grad()
        loss_fn(model(x, [e], batch={"b": b, "n": 3}), y).backward()
        opt.step()
        sent.append(sorted((t.data_ptr(), 64) for t in (x, e, b)))
        del x, e, b  # the next batch may land where this one was
    inputs = [w for role, w in rec.walks() if role == INPUT]
    assert [sorted(w) for w in inputs] == sent
    assert err.getvalue() == ""


def test_backward_lends_its_callers_frames(phases):
    # Autograd's engine thread runs no Python: at each outermost backward the Python side lends
    # the frames of the line that called it (the preload puts them behind the engine thread's
    # node), less its own two frames, and takes them back when backward returns.
    ph, rec, err = phases
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    line = sys._getframe().f_lineno + 1
    model(x).sum().backward()
    (lent, back) = rec.callers
    assert back is None
    assert lent[0][:2] == ("_tensor.py", "backward")  # Tensor.backward, torch's own
    assert ("test_phases.py", "test_backward_lends_its_callers_frames", line) in lent
    assert not any(f[0] == "cumemtrace_phases.py" for f in lent), lent
    rec.callers.clear()
    y = model(x).sum()
    line = sys._getframe().f_lineno + 1
    torch.autograd.grad(y, [x])
    (lent, back) = rec.callers
    assert lent[0] == ("test_phases.py", "test_backward_lends_its_callers_frames", line)
    assert back is None
    assert err.getvalue() == ""


def hooks_on(model, loss_fn):
    """Hooks and wrappers of ours in place: (global and optimizer hooks, per-root hooks, wrapped
    engine run)."""
    per_root = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in (model, loss_fn))
    return hooks_left(), per_root, torch.autograd._engine_run_backward is not ENGINE_RUN


def test_pause_takes_every_hook_out_and_resume_puts_them_back(phases):
    """The benchmarks' switch (bench/gpu/trainer_overhead.py): paused steps run with nothing of
    ours in torch and leave no mark; resumed steps are marked as before, with no new discovery and
    no walk sent again (nothing changed meanwhile)."""
    ph, rec, err = phases
    model, loss_fn = mlp(), nn.MSELoss()
    opt = torch.optim.Adam(model.parameters())
    # Both batches kept alive: the input walk is sent again only when the pointers move, and a
    # freed batch's memory may come back for the next one.
    first, last = batch(), batch()
    train(model, opt, 2, set_to_none=False, loss_fn=loss_fn, data=first)
    assert hooks_on(model, loss_fn) == (2, 4, True)  # the optimizer's two, two a root
    walks = owner_walks(rec)
    assert ph.pause() and not ph.pause()
    assert hooks_on(model, loss_fn) == (0, 0, False)
    wrapped = [(m, n, o, w) for m, n, o, w in ph._wrapped_names]
    assert len(wrapped) >= 3  # the engine run, the two zero_grad (and FSDP2's, once imported)
    assert all(getattr(m, n) is o for m, n, o, _ in wrapped)
    before = len(rec.events)
    train(model, opt, 3, set_to_none=False, loss_fn=loss_fn)
    assert len(rec.events) == before  # nothing marked, nothing walked
    assert ph.resume() and not ph.resume()
    assert hooks_on(model, loss_fn) == (2, 4, True)
    assert all(getattr(m, n) is w for m, n, _, w in wrapped)
    train(model, opt, 2, set_to_none=False, loss_fn=loss_fn, data=last)
    assert rec.marks() == one_step_marks() * 4
    assert owner_walks(rec) == walks  # the same parameters, gradients and state: not sent again
    assert [w[0] for w in rec.walks()].count(INPUT) == 2  # a new batch: its walk
    assert err.getvalue() == ""


def test_pause_during_discovery_resumes_discovery(phases):
    ph, rec, err = phases
    assert ph.pause()
    assert hooks_left() == 0
    model = mlp()
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), 1)
    assert rec.events == []
    assert ph.resume()
    assert len(MODULE._global_forward_pre_hooks) == 1  # still discovering: the roots are unknown
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)
    assert rec.marks() == one_step_marks() * 2


def test_pause_refused_inside_a_step(phases):
    """Inside a forward (or backward, step, zero_grad) pause changes nothing: the ranges it would
    leave open stay balanced."""
    ph, rec, err = phases
    model = mlp()
    results = []

    class Probe(nn.Module):
        def forward(self, x):
            results.append(ph.pause())
            return model(x)

    probe = Probe()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    nn.functional.mse_loss(probe(x), y).backward()
    opt.step()
    assert results == [False]
    assert rec.marks() == fwd() + bwd() + opt_step()


def test_module_pause_and_resume_without_phases(monkeypatch):
    monkeypatch.setattr(cumemtrace_phases, "_phases", None)
    assert cumemtrace_phases.pause() is False and cumemtrace_phases.resume() is False
