"""End-to-end: the OOM verdict on the fake driver (pytorch/oom_verdict.h). The `oom` scenario
(tests/programs/scenarios.h) allocates 1 MiB blocks until the driver refuses one: with
FAKE_CUDA_MEM_LIMIT = 8 MiB that is the ninth, with 0 B free on the device. The collector says so in
one line at the moment of the OOM, the program's exit status is unchanged, and `report` starts
with the verdict for the OOM snapshot and for the exit one.
"""
import json
import os
import re
import subprocess

from conftest import CT, MiB, base_env, prog, run_traced

LINE = ("exhaustion: 1.00 MiB requested, 0 B free even compacted (device free 0 B)")


def report(path, *args):
    p = subprocess.run([CT, "report", path, *args], env=base_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_oom_verdict_line_report_and_json(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "oom"], FAKE_CUDA_MEM_LIMIT=8 * MiB)
    assert p.returncode == 0, p.stderr  # the program handles its OOM and exits 0, as without us
    assert p.stdout.strip() == "allocated 8"
    (oom_name,) = [n for n in snaps if n.endswith(".oom.json")]
    (exit_name,) = [n for n in snaps if not n.endswith(".oom.json")]
    out = str(tmp_path / "traces")
    oom_path, exit_path = os.path.join(out, oom_name), os.path.join(out, exit_name)
    # One line at the OOM, with the verdict and the file.
    lines = [l for l in p.stderr.splitlines() if "out of memory" in l]
    assert lines == [f"cumemtrace: wrote {oom_path}: out of memory on device 0: {LINE}"], p.stderr

    text = report(oom_path)
    head = text.split("\nDevice 0\n")[0]
    assert re.search(r"\nOOM 1 on device 0 at \+\d+\.\d{6} s: exhaustion\n", head), head
    assert f"\n  {LINE}\n" in head
    assert "\n  a driver allocation could not get 1.00 MiB; the device had 0 B free\n" in head
    assert "\n  budget: 8.00 MiB (held on the device + its free bytes)\n" in head
    assert "\n  other libraries: 8.00 MiB (" in head
    assert ("\n  advice: at least 1.00 MiB more would have had to be free: what is live must "
            "shrink by that much\n") in head
    # The failing request's own stack, from its site on (the site rule of analysis/frames.h: the
    # scenario's frames are in cumemtrace's namespace, so the program's site is main).
    stack = head.split("\n  the failing request:\n")[1].splitlines()
    assert re.fullmatch(r"        at main \(\S*tests/programs/ct_static_like\.cpp:\d+\)", stack[0]), stack
    # A snapshot written at the OOM holds what was live then, not at exit.
    assert "\n  live at this snapshot: 8.00 MiB in 8 allocations\n" in text
    assert "at exit" not in text
    assert "Anomalies: none" in text  # an OOM is no anomaly; it is reported above

    j = json.loads(report(oom_path, "--format", "json"))
    (o,) = j["ooms"]
    assert (o["verdict"], o["requested_bytes"], o["cached_free_bytes"], o["largest_free_bytes"],
            o["budget_bytes"], o["device_free_bytes"], o["shortfall_bytes"], o["source"]) == \
        ("exhaustion", MiB, 0, None, 8 * MiB, 0, MiB, "driver")

    # The exit snapshot still holds the OOM: its report starts with the same verdict, and says
    # "at exit" of what it holds then (nothing).
    text = report(exit_path)
    assert f"\n  {LINE}\n" in text.split("\nDevice 0\n")[0]
    assert "\n  live at exit: 0 B in 0 allocations\n" in text
