"""Real-GPU check of the automatic phases and categories on the trainers people use (issue 54):
PyTorch Lightning (automatic optimization), torch.optim.LBFGS, transformers' Trainer (a tiny GPT-2
built from a config, gradient accumulation 2), FSDP2 (fully_shard, world size 1 on NCCL),
activation checkpointing, torch.compile(mode="reduce-overhead") (CUDA graphs) and transformers'
generate (KV cache), each unmarked, run under `cumemtrace run`.

Usage: python3 tests/gpu/validate_trainers.py [PREFIX with bin/cumemtrace (default build)] [OUT]
       (needs torch with CUDA, pytorch-lightning, transformers; about a minute)

Each scenario is this file run again under cumemtrace (`--scenario NAME TRUTH`): it trains for a
few steps with no cumemtrace code, then writes the framework's own figures to TRUTH (the bytes of
its parameters, gradients and optimizer state, each storage once, as the allocator's blocks:
rounded up to 512 B; torch.cuda.max_memory_allocated()) and leaves one annotation,
`validate:end`, the moment those figures describe (the only mark the script makes; the phases
stay automatic). One table row per comparison, '| scenario | what | PASS/FAIL | ours / theirs |':
- the steady step's phases (the ledger's last complete step) are named, include the scenario's
  own (forward, backward, optimizer, and zero_grad / loss where the trainer runs them) and none
  is "other"; generate: one forward per new token and no backward or optimizer phase;
- generate: the KV cache's bytes (category kv_cache) equal the returned cache's;
- the bytes of tensors labelled parameter, gradient and optimizer_state live at validate:end
  equal the framework's own (within 1%: a large block may keep up to 1 MiB it did not split;
  both sides printed);
  compiled: the gradients of a replayed step are the CUDA graphs' outputs, rebuilt over the
  graph pool with no allocator call (their blocks are freed in the trace): ours are the ledger's
  gradients held in the graph pool at the end of the last step (held_outside_blocks; validate:end
  follows that step with no zero_grad between) plus the live tensors labelled gradient;
- torch's cuBLAS workspaces live at validate:end are labelled cublas_workspace (every scenario
  runs cuBLAS); compiled: CUDA graph trees clear torch's workspaces after every warm-up and
  recording, so none is live at the end: the recordings' workspaces (allocated while the graphs
  are recorded, CUDAGraphNode._record) must be labelled cublas_workspace instead;
- no tensor of category "unknown" in the first and steady steps' phases (NO_UNKNOWN);
- FSDP2: the by-module view's parameters, gradients and optimizer state per module (depth 1)
  equal the module's own local shards, to the byte, and "(no module)" holds none of them;
- the ledger's allocated peak against max_memory_allocated() (printed; PASS within 1%).
Exit 1 on any FAIL or error.
"""
import json
import os
import subprocess
import sys

MIB = 1 << 20
BLOCK = 512

SCENARIOS = {
    # name: phases the steady step must show
    "lightning": {"forward", "loss", "zero_grad", "backward", "optimizer"},
    "lbfgs": {"zero_grad", "forward", "backward", "optimizer"},
    "trainer": {"zero_grad", "forward", "backward", "optimizer"},
    "fsdp2": {"zero_grad", "forward", "backward", "optimizer"},
    "checkpoint": {"zero_grad", "forward", "backward", "optimizer"},
    "compiled": {"zero_grad", "forward", "backward", "optimizer"},
    "generate": None,  # inference: GENERATE_TOKENS forwards, no step (checked apart)
}
GENERATE_TOKENS = 8
# Scenarios whose first and steady steps must hold no tensor of category "unknown" (Lightning:
# the loss's seed gradient, made by backward() inside its closure, was one: 512 B; LBFGS: its
# working tensors, freed within the step but across the closure's calls, were ~100 MB; the
# Trainer: clip_grad_norm_'s total norm, made between backward and the step and kept for its
# logs, 512 B, is the program's own).
NO_UNKNOWN = {"trainer", "lightning", "lbfgs", "fsdp2", "checkpoint", "compiled"}


# ---- the scenarios (run under cumemtrace) -------------------------------------------------------

def block_bytes(tensors):
    """Each storage once, as the caching allocator's block (rounded up to 512 B)."""
    import torch
    seen = {}
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            continue
        st = t.untyped_storage()
        seen[st.data_ptr()] = (st.nbytes() + BLOCK - 1) // BLOCK * BLOCK
    return sum(seen.values())


def state_tensors(opt):
    import torch
    out = []
    for s in opt.state.values():
        for v in s.values():
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                out.extend(x for x in v if isinstance(x, torch.Tensor))
    return out


