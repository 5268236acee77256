"""End-to-end: the automatic phases' ownership walks (cumemtrace_torch_owners, reached by dlsym as
Python's ctypes reaches it) come out in the snapshot's tool section exactly as they were passed,
through `cumemtrace run` and plain LD_PRELOAD, from every way a program reaches the driver. The
scenario's numbers are in tests/programs/scenarios.h (owners).
"""
import pytest

from conftest import MiB, prog, run_preloaded, run_traced

GRADIENTS = [[0x10000000 + 4096 * i, 4096 + i] for i in range(300)]


def check_walks(p, snaps):
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["owners 0 0 0 -1 -1 -1"]
    (snap,) = snaps.values()
    tool = snap["cumemtrace"]
    walks = tool["ownership"]
    assert [w["role"] for w in walks] == ["parameter", "gradient", "gradient"]
    # The two allocations of the scenario, by the addresses the driver gave.
    allocs = [e["addr"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == 2
    assert walks[0]["tensors"] == [[allocs[0], MiB], [allocs[1], 2 * MiB]]
    # 300 pairs took two records; they are one walk, in order.
    assert walks[1]["tensors"] == GRADIENTS
    assert walks[2]["tensors"] == []
    # Each walk at its call's moment: after the second allocation, in call order, within the run.
    times = [w["time_us"] for w in walks]
    second_alloc = [e for e in snap["device_traces"][0] if e["action"] == "alloc"][1]["time_us"]
    assert second_alloc <= times[0] <= times[1] <= times[2] <= tool["end_time_us"]
    # Walks are no events: 2 allocations and 1 free were recorded.
    assert tool["events_total"] == 3
    assert tool["devices"][0]["live_bytes"] == 2 * MiB


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_shared_like", "ct_lcuda"])
def test_ownership_walks_under_run(tmp_path, exe):
    check_walks(*run_traced(tmp_path, [prog(exe), "owners"]))


def test_ownership_walks_under_plain_preload(tmp_path):
    check_walks(*run_preloaded(tmp_path, [prog("ct_static_like"), "owners"]))
