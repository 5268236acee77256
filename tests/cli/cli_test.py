#!/usr/bin/env python3
"""End-to-end tests of `cumemtrace report|check|diff`: every exit code (0, 1, 2), every output
format (text, json, github, JUnit XML), suppressions, drops, marks, unreadable input, and the
real PyTorch fixture. Run by CTest (test `analysis_cli`); exits non-zero on the first failure."""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET

ARGS = None
FAILURES = []
SKIPS = []  # parts that could not run here: the whole test then exits 77 (CTest: Skipped)


def run(*args):
    p = subprocess.run([ARGS.cumemtrace, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def expect_rc(args, rc, contains=(), stream="out"):
    code, out, err = run(*args)
    text = out if stream == "out" else err
    expect(code == rc, f"cumemtrace {' '.join(args)}: exit {code}, expected {rc}\n{out}\n{err}")
    for c in contains:
        expect(c in text, f"cumemtrace {' '.join(args)}: output lacks {c!r}:\n{text}")
    return out, err


def snap(name):
    return os.path.join(ARGS.work, name)


def write(name, text, mode="w"):
    with open(snap(name), mode) as f:
        f.write(text)
    return snap(name)


def test_report():
    out, _ = expect_rc(["report", snap("leak.json")], 0,
                       ["peak device memory: 3.00 MiB", "live at exit: 2.00 MiB in 1 allocation",
                        "at allocate_weights (tests/programs/scenarios.cpp:42)",
                        "Top allocation sites by bytes", "Allocation sizes:", "Anomalies: none"])
    out, _ = expect_rc(["report", "--format", "json", snap("twodev.json")], 0)
    j = json.loads(out)
    expect([d["device"] for d in j["devices"]] == [0, 1], "report json lists both devices")
    expect(j["devices"][1]["live_at_exit_bytes"] == 5 << 20, "device 1 keeps 5 MiB")
    expect(j["devices"][0]["live_at_exit_bytes"] == 0, "device 0 freed everything")
    expect_rc(["report", snap("anomaly.json")], 0,
              ["Anomalies: 1", "double_free of 0xdead0000 (cudaFree)", "at release_twice (a.cpp:9)"])
    expect_rc(["report", snap("drops.json")], 0, ["5 dropped (INCOMPLETE"])
    expect_rc(["report", "--format", "yaml", snap("leak.json")], 2)
    expect_rc(["report"], 2)


def test_library_code():
    """The site rule's one setting: --library-code on an offline command, CUMEMTRACE_LIBRARY_CODE
    for every command, the option winning (docs/check.md)."""
    torch = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"
    frames = [{"filename": torch, "line": 134, "name": "Linear.forward"},
              {"filename": "/proj/mylib/layers.py", "line": 7, "name": "Block.forward"},
              {"filename": "/proj/train.py", "line": 76, "name": "step"}]
    path = write("sites.json", json.dumps({
        "segments": [], "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1 << 20,
                                            "stream": 0, "time_us": 1, "frames": frames}]]}))
    mine = "Block.forward (layers.py:7) via Linear.forward (linear.py:134)"
    train = "step (train.py:76) via Linear.forward (linear.py:134)"
    out, _ = expect_rc(["report", "--format", "json", path], 0)
    expect(json.loads(out)["top_sites_by_bytes"][0]["site"] == mine, f"default site: {out[:400]}")
    out, _ = expect_rc(["report", "--format", "json", "--library-code", "/mylib/", path], 0)
    expect(json.loads(out)["top_sites_by_bytes"][0]["site"] == train, "--library-code /mylib/")
    env = dict(os.environ, CUMEMTRACE_LIBRARY_CODE="/mylib/")
    p = subprocess.run([ARGS.cumemtrace, "report", "--format", "json", path], capture_output=True,
                       text=True, timeout=120, env=env)
    expect(p.returncode == 0 and json.loads(p.stdout)["top_sites_by_bytes"][0]["site"] == train,
           f"CUMEMTRACE_LIBRARY_CODE=/mylib/: {p.returncode} {p.stdout[:400]} {p.stderr}")
    p = subprocess.run([ARGS.cumemtrace, "report", "--format", "json", "--library-code", "", path],
                       capture_output=True, text=True, timeout=120, env=env)
    expect(p.returncode == 0 and json.loads(p.stdout)["top_sites_by_bytes"][0]["site"] == mine,
           f"--library-code '' over the variable: {p.returncode} {p.stdout[:400]} {p.stderr}")


