"""End-to-end, issue 7 (reliability): process lifecycle (vfork, posix_spawn, setsid, closed
descriptors, fork while another thread is in a hook), back-pressure from a stopped collector,
faults injected through the fake driver, and a full output directory.

Every run is bounded by a timeout that only guards against deadlock: synchronisation is by pipe
EOF (a detached collector inherits the target's stdout and stderr, so reading them to the end
waits for every collector), by lines the program prints, or by process state. Expected numbers
come from tests/programs/scenarios.h.
"""
import os
import pickle
import select
import shutil
import signal
import subprocess
import time

import pytest

from conftest import (CT, MiB, PRELOAD, SANITIZER, actions, base_env, device_summary, prog,
                      snapshots, trace)
from test_e2e import SA, A, FR, FC, SF, check_basic

MODES = ["run", "preload"]
# A sanitized collector writes each of forkloop's 50 child snapshots several times slower.
DEADLOCK_GUARD_S = 90 if SANITIZER else 20


def command(tmp_path, mode, args, run_args=(), **env):
    """The command line and environment that trace `args` under `cumemtrace run` or under plain
    LD_PRELOAD (detached collector); snapshots land in tmp_path/traces either way."""
    out = tmp_path / "traces"
    if mode == "run":
        return [CT, "run", "-o", str(out), *run_args, "--", *args], base_env(**env)
    return list(args), base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(out), **env)


def run_guarded(cmd, env, timeout=DEADLOCK_GUARD_S):
    """Runs to the end of its output (so every collector it started is done), in its own process
    group, which is killed if the timeout passes: a hang fails the test instead of blocking it."""
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{cmd} hung for {timeout} s\nstdout: {out}\nstderr: {err}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def traced(tmp_path, mode, args, run_args=(), **env):
    p = run_guarded(*command(tmp_path, mode, args, run_args, **env))
    return p, snapshots(tmp_path / "traces")


def by_argv(snaps):
    """{tuple(argv[1:]): snapshot}; each image must have run once."""
    out = {}
    for snap in snaps.values():
        key = tuple(snap["cumemtrace"]["argv"][1:])
        assert key not in out, f"two snapshots for {key}"
        out[key] = snap
    return out


def cumemtrace_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("cumemtrace:")]


def program_stderr(stderr):
    return "".join(line + "\n" for line in stderr.splitlines() if not line.startswith("cumemtrace:"))


def check_no_tool_complaints(p):
    """Nothing from cumemtrace but its report (where output goes, a "wrote" line and a summary per
    snapshot, which command reads them; from `run` or from a detached collector): no warning, no
    'tracing disabled'."""
    report = ("cumemtrace: wrote ", "cumemtrace: writing snapshots to ",
              "cumemtrace: see where the memory went: ")
    for line in cumemtrace_lines(p.stderr):
        assert line.startswith(report) or " (pid " in line, p.stderr


def sizes(snap):
    return sorted(s["total_size"] for s in snap["segments"])


def counts(snap, device=0):
    d = device_summary(snap, device)
    return d["allocations"], d["frees"], d["live_bytes"], d["peak_bytes"]


EXIT_0 = {"how": "exit", "code": 0, "signal": 0}
# A child that leaves with _exit() records no exit() in its ring: the collector reads its zombie's
# status unless its parent reaped it first (tests/e2e/test_e2e.py, fork).
EXIT_0_OR_REAPED = (EXIT_0, {"how": "vanished", "code": 0, "signal": 0})