def mlp(torch, width=1024):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                         nn.GELU(), nn.Linear(width, 16))


def run_lightning(torch, truth_path):
    import pytorch_lightning as pl
    nn = torch.nn

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(torch)
            self.loss_fn = nn.CrossEntropyLoss()

        def training_step(self, batch, i):
            x, y = batch
            return self.loss_fn(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    class AtTrainEnd(pl.Callback):
        """The figures while training's objects are on the GPU: fit's teardown then moves the
        module and the optimizer state to the CPU (what made this row compare 0 / 0 B)."""

        def on_train_end(self, trainer, module):
            params = list(module.parameters())
            write_truth(torch, truth_path, params, [p.grad for p in params],
                        state_tensors(trainer.optimizers[0]))

    data = torch.utils.data.TensorDataset(torch.randn(64, 1024), torch.randint(0, 16, (64,)))
    module = Module()
    trainer = pl.Trainer(max_steps=5, accelerator="gpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[AtTrainEnd()])
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=16))
    return None  # the truth is written, the mark made, at the end of training


def run_lbfgs(torch, truth_path):
    nn = torch.nn
    model = mlp(torch).cuda()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=4, history_size=5)
    x, y = torch.randn(256, 1024, device="cuda"), torch.randint(0, 16, (256,), device="cuda")
    for _ in range(5):
        def closure():
            opt.zero_grad()
            out = nn.functional.cross_entropy(model(x), y)
            out.backward()
            return out
        opt.step(closure)
    params = list(model.parameters())
    return params, [p.grad for p in params], state_tensors(opt), model


def run_trainer(torch, truth_path):
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=1024,
                                     n_positions=128, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 1024, (64, 128))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = transformers.TrainingArguments(
        output_dir=os.environ.get("TMPDIR", "/tmp") + "/validate_trainers_out",
        per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=5, report_to=[],
        save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    params = list(model.parameters())
    # Trainer ends each update with model.zero_grad(): no gradient is held at the end
    return params, [p.grad for p in params], state_tensors(opt), trainer


def run_fsdp2(torch, truth_path):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    model = mlp(torch).cuda()
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(64, 1024, device="cuda"), torch.randint(0, 16, (64,), device="cuda")
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    params = list(model.parameters())
    return params, [p.grad for p in params], state_tensors(opt), (model, dist, opt)


def module_truth(model, opt):
    """Per module of depth 1 that holds parameters: its parameters', gradients' and optimizer
    state's bytes (this rank's local shards under FSDP2), as the by-module view counts them."""
    out = {}
    for name, m in model.named_children():
        params = list(m.parameters())
        if params:
            out[name] = {"parameters": block_bytes(params),
                         "gradients": block_bytes(p.grad for p in params),
                         "optimizer_state": block_bytes(
                             v for p in params for v in opt.state.get(p, {}).values())}
    return out


def write_truth(torch, truth_path, params, grads, state, kv_cache=None, modules=None):
    """The framework's own figures now, and the one mark (validate:end) that says when."""
    import ctypes
    torch.cuda.synchronize()
    truth = {"parameter": block_bytes(params), "gradient": block_bytes(grads),
             "optimizer_state": block_bytes(state),
             "max_memory_allocated": torch.cuda.max_memory_allocated()}
    if kv_cache is not None:
        truth["kv_cache"] = block_bytes(kv_cache)
    if modules is not None:
        truth["modules"] = modules
    if not truth["parameter"]:
        raise SystemExit("no parameter on the GPU at the truth's moment: nothing to compare")
    with open(truth_path, "w") as f:
        json.dump(truth, f)
    ctypes.PyDLL(None).cumemtrace_mark(b"validate:end")


def run_checkpoint(torch, truth_path):
    """Activation checkpointing: each block's forward runs again inside backward."""
    from torch.utils.checkpoint import checkpoint
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(mlp(torch)[:4] for _ in range(2))
            self.head = nn.Linear(1024, 16)

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=False)
            return self.head(x)

    model = Net().cuda()
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(256, 1024, device="cuda"), torch.randint(0, 16, (256,), device="cuda")
    for _ in range(5):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    params = list(model.parameters())
    return params, [p.grad for p in params], state_tensors(opt), model


def run_compiled(torch, truth_path):
    """torch.compile(model, mode="reduce-overhead"): Inductor with CUDA graph trees (a private
    pool; replays make no allocator call)."""
    nn = torch.nn
    model = mlp(torch).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(256, 1024, device="cuda"), torch.randint(0, 16, (256,), device="cuda")
    for _ in range(6):
        opt.zero_grad()
        nn.functional.cross_entropy(compiled(x), y).backward()
        opt.step()
    params = list(model.parameters())
    return params, [p.grad for p in params], state_tensors(opt), (model, compiled)