def test_unreadable():
    good = open(snap("leak.json")).read()
    cases = {
        "missing": (snap("nope.json"), "nope.json: cannot open"),
        "truncated": (write("truncated.json", good[: len(good) // 2]), "truncated.json:offset "),
        "version": (write("v2.json", good.replace('"schema_version":1', '"schema_version":2')),
                    "unsupported schema_version 2 (this cumemtrace reads 1)"),
        "binary": (write("bin.json", b"\x7fELF\x00\x01\x02\xff" * 50, "wb"),
                   "bin.json:offset 0: expected a snapshot (JSON or a pickle), found byte 0x7f"),
        # Issue 57: a JSON array was "found byte 0x5b".
        "array": (write("array.json", "[" + good + "]"),
                  "array.json:offset 0: expected a snapshot (JSON or a pickle), found a JSON array "
                  "('['; a snapshot is one JSON object, '{...}')"),
        "negative": (write("neg.json", good.replace('"size":1048576', '"size":-1048576', 1)),
                     "expected a non-negative integer"),
        "directory": (ARGS.work, "expected a regular file"),
    }
    for name, (path, msg) in cases.items():
        # report and check take a directory as its processes' snapshots (tests/e2e/test_ranks.py).
        many = [] if name == "directory" else [["report", path], ["check", "--max-leaked-bytes", "0", path]]
        for cmd in (*many, ["diff", snap("leak.json"), path]):
            _, err = expect_rc(cmd, 2, [msg], stream="err")
            expect(err.count("\n") == 1, f"{name}: one-line error, got {err!r}")


def test_check_text():
    expect_rc(["check", "--max-leaked-bytes", "0", snap("clean.json")], 0,
              ["clean.json: ok: 2 checks passed", "cumemtrace check: 0 failed, 2 passed"])
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", snap("leak.json")], 1)
    expect(snap("leak.json") + ": error: 2.00 MiB leaked on device 0 by 1 allocation (limit 0 B)\n"
           "    at allocate_weights (tests/programs/scenarios.cpp:42)\n" in out,
           "compiler-style leak failure:\n" + out)
    expect_rc(["check", "--max-leaked-bytes", "2MiB", snap("leak.json")], 0)
    expect_rc(["check", "--max-peak-bytes", "3MiB", snap("leak.json")], 0)
    expect_rc(["check", "--max-peak-bytes", "3145727", snap("leak.json")], 1,
              ["error: peak 3.00 MiB on device 0"])
    # Several files: one failing fails the run, each is reported.
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", snap("clean.json"), snap("leak.json")], 1,
                       ["clean.json: ok", "leak.json: error"])
    # Per device limits.
    expect_rc(["check", "--max-leaked-bytes", "4MiB", snap("twodev.json")], 1,
              ["5.00 MiB leaked on device 1", "at on_gpu1 (multi.cu:9)"])


def test_no_cuda():
    """Issue 57: a snapshot of a process that never used CUDA judges no limit. It used to pass
    every one at 0 B; it fails as not judged (check's JSON: judged false), unless --allow-no-cuda,
    and beside a file that used CUDA it is a warning. A run that used CUDA and freed everything
    still passes."""
    empty = write("no_cuda.json", json.dumps({"segments": [], "device_traces": []}))
    said = ("no CUDA allocation seen (no device memory event, segment or CUDA context): no limit "
            "can be judged (pass --allow-no-cuda if that is expected)")
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--max-peak-bytes", "1GiB", empty], 1)
    expect(out == f"{empty}: error: {said}\n{empty}: FAILED: 1 of 1 check failed\n"
                  "cumemtrace check: 1 failed, 0 passed\n", "no-CUDA verdict:\n" + out)
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--format", "json", empty], 1)
    checks = json.loads(out)["files"][0]["checks"]
    expect([(c["check"], c["status"], c["judged"]) for c in checks] == [("cuda-used", "fail", False)],
           "no-CUDA JSON: " + out)
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--allow-no-cuda", empty], 0)
    expect(f"{empty}: warning: no CUDA allocation seen; nothing to judge (allowed by "
           "--allow-no-cuda)\n" in out, "--allow-no-cuda:\n" + out)
    freed = write("all_freed.json", json.dumps({"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1},
        {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "time_us": 2},
        {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 3}]]}))
    expect_rc(["check", "--max-leaked-bytes", "0", freed], 0, [f"{freed}: ok: 1 check passed"])
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", freed, empty], 0)
    expect(f"{empty}: warning: no CUDA allocation seen in this process; its limits are not "
           "judged\n" in out and "job: ok: all 2 files passed" in out, "beside CUDA:\n" + out)