# ---- vfork, posix_spawn --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_vfork_and_posix_spawn_children_get_their_own_snapshots(tmp_path, mode):
    exe = prog("ct_static_like")
    p, snaps = traced(tmp_path, mode, [exe, "spawn"])
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    check_no_tool_complaints(p)
    images = by_argv(snaps)
    assert sorted(images) == [("basic",), ("exit", "5"), ("spawn",)]
    parent, vforked, spawned = images[("spawn",)], images[("exit", "5")], images[("basic",)]
    t = parent["cumemtrace"]
    assert t["ended"] == EXIT_0
    assert (t["events_total"], t["events_dropped"]) == (2, 0)
    assert sizes(parent) == [MiB, 2 * MiB]
    assert counts(parent) == (2, 0, 3 * MiB, 3 * MiB)
    # The vfork child's image: its own exit status and nothing of its parent's memory.
    v = vforked["cumemtrace"]
    assert v["ended"] == {"how": "exit", "code": 5, "signal": 0}
    assert (v["events_total"], v["events_dropped"]) == (1, 0)
    assert sizes(vforked) == [MiB]
    check_basic(spawned, "ct_static_like")
    for child in (v, spawned["cumemtrace"]):
        assert child["ppid"] == t["pid"]
        assert child["pid"] != t["pid"]


# ---- setsid --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_child_that_calls_setsid_stays_traced(tmp_path, mode):
    p, snaps = traced(tmp_path, mode, [prog("ct_static_like"), "setsid"])
    assert p.returncode == 0, p.stderr
    check_no_tool_complaints(p)
    assert len(snaps) == 2
    parent = next(s for s in snaps.values() if sizes(s) == [MiB])
    child = next(s for s in snaps.values() if s is not parent)
    assert parent["cumemtrace"]["ended"] == EXIT_0
    assert parent["cumemtrace"]["events_total"] == 1
    c = child["cumemtrace"]
    assert c["ppid"] == parent["cumemtrace"]["pid"]
    # Allocations before and after setsid(), and the exit() after it, all in the child's snapshot.
    assert c["ended"] == EXIT_0
    assert (c["events_total"], c["events_dropped"]) == (3, 0)
    assert actions(child, 0) == [SA, A, SA, A, FR, FC, SF]
    assert sizes(child) == [3 * MiB]
    assert counts(child) == (2, 1, 3 * MiB, 5 * MiB)


# ---- a process that closes every descriptor ---------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_closing_every_descriptor_loses_no_event(tmp_path, mode):
    """The program closes the preload's liveness socket (close_range) and reuses its number while
    it goes on allocating for longer than the collector's look at a process whose socket closed:
    the ring is still mapped, so tracing goes on; the process's snapshot is written when it really
    ends and holds every event, and a child forked afterwards keeps the descriptors the program
    opened on those numbers."""
    p, snaps = traced(tmp_path, mode, [prog("ct_static_like"), "closefds", "0.5"])
    assert p.returncode == 0, p.stderr
    check_no_tool_complaints(p)
    assert len(snaps) == 2, list(snaps)
    parent = next(s for s in snaps.values() if s["cumemtrace"]["events_total"] != 1)
    child = next(s for s in snaps.values() if s is not parent)
    t = parent["cumemtrace"]
    assert t["ended"] == EXIT_0
    assert (t["events_total"], t["events_dropped"]) == (5, 0)
    assert actions(parent, 0) == [SA, A, SA, A, FR, FC, SF, SA, A, FR, FC, SF]
    assert [e["size"] for e in trace(parent, 0)] == [MiB] * 2 + [2 * MiB] * 2 + [MiB] * 3 + [4 * MiB] * 5
    assert sizes(parent) == [2 * MiB]
    assert counts(parent) == (3, 2, 2 * MiB, 6 * MiB)
    c = child["cumemtrace"]
    assert c["ppid"] == t["pid"]
    assert c["events_total"] == 1
    assert sizes(child) == [3 * MiB]
    assert c["ended"] in EXIT_0_OR_REAPED
    # A report per snapshot (the child has a collector of its own); the parent's once, at its end.
    assert p.stderr.count("cumemtrace: wrote ") == 2
    assert p.stderr.count(f"(pid {t['pid']}) exited with 0") == 1


# ---- fork while another thread is inside a hook ------------------------------------------------------

