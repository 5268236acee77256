"""The automatic phases and ownership walks on the trainers people use, real frameworks from the
test venv on the CPU (tiny models built here, nothing downloaded), through the recording sink:
the exact mark sequences, and walk bytes equal to the framework's own parameters, gradients and
optimizer state. Forward, backward and zero_grad inside optimizer.step(closure) (LBFGS, PyTorch
Lightning's automatic optimization) are marked inside the optimizer's pair: the analysis takes
the innermost (collector/pytorch/phases.h)."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from conftest import bwd, fwd, loss, opt_step, zg

PARAMETER, GRADIENT, OPTIMIZER_STATE, INPUT, UNSHARDED = 1, 2, 3, 4, 5
COMMUNICATION, KV_CACHE = 7, 8
OPT_START, OPT_END = [("START", "auto:optimizer")], [("END", "auto:optimizer"),
                                                      ("MARK", "auto:step")]


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))  # 848 bytes


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def last_walk(rec, role):
    return [w for r, w in rec.walks() if r == role][-1]


def test_lbfgs_closure_phases_nest_in_the_step(phases):
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3, history_size=4)
    x, y = torch.randn(2, 8), torch.randn(2, 4)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        out = nn.functional.mse_loss(model(x), y)
        out.backward()
        return out

    for _ in range(2):
        opt.step(closure)
    assert len(calls) == 6  # max_iter=3: 3 evaluations a step
    evaluation = zg() + fwd() + bwd()
    assert rec.marks() == (OPT_START + evaluation * 3 + OPT_END) * 2
    assert err.getvalue() == ""
    # the state's lists (old_dirs, old_stps, ro, al) are walked too, and again each step
    state = opt.state[model[0].weight]
    tensors = [v for v in state.values() if isinstance(v, torch.Tensor)]
    tensors += [t for v in state.values() if isinstance(v, list) for t in v
                if isinstance(t, torch.Tensor)]
    walked = last_walk(rec, OPTIMIZER_STATE)
    assert sorted(walked) == sorted({(t.data_ptr(), t.nbytes) for t in tensors})
    assert sum(b for _, b in walked) == nbytes({t.data_ptr(): t for t in tensors}.values())
    assert len(state["old_dirs"]) >= 2


def test_grad_scaler_on_the_cpu(phases):
    """torch.amp.GradScaler("cpu") (bf16 autocast): scaler.step calls optimizer.step."""
    ph, rec, err = phases
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    assert scaler.is_enabled()
    x, y = torch.randn(2, 8), torch.randn(2, 4)
    for _ in range(3):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(out).backward()
        scaler.step(opt)
        scaler.update()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 3
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == 848
    assert sum(b for _, b in last_walk(rec, OPTIMIZER_STATE)) == nbytes(
        opt.state[p]["momentum_buffer"] for p in model.parameters())
    assert err.getvalue() == ""


def test_lightning_automatic_optimization(phases):
    pl = pytest.importorskip("pytorch_lightning")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()
            self.loss_fn = nn.MSELoss()

        def training_step(self, batch, i):
            x, y = batch
            return self.loss_fn(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    ph, rec, err = phases
    torch.manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(6, 8), torch.randn(6, 4))
    module = Module()
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
    # Lightning zeroes the gradients once before the loop, then each step runs training_step
    # (the net and the loss module are roots: LightningModule itself is never called),
    # zero_grad and backward inside optimizer.step(closure)
    closure = fwd() + loss() + zg() + bwd()
    assert rec.marks() == zg() + (OPT_START + closure + OPT_END) * 3
    opt = trainer.optimizers[0]
    params = list(module.parameters())
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == nbytes(params) == 848
    assert sum(b for _, b in last_walk(rec, GRADIENT)) == nbytes(p.grad for p in params)
    assert sum(b for _, b in last_walk(rec, OPTIMIZER_STATE)) == nbytes(
        v for s in opt.state.values() for v in s.values()) == 2 * 848 + 4 * 4
    assert err.getvalue() == ""


def seed_spy(monkeypatch, rec):
    """Records ("SEED", bytes) in rec's events each time backward or grad makes its seed
    gradients (torch.autograd._make_grads: a ones_like of the loss when none is given)."""
    make = torch.autograd._make_grads

    def spy(*args, **kwargs):
        seeds = make(*args, **kwargs)
        rec.events.append(("SEED", sum(g.nbytes for g in seeds if g is not None)))
        return seeds

    monkeypatch.setattr(torch.autograd, "_make_grads", spy)


def test_lightning_closure_seed_gradient_is_backward(phases, monkeypatch):
    """Lightning's closure calls loss.backward() inside optimizer.step(closure): the loss's seed
    gradient (torch.ones_like(loss), 512 B on a GPU) is made inside auto:backward, not in the
    optimizer's remainder (on an H100 it was the first step's "optimizer: unknown +512 B")."""
    pl = pytest.importorskip("pytorch_lightning")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    ph, rec, err = phases
    seed_spy(monkeypatch, rec)
    torch.manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(4, 8), torch.randn(4, 4))
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=2))
    backward = [("START", "auto:backward"), ("SEED", 4), ("END", "auto:backward")]
    assert rec.marks() == zg() + (OPT_START + fwd() + zg() + backward + OPT_END) * 2
    assert err.getvalue() == ""


def test_plain_loop_and_grad_seed_gradients_are_backward(phases, monkeypatch):
    ph, rec, err = phases
    seed_spy(monkeypatch, rec)
    model = mlp()
    x = torch.randn(2, 8, requires_grad=True)
    model(x).sum().backward()
    torch.autograd.grad(model(x).sum(), [x])
    backward = [("START", "auto:backward"), ("SEED", 4), ("END", "auto:backward")]
    assert rec.marks() == fwd() + backward + fwd() + backward
    assert err.getvalue() == ""


def test_lightning_manual_optimization(phases):
    """self.automatic_optimization = False: the user's training_step zeroes, calls
    manual_backward and opt.step() (Lightning's LightningOptimizer wraps the optimizer): the same
    phases as a plain loop, with Lightning's one zero_grad before the loop."""
    pl = pytest.importorskip("pytorch_lightning")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()
            self.automatic_optimization = False

        def training_step(self, batch, i):
            opt = self.optimizers()
            x, y = batch
            opt.zero_grad()
            out = nn.functional.mse_loss(self.net(x), y)
            self.manual_backward(out)
            opt.step()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    ph, rec, err = phases
    torch.manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(6, 8), torch.randn(6, 4))
    module = Module()
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
    assert rec.marks() == zg() + (zg() + fwd() + bwd() + opt_step()) * 3
    params = list(module.parameters())
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == nbytes(params) == 848
    assert sum(b for _, b in last_walk(rec, GRADIENT)) == nbytes(p.grad for p in params) == 848
    assert sum(b for _, b in last_walk(rec, OPTIMIZER_STATE)) == 2 * 848 + 4 * 4
    assert err.getvalue() == ""


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_inside_backward(phases, reentrant):
    """torch.utils.checkpoint: the checkpointed block's forward runs again inside backward to
    rebuild what it did not save. That recompute is no forward phase (the hooks see a module called
    inside backward): its tensors are made and freed within backward, "temporary"
    (collector/pytorch/categories.h, rule 3), never counted again as activations."""
    from torch.utils.checkpoint import checkpoint

    calls = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = mlp()
            self.head = nn.Linear(4, 4)
            self.block.register_forward_pre_hook(lambda m, a: calls.append(1))

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=reentrant))

    ph, rec, err = phases
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 8, requires_grad=reentrant)  # reentrant needs an input that requires grad
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    assert len(calls) == 4  # the block ran twice a step: forward, then its recompute in backward
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2
    assert sum(b for _, b in last_walk(rec, GRADIENT)) == nbytes(
        p.grad for p in model.parameters()) == 848 + 80
    assert err.getvalue() == ""


