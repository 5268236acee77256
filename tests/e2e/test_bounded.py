"""Bounded capture (`run --keep bounded`, CUMEMTRACE_KEEP=bounded): tests/programs/ct_bounded.cpp
runs 40 iterations of 5000 alloc/free pairs (400k events) with a known growth (steps 10..19), a
known peak (step 24: 74 MiB live) and a known OOM (step 29), under a small disk cap."""
import glob
import json
import os
import subprocess

from conftest import CT, PRELOAD, base_env, load, prog

MiB = 1 << 20
STEPS, CHURN = 40, 5000
CAP = 6 * MiB
# Every window holds the newest 5000 trace entries (about 0.7 MB); the cap holds a few of them.
RUN_ARGS = ["--keep", "bounded", "--interval", "0", "--max-trace-events", "5000",
            "--max-disk", str(CAP)]


def bounded_run(tmp_path, extra=(), **env):
    out = tmp_path / "bounded"
    p = subprocess.run([CT, "run", "-o", str(out), *RUN_ARGS, *extra, "--", prog("ct_bounded")],
                       env=base_env(**env), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p, out


def summary_of(out):
    (path,) = glob.glob(os.path.join(str(out), "ct_bounded.*.intervals.json"))
    with open(path) as f:
        return path, json.load(f)


def printed(p, word):
    return {int(line.split()[1], 16) for line in p.stdout.splitlines() if line.startswith(word + " ")}


def test_bounded_run_windows_summary_and_cap(tmp_path):
    p, out = bounded_run(tmp_path)
    path, doc = summary_of(out)
    files = sorted(os.listdir(out))
    # The cap holds for everything the capture left.
    total = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    assert total <= CAP, (total, files)
    windows = {w["file"]: w for w in doc["windows"]}
    # Beside them, the final snapshot's summary (counted against the cap, never dropped).
    exits = [f for f, w in windows.items() if w["kind"] == "exit"]
    summaries = [f[:-len(".json")] + ".summary" for f in exits]
    assert sorted([*windows, os.path.basename(path), *summaries]) == files

    # The peak window: exactly the 10 growth blocks and the 64 peak blocks live (74 MiB).
    peak_files = [f for f, w in windows.items() if w["kind"] == "peak"]
    assert len(peak_files) == 1, windows
    peak = load(os.path.join(out, peak_files[0]))
    live = {s["address"]: s["total_size"] for s in peak["segments"] if s["device"] == 0}
    expected = printed(p, "growth") | printed(p, "peak")
    assert len(expected) == 74
    assert live == {a: MiB for a in expected}
    # Every earlier peak window was replaced by the higher one, and says so.
    replaced = [d for d in doc["dropped"] if d["why"] == "replaced by a higher peak"]
    assert len(replaced) == 11 and all(d["kind"] == "peak" for d in replaced)  # steps 0, 10..19

    # The OOM window holds the OOM entry: 1 TiB requested on device 0.
    (oom_file,) = [f for f, w in windows.items() if w["kind"] == "oom"]
    ooms = [e for e in load(os.path.join(out, oom_file))["device_traces"][0] if e["action"] == "oom"]
    assert [e["size"] for e in ooms] == [MiB << 20]

    # The cap dropped the least telling windows first: the three requests, oldest first.
    capped = [d for d in doc["dropped"] if d["why"] == "disk cap"]
    assert capped and all(d["kind"] in ("request", "growth") for d in capped), capped
    assert [d["file"] for d in capped if d["kind"] == "request"] == sorted(
        d["file"] for d in capped if d["kind"] == "request")
    for d in doc["dropped"]:
        assert not os.path.exists(os.path.join(out, d["file"]))

    # The intervals: one per iteration plus the tail after the last; they add up exactly.
    ivs = doc["intervals"]
    assert doc["by"] == "iteration" and len(ivs) == STEPS + 1
    assert [iv["iterations"] for iv in ivs] == [1] * STEPS + [0]
    d0 = [next(d for d in iv["devices"] if d["device"] == 0) for iv in ivs]
    n = STEPS * CHURN + 74
    assert sum(d["allocations"] for d in d0) == n and sum(d["frees"] for d in d0) == n
    allocated = STEPS * CHURN * 4096 + 74 * MiB
    assert sum(d["bytes_allocated"] for d in d0) == allocated
    assert sum(d["bytes_freed"] for d in d0) == allocated
    assert sum(iv["events"] for iv in ivs) == doc["events"]
    assert [d["live_bytes"] for d in d0[9:21]] == [0] + [k * MiB for k in range(1, 11)] + [10 * MiB]
    assert d0[24]["peak_bytes"] == 74 * MiB and d0[25]["peak_bytes"] == 10 * MiB + 4096
    assert d0[-1]["live_bytes"] == 0
    assert doc["totals"][0]["peak_bytes"] == 74 * MiB

    # report on the summary file and on the directory shows the intervals and what was dropped.
    r = subprocess.run([CT, "report", path], env=base_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{STEPS + 1} intervals by iteration" in r.stdout
    assert sum(line.startswith("dropped peak:") for line in r.stdout.splitlines()) == 11
    r = subprocess.run([CT, "report", str(out)], env=base_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{STEPS + 1} intervals by iteration" in r.stdout


def test_bounded_plain_preload_and_bad_settings(tmp_path):
    out = tmp_path / "plain"
    env = base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(out), CUMEMTRACE_KEEP="bounded",
                   CUMEMTRACE_INTERVAL="0", CUMEMTRACE_MAX_TRACE_EVENTS="5000",
                   CUMEMTRACE_MAX_DISK=str(CAP))
    p = subprocess.run([prog("ct_bounded"), "12", "100"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    _, doc = summary_of(out)
    assert len(doc["intervals"]) == 13
    assert sum(d["allocations"] for iv in doc["intervals"] for d in iv["devices"]) == 1202
    # A wrong value is one line before the program starts, exit 2.
    for args, line in ((["--keep", "some"], "--keep"),
                       (["--max-disk", "1GiB"], "--max-disk and --interval need --keep bounded"),
                       (["--keep", "bounded", "--max-disk", "lots"], "--max-disk must be a size")):
        r = subprocess.run([CT, "run", "-o", str(tmp_path / "x"), *args, "--", prog("ct_bounded")],
                           env=base_env(), capture_output=True, text=True)
        assert r.returncode == 2 and line in r.stderr, (args, r.stderr)


def test_bounded_run_says_each_file_once_as_it_is_at_the_end(tmp_path):
    # Windows written and dropped while the program ran are not announced as written: the end
    # lists what is on disk (every file there, nothing else) and what was dropped, once each.
    p, out = bounded_run(tmp_path)
    _, doc = summary_of(out)
    assert "wrote" not in "".join(line for line in p.stderr.splitlines(True)
                                  if "peak-" in line or "request-" in line), p.stderr
    lines = p.stderr.splitlines()
    (head,) = [i for i, line in enumerate(lines) if line.startswith("cumemtrace: --keep bounded left")]
    files = sorted(os.listdir(out))
    assert lines[head].startswith(f"cumemtrace: --keep bounded left {len(files)} files on disk ("), \
        p.stderr
    listed = [line.split()[0] for line in lines[head + 1:head + 1 + len(files)]]
    assert sorted(os.path.basename(f) for f in listed) == files, p.stderr
    dropped = {}
    for line in lines:
        if line.startswith("cumemtrace: dropped "):
            why = line[line.index("(") + 1:line.index("):")]
            dropped[why] = line[line.index("): ") + 3:].split(", ")
    want = {}
    for d in doc["dropped"]:
        want.setdefault(d["why"], []).append(d["file"])
    assert dropped == want and len(want["replaced by a higher peak"]) == 11, p.stderr
    for names in dropped.values():
        assert not any(n in files for n in names)
    # report's heading says what the windows hold against the cap, in words that parse.
    r = subprocess.run([CT, "report", str(out)], env=base_env(), capture_output=True, text=True)
    on_disk = sum(w["bytes"] for w in doc["windows"])
    from_heading = [line for line in r.stdout.splitlines() if "intervals by" in line]
    assert len(from_heading) == 1 and from_heading[0].endswith(
        "(--max-disk 6.00 MiB)") and "windows on disk " in from_heading[0], r.stdout
    assert on_disk > 0


def test_bounded_idle_program_gets_an_interval_per_interval(tmp_path):
    # ct_static_like spin: 1 MiB allocated, then nothing recorded for 1.2 s, then freed. An
    # interval of 0.2 s closes on the collector's clock while the program records nothing.
    out = tmp_path / "idle"
    p = subprocess.run([CT, "run", "-o", str(out), "--keep", "bounded", "--interval", "0.2",
                        "--", prog("ct_static_like"), "spin", "1.2"],
                       env=base_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (path,) = glob.glob(os.path.join(str(out), "ct_static_like.*.intervals.json"))
    with open(path) as f:
        doc = json.load(f)
    ivs = doc["intervals"]
    assert doc["by"] == "time"
    # Those closed by the clock span exactly 0.2 s, each starting where the last ended; a record
    # closes one at or after its 0.2 s (the free, the exit). 1.2 s without a record: at least 5.
    by_clock = [iv for iv in ivs if iv["end_us"] - iv["begin_us"] == 200000]
    assert len(by_clock) >= 5, ivs
    assert all(iv["end_us"] - iv["begin_us"] >= 200000 for iv in ivs[:-1]), ivs
    assert all(b["begin_us"] == a["end_us"] for a, b in zip(ivs, ivs[1:]) if a in by_clock), ivs
    assert sum(iv["events"] for iv in ivs) == doc["events"]
    idle = [iv for iv in ivs if iv["events"] == 0]
    assert len(idle) >= 4 and all(iv in by_clock for iv in idle), ivs
    # The 1 MiB is live at each idle close; freed by the end.
    for iv in idle:
        assert [(d["device"], d["live_bytes"], d["allocations"]) for d in iv["devices"]] == [
            (0, MiB, 0)], iv
    assert all(d["live_bytes"] == 0 for d in ivs[-1]["devices"]), ivs[-1]
