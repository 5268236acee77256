"""End-to-end: the test programs under `cumemtrace run` and plain LD_PRELOAD, fake driver.

Expected numbers come from tests/programs/scenarios.h (the `basic` scenario and friends).
"""
import json
import os
import re
import signal
import time
import subprocess

import pytest

from conftest import (BENCH_PRELOAD, CT, MiB, PRELOAD, SANITIZER, SOURCE, actions, base_env, device_summary, load, marker_line, prog,
                      run_preloaded, run_traced, trace)

SA, A, FR, FC, SF = "segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"
ACCESS_PATHS = ["ct_static_like", "ct_shared_like", "ct_lcuda"]


def only(snaps):
    assert len(snaps) == 1, list(snaps)
    return next(iter(snaps.values()))


def check_basic(snap, exe):
    t = snap["cumemtrace"]
    assert t["exe"].endswith("/" + exe)
    assert t["ended"] == {"how": "exit", "code": 0, "signal": 0}
    assert t["events_total"] == 7
    assert t["events_dropped"] == 0
    assert t["anomalies"] == []
    assert actions(snap, 0) == [SA, A, SA, A, FR, FC, SF]
    assert actions(snap, 1) == [SA, A, SA, A, FR, FC, SF, SA, A]
    d0, d1 = device_summary(snap, 0), device_summary(snap, 1)
    assert (d0["live_bytes"], d0["peak_bytes"], d0["allocations"], d0["frees"]) == (2 * MiB, 3 * MiB, 2, 1)
    assert (d1["live_bytes"], d1["peak_bytes"], d1["allocations"], d1["frees"]) == (
        4 * MiB + 512 * 1024, 7 * MiB, 3, 1)
    sizes0 = [e["size"] for e in trace(snap, 0)]
    assert sizes0 == [MiB, MiB, 2 * MiB, 2 * MiB, MiB, MiB, MiB]
    tr1 = trace(snap, 1)
    # c on the null stream, d on a created stream (alloc and free), e on the per-thread stream.
    assert tr1[0]["stream"] == 0
    stream_s = tr1[2]["stream"]
    assert stream_s != 0
    assert [e["stream"] for e in tr1[4:7]] == [stream_s] * 3
    assert tr1[8]["stream"] == 0 and tr1[8].get("stream_per_thread") is True
    assert "stream_per_thread" not in tr1[2]
    # Live segments: b on device 0, c and e on device 1, one active block each.
    live = sorted((s["device"], s["total_size"]) for s in snap["segments"])
    assert live == [(0, 2 * MiB), (1, 512 * 1024), (1, 4 * MiB)]
    for s in snap["segments"]:
        assert len(s["blocks"]) == 1 and s["blocks"][0]["size"] == s["total_size"]
    # The 2 MiB allocation names allocate_weights() at the marked line.
    weights = next(s for s in snap["segments"] if s["total_size"] == 2 * MiB)
    names = [f["name"] for f in weights["frames"]]
    # Through a cudart-like library the library's own functions come first, as with real cudart.
    if exe == "ct_shared_like":
        assert names[0] == "ctMalloc"
    else:
        assert names[0] == "allocate_weights"
    top = weights["frames"][names.index("allocate_weights")]
    assert top["filename"].endswith("scenarios.cpp")
    assert top["line"] == marker_line("scenarios.cpp", "ALLOC_WEIGHTS_LINE")
    assert any(f["name"] == "main" for f in weights["frames"])
    assert snap["cumemtrace"]["threads"]  # the allocating thread named itself


@pytest.mark.parametrize("exe", ACCESS_PATHS)
def test_basic_under_run(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "basic"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    check_basic(snap, exe)
    assert f"wrote {tmp_path}/traces/{exe}." in p.stderr
    assert "peak device 0 3.00 MiB, device 1 7.00 MiB" in p.stderr
    assert "live at exit 6.50 MiB in 3 allocations" in p.stderr


@pytest.mark.parametrize("exe", ACCESS_PATHS)
def test_basic_under_plain_preload(tmp_path, exe):
    p, snaps = run_preloaded(tmp_path, [prog(exe), "basic"])
    assert p.returncode == 0, p.stderr
    check_basic(only(snaps), exe)


def test_stack_depth_zero_records_no_frames(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "basic"], ["--stack-depth", "0"])
    assert p.returncode == 0
    snap = only(snaps)
    assert all(e.get("frames", []) == [] for tr in snap["device_traces"] for e in tr)