def test_check_usage():
    # Each refusal is exit 2 and its own first line (the usage hint may follow), never a bare code.
    size = "expected a size such as 0, 4096, 12MiB or 1.5GB, got"
    for args, line in (
            (["check", "--max-leaked-bytes", "lots", snap("leak.json")],
             f"cumemtrace check: --max-leaked-bytes: {size} 'lots'"),
            (["check", "--max-leaked-bytes", "-1", snap("leak.json")],
             f"cumemtrace check: --max-leaked-bytes: {size} '-1'"),
            (["check", "--max-leaked-bytes", "0"], "cumemtrace check: FILE is required"),
            (["check", "--frobnicate", snap("leak.json")],
             "cumemtrace check: unknown option '--frobnicate'"),
            (["check", "--format", "xml", snap("leak.json")],
             "cumemtrace check: --format: xml not in {text,json,github}"),
            (["check", "--mark", "step", snap("growth.json")],
             "cumemtrace check: --mark is only used with --max-growth"),
            (["check", "--max-leaked-bytes", "0", "--junit", "/nonexistent-dir/x.xml", snap("leak.json")],
             "cumemtrace check: /nonexistent-dir/x.xml: cannot write into /nonexistent-dir: No "
             "such file or directory"),
            (["check", "--max-leaked-bytes", "0", "--suppressions", snap("missing.supp"), snap("leak.json")],
             f"cumemtrace check: {snap('missing.supp')}: cannot open: No such file or directory")):
        _, err = expect_rc(args, 2, stream="err")
        expect(err.splitlines()[:1] == [line], f"{args}: first line {err.splitlines()[:1]}, wanted {line!r}")


def test_run_usage_and_refusals_leave_nothing():
    # A refused run says why in one line and leaves no output folder behind (issue 57: an empty
    # one was left), nor its parents.
    out = os.path.join(ARGS.work, "refused", "deeper", "traces")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        _, err = expect_rc(["run", "-o", out, "--metrics", f"127.0.0.1:{port}", "--", "true"], 2,
                           stream="err")
    finally:
        busy.close()
    expect(err.startswith("cumemtrace run: --metrics: "), f"--metrics refused: {err!r}")
    expect(not os.path.exists(os.path.join(ARGS.work, "refused")), "a refused run left its folder")
    # A folder that was there already stays, whatever the run did.
    os.makedirs(os.path.join(ARGS.work, "kept"), exist_ok=True)
    expect_rc(["run", "-o", os.path.join(ARGS.work, "kept"), "--max-leaked-bytes", "lots", "true"],
              2, ["--max-leaked-bytes: expected a size"], stream="err")
    expect(os.path.isdir(os.path.join(ARGS.work, "kept")), "an existing folder was removed")


def test_convert_to_a_full_stdout():
    # `convert -o - > /dev/full` used to print "basic_ios::clear: iostream error".
    with open("/dev/full", "w") as full:
        p = subprocess.run([ARGS.cumemtrace, "convert", snap("leak.json"), "--to", "json", "-o", "-"],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    expect((p.returncode, p.stderr) == (
        2, "cumemtrace convert: cannot write to stdout: No space left on device\n"),
        f"convert -o - > /dev/full: {p.returncode} {p.stderr!r}")


def test_drops():
    expect_rc(["check", "--max-leaked-bytes", "0", snap("drops.json")], 1,
              ["error: incomplete: 5 of 7 events dropped"])
    expect_rc(["check", "--max-leaked-bytes", "0", "--allow-drops", snap("drops.json")], 0,
              ["warning: incomplete: 5 of 7 events dropped"])


def test_growth_and_suppressions():
    # Without --mark, --max-growth measures at the automatic steps, which growth.json lacks: the
    # gate cannot judge it, and fails (exit 1), saying why.
    expect_rc(["check", "--max-growth", "0", snap("growth.json")], 1,
              ["0 automatic steps are complete; --max-growth with --warmup 1 needs at least 3 "
               "(the snapshot has no automatic steps: give --mark NAME)"])
    expect_rc(["check", "--max-growth-per-step", "1GiB", snap("growth.json")], 1,
              ["error: growth per step cannot be judged: the snapshot has no automatic steps"])
    expect_rc(["check", "--max-growth", "0", "--mark", "step", snap("steady.json")], 0)
    expect_rc(["check", "--max-growth", "0", "--mark", "step", snap("growth.json")], 1,
              ["grew by +4.00 MiB between occurrences 2 and 6 of mark 'step'",
               "+4.00 MiB grew at grow_cache (cache.cpp:10)"])
    expect_rc(["check", "--max-growth", "1MiB", "--mark", "step", "--warmup", "4", snap("growth.json")], 0)
    supp = write("ci.supp", "# cache is bounded by design\ngrowth:grow_cache\nleak:^src/cache.cpp$\n")
    expect_rc(["check", "--max-growth", "0", "--mark", "step", "--max-leaked-bytes", "0",
               "--suppressions", supp, snap("growth.json")], 0,
              ["Suppressions used:", "grow_cache (" + supp + ":2)", "^src/cache.cpp$ (" + supp + ":3)"])
    bad = write("bad.supp", "leak:ok\nleaks:typo\n")
    _, err = expect_rc(["check", "--max-leaked-bytes", "0", "--suppressions", bad, snap("leak.json")], 2,
                       [bad + ":2: expected `leak:PATTERN` or `growth:PATTERN`"], stream="err")


def test_formats():
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--format", "json", snap("leak.json"),
                        snap("clean.json")], 1)
    j = json.loads(out)
    expect(j["ok"] is False and j["failed"] == 1, "json summary")
    expect(j["files"][0]["ok"] is False and j["files"][1]["ok"] is True, "json per file")
    leak = [c for c in j["files"][0]["checks"] if c["check"] == "leaked-bytes"][0]
    expect(leak["value"] == 2 << 20 and leak["limit"] == 0 and leak["status"] == "fail", "json leak")

    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--format", "github", snap("leak.json")], 1)
    lines = out.splitlines()
    expect(lines[0].startswith("::error file=tests/programs/scenarios.cpp,line=42,title=cumemtrace "
                               "leaked-bytes::"), "github annotation: " + out)
    expect("%0A    at allocate_weights" in lines[0], "github stack in message")
    out, _ = expect_rc(["check", "--max-leaked-bytes", "0", "--format", "github", snap("anomaly.json")], 0)
    expect(out.startswith("::warning "), "github warning: " + out)

    xml_path = snap("out.xml")
    expect_rc(["check", "--max-leaked-bytes", "0", "--max-peak-bytes", "1GiB", "--junit", xml_path,
               snap("leak.json"), snap("clean.json")], 1)
    root = ET.parse(xml_path).getroot()
    expect(root.tag == "testsuites" and root.get("failures") == "1" and root.get("tests") == "6",
           f"junit totals {root.attrib}")
    suites = root.findall("testsuite")
    expect(len(suites) == 2, "one suite per snapshot")
    failures = root.findall(".//failure")
    expect(len(failures) == 1 and "allocate_weights" in failures[0].text, "junit failure with stack")
    expect(failures[0].get("message").startswith("2.00 MiB leaked on device 0"), "junit message")


