"""End-to-end: CUDA graph memory (the `graph` scenario of tests/programs/scenarios.h) through the
real preload and the fake driver, by each way a program reaches the driver that offers graphs."""
import json
import subprocess

import pytest

from conftest import CT, MiB, actions, base_env, device_summary, prog, run_preloaded, run_traced

KiB = 1024
SA, A, FR, FC, SF = "segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"
ALLOC, FREE = [SA, A], [FR, FC, SF]


def graph_snapshot(snaps):
    assert len(snaps) == 1, list(snaps)
    return next(iter(snaps.values()))


def check_graph(snap):
    t = snap["cumemtrace"]
    assert t["ended"] == {"how": "exit", "code": 0, "signal": 0}
    assert t["events_dropped"] == 0
    # A graph allocation freed outside any graph (cuMemFree, cuMemFreeAsync), or by another
    # graph's free node, is no anomaly.
    assert t["anomalies"] == []
    # Launch E1: a, b, free b; cuMemFree a; launch E1: a, b, free b; launch E2: c, free a, d;
    # freeAsync c; E3 three times: e, (auto-free e, e) twice.
    assert actions(snap, 0) == (ALLOC + ALLOC + FREE + FREE + ALLOC + ALLOC + FREE
                                + ALLOC + FREE + ALLOC + FREE
                                + ALLOC + FREE + ALLOC + FREE + ALLOC)
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == SA]
    assert sizes == [MiB, 2 * MiB, MiB, 2 * MiB, 4 * MiB, 512 * KiB, 256 * KiB, 256 * KiB, 256 * KiB]
    # Every entry is graph memory, and says so.
    assert {e.get("source") for e in snap["device_traces"][0]} == {"graph"}
    d0 = device_summary(snap, 0)
    assert (d0["allocations"], d0["frees"]) == (9, 7)
    assert (d0["live_bytes"], d0["peak_bytes"]) == (768 * KiB, 5 * MiB)
    # The driver's graph pool: 5 MiB at its highest, trimmed to what is in use.
    assert (d0["graph_reserved_bytes"], d0["graph_reserved_peak_bytes"]) == (768 * KiB, 5 * MiB)
    # The two leaks, d (captured cuMemAllocAsync) and e (cuGraphAddNode), with their stacks.
    live = sorted((s["total_size"], s.get("source")) for s in snap["segments"])
    assert live == [(256 * KiB, "graph"), (512 * KiB, "graph")]
    for s in snap["segments"]:
        names = " ".join(f["name"] for f in s["frames"])
        assert "scenario_graph" in names, names


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_graph_memory_under_run(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "graph"])
    assert p.returncode == 0, p.stderr
    check_graph(graph_snapshot(snaps))


def test_graph_memory_under_plain_preload(tmp_path):
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "graph"])
    assert p.returncode == 0, p.stderr
    check_graph(graph_snapshot(snaps))


def test_graph_leaks_are_reported_and_gated(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "graph"], ["--max-leaked-bytes", "0"])
    assert p.returncode == 1
    assert "768 KiB leaked on device 0 by 2 allocations (limit 0 B)" in p.stderr, p.stderr
    path = str(next((tmp_path / "traces").glob("*.json")))
    r = subprocess.run([CT, "report", path, "--format", "json"], env=base_env(), capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["anomalies"] == []
