#!/usr/bin/env python3
"""Python frames with PyTorch on a real GPU (the GPU host's CPython, 3.12): a small training
loop (forward, a custom autograd Function, backward, Adam step) runs under `cumemtrace run` with
PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every tensor PyTorch allocates is a driver allocation
that cumemtrace records with the allocating thread's stack, read without the GIL (PyTorch drops
it around every op). Checks, one PASS/FAIL line each:

  layout       tests/pythons/layout_probe.py: this interpreter's frame layout read with ctypes
  reader on    the GIL-less reader was never turned off, no "no Python frames" line
  forward      an allocation inside Net.forward carries exactly
               Net.forward <- train_step <- main <- <module> (this file's frames, their lines)
  function     an allocation inside Scale.forward (a custom autograd Function) likewise
  backward     loss.backward(): an allocation on the calling thread carries train_step's
               backward line; the custom Function's backward, run by the autograd engine's
               device thread, carries Scale.backward's line (and nothing of the main thread);
               backward allocations of PyTorch's own ops on that thread have no Python frames
               (there are none: PyTorch's own recorder shows the same)
  step         opt.step(): Adam's state allocations carry train_step's step line with
               torch/optim frames inside it
  no wrong     every frame of this file, on every allocation, names the function whose source
               holds its line (checked with ast)

Usage: python3 tests/gpu/validate_python_frames.py BUILD_DIR     (exit 0 when all passed)
"""
import ast
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SELF = os.path.abspath(__file__)
failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"| {name:<62} | {'PASS' if ok else 'FAIL'} | {detail}")
    failures += not ok
    return ok


# --- the traced program (run as `validate_python_frames.py --child`) -------------------------

def child():
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2  # L_FN_FORWARD

        @staticmethod
        def backward(ctx, grad):
            return grad * 2  # L_FN_BACKWARD

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(1024, 4096)
            self.fc2 = torch.nn.Linear(4096, 1024)

        def forward(self, x):
            h = self.fc1(x)  # L_FC1
            return self.fc2(Scale.apply(torch.relu(h)))  # L_FC2

    def train_step(model, opt, x):
        out = model(x)  # L_MODEL
        loss = out.square().mean()  # L_LOSS
        loss.backward()  # L_BACKWARD
        opt.step()  # L_STEP
        opt.zero_grad(set_to_none=True)

    def main():
        model = Net().cuda()
        opt = torch.optim.Adam(model.parameters())
        x = torch.randn(512, 1024, device="cuda")
        for _ in range(3):
            train_step(model, opt, x)  # L_TRAIN
        torch.cuda.synchronize()

    main()  # L_MAIN


# --- the checks ----------------------------------------------------------------------------------

def line_of(marker):
    with open(SELF) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def function_spans():
    """(qualified name as co_qualname spells it, first line, last line) of every function."""
    with open(SELF) as f:
        tree = ast.parse(f.read())
    spans = []

    def visit(node, prefix):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + n.name
                first = min([n.lineno] + [d.lineno for d in n.decorator_list])
                spans.append((q, first, n.end_lineno))
                visit(n, q + ".<locals>.")
            elif isinstance(n, ast.ClassDef):
                visit(n, prefix + n.name + ".")
            else:
                visit(n, prefix)
    visit(tree, "")
    return spans


