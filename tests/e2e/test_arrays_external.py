"""End-to-end: CUDA arrays, mipmapped arrays and external memory (the `arrays` scenario of
tests/programs/scenarios.h) are device memory with exact sizes; a mapped buffer of external
memory is an imported mapping, released by cuMemFree without an anomaly."""
import pytest

from conftest import MiB, actions, device_summary, prog, run_traced

KiB = 1024


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_arrays_and_external_memory(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "arrays"])
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 1
    snap = next(iter(snaps.values()))
    t = snap["cumemtrace"]
    assert t["anomalies"] == []
    d0 = device_summary(snap, 0)
    assert (d0["allocations"], d0["frees"]) == (5, 2)
    assert (d0["peak_bytes"], d0["live_bytes"]) == (5_636_096, 3_538_944)
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    assert sizes == [4 * MiB, 64 * KiB, 1_376_256, 0, 2 * MiB]
    assert actions(snap, 0).count("segment_free") == 2
    live = sorted(s["total_size"] for s in snap["segments"])
    assert live == [64 * KiB, 1_376_256, 2 * MiB]
    for s in snap["segments"]:
        assert any("scenario_arrays" in f["name"] for f in s["frames"])
    imported = t["imported_mappings"]
    assert [(m["size"], m["device"]) for m in imported] == [(512 * KiB, 0)]
    external = next(s for s in snap["segments"] if s["total_size"] == 2 * MiB)
    assert imported[0]["handle"] == external["address"]