def test_program_without_cuda_runs_unchanged(tmp_path):
    plain = subprocess.run([prog("ct_no_cuda"), "5"], env=base_env(), capture_output=True, text=True)
    p, snaps = run_traced(tmp_path, [prog("ct_no_cuda"), "5"])
    assert (p.returncode, p.stdout) == (plain.returncode, plain.stdout) == (5, "hello from ct_no_cuda\n")
    assert snaps == {}
    q, snaps = run_preloaded(tmp_path, [prog("ct_no_cuda"), "5"], expect_files=0)
    assert (q.returncode, q.stdout, q.stderr) == (5, plain.stdout, "")
    assert snaps == {}


def test_dlsym_rtld_next_and_old_version_still_work(tmp_path):
    p = subprocess.run([prog("ct_dlsym_next")], env=base_env(LD_PRELOAD=PRELOAD), capture_output=True)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_code_passes_through(tmp_path, code):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "exit", str(code)])
    assert p.returncode == code
    snap = only(snaps)
    assert snap["cumemtrace"]["ended"] == {"how": "exit", "code": code, "signal": 0}
    assert [s["total_size"] for s in snap["segments"]] == [MiB]


@pytest.mark.parametrize("scenario,sig", [("kill", signal.SIGKILL), ("abort", signal.SIGABRT),
                                          ("segv", signal.SIGSEGV)])
def test_killed_target_still_leaves_its_snapshot(tmp_path, scenario, sig):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), scenario])
    assert p.returncode == 128 + sig
    snap = only(snaps)
    assert snap["cumemtrace"]["ended"] == {"how": "signal", "code": 0, "signal": sig}
    assert [s["total_size"] for s in snap["segments"]] == [MiB]
    assert f"was killed by signal {int(sig)}" in p.stderr
    # Symbolized after the process died: function, file and line of the allocating code.
    top = next(f for f in snap["segments"][0]["frames"] if "alloc_1mib_on_device0" in f["name"])
    assert top["filename"].endswith("scenarios.cpp") and top["line"] > 0


