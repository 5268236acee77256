"""Shared helpers of the real-PyTorch tests (run by the torch venv's Python, which imports the real
torch 2.11; tests/support/torch_venv_pytest.sh): this build's CLI, preload and fake driver, a
program run under `cumemtrace run`, its snapshots and its `cumemtrace:` lines."""
import glob
import json
import os
import subprocess
import sys

SOURCE = os.environ.get("CT_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("CT_BUILD", os.path.join(SOURCE, "build"))
CT = os.path.join(BUILD, "bin", "cumemtrace")
HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)
MiB = 1 << 20
sys.path.insert(0, os.path.join(SOURCE, "preload", "python"))


def env(**extra):
    """The test's environment without any cumemtrace or fake-driver setting, the fake driver as
    libcuda.so.1, plus `extra`."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CUMEMTRACE_", "FAKE_CUDA_", "PYTORCH_")) and k != "LD_PRELOAD"}
    e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "fake") + ":" + os.path.join(BUILD, "lib")
    e.update(extra)
    return e


def run(tmp_path, args, **extra):
    """`cumemtrace run -o TMP/traces -- args`: (completed process, {file name: snapshot}). run
    returns once every snapshot is written (its collector holds our pipes until then)."""
    out = tmp_path / "traces"
    p = subprocess.run([CT, "run", "-o", str(out), "--", *args], env=env(**extra),
                       capture_output=True, text=True, timeout=300)
    snaps = {}
    for path in sorted(glob.glob(os.path.join(str(out), "*.json"))):
        with open(path) as f:
            snaps[os.path.basename(path)] = json.load(f)
    return p, snaps


def our_lines(p):
    """The `cumemtrace:` lines other than run's own (where snapshots go, each file written, each
    process's summary, the job's summary, which command reads it)."""
    own = ("cumemtrace: wrote ", "cumemtrace: writing snapshots to ", "cumemtrace: job: ",
           "cumemtrace: see where the memory went")
    return [ln for ln in p.stderr.splitlines() if ln.startswith("cumemtrace:")
            and not ln.startswith(own) and " (pid " not in ln]