def test_diff():
    out, _ = expect_rc(["diff", snap("steady.json"), snap("growth.json")], 0,
                       ["live at exit: 0 B -> 5.00 MiB  +5.00 MiB", "grow_cache (cache.cpp:10)"])
    out, _ = expect_rc(["diff", "--format", "json", snap("steady.json"), snap("growth.json")], 0)
    j = json.loads(out)
    expect(j["devices"][0]["live_change_bytes"] == 5 << 20, "diff json live change")
    expect(j["sites"][0]["site"] == "grow_cache (cache.cpp:10)", "diff json site")
    expect_rc(["diff", snap("steady.json")], 2)
    # A file against itself: one line, no row of +0 B (issue 57).
    out, _ = expect_rc(["diff", snap("growth.json"), snap("growth.json")], 0)
    expect(out == f"cumemtrace diff: {snap('growth.json')} -> {snap('growth.json')}\n"
                  "no differences: the same peak and bytes live at exit on 1 device, the same "
                  "allocation sites\n", f"diff of a file with itself:\n{out}")
    out, _ = expect_rc(["diff", "--format", "json", snap("growth.json"), snap("growth.json")], 0)
    expect(json.loads(out)["differences"] is False, "diff json of a file with itself")
    out, _ = expect_rc(["diff", "--format", "json", snap("steady.json"), snap("growth.json")], 0)
    expect(json.loads(out)["differences"] is True, "diff json of two files")