def test_generate_is_iterations_of_forward(phases):
    """transformers' generate (tiny GPT-2, greedy): one forward per new token, each its own
    iteration (the root called again), no backward or optimizer phase; its inputs walked each
    time (the prompt, then the one new token and its position)."""
    transformers = pytest.importorskip("transformers")
    ph, rec, err = phases
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(1, 64, (1, 4))
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                         do_sample=False, pad_token_id=0)
    assert out.shape == (1, 7)
    assert rec.marks() == fwd() * 3
    inputs = [[b for _, b in w] for r, w in rec.walks() if r == INPUT]
    assert inputs[0] == [4 * 8, 4 * 8]  # the prompt's ids and attention mask (int64)
    assert len(inputs) == 3
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == nbytes(
        {p.data_ptr(): p for p in model.parameters()}.values())
    assert [r for r, _ in rec.walks()].count(GRADIENT) == 0
    # the KV cache each forward returned (no_grad): 1 layer's keys and values, (1, 2 heads,
    # tokens so far, 8) float32 each: 4, 5, then 6 tokens
    kv = [sorted(b for _, b in w) for r, w in rec.walks() if r == KV_CACHE]
    assert kv == [[4 * 64] * 2, [5 * 64] * 2, [6 * 64] * 2]
    assert err.getvalue() == ""


