"""Many ranks in one view (issue 44): two processes of a job on the fake driver, rank 1 keeping
1 MiB more than rank 0. `report DIR` puts them side by side with exactly the single-file report's
bytes and flags rank 1 and its line; `check DIR` gives a verdict per file and one for the job and
never stops at a bad file; `diff` pairs each rank's own device; `convert --to perfetto` writes one
track group per rank that Perfetto's JSON importer takes and merges."""
import json
import os
import shutil
import subprocess

from conftest import CT, MiB, base_env, prog

SKEW = ["--skew-bytes", "512KiB"]  # the fake job's skew is 1 MiB; the default is 64 MiB


def ct(*args):
    return subprocess.run([CT, *args], capture_output=True, text=True, timeout=120)


def traced_rank(tmp_path, rank, leak_per_step):
    """`run` of ct_static_like `steps 4 LEAK` as rank RANK of 2; returns its snapshot's path."""
    out = tmp_path / f"rank{rank}"
    env = base_env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=2, TORCHELASTIC_RUN_ID="job")
    p = subprocess.run([CT, "run", "-o", str(out), "--", prog("ct_static_like"), "steps", "4",
                        str(leak_per_step)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    files = sorted(os.listdir(out))
    assert files == [files[0], files[0][:-len(".json")] + ".summary"], files  # and its summary
    return out / files[0]


def job(tmp_path):
    """traces/ with rank 0 (no leak) and rank 1 (256 KiB kept each of 4 steps: 1 MiB)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    paths = []
    for rank, leak in ((1, 256 << 10), (0, 0)):
        src = traced_rank(tmp_path, rank, leak)
        paths.append(traces / src.name)
        shutil.copy(src, paths[-1])
    return traces, sorted(paths, key=lambda p: json.load(open(p))["cumemtrace"]["rank"]["RANK"])


def on_device(src, dst, device):
    """The snapshot moved to `device`, as rank 1's own GPU would hold it."""
    s = json.load(open(src))
    s["device_traces"] = [[] for _ in range(device)] + [s["device_traces"][0]]
    for seg in s["segments"]:
        seg["device"] = device
    for d in s["cumemtrace"]["devices"]:
        d["device"] = device
    for a in s.get("external_annotations", []):
        a["device"] = device
    json.dump(s, open(dst, "w"))
    return dst


def test_report_directory_rank_table(tmp_path):
    traces, (r0, r1) = job(tmp_path)
    # A periodic snapshot of rank 0 is the same process again: left out of the directory.
    periodic = json.load(open(r0))
    periodic["cumemtrace"]["reason"] = "periodic"
    json.dump(periodic, open(traces / "ct_static_like.rank0.periodic-1.json", "w"))

    p = ct("report", "--format", "json", *SKEW, str(traces))
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["skipped_snapshots"] == 1 and j["unreadable"] == []
    rows = j["ranks"]["rows"]
    assert [(r["rank"], r["device"], r["file"]) for r in rows] == [(0, 0, str(r0)), (1, 0, str(r1))]
    # Every number is the single-file report's own.
    for row, path in zip(rows, (r0, r1)):
        one = json.loads(ct("report", "--format", "json", str(path)).stdout)
        assert row["values"]["peak"] == one["devices"][0]["peak_bytes"]
    assert [r["values"]["peak"] for r in rows] == [1 * MiB, 2 * MiB]
    assert j["ranks"]["medians"][0]["peak"] == 1 * MiB
    assert [r["flagged"] for r in rows] == [[], ["peak"]]
    r1_report = json.loads(ct("report", "--format", "json", str(r1)).stdout)
    line = rows[1]["lines"][0]
    assert (line["site"], line["change_bytes"]) == (r1_report["devices"][0]["at_peak"][0]["site"], MiB)
    assert rows[1]["median_process"] == "rank 0/2 (local 0) on " + os.uname().nodename
    div = rows[1]["divergence"]  # the first moment it holds more than rank 0, by more than 512 KiB
    assert div["step"] is None and div["bytes"] - div["median_bytes"] > 512 << 10

    text = ct("report", *SKEW, str(traces))
    assert text.returncode == 0, text.stderr
    host = os.uname().nodename
    assert f"rank 1/2 (local 1) on {host}, cuda:0:\n  peak 2.00 MiB: +1.00 MiB (+100.0%) from the median 1.00 MiB\n" \
        in text.stdout, text.stdout
    assert "Processes, each device at its own peak" in text.stdout
    assert text.stdout.startswith("cumemtrace report: 2 processes of 2 files (1 snapshot written "
                                  "while a process ran left out"), text.stdout
    assert "Top allocation sites" not in text.stdout  # each file's report only with --each
    each = ct("report", "--each", *SKEW, str(traces))
    assert each.stdout.count("Top allocation sites by bytes") == 2
    # The default thresholds (10% and 64 MiB) see no skew in a 1 MiB job.
    assert "No process differs more than 10% and 64.0 MiB from the median." in ct("report", str(traces)).stdout


def test_bad_file_among_many(tmp_path):
    traces, (r0, r1) = job(tmp_path)
    bad = traces / "broken.json"
    bad.write_text('{"segments": [')
    p = ct("report", *SKEW, str(traces))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "broken.json" in p.stderr, p.stderr
    assert "rank 1/2 (local 1)" in p.stdout  # the others are shown

    junit = tmp_path / "check.xml"
    p = ct("check", "--max-leaked-bytes", "512KiB", "--junit", str(junit), str(traces))
    assert p.returncode == 2, p.stdout + p.stderr
    host = os.uname().nodename
    assert f"{r1} (rank 1/2 (local 1) on {host}): error: 1.00 MiB leaked on device 0 by 4 allocations" in p.stdout
    assert f"{r0} (rank 0/2 (local 0) on {host}): ok: 2 checks passed\n" in p.stdout
    assert f"{bad}: error: unreadable, not checked: " in p.stdout
    assert f"job: FAILED (2 of 3 files): {bad}; {r1} (rank 1/2 (local 1) on {host})\n" in p.stdout
    xml = junit.read_text()
    assert f'name="readable" file="{bad}">' in xml and xml.count("<failure ") == 2
    # Without the bad file the job fails on its limit alone: exit 1; above rank 1's leak: 0.
    bad.unlink()
    assert ct("check", "--max-leaked-bytes", "512KiB", str(traces)).returncode == 1
    ok = ct("check", "--max-leaked-bytes", "1MiB", str(traces))
    assert ok.returncode == 0 and "job: ok: all 2 files passed\n" in ok.stdout, ok.stdout


def test_diff_pairs_each_ranks_own_device(tmp_path):
    _, (r0, r1) = job(tmp_path)
    moved = on_device(r1, tmp_path / "rank1-cuda1.json", 1)
    p = ct("diff", str(r0), str(moved))
    assert p.returncode == 0, p.stderr
    assert "\nrank 0 cuda:0 vs rank 1 cuda:1\n  peak:         1.00 MiB -> 2.00 MiB  +1.00 MiB (+100.0%)\n" \
        "  live at exit: 0 B -> 1.00 MiB  +1.00 MiB\n" in p.stdout, p.stdout
    assert "Device 1" not in p.stdout and "0 B -> 2.00 MiB" not in p.stdout


def test_perfetto_track_group_per_rank(tmp_path):
    _, (r0, r1) = job(tmp_path)
    moved = on_device(r1, tmp_path / "rank1-cuda1.json", 1)
    host = os.uname().nodename
    pids = {}
    for src, rank, device in ((r0, 0, 0), (moved, 1, 1)):
        out = tmp_path / f"rank{rank}.perfetto.json"
        p = ct("convert", str(src), "--to", "perfetto", "-o", str(out))
        assert p.returncode == 0, p.stderr
        t = json.load(open(out))
        snap = json.load(open(src))
        events = t["traceEvents"]
        # What Perfetto's JSON importer reads: ph a string; pid/tid 32-bit unsigned integers;
        # process_name / thread_name metadata with args.name; counters with numeric args; ts in
        # µs, here the snapshot's own wall-clock times; X with dur; thread instants with a tid.
        for e in events:
            assert isinstance(e["ph"], str) and len(e["ph"]) == 1
            assert isinstance(e["pid"], int) and 0 < e["pid"] < 2 ** 32
            assert isinstance(e.get("tid", 0), int)
            if e["ph"] == "M":
                assert e["name"] in ("process_name", "thread_name", "process_sort_index")
            if e["ph"] == "C":
                assert all(isinstance(v, (int, float)) for v in e["args"].values())
            if e["ph"] == "X":
                assert isinstance(e["dur"], int)
            if e["ph"] == "i" and e.get("s") == "t":
                assert "tid" in e
        names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        assert list(names.values()) == [f"rank {rank} @ {host}"], names
        pid = next(iter(names))
        assert pid == (rank + 1) * 1000 + device + 1
        pids[rank] = pid
        assert {e["pid"] for e in events} == {pid}
        times = sorted(e["time_us"] for e in snap["device_traces"][device])
        ts = sorted(e["ts"] for e in events if e["ph"] == "C")
        assert ts[0] == times[0] and ts[-1] == times[-1]
        assert snap["cumemtrace"]["start_time_us"] <= ts[0]  # one wall clock (µs since the epoch)
        assert t["otherData"]["rank"] == rank and t["otherData"]["host"] == host
    assert pids[0] != pids[1]
