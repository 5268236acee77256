"""End-to-end, issue 58: a job's first OOM on the fake driver. tests/e2e/ranks_job.py `oom 4`: four
workers started as torchrun starts them (rank r holds 2 + r MiB); rank 2 runs out of memory first
(FAKE_CUDA_MEM_LIMIT = 8 MiB), then rank 1, and the launcher SIGKILLs ranks 0 and 3. `run` names
rank 2 first with its verdict and what each other rank held at that moment (rank 1 before its own
OOM), and `report DIR` says the same over the files, its rank table with OOMs and live at exit.
"""
import json
import os
import re
import socket
import subprocess
import sys

from conftest import CT, MiB, base_env, snapshots
from test_processes_and_faults import run_guarded
from test_ranks import JOB, by_rank

HOST = socket.gethostname()
VERDICT = "exhaustion: 1.00 MiB requested, 0 B free even compacted (device free 0 B)"
HELD_AT_EXIT = {0: 2 * MiB, 1: 8 * MiB, 2: 8 * MiB, 3: 5 * MiB}


def name(rank):
    return f"rank {rank}/4 (local {rank}) on {HOST}"


def test_first_oom_of_a_job_whose_launcher_killed_the_rest(tmp_path):
    out = tmp_path / "traces"
    p = run_guarded([CT, "run", "-o", str(out), "--", sys.executable, JOB, "oom", "4"],
                    base_env())
    assert p.returncode == 1, p.stderr  # the launcher's own status
    finals = {n: s for n, s in snapshots(out).items() if not n.endswith(".oom.json")}
    ranks = by_rank(finals)
    assert sorted(ranks) == [0, 1, 2, 3], p.stderr
    pid = {r: s["cumemtrace"]["pid"] for r, (_, s) in ranks.items()}
    # The killed ranks' snapshots were written all the same (the signal is known when the
    # collector, not the launcher, happened to reap the process).
    for r in (0, 3):
        assert re.search(re.escape(f"(pid {pid[r]}; {name(r)}) ") +
                         r"(ended without exit\(\) \(killed or crashed\)|was killed by signal 9): ",
                         p.stderr), p.stderr

    path2 = os.path.join(out, ranks[2][0])
    one = json.loads(subprocess.run([CT, "report", "--format", "json", path2], env=base_env(),
                                    capture_output=True, text=True, timeout=60).stdout)
    (oom2,) = one["ooms"]
    origin = min(s["cumemtrace"]["start_time_us"] for _, s in ranks.values())
    when = oom2["time_us"] - origin
    since = f"+{when // 1000000}.{when % 1000000:06d} s"
    expected = [
        f"cumemtrace: first OOM of the job (the first of 2 OOMs in 2 processes): {name(2)} "
        f"(pid {pid[2]}) on cuda:0 at {since} since the job's start: {VERDICT}",
        f"cumemtrace:   the request: 1.00 MiB at {oom2['site']}",
        "cumemtrace:   the other processes then:",
        f"cumemtrace:     {name(0)} cuda:0: held 2.00 MiB",
        f"cumemtrace:     {name(1)} cuda:0: held 3.00 MiB",  # before its own OOM
        f"cumemtrace:     {name(3)} cuda:0: held 5.00 MiB",
    ]
    lines = p.stderr.splitlines()
    start = lines.index(expected[0]) if expected[0] in lines else -1
    assert lines[start:start + len(expected)] == expected, p.stderr

    # report DIR: the same, from the files (the OOM snapshots are the same processes earlier).
    r = subprocess.run([CT, "report", str(out)], env=base_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    para = "\n".join(["F" + expected[0][len("cumemtrace: f"):]] +
                     [e[len("cumemtrace: "):] for e in expected[1:]])
    assert "\n" + para + "\n" in r.stdout, r.stdout
    assert r.stdout.index(para) < r.stdout.index("\nProcesses, each device at its own peak")
    j = json.loads(subprocess.run([CT, "report", "--format", "json", str(out)], env=base_env(),
                                  capture_output=True, text=True, timeout=60).stdout)["ranks"]
    rows = j["rows"]
    assert [(row["rank"], row["ooms"], row["live_at_exit_bytes"]) for row in rows] == [
        (r, 1 if r in (1, 2) else 0, HELD_AT_EXIT[r]) for r in range(4)]
    assert [(row["job"], row["node"]) for row in rows] == [("ranks-job", 0)] * 4
    first = j["first_oom"]
    assert (first["process"], first["pid"], first["verdict"], first["time_us"], first["site"],
            first["ooms"], first["processes_with_oom"]) == (
        name(2), pid[2], "exhaustion", oom2["time_us"], oom2["site"], 2, 2)
    assert [(o["process"], o["bytes"]) for o in first["others"]] == [
        (name(0), 2 * MiB), (name(1), 3 * MiB), (name(3), 5 * MiB)]
    assert (j["jobs"], j["repeated_ranks"]) == (["ranks-job"], [])
    header = [line for line in r.stdout.splitlines() if line.startswith("  process ")][0]
    assert header.split()[-4:] == ["OOMs", "live", "at", "exit"], header


with open(os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "summary.schema.json")) as f:
    SUMMARY_SCHEMA = json.load(f)


