#!/usr/bin/env python3
"""`cumemtrace convert --to pprof` read by the real pprof: Debian's `go tool pprof`.

  pprof_go_test.py --cumemtrace BIN --program ct_static_like --fake-driver-dir DIR
                   --fixture snapshot.pickle --out DIR

1. ct_static_like's "basic" scenario traced on the fake driver (two devices: 1 MiB freed and
   2 MiB kept on device 0; 4 MiB kept, 3 MiB freed and 512 KiB kept on device 1), converted;
   `go tool pprof -top -lines -unit=B` with each -sample_index names every site `report --format
   json` names, with its exact bytes: inuse_space = live at exit, peak_inuse_space = live at the
   devices' peaks (3 MiB + 7 MiB), alloc_space = every request; and -tagfocus on the device label
   keeps one device's.
2. PyTorch's own snapshot (tests/fixtures/torch-2.11) converted: pprof's total at the peak is
   report's peak and its top lines are Python frames (file.py:line).
3. convert refuses to write over its input or through a symlink (exit 2, input untouched).
Exits 77 only when `go` is not installed (scripts/setup.sh installs golang-go)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20
ROW = re.compile(r"^\s*(\d+)B\s+\S+%\s+\S+%\s+(\d+)B\s+\S+%\s+(.+?)\s*$")
TOTAL = re.compile(r"of (\d+)B total")


def run(*args, expect=0, env=None):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != expect:
        sys.exit(f"{' '.join(map(str, args))}: exit {p.returncode}, wanted {expect}\n"
                 f"{p.stdout}\n{p.stderr}")
    return p


def pprof_top(go, profile, index, *extra):
    """{"function file:line": flat bytes} and the total pprof says the profile holds."""
    p = run(go, "tool", "pprof", "-top", "-lines", "-unit=B", "-nodecount=100000",
            "-nodefraction=0", "-edgefraction=0",
            f"-sample_index={index}", *extra, profile)
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m and int(m.group(1)):
            rows[m.group(3)] = rows.get(m.group(3), 0) + int(m.group(1))
    total = TOTAL.search(p.stdout)
    assert total, p.stdout
    return rows, int(total.group(1)), p.stdout


def base_names(k):
    """A pprof -lines name with its file's folders left out ("f /a/b/c.py:3" -> "f c.py:3")."""
    return re.sub(r" \S*/", " ", k)


def pprof_name(row):
    """How pprof -lines names a report row's leaf: "function file:line", the function folded
    as report's site label shows it, no ":0"; a row without frames (no stack) is its label. A row
    whose user line called a library ("SITE via FUNCTION (FILE:LINE)") is that library frame's
    leaf in pprof, under the site's frame. Files by their base names (report's label has no more
    of the library's)."""
    if not row["frames"]:
        return row["site"]
    site, _, via = row["site"].partition(" via ")
    if via:
        name, _, where = via[:-1].rpartition(" (")
        return f"{name} {where}"
    f = row["frames"][0]
    if f["filename"] in ("", "??"):
        return site
    name = site.rsplit(" (", 1)[0]
    return base_names(f"{name} {f['filename']}" + (f":{f['line']}" if f["line"] > 0 else ""))


def expect_rows(go, profile, index, report_rows, extra=()):
    want = {}
    for r in report_rows:
        want[pprof_name(r)] = want.get(pprof_name(r), 0) + r["bytes"]
    got, total, text = pprof_top(go, profile, index, *extra)
    merged = {}
    for k, v in got.items():
        merged[base_names(k)] = merged.get(base_names(k), 0) + v
    got = merged
    assert got == want, f"{index}: pprof {got}\nreport {want}\n{text}"
    assert total == sum(want.values()), text
    return got


def line_of(a, name, marker):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "programs", name)) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(f"{marker} not in {name}")


