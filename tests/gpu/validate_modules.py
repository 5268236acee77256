"""Real-GPU check of the by-module view (issue 54 item 3): a GPT-style model and transformers'
GPT-2 (tiny config built here, no download), unmarked, trained under cumemtrace; the report's
per-module table (depths 1 to 5) against the models' own named_parameters() sums and against
PyTorch's MemTracker (torch.distributed._tools.mem_tracker) run on the same loop in its own
process. Prints '| what | PASS/FAIL | ours / theirs |' rows; exit 1 on any FAIL or error.

Usage: python3 tests/gpu/validate_modules.py [BUILD (default build)] [OUT (default
/tmp/cumemtrace-modules)]. About a minute on an H100.

What must agree, per module row that MemTracker also has (a called module at depths 1 to 5):
- parameters, and gradients at the step's end: exactly the sum of named_parameters() under the
  row (a tied weight counts under its first name, as named_parameters() lists it);
- activations (what the module's forward saved, alive when backward starts) with MemTracker's
  activations the module's forward left (its Post-Forward minus Pre-Forward "Activation") less
  the module's outputs freed before backward starts (FreedOutputs: GPT-2's embeddings' outputs,
  dropped by their sum), within 1%;
- the forward peak (the program's tensor bytes at the row's worst allocation in forward) with
  MemTracker's Peak-Forward total for the module, within 1%;
- the backward peak (the same at the row's worst allocation in backward: its nodes' buffers,
  each on the module whose forward made the node (preload/stacks/node_modules.h), and its
  gradients) with MemTracker's Peak-Backward total for the module, within 1%.
MemTracker runs with two corrections, each the bytes of something it cannot see, so that both
sides count the same memory (docs/pytorch.md, "By module"):
- each op's own buffers (op_buffers_memtracker): blocks a kernel takes and gives back before it
  returns are no op output, so MemTracker (a dispatch mode) misses them; cumemtrace counts every
  block. On an H100 they put each GPT block's backward peak 8.0 MiB over MemTracker's (h.N.mlp.0's
  bias-gradient reduction: a 32 MiB buffer) and GPT-2's c_fc 16 MiB over. They are added from
  PyTorch's own requested_bytes counter read around each op; MemTracker's own figure is shown.
- a module whose forward gets no input that requires grad (the embeddings) stays open in
  ModTracker until the whole backward ends, so its Peak-Backward is that of every backward after
  it (GPT-2's wpe: wte's, 6 MiB over its own); it is compared over its own backward, which ends
  when its parameters' gradients are accumulated (OwnBackwardWindow).
The input batch is tracked too (made before MemTracker starts, the GPT's is seen by no op that
would track it: 16 KiB). Rows of a module above the depth (`transformer` at depth 2: its own
code's tensors) are compared at their own depth only. Both sides leave cuBLAS's workspaces out.
The backward pass in the user's terms (issue 54 items 3 and 4), from the same run's report:
- every line the steady step's backward added is the `.backward()` line of step() below (via the
  autograd node), or a gradient named by its parameter ("grad of h.0.mlp.0.weight", a name of
  named_parameters()); no top site is an autograd node alone;
- the backward phase by module (--small-lines: every byte) sums to the phase's allocated delta;
- check --max-module-bytes fails (exit 1) naming the largest module 1 byte under its bytes and
  passes at them;
- backward buffers by module: the traced run says no `cumemtrace:` line refusing the node layout
  (torch 2.11's Node checked on the GPU wheel), and the backward phase's "(backward)" row (buffers
  of no module) holds at most the loss's own buffers (the float logits' gradient, twice: pow and
  mean, both outside any module).
"""
import json
import os
import subprocess
import sys

STEPS = 3
DEPTHS = (1, 2, 3, 4, 5)  # down to GPT-2's transformer.h.0.mlp.c_fc
MIB = 1 << 20


