"""bench/gpu/trainer_overhead.py, the overhead bench of issue 54, on the CPU at toy sizes (--tiny):
under `cumemtrace run` (the real preload, our sitecustomize, the fake driver) its "on" blocks run
with the automatic phases installed and its "off" blocks with none (exact counts of the `auto:*`
annotations between its `bench:*` marks), and its table has one row per workload with the verdict
the exit code says. Its arithmetic (medians, the per-pair cost, the verdicts) on fixed blocks."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import SOURCE
from test_traced import BUILD, CT

BENCH = os.path.join(SOURCE, "bench", "gpu", "trainer_overhead.py")
spec = importlib.util.spec_from_file_location("trainer_overhead", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

WARMUP, ALTERNATIONS, BLOCK_STEPS = 2, 2, 3


def segments(snap):
    """The annotations cut at the bench's marks: [(the mark that opened it or None, [(name,
    stage)])]."""
    out = [(None, [])]
    for a in snap["external_annotations"]:
        if a["name"].startswith("bench:"):
            out.append((a["name"], []))
        else:
            out[-1][1].append((a["name"], a["stage"]))
    return out


def count(seg, name, stage):
    return sum(1 for a in seg if a == (name, stage))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("overhead")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUMEMTRACE_", "FAKE_CUDA_")) and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.path.join(BUILD, "fake") + ":" + os.path.join(BUILD, "lib")
    p = subprocess.run([sys.executable, BENCH, "--tiny", "--cumemtrace", CT, "--out", str(out),
                        "--warmup", str(WARMUP), "--alternations", str(ALTERNATIONS),
                        "--block-steps", str(BLOCK_STEPS), "--bare-runs", "1",
                        "--max-overhead", "1000", "--python-costs"],
                       env=env, capture_output=True, text=True, timeout=600)
    return p, out


@pytest.mark.parametrize("workload,step", [
    # transformers' Trainer: zero_grad once before the loop (warm-up's first step), then per
    # step forward (the loss is inside the model), backward, optimizer, auto:step, zero_grad
    ("gpt2", ["auto:forward", "auto:backward", "auto:optimizer", "auto:zero_grad"]),
    # the plain loop: zero_grad, forward, the loss module, backward, optimizer
    ("resnet18", ["auto:zero_grad", "auto:forward", "auto:loss", "auto:backward",
                  "auto:optimizer"]),
])
def test_on_blocks_have_the_phases_and_off_blocks_none(tiny_run, workload, step):
    p, out = tiny_run
    assert p.returncode in (0, 1), p.stderr
    (path,) = glob.glob(str(out / ("traced-" + workload) / "*.json"))
    with open(path) as f:
        segs = segments(json.load(f))
    # warm-up (phases on), then off, on, off, on, off
    assert [m for m, _ in segs] == [None] + ["bench:off", "bench:on"] * ALTERNATIONS + [
        "bench:off"]
    for mark, seg in segs:
        steps = WARMUP if mark is None else BLOCK_STEPS if mark == "bench:on" else 0
        assert count(seg, "auto:step", "MARK") == steps, (mark, seg)
        for name in step:
            assert count(seg, name, "START") == count(seg, name, "END") == steps + (
                workload == "gpt2" and mark is None and name == "auto:zero_grad"), (mark, name)
        if mark == "bench:off":
            assert seg == []


def test_table_has_a_row_per_workload_and_the_exit_code_is_its_verdict(tiny_run):
    p, out = tiny_run
    lines = p.stdout.splitlines()
    assert lines[0].startswith("| workload | bare ms/step | off ms/step | on ms/step | on vs off "
                               "| on vs bare | off spread | bare A/A | <= 1000% |"), p.stdout
    rows = [ln for ln in lines[2:] if ln.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == ["| gpt2", "| resnet18"], p.stdout
    num = r"[0-9]+\.[0-9]{3}"
    pc = r"[+-][0-9]+\.[0-9]{2}%"
    for r in rows:
        # every cell measured; the one bare run has no A/A; a verdict judged on the numbers
        assert re.fullmatch(r"\| \w+ \| %s \| %s \| %s \| %s \| %s \| [0-9.]+%% \| - \| "
                            r"(PASS|FAIL: the Python side costs %s \(> 1000%%\)|FAIL: on is %s "
                            r"over bare \(> 1000%%\)) \|" % (num, num, num, pc, pc, pc, pc),
                            r), r
    assert p.returncode == (1 if any("FAIL" in r for r in rows) else 0), p.stdout + p.stderr
    results = sorted(os.path.basename(f) for f in glob.glob(str(out / "*.json")))
    assert results == ["bare-gpt2.json", "bare-resnet18.json", "costs-gpt2.json",
                       "costs-resnet18.json", "traced-gpt2.json", "traced-resnet18.json"]
    with open(out / "traced-resnet18.json") as f:
        got = json.load(f)
    assert [on for on, _ in got["blocks"]] == [False, True] * ALTERNATIONS + [False]


def blocks(*ms):
    """Alternating off, on, off... blocks with these ms per step."""
    return [(k % 2 == 1, m) for k, m in enumerate(ms)]


def test_summary_arithmetic_and_verdicts():
    traced = blocks(100.0, 101.0, 100.0, 102.0, 100.0)  # on vs off per pair: +1%, +2%
    r = bench.summarize("w", [blocks(99.0, 99.0, 100.0), blocks(101.0, 101.0, 100.0)], traced, 5)
    assert (r["bare"], r["off"], r["on"]) == (100.0, 100.0, 101.5)
    assert r["on_vs_off"] == pytest.approx(0.015) and r["on_vs_bare"] == pytest.approx(0.015)
    assert r["off_spread"] == 0 and r["bare_aa"] == pytest.approx(101 / 99 - 1)  # run medians
    assert (r["verdict"], r["why"]) == ("PASS", "")
    r = bench.summarize("w", [blocks(100.0)], traced, 1)
    assert (r["verdict"], r["why"]) == ("FAIL", "the Python side costs +1.50% (> 1%)")
    # the Python side free, but the run as a whole 3% over bare
    same = blocks(103.0, 103.0, 103.0, 103.0, 103.0)
    r = bench.summarize("w", [blocks(100.0), blocks(100.0)], same, 2.5)
    assert r["verdict"] == "FAIL" and r["why"] == "on is +3.00% over bare (> 2.5%)"
    # ... over bare runs (median 101) that differ by 2% themselves
    r = bench.summarize("w", [blocks(100.0), blocks(102.0)], same, 1)
    assert r["why"] == ("on is +1.98% over bare (> 1%); the bare runs differ by +2.00% "
                        "themselves: these runs cannot tell")
    assert bench.summarize("w", [], same, 1)["why"] == "no bare run to judge against"
    assert bench.summarize("w", [blocks(100.0)], None, 1)["why"] == "no traced run to judge"


def test_schedule_times_blocks_and_switches_between_them():
    switched = []
    s = bench.Schedule(2, 2, 3, switched.append, lambda: None)
    assert s.total == 2 + 5 * 3
    for _ in range(s.total):
        s.tick()
    assert switched == [False, True, False, True, False]
    assert [on for on, _ in s.blocks] == [False, True, False, True, False]
    with pytest.raises(ValueError):
        bench.Schedule(0, 2, 3, switched.append, lambda: None)


def test_a_failing_traced_run_is_a_fail_with_its_reason(tmp_path):
    """CUMEMTRACE_PHASES=0: nothing to switch; the traced child says so and the row fails."""
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUMEMTRACE_", "FAKE_CUDA_")) and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.path.join(BUILD, "fake") + ":" + os.path.join(BUILD, "lib")
    env["CUMEMTRACE_PHASES"] = "0"
    p = subprocess.run([sys.executable, BENCH, "--tiny", "--cumemtrace", CT, "--workloads",
                        "resnet18", "--warmup", "1", "--alternations", "1", "--block-steps", "1",
                        "--bare-runs", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert ("FAIL: traced resnet18 exited 1: trainer_overhead.py: cumemtrace's automatic phases "
            "are not installed") in p.stdout, p.stdout


@pytest.mark.parametrize("workload", ["gpt2", "resnet18"])
def test_python_costs_time_only_the_on_blocks(tiny_run, workload):
    """--python-costs: one more traced child whose timers count only inside on blocks: exactly
    one optimizer step post-hook and one backward lend per on-step (and its take-back), and the
    note names the parts with their microseconds."""
    p, out = tiny_run
    with open(os.path.join(str(out), "costs-%s.json" % workload)) as f:
        got = json.load(f)
    on_steps = ALTERNATIONS * BLOCK_STEPS
    calls = got["calls_in_on_blocks"]
    assert calls["_optimizer_post_hook"] == on_steps
    assert calls["_optimizer_pre_hook"] == on_steps
    assert calls["backward_caller"] == 2 * on_steps  # lent at backward's start, taken back
    assert calls["mark"] == on_steps  # auto:step
    assert set(got["us_per_on_step"]) == set(calls)
    note = [ln for ln in p.stdout.splitlines()
            if ln.startswith("%s: the Python side's parts" % workload)]
    assert len(note) == 1
    assert re.search(r"_optimizer_post_hook \d+\.\d", note[0])