def report_dir(out, *args):
    r = subprocess.run([CT, "report", *args, str(out)], env=base_env(), capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def spoil_keeping_stat(path):
    """The file's bytes replaced by garbage of the same size, its mtime put back: its summary still
    reads as current, and reading the file itself fails (no snapshot can start with '#')."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"#" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_summaries_give_report_dir_the_same_output_reading_only_the_ranks_shown(tmp_path):
    """Issue 58 item 2: each final snapshot gets a summary beside it; `report DIR` (text and JSON)
    is byte-identical from the summaries and from the snapshots alone, and opens a snapshot only
    where it shows one in detail: for the job's first OOM (rank 2's, from its summary), what each
    other rank held then (ranks 0, 1, 3), never rank 2's own file."""
    import jsonschema
    out = tmp_path / "traces"
    p = run_guarded([CT, "run", "-o", str(out), "--", sys.executable, JOB, "oom", "4"],
                    base_env())
    assert p.returncode == 1, p.stderr
    finals = sorted(n for n in os.listdir(out) if n.endswith(".json") and ".oom" not in n)
    summaries = sorted(n for n in os.listdir(out) if n.endswith(".summary"))
    assert summaries == [n[:-len(".json")] + ".summary" for n in finals], os.listdir(out)
    rank_of = {}
    for n in finals:
        with open(out / (n[:-len(".json")] + ".summary")) as f:
            s = json.load(f)
        jsonschema.validate(s, SUMMARY_SCHEMA)
        assert (s["snapshot"]["file"], s["snapshot"]["bytes"]) == (n, os.path.getsize(out / n))
        rank_of[s["identity"]["rank"]] = n
        # The summary's numbers are the single-file report's.
        one = json.loads(subprocess.run([CT, "report", "--format", "json", str(out / n)],
                                        env=base_env(), capture_output=True, text=True,
                                        timeout=60).stdout)
        assert len(one["ooms"]) == s["ooms"]["count"]
        assert s["devices"][0]["live_at_exit_bytes"] == HELD_AT_EXIT[s["identity"]["rank"]]
    assert sorted(rank_of) == [0, 1, 2, 3]

    # The snapshots alone (no summary beside them): the reference output.
    alone = tmp_path / "alone"
    alone.mkdir()
    for n in os.listdir(out):
        if n.endswith(".json"):
            os.link(out / n, alone / n)
    ref_text, ref_json = report_dir(alone), report_dir(alone, "--format", "json")
    assert ref_text[0] == 0 and ref_json[0] == 0, ref_text[2] + ref_json[2]
    ref_json = (0, ref_json[1].replace(str(alone), str(out)), "")  # JSON names the files
    assert "First OOM of the job" in ref_text[1]
    assert report_dir(out) == ref_text
    assert report_dir(out, "--format", "json") == ref_json

    # Rank 2's snapshot is never opened: spoiled, the output is the same.
    spoil_keeping_stat(out / rank_of[2])
    assert report_dir(out) == ref_text
    assert report_dir(out, "--format", "json") == ref_json
    # Each other rank's is (what it held at rank 2's OOM): spoiled, report DIR cannot say it.
    spoil_keeping_stat(out / rank_of[0])
    rc, _, err = report_dir(out)
    assert rc != 0 and rank_of[0] in err, err
    # A stale summary (its snapshot changed since) is not used: the snapshot is read, and here
    # it is unreadable, said as such.
    os.utime(out / rank_of[2], ns=(0, 0))
    rc, text, err = report_dir(out, "--format", "json")
    assert rc == 2 and rank_of[2] in err, err