def build(name):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if name == "gpt":
        class Block(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.attn = nn.MultiheadAttention(d, 8, batch_first=True)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

            def forward(self, x):
                h = self.ln1(x)
                x = x + self.attn(h, h, h, need_weights=False)[0]
                return x + self.mlp(self.ln2(x))

        class GPT(nn.Module):
            def __init__(self, vocab=4096, d=512, layers=4):
                super().__init__()
                self.wte = nn.Embedding(vocab, d)
                self.h = nn.ModuleList([Block(d) for _ in range(layers)])
                self.ln_f = nn.LayerNorm(d)
                self.head = nn.Linear(d, vocab, bias=False)

            def forward(self, idx):
                x = self.wte(idx)
                for b in self.h:
                    x = b(x)
                return self.head(self.ln_f(x))

        model = GPT()
        vocab = 4096
    else:
        import transformers
        cfg = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=4096,
                                      n_positions=256)
        model = transformers.GPT2LMHeadModel(cfg)
        vocab = 4096
    model = model.cuda()
    idx = torch.randint(0, vocab, (8, 256), device="cuda")
    return model, idx


def logits_of(out):
    return out.logits if hasattr(out, "logits") else out


def outputs_of(result):
    """The CUDA tensors a module returned (tuples, lists, dicts and ModelOutput, one level)."""
    import torch
    values = result.values() if isinstance(result, dict) else (
        result if isinstance(result, (tuple, list)) else [result])
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_cuda]


