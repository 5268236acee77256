"""Ranks of the real torch.distributed (gloo on the CPU) under the real launchers, where
tests/e2e/test_ranks.py imitates them: torchrun (its workers' RANK variables and the group's rank,
both recorded) and torch.multiprocessing.spawn (no launcher variables: the rank reaches the
preload only through init_process_group, preload/python/cumemtrace_ranks.py). Each job's files
are named by rank, hold that rank's fake-driver memory (ranks_job.py: 2 MiB, rank 1 3 MiB), and
`cumemtrace report DIR` lists the ranks."""
import os
import re
import socket
import subprocess
import sys

from conftest import CT, HERE, MiB, VENV_BIN, env, our_lines, run

JOB = os.path.join(HERE, "ranks_job.py")
HOST = socket.gethostname()


def check_ranks(p, snaps, torchrun):
    assert p.returncode == 0, p.stderr
    assert our_lines(p) == [], p.stderr
    ranks = {}
    for name, snap in snaps.items():
        m = re.fullmatch(r"python3\.11\.rank(\d)\.(\d+)\.json", name)
        assert m and int(m.group(2)) == snap["cumemtrace"]["pid"], name
        ranks[int(m.group(1))] = snap["cumemtrace"]
    assert sorted(ranks) == [0, 1], (list(snaps), p.stderr)
    for rank, tool in ranks.items():
        group = {"torch.distributed.rank": str(rank), "torch.distributed.world_size": "2"}
        if torchrun:  # torchrun's variables, and the group's rank with its LOCAL_RANK
            group["torch.distributed.local_rank"] = str(rank)
            run_id = tool["rank"].get("TORCHELASTIC_RUN_ID", "")
            group.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                         LOCAL_WORLD_SIZE="2", GROUP_RANK="0", TORCHELASTIC_RUN_ID=run_id)
            assert run_id, tool["rank"]
        assert tool["rank"] == group
        assert [(d["device"], d["live_bytes"]) for d in tool["devices"]] == [
            (0, (2 + rank) * MiB)]
        local = " (local %d)" % rank if torchrun else ""
        assert p.stderr.count("(pid %d; rank %d/2%s on %s) exited with 0" % (
            tool["pid"], rank, local, HOST)) == 1, p.stderr
    local = " (local 1)" if torchrun else ""
    assert ("cumemtrace: job: 2 processes traced; live at exit 5.00 MiB in total, most by rank "
            "1/2%s on %s (pid %d): 3.00 MiB." % (local, HOST, ranks[1]["pid"])) in p.stderr
    report = subprocess.run([CT, "report", str(p.out)], env=env(), capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    rows = [line.split() for line in report.stdout.splitlines()]
    assert report.stdout.splitlines()[0] == "cumemtrace report: 2 processes of 2 files"
    for rank in (0, 1):
        who = ["rank", "%d/2" % rank] + (["(local", "%d)" % rank] if torchrun else [])
        # Its peak, then what it held at exit (the rank table's live-at-exit column).
        held = ["%d.00" % (2 + rank), "MiB"]
        assert who + ["on", HOST, "cuda:0"] + held + held in rows, report.stdout


def test_torchrun_workers_are_named_by_rank(tmp_path):
    p, snaps = run(tmp_path, [os.path.join(VENV_BIN, "torchrun"), "--standalone",
                              "--nproc-per-node", "2", JOB, "torchrun"])
    p.out = tmp_path / "traces"
    check_ranks(p, snaps, torchrun=True)


def test_spawned_workers_report_their_rank_through_torch_distributed(tmp_path):
    """Rank 0 joins the group before its first CUDA call (the rank is known when tracing
    starts), rank 1 after (the rank arrives while it is traced)."""
    p, snaps = run(tmp_path, [sys.executable, JOB, "spawn", str(tmp_path / "rendezvous")])
    p.out = tmp_path / "traces"
    check_ranks(p, snaps, torchrun=False)
