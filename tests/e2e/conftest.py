"""Shared helpers for the end-to-end tests: run programs traced, load and validate snapshots."""
import glob
import json
import os
import subprocess

import jsonschema
import pytest

BUILD = os.environ.get("CT_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SOURCE = os.environ.get("CT_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
CT = os.path.join(BUILD, "bin", "cumemtrace")
PRELOAD = os.path.join(BUILD, "lib", "libcumemtrace.so")
# The same library with the benchmarks' pause switches (preload/hooks/bench_switches.cpp).
BENCH_PRELOAD = os.path.join(BUILD, "lib", "libcumemtrace_bench.so")
FAKE_DIR = os.path.join(BUILD, "fake")
MiB = 1 << 20


def _sanitizer():
    """The build's CUMEMTRACE_SANITIZE (scripts/sanitize.sh), empty for a plain build."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CUMEMTRACE_SANITIZE:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


SANITIZER = _sanitizer()

with open(os.path.join(SOURCE, "schemas", "snapshot.schema.json")) as f:
    SCHEMA = json.load(f)


def prog(name):
    return os.path.join(BUILD, "bin", name)


def base_env(**extra):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = FAKE_DIR + ":" + os.path.join(BUILD, "lib")
    for k in list(env):
        if k.startswith("CUMEMTRACE_") or k.startswith("FAKE_CUDA_") or k == "LD_PRELOAD":
            del env[k]
    env.update({k: str(v) for k, v in extra.items()})
    return env


def load(path):
    with open(path) as f:
        snap = json.load(f)
    jsonschema.validate(snap, SCHEMA)
    return snap


def run_traced(tmp_path, args, extra_run_args=(), **env):
    """`cumemtrace run -o tmp -- args`; returns (completed process, {basename: snapshot})."""
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), *extra_run_args, "--", *args]
    p = subprocess.run(cmd, env=base_env(**env), capture_output=True, text=True, timeout=120)
    return p, snapshots(out)


def snapshots(out):
    return {os.path.basename(f): load(f) for f in sorted(glob.glob(os.path.join(str(out), "*.json")))}


def run_preloaded(tmp_path, args, expect_files=1, **env):
    """Plain LD_PRELOAD with CUMEMTRACE_OUTPUT; returns (completed process, {basename: snapshot})
    once the detached collector is done. The handshake: the collector inherits the program's
    stdout and stderr and holds them until it has written its files and exited, so the end of
    file on those pipes, which subprocess.run waits for, comes after the last file (each is
    renamed into place whole). expect_files: how many snapshots there must be (None: any)."""
    out = tmp_path / "plain"
    e = base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(out), **env)
    p = subprocess.run(args, env=e, capture_output=True, text=True, timeout=120)
    snaps = snapshots(out)
    assert expect_files is None or len(snaps) == expect_files, (sorted(snaps), p.stderr)
    return p, snaps


def trace(snap, device):
    return snap["device_traces"][device] if device < len(snap["device_traces"]) else []


def actions(snap, device):
    return [e["action"] for e in trace(snap, device)]


def device_summary(snap, device):
    for d in snap["cumemtrace"]["devices"]:
        if d["device"] == device:
            return d
    raise AssertionError(f"no device {device} in {snap['cumemtrace']['devices']}")


def marker_line(filename, marker):
    path = os.path.join(SOURCE, "tests", "programs", filename)
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(f"{marker} not in {path}")


@pytest.fixture(scope="session", autouse=True)
def built():
    for path in (CT, PRELOAD, os.path.join(FAKE_DIR, "libcuda.so.1")):
        assert os.path.exists(path), f"{path} missing: build the project first"