def run_job(tmp_path):
    out = tmp_path / "traces"
    p = run_guarded([CT, "run", "-o", str(out), "--", sys.executable, JOB, "oom", "4"],
                    base_env())
    assert p.returncode == 1, p.stderr
    alone = tmp_path / "alone" / "traces"  # the snapshots without their summaries: read whole
    alone.mkdir(parents=True)
    rank_of = {}
    for n in os.listdir(out):
        if n.endswith(".json"):
            os.link(out / n, alone / n)
        if n.endswith(".summary"):
            with open(out / n) as f:
                rank_of[json.load(f)["identity"]["rank"]] = n[:-len(".summary")] + ".json"
    return out, alone, rank_of


def cmd(args, folder, named_as=None):
    """(exit, stdout) of `cumemtrace ARGS FOLDER`, FOLDER's name in it written as `named_as`'s."""
    r = subprocess.run([CT, *args, str(folder)], env=base_env(), capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout.replace(str(folder), str(named_as or folder))


def test_check_dir_judges_passing_ranks_from_their_summaries_and_reads_the_failing(tmp_path):
    """`check DIR` gives the same verdicts, text and JSON, from the summaries as from the
    snapshots alone; a rank that passes every limit is judged from its summary (its snapshot is
    never opened), one that fails is read (its stacks)."""
    out, alone, rank_of = run_job(tmp_path)
    limits = ["--max-peak-bytes", "1GiB", "--max-leaked-bytes", "1GiB"]
    ref = {fmt: cmd(["check", "--format", fmt, *limits], alone, out) for fmt in ("text", "json")}
    for fmt in ("text", "json"):
        assert ref[fmt][0] == 0, ref
        assert cmd(["check", "--format", fmt, *limits], out) == ref[fmt]
    # Ranks hold 2, 8, 8 and 5 MiB at their peaks: under 3 MiB only rank 0 passes.
    failing = ["--max-peak-bytes", "3MiB"]
    ref_fail = {fmt: cmd(["check", "--format", fmt, *failing], alone, out)
                for fmt in ("text", "json")}
    assert ref_fail["text"][0] == 1 and "3 of 4 files" in ref_fail["text"][1], ref_fail
    for fmt in ("text", "json"):
        assert cmd(["check", "--format", fmt, *failing], out) == ref_fail[fmt]
    # No snapshot is opened for a passing rank: every one spoiled (size and mtime kept; `alone`
    # holds the same files), the passing check is the same, and so is rank 0's verdict under the
    # failing one.
    spoil_keeping_stat(out / rank_of[0])
    assert cmd(["check", *failing], out) == ref_fail["text"]
    for r in (1, 2, 3):
        spoil_keeping_stat(out / rank_of[r])
    assert cmd(["check", *limits], out) == ref["text"]
    # ... and the failing ranks are read: spoiled, they cannot be judged (exit 2, not a pass).
    rc, text = cmd(["check", *failing], out)
    assert rc == 2 and "unreadable" in text, text


def test_html_dir_is_the_same_page_from_summaries(tmp_path):
    out, alone, _ = run_job(tmp_path)
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    for d, page in ((out, a), (alone, b)):
        r = subprocess.run([CT, "html", str(d), "-o", str(page)], env=base_env(),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert a.read_text() == b.read_text().replace(str(alone), str(out))
