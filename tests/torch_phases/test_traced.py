"""End-to-end: a real-PyTorch script under `cumemtrace run` (the real preload, our sitecustomize,
the fake driver): its snapshot's external_annotations hold exactly the automatic phases."""
import glob
import json
import os
import subprocess
import sys

from conftest import SOURCE

BUILD = os.environ.get("CT_BUILD", os.path.join(SOURCE, "build"))
CT = os.path.join(BUILD, "bin", "cumemtrace")
PRELOAD = os.path.join(BUILD, "lib", "libcumemtrace.so")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traced_training.py")

STEP = [("auto:zero_grad", "START"), ("auto:zero_grad", "END"),
        ("auto:forward", "START"), ("auto:forward", "END"),  # the model
        ("auto:loss", "START"), ("auto:loss", "END"),  # the loss module
        ("auto:backward", "START"), ("auto:backward", "END"),
        ("auto:optimizer", "START"), ("auto:optimizer", "END"), ("auto:step", "MARK")]


def run(tmp_path, script=SCRIPT, **env):
    out = tmp_path / "traces"
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUMEMTRACE_", "FAKE_CUDA_")) and k != "LD_PRELOAD"}
    e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "fake") + ":" + os.path.join(BUILD, "lib")
    e.update(env)
    p = subprocess.run([CT, "run", "-o", str(out), "--", sys.executable, script], env=e,
                       capture_output=True, text=True, timeout=300)
    files = sorted(glob.glob(os.path.join(str(out), "*.json")))
    assert p.returncode == 0, p.stderr
    assert len(files) == 1, (files, p.stderr)
    with open(files[0]) as f:
        return p, json.load(f)


def owners_exported():
    syms = subprocess.run(["nm", "-D", "--defined-only", PRELOAD], capture_output=True,
                          text=True, check=True).stdout
    return any(line.split()[-1] == "cumemtrace_torch_owners" for line in syms.splitlines())


def our_lines(p):
    own = ("cumemtrace: wrote ", "cumemtrace: writing snapshots to ",
           "cumemtrace: see where the memory went")
    return [ln for ln in p.stderr.splitlines() if ln.startswith("cumemtrace:")
            and not ln.startswith(own) and " (pid " not in ln]


def test_snapshot_holds_the_automatic_phases(tmp_path):
    p, snap = run(tmp_path)
    got = [(a["name"], a["stage"]) for a in snap["external_annotations"]]
    assert got == STEP * 2 + [("auto:forward", "START"), ("auto:forward", "END")]
    times = [a["time_us"] for a in snap["external_annotations"]]
    assert times == sorted(times)
    # On the CPU no walk has a CUDA tensor to send; the only line is a preload without the export.
    missing = ("cumemtrace: this libcumemtrace.so has no cumemtrace_torch_owners; phases without "
               "ownership walks")
    assert our_lines(p) == ([] if owners_exported() else [missing])


def test_phases_off(tmp_path):
    p, snap = run(tmp_path, CUMEMTRACE_PHASES="0")
    assert snap["external_annotations"] == []
    assert our_lines(p) == []
