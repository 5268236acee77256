"""End-to-end: marks and ranges (include/cumemtrace.h, NVTX, Python ctypes), snapshots on demand
(cumemtrace_snapshot, SIGUSR2 / `cumemtrace snapshot`, --snapshot-every), the trace bound and
driver-visible memory (fake NVML). Expected numbers come from tests/programs/scenarios.h.
"""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (BENCH_PRELOAD, BUILD, CT, MiB, PRELOAD, actions, base_env, device_summary, load, prog,
                      run_preloaded, run_traced, snapshots, trace)

ACCESS_PATHS = ["ct_static_like", "ct_shared_like", "ct_lcuda"]
FAKE_NVML = os.path.join(BUILD, "fake_nvml", "libnvidia-ml.so.1")


def annotations(snap):
    return [(a["name"], a["stage"], a["device"]) for a in snap["external_annotations"]]


def by_suffix(snaps, suffix):
    found = [v for k, v in snaps.items() if k.endswith(suffix)]
    assert len(found) == 1, (suffix, list(snaps))
    return found[0]


def final(snaps):
    return by_suffix(snaps, f".{next(iter(snaps.values()))['cumemtrace']['pid']}.json")


def live_at(snap, time_us):
    """Tracked live bytes on all devices just before `time_us` (ring order: <= is before)."""
    live = 0
    for tr in snap["device_traces"]:
        for e in tr:
            if e["time_us"] > time_us:
                continue
            if e["action"] == "segment_alloc":
                live += e["size"]
            elif e["action"] == "segment_free":
                live -= e["size"]
    return live


MARKS = [("begin", "MARK", 0), ("load", "START", 0), ("inner", "START", 0), ("inner", "END", 0),
         ("load", "END", 0), ("on device 1", "MARK", 1), ("done", "MARK", 1)]


def check_marks(snaps, exe):
    assert len(snaps) == 2, list(snaps)
    end = final(snaps)
    assert end["cumemtrace"]["exe"].endswith("/" + exe)
    assert annotations(end) == MARKS
    times = [a["time_us"] for a in end["external_annotations"]]
    assert times == sorted(times)
    start = end["cumemtrace"]["start_time_us"]
    assert all(start <= t <= end["cumemtrace"]["end_time_us"] for t in times)
    # Same clock as the trace: "load" opens before the 1 MiB allocation, "inner" closes after
    # the 2 MiB one, "on device 1" comes after the 512 KiB allocation on device 1.
    t0, t1 = trace(end, 0), trace(end, 1)
    assert times[1] <= t0[0]["time_us"] and t0[0]["size"] == MiB
    assert times[2] <= t0[2]["time_us"] <= times[3] and t0[2]["size"] == 2 * MiB
    assert t1[0]["time_us"] <= times[5]
    assert live_at(end, times[4]) == 3 * MiB
    assert (device_summary(end, 0)["live_bytes"], device_summary(end, 1)["live_bytes"]) == (
        2 * MiB, 512 * 1024)
    # cumemtrace_snapshot("after load"): the state at the call, the annotations so far.
    tagged = by_suffix(snaps, ".after_load.json")
    t = tagged["cumemtrace"]
    assert (t["reason"], t["tag"], t["ended"]["how"]) == ("request", "after_load", "running")
    assert sorted(s["total_size"] for s in tagged["segments"]) == [MiB, 2 * MiB]
    assert annotations(tagged) == MARKS[:5]
    assert "tag" not in end["cumemtrace"] and end["cumemtrace"]["reason"] == "exit"


@pytest.mark.parametrize("exe", ACCESS_PATHS)
def test_marks_from_the_c_header_under_run(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "marks"])
    assert p.returncode == 0, p.stderr
    check_marks(snaps, exe)
    assert f"wrote {tmp_path}/traces/{exe}." in p.stderr and ".after_load.json" in p.stderr


def test_marks_from_the_c_header_under_plain_preload(tmp_path):
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "marks"], expect_files=2)
    assert p.returncode == 0, p.stderr
    check_marks(snaps, "ct_static_like")