def run_generate(torch, truth_path):
    """transformers' generate, greedy, GENERATE_TOKENS new tokens: one forward each; the cache
    it returns (return_dict_in_generate) is the KV cache, kept until validate:end."""
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=1024,
                                     n_positions=128, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).cuda().eval()
    ids = torch.randint(1, 1024, (4, 32), device="cuda")
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GENERATE_TOKENS,
                         min_new_tokens=GENERATE_TOKENS, do_sample=False, pad_token_id=0,
                         return_dict_in_generate=True)
    cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
    kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    params = list(model.parameters())
    write_truth(torch, truth_path, params, [], [], kv_cache=kv)
    return None


def scenario(name, truth_path):
    import torch
    got = globals()["run_" + name](torch, truth_path)
    if got is None:
        return None
    params, grads, state, keep = got
    write_truth(torch, truth_path, params, grads, state,
                modules=module_truth(keep[0], keep[2]) if name == "fsdp2" else None)
    if name == "fsdp2":
        keep[1].destroy_process_group()
    return keep


# ---- the comparison -----------------------------------------------------------------------------

rows, failed = [], []


def row(scen, what, ok, detail):
    rows.append("| %-9s | %-44s | %s | %s" % (scen, what, "PASS" if ok else "FAIL", detail))
    if not ok:
        failed.append((scen, what))


def live_by_category(snap, t_end):
    """Bytes of PyTorch's tensors live at t_end on device 0, by the category the collector wrote."""
    live = {}
    for e in snap["device_traces"][0]:
        if e["time_us"] > t_end or e.get("source") != "pytorch":
            continue
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("category"))
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    out = {}
    for size, cat in live.values():
        out[cat] = out.get(cat, 0) + size
    return out


def close(a, b):
    return a == b or (b > 0 and abs(a - b) <= 0.01 * b)