def test_transformers_trainer_gradient_accumulation(phases, tmp_path):
    transformers = pytest.importorskip("transformers")
    ph, rec, err = phases
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64,
                                     n_positions=16, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (8, 8))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=2,
        max_steps=2, report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
        disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    # model.zero_grad() before the loop and after each update; two micro-steps per update
    # (the loss is computed inside the model's forward: no loss module)
    update = (fwd() + bwd()) * 2 + opt_step() + zg()
    assert rec.marks() == zg() + update * 2
    params = list(model.parameters())
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == nbytes(
        {p.data_ptr(): p for p in params}.values())  # the tied embedding counts once
    opt = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") \
        else trainer.optimizer
    assert sum(b for _, b in last_walk(rec, OPTIMIZER_STATE)) == nbytes(
        v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))
    # the batch enters the root's forward as keyword arguments
    assert len(last_walk(rec, INPUT)) >= 2
    assert err.getvalue() == ""


@pytest.mark.parametrize("process_group", [1, 2], indirect=True)
def test_fsdp2_walks_are_the_local_shards(phases, process_group):
    from torch.distributed.fsdp import fully_shard
    ph, rec, err = phases
    world = process_group
    model = mlp()
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    params = list(model.parameters())
    assert params[0].data_ptr() == 0  # a DTensor: its own pointer says nothing
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(2, 8), torch.randn(2, 4)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2
    local = [p.to_local() for p in params]
    assert sorted(last_walk(rec, PARAMETER)) == sorted((t.data_ptr(), t.nbytes) for t in local)
    assert sum(b for _, b in last_walk(rec, PARAMETER)) == nbytes(local)
    if world == 2:
        assert nbytes(local) < 848  # this rank's shards only
    grads = [p.grad.to_local() for p in params]
    assert sorted(last_walk(rec, GRADIENT)) == sorted((g.data_ptr(), g.nbytes) for g in grads)
    state = [v.to_local() if hasattr(v, "to_local") else v
             for s in opt.state.values() for v in s.values()]
    assert sum(b for _, b in last_walk(rec, OPTIMIZER_STATE)) == nbytes(state)
    # the all-gathered (full-size) parameters, walked each time a parameter group gathered
    # them: in forward (layer 0, then 2) and again in backward (2, then 0), every step
    unsharded = [[b for _, b in w] for r, w in rec.walks() if r == UNSHARDED]
    assert unsharded == [[512, 64], [256, 16], [256, 16], [512, 64]] * 2
    # FSDP2's flat communication buffers: each group's all-gather output (world 2 only: at world
    # 1 FSDP2 copies the shard, no buffer) as its wait begins, in forward (0, 2) and backward (2,
    # 0), and each group's reduce-scatter input after its post_backward (2, then 0): the layer's
    # full size, 512 + 64 and 256 + 16 bytes
    comm = [[b for _, b in w] for r, w in rec.walks() if r == COMMUNICATION]
    if world == 2:
        assert comm == [[576], [272], [272], [272], [576], [576]] * 2
    else:
        assert comm == [[272], [576]] * 2
    assert err.getvalue() == ""


def test_ddp_under_torchrun_phases_per_rank(tmp_path):
    """DistributedDataParallel on gloo, world 2, launched by torchrun (ddp_ranks.py): every rank
    has its own phases (DDP's wrapper is the root; the reducer's all-reduce runs inside backward)
    and walks its own replica: parameters, gradients and momentum, 848 bytes each. DDP's reducer
    buckets are not walked (no binding returns them): with gradient_as_bucket_view=True the
    gradients are views into them (the gradient walk's pointers lie inside the buckets, which the
    analysis then labels gradient); by default they are flat copies, which the collector labels
    communication by the frames that make them (categories.h rule 1b): the Reducer is built from
    DistributedDataParallel._ddp_init_helper and rebuilds its buckets (the second forward, once
    the first backward has seen the parameters' order) from ._pre_forward, as checked here."""
    env = dict(os.environ, CT_SOURCE=os.environ.get("CT_SOURCE", os.path.join(
        os.path.dirname(__file__), "..", "..")), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", "2",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_ranks.py"),
                        str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    for rank in (0, 1):
        with open(tmp_path / ("rank%d.json" % rank)) as f:
            got = json.load(f)
        assert got["err"] == ""
        assert got["reducer_calls"] == [
            ["Reducer", "DistributedDataParallel._ddp_init_helper"],
            ["_rebuild_buckets", "DistributedDataParallel._pre_forward"]]
        assert [tuple(m) for m in got["marks"]] == (zg() + fwd() + bwd() + opt_step()) * 2
        walks = [(r, [tuple(x) for x in w]) for r, w in got["walks"]]
        assert [r for r, _ in walks] == [PARAMETER, INPUT, GRADIENT, OPTIMIZER_STATE, GRADIENT]
        assert sorted(list(x) for x in walks[-1][1]) == got["grads"]
        assert got["params"] == got["state"] == 848
        assert sum(b for _, b in walks[0][1]) == 848
