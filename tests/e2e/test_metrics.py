"""`run --metrics` (docs/metrics.md): the gauges of a running fake-driver program hold its exact
bytes, and no scraper can hurt it: bad requests get a 4xx and a closed connection, connections
over the cap are closed, a client that never finishes its request or never reads its answer is
dropped, and meanwhile the program runs to its end with a complete snapshot."""
import os
import re
import socket
import subprocess
import sys

from conftest import CT, SOURCE, MiB, base_env, prog, run_preloaded, snapshots
from metrics_support import Traced, http, sample, scrape, wait_for

N = 200  # 4 KiB allocations after "go"


def test_gauges_hold_the_running_programs_bytes(tmp_path):
    t = Traced(tmp_path, N)
    try:
        status, s = scrape(t.host, t.port)
        assert status == "HTTP/1.1 200 OK"
        labels = dict(pid=t.pid, device=0, exe="ct_static_like")
        assert sample(s, "cumemtrace_tracked_bytes", **labels) == MiB
        assert sample(s, "cumemtrace_other_libraries_bytes", **labels) == MiB
        assert sample(s, "cumemtrace_tracked_peak_bytes", **labels) == MiB
        assert sample(s, "cumemtrace_live_allocations", **labels) == 1
        assert sample(s, "cumemtrace_driver_visible_peak_bytes", **labels) == 3 * MiB + MiB // 2
        # NVML's figure is below tracked + context (see fake_nvml_env): not shown, as in report.
        assert not any(k.startswith(("cumemtrace_driver_visible_bytes", "cumemtrace_context_"))
                       for k in s)
        assert sample(s, "cumemtrace_ooms_total", **labels) == 0
        assert sample(s, "cumemtrace_events_dropped_total", pid=t.pid) == 0
        assert not any("allocated_bytes" in k for k in s)  # no PyTorch, no such layer
        code, err = t.finish()
    finally:
        t.kill()
    assert code == 0, err
    (snap,) = snapshots(t.out).values()
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    assert len(allocs) == N + 1 and snap["cumemtrace"]["events_dropped"] == 0


def test_misbehaving_clients_get_4xx_and_nothing_else(tmp_path):
    t = Traced(tmp_path, N)
    try:
        addr = (t.host, t.port)
        def status(req):
            return http(*addr, req).split(b"\r\n")[0].decode()

        assert status(b"POST /metrics HTTP/1.1\r\n\r\n") == "HTTP/1.1 405 Method Not Allowed"
        assert status(b"GET /other HTTP/1.1\r\n\r\n") == "HTTP/1.1 404 Not Found"
        assert status(b"\x16\x03\x01garbage\r\n\r\n") == "HTTP/1.1 400 Bad Request"
        big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
        try:  # the server closes with the rest unread: the client may see a reset instead
            assert status(big) == "HTTP/1.1 431 Request Header Fields Too Large"
        except ConnectionResetError:
            pass
        # A client that never finishes its request: 408 once the read timeout passes (5 s),
        # checked last. Opened only now, right before the cap is filled, so that it is still one
        # of the 16 when the 17th comes, however slow the requests above were.
        stalled = socket.create_connection(addr, timeout=30)
        stalled.sendall(b"GET /metrics HTTP/1.1\r\n")
        # A client that asks and never reads, with the smallest receive buffer: the server's
        # send fails with EAGAIN at worst and the connection is dropped later; nobody waits.
        lazy = socket.socket()
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        lazy.connect(addr)
        lazy.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        # The cap: 16 connections at once (the stalled and the lazy one included); the next is
        # told 503 and closed.
        held = [socket.create_connection(addr, timeout=10) for _ in range(14)]
        with socket.create_connection(addr, timeout=10) as extra:  # told before it asks
            reply = b""
            while chunk := extra.recv(1000):
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert reply.endswith(b"\r\n\r\nService Unavailable\n")
        for h in held:
            h.close()
        # Room again once the server saw them go: a good scrape, with the exact bytes. Until the
        # server has read the closes, a new connection is still over the cap: it is told 503 and
        # closed with its request unread, which the client may see as a reset (seen under ASan).
        def scrape_once_there_is_room():
            try:
                if not http(*addr, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(
                        b"HTTP/1.1 200 OK\r\n"):
                    return None  # the 503
            except ConnectionResetError:
                return None
            return scrape(*addr)[1]
        s = wait_for("a scrape after the cap", scrape_once_there_is_room)
        assert sample(s, "cumemtrace_tracked_bytes", pid=t.pid, device=0) == MiB
        assert stalled.recv(100).startswith(b"HTTP/1.1 408 Request Timeout")
        stalled.close()
        lazy.close()
        code, err = t.finish()
    finally:
        t.kill()
    assert code == 0, err
    (snap,) = snapshots(t.out).values()
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    assert len(allocs) == N + 1 and snap["cumemtrace"]["events_dropped"] == 0


def test_non_loopback_address_is_refused_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    p = subprocess.run([CT, "run", "-o", str(tmp_path / "o"), "--metrics", "0.0.0.0:0", "--",
                        "touch", str(marker)], env=base_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, p.stderr
    assert "0.0.0.0:0 is not a loopback address" in p.stderr and "--metrics-public" in p.stderr
    assert not marker.exists()
    p = subprocess.run([CT, "run", "--metrics", "127.0.0.1:99999", "--", "true"],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "port 0-65535" in p.stderr, p.stderr


def test_plain_preload_variable(tmp_path):
    # A value the collector refuses: the program runs untraced and says why.
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "basic"], expect_files=0,
                             CUMEMTRACE_METRICS="10.1.2.3:0")
    assert "invalid CUMEMTRACE_METRICS: 10.1.2.3:0 is not a loopback address" in p.stderr
    # A good one: the collector's line names its port, and tracing goes on.
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "basic"], expect_files=1,
                             CUMEMTRACE_METRICS="localhost:0")
    assert "cumemtrace: serving metrics at http://127.0.0.1:" in p.stderr, p.stderr


