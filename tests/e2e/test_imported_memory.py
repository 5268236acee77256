"""End-to-end: CUDA IPC (the `ipc` scenario of tests/programs/scenarios.h): the child's mappings
of its parent's allocation are imported memory, listed and never counted or leaked."""
import pytest

from conftest import MiB, device_summary, prog, run_traced


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_ipc_mappings_are_imported_not_allocated(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "ipc"])
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 2, list(snaps)
    pids = {s["cumemtrace"]["pid"] for s in snaps.values()}
    parent = next(s for s in snaps.values() if s["cumemtrace"]["ppid"] not in pids)
    child = next(s for s in snaps.values() if s is not parent)
    assert child["cumemtrace"]["ppid"] == parent["cumemtrace"]["pid"]
    d0 = device_summary(parent, 0)
    assert (d0["allocations"], d0["frees"], d0["live_bytes"]) == (1, 1, 0)
    assert parent["cumemtrace"]["imported_mappings"] == []
    ct = child["cumemtrace"]
    # The child _exits and its parent reaps it: "vanished" (README, Limits), its events complete.
    assert ct["events_dropped"] == 0
    assert ct["anomalies"] == []
    assert child["segments"] == []
    assert all(d["live_bytes"] == 0 and d["allocations"] == 0 for d in ct["devices"])
    imported = ct["imported_mappings"]
    assert [(m["size"], m["device"], m["handle"]) for m in imported] == [(2 * MiB, 0, 0)]
    assert any("scenario_ipc" in f["name"] for f in imported[0]["frames"])