NVTX = [("nvtx mark", "MARK", 0), ("outer", "START", 0), ("wide \u00e9", "START", 0),
        ("wide \u00e9", "END", 0), ("outer", "END", 0), ("cross-thread", "START", 0),
        ("cross-thread", "END", 0), ("domain range", "START", 0), ("domain range", "END", 0),
        ("registered", "MARK", 0)]


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_nvtx_under_run_needs_no_code_change(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "nvtx"])
    assert p.returncode == 0, p.stderr
    assert p.stdout == "nvtx levels 0 1 1 0\n"  # push/pop levels as NVTX documents them
    snap = final(snaps)
    assert annotations(snap) == NVTX
    ev = snap["external_annotations"]
    # The range ended on another thread still closes with its own name, after the 2 MiB block.
    assert ev[5]["time_us"] <= trace(snap, 0)[2]["time_us"] <= ev[6]["time_us"]


def test_nvtx_under_plain_preload_needs_the_injection_variable(tmp_path):
    p, snaps = run_preloaded(tmp_path / "without", [prog("ct_static_like"), "nvtx"])
    assert p.stdout == "nvtx levels -2 -2 -2 -2\n"
    assert annotations(final(snaps)) == []
    p, snaps = run_preloaded(tmp_path / "with", [prog("ct_static_like"), "nvtx"],
                             NVTX_INJECTION64_PATH=PRELOAD)
    assert p.stdout == "nvtx levels 0 1 1 0\n"
    assert annotations(final(snaps)) == NVTX


def test_run_keeps_an_injection_library_the_caller_chose(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "nvtx"],
                          NVTX_INJECTION64_PATH="/nonexistent/libother.so")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "nvtx levels -2 -2 -2 -2\n"
    assert annotations(final(snaps)) == []


def test_steps_marks_each_step_and_leaks_per_step(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "steps", "5", "4096"])
    assert p.returncode == 0, p.stderr
    snap = final(snaps)
    assert annotations(snap) == [("step", "MARK", 0)] * 5
    at_marks = [live_at(snap, a["time_us"]) for a in snap["external_annotations"]]
    assert at_marks == [0, 4096, 8192, 12288, 16384]
    d0 = device_summary(snap, 0)
    assert (d0["live_bytes"], d0["allocations"], d0["frees"]) == (5 * 4096, 10, 5)
    _, snaps = run_traced(tmp_path / "noleak", [prog("ct_static_like"), "steps", "3", "0"])
    snap = final(snaps)
    assert [live_at(snap, a["time_us"]) for a in snap["external_annotations"]] == [0, 0, 0]
    assert device_summary(snap, 0)["live_bytes"] == 0


PY_MARKS = """
import ctypes
_ct = ctypes.CDLL(None)
mark = getattr(_ct, "cumemtrace_mark", lambda name: None)
push = getattr(_ct, "cumemtrace_range_push", lambda name: None)
pop = getattr(_ct, "cumemtrace_range_pop", lambda: None)
snapshot = getattr(_ct, "cumemtrace_snapshot", lambda tag: None)
mark(b"py start"); push(b"epoch"); snapshot(b"mid/epoch"); pop()
print("ok")
"""