def test_killed_under_plain_preload(tmp_path):
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "kill"])
    assert p.returncode == -signal.SIGKILL
    snap = only(snaps)
    # The detached collector is not the parent: it sees the signal if it looks before the parent
    # reaps the zombie, else only that the process is gone.
    assert snap["cumemtrace"]["ended"] in ({"how": "signal", "code": 0, "signal": 9},
                                           {"how": "vanished", "code": 0, "signal": 0})
    assert [s["total_size"] for s in snap["segments"]] == [MiB]


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_vmm(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "vmm"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    assert actions(snap, 0) == ["segment_map", "segment_unmap", "segment_map"]
    assert [(s["total_size"], s["is_expandable"]) for s in snap["segments"]] == [(2 * MiB, True)]
    handles = snap["cumemtrace"]["vmm_handles"]
    assert [(h["size"], h["device"]) for h in handles] == [(2 * MiB, 0)]
    d0 = device_summary(snap, 0)
    assert (d0["live_bytes"], d0["peak_bytes"]) == (2 * MiB, 2 * MiB)


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_vmm_handle_references_retain_release_and_import(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "vmm_refs"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    t = snap["cumemtrace"]
    # NCCL's retain + double release frees exactly once; a handle released while mapped still
    # holds its memory; nothing is reported as a stray release.
    assert t["anomalies"] == []
    assert actions(snap, 0) == ["segment_map", "segment_unmap", "segment_map"]
    assert [e["size"] for e in trace(snap, 0)] == [2 * MiB, 2 * MiB, 4 * MiB]
    assert all(any("scenario_vmm_refs(" in f["name"] for f in e["frames"])
               for e in trace(snap, 0) if e["action"] == "segment_map")
    assert [(s["device"], s["total_size"], s["is_expandable"]) for s in snap["segments"]] == [(0, 4 * MiB, True)]
    assert [(h["size"], h["device"]) for h in t["vmm_handles"]] == [(4 * MiB, 0)]
    d0, d1 = device_summary(snap, 0), device_summary(snap, 1)
    assert (d0["allocations"], d0["frees"], d0["live_bytes"], d0["peak_bytes"]) == (2, 1, 4 * MiB, 4 * MiB)
    assert (d1["allocations"], d1["frees"], d1["live_bytes"], d1["peak_bytes"]) == (1, 1, 0, 2 * MiB)
    # The imported mapping is another owner's memory: listed, not a segment, no bytes.
    imported = t["imported_mappings"]
    assert [(m["size"], m["device"]) for m in imported] == [(2 * MiB, 1)]
    assert imported[0]["handle"] not in [h["handle"] for h in t["vmm_handles"]]
    assert trace(snap, 1) == []


@pytest.mark.parametrize("exe", ["ct_static_like", "ct_lcuda"])
def test_pinned_host(tmp_path, exe):
    p, snaps = run_traced(tmp_path, [prog(exe), "host"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    host = snap["cumemtrace"]["host_allocations"]
    assert [(h["size"], h["api"]) for h in host] == [(64 * 1024, "cuMemAllocHost")]
    assert snap["segments"] == []
    assert all(d["peak_bytes"] == 0 for d in snap["cumemtrace"]["devices"])


def test_managed_and_pitch(tmp_path):
    _, snaps = run_traced(tmp_path / "m", [prog("ct_static_like"), "managed"])
    snap = only(snaps)
    assert actions(snap, 0) == [SA, A, FR, FC, SF]
    assert trace(snap, 0)[0]["size"] == 256 * 1024
    _, snaps = run_traced(tmp_path / "p", [prog("ct_static_like"), "pitch"])
    snap = only(snaps)
    assert [s["total_size"] for s in snap["segments"]] == [10240]


def test_oom_writes_a_snapshot_at_once(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "oom"], FAKE_CUDA_MEM_LIMIT=8 * MiB)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "allocated 8"
    oom = [n for n in snaps if n.endswith(".oom.json")]
    final = [n for n in snaps if not n.endswith(".oom.json")]
    assert len(oom) == 1 and len(final) == 1
    at_oom = snaps[oom[0]]
    assert at_oom["cumemtrace"]["reason"] == "oom"
    entry = trace(at_oom, 0)[-1]
    assert entry["action"] == "oom" and entry["size"] == MiB and entry["device_free"] == 0
    assert len(at_oom["segments"]) == 8  # what was live when it happened
    assert snaps[final[0]]["segments"] == []


def test_anomalies(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "badfree"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    kinds = [(a["kind"], a["addr"]) for a in snap["cumemtrace"]["anomalies"]]
    assert kinds[0][0] == "double_free"
    assert kinds[1] == ("free_unknown_pointer", 0xdead0000)
    assert snap["segments"] == []


# With stacks off every event of a thread takes the hook's direct path (recorder.h: record_fields)
# but its first, which names the thread; with default stacks only the frees do.
@pytest.mark.parametrize("options", [[], ["--stack-depth", "0"]], ids=["default", "stacks-off"])
def test_threads_lose_nothing_and_keep_address_order(tmp_path, options):
    threads, rounds = 64, 150
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "threads", str(threads), str(rounds)],
                          options)
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    t = snap["cumemtrace"]
    assert t["events_dropped"] == 0
    assert t["events_total"] == 2 * threads * rounds
    d0 = device_summary(snap, 0)
    assert (d0["allocations"], d0["frees"], d0["live_bytes"]) == (threads * rounds, threads * rounds, 0)
    # Exactly the requested sizes, each once: no phantom, no lost event.
    sizes = sorted(e["size"] for e in trace(snap, 0) if e["action"] == SA)
    assert sizes == sorted((k + 1) * 4096 + r for k in range(threads) for r in range(rounds))
    # Per address, allocations and frees strictly alternate in the global order, also where one
    # thread frees an address and another thread gets it next (which must happen here).
    owner, cross_thread_reuse = {}, 0
    for e in trace(snap, 0):
        if e["action"] == SA:
            assert e["addr"] not in owner or owner[e["addr"]][0] is False, "allocated twice without a free"
            if e["addr"] in owner and owner[e["addr"]][1] != e["tid"]:
                cross_thread_reuse += 1
            owner[e["addr"]] = (True, e["tid"])
        elif e["action"] == SF:
            assert owner.get(e["addr"], (False,))[0], "free before its allocation"
            owner[e["addr"]] = (False, e["tid"])
    assert cross_thread_reuse > 0
    tids = {e["tid"] for e in trace(snap, 0)}
    assert len(tids) == threads and 0 not in tids
    # Every thread that recorded named itself (with its first event).
    assert {str(tid) for tid in tids} <= set(t["threads"]), t["threads"]
    assert snap["cumemtrace"]["anomalies"] == []


def test_fork_child_gets_its_own_snapshot(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "fork"])
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 2
    by_size = {tuple(sorted(s["total_size"] for s in v["segments"])): v for v in snaps.values()}
    parent, child = by_size[(MiB, 3 * MiB)], by_size[(2 * MiB,)]
    assert child["cumemtrace"]["ppid"] == parent["cumemtrace"]["pid"]
    assert child["cumemtrace"]["events_total"] == 1
    # The child left with _exit(0): no exit() in the ring; the collector reads the zombie's status
    # unless its parent reaped it first.
    assert child["cumemtrace"]["ended"] in ({"how": "exit", "code": 0, "signal": 0},
                                            {"how": "vanished", "code": 0, "signal": 0})
    assert parent["cumemtrace"]["ended"] == {"how": "exit", "code": 0, "signal": 0}


def test_no_follow_traces_only_the_program(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "fork"], ["--no-follow"])
    assert p.returncode == 0, p.stderr
    snap = only(snaps)
    assert sorted(s["total_size"] for s in snap["segments"]) == [MiB, 3 * MiB]