def test_torch_fixture():
    fixture = os.path.join(ARGS.fixtures, "torch-2.11", "snapshot-last1500.json")
    with open(os.path.join(ARGS.fixtures, "torch-2.11", "facts.json")) as f:
        facts = json.load(f)  # PyTorch's own counts when it took the snapshot
    out, _ = expect_rc(["report", fixture], 0, ["(PyTorch snapshot)", "peak allocated:", "peak reserved"])
    out, _ = expect_rc(["report", "--format", "json", fixture], 0)
    j = json.loads(out)
    d = j["devices"][0]
    expect(d["reserved_peak_bytes"] >= d["peak_bytes"] >= d["end_bytes"], "torch peaks ordered")
    expect(d["live_at_exit_bytes"] == d["end_bytes"], "torch replay lands on the end state")
    expect_rc(["check", "--max-leaked-bytes", "1GiB", fixture], 0)
    expect_rc(["check", "--max-leaked-bytes", "0", fixture], 1, ["leaked on device 0 by 38 allocations"])
    expect_rc(["check", "--max-growth", "16MiB", "--mark", "Optimizer.zero_grad#Adam.zero_grad", fixture], 0)
    expect_rc(["diff", fixture, fixture], 0, ["\nno differences: the same peak and bytes live at exit "
                                             "on 1 device, the same allocation sites\n"])
    # The diff page (html A B) embeds diff --format json's document, PyTorch's block bytes
    # included: on a real GPU job the page once read requested bytes while diff read blocks.
    ranks = [os.path.join(ARGS.fixtures, "h100-ddp-skew", f"rank{r}.json") for r in (0, 1)]
    page = snap("ddp-skew-diff.html")
    expect_rc(["html", *ranks, "-o", page, "-f"], 0)
    with open(page) as f:
        m = re.search(r'<script type="application/json" id="cumemtrace-data">(.*?)</script>',
                      f.read(), re.S)
    out, _ = expect_rc(["diff", "--format", "json", *ranks], 0)
    want = json.loads(out)
    expect(want["pytorch"]["peaks"][0]["new_bytes"] % 512 == 0, "diff's PyTorch peak in blocks")
    expect(m is not None and json.loads(m.group(1))["diff"] == want,
           "the diff page's document is diff --format json's")
    # --range: the last START..END pair of that name; the JSON verdict format is check's own.
    zero_grad = "Optimizer.zero_grad#Adam.zero_grad"
    step = "Optimizer.step#Adam.step"
    out, _ = expect_rc(["check", fixture, "--range", step, "--max-peak-bytes", "1TiB",
                        "--max-leaked-bytes", "1TiB", "--format", "json"], 0)
    j = json.loads(out)
    checks = {c["check"]: c for c in j["files"][0]["checks"]}
    expect(f"within range '{step}'" in checks["peak-bytes"]["message"], "range peak message")
    # The last Adam step's own peak, counted here from PyTorch's entries (requested bytes).
    with open(fixture) as f:
        src = json.load(f)
    marks = [a["time_us"] for a in src["external_annotations"] if a["name"] == step]
    live = peak = 0
    for e in src["device_traces"][0]:
        if marks[-2] < e["time_us"] <= marks[-1] and e["action"] in ("alloc", "free_completed"):
            live += e["size"] if e["action"] == "alloc" else -e["size"]
            peak = max(peak, live)
    expect(checks["peak-bytes"]["value"] == peak == 2197288,
           f"range peak {checks['peak-bytes']['value']} != {peak}")
    expect_rc(["check", fixture, "--range", "no-such-range", "--max-peak-bytes", "1TiB"], 2,
              ["no range named 'no-such-range'"], stream="err")
    out, _ = expect_rc(["report", "--format", "json", "--range", zero_grad, fixture], 0)
    expect(json.loads(out)["devices"][0]["range"]["name"] == zero_grad, "report --range json")
    # The PyTorch breakdown at snapshot time (contract section 6), from the pickle.
    # The whole recording, PyTorch's pickle: the report's numbers are PyTorch's own.
    pickle = os.path.join(ARGS.fixtures, "torch-2.11", "snapshot.pickle")
    expect_rc(["report", pickle], 0, ["device 0: reserved 88.0 MiB = allocated 73.8 MiB + cached "
                                      "14.2 MiB free, largest free block 12.0 MiB"])
    out, _ = expect_rc(["report", "--format", "json", pickle], 0)
    j = json.loads(out)
    expect(j["trace_entries"] == facts["trace_entries"], "trace entries")
    d = j["devices"][0]
    actions = facts["trace_actions"]
    expect((d["requests"], d["frees"]) == (actions["alloc"], actions["free_completed"]),
           f"allocations and frees: {d['requests']}, {d['frees']}")
    expect(d["reserved_peak_bytes"] == facts["max_memory_reserved"], "reserved peak")
    expect(d["reserved_end_bytes"] == facts["memory_reserved"], "reserved at exit")
    exit_layer = d["layers"][-1]
    expect(exit_layer["moment"] == "exit", "exit layer last")
    expect(exit_layer["pytorch"]["reserved_bytes"] == facts["memory_reserved"], "reserved bytes")
    expect(exit_layer["pytorch"]["allocated_bytes"] == facts["memory_allocated"], "allocated bytes")
    expect(exit_layer["pytorch"]["cached_free_bytes"] ==
           facts["memory_reserved"] - facts["memory_allocated"], "cached free bytes")
    expect(exit_layer["pytorch"]["largest_free_block_bytes"] == 12582912, "largest free block")
    out, _ = expect_rc(["report", pickle], 0)
    # Folded names: no line runs on (a site in a compiler-generated file was 1,038 chars).
    expect(max(len(l) for l in out.splitlines()) <= 200, "report lines stay short")


