"""The names side of the by-module view (preload/python/cumemtrace_modules.py) on the real PyTorch
(CPU tensors): the module table a root's first forward sends, and beside each ownership walk the
name of every tensor's parameter, on a GPT-style model and transformers' GPT-2 (a tiny config
built here, no download). Per module and depth, the walk's bytes joined with the names equal the
model's own named_parameters() sums; gradients and optimizer state carry their parameter's name."""
import io

import pytest
import torch
import torch.nn as nn

import cumemtrace_modules
import cumemtrace_phases
from conftest import ENGINE_RUN, Recorder, hooks_left

PARAMETER, GRADIENT, STATE = 1, 2, 3


class NamesRecorder:
    """A sink that records what the preload would get: the code address, then (what, pairs)."""

    def __init__(self):
        self.code = None
        self.tables = []

    def module_code(self, address):
        self.code = address

    def names(self, what, pairs):
        self.tables.append((what, dict(pairs)))

    def latest(self, what):
        return [t for w, t in self.tables if w == what][-1]


@pytest.fixture
def named():
    assert hooks_left() == 0
    rec, names, err = Recorder(), NamesRecorder(), io.StringIO()
    ph = cumemtrace_phases.Phases(torch, rec, "cpu", err,
                                  cumemtrace_modules.Modules(torch, names))
    ph.install()
    yield rec, names, err
    ph.uninstall()
    assert hooks_left() == 0
    assert torch.autograd._engine_run_backward is ENGINE_RUN


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln(x))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.h = nn.ModuleList([Block(d) for _ in range(layers)])
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, idx):
        x = self.wte(idx)
        for b in self.h:
            x = b(x)
        return self.lm_head(x)


def gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32)
    return transformers.GPT2LMHeadModel(cfg)


def train(model, steps=2):
    opt = torch.optim.Adam(model.parameters())
    idx = torch.randint(0, 64, (2, 16))
    for _ in range(steps):
        opt.zero_grad()
        out = model(idx)
        logits = out.logits if hasattr(out, "logits") else out
        logits.float().pow(2).mean().backward()
        opt.step()
    return opt


def by_module(pairs, names, depth):
    """{module at depth: bytes} of the walk's (pointer, bytes) pairs joined with pointer names."""
    out = {}
    for ptr, nbytes in pairs:
        module = names[ptr].rsplit(".", 1)[0] if "." in names[ptr] else ""
        key = ".".join(module.split(".")[:depth])
        out[key] = out.get(key, 0) + nbytes
    return out


def expected(model, depth):
    out = {}
    for name, p in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        key = ".".join(module.split(".")[:depth])
        out[key] = out.get(key, 0) + p.nbytes
    return out


@pytest.mark.parametrize("make", [GPT, gpt2], ids=["gpt-style", "gpt2"])
def test_per_module_parameters_are_the_models_own(named, make):
    rec, names, err = named
    torch.manual_seed(0)
    model = make()
    opt = train(model)
    assert err.getvalue() == ""
    assert names.code == id(torch.nn.Module._wrapped_call_impl.__code__)
    # The module table: every module of the model by its object's address, the root by its class.
    table = names.latest(0)
    want = {id(m): (n or type(model).__name__) for n, m in model.named_modules()}
    assert table == want
    walks = dict(((role, tuple(pairs)) for role, pairs in rec.walks()))
    params = names.latest(PARAMETER)
    assert set(params) == {p for p, _ in walks[PARAMETER]}
    for depth in (1, 2, 3, 4):
        assert by_module(walks[PARAMETER], params, depth) == expected(model, depth)
    # Gradients and optimizer state are named after their parameter.
    by_id = {id(p): n for n, p in model.named_parameters()}
    grads = names.latest(GRADIENT)
    assert grads == {p.grad.data_ptr(): by_id[id(p)] for p in model.parameters()}
    state = names.latest(STATE)
    assert state == {v.data_ptr(): by_id[id(p)] for p, st in opt.state.items()
                     for v in st.values() if torch.is_tensor(v)}
    assert len(set(state.values())) == len(list(model.parameters()))