def fake_run(a, out):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("CUMEMTRACE_", "FAKE_CUDA_")) or k == "LD_PRELOAD":
            del env[k]
    env["LD_LIBRARY_PATH"] = a.fake_driver_dir
    run(a.cumemtrace, "run", "-o", out / "traces", "--", a.program, "basic", env=env)
    files = sorted((out / "traces").glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--cumemtrace", "--program", "--fake-driver-dir", "--fixture", "--out"):
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    go = shutil.which("go")
    if not go:
        print("pprof_go_test: SKIP: `go` is not installed (Debian's golang-go, scripts/setup.sh)")
        return 77
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # pprof keeps state under $HOME/pprof (its -http history); keep it in the test's folder.
    os.environ["HOME"] = str(out)
    os.environ["PPROF_TMPDIR"] = str(out)

    snap = fake_run(a, out)
    profile = out / "basic.pb.gz"
    run(a.cumemtrace, "convert", snap, "--to", "pprof", "-o", profile)
    assert profile.read_bytes()[:2] == b"\x1f\x8b"  # gzip, as pprof files are stored
    report = json.loads(run(a.cumemtrace, "report", "--format", "json", "--top", "1000",
                            snap).stdout)
    devs = report["devices"]
    assert [d["device"] for d in devs] == [0, 1], devs
    live = [r for d in devs for r in d["live_at_exit"]]
    peak = [r for d in devs for r in d["at_peak"]]
    got = expect_rows(go, profile, "inuse_space", live)
    # allocate_weights' own line keeps 2 MiB; scenario_basic's other allocations are inlined
    # into main (ct_static_like.cpp's call of the scenario), 4 MiB + 512 KiB kept there.
    assert got == {
        f"allocate_weights scenarios.cpp:{line_of(a, 'scenarios.cpp', 'ALLOC_WEIGHTS_LINE')}": 2 * MiB,
        f"main ct_static_like.cpp:{line_of(a, 'ct_static_like.cpp', 'tp::run_scenario(')}":
            4 * MiB + 512 * 1024}, got
    got = expect_rows(go, profile, "peak_inuse_space", peak)
    assert sum(got.values()) == 3 * MiB + 7 * MiB == sum(d["peak_bytes"] for d in devs), got
    got = expect_rows(go, profile, "alloc_space", report["top_sites_by_bytes"])
    assert sum(got.values()) == (1 + 2 + 4 + 3) * MiB + 512 * 1024, got
    # The default sample type is inuse_space; the device label selects one device.
    got1, total1, _ = pprof_top(go, profile, "peak_inuse_space", "-tagfocus=device=cuda:1")
    assert sum(got1.values()) == 7 * MiB and total1 == 10 * MiB, (got1, total1)
    _, default_total, text = pprof_top(go, profile, "inuse_space")
    p = run(go, "tool", "pprof", "-top", "-unit=B", profile)
    assert f"of {default_total}B total" in p.stdout and "Type: inuse_space" in p.stdout, p.stdout
    assert "File: ct_static_like" in p.stdout, p.stdout

    # PyTorch's own snapshot: Python frames, the peak's total.
    torch_profile = out / "torch.pb.gz"
    run(a.cumemtrace, "convert", a.fixture, "--to", "pprof", "-o", torch_profile)
    tr = json.loads(run(a.cumemtrace, "report", "--format", "json", "--top", "1000",
                        a.fixture).stdout)
    rows, total, text = pprof_top(go, torch_profile, "peak_inuse_space")
    assert total == tr["devices"][0]["peak_bytes"], text
    py_rows = [k for k in rows if re.search(r"\.py:\d+$", k)]
    assert py_rows and py_rows[0] == max(rows, key=rows.get), text
    expect_rows(go, torch_profile, "peak_inuse_space", tr["devices"][0]["at_peak"])
    # Python's module frames keep their name (they were "<unknown>"), and the library's frames
    # the user's lines called are there.
    p = run(go, "tool", "pprof", "-traces", "-lines", "-sample_index=peak_inuse_space",
            torch_profile)
    assert "<unknown>" not in p.stdout and re.search(r"<module> \S+\.py:\d+", p.stdout), p.stdout
    assert re.search(r"/torch/\S+\.py:\d+", p.stdout), p.stdout

    # Never over the input, never through a symlink.
    before = snap.read_bytes()
    p = run(a.cumemtrace, "convert", snap, "--to", "pprof", "-o", snap, "-f", expect=2)
    assert snap.read_bytes() == before, "the input was overwritten"
    link = out / "link.pb.gz"
    target = out / "target"
    target.write_text("keep")
    link.symlink_to(target)
    run(a.cumemtrace, "convert", snap, "--to", "pprof", "-o", link, "-f", expect=2)
    assert target.read_text() == "keep"
    print("pprof_go_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
