"""The settings table's one rule (preload/core/settings_table.h, issue 46): a switch is 0 or 1,
a `run` flag beats the variable, which beats the default, and `run` passes on only what the user
gave; a bad value is one `cumemtrace:` line naming the variable, the value and what was
expected, and tracing off (the Python side's switches: that feature off)."""
import collections
import subprocess
import sys

from conftest import PRELOAD, base_env, prog, run_preloaded, run_traced
from test_torch_blocks import entries, final, refusals, run as run_torch


def cumemtrace_lines(p):
    return [ln for ln in p.stderr.splitlines() if ln.startswith("cumemtrace:")]


def test_debug_is_a_switch(tmp_path):
    # CUMEMTRACE_DEBUG=0 used to turn the diagnostics on (any value counted).
    lines = {}
    for value in ("0", "1"):
        p, _ = run_preloaded(tmp_path / value, [prog("ct_static_like"), "basic"],
                             CUMEMTRACE_DEBUG=value)
        assert p.returncode == 0, p.stderr
        lines[value] = [ln for ln in cumemtrace_lines(p) if "the ring was full" in ln]
    assert lines["0"] == [] and len(lines["1"]) == 1, lines
    p = subprocess.run([prog("ct_static_like"), "exit", "3"], capture_output=True, text=True,
                       env=base_env(LD_PRELOAD=PRELOAD,
                                    CUMEMTRACE_OUTPUT=str(tmp_path / "bad"), CUMEMTRACE_DEBUG="yes"))
    assert p.returncode == 3
    assert cumemtrace_lines(p) == [
        "cumemtrace: invalid CUMEMTRACE_DEBUG (expected 0 or 1); tracing disabled: yes"]


def depths(snaps):
    """{frames per stacked event: how many events}: the basic scenario's five stacked driver
    events are 6 and 7 native frames deep in full."""
    snap = final(snaps)
    return dict(collections.Counter(len(e["frames"]) for tr in snap["device_traces"] for e in tr
                                    if e.get("frames")))


def test_run_keeps_the_stack_depth_of_the_environment_and_its_flag_wins(tmp_path):
    args = [prog("ct_static_like"), "basic"]
    p, snaps = run_traced(tmp_path / "default", args)
    assert p.returncode == 0, p.stderr
    assert depths(snaps) == {6: 2, 7: 3}
    # `run` used to replace the variable with its own default (32).
    p, snaps = run_traced(tmp_path / "env", args, CUMEMTRACE_STACK_DEPTH="5")
    assert p.returncode == 0, p.stderr
    assert depths(snaps) == {5: 5}
    p, snaps = run_traced(tmp_path / "flag", args, ["--stack-depth", "6"], CUMEMTRACE_STACK_DEPTH="5")
    assert p.returncode == 0, p.stderr
    assert depths(snaps) == {6: 5}


def test_bad_slow_unwind_turns_tracing_off(tmp_path):
    p = subprocess.run([prog("ct_static_like"), "exit", "4"], capture_output=True, text=True,
                       env=base_env(LD_PRELOAD=PRELOAD,
                                    CUMEMTRACE_OUTPUT=str(tmp_path), CUMEMTRACE_SLOW_UNWIND="yes"))
    assert p.returncode == 4
    assert cumemtrace_lines(p) == [
        "cumemtrace: invalid CUMEMTRACE_SLOW_UNWIND (expected 0 or 1); tracing disabled: yes"]
    assert not list(tmp_path.glob("*.json"))
    # Under run: said before the program starts, which runs untraced (with a limit: not at all).
    p, snaps = run_traced(tmp_path / "run", [prog("ct_static_like"), "exit", "4"],
                          CUMEMTRACE_SLOW_UNWIND="2")
    assert (p.returncode, snaps) == (4, {})
    assert cumemtrace_lines(p) == ["cumemtrace: invalid CUMEMTRACE_SLOW_UNWIND (expected 0 or 1): "
                                   "2; running the program untraced"]
    p, snaps = run_traced(tmp_path / "gate", [prog("ct_static_like"), "exit", "4"],
                          ["--max-leaked-bytes", "0"], CUMEMTRACE_SLOW_UNWIND="2")
    assert (p.returncode, snaps) == (2, {})
    assert len(cumemtrace_lines(p)) == 1 and "not running the program" in p.stderr, p.stderr


def test_bad_nvml_library_turns_tracing_off(tmp_path):
    # Neither an absolute path nor a file name the loader searches for.
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "exit", "5"], expect_files=0,
                             CUMEMTRACE_NVML_LIBRARY="yes")
    assert p.returncode == 5
    assert cumemtrace_lines(p) == [
        "cumemtrace: invalid CUMEMTRACE_NVML_LIBRARY (expected a shared library: an absolute path "
        "or a file name): yes; tracing disabled"], p.stderr
    # `run` reads it itself: a bad value of its own settings is exit 2 before the program starts.
    p, snaps = run_traced(tmp_path / "run", [prog("ct_static_like"), "exit", "5"],
                          CUMEMTRACE_NVML_LIBRARY="lib/libnvidia-ml.so.1")
    assert (p.returncode, snaps) == (2, {})
    assert p.stderr == ("cumemtrace run: invalid CUMEMTRACE_NVML_LIBRARY (expected a shared "
                        "library: an absolute path or a file name): lib/libnvidia-ml.so.1\n")


def test_bad_torch_switch_keeps_the_driver_view(tmp_path):
    # The Python side's switch: one line, PyTorch's blocks not captured, tracing goes on.
    p, snaps = run_torch(tmp_path, "basic", CUMEMTRACE_TORCH="yes")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == ["cumemtrace: invalid CUMEMTRACE_TORCH (expected 0 or 1): yes; that "
                           "feature is off"]
    snap = final(snaps)
    assert entries(snap) == []
    MiB = 1 << 20
    assert [(a, size) for a, _, size in entries(snap, "driver")] == [
        ("segment_alloc", 2 * MiB), ("alloc", 2 * MiB), ("segment_alloc", 20 * MiB),
        ("alloc", 20 * MiB), ("segment_alloc", 30 * MiB), ("alloc", 30 * MiB),
        ("free_requested", 30 * MiB), ("free_completed", 30 * MiB), ("segment_free", 30 * MiB)]