def test_exec_leaves_one_snapshot_per_image(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "exec"])
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 2
    first = next(v for v in snaps.values() if v["cumemtrace"]["ended"]["how"] == "exec")
    assert [s["total_size"] for s in first["segments"]] == [MiB]
    second = next(v for v in snaps.values() if v is not first)
    check_basic(second, "ct_static_like")


def test_unwritable_output_runs_untraced_with_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run([CT, "run", "-o", str(blocker / "sub"), "--", prog("ct_static_like"), "exit", "4"],
                       env=base_env(), capture_output=True, text=True)
    assert p.returncode == 4
    lines = [line for line in p.stderr.splitlines() if line.startswith("cumemtrace:")]
    assert len(lines) == 1 and "running the program untraced" in lines[0]
    q = subprocess.run([prog("ct_static_like"), "exit", "4"], capture_output=True, text=True,
                       env=base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(blocker / "sub")))
    assert q.returncode == 4
    assert q.stderr.count("cumemtrace:") == 1 and "tracing disabled" in q.stderr


def test_coarse_clock_times_the_same_events_at_the_kernel_tick(tmp_path):
    # --clock coarse (CUMEMTRACE_CLOCK=coarse under plain LD_PRELOAD) reads CLOCK_MONOTONIC_COARSE
    # for each event's time: the same events in the same order, the times at the tick's resolution
    # (1-4 ms): 10,000 entries in a few ms share a handful of times, where the TSC tells them
    # apart by the microsecond.
    tick_ns = round(time.clock_getres(6) * 1e9)  # CLOCK_MONOTONIC_COARSE
    tick_us = tick_ns / 1000
    args = [prog("ct_static_like"), "steps", "2000"]

    def entries(snap):
        tr = snap["device_traces"][0]
        times = [e["time_us"] for e in tr]
        assert times == sorted(times)
        return [(e["action"], e["size"]) for e in tr], times

    p, snaps = run_traced(tmp_path / "precise", args)
    assert p.returncode == 0, p.stderr
    want, precise = entries(only(snaps))
    assert len(want) == 10_000 and len(set(precise)) > 200
    assert "time_resolution_ns" not in only(snaps)["cumemtrace"]
    p, cli = run_traced(tmp_path / "cli", args, ["--clock", "coarse"])
    assert p.returncode == 0, p.stderr
    p, env = run_preloaded(tmp_path / "env", args, CUMEMTRACE_CLOCK="coarse")
    assert p.returncode == 0, p.stderr
    for snap in (only(cli), only(env)):
        got, coarse = entries(snap)
        assert got == want
        assert len(set(coarse)) <= (coarse[-1] - coarse[0]) / tick_us + 2, sorted(set(coarse))
        # The snapshot says so, and so do the report and its JSON.
        assert snap["cumemtrace"]["time_resolution_ns"] == tick_ns
    (name,) = cli
    rep = subprocess.run([CT, "report", str(tmp_path / "cli" / "traces" / name)],
                         capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert f"  times: read at the kernel tick (--clock coarse), every {tick_ns / 1e6:g} ms\n" in rep.stdout
    rep = subprocess.run([CT, "report", "--format", "json", str(tmp_path / "cli" / "traces" / name)],
                         capture_output=True, text=True, timeout=60)
    assert json.loads(rep.stdout)["time_resolution_ns"] == tick_ns
    # Said precise, it is precise whatever the environment says.
    p, snaps = run_traced(tmp_path / "explicit", args, ["--clock", "precise"], CUMEMTRACE_CLOCK="coarse")
    assert p.returncode == 0, p.stderr
    assert len(set(entries(only(snaps))[1])) > 200


def test_missing_collector_and_bad_settings_disable_tracing(tmp_path):
    for env in ({"CUMEMTRACE_COLLECTOR": "/nonexistent/cumemtrace"},
                {"CUMEMTRACE_STACK_DEPTH": "lots"}, {"CUMEMTRACE_BUFFER_MB": "0"},
                {"CUMEMTRACE_PYTHON_STACKS": "yes"}, {"CUMEMTRACE_NATIVE_ABOVE_PYTHON": "2"},
                {"CUMEMTRACE_FREE_STACKS": "on"}, {"CUMEMTRACE_CLOCK": "fast"}):
        p = subprocess.run([prog("ct_static_like"), "exit", "6"], capture_output=True, text=True,
                           env=base_env(LD_PRELOAD=PRELOAD, CUMEMTRACE_OUTPUT=str(tmp_path), **env))
        assert p.returncode == 6
        assert p.stderr.count("cumemtrace:") == 1 and "tracing disabled" in p.stderr, env
    assert not list(tmp_path.glob("*.json"))


def test_run_usage_errors_exit_2(tmp_path):
    assert subprocess.run([CT, "run"], capture_output=True).returncode == 2
    assert subprocess.run([CT, "run", "--stack-depth", "999", "--", "true"], capture_output=True).returncode == 2
    assert subprocess.run([CT, "run", "--clock", "fast", "--", "true"], capture_output=True).returncode == 2
    assert subprocess.run([CT, "nonsense"], capture_output=True).returncode == 2
    assert subprocess.run([CT, "run", "--help"], capture_output=True).returncode == 0
    p = subprocess.run([CT, "run", "-o", str(tmp_path), "--", "/nonexistent/prog"], capture_output=True, text=True)
    assert p.returncode == 127 and "cannot run /nonexistent/prog" in p.stderr


def preload_entry_points():
    """(the functions defined with CUMEMTRACE_EXPORT, per file; the CUMEMTRACE_HOOKS list) as the
    sources say: the names the export map is made from, and the interposed driver functions."""
    by_file = {}
    for root, _, names in os.walk(os.path.join(SOURCE, "preload")):
        for name in names:
            if name.endswith((".cpp", ".h")) and name not in ("export.h", "bench_switches.cpp"):
                text = open(os.path.join(root, name)).read()
                found = re.findall(r"^CUMEMTRACE_EXPORT [^(]*?\b(\w+)\(", text, re.M)
                if found:
                    by_file[os.path.relpath(os.path.join(root, name), SOURCE)] = found
    table = open(os.path.join(SOURCE, "preload", "hooks", "hook_table.h")).read()
    macro = re.search(r"#define CUMEMTRACE_HOOKS\(X\)(?:[^\n]*\\\n)*[^\n]*", table).group(0)
    hooks = re.findall(r"X\((\w+)\)", macro)
    return by_file, hooks


def test_preload_exports_only_its_hooks():
    out = subprocess.run(["nm", "-D", "--defined-only", PRELOAD], capture_output=True, text=True).stdout
    names = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    by_file, hooks = preload_entry_points()
    # Entry points live in preload/hooks/ only, and the library exports exactly them.
    assert all(f.startswith("preload/hooks/") for f in by_file), sorted(by_file)
    declared = sorted(n for found in by_file.values() for n in found)
    assert names == declared
    # Every interposed driver function is exported, and the API the users and the Python side
    # call by name (include/cumemtrace.h, preload/python/) is among the exports.
    assert set(hooks) <= set(names) and len(hooks) == 64, (sorted(set(hooks) - set(names)), len(hooks))
    assert {"dlsym", "cuGetProcAddress", "cuGetProcAddress_v2", "_exit", "_Exit",
            "cumemtrace_mark", "cumemtrace_range_push", "cumemtrace_range_pop",
            "cumemtrace_snapshot", "cumemtrace_torch_attach", "cumemtrace_rank_info",
            "cumemtrace_python_code_event", "cumemtrace_torch_module_code", "cumemtrace_torch_names",
            "cumemtrace_torch_backward_caller", "InitializeInjectionNvtx2",
            # PyTorch's autograd node numbering, interposed (hooks/torch_sequence.cpp)
            "_ZN2at15sequence_number17get_and_incrementEv", "cumemtrace_torch_node_layout",
            "cumemtrace_torch_node_module"} <= set(names)
    assert len(names) == 87
    # The benchmarks' library exports the same and its three pause switches, which the product
    # never does.
    out = subprocess.run(["nm", "-D", "--defined-only", BENCH_PRELOAD], capture_output=True,
                         text=True).stdout
    bench = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert bench == sorted(names + ["cumemtrace_bench_pause_recording",
                                    "cumemtrace_bench_pause_torch_blocks",
                                    "cumemtrace_bench_pause_node_modules"])


def test_preload_and_cli_need_only_libc():
    allowed = ("linux-vdso", "libc.so", "libm.so", "ld-linux", "libdl.so", "libpthread.so")
    # A sanitizer build's CLI needs its sanitizer runtime; the preload never does.
    cli_allowed = allowed + (("libasan", "libubsan", "libtsan", "libstdc++", "libgcc_s")
                             if SANITIZER else ())
    for path, ok in ((PRELOAD, allowed), (CT, cli_allowed)):
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        deps = [line.split()[0] for line in out.splitlines() if line.strip()]
        assert all(d.startswith(ok) or d.startswith("/lib") for d in deps), (path, deps)


def test_dlsym_passthrough_is_a_tail_call():
    """glibc resolves RTLD_NEXT from the return address: our dlsym must jmp, not call."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", PRELOAD], capture_output=True, text=True).stdout
    body = out.split("<dlsym>:", 1)[1].split("\n\n", 1)[0]
    assert "jmp    *%rax" in body or "jmp    *%r" in body


def test_run_gates_on_the_same_limits_as_check(tmp_path):
    p, _ = run_traced(tmp_path / "a", [prog("ct_static_like"), "basic"], ["--max-leaked-bytes", "0"])
    assert p.returncode == 1
    assert "2.00 MiB leaked on device 0 by 1 allocation (limit 0 B)" in p.stderr
    assert "allocate_weights" in p.stderr
    p, _ = run_traced(tmp_path / "b", [prog("ct_static_like"), "exit", "3"], ["--max-leaked-bytes", "1MiB"])
    assert p.returncode == 3  # limits hold: the program's own status
    p, _ = run_traced(tmp_path / "c", [prog("ct_static_like"), "basic"], ["--max-peak-bytes", "6MiB"])
    assert p.returncode == 1 and "device 1" in p.stderr


def test_children_started_with_closed_descriptors_are_still_traced(tmp_path):
    """Python's subprocess (and so torchrun) closes the inherited control socket: the child then
    starts a collector of its own that writes to the same directory."""
    launcher = ("import subprocess, sys; "
                f"sys.exit(subprocess.run([{prog('ct_static_like')!r}, 'exit', '0']).returncode)")
    # The child's own (detached) collector holds the inherited stdout and stderr until it has
    # written its file: run_traced returns after that.
    p, _ = run_traced(tmp_path, ["/usr/bin/python3", "-c", launcher])
    assert p.returncode == 0, p.stderr
    files = list((tmp_path / "traces").glob("ct_static_like.*.json"))
    assert len(files) == 1
    snap = load(str(files[0]))
    assert [s["total_size"] for s in snap["segments"]] == [MiB]
    assert "tracing disabled" not in p.stderr


def test_a_gate_that_traced_nothing_fails(tmp_path):
    """Issue 21: a leak gate that could not trace, or saw no CUDA, never passes silently."""
    p = subprocess.run([CT, "run", "-o", "/proc/x", "--max-leaked-bytes", "0", prog("ct_static_like"), "basic"],
                       env=base_env(), capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""  # refused before the program ran
    assert "not running the program: --max-leaked-bytes needs a trace" in p.stderr
    p = subprocess.run([CT, "run", "-o", str(tmp_path), "--max-leaked-bytes", "0", prog("ct_static_like"), "basic"],
                       env=base_env(CUMEMTRACE_PRELOAD="/nonexistent/libcumemtrace.so"), capture_output=True,
                       text=True)
    assert p.returncode == 2 and "/nonexistent/libcumemtrace.so: No such file or directory" in p.stderr
    spaced = tmp_path / "a dir"
    spaced.mkdir()
    (spaced / "libcumemtrace.so").symlink_to(PRELOAD)
    p = subprocess.run([CT, "run", "-o", str(tmp_path), "--max-leaked-bytes", "0", prog("ct_static_like"), "basic"],
                       env=base_env(CUMEMTRACE_PRELOAD=str(spaced / "libcumemtrace.so")), capture_output=True,
                       text=True)
    assert p.returncode == 2 and "which LD_PRELOAD cannot carry" in p.stderr
    p, snaps = run_traced(tmp_path / "a", [prog("ct_no_cuda"), "0"], ["--max-leaked-bytes", "0"])
    assert p.returncode == 1 and snaps == {}
    assert "cumemtrace: no CUDA allocation seen; no snapshot written" in p.stderr
    assert "pass --allow-no-cuda" in p.stderr
    p, _ = run_traced(tmp_path / "b", [prog("ct_no_cuda"), "0"], ["--max-leaked-bytes", "0", "--allow-no-cuda"])
    assert p.returncode == 0, p.stderr


def test_program_failure_is_never_masked_and_error_exitcode(tmp_path):
    p, _ = run_traced(tmp_path / "a", [prog("ct_static_like"), "segv"], ["--max-leaked-bytes", "0"])
    assert p.returncode == 128 + signal.SIGSEGV
    assert "1.00 MiB leaked on device 0" in p.stderr
    p, _ = run_traced(tmp_path / "b", [prog("ct_static_like"), "basic"], ["--max-leaked-bytes", "0",
                                                                          "--error-exitcode", "17"])
    assert p.returncode == 17


def test_options_end_at_the_program_and_json_verdicts_leave_stderr(tmp_path):
    out = tmp_path / "t"
    p = subprocess.run([CT, "run", "-o", str(out), "/bin/echo", "a", "-o", "b", "--help"], env=base_env(),
                       capture_output=True, text=True)
    assert (p.returncode, p.stdout) == (0, "a -o b --help\n")
    p = subprocess.run([CT, "run", "-q", "-o", str(out), "--max-leaked-bytes", "0", "--format", "json",
                        prog("ct_static_like"), "basic"], env=base_env(), capture_output=True, text=True)
    assert p.returncode == 1
    assert json.loads(p.stdout)["failed"] == 2  # both devices leak
    assert "leaked" not in p.stderr
    verdict = tmp_path / "verdict.json"
    p = subprocess.run([CT, "run", "-q", "-o", str(out), "--max-leaked-bytes", "1GiB", "--format", "json",
                        "--verdict-file", str(verdict), prog("ct_static_like"), "basic"], env=base_env(),
                       capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (0, "")  # -q: a passing verdict is silent
    assert json.loads(verdict.read_text())["ok"] is True
    p = subprocess.run([CT, "run", "-o", str(out), "--max-leaked-bytes", "1GiB", "--verdict-file", str(verdict),
                        prog("ct_static_like"), "basic"], env=base_env(), capture_output=True, text=True)
    assert p.returncode == 2 and "already exists" in p.stderr and "hello" not in p.stdout


def test_run_says_where_output_goes_and_the_version(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "exit", "0"])
    assert f"cumemtrace: writing snapshots to {tmp_path}/traces" in p.stderr
    assert "cumemtrace report " in p.stderr
    version = subprocess.run([CT, "--version"], capture_output=True, text=True).stdout.strip()
    assert only(snaps)["cumemtrace"]["tool_version"] == version != ""