def test_python_ctypes_one_liner(tmp_path):
    plain = subprocess.run([sys.executable, "-c", PY_MARKS], env=base_env(), capture_output=True,
                           text=True)
    assert (plain.returncode, plain.stdout) == (0, "ok\n"), plain.stderr
    p, snaps = run_traced(tmp_path, [sys.executable, "-c", PY_MARKS])
    assert (p.returncode, p.stdout) == (0, "ok\n"), p.stderr
    assert annotations(final(snaps)) == [("py start", "MARK", 0), ("epoch", "START", 0),
                                         ("epoch", "END", 0)]
    assert annotations(by_suffix(snaps, ".mid_epoch.json")) == [("py start", "MARK", 0),
                                                                 ("epoch", "START", 0)]


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def wait_for(predicate, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def pending(pid, sig):
    """True while `sig` waits to be delivered to the process (/proc/PID/status: its thread's
    SigPnd or the process's ShdPnd)."""
    with open(f"/proc/{pid}/status") as f:
        masks = [int(line.split()[1], 16) for line in f
                 if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m >> (int(sig) - 1) & 1 for m in masks)


def maps_has(pid, text):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return text in f.read()
    except OSError:
        return False


def start_spinning(tmp_path):
    """`cumemtrace run -o tmp_path/traces` of ct_static_like spinning until the test touches
    tmp_path/stop (a fixed 4 s raced the snapshots on a loaded machine; 120 s at most), once
    tracing has started and its first allocation is recorded: (run, target pid, out, stop)."""
    out, stop = tmp_path / "traces", tmp_path / "stop"
    run = subprocess.Popen([CT, "run", "-o", str(out), "--", prog("ct_static_like"), "spin", "120",
                            str(stop)],
                           env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        target = wait_for(lambda: children(run.pid), "the traced child")[0]
        wait_for(lambda: maps_has(target, "cumemtrace-ring-usr2"), "tracing to start")
        # Tracing starts inside the allocation's first driver calls: a request before the
        # allocation's own record would find no segment (seen on a loaded machine).
        assert run.stdout.readline() == "allocated\n"
    except BaseException:
        stop.touch()
        run.communicate(timeout=60)
        raise
    return run, target, out, stop


def test_signal_snapshots_while_running(tmp_path):
    run, target, out, stop = start_spinning(tmp_path)
    try:
        name = f"ct_static_like.{target}"
        q = subprocess.run([CT, "snapshot", str(target)], capture_output=True, text=True)
        assert q.returncode == 0, q.stderr
        wait_for(lambda: (out / f"{name}.request-1.json").exists(), "request-1")
        os.kill(target, signal.SIGUSR2)
        wait_for(lambda: (out / f"{name}.request-2.json").exists(), "request-2")
        assert run.poll() is None  # the target runs on
    finally:
        stop.touch()
        _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    snaps = snapshots(out)
    assert sorted(snaps) == sorted([f"{name}.json", f"{name}.request-1.json", f"{name}.request-2.json"])
    for n in (1, 2):
        t = snaps[f"{name}.request-{n}.json"]
        assert (t["cumemtrace"]["reason"], t["cumemtrace"]["tag"]) == ("request", f"request-{n}")
        assert t["cumemtrace"]["ended"]["how"] == "running"
        assert [s["total_size"] for s in t["segments"]] == [MiB]
    assert snaps[f"{name}.json"]["segments"] == []
    assert f"wrote {out}/{name}.request-1.json" in err


def test_snapshot_of_the_run_itself_is_refused_and_sigusr2_never_ends_it(tmp_path):
    """Issue 57: `pgrep -f train.py` finds `cumemtrace run` first (its argv names the program).
    `snapshot` of run's pid used to say it asked, and the SIGUSR2 killed run (exit 140) and the
    program's trace with it. The collector maps the ring too; the ring's name carries its
    producer's pid, so `snapshot` refuses the collector and names the process it traces, and a
    SIGUSR2 sent to run anyway is said and ignored."""
    run, target, out, stop = start_spinning(tmp_path)
    try:
        assert maps_has(run.pid, "cumemtrace-ring-usr2")  # the collector maps the ring too
        q = subprocess.run([CT, "snapshot", str(run.pid)], capture_output=True, text=True)
        assert (q.returncode, q.stderr) == (2, (
            f"cumemtrace snapshot: pid {run.pid} is cumemtrace's collector, not a traced process; "
            f"it traces pid {target} (ct_static_like): ask it: cumemtrace snapshot {target}\n"))
        os.kill(run.pid, signal.SIGUSR2)
        said = (f"ignored signal {int(signal.SIGUSR2)} (User defined signal 2) from pid {os.getpid()}: "
                f"pid {run.pid} is cumemtrace's collector; the processes it traces: {target} "
                "(cumemtrace snapshot PID asks one of them for a snapshot)")
        lines = []
        while not lines or said not in lines[-1]:  # the warning is the collector's answer
            lines.append(run.stderr.readline())
            assert lines[-1], lines  # EOF: run died of the signal
        assert run.poll() is None
    finally:
        stop.touch()
        _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    name = f"ct_static_like.{target}"
    assert sorted(snapshots(out)) == [f"{name}.json"]  # no request: nothing was asked


def test_snapshot_request_during_start_up_is_kept(tmp_path):
    # The ring's name appears in /proc/PID/maps (and `cumemtrace snapshot` may signal) before the
    # collector has acknowledged the ring. A request in that window used to be dropped: the
    # handler had no ring to count it in, and `snapshot` had already said it was sent. The window
    # is held open here by stopping the collector (the `run` process) while tracing starts.
    out = tmp_path / "traces"
    stop, go = tmp_path / "stop", tmp_path / "go"
    run = subprocess.Popen([CT, "run", "-o", str(out), "--", prog("ct_static_like"), "spin", "120",
                            str(stop), str(go)],
                           env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = False
    try:
        target = wait_for(lambda: children(run.pid), "the traced child")[0]
        os.kill(run.pid, signal.SIGSTOP)
        stopped = True
        go.touch()
        wait_for(lambda: maps_has(target, "cumemtrace-ring-usr2"), "the ring")
        q = subprocess.run([CT, "snapshot", str(target)], capture_output=True, text=True)
        assert q.returncode == 0, q.stderr
        # The target takes the signal while the collector, stopped, cannot have acknowledged.
        wait_for(lambda: not pending(target, signal.SIGUSR2), "the request's delivery")
        os.kill(run.pid, signal.SIGCONT)
        stopped = False
        name = f"ct_static_like.{target}"
        wait_for(lambda: (out / f"{name}.request-1.json").exists(), "request-1")
    finally:
        if stopped:
            os.kill(run.pid, signal.SIGCONT)
        go.touch()
        stop.touch()
        _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    snaps = snapshots(out)
    assert sorted(snaps) == sorted([f"{name}.json", f"{name}.request-1.json"])
    t = snaps[f"{name}.request-1.json"]
    # Taken when the collector saw the request: before or after it read the 1 MiB allocation
    # that started tracing, as it happened to drain.
    assert (t["cumemtrace"]["reason"], t["cumemtrace"]["tag"]) == ("request", "request-1")
    assert t["cumemtrace"]["ended"]["how"] == "running"


def test_snapshot_command_refuses_what_it_cannot_ask(tmp_path):
    p = subprocess.run([CT, "snapshot", "999999999"], capture_output=True, text=True)
    assert p.returncode == 2 and "no process with pid 999999999" in p.stderr
    assert subprocess.run([CT, "snapshot"], capture_output=True).returncode == 2
    # An untraced process would die of SIGUSR2: it is left alone. It blocks the signal, so one
    # sent would still be pending when `snapshot` returns: none is.
    sleeper = subprocess.Popen([sys.executable, "-c",
                                "import signal, sys, time\n"
                                "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])\n"
                                "print('blocked', flush=True)\n"
                                "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline() == "blocked\n"
        p = subprocess.run([CT, "snapshot", str(sleeper.pid)], capture_output=True, text=True)
        assert p.returncode == 2 and "is not being traced" in p.stderr
        assert not pending(sleeper.pid, signal.SIGUSR2)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    # A traced program with its own SIGUSR2 handler keeps it, and is not signalled.
    script = ("import ctypes, signal, sys, time\n"
              "signal.signal(signal.SIGUSR2, lambda *a: print('own handler', flush=True))\n"
              "ctypes.CDLL(None).cumemtrace_mark(b'started')\n"
              "print('ready', flush=True)\n"
              "sys.stdin.readline()\n")  # runs until the test closes its stdin
    out = tmp_path / "traces"
    run = subprocess.Popen([CT, "run", "-o", str(out), "--", sys.executable, "-c", script],
                           env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline() == "ready\n"
        target = children(run.pid)[0]
        assert maps_has(target, "cumemtrace-ring") and not maps_has(target, "cumemtrace-ring-usr2")
        p = subprocess.run([CT, "snapshot", str(target)], capture_output=True, text=True)
        assert p.returncode == 2 and "handles SIGUSR2 itself" in p.stderr
        os.kill(target, signal.SIGUSR2)
        assert run.stdout.readline() == "own handler\n"
    finally:
        run.communicate(timeout=60)
    assert run.returncode == 0
    assert not any(".request-" in n for n in snapshots(out))


def periodic_names(snaps):
    names = sorted((k for k in snaps if ".periodic-" in k), key=lambda k: int(k.split("-")[-1][:-5]))
    for i, n in enumerate(names, 1):
        assert n.endswith(f".periodic-{i}.json"), names
        t = snaps[n]["cumemtrace"]
        assert (t["reason"], t["tag"], t["ended"]["how"]) == ("periodic", f"periodic-{i}", "running")
        assert [s["total_size"] for s in snaps[n]["segments"]] == [MiB]
    return names


def test_periodic_snapshots(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "spin", "1.0"], ["--snapshot-every", "0.4"])
    assert p.returncode == 0, p.stderr
    # Due at 0.4 s and 0.8 s of a 1 s run; a third only if the exit is delayed past 1.2 s.
    assert 2 <= len(periodic_names(snaps)) <= 3
    assert len(snaps) == len(periodic_names(snaps)) + 1
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "spin", "1.0"], expect_files=None,
                             CUMEMTRACE_SNAPSHOT_EVERY="0.4")
    assert p.returncode == 0, p.stderr
    assert 2 <= len(periodic_names(snaps)) <= 3
    for bad in (["--snapshot-every", "0"], ["--snapshot-every", "soon"]):
        assert subprocess.run([CT, "run", *bad, "--", "true"], capture_output=True).returncode == 2
    q = subprocess.run([prog("ct_static_like"), "exit", "5"], capture_output=True, text=True,
                       env=base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(tmp_path / "bad"),
                                    CUMEMTRACE_SNAPSHOT_EVERY="-1"))
    assert q.returncode == 5
    assert q.stderr.count("cumemtrace:") == 1 and "CUMEMTRACE_SNAPSHOT_EVERY" in q.stderr


def test_trace_bound_is_counted_apart_from_lost_events(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "basic"], ["--max-trace-events", "4"])
    assert p.returncode == 0, p.stderr
    snap = final(snaps)
    t = snap["cumemtrace"]
    # basic has 16 trace entries (7 on device 0, 9 on device 1): the newest 4 stay.
    assert (t["trace_entries_dropped"], t["events_dropped"], t["events_total"]) == (12, 0, 7)
    assert actions(snap, 0) == []
    assert actions(snap, 1) == ["free_completed", "segment_free", "segment_alloc", "alloc"]
    assert snap["allocator_settings"]["trace_entries_dropped"] == "12"
    assert len(snap["segments"]) == 3  # the live state stays complete
    assert "oldest 12 trace entries discarded" in p.stderr
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "basic"],
                             CUMEMTRACE_MAX_TRACE_EVENTS="4")
    t = final(snaps)["cumemtrace"]
    assert (t["trace_entries_dropped"], t["events_dropped"]) == (12, 0)
    _, snaps = run_traced(tmp_path / "all", [prog("ct_static_like"), "basic"])
    assert final(snaps)["cumemtrace"]["trace_entries_dropped"] == 0