def test_summaries_of_a_real_job():
    """Issue 58 item 2 on the real H100 two-rank job (PyTorch's blocks, the ledger, rank 1 keeping
    1 GiB more): `summarize` writes each rank's summary (valid against schemas/summary.schema.json,
    its numbers the single-file report's); `report DIR`, `check DIR` and `html DIR` give the same
    bytes from the summaries as from the snapshots alone. `report DIR` reads both snapshots again
    (rank 1 is flagged, rank 0 its median); `check` with limits both pass reads neither: both
    spoiled (size and mtime kept), its verdict is the same; a failing rank is read."""
    import jsonschema
    with open(os.path.join(os.path.dirname(ARGS.schema), "summary.schema.json")) as f:
        schema = json.load(f)
    job, alone = snap("h100-job"), snap("h100-alone")
    for d in (job, alone):
        os.makedirs(d)
    for r in (0, 1):
        src = os.path.join(ARGS.fixtures, "h100-ddp-skew", f"rank{r}.json")
        shutil.copy(src, os.path.join(job, f"rank{r}.json"))
        os.link(os.path.join(job, f"rank{r}.json"), os.path.join(alone, f"rank{r}.json"))
    _, err = expect_rc(["summarize", job], 0, ["wrote 2 summaries"], stream="err")
    for r in (0, 1):
        with open(os.path.join(job, f"rank{r}.summary")) as f:
            s = json.load(f)
        try:
            jsonschema.validate(s, schema)
        except jsonschema.ValidationError as e:
            expect(False, f"rank{r}.summary against the schema: {e.message}")
        one = json.loads(run("report", "--format", "json", os.path.join(job, f"rank{r}.json"))[1])
        dev = one["devices"][0]
        expect((s["identity"]["rank"], s["devices"][0]["peak_bytes"],
                s["devices"][0]["allocated_peak_bytes"], s["devices"][0]["live_at_exit_bytes"]) ==
               (r, dev["peak_bytes"], dev["allocated_peak_bytes"], dev["live_at_exit_bytes"]),
               f"rank{r}.summary holds the report's numbers")
        expect(s["devices"][0]["categories_at_allocated_peak"], f"rank{r}.summary: the ledger's categories")

    def same(args, what):
        a, b = run(*args, job), run(*args, alone)
        expect(a[0] == b[0] and a[1] == b[1].replace(alone, job),
               f"{what}: the same from summaries as from the snapshots ({a[0]} vs {b[0]})")
        return a
    for fmt in ("text", "json"):
        rc, out, _ = same(["report", "--format", fmt], f"report DIR --format {fmt}")
        expect(rc == 0 and ("+1.00 GiB" in out or '"flagged": [' in out), f"report DIR {fmt}")
        for limits in (["--max-peak-bytes", "100GiB", "--max-allocated-peak", "100GiB",
                        "--max-leaked-bytes", "100GiB", "--max-growth-per-step", "1GiB"],
                       ["--max-peak-bytes", "1GiB"]):
            same(["check", "--format", fmt, *limits], f"check DIR {' '.join(limits)} {fmt}")
    page_a, page_b = snap("h100-job.html"), snap("h100-alone.html")
    run("html", job, "-o", page_a)
    run("html", alone, "-o", page_b)
    with open(page_a) as fa, open(page_b) as fb:
        expect(fa.read() == fb.read().replace(alone, job).replace("h100-alone", "h100-job"),
               "html DIR: the same page from summaries")
    passing = ["check", "--max-peak-bytes", "100GiB", "--max-leaked-bytes", "100GiB", job]
    before = run(*passing)
    for r in (0, 1):  # spoiled, size and mtime kept: the summaries still read as current
        path = os.path.join(job, f"rank{r}.json")
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(b"#" * st.st_size)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    expect(run(*passing) == before and before[0] == 0, "check DIR: passing ranks judged from summaries")
    # Rank 1's peak (1.24 GiB) breaks 1 GiB: it is read for its stacks, and, spoiled, fails to be.
    rc, _, err = run("check", "--max-peak-bytes", "1GiB", job)
    expect(rc == 2 and "rank1.json" in err and "rank0.json" not in err,
           f"check DIR: the failing rank alone is read ({rc})")


def test_two_snapshots_of_one_process():
    """The real H100 run with one OOM (torch-2.11-fraction-oom): its snapshot written at the OOM
    and its final one are one process, whichever order they come in; the table keeps the final
    one (it holds the OOM too), counts one OOM in one process and names no other process."""
    d = os.path.join(ARGS.fixtures, "torch-2.11-fraction-oom")
    oom, final = os.path.join(d, "oom.json"), os.path.join(d, "snapshot.json")
    for files in ([oom, final], [final, oom]):
        out, _ = expect_rc(["report", *files], 0)
        lines = out.splitlines()
        expect(lines[0] == f"cumemtrace report: 1 process of 2 files ({oom} left out: pid 4243 "
               f"(python3.12) again, whose {final} holds more of it)",
               f"report {files}: {lines[0]}")
        expect(lines[2].startswith("First OOM of the job: pid 4243 (python3.12) on cuda:0 at "
                                   "+3.652506 s since the job's start: exhaustion: 900 MiB"),
               f"report {files}: one OOM, its process named once: {lines[2]}")
        expect("the other processes then" not in out, f"report {files}: no other process")
        rows = [ln for ln in lines if ln.startswith("  pid ")]
        expect(len(rows) == 1 and rows[0].split()[-1] == "MiB" and "286 MiB" in rows[0],
               f"report {files}: one row, the final snapshot's (286 MiB live at exit): {rows}")
        j = json.loads(expect_rc(["report", "--format", "json", *files], 0)[0])
        expect(j["same_process_files"] == [{"file": oom, "same_process_as": final}],
               f"report --format json {files}: {j['same_process_files']}")
        expect(len(j["ranks"]["rows"]) == 1 and j["ranks"]["first_oom"]["ooms"] == 1
               and j["ranks"]["first_oom"]["processes_with_oom"] == 1,
               f"report --format json {files}: one row, one OOM")
    # --each still reports each file.
    out, _ = expect_rc(["report", "--each", oom, final], 0)
    expect(out.count("Top allocation sites by bytes") == 2, "report --each: both files' reports")


