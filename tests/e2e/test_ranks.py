"""End-to-end, issue 44: `cumemtrace run` owns every process it started, however a launcher
started it, and judges each rank (tests/e2e/ranks_job.py: two workers, rank 0 keeps 2 MiB at
exit, rank 1 3 MiB).

The workers lose the inherited control socket (close_fds, a new session, multiprocessing's
spawn), so they reach run's collector through its rendezvous socket. No test waits for a file:
every snapshot must exist when `run` returns.
"""
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys

import pytest

from conftest import CT, MiB, PRELOAD, SOURCE, base_env, device_summary, snapshots
from test_processes_and_faults import run_guarded

JOB = os.path.join(SOURCE, "tests", "e2e", "ranks_job.py")
HOST = socket.gethostname()
LEAKED = {0: 2 * MiB, 1: 3 * MiB}


def run_job(tmp_path, mode, run_args=(), **env):
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), *run_args, "--", sys.executable, JOB, mode, "2"]
    p = run_guarded(cmd, base_env(**env))
    return p, snapshots(out)


def by_rank(snaps):
    """{rank: (file name, snapshot)} from names EXE.rankN.PID.json, the pid the snapshot's."""
    out = {}
    for name, snap in snaps.items():
        m = re.search(r"\.rank(\d+)\.(\d+)\.json$", name)
        assert m, f"{name}: no rank in the name"
        assert int(m.group(2)) == snap["cumemtrace"]["pid"], name
        out[int(m.group(1))] = (name, snap)
    return out


def check_job(p, snaps):
    assert "no CUDA allocation seen" not in p.stderr, p.stderr
    assert len(snaps) == 2, (list(snaps), p.stderr)
    ranks = by_rank(snaps)
    assert sorted(ranks) == [0, 1]
    for rank, (name, snap) in ranks.items():
        assert device_summary(snap, 0)["live_bytes"] == LEAKED[rank], name
        rank_map = snap["cumemtrace"]["rank"]
        assert rank_map["RANK"] == str(rank) and rank_map["WORLD_SIZE"] == "2", rank_map
        assert rank_map["TORCHELASTIC_RUN_ID"] == "ranks-job", rank_map
        # One summary per process, named by its rank.
        pid = snap["cumemtrace"]["pid"]
        who = f"(pid {pid}; rank {rank}/2 (local {rank}) on {HOST}) exited with 0"
        assert p.stderr.count(who) == 1, p.stderr
    pid1 = ranks[1][1]["cumemtrace"]["pid"]
    assert (f"cumemtrace: job: 2 processes traced; live at exit 5.00 MiB in total, most by "
            f"rank 1/2 (local 1) on {HOST} (pid {pid1}): 3.00 MiB.") in p.stderr, p.stderr
    return ranks


@pytest.mark.parametrize("mode", ["torchrun", "orphans"])
def test_workers_that_lost_the_control_socket_are_traced_by_run(tmp_path, mode):
    """torchrun's way (new session, descriptors closed): both workers' snapshots are run's, exist
    when it returns, and carry the rank in name and tool section. `orphans`: the launcher is
    reaped while both workers still run; run waits for them."""
    p, snaps = run_job(tmp_path, mode)
    assert p.returncode == 0, p.stderr
    check_job(p, snaps)