def check(name, ct, out):
    truth_path = os.path.join(out, name + ".truth.json")
    traces = os.path.join(out, "t_" + name)
    p = subprocess.run([ct, "run", "-q", "-o", traces, "--", sys.executable,
                        os.path.abspath(__file__), "--scenario", name, truth_path],
                       capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.write(p.stdout + p.stderr)
    snaps = sorted(x for x in os.listdir(traces) if x.endswith(".json") and ".oom." not in x) \
        if os.path.isdir(traces) else []
    if p.returncode != 0 or not snaps or not os.path.exists(truth_path):
        row(name, "ran under cumemtrace", False,
            "exit %d, %d snapshot(s); see %s.log" % (p.returncode, len(snaps), name))
        return
    path = os.path.join(traces, snaps[0])
    with open(path) as f:
        snap = json.load(f)
    with open(truth_path) as f:
        truth = json.load(f)
    rep = json.loads(subprocess.run([ct, "report", "--format", "json", path],
                                    capture_output=True, text=True).stdout or "{}")
    led = (rep.get("pytorch_ledger") or {}).get("devices") or []
    if not led:
        row(name, "ledger (automatic phases)", False, "no PyTorch ledger in the report")
        return
    dev = led[0]
    want = SCENARIOS[name]
    if want is not None:
        steady = dev.get("steady_step") or {}
        names = [ph["phase"] for ph in steady.get("phases", [])]
        ok = bool(names) and want <= set(names) and "other" not in names
        row(name, "steady step %s: phases named" % steady.get("step"), ok, " ".join(names))
    else:
        marks = [a["name"] for a in snap.get("external_annotations", []) if a["stage"] == "START"]
        row(name, "one forward per token, no step", marks.count("auto:forward") ==
            GENERATE_TOKENS and "auto:backward" not in marks and "auto:optimizer" not in marks,
            "%d forwards, %d backward, %d optimizer" % (
                marks.count("auto:forward"), marks.count("auto:backward"),
                marks.count("auto:optimizer")))
    ends = [a["time_us"] for a in snap.get("external_annotations", [])
            if a["name"] == "validate:end"]
    if not ends:
        row(name, "validate:end mark", False, "not in the snapshot")
        return
    live = live_by_category(snap, ends[-1])
    held = dev.get("held_outside_blocks") or {}
    for cat in ("parameter", "gradient", "optimizer_state", "kv_cache"):
        if cat not in truth:
            continue
        ours, theirs = live.get(cat, 0), truth[cat]
        detail = "%d / %d B" % (ours, theirs)
        if cat == "gradient" and held.get("gradient_bytes"):
            pool = held["gradient_bytes"]
            detail = "%d / %d B (%d B in blocks + %d B held in %s)" % (
                ours + pool, theirs, ours, pool,
                "the CUDA graph pool" if held.get("graph_pool") else "no block")
            ours += pool
        row(name, cat + " bytes at the end = the framework's", close(ours, theirs), detail)
    if held.get("outside_segments_bytes"):
        row(name, "walked gradients the trace cannot place", False,
            "%d B: %s" % (held["outside_segments_bytes"], held.get("outside_segments_why")))
    # torch's cuBLAS workspaces (32 MiB per thread that ran cuBLAS on Hopper, cuBLASLt's 1 MiB)
    # have their category, read from torch's own maps: not activation or autograd for ever
    if name == "compiled":
        rec = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and
               e.get("source") == "pytorch" and any(
                   f.get("name") == "CUDAGraphNode._record" for f in e.get("frames") or [])]
        ws = [e["size"] for e in rec if e.get("category") == "cublas_workspace"]
        row(name, "the recordings' cuBLAS workspaces labelled", bool(ws),
            "%d of %d recording allocations, %.2f MiB; %.2f MiB live at the end" % (
                len(ws), len(rec), sum(ws) / MIB, live.get("cublas_workspace", 0) / MIB))
    else:
        row(name, "cuBLAS workspaces labelled as such", live.get("cublas_workspace", 0) > 0,
            "%.2f MiB" % (live.get("cublas_workspace", 0) / MIB))
    others = {k: v for k, v in live.items()
              if k not in ("parameter", "gradient", "optimizer_state", "kv_cache")}
    row(name, "other tensors live at the end (shown)", True,
        ", ".join("%s %s" % (k, "%.2f MiB" % (v / MIB)) for k, v in sorted(others.items(),
                                                                          key=str)) or "none")
    if name in NO_UNKNOWN:
        unknown = ["%s %s %+d B" % (key.split("_")[0], ph["phase"],
                                    ph["added_tensor_bytes_by_category"]["unknown"])
                   for key in ("first_step", "steady_step")
                   for ph in (dev.get(key) or {}).get("phases", [])
                   if ph.get("added_tensor_bytes_by_category", {}).get("unknown")]
        row(name, "no tensor \"unknown\" in the steps' phases", not unknown,
            ", ".join(unknown) or "none")
    if "modules" in truth:
        check_modules(name, ct, path, truth["modules"])
    peak = (dev.get("allocated_peak") or {}).get("allocated_bytes", 0)
    mma = truth["max_memory_allocated"]
    row(name, "allocated peak vs max_memory_allocated()", close(peak, mma),
        "%d / %d B (%+d)" % (peak, mma, peak - mma))


def check_modules(name, ct, path, want):
    """The by-module view at depth 1 (report --module-depth 1): each module's parameters,
    gradients and optimizer state equal its own (this rank's shards), to the byte; none of
    those bytes is "(no module)"."""
    rep = json.loads(subprocess.run([ct, "report", "--format", "json", "--top", "1000",
                                     "--module-depth", "1", path],
                                    capture_output=True, text=True).stdout or "{}")
    rows_ = {r["module"]: r for r in (rep.get("modules") or {}).get("rows", [])}
    for module, cats in sorted(want.items()):
        for cat, theirs in sorted(cats.items()):
            ours = rows_.get(module, {}).get(cat, 0)
            row(name, "module %s: %s = its own" % (module, cat), ours == theirs,
                "%d / %d B" % (ours, theirs))
    nobody = rows_.get("(no module)", {})
    stray = sum(nobody.get(c, 0) for c in ("parameters", "gradients", "optimizer_state"))
    row(name, "(no module): no parameter, gradient or state", stray == 0, "%d B" % stray)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--scenario":
        scenario(sys.argv[2], sys.argv[3])
        return 0
    prefix = sys.argv[1] if len(sys.argv) > 1 else "build"
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cumemtrace-trainers"
    ct = os.path.join(prefix, "bin", "cumemtrace")
    os.makedirs(out, exist_ok=True)
    for name in SCENARIOS:
        try:
            check(name, ct, out)
        except Exception as e:  # one scenario's error is its FAIL row, the others still run
            row(name, "validation", False, "%s: %s" % (type(e).__name__, e))
    print("| %-9s | %-44s | verdict | ours / theirs" % ("scenario", "what"))
    print("\n".join(rows))
    print("%d rows, %d FAIL" % (len(rows), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