def test_fork_while_another_thread_is_in_a_hook(tmp_path):
    """50 forks while another thread allocates and frees without pause: no child hangs (in the
    preload or the driver), each is traced on its own although its parent keeps the collector
    busy, and the parent's counts stay exact. A short trace keeps the parent's file small."""
    forks = 50
    p, snaps = traced(tmp_path, "run", [prog("ct_static_like"), "forkloop", str(forks)],
                      ["--max-trace-events", "100"])
    assert p.returncode == 0, p.stderr
    check_no_tool_complaints(p)
    assert p.stdout.startswith("rounds ")
    rounds = int(p.stdout.split()[1])
    assert rounds > 0
    parent = next(s for s in snaps.values() if s["cumemtrace"]["events_total"] != 1)
    children = [s for s in snaps.values() if s is not parent]
    t = parent["cumemtrace"]
    assert t["ended"] == EXIT_0
    assert (t["events_total"], t["events_dropped"]) == (2 * rounds, 0)
    assert counts(parent)[:3] == (rounds, rounds, 0)
    assert t["anomalies"] == []
    assert len(children) == forks
    for child in children:
        c = child["cumemtrace"]
        assert c["ppid"] == t["pid"]
        assert (c["events_total"], c["events_dropped"]) == (1, 0)
        assert sizes(child) == [2 * MiB]


def test_fork_while_another_thread_starts_the_session(tmp_path):
    """A thread is inside the first traced call (its context creation), starting the tracing
    session (held there by a collector wrapper), when another thread forks: the child must start
    a session of its own instead of waiting forever for one that no thread of its will ever
    finish."""
    sync = tmp_path / "sync"
    sync.mkdir()
    wrapper = tmp_path / "collector.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f": > '{sync}/collector-started'\n"
        f"while [ ! -e '{sync}/release' ]; do sleep 0.01; done\n"
        f"exec '{CT}' \"$@\"\n")
    wrapper.chmod(0o755)
    p, snaps = traced(tmp_path, "preload", [prog("ct_static_like"), "forkstart", str(sync)],
                      CUMEMTRACE_COLLECTOR=str(wrapper))
    assert p.returncode == 0, p.stderr
    check_no_tool_complaints(p)
    assert len(snaps) == 2, list(snaps)
    parent = next(s for s in snaps.values() if sizes(s) == [MiB])
    child = next(s for s in snaps.values() if s is not parent)
    assert parent["cumemtrace"]["ended"] == EXIT_0
    assert parent["cumemtrace"]["events_total"] == 1
    assert child["cumemtrace"]["ppid"] == parent["cumemtrace"]["pid"]
    assert child["cumemtrace"]["events_total"] == 1
    assert sizes(child) == [2 * MiB]


# ---- a stopped collector -----------------------------------------------------------------------------

def read_line(stream, timeout):
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            pytest.fail(f"no line within {timeout} s (got {data!r})")
        chunk = os.read(fd, 1)
        if not chunk:
            pytest.fail(f"EOF before a full line (got {data!r})")
        data += chunk
    return data.decode()


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s")
        time.sleep(0.01)


def ring_inodes(pid):
    with open(f"/proc/{pid}/maps") as f:
        return {int(line.split()[4]) for line in f if "/memfd:cumemtrace-ring" in line}


def collector_of(pid):
    """The detached collector of `pid`: the `cumemtrace __collect` process that maps its ring."""
    ring = ring_inodes(pid)
    assert len(ring) == 1, ring
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pid:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"\0__collect\0" not in f.read():
                    continue
            if ring_inodes(int(entry)) & ring:
                return int(entry)
        except OSError:
            continue
    pytest.fail(f"no collector maps the ring of pid {pid}")