def test_pytorch_layers_and_dashboard_names(tmp_path):
    """PyTorch's layers from the fake torch's caching allocator (metrics_torch.py): allocated
    1 KiB + 3 MiB in 2 MiB + 20 MiB reserved; the largest free block is the 20 MiB segment's
    17 MiB rest. Every metric the Grafana dashboard queries is one the collector serves."""
    from test_torch_blocks import torch_env
    t = Traced(tmp_path, program=[sys.executable, os.path.join(SOURCE, "tests", "e2e",
                                                               "metrics_torch.py")],
               **torch_env())
    try:
        raw = http(t.host, t.port, b"GET /metrics HTTP/1.1\r\n\r\n").decode()
        status, s = scrape(t.host, t.port)
        code, err = t.finish()
    finally:
        t.kill()
    assert code == 0, err
    lab = dict(pid=t.pid, device=0)
    assert sample(s, "cumemtrace_allocated_bytes", **lab) == 3 * MiB + 1024
    assert sample(s, "cumemtrace_reserved_bytes", **lab) == 22 * MiB
    assert sample(s, "cumemtrace_cached_free_bytes", **lab) == 19 * MiB - 1024
    assert sample(s, "cumemtrace_largest_free_block_bytes", **lab) == 17 * MiB
    # The peak is the trace's replay in PyTorch's block bytes (label_block_sizes: the 1000 B
    # tensor's block is 1 KiB), as the current value and max_memory_allocated() are.
    assert sample(s, "cumemtrace_allocated_peak_bytes", **lab) == 3 * MiB + 1024
    assert sample(s, "cumemtrace_reserved_peak_bytes", **lab) == 22 * MiB
    assert sample(s, "cumemtrace_tracked_bytes", **lab) == 22 * MiB
    assert sample(s, "cumemtrace_other_libraries_bytes", **lab) == 0
    assert sample(s, "cumemtrace_live_allocations", **lab) == 2  # the two tensors
    served = set(re.findall(r"^# TYPE (\w+)", raw, re.M))
    with open(os.path.join(SOURCE, "share", "grafana", "cumemtrace.json")) as f:
        asked = set(re.findall(r"cumemtrace_\w+", f.read())) - {"cumemtrace"}
    assert asked and asked <= served, asked - served
