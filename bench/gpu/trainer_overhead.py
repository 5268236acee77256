"""What the Python side of cumemtrace (automatic phases, the ownership walks that make the
categories, the module names: preload/python/cumemtrace_phases.py and cumemtrace_modules.py) costs
a real training step, and what all of cumemtrace costs it over a bare run (issue 54's last "done
when": <= 1% over bare), on two workloads people run:
  gpt2      transformers' Trainer on a GPT-2 built from a config (no download): 6 layers, width
            768, 12 heads, sequences of 512, batch 8, fp32, the Trainer's defaults otherwise
            (AdamW, gradient clipping, its loss checks); a step is timed by a TrainerCallback's
            on_step_end after torch.cuda.synchronize();
  resnet18  ResNet-18 (torchvision's, else the same network built here), batch 64 at 224 x 224,
            SGD with momentum, nn.CrossEntropyLoss, a plain loop.

    python3 bench/gpu/trainer_overhead.py [--cumemtrace build/bin/cumemtrace] [--out DIR]
        [--workloads gpt2,resnet18] [--alternations 6] [--block-steps 10] [--warmup 5]
        [--bare-runs 2] [--max-overhead 1.0] [--tiny]

Per workload it runs this file as child processes: bare (no cumemtrace), then under `cumemtrace
run` (the preload loaded, the Python side installed at torch's import), then bare again
(--bare-runs 2, so that the bare runs' own difference, the A/A, is on the table). Every child
trains warm-up steps (untimed), then 2 x ALTERNATIONS + 1 blocks of BLOCK-STEPS steps: off, on,
off, ..., off. Under cumemtrace an "off" block runs with the Python side paused
(cumemtrace_phases.pause(): every hook and wrapper out of torch; resume() puts them back with
what was learned, so an "on" block is the steady state, not a new discovery); recording (driver
and block events, their stacks, the module object the preload reads from each module call's
frame) stays on in both, so on against off is the Python side's own cost, drift of the host
cancelling out of each comparison (bench/gpu/torch_blocks_ab.py's approach). The switch happens
between two steps, with its own time left out, and leaves a mark, `bench:on` or `bench:off`, in
the snapshot. A bare child runs the same schedule with nothing to switch. One process per
workload and mode: a root module first called after discovery ended gets no forward phase, as in
any program with two models.

Prints one row per workload: the median ms per step of the bare blocks (both bare runs), of the
off and of the on blocks; on vs off (the median over on blocks of each against the mean of the off
blocks beside it); on vs bare (the on blocks' median against the bare one: all of cumemtrace, and
across processes); the spread of the off blocks ((max - min) / median: the noise inside a run);
the bare A/A (the second bare run's median against the first's: the noise between runs). PASS
when on vs off and on vs bare are both <= MAX-OVERHEAD %; a run that failed or gave no blocks is
a FAIL with its reason, as is an on vs bare over the limit whose bare A/A is larger than the
limit (then the verdict says the runs cannot tell). Exit 1 on any FAIL, 2 on bad arguments.
Six process starts are most of its time (each run trains 135 steps at the defaults).

--python-costs: one more traced run per workload whose Python side times its own parts with
time.perf_counter (the hooks, the ownership walks, the module names, the calls into the preload;
each part's time includes the parts it calls) and prints their median microseconds per on-step
beside the table: where the Python side's cost goes. Its own timers make that run's on blocks
slower, so it is not part of the verdict.

--tiny: the same on the CPU at toy sizes (1-layer GPT-2 of width 32, ResNet-18 on 32 x 32 images
of batch 2), so that tests can run it (tests/torch_phases/test_trainer_overhead.py); its timings
mean nothing. --out DIR keeps each child's result (DIR/<mode>-<workload>.json) and the traced
runs' snapshots (DIR/traced-<workload>/); without it they go to a temporary folder, removed.
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("gpt2", "resnet18")
ON_MARK, OFF_MARK = b"bench:on", b"bench:off"


# ---- a child: one workload, one process -------------------------------------------------------

class Schedule:
    """Warm-up steps (untimed; under cumemtrace the Python side on, discovering the roots), then
    blocks of `block_steps` steps, off and on alternately, starting and ending with off. tick()
    ends a step: it waits for the device, adds the step's time to the block, and between blocks
    calls switch(on) (its own time left out of both)."""

    def __init__(self, warmup, alternations, block_steps, switch, sync):
        if warmup < 1 or alternations < 1 or block_steps < 1:
            raise ValueError("warm-up, alternations and block steps must be at least 1")
        self.states = [False, True] * alternations + [False]
        self.warmup, self.block_steps = warmup, block_steps
        self.total = warmup + len(self.states) * block_steps
        self.switch, self.sync = switch, sync
        self.steps = 0
        self.block = -1  # warm-up
        self.current = []
        self.blocks = []  # (on, ms per step)
        self.last = time.perf_counter()

    def tick(self):
        self.sync()
        now = time.perf_counter()
        if self.block >= 0:
            self.current.append(now - self.last)
        self.steps += 1
        if self.steps == self.warmup or len(self.current) == self.block_steps:
            if self.block >= 0:
                self.blocks.append((self.states[self.block],
                                    1000 * sum(self.current) / len(self.current)))
            self.block += 1
            self.current = []
            if self.block < len(self.states):
                self.switch(self.states[self.block])
        self.last = time.perf_counter()


def python_side_switch():
    """switch(on) for a child under cumemtrace: the Python side resumed or paused, then a mark.
    Exits (the row fails, saying why) when the preload or the phases are not there."""
    try:
        mark = ctypes.PyDLL(None).cumemtrace_mark
    except AttributeError:
        sys.exit("trainer_overhead.py: no cumemtrace preload in the traced child")
    mark.argtypes, mark.restype = [ctypes.c_char_p], None
    phases = sys.modules.get("cumemtrace_phases")
    if phases is None or phases._phases is None:
        sys.exit("trainer_overhead.py: cumemtrace's automatic phases are not installed "
                 "(CUMEMTRACE_PHASES=0, or torch imported before sitecustomize ran)")

    def switch(on):
        if not (phases.resume() if on else phases.pause()):
            sys.exit("trainer_overhead.py: the phases could not be %s between steps"
                     % ("resumed" if on else "paused"))
        mark(ON_MARK if on else OFF_MARK)

    return switch


# The Python side's parts timed by --python-costs: (object's attribute on the Phases, name) ->
# what they are. Hooks and wrappers resolve these per call, so wrapping them on the instance
# after install takes effect from the first resume().
COSTED = {
    "phases": ("_pre_hook", "_post_hook", "_optimizer_pre_hook", "_optimizer_post_hook", "_walk",
               "_workspace_walk", "_send_inputs", "_send"),
    "sink": ("push", "pop", "mark", "backward_caller", "owners"),
    "modules": ("on_step", "on_owners"),
}


def time_parts(phases, costs, calls, state):
    """Wraps the Phases' parts (COSTED) with timers adding into costs[name] (seconds) and
    calls[name] while state["on"]."""
    owners = {"phases": phases, "sink": phases._sink, "modules": phases._modules}

    def timed(obj, name):
        f = getattr(obj, name)

        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                if state["on"]:
                    costs[name] = costs.get(name, 0.0) + time.perf_counter() - t
                    calls[name] = calls.get(name, 0) + 1

        setattr(obj, name, wrapper)

    for what, names in COSTED.items():
        if owners[what] is not None:
            for name in names:
                timed(owners[what], name)


def resnet18(nn, num_classes=1000):
    """ResNet-18 (He et al. 2015) as torchvision builds it: BasicBlocks [2, 2, 2, 2] of widths
    64-512, for hosts without torchvision."""

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths, cin, layers = (64, 128, 256, 512), 64, []
            for i, w in enumerate(widths):
                layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2),
                                            BasicBlock(w, w, 1)))
                cin = w
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet18()


def run_resnet18(torch, device, tiny, schedule):
    nn = torch.nn
    try:
        import torchvision
        model, source = torchvision.models.resnet18(), "torchvision"
    except ImportError:
        model, source = resnet18(nn), "built here"
    model = model.to(device)
    batch, size = (2, 32) if tiny else (64, 224)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    y = torch.randint(0, 1000, (batch,), generator=gen).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(schedule.total):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        schedule.tick()
    return "ResNet-18 (%s), batch %d at %d x %d, SGD" % (source, batch, size, size)


def run_gpt2(torch, device, tiny, schedule):
    import transformers

    if tiny:
        dims = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=16)
        batch, seq = 2, 16
    else:
        dims = dict(n_layer=6, n_embd=768, n_head=12, vocab_size=50257, n_positions=512)
        batch, seq = 8, 512
    torch.manual_seed(0)
    config = transformers.GPT2Config(bos_token_id=0, eos_token_id=0, **dims)
    model = transformers.GPT2LMHeadModel(config)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, dims["vocab_size"], (batch * schedule.total, seq), generator=gen)
    data = [{"input_ids": r, "labels": r} for r in ids]

    class StepClock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            schedule.tick()

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=schedule.total,
            report_to=[], use_cpu=device == "cpu", save_strategy="no", logging_strategy="no",
            disable_tqdm=True, dataloader_num_workers=0, seed=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                       callbacks=[StepClock()])
        trainer.train()
    if schedule.steps != schedule.total:
        sys.exit("trainer_overhead.py: the Trainer ran %d steps of %d"
                 % (schedule.steps, schedule.total))
    return "Trainer, GPT-2 %d layers width %d, batch %d x %d tokens" % (
        dims["n_layer"], dims["n_embd"], batch, seq)


def child(a):
    import torch

    if a.tiny:
        device, sync = "cpu", (lambda: None)
    elif torch.cuda.is_available():
        device, sync = "cuda", torch.cuda.synchronize
    else:
        sys.exit("trainer_overhead.py: no CUDA device (use --tiny for the CPU)")
    switch = python_side_switch() if a.mode == "traced" else (lambda on: None)
    costs, calls, state = {}, {}, {"on": False}
    if a.python_costs:
        time_parts(sys.modules["cumemtrace_phases"]._phases, costs, calls, state)
        plain_switch = switch

        def switch(on):
            plain_switch(on)
            state["on"] = on
    schedule = Schedule(a.warmup, a.alternations, a.block_steps, switch, sync)
    run = run_gpt2 if a.child == "gpt2" else run_resnet18
    what = run(torch, device, a.tiny, schedule)
    if len(schedule.blocks) != len(schedule.states):
        sys.exit("trainer_overhead.py: %d blocks timed of %d"
                 % (len(schedule.blocks), len(schedule.states)))
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    with open(a.result, "w") as f:
        on_steps = a.alternations * a.block_steps
        json.dump({"workload": a.child, "mode": a.mode, "what": what, "device": name,
                   "blocks": schedule.blocks,
                   "us_per_on_step": {k: 1e6 * v / on_steps for k, v in costs.items()},
                   "calls_in_on_blocks": calls}, f)


# ---- the driver: the children, the table, the verdict -----------------------------------------

def pct(x):
    return "%+.2f%%" % (100 * x) if x is not None else "-"


def summarize(workload, bare_runs, traced, limit):
    """One table row from the children's blocks: bare_runs a list of [(on, ms)] (one a bare run),
    traced the traced run's [(on, ms)] or None, with `error` a reason when a run failed."""
    row = {"workload": workload, "bare": None, "off": None, "on": None, "on_vs_off": None,
           "on_vs_bare": None, "off_spread": None, "bare_aa": None, "verdict": "FAIL",
           "why": ""}
    bare_meds = [statistics.median(ms for _, ms in run) for run in bare_runs if run]
    if bare_meds:
        row["bare"] = statistics.median(ms for run in bare_runs for _, ms in run)
    if len(bare_meds) >= 2:
        row["bare_aa"] = bare_meds[-1] / bare_meds[0] - 1
    if traced:
        off = [ms for on, ms in traced if not on]
        on = [ms for on, ms in traced if on]
        row["off"], row["on"] = statistics.median(off), statistics.median(on)
        row["off_spread"] = (max(off) - min(off)) / row["off"]
        pairs = [traced[k][1] / ((traced[k - 1][1] + traced[k + 1][1]) / 2) - 1
                 for k in range(1, len(traced) - 1) if traced[k][0]]
        row["on_vs_off"] = statistics.median(pairs)
        if row["bare"]:
            row["on_vs_bare"] = row["on"] / row["bare"] - 1
    lim = limit / 100
    if not traced:
        row["why"] = "no traced run to judge"
    elif row["bare"] is None:
        row["why"] = "no bare run to judge against"
    elif row["on_vs_off"] > lim:
        row["why"] = "the Python side costs %s (> %g%%)" % (pct(row["on_vs_off"]), limit)
    elif row["on_vs_bare"] > lim:
        row["why"] = "on is %s over bare (> %g%%)" % (pct(row["on_vs_bare"]), limit)
        if row["bare_aa"] is not None and abs(row["bare_aa"]) > lim:
            row["why"] += ("; the bare runs differ by %s themselves: these runs cannot tell"
                           % pct(row["bare_aa"]))
    else:
        row["verdict"] = "PASS"
    return row