@pytest.mark.parametrize("mode", MODES)
def test_stopped_collector_never_blocks_the_target(tmp_path, mode):
    """SIGSTOP on the collector while the target makes more events than its 1 MiB ring (16384
    slots, one per event without stacks) holds: the target waits at most
    CUMEMTRACE_MAX_WAIT_MS once, then counts what it cannot write as dropped and finishes. The
    snapshot says so and `check` fails it as incomplete."""
    n = 12000
    max_wait_ms = 200
    # A short trace keeps the file small; the counts and the live state stay complete.
    cmd, env = command(tmp_path, mode, [prog("ct_static_like"), "burst", str(n)],
                       ["--buffer-mb", "1", "--stack-depth", "0", "--max-trace-events", "100"],
                       CUMEMTRACE_MAX_WAIT_MS=max_wait_ms)
    if mode == "preload":
        env.update(CUMEMTRACE_BUFFER_MB="1", CUMEMTRACE_STACK_DEPTH="0",
                   CUMEMTRACE_MAX_TRACE_EVENTS="100")
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    collector = None
    try:
        ready = read_line(p.stdout, DEADLOCK_GUARD_S)
        assert ready.startswith("ready ")
        target = int(ready.split()[1])
        collector = p.pid if mode == "run" else collector_of(target)
        os.kill(collector, signal.SIGSTOP)
        p.stdin.write(b"go\n")
        p.stdin.flush()
        start = time.monotonic()
        # The target exits on its own (it stays a zombie: its parent is stopped, or is this test,
        # which reaps it only below), while its collector is still stopped.
        wait_for(lambda: proc_state(target) in ("Z", None), DEADLOCK_GUARD_S,
                 "the target did not finish while its collector was stopped")
        elapsed = time.monotonic() - start
        assert proc_state(collector) == "T"
    finally:
        if collector:
            os.kill(collector, signal.SIGCONT)
    try:
        out, err = p.communicate(timeout=DEADLOCK_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        pytest.fail("the collector did not finish after SIGCONT")
    assert p.returncode == 0, err
    # One bounded wait, not one per event.
    assert elapsed < max_wait_ms / 1000 + 5
    snaps = snapshots(tmp_path / "traces")
    assert len(snaps) == 1
    path, snap = next(iter(snaps.items()))
    t = snap["cumemtrace"]
    assert t["ended"] == EXIT_0
    dropped, recorded = t["events_dropped"], t["events_total"]
    assert dropped > 0 and recorded >= 16384 - 1024  # about a full ring, less its other records
    # Every record the program made is either in the snapshot or counted as dropped: its 2n + 2
    # allocation events and its exit record, which came after the ring was full.
    assert recorded + dropped == 2 * n + 2 + 1
    c = subprocess.run([CT, "check", str(tmp_path / "traces" / path)], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 1, c.stdout + c.stderr
    assert f"incomplete: {dropped} of {recorded} events dropped" in c.stdout
    allowed = subprocess.run([CT, "check", "--allow-drops", str(tmp_path / "traces" / path)],
                             capture_output=True, text=True, timeout=60)
    assert allowed.returncode == 0, allowed.stdout


# ---- faults injected through the fake driver ---------------------------------------------------------

def untraced(args, **env):
    return run_guarded(list(args), base_env(**env))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nth", [2, 4])
def test_failed_allocation_is_counted_and_the_program_sees_it_unchanged(tmp_path, mode, nth):
    """FAKE_CUDA_FAIL_NTH_ALLOC: an allocation fails with CUDA_ERROR_INVALID_VALUE (not OOM). The
    program's own error path is the same as without the preload; the snapshot counts the failed
    call in events_total, adds no trace entry, no segment and no anomaly, and keeps the rest
    exact. In `basic`, allocation call 2 is allocate_weights' 2 MiB, call 4 the 3 MiB allocAsync."""
    args = [prog("ct_static_like"), "basic"]
    plain = untraced(args, FAKE_CUDA_FAIL_NTH_ALLOC=nth)
    failing = {2: "allocate_weights (2 MiB)", 4: "allocAsync d (3 MiB)"}[nth]
    assert plain.stderr == f"ct: {failing} failed: CUresult 1\n"
    p, snaps = traced(tmp_path, mode, args, FAKE_CUDA_FAIL_NTH_ALLOC=nth)
    assert (p.returncode, p.stdout) == (plain.returncode, plain.stdout) == (3, "")
    assert program_stderr(p.stderr) == plain.stderr
    assert len(snaps) == 1
    snap = next(iter(snaps.values()))
    t = snap["cumemtrace"]
    assert t["ended"] == {"how": "exit", "code": 3, "signal": 0}
    assert t["anomalies"] == []
    assert t["events_dropped"] == 0
    if nth == 2:
        assert t["events_total"] == 2  # a, and the failed call
        assert actions(snap, 0) == [SA, A]
        assert [(s["device"], s["total_size"]) for s in snap["segments"]] == [(0, MiB)]
        assert [d["device"] for d in t["devices"]] == [0]
    else:
        assert t["events_total"] == 5  # a, b, free a, c, and the failed call
        assert actions(snap, 0) == [SA, A, SA, A, FR, FC, SF]
        assert actions(snap, 1) == [SA, A]
        assert sorted((s["device"], s["total_size"]) for s in snap["segments"]) == [
            (0, 2 * MiB), (1, 4 * MiB)]
        assert counts(snap, 1) == (1, 0, 4 * MiB, 4 * MiB)


OPTIONAL_ENTRY_POINTS = "cuMemCreate,cuMemMap,cuMemAllocFromPoolAsync,cuMemAllocManaged,cuMemHostAlloc"


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_shared_like"])
def test_driver_without_optional_entry_points_is_traced_exactly(tmp_path, exe):
    """FAKE_CUDA_MISSING: the driver does not offer entry points the program never calls; the
    preload tolerates it and traces the rest exactly."""
    args = [prog(exe), "basic"]
    assert untraced(args, FAKE_CUDA_MISSING=OPTIONAL_ENTRY_POINTS).returncode == 0
    p, snaps = traced(tmp_path, "run", args, FAKE_CUDA_MISSING=OPTIONAL_ENTRY_POINTS)
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 1
    check_basic(next(iter(snaps.values())), exe)


@pytest.mark.parametrize("mode", MODES)
def test_entry_point_the_program_needs_is_missing_as_without_the_preload(tmp_path, mode):
    """The program looks up cuMemAllocAsync, which the driver lacks: it gets the same
    CUDA_ERROR_NOT_FOUND as without the preload and fails the same way; what it did before is
    traced exactly."""
    args = [prog("ct_static_like"), "basic"]
    plain = untraced(args, FAKE_CUDA_MISSING="cuMemAllocAsync")
    assert (plain.returncode, plain.stderr) == (3, "ct: allocAsync d (3 MiB) failed: CUresult 500\n")
    p, snaps = traced(tmp_path, mode, args, FAKE_CUDA_MISSING="cuMemAllocAsync")
    assert p.returncode == 3
    assert program_stderr(p.stderr) == plain.stderr
    snap = next(iter(snaps.values()))
    t = snap["cumemtrace"]
    assert t["ended"] == {"how": "exit", "code": 3, "signal": 0}
    assert t["events_total"] == 4
    assert actions(snap, 0) == [SA, A, SA, A, FR, FC, SF]
    assert actions(snap, 1) == [SA, A]


# NAME[:VERSION[:FLAGS]] lookups for ct_gpa_probe: hooked and unhooked names, each ABI choice, the
# knobs' failures, a name no driver has, a library's name, and invalid flags.
PROBES = ["cuMemAlloc", "cuMemAlloc:3000", "cuMemFree", "cuMemAllocAsync:12000:2",
          "cuMemAllocFromPoolAsync", "cuMemHostAlloc", "cuMemCreate:10000", "cuNoSuchFunction",
          "cublasCreate_v2", "cuMemAlloc:12000:4", "cuGetProcAddress", "cuInit"]
PROBE_FAULTS = dict(FAKE_CUDA_MISSING="cuMemAllocFromPoolAsync",
                    FAKE_CUDA_GPA_ERROR="cuMemFree=999,cuMemHostAlloc=3")


@pytest.mark.parametrize("mode", MODES)
def test_lookup_errors_and_unknown_symbols_pass_through_unchanged(tmp_path, mode):
    """cuGetProcAddress[_v2] and dlsym answer exactly as the driver does, failures included:
    result code, symbol status, and whether the output pointer was written."""
    args = [prog("ct_gpa_probe"), *PROBES]
    plain = untraced(args, **PROBE_FAULTS)
    assert (plain.returncode, plain.stderr) == (0, "")
    lines = plain.stdout.splitlines()
    # The fake's answers themselves, so that equality below compares something.
    for expected in ["cuMemAlloc v2 0 0 set", "cuMemFree v2 999 1 null", "cuMemFree v1 999 null",
                     "cuMemHostAlloc v2 3 1 null", "cuMemAllocFromPoolAsync v2 500 1 null",
                     "cuMemCreate v2 500 2 null", "cuNoSuchFunction v2 500 1 null",
                     "cuNoSuchFunction v1 500 null", "cuNoSuchFunction nullpfn 1",
                     "cuNoSuchFunction dlsym null", "cublasCreate_v2 v2 500 1 null",
                     "cuMemAlloc v2 1 -1 untouched", "cuMemAllocAsync v2 0 0 set"]:
        assert expected in lines, (expected, lines)
    p, snaps = traced(tmp_path, mode, args, **PROBE_FAULTS)
    assert (p.returncode, p.stdout, program_stderr(p.stderr)) == (0, plain.stdout, "")
    assert snaps == {}  # no allocation: no session, no file


@pytest.mark.parametrize("mode", MODES)
def test_lookup_error_the_program_cannot_survive_fails_it_the_same_way(tmp_path, mode):
    args = [prog("ct_static_like"), "basic"]
    env = dict(FAKE_CUDA_GPA_ERROR="cuMemAllocManaged=999")
    plain = untraced(args, **env)
    assert (plain.returncode, plain.stderr) == (
        3, "ct: cuGetProcAddress_v2(cuMemAllocManaged, 6000, 0) failed: CUresult 999\n")
    p, snaps = traced(tmp_path, mode, args, **env)
    assert (p.returncode, p.stdout, program_stderr(p.stderr)) == (plain.returncode, plain.stdout, plain.stderr)
    assert snaps == {}


# ---- a hostile program scribbles on its ring ------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_corrupt_ring_ends_reading_with_an_error_in_the_snapshot(tmp_path, mode):
    """The ring is the target's memory: a record it forges (200 continuation slots, past the
    limit) stops the collector reading that ring with an error instead of a crash or an overrun.
    The program runs on unharmed, the snapshot keeps what came before the forgery and says why
    the rest is missing, and `check` fails it as incomplete even with --allow-drops."""
    p, snaps = traced(tmp_path, mode, [prog("ct_static_like"), "scribble"])
    assert p.returncode == 0, p.stderr
    ticket = int(p.stdout.split()[1])
    assert p.stdout == f"forged {ticket}\n"
    error = f"corrupt ring from pid {{}}: record {ticket} claims 200 continuation slots"
    ((name, snap),) = snaps.items()
    t = snap["cumemtrace"]
    assert t["ring_error"] == error.format(t["pid"])
    assert f"cumemtrace: {error.format(t['pid'])}" in cumemtrace_lines(p.stderr)
    assert t["ended"] == EXIT_0
    # The 1 MiB allocation before the forgery, nothing after it.
    assert (t["events_total"], sizes(snap)) == (1, [MiB])
    assert [(e["action"], e["size"]) for e in trace(snap, 0)] == [("segment_alloc", MiB),
                                                                   ("alloc", MiB)]
    for allow in ([], ["--allow-drops"]):
        c = subprocess.run([CT, "check", *allow, str(tmp_path / "traces" / name)], capture_output=True,
                           text=True, timeout=60)
        assert c.returncode == 1, c.stdout + c.stderr
        assert f"error: incomplete: {error.format(t['pid'])}; the 1 events before it were " \
            "recorded, later ones are missing" in c.stdout + c.stderr
    # The pickle for PyTorch's viewers keeps the same record of it.
    pk = tmp_path / "s.pickle"
    subprocess.run([CT, "convert", str(tmp_path / "traces" / name), "--to", "pickle", "-o",
                    str(pk)], check=True, capture_output=True, timeout=60)
    with open(pk, "rb") as f:
        assert pickle.load(f)["cumemtrace"] == t


# ---- a full output directory -------------------------------------------------------------------------

def private_mount_prefix():
    """A command prefix giving the test a mount namespace of its own (as root, or as a user with
    unprivileged user namespaces), or None."""
    if not shutil.which("unshare"):
        return None
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"]):
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"],
                               capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


# Mounts a tmpfs on $1, fills it, runs the rest of the arguments, then lists $1 (inside the
# namespace: the tmpfs goes away with it) and exits with the command's status.
FULL_DISK = """
mount -t tmpfs -o size=64k none "$1" || exit 90
dd if=/dev/zero of="$1/filler" bs=4096 2>/dev/null
dir=$1; shift
"$@"; rc=$?
echo "listing: $(ls -A "$dir" | tr '\\n' ' ')"
exit $rc
"""


@pytest.mark.parametrize("gate", [False, True])
def test_full_output_directory(tmp_path, gate):
    """The output directory fills up: `run` says so in one line, leaves no partial file behind
    and exits with the program's status; a gate (--max-leaked-bytes) still judges the snapshot
    it could not write instead of passing for want of a file."""
    prefix = private_mount_prefix()
    if prefix is None:
        pytest.skip("no private mount namespace (unshare) to mount a small tmpfs in")
    out = tmp_path / "full"
    out.mkdir()
    gate_args = ["--max-leaked-bytes", "0"] if gate else []
    cmd = [*prefix, "sh", "-c", FULL_DISK, "sh", str(out),
           CT, "run", "-o", str(out), *gate_args, "--", prog("ct_static_like"), "exit", "5"]
    p = run_guarded(cmd, base_env())
    assert p.stdout.splitlines()[-1].strip() == "listing: filler"
    lines = [l for l in cumemtrace_lines(p.stderr) if not l.startswith("cumemtrace: writing snapshots to")]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"cumemtrace: cannot write {out}/ct_static_like.")
    assert lines[0].endswith(".json: No space left on device")
    # The program's own failure (exit 5) is never masked by the gate's verdict.
    assert p.returncode == 5, p.stderr
    if gate:
        assert "1.00 MiB leaked on device 0 by 1 allocation (limit 0 B)" in p.stderr
        assert "not written" in p.stderr


@pytest.mark.parametrize("mode", MODES)
def test_killed_collector_is_said_once_by_the_target(tmp_path, mode):
    """The collector is killed while the target waits on stdin: the target goes on untouched
    (exit 0) and says, once, that no snapshot will be written for it; nothing is written."""
    cmd, env = command(tmp_path, mode, [prog("ct_static_like"), "burst", "100"])
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        ready = read_line(p.stdout, DEADLOCK_GUARD_S)
        target = int(ready.split()[1])
        collector = p.pid if mode == "run" else collector_of(target)
        os.kill(collector, signal.SIGKILL)
        if mode == "run":
            p.wait(timeout=DEADLOCK_GUARD_S)  # reaped: the target's only reader is gone
        else:
            wait_for(lambda: proc_state(collector) in ("Z", None), DEADLOCK_GUARD_S,
                     "the collector did not die")
        p.stdin.write(b"go\n")
        p.stdin.close()
        # EOF once the target (the last writer) ends.
        err = p.stderr.read().decode()
        p.stdout.read()
        if mode == "preload":
            assert p.wait(timeout=DEADLOCK_GUARD_S) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    gone = f"cumemtrace: collector gone; no snapshot will be written for PID {target}\n"
    assert err.count("collector gone") == 1 and gone in err, err
    assert snapshots(tmp_path / "traces") == {}


@pytest.mark.parametrize("mode", MODES)
def test_child_that_calls__exit_ended_with_an_exit(tmp_path, mode):
    """fork: the child allocates and leaves with _exit(0), its parent reaps it at once. The
    preload records the exit from _exit itself: the snapshot says exit 0 (not "vanished", which
    the summary calls "killed or crashed")."""
    p, snaps = traced(tmp_path, mode, [prog("ct_static_like"), "fork"])
    assert p.returncode == 0, p.stderr
    child = next(s for s in snaps.values() if sizes(s) == [2 * MiB])
    assert child["cumemtrace"]["ended"] == EXIT_0
    assert "killed or crashed" not in p.stderr
