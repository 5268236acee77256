"""Helpers for the live-gauge tests (docs/metrics.md): a traced fake-driver program that holds its
allocations until the test says go (ct_static_like burst: 1 MiB on device 0, then, after a line
on stdin, N 4 KiB allocations freed at once and the 1 MiB freed), under `cumemtrace run
--metrics 127.0.0.1:0`, and plain HTTP against its /metrics. Every wait is a handshake: the
program's "ready" line, the collector's "serving metrics at" line, an HTTP answer; deadlines
only bound them."""
import os
import re
import socket
import subprocess
import time

from conftest import BUILD, CT, base_env, prog


def fake_nvml_env():
    # The fake NVML (tests/fake_driver/fake_nvml.cpp): the process holds 1.5 MiB on device 0 as
    # the driver sees it, plus 2 MiB for its context: 3.5 MiB, from before its first allocation
    # (the fake does not count allocations), so the context is measured at 3.5 MiB and the
    # engine (analysis/model.h) finds the driver's figure below tracked + context: unknown.
    return dict(CUMEMTRACE_NVML_LIBRARY=os.path.join(BUILD, "fake_nvml", "libnvidia-ml.so.1"),
                FAKE_NVML_USED="0:1572864", FAKE_NVML_CONTEXT="0:2097152")


class Traced:
    """`cumemtrace run --metrics` on `ct_static_like burst N` (or `program`, which prints
    "ready PID" and waits for a line on stdin the same way), stopped at its ready line."""

    def __init__(self, tmp_path, n=10, run_args=("--metrics", "127.0.0.1:0"), program=None,
                 **env):
        self.out = tmp_path / "traces"
        program = program or [prog("ct_static_like"), "burst", str(n)]
        cmd = [CT, "run", "-o", str(self.out), *run_args, "--", *program]
        self.p = subprocess.Popen(cmd, env=base_env(**fake_nvml_env(), **env),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        # The collector's line comes before the program starts, then the program's ready line.
        line = self.p.stderr.readline()
        m = re.search(r"serving metrics at http://([0-9.]+):(\d+)/metrics", line)
        assert m, line + self.p.stderr.read()
        self.host, self.port = m.group(1), int(m.group(2))
        ready = self.p.stdout.readline()
        assert ready.startswith("ready "), ready
        self.pid = int(ready.split()[1])

    def finish(self):
        """Lets the program go; returns (exit status, stderr)."""
        self.p.stdin.write("go\n")
        self.p.stdin.close()
        err = self.p.stderr.read()
        self.p.stdout.read()
        return self.p.wait(timeout=60), err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def http(host, port, request, timeout=10):
    """Sends raw request bytes; returns everything the server sent until it closed."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


def scrape(host, port):
    """GET /metrics; returns (status line, {sample name with labels: value})."""
    raw = http(host, port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").decode()
    head, _, body = raw.partition("\r\n\r\n")
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = int(value)
    return head.splitlines()[0], samples


def sample(samples, name, **labels):
    """The one sample of `name` whose labels include `labels`."""
    found = [v for k, v in samples.items()
             if k.split("{")[0] == name and all(f'{l}="{v}"' in k for l, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def wait_for(what, fn, deadline_s=20):
    """Polls fn() until it returns a true value (a handshake with a deadline, not a sleep)."""
    end = time.monotonic() + deadline_s
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)