def test_driver_memory_from_nvml(tmp_path):
    used0, used1 = 300 * MiB, 2 * MiB
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "spin", "1.5"],
                          CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_USED=f"0:{used0},1:{used1}")
    assert p.returncode == 0, p.stderr
    t = final(snaps)["cumemtrace"]
    samples = t["driver_memory"]
    # The driver reports device 1 too, but the process never used it: no ordinal to name it by.
    assert {(s["device"], s["used_bytes"]) for s in samples} == {(0, used0)}
    # Sampled when device 0 was first used, then about once a second (kept only when the value
    # changed: here never), and once more at exit() if the context was still there.
    assert 1 <= len(samples) <= 3
    times = [s["time_us"] for s in samples]
    assert times == sorted(times) and t["start_time_us"] <= times[0]
    # The fake NVML reports the 300 MiB from the start: all there right after the context's
    # creation, so all of it is the context as measured.
    assert [(c["device"], c["bytes"]) for c in t["contexts"]] == [(0, used0)]
    assert "device 0 at exit: driver-visible 300 MiB = CUDA context 300 MiB + other untracked " \
        "0 B + tracked 0 B" in p.stderr


def test_driver_devices_map_to_cuda_ordinals_by_pci_address(tmp_path):
    # NVML lists the devices in the other order: its index 1 is the process's CUDA device 0.
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "spin", "0.5"],
                          CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_BUS="20,10",
                          FAKE_NVML_USED=f"1:{300 * MiB}")
    assert p.returncode == 0, p.stderr
    samples = final(snaps)["cumemtrace"]["driver_memory"]
    assert samples and {(s["device"], s["used_bytes"]) for s in samples} == {(0, 300 * MiB)}
    # Without PCI addresses from NVML the index stands in (here index 1, the wrong device).
    p, snaps = run_traced(tmp_path / "idx", [prog("ct_static_like"), "spin", "0.5"],
                          CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_BUS="20,10",
                          FAKE_NVML_NO_PCI="1", FAKE_NVML_USED=f"1:{300 * MiB}")
    samples = final(snaps)["cumemtrace"]["driver_memory"]
    assert samples and {(s["device"], s["used_bytes"]) for s in samples} == {(1, 300 * MiB)}