def test_real_collector_output():
    """The collector's own files, from a test program run on the fake driver, gate correctly."""
    if not os.path.exists(ARGS.traced_program):
        expect(False, f"collector output test: {ARGS.traced_program} is not built")
        return
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ARGS.fake_driver_dir + ":" + os.path.join(
        os.path.dirname(os.path.dirname(ARGS.cumemtrace)), "lib")
    for k in list(env):
        if k.startswith("CUMEMTRACE_") or k.startswith("FAKE_CUDA_") or k == "LD_PRELOAD":
            del env[k]
    out = os.path.join(ARGS.work, "collected")
    subprocess.run(["rm", "-rf", out], check=True)
    p = subprocess.run([ARGS.cumemtrace, "run", "-o", out, "--", ARGS.traced_program, "basic"],
                       env=env, capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, "traced run: " + p.stderr)
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    files = [os.path.join(out, f) for f in names if f.endswith(".json")]
    expect(len(files) == 1, f"one snapshot from the traced run, got {names}")
    expect([f for f in names if f.endswith(".summary")] ==
           [os.path.basename(f)[:-len(".json")] + ".summary" for f in files],
           f"its summary beside it, got {names}")
    if len(files) != 1:
        return
    # The basic scenario keeps 2 MiB on device 0 (allocate_weights) and 4.5 MiB on device 1,
    # peaking at 3 MiB and 7 MiB.
    out_text, _ = expect_rc(["check", "--max-leaked-bytes", "0", files[0]], 1,
                            ["2.00 MiB leaked on device 0 by 1 allocation (limit 0 B)\n    at allocate_weights (",
                             "4.50 MiB leaked on device 1 by 2 allocations"])
    expect_rc(["check", "--max-leaked-bytes", "4.5MiB", "--max-peak-bytes", "7MiB", files[0]], 0)
    expect_rc(["check", "--max-peak-bytes", "6MiB", files[0]], 1, ["error: peak 7.00 MiB on device 1"])
    out_text, _ = expect_rc(["report", "--format", "json", files[0]], 0)
    j = json.loads(out_text)
    expect([(d["device"], d["peak_bytes"]) for d in j["devices"]] == [(0, 3 << 20), (1, 7 << 20)],
           f"peaks of the basic scenario: {j['devices']}")


def test_schema():
    try:
        import jsonschema
    except ImportError:
        SKIPS.append("schema test: python3-jsonschema is absent (scripts/setup.sh installs it)")
        return
    schema = json.load(open(ARGS.schema))
    for name in ("clean.json", "leak.json", "growth.json", "drops.json", "anomaly.json", "twodev.json"):
        try:
            jsonschema.validate(json.load(open(snap(name))), schema)
        except jsonschema.ValidationError as e:
            expect(False, f"{name} does not match the schema: {e.message}")


def test_outputs_never_destroy_data():
    """html/convert/--junit: never the input (by inode), never an existing file without -f,
    never through a symlink, no temporary left behind."""
    src = write("keep.json", open(snap("leak.json")).read())
    original = open(src).read()
    expect_rc(["html", src, "-o", src], 2, ["is the input file"], stream="err")
    alias = os.path.join(ARGS.work, ".", "keep.json")
    expect_rc(["convert", src, "--to", "pickle", "-o", alias, "-f"], 2, ["is the input file"], stream="err")
    expect(open(src).read() == original, "the input survives -o onto itself")
    # A job's page (html DIR) never lands on one of the directory's snapshots; a diff's (html A
    # B) on neither input.
    job = os.path.join(ARGS.work, "job_dir")
    os.makedirs(job, exist_ok=True)
    inside = write(os.path.join("job_dir", "rank0.json"), original)
    expect_rc(["html", job, "-o", inside, "-f"], 2, ["is the input file"], stream="err")
    expect_rc(["html", src, inside, "-o", inside, "-f"], 2, ["is the input file"], stream="err")
    expect(open(inside).read() == original, "a job's snapshot survives -o onto itself")
    out = snap("keep.html")
    if os.path.exists(out):
        os.unlink(out)
    expect_rc(["html", src], 0)
    expect_rc(["html", src], 2, ["already exists; pass -f/--force"], stream="err")
    expect_rc(["html", src, "-f"], 0)
    victim = write("victim.txt", "precious")
    link = snap("link.html")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(victim, link)
    expect_rc(["html", src, "-o", link, "-f"], 2, ["symbolic link"], stream="err")
    expect(open(victim).read() == "precious", "a symlinked output's target is untouched")
    xml = write("exists.xml", "old")
    expect_rc(["check", "--max-leaked-bytes", "1GiB", "--junit", xml, src], 2,
              ["already exists"], stream="err")
    expect_rc(["check", "--max-leaked-bytes", "1GiB", "--junit", xml, "-f", src], 0)
    expect(open(xml).read().startswith("<?xml"), "--junit -f replaced the file")
    expect_rc(["check", "--max-leaked-bytes", "1GiB", "--junit", src, "-f", src], 2,
              ["is the input file"], stream="err")
    expect(not [f for f in os.listdir(ARGS.work) if ".tmp." in f], "no temporaries left")