def table(rows, limit):
    lines = ["| workload | bare ms/step | off ms/step | on ms/step | on vs off | on vs bare "
             "| off spread | bare A/A | <= %g%% |" % limit,
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = ["%.3f" % r[k] if r[k] is not None else "-" for k in ("bare", "off", "on")]
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s%s |" % (
            r["workload"], *ms, pct(r["on_vs_off"]), pct(r["on_vs_bare"]),
            "%.1f%%" % (100 * r["off_spread"]) if r["off_spread"] is not None else "-",
            pct(r["bare_aa"]), r["verdict"], (": " + r["why"]) if r["why"] else ""))
    return "\n".join(lines)


def run_child(a, mode, workload, out, index, costs=None):
    """Runs one child; returns ([(on, ms)] or None, its description, an error line or ""). With
    `costs` (a dict), a traced child times the Python side's parts into it."""
    tag = "costs" if costs is not None else mode
    result = os.path.join(out, "%s%s-%s.json" % (tag, index or "", workload))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, "--mode", mode,
           "--result", result, "--warmup", str(a.warmup), "--alternations",
           str(a.alternations), "--block-steps", str(a.block_steps)] + (["--tiny"] if a.tiny
                                                                        else [])
    if costs is not None:
        cmd.append("--python-costs")
    if mode == "traced":
        cmd = [a.cumemtrace, "run", "-q", "-o", os.path.join(out, "%s-%s" % (
            "costed" if costs is not None else "traced", workload)), "--", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    if p.returncode != 0 or not os.path.exists(result):
        return None, "", "%s %s exited %d: %s" % (mode, workload, p.returncode,
                                                  lines[-1] if lines else "no output")
    with open(result) as f:
        got = json.load(f)
    if costs is not None:
        costs.update(got.get("us_per_on_step", {}))
    return [tuple(b) for b in got["blocks"]], "%s on %s" % (got["what"], got["device"]), ""


def driver(a):
    if not os.access(a.cumemtrace, os.X_OK):
        print("trainer_overhead.py: no cumemtrace at %s (--cumemtrace)" % a.cumemtrace,
              file=sys.stderr)
        return 2
    workloads = a.workloads.split(",")
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad:
        print("trainer_overhead.py: unknown workload %s (gpt2, resnet18)" % ",".join(bad),
              file=sys.stderr)
        return 2
    out = a.out or tempfile.mkdtemp(prefix="trainer_overhead.")
    os.makedirs(out, exist_ok=True)
    rows, notes = [], []
    try:
        for w in workloads:
            bare_runs, traced, errors, what = [], None, [], ""
            start = time.perf_counter()
            modes = ["bare", "traced"] + ["bare"] * (a.bare_runs - 1)
            for i, mode in enumerate(modes):
                blocks, desc, err = run_child(a, mode, w, out, i if mode == "bare" else 0)
                what = what or desc
                if err:
                    errors.append(err)
                elif mode == "bare":
                    bare_runs.append(blocks)
                else:
                    traced = blocks
            cost_note = None
            if a.python_costs:
                costs = {}
                _, _, err = run_child(a, "traced", w, out, 0, costs)
                cost_note = ("%s: the Python side's parts, us per on-step (each includes what it "
                             "calls): %s" % (w, err or ", ".join(
                                 "%s %.1f" % (k, v) for k, v in sorted(
                                     costs.items(), key=lambda kv: -kv[1]))))
            row = summarize(w, bare_runs, traced, a.max_overhead)
            if errors:
                row["verdict"], row["why"] = "FAIL", "; ".join(errors)
            rows.append(row)
            notes.append("%s: %s; %d warm-up steps, %d blocks of %d steps (off, on, ..., off); "
                         "%d bare run(s), 1 traced; %.0f s" % (
                             w, what or "no run", a.warmup, 2 * a.alternations + 1,
                             a.block_steps, len(bare_runs), time.perf_counter() - start))
            if cost_note:
                notes.append(cost_note)
    finally:
        if not a.out:
            shutil.rmtree(out, ignore_errors=True)
    print(table(rows, a.max_overhead))
    for n in notes:
        print(n)
    return 1 if any(r["verdict"] != "PASS" for r in rows) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cumemtrace", default=os.path.join(HERE, "..", "..", "build", "bin",
                                                         "cumemtrace"))
    ap.add_argument("--out", help="keep the children's results and the traced snapshots here")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--alternations", type=int, default=6, help="on blocks (>= 5 to judge)")
    ap.add_argument("--block-steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--bare-runs", type=int, default=2, help="1: bare, traced; 2: bare, traced, "
                    "bare (the A/A)")
    ap.add_argument("--max-overhead", type=float, default=1.0, help="percent")
    ap.add_argument("--tiny", action="store_true", help="CPU, toy sizes (for tests)")
    ap.add_argument("--python-costs", action="store_true",
                    help="one more traced run timing the Python side's parts (not judged)")
    ap.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("bare", "traced"), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if min(a.alternations, a.block_steps, a.warmup, a.bare_runs) < 1:
        ap.error("--alternations, --block-steps, --warmup and --bare-runs must be at least 1")
    if a.child:
        return child(a)
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