@pytest.mark.parametrize("limit, status", [("2MiB", 1), ("3MiB", 0)])
def test_limit_judges_every_rank_and_names_the_one_that_fails(tmp_path, limit, status):
    """--max-leaked-bytes between the ranks' leaks fails naming rank 1 alone; at rank 1's leak
    it passes."""
    p, snaps = run_job(tmp_path, "torchrun", ["--max-leaked-bytes", limit])
    assert p.returncode == status, p.stderr
    ranks = check_job(p, snaps)
    failed = [line for line in p.stderr.splitlines() if " failed: " in line]
    if status == 0:
        assert failed == [], p.stderr
        assert "cumemtrace check: 0 failed, 4 passed" in p.stderr, p.stderr
        return
    pid1 = ranks[1][1]["cumemtrace"]["pid"]
    # The text verdict names the rank on its error line, once.
    errors = [line for line in p.stderr.splitlines() if ": error: " in line]
    assert [os.path.basename(e.split(" (rank ")[0]) + " (rank " + e.split(" (rank ", 1)[1]
            for e in errors] == [
        f"{ranks[1][0]} (rank 1/2 (local 1) on {HOST}): error: 3.00 MiB leaked on device 0 by 2 "
        "allocations (limit 2.00 MiB)"], p.stderr
    assert failed == [], p.stderr
    assert "cumemtrace check: 1 failed, 3 passed" in p.stderr, p.stderr
    assert p.stderr.splitlines()[-1] == "cumemtrace check: 1 failed, 3 passed", p.stderr
    # The JSON verdict goes to stdout: the terminal still gets one line for the failing rank.
    p, snaps = run_job(tmp_path / "json", "torchrun", ["--max-leaked-bytes", limit, "--format",
                                                       "json"])
    assert p.returncode == status, p.stderr
    job = json.loads(p.stdout)["job"]
    assert (job["ok"], job["files"], len(job["failed_files"])) == (False, 2, 1), p.stdout
    failed = [line for line in p.stderr.splitlines() if " failed: " in line]
    pid1 = [s for s in snaps.values() if s["cumemtrace"]["rank"].get("RANK") == "1"][0][
        "cumemtrace"]["pid"]
    assert failed == [f"cumemtrace: rank 1/2 (local 1) on {HOST} (pid {pid1}) failed: 3.00 MiB "
                      "leaked on device 0 by 2 allocations (limit 2.00 MiB)"], failed


def test_a_dead_rendezvous_falls_back_to_a_collector_of_its_own(tmp_path):
    """A process whose run is gone (the socket's path leads nowhere) is traced as under plain
    LD_PRELOAD: its own collector writes its snapshot."""
    out = tmp_path / "traces"
    env = base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(out), RANK="1", WORLD_SIZE="2",
                   LOCAL_RANK="1", CUMEMTRACE_CONTROL_SOCKET=str(tmp_path / "gone" / "control"))
    # Reading the program's output to its end waits for the detached collector (it inherits it).
    p = run_guarded([sys.executable, JOB, "worker"], env)
    assert p.returncode == 0, p.stderr
    assert "tracing disabled" not in p.stderr, p.stderr
    ranks = by_rank(snapshots(out))
    assert list(ranks) == [1]
    pid = ranks[1][1]["cumemtrace"]["pid"]
    assert f"(pid {pid}; rank 1/2 (local 1) on {HOST}) exited with 0" in p.stderr, p.stderr
    assert device_summary(ranks[1][1], 0)["live_bytes"] == 3 * MiB


def setuid_program(tmp_path):
    """A set-user-ID program owned by another user (root can make one: a copy of echo given to
    nobody); else a system one, which only the limit's case uses (it never runs)."""
    if os.geteuid() == 0:
        copy = tmp_path / "echo-setuid"
        shutil.copy("/bin/echo", copy)
        os.chown(copy, 65534, 65534)
        os.chmod(copy, 0o4755)
        return str(copy), True
    for name in ("su", "passwd", "mount"):
        path = shutil.which(name)
        if path and os.stat(path).st_mode & stat.S_ISUID and os.stat(path).st_uid != os.getuid():
            return path, False
    pytest.skip("no set-user-ID program of another user here")


def test_setuid_program_is_said_to_run_untraced_and_a_limit_refuses_it(tmp_path):
    program, runnable = setuid_program(tmp_path)
    out = tmp_path / "traces"
    line = f"cumemtrace: {program} is setuid: the loader ignores LD_PRELOAD for it"
    if runnable:
        p = run_guarded([CT, "run", "-o", str(out), "--", program, "hello"], base_env())
        assert p.returncode == 0, p.stderr
        assert p.stdout == "hello\n"
        assert p.stderr.splitlines() == [line + "; running the program untraced"], p.stderr
    p = run_guarded([CT, "run", "-o", str(out), "--max-leaked-bytes", "0", "--", program, "hello"],
                    base_env())
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.splitlines() == [
        line + "; not running the program: --max-leaked-bytes needs a trace"], p.stderr
    assert not list(out.glob("*.json"))
