"""End-to-end: CUDA context memory measured at creation (the `contexts` scenario of
tests/programs/scenarios.h) through the real preload, the fake driver and the fake NVML, whose
FAKE_NVML_CONTEXT charges each context in being on its device (tests/fake_driver/fake_nvml.cpp).
The snapshot lists each context with its exact bytes and end; every view splits untracked into
the context and the rest with the same bytes."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, CT, MiB, base_env, device_summary, prog, run_preloaded, run_traced

KiB = 1024
FAKE_NVML = os.path.join(BUILD, "fake_nvml", "libnvidia-ml.so.1")
CTX0, CTX1 = 512 * KiB, 1 * MiB
NVML = dict(CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_USED="",
            FAKE_NVML_CONTEXT=f"0:{CTX0},1:{CTX1}")


def only(snaps):
    assert len(snaps) == 1, list(snaps)
    return next(iter(snaps.values()))


def report_json(path):
    out = subprocess.run([CT, "report", "--format", "json", path], env=base_env(),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def exit_layer(report, device):
    d = next(x for x in report["devices"] if x["device"] == device)
    layer = d["layers"][-1]
    assert layer["moment"] == "exit"
    return d, layer


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_contexts_measured_at_creation(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "contexts"], **NVML)
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    t = snap["cumemtrace"]
    # Context events are no memory events: 2 allocations and 2 frees.
    assert (t["events_total"], t["anomalies"]) == (4, [])
    assert (device_summary(snap, 0)["peak_bytes"], device_summary(snap, 1)["peak_bytes"]) == \
        (1 * MiB, 2 * MiB)
    ctx = t["contexts"]
    # The second retain of device 0's primary context made no new context.
    assert [(c["device"], c["bytes"], c["api"], "end_time_us" in c) for c in ctx] == \
        [(0, CTX0, "cuDevicePrimaryCtxRetain", False), (1, CTX1, "cuCtxCreate", True)]
    assert t["start_time_us"] <= ctx[0]["time_us"] < ctx[1]["time_us"] < ctx[1]["end_time_us"]
    assert ctx[1]["end_time_us"] <= t["end_time_us"]
    assert ctx[0]["handle"] != ctx[1]["handle"] and ctx[1]["handle"] != 0
    # Each measurement left an NVML sample at that moment: device 0 at 512 KiB before its
    # allocation, device 1 at 1 MiB, and 0 once its context was destroyed.
    samples = [(s["device"], s["used_bytes"]) for s in t["driver_memory"]]
    assert (0, CTX0) in samples and (1, CTX1) in samples
    assert samples[-1] == (1, 0) or (1, 0) in samples

    path = os.path.join(str(tmp_path / "traces"), next(iter(snaps)))
    r = report_json(path)
    d0, exit0 = exit_layer(r, 0)
    assert (exit0["driver_visible_bytes"], exit0["tracked_bytes"]) == (CTX0, 0)
    assert (exit0["untracked_bytes"], exit0["context_bytes"], exit0["other_untracked_bytes"]) == \
        (CTX0, CTX0, 0)
    assert [(c["bytes"], c["end_time_us"]) for c in d0["contexts"]] == [(CTX0, None)]
    d1, exit1 = exit_layer(r, 1)
    assert (exit1["driver_visible_bytes"], exit1["context_bytes"]) == (0, 0)
    assert [(c["bytes"], c["api"]) for c in d1["contexts"]] == [(CTX1, "cuCtxCreate")]
    text = subprocess.run([CT, "report", path], env=base_env(), capture_output=True, text=True,
                          check=True).stdout
    assert "device 0: driver-visible 512 KiB = CUDA context 512 KiB + other untracked 0 B + " \
        "tracked 0 B" in text
    assert "CUDA context (measured at creation): 512 KiB from cuDevicePrimaryCtxRetain at +" in text
    assert "CUDA context (measured at creation): 1.00 MiB from cuCtxCreate at +" in text
    assert ", destroyed at +" in text
    # `run`'s summary says it in the same words and bytes.
    assert "device 0 at exit: driver-visible 512 KiB = CUDA context 512 KiB + other untracked " \
        "0 B + tracked 0 B" in p.stderr


def test_released_primary_context_ends(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "contexts", "release"], **NVML)
    assert p.returncode == 0, p.stderr
    t = only(snaps)["cumemtrace"]
    ctx = t["contexts"]
    assert [(c["device"], c["bytes"], "end_time_us" in c) for c in ctx] == \
        [(0, CTX0, True), (1, CTX1, True)]
    # The first release dropped a reference, the second the context: it ended after device 1's.
    assert ctx[1]["end_time_us"] < ctx[0]["end_time_us"] <= t["end_time_us"]
    assert t["driver_memory"][-1]["used_bytes"] == 0
    assert "device 0 at exit: driver-visible 0 B = CUDA context 0 B + other untracked 0 B" in \
        p.stderr


def test_contexts_under_plain_preload(tmp_path):
    p, snaps = run_preloaded(tmp_path, [prog("ct_lcuda"), "contexts"], **NVML)
    assert p.returncode == 0, p.stderr
    ctx = only(snaps)["cumemtrace"]["contexts"]
    assert [(c["device"], c["bytes"]) for c in ctx] == [(0, CTX0), (1, CTX1)]


@pytest.mark.parametrize("env", [
    {},  # no NVML
    {"CUMEMTRACE_NVML_LIBRARY": FAKE_NVML, "FAKE_NVML_USED": ""},  # NVML lists no memory
])
def test_no_measurement_no_entry(tmp_path, env):
    env = {"CUMEMTRACE_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1", **env}
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "contexts"], **env)
    assert p.returncode == 0, p.stderr
    t = only(snaps)["cumemtrace"]
    assert "contexts" not in t
    assert t["events_total"] == 4


def test_forked_child_has_no_context_of_its_own(tmp_path):
    # The child inherits its parent's context and retains nothing new: nothing is measured for
    # it (its views then say "CUDA context not measured": tests/viz/views_agree_test.cpp).
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "fork"],
                          CUMEMTRACE_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_USED=f"0:{300 * MiB}")
    assert p.returncode == 0, p.stderr
    parent = next(s for s in snaps.values() if s["cumemtrace"]["events_total"] == 2)
    child = next(s for s in snaps.values() if s["cumemtrace"]["events_total"] == 1)
    # The parent's context is measured: 300 MiB were there right after it was created.
    assert [(c["device"], c["bytes"]) for c in parent["cumemtrace"]["contexts"]] == \
        [(0, 300 * MiB)]
    assert "contexts" not in child["cumemtrace"]


def test_async_allocation_lands_on_its_streams_device(tmp_path):
    # A stream-ordered allocation comes from the pool of its stream's device, not the current
    # one's: the 1 MiB on device 1's stream is device 1's while device 0 is current. The stream's
    # device is remembered per thread (preload/driver/stream_devices.h); once that stream is destroyed
    # its handle comes back for a stream of device 0, and the 2 MiB are device 0's.
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "async_stream_device"],
                          CUMEMTRACE_DEBUG="1")
    assert p.returncode == 0, p.stderr
    # Asked once per stream; the destruction of s1 made the remembered answer stale (the exit's
    # own context ends come after this line).
    assert "cumemtrace: stream devices: asked the driver 2 times; 1 stream or context ends " \
        "forgot them" in p.stderr, p.stderr
    assert p.stdout == "same handle: 1\n"  # else the test would not test the forgetting
    (snap,) = snaps.values()

    def allocs(device):
        return [(e["action"], e["size"]) for e in snap["device_traces"][device]
                if e["action"] in ("segment_alloc", "segment_free")]

    assert allocs(1) == [("segment_alloc", MiB), ("segment_free", MiB)]
    assert allocs(0) == [("segment_alloc", 2 * MiB), ("segment_free", 2 * MiB)]
    assert device_summary(snap, 1)["peak_bytes"] == MiB
    assert device_summary(snap, 0)["peak_bytes"] == 2 * MiB