def owner_of(line, spans):
    inside = [s for s in spans if s[1] <= line <= s[2]]
    return min(inside, key=lambda s: s[2] - s[1])[0] if inside else "<module>"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    print(f"CPython {sys.version.split()[0]}")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "pythons", "layout_probe.py"),
                        ROOT], capture_output=True, text=True)
    check("layout: tests/pythons/layout_probe.py on this interpreter", p.returncode == 0,
          "; ".join(ln for ln in p.stdout.splitlines() if ln.startswith("FAIL"))[:500])

    def q(qualname):  # co_qualname from 3.11 on, co_name before
        return qualname if sys.version_info >= (3, 11) else qualname.rsplit(".", 1)[-1]
    # The traced program's functions are nested in child(): their qualified names say so.
    net_fwd, scale_fwd, scale_bwd = (q("child.<locals>.Net.forward"),
                                     q("child.<locals>.Scale.forward"),
                                     q("child.<locals>.Scale.backward"))
    step_q = q("child.<locals>.train_step")
    # What every main-thread allocation of a training step ends with (None: any line).
    outer = [(step_q, line_of("L_MODEL")), (q("child.<locals>.main"), line_of("L_TRAIN")),
             ("child", line_of("L_MAIN")), ("main", None), ("<module>", None)]

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "traces")
        env = dict(os.environ, CUMEMTRACE_DEBUG="1", PYTORCH_NO_CUDA_MEMORY_CACHING="1")
        p = subprocess.run([os.path.join(build, "bin", "cumemtrace"), "run", "-o", out, "--",
                            sys.executable, SELF, "--child"], env=env, capture_output=True,
                           text=True, timeout=600)
        check("traced PyTorch program exits 0", p.returncode == 0, p.stderr[-2000:])
        check("reader on: never turned off, no 'no Python frames' line",
              "are off for this process" not in p.stderr and "no Python frames" not in p.stderr,
              "; ".join(ln for ln in p.stderr.splitlines() if "cumemtrace:" in ln)[:500])
        snaps = sorted(glob.glob(os.path.join(out, "*.json")))
        if not check("one snapshot written", len(snaps) >= 1):
            return 1
        with open(snaps[-1]) as f:
            snap = json.load(f)

    allocs = [e for dev in snap["device_traces"] for e in dev if e["action"] == "alloc"]
    mine = [[(f["name"], f["line"]) for f in e["frames"] if f["filename"] == SELF]
            for e in allocs]
    print(f"{len(allocs)} driver allocations, {sum(1 for m in mine if m)} with frames of this file")

    def tail_ok(frames, from_index):
        want = outer[from_index:]
        got = frames[-len(want):] if len(frames) >= len(want) else None
        return got is not None and all(g[0] == w[0] and (w[1] is None or g[1] == w[1])
                                       for g, w in zip(got, want))

    fwd = [m for m in mine if m and m[0] == (net_fwd, line_of("L_FC1"))]
    check("forward: Net.forward <- train_step <- main <- child <- main <- <module>",
          bool(fwd) and all(len(m) == 6 and tail_ok(m, 0) for m in fwd),
          f"{len(fwd)} allocations, first {fwd[:1]}")
    fn = [m for m in mine if m and m[0] == (scale_fwd, line_of("L_FN_FORWARD"))]
    check("function: Scale.forward <- Net.forward (L_FC2) <- train_step ...",
          bool(fn) and all(len(m) == 7 and m[1] == (net_fwd, line_of("L_FC2")) and tail_ok(m, 0)
                           for m in fn), f"{len(fn)} allocations, first {fn[:1]}")
    bwd_main = [m for m in mine if m and m[0] == (step_q, line_of("L_BACKWARD"))]
    check("backward: allocations of loss.backward() on the calling thread carry its line",
          bool(bwd_main) and all(len(m) == 5 and tail_ok(m, 1) for m in bwd_main),
          f"{len(bwd_main)} allocations, first {bwd_main[:1]}")
    bwd_fn = [m for m in mine if m and m[0] == (scale_bwd, line_of("L_FN_BACKWARD"))]
    # PyTorch runs a CUDA graph's backward on its device thread, where Scale.backward is the only
    # frame of this file; were it run on the calling thread, loss.backward()'s frames would follow.
    own = [(scale_bwd, line_of("L_FN_BACKWARD"))]
    check("backward: Scale.backward carries its line (autograd thread: nothing else)",
          bool(bwd_fn) and all(m == own or (len(m) == 6 and m[1] == (step_q, line_of("L_BACKWARD"))
                                            and tail_ok(m, 1)) for m in bwd_fn),
          f"{len(bwd_fn)} allocations, on the autograd thread: "
          f"{sum(1 for m in bwd_fn if m == own)}, first {bwd_fn[:1]}")
    step = [(e, m) for e, m in zip(allocs, mine) if m and m[0] == (step_q, line_of("L_STEP"))]
    check("step: opt.step() allocations carry its line, torch/optim frames inside",
          bool(step) and all(len(m) == 5 and tail_ok(m, 1) and any("torch/optim/" in f["filename"]
                                                for f in e["frames"]) for e, m in step),
          f"{len(step)} allocations")
    spans = function_spans()
    wrong = {fr for m in mine for fr in m if q(owner_of(fr[1], spans)) != fr[0]}
    check("no wrong frame: every frame of this file names the function holding its line",
          not wrong, f"{sorted(wrong)[:5]}")
    print("PASS" if failures == 0 else f"FAIL ({failures} checks failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
