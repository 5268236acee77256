"""Every gate judges what it says (issue 45): the one list of limits (collector/verdicts/limits.h)
drives `run` and `check` alike; --max-growth on a capped trace; snapshots written while a process
ran are not judged as its end; a file is refused from its first bytes."""
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import BUILD, CT, MiB, SOURCE, base_env, prog, run_traced

FAKE_TORCH = os.path.join(SOURCE, "tests", "fake_torch")
TORCH_SCRIPT = os.path.join(SOURCE, "tests", "e2e", "torch_blocks.py")
FAKE_NVML = os.path.join(BUILD, "fake_nvml", "libnvidia-ml.so.1")
# The fake torch's caching allocator and the fake NVML: every limit has data to judge.
TORCH_NVML = dict(PYTHONPATH=FAKE_TORCH, FAKE_TORCH_LIB=os.path.join(BUILD, "fake_torch",
                                                                     "libc10_cuda.so"),
                  CUMEMTRACE_PHASES="0", CUMEMTRACE_NVML_LIBRARY=FAKE_NVML,
                  FAKE_NVML_USED=f"0:{300 * MiB}")


def limit_table():
    p = subprocess.run([CT, "check", "--list-limits", "--format", "json"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["limits"]


def test_the_limit_table_is_every_size_flag_of_check_and_run():
    table = limit_table()
    assert [l["name"] for l in table] == [
        "max_leaked_bytes", "max_peak_bytes", "max_allocated_peak", "max_reserved_peak",
        "max_driver_peak", "max_growth", "max_growth_per_step", "max_module_bytes"]
    for l in table:
        assert l["flag"] == "--" + l["name"].replace("_", "-")
        assert l["help"] and l["needs"] and l["check"]
    # Every option taking a SIZE is a limit, but run's cap on the bytes it writes (--keep bounded).
    for cmd, other in (("check", []), ("run", ["--max-disk"])):
        helptext = subprocess.run([CT, cmd, "--help"], capture_output=True, text=True).stdout
        assert sorted(re.findall(r"(--[a-z-]+) SIZE", helptext)) == sorted(
            [l["flag"] for l in table] + other)
    assert "--list-limits" not in subprocess.run([CT, "check", "--help"], capture_output=True,
                                                 text=True).stdout
    # Without --list-limits a file is still required.
    p = subprocess.run([CT, "check"], capture_output=True, text=True)
    assert (p.returncode, p.stderr.splitlines()[0]) == (2, "cumemtrace check: FILE is required")


def test_docs_check_md_lists_the_table():
    with open(os.path.join(SOURCE, "docs", "check.md")) as f:
        rows = re.findall(r"^\| `(--[a-z-]+)` \| `([a-z_]+)` \|", f.read(), re.M)
    assert rows == [(l["flag"], l["name"]) for l in limit_table()]


def verdict_checks(stdout, check):
    v = json.loads(stdout)
    return [(c["status"], c["message"]) for f in v["files"] for c in f["checks"]
            if c["check"] == check]


def test_every_limit_is_honoured_by_run_and_check(tmp_path):
    """Each row of the table, given to `run` and to `check` at 1 byte, fails the gate through its
    own check; at 1 TiB, run and check agree, and only a limit that cannot be judged here (no
    marks, no automatic steps) fails."""
    p, snaps = run_traced(tmp_path / "plain", [sys.executable, TORCH_SCRIPT, "basic"], **TORCH_NVML)
    assert p.returncode == 0, p.stderr
    (snapshot,) = glob.glob(str(tmp_path / "plain" / "traces" / "*.json"))
    for i, l in enumerate(limit_table()):
        for value in ("1", "1TiB"):
            gate = [l["flag"], value, "--format", "json"]
            r, _ = run_traced(tmp_path / f"{i}-{value}", [sys.executable, TORCH_SCRIPT, "basic"],
                              gate, **TORCH_NVML)
            c = subprocess.run([CT, "check", snapshot, *gate], capture_output=True, text=True)
            got = verdict_checks(r.stdout, l["check"])
            assert got, (l, r.stdout, r.stderr)
            assert [s for s, _ in verdict_checks(c.stdout, l["check"])] == [s for s, _ in got]
            assert r.returncode == c.returncode, (l, value, r.stderr, c.stderr)
            if value == "1":
                assert r.returncode == 1 and {s for s, _ in got} == {"fail"}, (l, got)
            else:
                unjudged = [m for s, m in got if s == "fail"]
                assert all("cannot be judged" in m or "needs at least" in m for m in unjudged), got
                assert r.returncode == (1 if unjudged else 0), (l, got)


def test_run_gates_on_every_limit_flag(tmp_path):
    """`run` knew 3 limits: --max-allocated-peak passed a 1-byte limit, --max-driver-peak with
    --junit was refused as "no limit"."""
    p, _ = run_traced(tmp_path / "allocated", [sys.executable, TORCH_SCRIPT, "basic"],
                      ["--max-allocated-peak", "1"], **TORCH_NVML)
    assert p.returncode == 1, p.stderr
    # With the breakdown --max-peak-bytes has (issue 57: none): the tensors live at that moment,
    # by line, largest first.
    with open(TORCH_SCRIPT) as f:
        line = next(i for i, text in enumerate(f, 1) if "# LINE basic-e" in text)
    assert re.search(r"error: peak PyTorch allocated \S+ MiB on device 0 at .* \(limit 1 B\)\n"
                     r"  30\.0 MiB live in 1 allocation from basic \(torch_blocks\.py:%d\) via .*\n"
                     r"    at basic \(\S+torch_blocks\.py:%d\)\n" % (line, line), p.stderr), p.stderr
    junit = tmp_path / "verdict.xml"
    p, _ = run_traced(tmp_path, [sys.executable, TORCH_SCRIPT, "basic"],
                      ["--max-driver-peak", "1", "--junit", str(junit)], **TORCH_NVML)
    assert p.returncode == 1, p.stderr
    assert "need a limit" not in p.stderr
    assert 'failures="1"' in junit.read_text()
    p, _ = run_traced(tmp_path / "nolimit", ["true"], ["--junit", str(tmp_path / "x.xml")])
    assert p.returncode == 2
    assert p.stderr == ("cumemtrace run: --verdict-file and --junit need a limit "
                        "(--max-leaked-bytes, --max-peak-bytes, --max-allocated-peak, "
                        "--max-reserved-peak, --max-driver-peak, --max-growth, "
                        "--max-growth-per-step or --max-module-bytes)\n")


def test_a_layer_limit_with_nothing_to_judge_fails_and_says_why(tmp_path):
    """--max-allocated-peak on a program without PyTorch, --max-driver-peak without NVML: the
    limit cannot be judged, so the gate fails (it passed with a warning)."""
    p, _ = run_traced(tmp_path / "nopytorch", [prog("ct_static_like"), "pitch"],
                      ["--max-allocated-peak", "1TiB"])
    assert p.returncode == 1, p.stderr
    assert ("error: --max-allocated-peak cannot be judged: the snapshot has no allocator data "
            "(the program used neither PyTorch's caching allocator nor a memory pool)"
            ) in p.stderr, p.stderr
    p, _ = run_traced(tmp_path / "nonvml", [prog("ct_static_like"), "pitch"],
                      ["--max-driver-peak", "1TiB"])
    assert p.returncode == 1, p.stderr
    assert ("error: --max-driver-peak cannot be judged: the snapshot has no driver-visible (NVML) "
            "data (NVML was not found when it ran)") in p.stderr, p.stderr
    # check's JSON says which failures judged nothing (the pytest plugin's heading reads it).
    (snap,) = glob.glob(str(tmp_path / "nonvml" / "traces" / "*.json"))
    c = subprocess.run([CT, "check", snap, "--format", "json", "--max-driver-peak", "1TiB",
                        "--max-peak-bytes", "1"], capture_output=True, text=True, timeout=60)
    assert c.returncode == 1, c.stderr
    (f,) = json.loads(c.stdout)["files"]
    assert sorted((x["check"], x["status"], x["judged"]) for x in f["checks"]) == [
        ("complete", "pass", True), ("driver-peak", "fail", False), ("peak-bytes", "fail", True)]


# ---- --max-growth on a capped trace --------------------------------------------------------------

def test_growth_with_a_capped_trace_never_passes_a_leak_unmeasured(tmp_path):
    """steps 5 4096 leaks 4 KiB a step; with --max-trace-events 5 every mark is older than the kept
    trace, so nothing between them can be measured: the gate fails and says why."""
    steps = [prog("ct_static_like"), "steps", "5", "4096"]
    p, _ = run_traced(tmp_path / "cap5", steps,
                      ["--max-trace-events", "5", "--max-growth", "0", "--mark", "step"])
    assert p.returncode == 1, p.stderr
    assert re.search(r"error: --max-growth cannot be judged: 5 of the 5 occurrences of mark 'step' "
                     r"it compares fell before the kept trace \(the oldest \d+ trace entries were "
                     r"dropped \(--max-trace-events 5\)\)", p.stderr), p.stderr
    p, _ = run_traced(tmp_path / "all", steps, ["--max-growth", "0", "--mark", "step"])
    assert p.returncode == 1
    assert "grew by +12.0 KiB between occurrences 2 and 5 of mark 'step'" in p.stderr, p.stderr


def test_growth_with_a_capped_trace_is_measured_inside_the_kept_window(tmp_path):
    """steps makes 7 trace entries a step: the newest 24 hold marks 3, 4 and 5, and growth is
    measured from the first kept mark."""
    steps = [prog("ct_static_like"), "steps", "5", "4096"]
    p, snaps = run_traced(tmp_path, steps,
                          ["--max-trace-events", "24", "--max-growth", "0", "--mark", "step"])
    assert p.returncode == 1, p.stderr
    (snap,) = snaps.values()
    kept_from = min(t[0]["time_us"] for t in snap["device_traces"] if t)
    marks = [a["time_us"] for a in snap["external_annotations"]]
    lost = sum(1 for t in marks if t < kept_from)
    assert (lost, snap["cumemtrace"]["trace_entries_dropped"]) == (2, 11)
    assert "grew by +8.00 KiB between occurrences 3 and 5 of mark 'step'" in p.stderr, p.stderr
    assert ("(the 2 occurrences before fell before the kept trace: the oldest 11 trace entries "
            "were dropped (--max-trace-events 24))") in p.stderr


# ---- snapshots written while the process ran ------------------------------------------------------

def test_check_judges_mid_run_snapshots_as_run_does(tmp_path):
    """burst holds 1 MiB while it waits on stdin and frees everything before it exits: the
    periodic and requested snapshots written while it waits are not leaks. `check` on the whole
    directory passes as `run`'s own gate does; on the mid-run files alone it cannot judge."""
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), "--snapshot-every", "0.05", "--max-leaked-bytes", "0", "--",
           prog("ct_static_like"), "burst", "10"]
    run = subprocess.Popen(cmd, env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        ready = run.stdout.readline()
        assert ready.startswith("ready "), ready
        pid = ready.split()[1]
        req = subprocess.run([CT, "snapshot", pid], capture_output=True, text=True, timeout=60)
        assert req.returncode == 0, req.stderr
        # Periodic snapshots are written every 50 ms while the program waits on stdin.
        deadline = time.monotonic() + 20
        while not glob.glob(str(out / "*.periodic-1.json")):
            assert time.monotonic() < deadline, "no periodic snapshot within 20 s"
            time.sleep(0.01)
        run.stdin.write("go\n")
        run.stdin.flush()
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    files = sorted(glob.glob(str(out / "*.json")))
    mid = [f for f in files if ".periodic-" in f or ".request-" in f]
    end = [f for f in files if f not in mid]
    assert len(end) == 1 and any(".request-" in f for f in mid), files
    c = subprocess.run([CT, "check", *files, "--max-leaked-bytes", "0"], capture_output=True,
                       text=True)
    assert c.returncode == 0, c.stdout
    for f in mid:
        assert (f"{f}: warning: written while the process ran" in c.stdout
                and "--max-leaked-bytes judged in the snapshot written at its end" in c.stdout)
    c = subprocess.run([CT, "check", *mid, "--max-leaked-bytes", "0", "--max-peak-bytes", "1GiB"],
                       capture_output=True, text=True)
    assert c.returncode == 1
    assert (f"{mid[0]}: error: --max-leaked-bytes cannot be judged: every snapshot given was "
            "written while its process ran") in c.stdout
    assert c.stdout.count("error:") == 1


# ---- a file recognised from its first bytes ------------------------------------------------------

def peak_rss_kib(cmd):
    """Runs `cmd` from a fresh Python and returns (its exit status, its stderr, its peak RSS in
    KiB): RUSAGE_CHILDREN of a process whose only child it is."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], "
             "capture_output=True, text=True); print(p.returncode); print(p.stderr, end=''); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                         timeout=60).stdout.splitlines()
    return int(out[0]), "\n".join(out[1:-1]) + "\n", int(out[-1])


def test_a_large_file_of_junk_is_refused_from_its_first_bytes(tmp_path):
    junk = tmp_path / "junk.json"
    with open(junk, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of zeros, sparse: nothing to read but what is asked for
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 100)
    # The bound is above what this build costs to refuse a 2-byte file: ASan's shadow alone
    # is ~140 MiB of RSS, a plain build's ~5 MiB.
    (tmp_path / "small.json").write_bytes(b"\x00\x00")
    base = peak_rss_kib([CT, "report", str(tmp_path / "small.json")])[2]
    for cmd in (["report", str(junk)], ["check", str(junk), "--max-peak-bytes", "1"],
                ["convert", str(junk), "--to", "pickle", "-o", str(tmp_path / "x.pickle")]):
        start = time.monotonic()
        code, err, rss = peak_rss_kib([CT, *cmd])
        assert time.monotonic() - start < 5  # read whole, it took 20 s
        assert (code, err) == (2, f"cumemtrace {cmd[0]}: {junk}:offset 0: expected a snapshot "
                                  "(JSON or a pickle), found byte 0x00\n")
        assert rss < base + (64 << 10), (rss, base)  # KiB: the 3 GiB are never taken
    p = subprocess.run([CT, "report", str(gz)], capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (2, f"cumemtrace report: {gz}:offset 0: expected a snapshot "
                                           "(JSON or a pickle), found a gzip-compressed file "
                                           "(decompress it first)\n")
    # What may begin a snapshot still reaches the readers: whitespace and a BOM before '{'.
    (tmp_path / "ws.json").write_bytes(b"\xef\xbb\xbf \n\t{\"segments\": 5}")
    p = subprocess.run([CT, "report", str(tmp_path / "ws.json")], capture_output=True, text=True)
    assert p.returncode == 2 and "found byte" not in p.stderr and "segments" in p.stderr, p.stderr


# ---- the Python API ------------------------------------------------------------------------------

@pytest.fixture
def api_path(tmp_path):
    """The cumemtrace package from the source tree, laid out as the wheel lays it out (bin/ and
    lib/ beside the modules, here links to the build's)."""
    pkg = tmp_path / "pkg" / "cumemtrace"
    pkg.mkdir(parents=True)
    for f in glob.glob(os.path.join(SOURCE, "python", "cumemtrace", "*.py")):
        os.symlink(f, pkg / os.path.basename(f))
    os.symlink(os.path.join(BUILD, "bin"), pkg / "bin")
    os.symlink(os.path.join(BUILD, "lib"), pkg / "lib")
    return str(tmp_path / "pkg")


def py_api(api_path, code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=base_env(PYTHONPATH=api_path, **env))


TWO_SNAPSHOTS = """
import ctypes, json, cumemtrace
cuda = ctypes.PyDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
paths = []
for _ in range(3):
    ptr = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) == 0
    paths.append(cumemtrace.snapshot("same tag"))
print(json.dumps(paths))
"""


def test_snapshot_returns_the_file_each_call_wrote(tmp_path, api_path):
    out = tmp_path / "traces"
    p = subprocess.run([CT, "run", "-o", str(out), "--", sys.executable, "-c", TWO_SNAPSHOTS],
                       capture_output=True, text=True, timeout=60,
                       env=base_env(PYTHONPATH=api_path))
    assert p.returncode == 0, p.stderr
    paths = json.loads(p.stdout)
    pid = re.search(r"\.(\d+)\.same_tag\.json$", paths[0]).group(1)
    assert [os.path.basename(x).split(f".{pid}.")[1] for x in paths] == [
        "same_tag.json", "same_tag.1.json", "same_tag.2.json"]
    for i, path in enumerate(paths, 1):
        with open(path) as f:
            assert [s["total_size"] for s in json.load(f)["segments"]] == [MiB] * i


def test_load_reads_every_format_lazily_and_check_takes_every_limit(tmp_path, api_path):
    p, snaps = run_traced(tmp_path, [sys.executable, TORCH_SCRIPT, "basic"], **TORCH_NVML)
    (snapshot,) = glob.glob(str(tmp_path / "traces" / "*.json"))
    pickled = tmp_path / "s.pickle"
    assert subprocess.run([CT, "convert", snapshot, "--to", "pickle", "-o", str(pickled)],
                          capture_output=True).returncode == 0
    broken = tmp_path / "broken.json"
    broken.write_text('{"segments": [' + " " * 1000)
    code = f"""
import json, cumemtrace
from cumemtrace import CumemtraceError
j, p = cumemtrace.load({snapshot!r}), cumemtrace.load({str(pickled)!r})
b = cumemtrace.load({str(broken)!r})   # lazy: nothing parsed yet, so no error yet
try:
    b.data
    raise SystemExit("broken.json parsed")
except CumemtraceError as e:
    assert "not a snapshot" in str(e), e
assert [s["total_size"] for s in p.segments] == [s["total_size"] for s in j.segments]
assert p.report()["devices"] == j.report()["devices"]
table = cumemtrace.limits()   # by name, as docs/python.md says
assert all(entry["name"] == n for n, entry in table.items()), table
out = {{}}
for n, entry in table.items():
    v = p.check(**{{n: 1}})
    out[n] = sorted({{c["status"] for f in v["files"] for c in f["checks"]
                     if c["check"] == entry["check"]}})
# An API error is the CLI's line, without the terminal's "Run 'cumemtrace check --help'".
try:
    j.check(max_peak_bytes="lots")
    raise SystemExit("a bad size accepted")
except CumemtraceError as e:
    assert str(e) == ("cumemtrace check: --max-peak-bytes: expected a size such as 0, 4096, "
                      "12MiB or 1.5GB, got 'lots'"), repr(str(e))
try:
    j.check(max_leak=1)
    raise SystemExit("unknown limit accepted")
except TypeError as e:
    assert "unknown limit 'max_leak'" in str(e)
print(json.dumps(out))
"""
    r = py_api(api_path, code)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert list(got) == [l["name"] for l in limit_table()]
    assert all(v == ["fail"] for v in got.values()), got


NO_CUDA_SAID = ("no CUDA allocation seen (no device memory event, segment or CUDA context): no "
                "limit can be judged (pass --allow-no-cuda if that is expected)")


def test_a_run_that_never_used_cuda_fails_the_gate_with_or_without_a_snapshot(tmp_path):
    """Issue 57: a program that opens a session but never uses CUDA (PyTorch's automatic phases
    on a training loop fallen back to the CPU; here a mark) leaves a snapshot without a device
    event, which `run --max-leaked-bytes 0` used to pass ("ok: 2 checks passed"). It gets the
    same verdict as a program that left no snapshot: not judged, failed, unless --allow-no-cuda."""
    script = "import ctypes\nctypes.CDLL(None).cumemtrace_mark(b'step')\n"
    p, snaps = run_traced(tmp_path / "a", [sys.executable, "-c", script],
                          ["--max-leaked-bytes", "0", "--max-peak-bytes", "1GiB"])
    assert len(snaps) == 1, (sorted(snaps), p.stderr)
    [(name, snap)] = snaps.items()
    assert snap["cumemtrace"]["events_total"] == 0 and snap["device_traces"] == [[]], snap
    path = tmp_path / "a" / "traces" / name
    assert p.returncode == 1, p.stderr
    assert f"{path}: error: {NO_CUDA_SAID}\n{path}: FAILED: 1 of 1 check failed\n" in p.stderr
    p, _ = run_traced(tmp_path / "b", [sys.executable, "-c", script],
                      ["--max-leaked-bytes", "0", "--allow-no-cuda"])
    assert p.returncode == 0, p.stderr
    assert "warning: no CUDA allocation seen; nothing to judge (allowed by --allow-no-cuda)" in p.stderr
    # Without a gate `run` says so, instead of pointing at a report of nothing.
    p, _ = run_traced(tmp_path / "d", [sys.executable, "-c", script])
    assert p.returncode == 0, p.stderr
    assert "see where the memory went" not in p.stderr, p.stderr
    assert ("cumemtrace: no CUDA allocation seen (no device memory event, segment or CUDA "
            "context); the snapshot records no device memory\n") in p.stderr, p.stderr
    # `check` of that snapshot agrees, in JSON too: one check, failed, not judged.
    q = subprocess.run([CT, "check", str(path), "--max-leaked-bytes", "0", "--format", "json"],
                       capture_output=True, text=True)
    assert q.returncode == 1, q.stderr
    assert [(c["check"], c["status"], c["judged"], c["message"])
            for c in json.loads(q.stdout)["files"][0]["checks"]] == [
        ("cuda-used", "fail", False, NO_CUDA_SAID)]
    # A program that used CUDA and freed everything is judged, and passes.
    p, snaps = run_traced(tmp_path / "c", [prog("ct_static_like"), "spin", "0"],
                          ["--max-leaked-bytes", "0"])
    [(name, snap)] = snaps.items()
    assert snap["segments"] == [] and p.returncode == 0, p.stderr
    assert f"{tmp_path / 'c' / 'traces' / name}: ok: 2 checks passed\n" in p.stderr
