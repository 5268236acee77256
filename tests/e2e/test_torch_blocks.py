"""PyTorch's caching-allocator events through the real path: cumemtrace's sitecustomize, the
attach through the ELF symbols of a libc10_cuda.so, the preload's tracker, the ring and the
collector's merge. The fake torch (tests/fake_torch) follows PyTorch's caching rules; the numbers
below are what those rules give for tests/e2e/torch_blocks.py."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import BENCH_PRELOAD, BUILD, CT, MiB, SOURCE, base_env, run_preloaded, snapshots

SCRIPT = os.path.join(SOURCE, "tests", "e2e", "torch_blocks.py")
FAKE_TORCH = os.path.join(SOURCE, "tests", "fake_torch")
FAKE_LIB = os.path.join(BUILD, "fake_torch", "libc10_cuda.so")
OUR_PY = os.path.join(BUILD, "lib", "cumemtrace", "python")


def torch_env(**extra):
    # The fake torch has no nn, optim or autograd for the automatic phases to hook (they are
    # tested on the real torch: tests/torch_phases).
    env = dict(PYTHONPATH=FAKE_TORCH, FAKE_TORCH_LIB=FAKE_LIB, CUMEMTRACE_PHASES="0")
    env.update(extra)
    return env


def run(tmp_path, scenario, *run_options, **env):
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), *run_options, "--", sys.executable, SCRIPT, scenario]
    p = subprocess.run(cmd, env=base_env(**torch_env(**env)), capture_output=True, text=True,
                       timeout=120)
    return p, snapshots(out)


def refusals(p):
    """The `cumemtrace:` lines other than the run's own (where snapshots go, file written, process
    summary, which command reads it)."""
    own = ("cumemtrace: wrote ", "cumemtrace: writing snapshots to ",
           "cumemtrace: see where the memory went")
    return [ln for ln in p.stderr.splitlines() if ln.startswith("cumemtrace:")
            and not ln.startswith(own) and " (pid " not in ln]


def final(snaps):
    (name,) = [n for n in snaps if ".oom." not in n]  # EXE.PID.oom.json, EXE.PID.oom.N.json
    return snaps[name]


def entries(snap, source="pytorch"):
    tr = snap["device_traces"][0]
    return [(e["action"], e.get("addr"), e["size"]) for e in tr
            if (e.get("source") == "pytorch") == (source == "pytorch")]


def line_of(tag):
    with open(SCRIPT) as f:
        for i, line in enumerate(f, 1):
            if "# LINE " + tag in line:
                return i
    raise AssertionError(tag)


def has_python_frame(frames, line):
    return any(f["filename"].endswith("torch_blocks.py") and f["line"] == line for f in frames)


def blocks(seg):
    return [(b["address"] - seg["address"], b["size"], b["state"], b["requested_size"])
            for b in seg["blocks"]]


def test_default_allocator_blocks_one_to_one(tmp_path):
    p, snaps = run(tmp_path, "basic")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == []
    snap = final(snaps)
    tool = snap["cumemtrace"]
    # The configuration the program started with (none), from the capture's report on.
    (conf,) = tool["pytorch"].pop("alloc_confs")
    assert conf["alloc_conf"] == "" and conf["time_us"] >= tool["start_time_us"]
    assert tool["pytorch"] == {"version": "2.11.0", "backend": "native",
                               "expandable_segments": False, "capture": "blocks", "why": ""}
    got = entries(snap)
    s1, l1 = got[0][1], got[2][1]
    l2 = got[9][1]
    assert got == [
        ("segment_alloc", s1, 2 * MiB), ("alloc", s1, 1000),
        ("segment_alloc", l1, 20 * MiB), ("alloc", l1, 3 * MiB),
        ("alloc", l1 + 3 * MiB, 5 * MiB + 100), ("alloc", l1 + 8 * MiB + 512, 11 * MiB),
        ("free_requested", s1, 1000), ("free_requested", l1, 3 * MiB),
        ("free_completed", l1, 3 * MiB),
        ("segment_alloc", l2, 30 * MiB), ("alloc", l2, 30 * MiB),
        ("free_requested", l2, 30 * MiB), ("free_completed", l2, 30 * MiB),
        ("segment_free", l2, 30 * MiB),
    ]
    # No double counting: the driver allocations behind PyTorch's segments wrote nothing.
    assert entries(snap, "driver") == []
    alloc_a = snap["device_traces"][0][1]
    assert has_python_frame(alloc_a["frames"], line_of("basic-a"))
    # Releases carry no stack by default (PyTorch's context="alloc"): no "frames" key, as in
    # PyTorch's own file for an event without context.
    trace = [e for e in snap["device_traces"][0] if e.get("source") == "pytorch"]
    req_b, done_b = trace[7], trace[8]
    assert (req_b["action"], done_b["action"]) == ("free_requested", "free_completed")
    assert [e["action"] for e in trace if "frames" in e] == ["segment_alloc", "alloc"] * 2 + [
        "alloc", "alloc", "segment_alloc", "alloc"]
    # With --free-stacks (CUMEMTRACE_FREE_STACKS=1), a free request has its own, and its
    # completion carries it, as in PyTorch's context="all": the same frames, down to the Python
    # line of the free (the preload walked none for the completion).
    p, snaps = run(tmp_path / "free-stacks", "basic", "--free-stacks")
    assert p.returncode == 0, p.stderr
    trace = [e for e in final(snaps)["device_traces"][0] if e.get("source") == "pytorch"]
    req_b, done_b = trace[7], trace[8]
    assert (req_b["action"], done_b["action"]) == ("free_requested", "free_completed")
    assert has_python_frame(req_b["frames"], line_of("basic-free-b"))
    assert done_b["frames"] == req_b["frames"]
    assert all("frames" in e for e in trace)
    segs = sorted(snap["segments"], key=lambda g: g["address"])
    assert [g.get("source") for g in segs] == ["pytorch", "pytorch"]
    by_addr = {g["address"]: g for g in segs}
    small, large = by_addr[s1], by_addr[l1]
    assert (small["segment_type"], small["total_size"]) == ("small", 2 * MiB)
    assert blocks(small) == [(0, 1024, "active_pending_free", 1000),
                             (1024, 2 * MiB - 1024, "inactive", 0)]
    assert (large["segment_type"], large["total_size"]) == ("large", 20 * MiB)
    # d (11 MiB) keeps the unsplit remainder of 1 MiB - 512 B, as PyTorch's large pool does.
    assert blocks(large) == [(0, 3 * MiB, "inactive", 0),
                             (3 * MiB, 5 * MiB + 512, "active_allocated", 5 * MiB + 100),
                             (8 * MiB + 512, 12 * MiB - 512, "active_allocated", 11 * MiB)]
    assert large["allocated_size"] == 17 * MiB and large["requested_size"] == 16 * MiB + 100
    assert small["active_size"] == 1024 and small["allocated_size"] == 0
    # Reserved = the driver's live total: every byte counted once.
    assert tool["devices"][0]["live_bytes"] == 22 * MiB == sum(g["total_size"] for g in segs)
    assert tool["devices"][0]["peak_bytes"] == 52 * MiB
    assert "block level" in snap["allocator_settings"]["mode"]


def test_report_counts_segments_and_tensors_apart(tmp_path):
    # The timeline's units are segments (3 made, 1 freed by empty_cache); the program's tensors
    # are its 5 requests, the number the HTML's size histogram and card show too.
    p, snaps = run(tmp_path, "basic")
    assert p.returncode == 0, p.stderr
    (name,) = [n for n in snaps if not n.endswith(".oom.json")]
    path = str(tmp_path / "traces" / name)
    rep = subprocess.run([CT, "report", "--format", "json", path], capture_output=True, text=True,
                         timeout=60)
    (dev,) = json.loads(rep.stdout)["devices"]
    assert (dev["allocations"], dev["frees"], dev["requests"]) == (3, 1, 5)
    text = subprocess.run([CT, "report", path], capture_output=True, text=True, timeout=60).stdout
    assert "  allocations: 3, frees: 1\n  tensor allocations (PyTorch's requests): 5\n" in text
    # What is live at exit is tensors (c and d: 5 MiB + 100 and 11 MiB, in their 5 MiB + 512 and
    # 12 MiB - 512 blocks), not segments: said so in the report, the summary line and the page.
    assert "  live at exit: 17.0 MiB in 2 PyTorch tensors\n" in text
    assert "live at exit 17.0 MiB in 2 PyTorch tensors (device 0 17.0 MiB)" in p.stderr
    assert (dev["live_at_exit_count"], dev["live_at_exit_tensors"],
            dev["live_at_exit_tensor_bytes"], dev["live_at_exit_bytes"]) == (2, 2, 17 * MiB,
                                                                             17 * MiB)
    page = tmp_path / "r.html"
    subprocess.run([CT, "html", "-o", str(page), path], check=True, capture_output=True, timeout=60)
    assert '"requests":5' in page.read_text()
    assert '"count_text":"2 PyTorch tensors"' in page.read_text()


def test_bench_pause_drops_block_events_only_while_paused(tmp_path):
    # bench/gpu/torch_blocks_ab.py's switch: the two requests made while paused (and the 20 MiB
    # segment behind the first) are missing; the ones before and after are there, in one segment,
    # the last one after the 2,048 bytes that the unrecorded request of 2,000 took.
    p, snaps = run(tmp_path, "bench_pause", CUMEMTRACE_PRELOAD=BENCH_PRELOAD)
    assert p.returncode == 0, p.stderr
    got = entries(final(snaps))
    s1 = got[0][1]
    assert got == [("segment_alloc", s1, 2 * MiB), ("alloc", s1, 1000),
                   ("alloc", s1 + 1024 + 2048, 3000)]


def test_debug_meter_counts_every_recorded_event(tmp_path):
    # CUMEMTRACE_DEBUG's recording meter (preload/record/recording_meter.h): one line per class, with
    # exactly the events the hooks recorded: the snapshot's 14 PyTorch block events and the
    # scenario's 4 driver events (its segments' allocations and frees), 18 as the exit summary
    # counts them.
    p, snaps = run(tmp_path, "basic", CUMEMTRACE_DEBUG="1")
    assert p.returncode == 0, p.stderr
    meter = dict((kind, int(n)) for n, kind in re.findall(
        r"^cumemtrace: recording took \d+ ns per event for (\d+) (driver events|PyTorch block "
        r"events): [0-9.]+ ms in all, [0-9.]+% of the [0-9.]+ s since tracing started$",
        p.stderr, re.M))
    assert meter == {"driver events": 4, "PyTorch block events": 14}, p.stderr
    assert len(entries(final(snaps))) == 14
    # And where a block event's time went: every phase, with the scenario's Python frames. Only
    # the 8 allocations (3 segments, 5 blocks) took a stack: releases take none by default.
    phases = re.search(r"^cumemtrace: of which, per PyTorch block event with a stack \(8 of 14\): "
                       r"native stack \d+ ns \([0-9.]+ frames, 0\.00 an autograd node's; walk: "
                       r"[0-9.]+ frames replayed, [0-9.]+ "
                       r"ruled by the memo\), module notes \d+ ns, Python stack "
                       r"\d+ ns \(([0-9.]+) frames, ([0-9.]+) from the thread's memo, ([0-9.]+) of them "
                       r"without their code object\), "
                       r"ring \d+ ns$", p.stderr, re.M)
    assert phases and float(phases.group(1)) > 0, p.stderr
    # None from the thread's memo: the first 64 frames a process reads are checked against the
    # interpreter the long way (python_stack.cpp: probation), and this run reads 24.
    assert float(phases.group(2)) == 0.0 and float(phases.group(3)) == 0.0, p.stderr
    assert ": 18 events, 0 dropped;" in p.stderr
    # With free stacks, the 4 releases but the 2 completions (which take their requests').
    p, _ = run(tmp_path / "free", "basic", CUMEMTRACE_DEBUG="1", CUMEMTRACE_FREE_STACKS="1")
    assert p.returncode == 0, p.stderr
    assert "PyTorch block event with a stack (12 of 14)" in p.stderr, p.stderr
    # Without CUMEMTRACE_DEBUG nothing is timed and nothing printed.
    p, _ = run(tmp_path / "quiet", "basic")
    assert p.returncode == 0 and "recording took" not in p.stderr, p.stderr


def test_block_stacks_are_python_frames_unless_native_asked_for(tmp_path):
    # By default a block event on a thread with Python frames carries those frames alone, as
    # PyTorch's stacks="python" does: the scenario's three Python frames, innermost first, and no
    # frame of the caching allocator, ctypes or the interpreter below them.
    want = [("__init__.py", "alloc"), ("torch_blocks.py", "basic"), ("torch_blocks.py", "<module>")]

    def alloc_a_frames(snap):
        e = [e for e in snap["device_traces"][0] if e.get("source") == "pytorch"][1]
        assert (e["action"], e["size"]) == ("alloc", 1000)
        return e["frames"]

    def py_frames(frames):
        return [(os.path.basename(f["filename"]), f["name"]) for f in frames
                if f["filename"].endswith(".py")]

    p, snaps = run(tmp_path, "basic")
    assert p.returncode == 0, p.stderr
    frames = alloc_a_frames(final(snaps))
    assert [(os.path.basename(f["filename"]), f["name"]) for f in frames] == want
    assert frames[1]["line"] == line_of("basic-a")
    # --torch-native-stacks (CUMEMTRACE_TORCH_NATIVE_STACKS=1): the native frames from the
    # allocator's trace callback up to the interpreter come first, then the same Python frames.
    for where, opts, env in (("cli", ["--torch-native-stacks"], {}),
                             ("env", [], {"CUMEMTRACE_TORCH_NATIVE_STACKS": "1"})):
        p, snaps = run(tmp_path / where, "basic", *opts, **env)
        assert p.returncode == 0, p.stderr
        frames = alloc_a_frames(final(snaps))
        first_py = next(i for i, f in enumerate(frames) if f["filename"].endswith(".py"))
        native = frames[:first_py]
        assert any(f["filename"].endswith("fake_c10_cuda.cpp") for f in native), frames
        assert any(f["name"] == "_PyObject_MakeTpCall" for f in native), frames
        assert py_frames(frames) == want
    # A value other than 0 or 1 turns tracing off with one line, as for every switch.
    p, snaps = run(tmp_path / "bad", "basic", CUMEMTRACE_TORCH_NATIVE_STACKS="yes")
    assert p.returncode == 0 and snaps == {}, p.stderr
    assert "invalid CUMEMTRACE_TORCH_NATIVE_STACKS (expected 0 or 1)" in p.stderr, p.stderr


APPLY = "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, " \
    "std::allocator<at::Tensor> >&&)"
EVALUATE = "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, " \
    "torch::autograd::Node*, torch::autograd::InputBuffer&, " \
    "std::shared_ptr<torch::autograd::ReadyQueue> const&)"


def engine_stacks(snap):
    """The frames of the allocations made on the engine thread (two by a node, the first of them
    the thread's first event, then one outside a node): the first two must be the same."""
    tr = snap["device_traces"][0]
    allocs = [e for e in tr if e["action"] == "alloc" and
              not any(f["filename"].endswith(".py") for f in e["frames"])]
    assert len(allocs) == 3, tr
    first, second, outside = [[f["name"] for f in e["frames"]] for e in allocs]
    assert second == first, (first, second)
    return [first, outside], allocs


def test_autograds_engine_thread_names_the_node_it_evaluates(tmp_path):
    # An allocation on a thread that runs no Python (autograd's engine thread in PyTorch) has no
    # Python frames to stand for its site. Where it is made by an autograd node, the node stands
    # for them: one frame, the node's apply() (read through get_current_node() and the slot the
    # Python side found in a generated node's vtable), as Python frames stand for a Python
    # thread's, instead of the walk through the op: from the thread's first event on, whose walk
    # (ending in evaluate_function) marks it as an engine thread. Outside a node the thread walks
    # as any other.
    # CUMEMTRACE_DEBUG meters those events on their own line.
    p, snaps = run(tmp_path, "engine_thread", CUMEMTRACE_DEBUG="1")
    assert p.returncode == 0, p.stderr
    snap = final(snaps)
    s = entries(snap)[0][1]
    assert entries(snap) == [
        ("segment_alloc", s, 2 * MiB), ("alloc", s, 1000), ("alloc", s + 1024, 2000),
        ("alloc", s + 3072, 2000), ("alloc", s + 5120, 2000),
        ("free_requested", s + 5120, 2000), ("free_completed", s + 5120, 2000),
        ("free_requested", s + 3072, 2000), ("free_completed", s + 3072, 2000),
        ("free_requested", s + 1024, 2000), ("free_completed", s + 1024, 2000),
        ("free_requested", s, 1000), ("free_completed", s, 1000)]
    tr = [e for e in snap["device_traces"][0] if e.get("source") == "pytorch"]
    on_python = tr[1]["frames"]
    assert [f["line"] for f in on_python if f["filename"].endswith("torch_blocks.py")][0] == \
        line_of("engine-thread-python")
    assert all(f["filename"].endswith(".py") for f in on_python), on_python
    (by_node, outside), allocs = engine_stacks(snap)
    assert by_node == [APPLY], by_node
    assert os.path.basename(allocs[0]["frames"][0]["filename"]) == "fake_torch_cpu.cpp"
    # The thread's own allocation: the allocator's trace call, its malloc, fake_torch_malloc
    # (unless the compiler made its call a tail call, as it does without the address sanitizer),
    # thread_main, and on to the thread's start in libc.
    native = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::"
    assert outside[0].startswith(native + "trace("), outside
    assert outside[1] == native + "malloc(unsigned long)", outside
    assert outside[2] in ("fake_torch_malloc", "torch::autograd::Engine::thread_main("
                          "std::shared_ptr<torch::autograd::GraphTask>&)"), outside
    assert outside[-1] in ("clone", "__clone3"), outside
    assert not any(n.startswith("torch::autograd::Engine::evaluate_function(") for n in outside)
    meter = dict((kind, (int(n))) for n, kind in re.findall(
        r"^cumemtrace: recording took \d+ ns per event for (\d+) (PyTorch block events(?: without "
        r"Python frames)?): ", p.stderr, re.M))
    assert meter == {"PyTorch block events": 10, "PyTorch block events without Python frames": 3}
    assert re.search(r"per PyTorch block event without Python frames with a stack \(3 of 3\): "
                     r"native stack \d+ ns \([0-9.]+ frames, 0\.67 an autograd node's;",
                     p.stderr), p.stderr


def test_autograds_engine_thread_names_no_node_after_a_walk_past_the_allocator(tmp_path):
    # Under backend:cudaMallocAsync a node's pool allocation that PyTorch's allocator did not make
    # (a C++ extension's op calling cudaMallocAsync itself) walks past where PyTorch's tensors
    # stop: its own frames say who asked, and no node's frame is put after them. The thread's
    # first such walk ends at evaluate_function (the walk that marks the thread), later ones at
    # the thread's start. Whether the pool is sampled on that thread first (the process's first
    # pool allocation is the node's: "sampled") changes nothing: a sample is not the program's
    # event and takes no walk, so it cannot be the walk that marks the thread (it was, when a
    # sample fell due on the node's first allocation: a run under load).
    for scenario in ("engine_thread_from_driver", "engine_thread_from_driver_sampled"):
        p, snaps = run(tmp_path / scenario, scenario,
                       PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
        assert p.returncode == 0 and refusals(p) == [], p.stderr
        snap = final(snaps)
        tr = snap["device_traces"][0]
        allocs = [[f["name"] for f in e["frames"]] for e in tr if e["action"] == "alloc" and
                  not any(f["filename"].endswith(".py") for f in e["frames"])]
        assert len(allocs) == 3, allocs
        first, second = allocs[0], allocs[1]
        assert first[0].startswith("torch::autograd::generated::driver_pool_malloc("), first
        assert first[-2:] == [APPLY, EVALUATE], first
        assert second[:len(first)] == first and second[-1] in ("clone", "__clone3"), second
        assert second.count(APPLY) == 1, second
        if scenario.endswith("_sampled"):  # the first sample: at the node's first allocation
            m = snap["cumemtrace"]["pool_memory"][0]
            assert (m["device"], m["reserved_bytes"], m["used_bytes"]) == (0, 2 * MiB, 2000), m


def test_autograds_engine_thread_walks_up_to_evaluate_function_without_nodes(tmp_path):
    # Without the node (a torch with no get_current_node(), or CUMEMTRACE_TORCH_NATIVE_STACKS=1),
    # a node's allocation keeps its native walk, which ends at the engine's
    # Engine::evaluate_function (the fake libtorch_cpu.so's, under PyTorch's mangled name): the
    # frames above it, thread_main and the thread's start, are the same for every such event.
    for where, scenario, env in (("nodes", "engine_thread_unknown_nodes", {}),
                                 ("native", "engine_thread", {"CUMEMTRACE_TORCH_NATIVE_STACKS": "1"})):
        p, snaps = run(tmp_path / where, scenario, **env)
        assert p.returncode == 0 and refusals(p) == [], p.stderr
        (by_node, outside), _ = engine_stacks(final(snaps))
        native = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::"
        assert by_node[0].startswith(native + "trace("), by_node
        assert by_node[1] == native + "malloc(unsigned long)", by_node
        assert by_node[2:-2] in ([], ["fake_torch_malloc"]), by_node
        assert by_node[-2:] == [APPLY, EVALUATE], by_node
        assert outside[-1] in ("clone", "__clone3"), outside
    # A torch without that evaluate_function keeps the whole walk, up to the thread's start in
    # libc, and nothing else changes: the thread is never taken for an engine thread, so its node
    # is never read.
    p, snaps = run(tmp_path / "whole", "engine_thread_unknown_torch")
    assert p.returncode == 0 and refusals(p) == [], p.stderr
    (whole, _), _ = engine_stacks(final(snaps))
    assert whole[:len(by_node)] == by_node, whole
    assert any(n.startswith("torch::autograd::Engine::thread_main(") for n in whole), whole
    assert whole[-1] in ("clone", "__clone3"), whole


def test_autograds_engine_thread_pool_tensor_names_the_node(tmp_path):
    # Under backend:cudaMallocAsync a node's tensor is one pool allocation: its walk ends at
    # PyTorch's allocator, as a Python thread's does, and the node follows.
    env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    p, snaps = run(tmp_path, "engine_thread", **env)
    assert p.returncode == 0 and refusals(p) == [], p.stderr
    (by_node, outside), _ = engine_stacks(final(snaps))
    malloc = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(unsigned long)"
    assert by_node == [malloc, APPLY], by_node
    assert outside[0] == malloc and outside[-1] in ("clone", "__clone3"), outside
    p, snaps = run(tmp_path / "native", "engine_thread", CUMEMTRACE_TORCH_NATIVE_STACKS="1", **env)
    assert p.returncode == 0 and refusals(p) == [], p.stderr
    (whole, _), _ = engine_stacks(final(snaps))
    assert whole[0] == malloc and whole[-2] == APPLY, whole
    assert whole[-1].startswith("torch::autograd::Engine::evaluate_function("), whole


def test_expandable_segments_blocks(tmp_path):
    p, snaps = run(tmp_path, "expandable", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    assert p.returncode == 0, p.stderr
    snap = final(snaps)
    assert snap["cumemtrace"]["pytorch"]["expandable_segments"] is True
    assert snap["cumemtrace"]["pytorch"]["capture"] == "blocks"
    got = entries(snap)
    s, l = got[0][1], got[2][1]
    assert got == [
        ("segment_map", s, 2 * MiB), ("alloc", s, 1000),
        ("segment_map", l, 20 * MiB), ("alloc", l, 3 * MiB),
        ("segment_map", l + 20 * MiB, 20 * MiB), ("alloc", l + 3 * MiB, 25 * MiB),
        ("free_requested", l + 3 * MiB, 25 * MiB), ("free_completed", l + 3 * MiB, 25 * MiB),
        ("segment_unmap", l + 20 * MiB, 20 * MiB),
    ]
    assert entries(snap, "driver") == []  # the driver's cuMemMap/cuMemUnmap entries: adopted
    segs = {g["address"]: g for g in snap["segments"]}
    assert set(segs) == {s, l}
    assert segs[s]["is_expandable"] and segs[s]["segment_type"] == "small"
    assert blocks(segs[s]) == [(0, 1024, "active_allocated", 1000),
                               (1024, 2 * MiB - 1024, "inactive", 0)]
    assert segs[l]["is_expandable"] and segs[l]["segment_type"] == "large"
    assert blocks(segs[l]) == [(0, 3 * MiB, "active_allocated", 3 * MiB),
                               (3 * MiB, 17 * MiB, "inactive", 0)]
    assert snap["cumemtrace"]["devices"][0]["live_bytes"] == 22 * MiB


def test_expandable_segments_split_every_remainder(tmp_path):
    """Under expandable segments PyTorch's large pool splits off any remainder (>= 512 B), where the
    default allocator keeps one of at most 1 MiB in the block: c's 1 MiB - 512 B tail is its own
    inactive block, next to c's pending free (the layout torch 2.11 showed on the GPU)."""
    p, snaps = run(tmp_path, "expandable_split", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    assert p.returncode == 0, p.stderr
    snap = final(snaps)
    got = entries(snap)
    l = got[0][1]
    assert got == [
        ("segment_map", l, 20 * MiB), ("alloc", l, 3 * MiB),
        ("alloc", l + 3 * MiB, 5 * MiB + 100), ("alloc", l + 8 * MiB + 512, 11 * MiB),
        ("free_requested", l + 3 * MiB, 5 * MiB + 100),
        ("free_completed", l + 3 * MiB, 5 * MiB + 100),
        ("free_requested", l + 8 * MiB + 512, 11 * MiB),
    ]
    (seg,) = snap["segments"]
    assert (seg["address"], seg["total_size"], seg["is_expandable"]) == (l, 20 * MiB, True)
    assert blocks(seg) == [(0, 3 * MiB, "active_allocated", 3 * MiB),
                           (3 * MiB, 5 * MiB + 512, "inactive", 0),
                           (8 * MiB + 512, 11 * MiB, "active_pending_free", 11 * MiB),
                           (19 * MiB + 512, MiB - 512, "inactive", 0)]
    assert (seg["allocated_size"], seg["active_size"]) == (3 * MiB, 14 * MiB)


def test_allocator_oom_writes_oom_snapshot_with_python_line(tmp_path):
    p, snaps = run(tmp_path, "oom")
    assert p.returncode == 0, p.stderr
    assert "caught: CUDA out of memory" in p.stdout
    (oom_name,) = [n for n in snaps if n.endswith(".oom.json")]
    oom = snaps[oom_name]
    assert oom["cumemtrace"]["reason"] == "oom"
    (e,) = [e for e in oom["device_traces"][0] if e["action"] == "oom"]
    assert e["source"] == "pytorch" and e["size"] == 30 * MiB and e["device_free"] > 0
    assert has_python_frame(e["frames"], line_of("oom-request"))
    (seg,) = oom["segments"]
    assert blocks(seg) == [(0, 3 * MiB, "active_allocated", 3 * MiB),
                           (3 * MiB, 17 * MiB, "inactive", 0)]
    # The verdict (pytorch/oom_verdict.h): the fake's limit (22 MiB) refused although the device
    # had room, a budget below the device; 17 MiB free in the cache cannot hold 30 MiB.
    (line,) = [l for l in p.stderr.splitlines() if "out of memory on" in l]
    assert line.endswith(f"{oom_name}: out of memory on device 0: exhaustion: 30.0 MiB requested, "
                         "17.0 MiB free even compacted (cached free 17.0 MiB + no headroom under a "
                         "budget below the device), largest free block 17.0 MiB"), line
    r = subprocess.run([CT, "report", str(tmp_path / "traces" / oom_name), "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (o,) = json.loads(r.stdout)["ooms"]
    assert (o["verdict"], o["source"], o["requested_bytes"], o["cached_free_bytes"],
            o["largest_free_bytes"], o["budget_bytes"], o["budget_below_device"],
            o["unreleasable_free_bytes"]) == \
        ("exhaustion", "pytorch", 30 * MiB, 17 * MiB, 17 * MiB, 20 * MiB, True, 17 * MiB)


def test_device_full_oom_is_pytorchs_one_oom(tmp_path):
    # The driver refuses PyTorch's 30 MiB segment twice (the attempt, and the retry after its
    # cache was freed): those are PyTorch's own attempts, settled by its OOM, which is the one OOM
    # file, the one line and the one oom entry, as in PyTorch's own history.
    p, snaps = run(tmp_path, "device_full", FAKE_CUDA_MEM_LIMIT=str(40 * MiB))
    assert p.returncode == 0, p.stderr
    assert "caught: CUDA out of memory" in p.stdout
    (oom_name,) = [n for n in snaps if ".oom." in n]
    (line,) = [l for l in p.stderr.splitlines() if "out of memory on" in l]
    # 3 MiB live in a 20 MiB segment, 20 MiB left on the device: 37 MiB free, none of it whole.
    assert line.endswith(f"{oom_name}: out of memory on device 0: fragmentation: 30.0 MiB "
                         "requested, 37.0 MiB free even compacted (cached free 17.0 MiB + device "
                         "free 20.0 MiB), largest free block 17.0 MiB"), line
    for snap in (snaps[oom_name], final(snaps)):
        (e,) = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
        assert (e["source"], e["size"]) == ("pytorch", 30 * MiB)
        assert has_python_frame(e["frames"], line_of("oom-request"))
    r = subprocess.run([CT, "report", str(tmp_path / "traces" / oom_name), "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    (o,) = json.loads(r.stdout)["ooms"]
    assert (o["verdict"], o["source"], o["requested_bytes"]) == \
        ("fragmentation", "pytorch", 30 * MiB)


def test_a_retry_that_succeeds_is_no_oom(tmp_path):
    p, snaps = run(tmp_path, "retry_succeeds", FAKE_CUDA_MEM_LIMIT=str(40 * MiB))
    assert p.returncode == 0 and "allocated" in p.stdout, p.stderr
    assert [n for n in snaps if ".oom." in n] == []
    assert not [l for l in p.stderr.splitlines() if "out of memory" in l], p.stderr
    snap = final(snaps)
    assert [e for e in snap["device_traces"][0] if e["action"] == "oom"] == []
    # The cache's segment went back to the driver and the retry's 30 MiB one came.
    assert [(a, s) for a, _, s in entries(snap) if a.startswith("segment")] == \
        [("segment_alloc", 20 * MiB), ("segment_free", 20 * MiB), ("segment_alloc", 30 * MiB)]


def test_driver_oom_without_a_stack_is_the_snapshots(tmp_path):
    # With stacks off nothing tells PyTorch's attempt from another library's: the driver's
    # refusal asks for its OOM snapshot at once, as in a program without PyTorch.
    p, snaps = run(tmp_path, "device_full", "--stack-depth", "0",
                   FAKE_CUDA_MEM_LIMIT=str(40 * MiB))
    assert p.returncode == 0, p.stderr
    ooms = sorted(n for n in snaps if ".oom." in n)
    assert len(ooms) == 3, (ooms, p.stderr)
    # The driver's entries carry no source (only PyTorch's do: pytorch).
    assert [e.get("source") for e in final(snaps)["device_traces"][0]
            if e["action"] == "oom"] == [None, None, "pytorch"]


def test_sigkill_keeps_block_events(tmp_path):
    p, snaps = run(tmp_path, "kill")
    assert p.returncode == 128 + 9
    snap = final(snaps)
    assert snap["cumemtrace"]["ended"]["how"] == "signal"
    assert [a for a, _, _ in entries(snap)] == ["segment_alloc", "alloc", "segment_alloc", "alloc"]
    assert len(snap["segments"]) == 2


def test_unsupported_version_degrades_with_one_line(tmp_path):
    p, snaps = run(tmp_path, "basic", FAKE_TORCH_VERSION="2.3.1")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == [
        "cumemtrace: PyTorch blocks not captured (torch 2.3.1 has no TraceEntry layout in this "
        "cumemtrace (it knows 2.4.0 to 2.15.0); it needs that wheel's row: "
        "scripts/torch_layouts.py with the release added, then a rebuild); tracing continues at "
        "driver level"], p.stderr
    snap = final(snaps)
    info = snap["cumemtrace"]["pytorch"]
    assert info["capture"] == "driver" and info["version"] == "2.3.1"
    assert entries(snap) == []
    # Today's driver view: 3 segments allocated, one freed by empty_cache.
    assert [a for a, _, _ in entries(snap, "driver")].count("segment_alloc") == 3
    assert all("source" not in g for g in snap["segments"]) and len(snap["segments"]) == 2


def test_unlisted_patch_release_uses_its_minors_row_after_the_header_check(tmp_path):
    """2.11.9 is not in the table: the row of 2.11's newest listed patch is used, checked against
    the installed header (the fake's is 2.11's), and blocks are captured."""
    p, snaps = run(tmp_path, "basic", FAKE_TORCH_VERSION="2.11.9")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == []
    snap = final(snaps)
    assert snap["cumemtrace"]["pytorch"]["capture"] == "blocks"
    got = entries(snap)
    assert len(got) == 14 and [a for a, _, _ in got].count("alloc") == 5


def test_listed_release_whose_header_disagrees_is_refused(tmp_path):
    """2.5.0's row reads TraceEntry from c10/cuda/CUDACachingAllocator.h; the installed header
    (the fake's, 2.11's) does not declare it there: one line, the driver view."""
    p, snaps = run(tmp_path, "basic", FAKE_TORCH_VERSION="2.5.0")
    assert p.returncode == 0, p.stderr
    lines = refusals(p)
    assert len(lines) == 1, p.stderr
    assert "no TraceEntry declaration under " in lines[0]
    assert "(looked in c10/cuda/CUDACachingAllocator.h)" in lines[0]
    snap = final(snaps)
    assert snap["cumemtrace"]["pytorch"]["capture"] == "driver"
    assert entries(snap) == []


def test_trace_entry_layout_differs_from_header_degrades_with_one_line(tmp_path):
    """A torch whose own header (torch/include) declares TraceEntry with another member order than
    the layout the preload reads: one line naming the header and the member, no attach, the
    driver view as before."""
    fake = tmp_path / "torch_copy"
    shutil.copytree(FAKE_TORCH, fake)
    header = fake / "torch" / "include" / "c10" / "core" / "CachingDeviceAllocator.h"
    text = header.read_text()
    assert "  void* stream_{};\n  size_t size_;\n" in text
    header.write_text(text.replace("  void* stream_{};\n  size_t size_;\n",
                                   "  size_t size_;\n  void* stream_{};\n"))
    p, snaps = run(tmp_path, "basic", PYTHONPATH=str(fake))
    assert p.returncode == 0, p.stderr
    lines = refusals(p)
    assert len(lines) == 1, p.stderr
    assert "CachingDeviceAllocator.h is not the layout cumemtrace reads: member 5 is size_t size_, "\
        "expected void* stream_" in lines[0]
    snap = final(snaps)
    info = snap["cumemtrace"]["pytorch"]
    assert (info["capture"], info["version"]) == ("driver", "2.11.0")
    assert entries(snap) == []
    assert [a for a, _, _ in entries(snap, "driver")].count("segment_alloc") == 3
    assert all("source" not in g for g in snap["segments"]) and len(snap["segments"]) == 2


def test_trace_entry_header_missing_degrades_with_one_line(tmp_path):
    fake = tmp_path / "torch_copy"
    shutil.copytree(FAKE_TORCH, fake)
    shutil.rmtree(fake / "torch" / "include")
    p, snaps = run(tmp_path, "basic", PYTHONPATH=str(fake))
    assert p.returncode == 0, p.stderr
    lines = refusals(p)
    assert len(lines) == 1 and "no TraceEntry declaration under" in lines[0], p.stderr
    assert final(snaps)["cumemtrace"]["pytorch"]["capture"] == "driver"


def test_cuda_malloc_async_backend_is_driver_capture(tmp_path):
    p, snaps = run(tmp_path, "basic", PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == []
    info = final(snaps)["cumemtrace"]["pytorch"]
    assert (info["backend"], info["capture"]) == ("cudaMallocAsync", "driver")


def test_cuda_malloc_async_backend_reserved_allocated_cached(tmp_path):
    """backend:cudaMallocAsync: allocated = the live cuMemAllocAsync allocations, reserved = the
    pool's reserved bytes as the driver reports them (sampled in the target before the first pool
    allocation's record, then at most every 10 ms, and at exit), cached = the difference."""
    p, snaps = run(tmp_path, "async_backend", PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    assert p.returncode == 0, p.stderr
    assert refusals(p) == []
    assert "device 0 at exit: reserved 4.00 MiB = allocated 3.00 MiB + cached 1.00 MiB free" in p.stderr
    (name,) = [n for n in snaps if not n.endswith(".oom.json")]
    snap = snaps[name]
    tool = snap["cumemtrace"]
    assert (tool["pytorch"]["backend"], tool["pytorch"]["capture"]) == ("cudaMallocAsync", "driver")
    pools = [(m["device"], m["reserved_bytes"], m["used_bytes"]) for m in tool["pool_memory"]]
    assert pools == [(0, 2 * MiB, 1000), (0, 34 * MiB, 33 * MiB), (0, 4 * MiB, 3 * MiB)]
    assert len({m["pool"] for m in tool["pool_memory"]}) == 1
    allocs = [(e["action"], e["size"]) for e in snap["device_traces"][0]
              if e.get("async_pool")]
    assert allocs == [("segment_alloc", 1000), ("alloc", 1000), ("segment_alloc", 3 * MiB),
                      ("alloc", 3 * MiB), ("segment_alloc", 30 * MiB), ("alloc", 30 * MiB)]
    rep = subprocess.run([CT, "report", "--format", "json", str(tmp_path / "traces" / name)],
                         capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    (dev,) = json.loads(rep.stdout)["devices"]
    assert (dev["reserved_peak_bytes"], dev["reserved_end_bytes"]) == (34 * MiB, 4 * MiB)
    assert dev["allocated_peak_bytes"] == 33 * MiB
    layers = {l["moment"]: l for l in dev["layers"]}
    assert layers["peak"]["pytorch"]["reserved_bytes"] == 34 * MiB
    assert layers["peak"]["pytorch"]["allocated_bytes"] == 33 * MiB
    assert layers["peak"]["pytorch"]["cached_free_bytes"] == MiB
    assert layers["exit"]["pytorch"]["reserved_bytes"] == 4 * MiB
    assert layers["exit"]["pytorch"]["allocated_bytes"] == 3 * MiB
    assert layers["exit"]["pytorch"]["cached_free_bytes"] == MiB
    assert layers["exit"]["pytorch"]["largest_free_block_bytes"] is None
    # Tracked memory counts the pool's reservation, not its allocations a second time.
    assert (layers["exit"]["tracked_bytes"], layers["exit"]["other_libraries"]["bytes"]) == (
        4 * MiB, 0)


def test_cuda_malloc_async_backend_tensor_stacks_end_at_the_allocator(tmp_path):
    # A tensor of backend:cudaMallocAsync is one pool allocation: its native walk ends at the
    # first frame of PyTorch's allocator (libc10_cuda.so, named by cumemtrace_torch.py), then its
    # Python frames follow, as a block event under the native allocator has its Python frames
    # alone. Here the fake's malloc calls the driver itself; in PyTorch cudart's frames come
    # first. CUMEMTRACE_TORCH_NATIVE_STACKS=1 keeps the whole walk.
    def alloc_stacks(env):
        p, snaps = run(tmp_path / env.get("CUMEMTRACE_TORCH_NATIVE_STACKS", "0"), "async_backend",
                       PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync", **env)
        assert p.returncode == 0 and refusals(p) == [], p.stderr
        return [e["frames"] for e in final(snaps)["device_traces"][0]
                if e.get("async_pool") and e["action"] == "alloc"]

    malloc = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(unsigned long)"
    cut = alloc_stacks({})
    assert len(cut) == 3
    for frames in cut:
        assert [f["name"] for f in frames if not f["filename"].endswith(".py")] == [malloc], frames
        assert [(os.path.basename(f["filename"]), f["name"]) for f in frames[1:3]] == [
            ("__init__.py", "alloc"), ("torch_blocks.py", "async_backend")], frames
    whole = alloc_stacks({"CUMEMTRACE_TORCH_NATIVE_STACKS": "1"})
    for frames, short in zip(whole, cut):
        native = [f["name"] for f in frames if not f["filename"].endswith(".py")]
        assert native[0] == malloc and "ffi_call" in native, native
        assert [f for f in frames if f["filename"].endswith(".py")][:2] == short[1:3]


def test_plain_preload_with_documented_pythonpath(tmp_path):
    env = torch_env()
    env["PYTHONPATH"] = OUR_PY + ":" + FAKE_TORCH
    p, files = run_preloaded(tmp_path, [sys.executable, SCRIPT, "basic"], **env)
    assert p.returncode == 0, p.stderr
    (snap,) = files.values()
    assert snap["cumemtrace"]["pytorch"]["capture"] == "blocks"
    assert len(entries(snap)) == 14 and entries(snap, "driver") == []


def test_existing_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    script = tmp_path / "probe.py"
    script.write_text("import os, torch\nprint(os.environ.get('OTHER_SITE'))\n"
                      "torch.cuda.alloc(1000)\n")
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), "--", sys.executable, str(script)]
    env = base_env(**torch_env())
    env["PYTHONPATH"] = str(other) + ":" + FAKE_TORCH
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ran"
    snap = final(snapshots(out))
    assert [a for a, _, _ in entries(snap)] == ["segment_alloc", "alloc"]


def whatif(snapshot_path, *args):
    return subprocess.run([CT, "whatif", str(snapshot_path), *args], capture_output=True,
                          text=True, timeout=60)


def test_whatif_replays_the_fake_allocator_exactly(tmp_path):
    """`whatif` on the collector's snapshot: the recorded configuration reproduces the 4 segment
    events (2, 20 and 30 MiB made, the 30 MiB freed by empty_cache); expandable segments map
    2 MiB, 20 MiB and, for 30 MiB on top of the 1 MiB - 512 B free at the end of the first page,
    two more pages, and empty_cache unmaps those two."""
    p, snaps = run(tmp_path, "basic")
    assert p.returncode == 0, p.stderr
    (name,) = [n for n in snaps if not n.endswith(".oom.json")]
    path = tmp_path / "traces" / name
    w = whatif(path, "--alloc-conf", "expandable_segments:True", "--format", "json")
    assert w.returncode == 0, w.stderr
    rec, exp = json.loads(w.stdout)
    assert (rec["recorded"], rec["alloc_conf"], exp["alloc_conf"]) == (
        True, "", "expandable_segments:True")
    assert rec["reserved_peak_bytes"] == 52 * MiB
    assert rec["allocated_peak_bytes"] == 47 * MiB + 1024  # 11 MiB kept its 1 MiB - 512 B tail
    assert rec["fragmentation_bytes"] == 5 * MiB - 1024
    assert rec["segment_events"] == 4 and rec["oom"] is False
    assert rec["first_failing_request"] is None and rec["budget_bytes"] is None
    assert exp["reserved_peak_bytes"] == 62 * MiB
    assert exp["allocated_peak_bytes"] == 46 * MiB + 1536
    assert exp["segment_events"] == 4 and exp["oom"] is False
    text = whatif(path, "--alloc-conf", "expandable_segments:True")
    assert text.returncode == 0, text.stderr
    assert "1 empty_cache() calls found; the recorded configuration reproduced all 4 segment " \
           "events" in text.stdout
    bad = whatif(path, "--alloc-conf", "max_split_size_mb:1")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == ("cumemtrace whatif: --alloc-conf: allocator configuration "
                          "'max_split_size_mb:1': max_split_size_mb too small, must be >= 20\n")


def test_whatif_recorded_expandable_segments(tmp_path):
    p, snaps = run(tmp_path, "expandable", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    assert p.returncode == 0, p.stderr
    (name,) = [n for n in snaps if not n.endswith(".oom.json")]
    w = whatif(tmp_path / "traces" / name, "--format", "json")
    assert w.returncode == 0, w.stderr
    (rec,) = json.loads(w.stdout)
    # Recorded under expandable segments (the tool section says so): map 2, 20, 20 MiB, unmap 20.
    assert rec["recorded"] and rec["segment_events"] == 4
    assert rec["reserved_peak_bytes"] == 42 * MiB


def test_whatif_budget_from_a_fraction_oom(tmp_path):
    """The fake's 22 MiB limit fails 30 MiB while the device has room: a memory fraction. The
    budget whatif takes is the largest that fails that request (20 MiB reserved + the 30 MiB
    segment - 1 B); under it expandable segments fail the same request (PyTorch's fraction check
    counts the whole 30 MiB)."""
    p, snaps = run(tmp_path, "oom")
    assert p.returncode == 0, p.stderr
    (name,) = [n for n in snaps if n.endswith(".oom.json")]
    w = whatif(tmp_path / "traces" / name, "--alloc-conf", "expandable_segments:True",
               "--format", "json")
    assert w.returncode == 0, w.stderr
    rec, exp = json.loads(w.stdout)
    for r in (rec, exp):
        assert r["budget_bytes"] == 50 * MiB - 1 and r["oom"] is True
        assert r["reserved_peak_bytes"] == 20 * MiB
        f = r["first_failing_request"]
        assert (f["requested_bytes"], f["recorded_oom"]) == (30 * MiB, True)


def test_recorded_memory_fraction_is_the_verdicts_and_whatifs_budget(tmp_path):
    """set_per_process_memory_fraction(22/1024) on the fake's 1 GiB device: the capture records
    the fraction and what it allows (22 MiB), and the configuration the program started with; the
    OOM verdict states the budget as the user set it, with the 2 MiB left under it, and whatif
    replays under that budget instead of inferring one."""
    p, snaps = run(tmp_path, "fraction_oom", PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:512")
    assert p.returncode == 0, p.stderr
    (oom_name,) = [n for n in snaps if n.endswith(".oom.json")]
    py = snaps[oom_name]["cumemtrace"]["pytorch"]
    assert [c["alloc_conf"] for c in py["alloc_confs"]] == ["max_split_size_mb:512"]
    (f,) = py["memory_fractions"]
    assert (f["device"], f["fraction"], f["allowed_bytes"], f["device_total"]) == \
        (0, "0.021484375", 22 * MiB, 1 << 30)
    (line,) = [l for l in p.stderr.splitlines() if "out of memory on" in l]
    assert line.endswith("exhaustion: 30.0 MiB requested, 19.0 MiB free even compacted (cached "
                         "free 17.0 MiB + headroom 2.00 MiB under the 22.0 MiB allowed by the "
                         "memory fraction 0.021484375 of 1.00 GiB), largest free block 17.0 MiB"), line
    w = whatif(tmp_path / "traces" / oom_name, "--format", "json")
    assert w.returncode == 0, w.stderr
    (rec,) = json.loads(w.stdout)
    assert (rec["budget_bytes"], rec["budget_fraction"], rec["oom"]) == (22 * MiB, True, True)
    assert rec["alloc_conf"] == "max_split_size_mb:512"


def test_settings_changed_mid_run_are_recorded_and_named(tmp_path):
    p, snaps = run(tmp_path, "settings_change")
    assert p.returncode == 0, p.stderr
    (name,) = snaps
    py = snaps[name]["cumemtrace"]["pytorch"]
    assert [c["alloc_conf"] for c in py["alloc_confs"]] == ["", "expandable_segments:False"]
    w = whatif(tmp_path / "traces" / name)
    assert w.returncode == 2
    assert "the allocator's settings changed while the program ran (to " \
           "'expandable_segments:False' at " in w.stderr, w.stderr


def test_a_private_pool_is_recorded_and_the_replay_names_it(tmp_path):
    """A CUDA graph's capture (CUDAGraph.capture_begin, wrapped by the capture): PyTorch serves it
    from a private pool the replay does not model, so whatif refuses naming that reason, and the
    views keep requested bytes (nothing is labelled)."""
    p, snaps = run(tmp_path, "graph_capture")
    assert p.returncode == 0, p.stderr
    (name,) = snaps
    (pool,) = snaps[name]["cumemtrace"]["pytorch"]["private_pools"]
    assert pool["kind"] == "cuda_graph"
    w = whatif(tmp_path / "traces" / name)
    assert w.returncode == 2
    assert "cannot replay: the run allocated from a private pool (a CUDA graph's capture at " \
        in w.stderr, w.stderr


def report_json(path, *options):
    p = subprocess.run([CT, "report", "--format", "json", *options, path], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_backward_allocations_are_the_backward_lines(tmp_path):
    # Autograd's engine thread runs no Python: while a backward runs, the thread that called it
    # lends its Python frames (cumemtrace_torch_backward_caller, as cumemtrace_phases calls it),
    # so the engine thread's blocks have the node's frame, then the caller's line. The one site
    # rule makes that line their site, "via" the node; report, the ledger, check --max-growth
    # (with and without marks), diff and pprof all name that same line. Step 1 lends nothing (an
    # older Python side): its blocks keep the node alone, as before.
    p, snaps = run(tmp_path, "engine_thread_backward")
    assert p.returncode == 0 and refusals(p) == [], p.stderr
    (path,) = [os.path.join(tmp_path / "traces", n) for n in snaps if ".oom." not in n]
    tr = final(snaps)["device_traces"][0]
    engine = [e for e in tr if e["action"] == "alloc" and e["size"] == 2000]
    assert len(engine) == 15, engine  # 5 steps, 3 blocks each
    names = [[f["name"] for f in e["frames"]] for e in engine]
    assert names[0] == names[1] == [APPLY]  # step 1: the node alone
    call = line_of("backward-call")
    for e in engine[3:]:
        py = [(f["name"], f["line"]) for f in e["frames"] if f["filename"].endswith(".py")]
        assert [n for n, _ in py] == ["engine_thread_backward", "<module>"], e
        assert py[0][1] == call, e
        main_line = py[1][1]
    # By a node: its frame, then the lent frames; outside one, the thread's own walk first.
    assert [f["name"] for f in engine[3]["frames"]][:1] == [APPLY]
    assert not any(f["name"] == APPLY for f in engine[5]["frames"]), engine[5]
    node_file = engine[0]["frames"][0]
    node = "torch::autograd::generated::MmBackward0::apply(...) (%s:%d)" % (
        os.path.basename(node_file["filename"]), node_file["line"])
    site = "engine_thread_backward (torch_blocks.py:%d)" % call
    by_node = site + " via " + node

    # report: the live blocks by site (4 steps lent: 8 by a node, 4 outside one; 2 of step 1's
    # by the node alone, 1 on its walk).
    rep = report_json(path)
    top = {s["site"]: s["count"] for s in rep["top_sites_by_bytes"]}
    assert top[by_node] == 8 and top[site] == 4, top
    assert not any(s.startswith("torch::autograd::") and "via" in s for s in top), top
    # the ledger: the steady step's backward added these two lines, as autograd buffers.
    (dev,) = rep["pytorch_ledger"]["devices"]
    (bw,) = [ph for ph in dev["steady_step"]["phases"] if ph["phase"] == "backward"]
    assert [(s["site"], s["category"], s["count"]) for s in bw["added_by_site"]
            if s["category"] == "autograd"] == [(by_node, "autograd", 2), (site, "autograd", 1)], bw
    # growth: 5 steps, a warm-up of 2, steps 3 and 4 counted: 2 blocks of 2 KiB a step by the
    # node, 1 outside it.
    assert [(s["site"], s["count"], s["bytes"]) for s in dev["growth"]["by_site"]] == [
        (by_node, 4, 4096), (site, 2, 2048)], dev["growth"]
    # check: growth per step, and growth between the automatic steps, blame the same lines.
    for limit, titles in (("--max-growth-per-step", ["grows 4.00 KiB a step at %s (autograd)" % by_node,
                                                     "grows 2.00 KiB a step at %s (autograd)" % site]),
                          ("--max-growth", ["+12.0 KiB grew at " + by_node,
                                            "+6.00 KiB grew at " + site])):
        c = subprocess.run([CT, "check", limit, "0", "--format", "json", path],
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 1, c.stdout + c.stderr
        (f,) = [f for f in json.loads(c.stdout)["files"][0]["checks"] if f["status"] == "fail"]
        assert [s["title"] for s in f["stacks"]] == titles, (limit, f)
        assert {s["line"] for s in f["stacks"]} == {call}
    # diff: 5 steps against 3; the 6 more blocks are at the same two lines.
    p3, snaps3 = run(tmp_path / "three", "engine_thread_backward", BACKWARD_STEPS="3")
    assert p3.returncode == 0, p3.stderr
    (path3,) = [os.path.join(tmp_path / "three" / "traces", n) for n in snaps3 if ".oom." not in n]
    d = subprocess.run([CT, "diff", "--format", "json", path3, path], capture_output=True,
                       text=True, timeout=120)
    assert d.returncode == 0, d.stderr
    assert [(s["site"], s["base_live_count"], s["new_live_count"])
            for s in json.loads(d.stdout)["sites"]] == [(by_node, 4, 8), (site, 2, 4)]
    # pprof: `go tool pprof` reads the same lines, the node as the leaf of its stack.
    go = shutil.which("go")
    if go:
        prof = str(tmp_path / "backward.pb.gz")
        c = subprocess.run([CT, "convert", path, "--to", "pprof", "-o", prof], capture_output=True,
                           text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        t = subprocess.run([go, "tool", "pprof", "-traces", "-lines", "-sample_index=inuse_space",
                            prof], capture_output=True, text=True, timeout=300)
        assert t.returncode == 0, t.stderr
        stacks = {}
        for block in re.split(r"^-+\+-+$", t.stdout, flags=re.M)[1:]:
            rows = [r.split() for r in block.strip().splitlines()
                    if r.strip() and not r.strip().startswith(("device:", "category:"))]
            if rows and rows[0][0] != "0":
                stacks[tuple(r[-1].rsplit("/", 1)[-1] for r in rows)] = rows[0][0]
        node_at = "%s:%d" % (os.path.basename(node_file["filename"]), node_file["line"])
        at = "torch_blocks.py:%d" % call
        main_at = "torch_blocks.py:%d" % main_line
        assert {k: v for k, v in stacks.items() if at in k} == {
            (node_at, at, main_at): "16kB", (at, main_at): "8kB"}, stacks


@pytest.mark.skipif(sys.version_info < (3, 11), reason="module frames: CPython 3.11+")
def test_backward_allocations_are_their_nodes_modules(tmp_path):
    """Autograd's engine thread runs no Python: each node made in forward is filed by the preload
    with the module call it was made in (its number through the interposed
    at::sequence_number::get_and_increment), and the node's backward allocations get that
    module's frame before the backward() caller's. Every view reads it through the one module
    rule: the ledger's backward by module holds exactly each module's backward bytes, the loss's
    node (no module) alone stays "(backward)"; the site stays the backward() line."""
    p, snaps = run(tmp_path, "backward_by_module")
    assert p.returncode == 0 and refusals(p) == [], p.stderr
    (path,) = [os.path.join(tmp_path / "traces", n) for n in snaps if ".oom." not in n]
    tr = final(snaps)["device_traces"][0]
    engine = [e for e in tr if e["action"] == "alloc" and e["size"] in
              (1024, 2048, 3072, 5120, 7168)]
    assert len(engine) == 10, engine
    call = line_of("by-module-backward")
    for e in engine:
        mods = [f.get("module") for f in e["frames"] if f.get("module")]
        want = {1024: ["a"], 2048: ["a"], 3072: ["b.inner"], 5120: ["Net"], 7168: []}[e["size"]]
        assert mods == want, e
        py = [(f["name"], f["line"]) for f in e["frames"] if f["filename"].endswith(".py")]
        assert len(py) >= 2 and py[-2] == ("backward_by_module", call), e
    rep = report_json(path, "--module-depth", "2")
    (dev,) = rep["pytorch_ledger"]["devices"]
    (bw,) = [ph for ph in dev["steady_step"]["phases"] if ph["phase"] == "backward"]
    assert sorted((m["module"], m["bytes"]) for m in bw["added_by_module"]) == [
        ("(backward)", 7168), ("Net", 5120), ("a", 3072), ("b.inner", 3072)], bw
    site = "backward_by_module (torch_blocks.py:%d)" % call
    assert {s["site"].split(" via ")[0] for s in bw["added_by_site"]} == {site}, bw
    rep1 = report_json(path, "--module-depth", "1")
    (bw1,) = [ph for ph in rep1["pytorch_ledger"]["devices"][0]["steady_step"]["phases"]
              if ph["phase"] == "backward"]
    assert sorted((m["module"], m["bytes"]) for m in bw1["added_by_module"]) == [
        ("(backward)", 7168), ("Net", 5120), ("a", 3072), ("b", 3072)], bw1