@pytest.mark.parametrize("process_group", [1, 2], indirect=True)
def test_fsdp2_shards_are_named_by_their_parameter(named, process_group):
    """FSDP2 (fully_shard: DTensor parameters, gradients and Adam state, whose own data_ptr() is
    0) on gloo (world 1) and the fake process group (world 2): the walk keys each by its local
    shard, and the names key the same pointers, so each module holds its shards' bytes."""
    from torch.distributed.fsdp import fully_shard
    rec, names, err = named
    world = process_group
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    assert next(model.parameters()).data_ptr() == 0
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(2, 8), torch.randn(2, 4)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert err.getvalue() == ""
    walks = {role: pairs for role, pairs in rec.walks() if role in (PARAMETER, GRADIENT, STATE)}
    by_name = {n: p for n, p in model.named_parameters()}

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    want = {PARAMETER: {local(p).data_ptr(): n for n, p in by_name.items()},
            GRADIENT: {local(p.grad).data_ptr(): n for n, p in by_name.items()},
            STATE: {local(v).data_ptr(): n for n, p in by_name.items()
                    for v in opt.state[p].values()}}
    for role in (PARAMETER, GRADIENT, STATE):
        assert names.latest(role) == want[role], role
        assert set(names.latest(role)) == {ptr for ptr, _ in walks[role]}, role
    # Bytes per module: this rank's shards (dim 0 of each weight and bias), Adam's exp_avg and
    # exp_avg_sq as sharded as their parameter, and its `step`, a plain 4-byte scalar each.
    shard = {1: {"0": 16 * 8 * 4 + 16 * 4, "2": 4 * 16 * 4 + 4 * 4},
             2: {"0": 8 * 8 * 4 + 8 * 4, "2": 2 * 16 * 4 + 2 * 4}}[world]
    assert by_module(walks[PARAMETER], names.latest(PARAMETER), 1) == shard
    assert by_module(walks[GRADIENT], names.latest(GRADIENT), 1) == shard
    assert by_module(walks[STATE], names.latest(STATE), 1) == {
        m: 2 * b + 2 * 4 for m, b in shard.items()}


def test_wrapper_prefixes_are_stripped(named):
    rec, names, err = named

    class Wrapper(nn.Module):  # DDP's shape: the model is `module`
        def __init__(self, m):
            super().__init__()
            self.module = m

        def forward(self, x):
            return self.module(x)

    inner = GPT()
    train(Wrapper(inner), steps=1)
    table = names.latest(0)
    assert table[id(inner.h[1].mlp)] == "h.1.mlp"
    assert table[id(inner)] == "GPT"
    assert set(names.latest(PARAMETER).values()) == {n for n, _ in inner.named_parameters()}
    assert cumemtrace_modules.strip_wrappers("module._orig_mod.h.0._checkpoint_wrapped_module.mlp"
                                             ) == "h.0.mlp"


def test_a_new_submodule_renames_at_the_step(named):
    rec, names, err = named
    model = GPT()
    opt = torch.optim.Adam(model.parameters())
    idx = torch.randint(0, 64, (2, 8))
    model(idx).sum().backward()
    opt.step()
    sent = len([w for w, _ in names.tables if w == 0])
    model.extra = nn.Linear(2, 2)
    model(idx).sum().backward()
    opt.step()
    assert len([w for w, _ in names.tables if w == 0]) == sent + 1
    assert names.latest(0)[id(model.extra)] == "extra"


def test_a_replaced_submodule_renames_at_the_step(named):
    """Replacing a module (the count stays the same) names the new object at the step's end, and
    a step that changed nothing sends no table."""
    rec, names, err = named
    model = GPT()
    opt = torch.optim.Adam(model.parameters())
    idx = torch.randint(0, 64, (2, 8))
    for _ in range(2):
        model(idx).sum().backward()
        opt.step()
    sent = len([w for w, _ in names.tables if w == 0])
    old = model.h[1].mlp[0]
    model.h[1].mlp[0] = nn.Linear(old.in_features, old.out_features)
    model(idx).sum().backward()
    opt.step()
    assert len([w for w, _ in names.tables if w == 0]) == sent + 1
    assert names.latest(0)[id(model.h[1].mlp[0])] == "h.1.mlp.0"
    model(idx).sum().backward()
    opt.step()
    assert len([w for w, _ in names.tables if w == 0]) == sent + 1


def test_records_memo_gives_the_same_texts():
    pairs = [(0x7f0000000000 + i, "transformer.h.%d.mlp.c_fc" % i) for i in range(400)]
    memo = {}
    first = cumemtrace_modules.lines_records(pairs, memo)
    assert first == cumemtrace_modules.lines_records(pairs) == \
        cumemtrace_modules.lines_records(pairs, memo)
    assert len(memo) == 400


def test_records_hold_whole_lines():
    pairs = [(0x7f0000000000 + i, "transformer.h.%d.mlp.c_fc" % i) for i in range(400)]
    texts = cumemtrace_modules.lines_records(pairs)
    assert len(texts) > 1
    assert all(len(t) <= cumemtrace_modules.RECORD_BYTES and t.endswith(b"\n") for t in texts)
    back = [ln.split(b" ", 1) for t in texts for ln in t.splitlines()]
    assert [(int(a, 16), n.decode()) for a, n in back] == pairs