class FreedOutputs:
    """Per module (fully qualified name, root stripped), the bytes of its outputs freed before
    backward starts (their storage's PyObject dies with the storage: torch preserves it).
    MemTracker's activations of a module are what its forward left at its end, outputs included;
    the by-module view's are what it saved for backward: the two differ by exactly these (GPT-2's
    wte and wpe outputs, freed by the embeddings' sum)."""

    def __init__(self, model):
        import torch
        self.names = {m: n for n, m in model.named_modules()}
        self.watch = []  # (name, bytes, weakref to the output's storage)
        self.handle = torch.nn.modules.module.register_module_forward_hook(self.hook)

    def hook(self, module, args, result):
        import weakref
        name = self.names.get(module)
        if name is None:
            return
        for t in outputs_of(result):
            st = t.untyped_storage()
            self.watch.append((name, (st.nbytes() + 511) // 512 * 512, weakref.ref(st)))

    def at_backward(self):
        self.handle.remove()
        freed, seen = {}, set()
        for name, nbytes, ref in self.watch:
            if ref() is None and (name, id(ref)) not in seen:
                seen.add((name, id(ref)))
                freed[name] = freed.get(name, 0) + nbytes
        return freed


def cuda_key(snap):
    """The CUDA device's key in one of MemTracker's snapshots ({device: {kind: bytes}})."""
    return next((d for d in snap if str(d).startswith("cuda")), None)


def op_buffers_memtracker():
    """MemTracker whose peaks also count the blocks an op allocates and frees inside itself.

    MemTracker is a dispatch mode: it sees each op's outputs, not the blocks a kernel takes from
    the caching allocator and gives back before it returns (a reduction's global buffer and
    semaphores, Reduce.cuh; the sort buffers of embedding's backward; an attention kernel's
    workspace). cumemtrace sees every block, so its peaks hold them. On an H100, GPT h.0's
    backward peak is 352,863,744 B at h.0.mlp.0's bias gradient (AddmmBackward0's sum over the
    2048 rows of a 2048 x 2048 fp32 gradient: 319,308,800 B of tensors, a 33,554,432 B reduction
    buffer and 64 B of semaphores); MemTracker's is 344,450,048 B at GELU's backward (where
    cumemtrace counts 344,466,432 B: the 16 KiB batch MemTracker did not track), 8.02 MiB under,
    the same in every block; GPT-2's c_fc 16 MiB, c_attn 12 MiB. Here each op's
    own high water comes from PyTorch's counter: requested_bytes (the caching allocator's sum of
    requests, each within 512 B of MemTracker's rounded count) peaks during the op at
    MemTracker's total before it plus (the counter's peak in the op - its value before the op);
    the peaks take the higher of that and MemTracker's total after the op. Peak-Forward and
    Peak-Backward totals then count what the program's allocated bytes held at each op's worst
    moment, cuBLAS workspaces left out (kept from the first step: no op's in the steady one).
    `plain` keeps MemTracker's own peaks (ops' outputs only) for the table."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState

    def requested():
        return torch.cuda.memory_stats_as_nested_dict()["requested_bytes"]["all"]

    class OpBuffersMemTracker(MemTracker):
        def __init__(self):
            super().__init__()
            self._op_start = None
            self.plain = {}  # (fqn, PEAK_FW or PEAK_BW) -> MemTracker's own peak of op outputs

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            dev = cuda_key(self._curr_mem_snap)
            torch.cuda.reset_peak_memory_stats()
            self._op_start = (requested()["current"],
                              self._curr_mem_snap[dev]["Total"] if dev is not None else 0)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state):
            # MemTracker calls this right after the op returned and its outputs were tracked.
            dev = cuda_key(self._curr_mem_snap)
            if dev is None or self._op_start is None:
                return super()._update_peak_stats(peak_state)
            snap = self._curr_mem_snap[dev]
            for st in self.memory_tracking.values():
                if st.mod_fqn in self._mod_tracker.parents and peak_state in st.snapshots:
                    key = (st.mod_fqn, peak_state)
                    self.plain[key] = max(self.plain.get(key, 0), snap["Total"])
            before_requested, before_total = self._op_start
            extra = before_total + requested()["peak"] - before_requested - snap["Total"]
            if extra <= 0:
                return super()._update_peak_stats(peak_state)
            snap["Total"] += extra
            try:
                super()._update_peak_stats(peak_state)
            finally:
                snap["Total"] -= extra

        def plain_peak(self, st, state):
            """MemTracker's own peak of a module: from its window's opening snapshot on, its ops'
            outputs only."""
            opening = {_ModState.PEAK_FW: _ModState.PRE_FW, _ModState.PEAK_BW: _ModState.PRE_BW}
            snaps = st.snapshots.get(opening[state]) or []
            if not snaps:
                return None
            dev = cuda_key(snaps[-1])
            first = snaps[-1][dev]["Total"] if dev is not None else 0
            return max(first, self.plain.get((st.mod_fqn, state), 0))

    return OpBuffersMemTracker()


class OwnBackwardWindow:
    """The peak of a module's own backward where ModTracker cannot see it end.

    ModTracker closes a module's backward when the gradients of all its inputs that require grad
    are computed; a module whose forward gets none (an embedding of token ids: GPT-2's wte and
    wpe, the GPT's wte) stays open until the whole backward ends (a callback queued on the
    engine), so its Peak-Backward is the peak of every backward after its own: GPT-2's wpe read
    51,512,320 B, wte's peak (its embedding backward and 4 MiB gradient, run after wpe's), where
    wpe's own backward (its 256 KiB gradient) ends 6 MiB lower. Its own backward ends when the
    gradients of all its parameters are accumulated: MemTracker's running peak for the module
    (its local_peak) read then is the peak of that window."""

    def __init__(self, mt, model):
        import torch
        self.mt = mt
        self.names = {m: n for n, m in model.named_modules() if n}
        self.peaks = {}  # fqn (root stripped) -> bytes
        self.waiting = {}  # module -> parameters still to accumulate in this backward
        self.hooked = set()
        self.handle = torch.nn.modules.module.register_module_forward_pre_hook(self.pre)

    def pre(self, module, args):
        import torch
        from torch.utils._pytree import tree_flatten
        if module not in self.names:
            return
        flat, _ = tree_flatten(args)
        if any(isinstance(a, torch.Tensor) and a.requires_grad for a in flat):
            return
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            return
        self.waiting[module] = {id(p) for p in params}
        for p in params:
            if (module, id(p)) not in self.hooked:
                self.hooked.add((module, id(p)))
                p.register_post_accumulate_grad_hook(
                    lambda p, module=module: self.accumulated(module, p))

    def accumulated(self, module, p):
        left = self.waiting.get(module)
        if left is None or id(p) not in left:
            return
        left.discard(id(p))
        st = self.mt.memory_tracking.get(module)
        if not left and st is not None:
            dev = cuda_key(st.local_peak)
            if dev is not None:
                self.peaks[self.names[module]] = st.local_peak[dev]

    def close(self):
        self.handle.remove()


def train(name, truth_path, memtracker):
    import torch
    model, idx = build(name)
    opt = torch.optim.Adam(model.parameters())
    freed = {}

    def step(watch=False):
        opt.zero_grad(set_to_none=True)
        w = FreedOutputs(model) if watch else None
        out = logits_of(model(idx)).float().pow(2).mean()
        if w is not None:
            freed.update(w.at_backward())
        out.backward()
        opt.step()

    result = {}
    if memtracker:
        from torch.distributed._tools.mem_tracker import _ModState
        mt = op_buffers_memtracker()
        # idx too: made before MemTracker starts and passed to no op that makes a view of it
        # (GPT-2's reshape does, the GPT's embedding does not), it would be untracked (16 KiB
        # under cumemtrace's, which counts every live block).
        mt.track_external(model, opt, idx)
        own = OwnBackwardWindow(mt, model)
        with mt:
            for i in range(STEPS):
                if i:
                    mt.reset_mod_stats()
                    own.peaks.clear()
                step(watch=i == STEPS - 1)
            own.close()
            stats = {}
            root = type(model).__name__
            for mod, st in mt.memory_tracking.items():
                fqn = st.mod_fqn
                fqn = fqn[len(root) + 1:] if fqn.startswith(root + ".") else fqn

                def total(state, kind):
                    snaps = st.snapshots.get(state) or []
                    if not snaps:
                        return None
                    for d, cats in snaps[-1].items():
                        if str(d).startswith("cuda"):
                            return cats.get(kind, 0)
                    return 0
                pre, post = total(_ModState.PRE_FW, "Activation"), total(_ModState.POST_FW,
                                                                          "Activation")
                stats[fqn] = {"parameter_mem": st.parameter_mem,
                              "activations": None if pre is None or post is None else post - pre,
                              "outputs_freed": freed.get(fqn, 0),
                              "peak_forward": total(_ModState.PEAK_FW, "Total"),
                              "peak_backward": total(_ModState.PEAK_BW, "Total"),
                              "peak_backward_own": own.peaks.get(fqn),
                              "plain_peak_forward": mt.plain_peak(st, _ModState.PEAK_FW),
                              "plain_peak_backward": mt.plain_peak(st, _ModState.PEAK_BW)}
        result["memtracker"] = stats
    else:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        params = {}
        for n, p in model.named_parameters():
            params[n] = p.numel() * p.element_size()
        result["parameters"] = params
        result["root"] = type(model).__name__
    with open(truth_path, "w") as f:
        json.dump(result, f)


rows, failed = [], []


def row(what, status, detail):
    rows.append("| %-58s | %s | %s" % (what, status, detail))
    if status == "FAIL":
        failed.append(what)


def within(ours, theirs, share=0.01):
    return theirs is not None and abs(ours - theirs) <= share * max(abs(theirs), 1)


def mib(b):
    return "None" if b is None else "%.3f MiB" % (b / MIB)


def backward_line():
    with open(os.path.abspath(__file__)) as f:
        (n,) = [i for i, ln in enumerate(f, 1) if ln.strip() == "out.backward()"]
    return n


def compare_backward(name, snap, ct, truth):
    rep = subprocess.run([ct, "report", "--format", "json", "--top", "1000", "--small-lines",
                          "--module-depth", "1", snap], capture_output=True, text=True)
    if rep.returncode != 0:
        row("%s: report --small-lines" % name, "FAIL", rep.stderr.strip()[:200])
        return
    j = json.loads(rep.stdout)
    # train.<locals>.step's line (its qualified name on CPython 3.11+), via the node or torch.
    site = "step (validate_modules.py:%d) via " % backward_line()
    steady = (j.get("pytorch_ledger") or {}).get("devices", [{}])[0].get("steady_step") or {}
    bws = [p for p in steady.get("phases", []) if p["phase"] == "backward"]
    if len(bws) != 1:
        row("%s: the steady step has one backward" % name, "FAIL", str(len(bws)))
        return
    bw = bws[0]
    params = set(truth["parameters"])
    # What backward made (a forward activation it frees keeps its forward line)
    wrong = [(s["site"], s["category"]) for s in bw["added_by_site"] if s["bytes"] > 0
             and not (site in s["site"] if s["category"] != "gradient"
                     else s["site"].startswith("grad of ") and s["site"][8:] in params)]
    row("%s: backward's lines at the .backward() line or grad of a parameter" % name,
        "PASS" if bw["added_by_site"] and not wrong else "FAIL",
        "%d lines, wrong: %s" % (len(bw["added_by_site"]), wrong[:3]))
    alone = [s["site"] for s in j.get("top_sites_by_bytes", [])
             if s["site"].startswith("torch::autograd::")]
    row("%s: no top site is an autograd node alone" % name, "PASS" if not alone else "FAIL",
        str(alone[:3]))
    # By module counts tensors' own bytes (the ledger's rule), so it sums to the tensor bytes
    # by category, not to the blocks' allocated delta.
    delta = sum(bw.get("added_tensor_bytes_by_category", {}).values())
    mods = sum(m["bytes"] for m in bw["added_by_module"])
    row("%s: backward by module sums to its tensor bytes" % name,
        "PASS" if mods == delta and bw["added_by_module"] else "FAIL", "%d / %d" % (mods, delta))
    # The loss (pow, mean: no module) is all that may stay in "(backward)": its two buffers of
    # the float logits' size at most.
    logits = 8 * 256 * 4096 * 4
    nobody = sum(m["bytes"] for m in bw["added_by_module"] if m["module"] == "(backward)")
    row("%s: backward by module: \"(backward)\" only the loss's buffers" % name,
        "PASS" if nobody <= 2 * logits else "FAIL", "%s / at most %s" % (mib(nobody),
                                                                      mib(2 * logits)))
    row("%s: backward by module (depth 1)" % name, "INFO",
        ", ".join("%s %+.3f MiB" % (m["module"], m["bytes"] / MIB) for m in bw["added_by_module"]))
    rows_ = [r for r in (j.get("modules") or {}).get("rows", []) if not r["module"].startswith("(")]
    if not rows_:
        row("%s: check --max-module-bytes" % name, "FAIL", "no module rows")
        return
    top = max(rows_, key=lambda r: r["parameters"] + r["gradients"] + r["optimizer_state"]
              + r["activations"])
    total = top["parameters"] + top["gradients"] + top["optimizer_state"] + top["activations"]
    over = subprocess.run([ct, "check", "--module-depth", "1", "--max-module-bytes",
                           str(total - 1), snap], capture_output=True, text=True)
    at = subprocess.run([ct, "check", "--module-depth", "1", "--max-module-bytes", str(total),
                         snap], capture_output=True, text=True)
    ok = (over.returncode == 1 and "module %s holds" % top["module"] in over.stdout + over.stderr
          and at.returncode == 0)
    row("%s: check --max-module-bytes fails 1 B under %s, passes at it" % (name, top["module"]),
        "PASS" if ok else "FAIL", "rc %d / %d" % (over.returncode, at.returncode))


def compare(name, out, ct):
    snaps = [os.path.join(out, "t_" + name, f) for f in os.listdir(os.path.join(out, "t_" + name))
             if f.endswith(".json") and ".oom." not in f]
    if len(snaps) != 1:
        row("%s: one snapshot" % name, "FAIL", str(snaps))
        return
    truth = json.load(open(os.path.join(out, "truth_%s.json" % name)))
    mt = json.load(open(os.path.join(out, "mt_%s.json" % name)))["memtracker"]
    compare_backward(name, snaps[0], ct, truth)
    for depth in DEPTHS:
        rep = subprocess.run([ct, "report", "--format", "json", "--top", "1000", "--module-depth",
                              str(depth), snaps[0]], capture_output=True, text=True)
        if rep.returncode != 0:
            row("%s: report at depth %d" % (name, depth), "FAIL", rep.stderr.strip()[:200])
            continue
        view = json.loads(rep.stdout).get("modules")
        if not view:
            row("%s: report has a by-module view" % name, "FAIL", "modules: null")
            continue
        ours = {r["module"]: r for r in view["rows"]}
        want = {}
        for n, b in truth["parameters"].items():
            module = n.rsplit(".", 1)[0] if "." in n else truth["root"]
            key = ".".join(module.split(".")[:depth]) if "." in n else module
            want[key] = want.get(key, 0) + b
        for key, b in sorted(want.items()):
            got = ours.get(key, {}).get("parameters", 0)
            row("%s d%d %s: parameters = named_parameters()" % (name, depth, key),
                "PASS" if got == b else "FAIL", "%d / %d" % (got, b))
            # every parameter has its gradient at the step's end (zero_grad(set_to_none) runs at
            # the next step's start): each made again where the last walk saw one keeps its name
            got = ours.get(key, {}).get("gradients", 0)
            row("%s d%d %s: gradients = named_parameters()" % (name, depth, key),
                "PASS" if got == b else "FAIL", "%d / %d" % (got, b))
        for key, r in sorted(ours.items()):
            m = mt.get(key)
            if m is None or key == truth["root"] or key.count(".") + 1 < depth:
                # not a called module (a ModuleList), ours only ("(backward)"), the root, or a
                # module above this depth (`transformer` at depth 2): those rows hold what that
                # module's own code made, MemTracker's its whole subtree (compared at its depth)
                continue
            if m["activations"]:
                # what it saved for backward: MemTracker's, less its outputs freed before
                # backward (FreedOutputs)
                want = m["activations"] - m["outputs_freed"]
                ok = within(r["activations"], want)
                row("%s d%d %s: activations ~ MemTracker (1%%)" % (name, depth, key),
                    "PASS" if ok else "FAIL", "%s / %s (%s left, %s of outputs freed)" % (
                        mib(r["activations"]), mib(want), mib(m["activations"]),
                        mib(m["outputs_freed"])))
            # Peaks: MemTracker's with each op's own buffers (op_buffers_memtracker), its own
            # peak (op outputs only) shown beside; a backward ModTracker cannot see end, at the
            # end of the module's own (OwnBackwardWindow).
            if m["peak_forward"]:
                ok = within(r["forward_peak"], m["peak_forward"])
                row("%s d%d %s: forward peak ~ MemTracker Peak-Forward + op buffers (1%%)" % (
                    name, depth, key), "PASS" if ok else "FAIL", "%s / %s (outputs only %s)" % (
                        mib(r["forward_peak"]), mib(m["peak_forward"]),
                        mib(m.get("plain_peak_forward"))))
            theirs = m["peak_backward"]
            window = ""
            if m.get("peak_backward_own") is not None:
                theirs = m["peak_backward_own"]
                window = ", own window; to the end of backward %s" % mib(m["peak_backward"])
            if theirs:
                ok = within(r["backward_peak"], theirs)
                row("%s d%d %s: backward peak ~ MemTracker Peak-Backward + op buffers (1%%)" % (
                    name, depth, key), "PASS" if ok else "FAIL", "%s / %s (outputs only %s%s)" % (
                        mib(r["backward_peak"]), mib(theirs), mib(m.get("plain_peak_backward")),
                        window))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] in ("--train", "--memtracker"):
        train(sys.argv[2], sys.argv[3], sys.argv[1] == "--memtracker")
        return 0
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    build_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cumemtrace-modules"
    ct = os.path.join(build_dir, "bin", "cumemtrace")
    os.makedirs(out, exist_ok=True)
    me = os.path.abspath(__file__)
    for name in ("gpt", "gpt2"):
        t_dir = os.path.join(out, "t_" + name)
        subprocess.run(["rm", "-rf", t_dir])
        p = subprocess.run([ct, "run", "-q", "-o", t_dir, "--", sys.executable, me, "--train",
                            name, os.path.join(out, "truth_%s.json" % name)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            row("%s: traced run" % name, "FAIL", p.stderr.strip()[-300:])
            continue
        refused = [ln for ln in p.stderr.splitlines()
                   if ln.startswith("cumemtrace: backward allocations without their module")]
        row("%s: autograd nodes filed with their module (node layout accepted)" % name,
            "PASS" if not refused else "FAIL", refused[0] if refused else "no refusal line")
        p = subprocess.run([sys.executable, me, "--memtracker", name,
                            os.path.join(out, "mt_%s.json" % name)], capture_output=True, text=True)
        if p.returncode != 0:
            row("%s: MemTracker run" % name, "FAIL", p.stderr.strip()[-300:])
            continue
        try:
            compare(name, out, ct)
        except Exception as e:  # a validator that could not judge fails
            row("%s: comparison" % name, "FAIL", "%s: %s" % (type(e).__name__, e))
    print("| %-58s | result | ours / theirs" % "check")
    print("\n".join(rows))
    print("%d checks, %d failed" % (len([r for r in rows if "| INFO |" not in r]), len(failed)))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