def test_inputs_are_bounded_and_never_hang():
    fifo = snap("fifo.json")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    expect_rc(["report", fifo], 2, ["expected a regular file (a snapshot), found a FIFO"], stream="err")
    expect_rc(["check", "--max-leaked-bytes", "0", "--suppressions", ARGS.work, snap("leak.json")], 2,
              ["expected a regular file (a suppressions file), found a directory"], stream="err")
    expect_rc(["check", "--max-leaked-bytes", "0", "--suppressions", "/dev/zero", snap("leak.json")], 2,
              ["found a character device"], stream="err")
    expect_rc(["check", "--max-leaked-bytes", "0", "--suppressions", snap("none.supp"), snap("leak.json")],
              2, ["none.supp: cannot open: No such file or directory"], stream="err")
    long_line = write("long.supp", "leak:" + "x" * 70000 + "\n")
    expect_rc(["check", "--max-leaked-bytes", "0", "--suppressions", long_line, snap("leak.json")], 2,
              ["long.supp:1: expected lines of at most 65536 bytes"], stream="err")
    p = subprocess.run([ARGS.cumemtrace, "report", "-"], input=open(snap("leak.json")).read(),
                       capture_output=True, text=True, timeout=60)
    expect(p.returncode == 0 and "live at exit: 2.00 MiB" in p.stdout, f"report - reads stdin: {p.stderr}")


def test_usage_messages():
    expect_rc(["reprot", snap("leak.json")], 2, ["unknown subcommand 'reprot', did you mean 'report'?"],
              stream="err")
    expect_rc(["report", "--top", "0", snap("leak.json")], 2,
              ["--top: must be a whole number between 1 and 1000, got '0'"], stream="err")
    _, err = expect_rc(["check", "--max-leak", "0", snap("leak.json")], 2,
                       ["unknown option '--max-leak', did you mean '--max-leaked-bytes'?"], stream="err")
    expect("A subcommand is required" not in err, "no CLI11 jargon")
    expect_rc(["run", "-o", snap("x")], 2, ["expected PROGRAM [ARGS...] after the options"], stream="err")
    expect_rc(["run", "--max-leaked-bytes", "0", "--suppressions", "/nonexistent.supp", "true"], 2,
              ["/nonexistent.supp: cannot open: No such file or directory"], stream="err")
    expect_rc(["run", "--max-leaked-bytes", "lots", "true"], 2, ["expected a size"], stream="err")
    expect_rc(["run", "--mark", "step", "true"], 2, ["--mark is only used with --max-growth"],
              stream="err")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--cumemtrace", required=True)
    p.add_argument("--make-snapshots", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--traced-program", required=True)
    p.add_argument("--fake-driver-dir", default="")
    ARGS = p.parse_args()
    shutil.rmtree(ARGS.work, ignore_errors=True)  # outputs are never overwritten: start afresh
    os.makedirs(ARGS.work, exist_ok=True)
    subprocess.run([ARGS.make_snapshots, ARGS.work], check=True)
    for t in (test_report, test_library_code, test_unreadable, test_check_text, test_no_cuda, test_check_usage,
              test_run_usage_and_refusals_leave_nothing, test_convert_to_a_full_stdout,
              test_drops,
              test_growth_and_suppressions, test_formats, test_diff, test_torch_fixture,
              test_summaries_of_a_real_job, test_two_snapshots_of_one_process,
              test_real_collector_output, test_schema, test_outputs_never_destroy_data,
              test_inputs_are_bounded_and_never_hang, test_usage_messages):
        t()
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    if SKIPS:
        print("\n".join(f"SKIPPED {s}" for s in SKIPS))
        return 77
    print("all CLI tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