def test_driver_memory_at_oom(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "oom"], FAKE_CUDA_MEM_LIMIT=8 * MiB,
                          CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_USED=f"0:{64 * MiB}")
    assert p.returncode == 0, p.stderr
    oom = by_suffix(snaps, ".oom.json")
    assert oom["cumemtrace"]["reason"] == "oom"
    last = oom["cumemtrace"]["driver_memory"][-1]
    assert (last["device"], last["used_bytes"]) == (0, 64 * MiB)
    assert last["time_us"] >= trace(oom, 0)[-1]["time_us"]  # taken at the OOM


@pytest.mark.parametrize("env", [{"CUMEMTRACE_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"},
                                 {"CUMEMTRACE_NVML_LIBRARY": FAKE_NVML, "FAKE_NVML_INIT": "fail"}])
def test_no_nvml_means_no_samples_and_no_noise(tmp_path, env):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "exit", "0"], **env)
    assert p.returncode == 0
    assert final(snaps)["cumemtrace"]["driver_memory"] == []
    assert "driver-visible" not in p.stderr
    lines = [l for l in p.stderr.splitlines()
             if not l.startswith(("cumemtrace: writing snapshots to", "cumemtrace: see where"))]
    assert len(lines) == 2 and lines[0].startswith("cumemtrace: wrote ") and "exited with 0" in lines[1]


def test_bench_pause_recording_drops_events_only_while_paused(tmp_path):
    # bench/gpu/async_pool_pair.cu's in-process A/B switch: refused before tracing started, then
    # the 2 MiB allocation and free made while paused are missing and the rest are there, in order.
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "pause_recording"],
                          CUMEMTRACE_PRELOAD=BENCH_PRELOAD)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["before tracing: -1", "pause: 0", "resume: 0"]
    (snap,) = snaps.values()
    got = [(e["action"], e["size"]) for e in snap["device_traces"][0]]
    assert got == [("segment_alloc", MiB), ("alloc", MiB), ("segment_alloc", 3 * MiB),
                   ("alloc", 3 * MiB), ("free_requested", MiB), ("free_completed", MiB),
                   ("segment_free", MiB), ("free_requested", 3 * MiB),
                   ("free_completed", 3 * MiB), ("segment_free", 3 * MiB)], got
    assert snap["cumemtrace"]["devices"][0]["peak_bytes"] == 4 * MiB
