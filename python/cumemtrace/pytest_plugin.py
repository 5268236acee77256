"""pytest plugin (entry point pytest11 `cumemtrace`): gate tests on GPU memory.

    pytest --cumemtrace
    @pytest.mark.limit_gpu_memory("1 GiB")   peak device memory during the test
    @pytest.mark.limit_gpu_leaks("0 B")      device memory allocated during the test and still
                                             allocated when it ends
    @pytest.mark.limit_gpu_growth_per_step("1 MiB")
                                             a PyTorch test's tensors kept from one automatic
                                             step to the next (after a warm-up; the steps that
                                             end within the test; fewer than 3: cannot be judged,
                                             so the test fails)

Mechanism: when pytest itself is not traced, the plugin re-executes it under `cumemtrace run`
(so the preload is in place before any CUDA library loads; pytest-xdist workers inherit it).
Around each test's call phase it opens a range named after the test id, then asks the preload
for a snapshot and runs `cumemtrace check SNAPSHOT --range pytest:TESTID --max-peak-bytes N
--max-leaked-bytes N [--max-growth-per-step N] --format json`: the engine's own numbers, sites
and stacks. A limit broken
fails the test with that text; the session ends with the tests of highest peak.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from . import _native
from ._paths import executable

_REEXEC_ENV = "CUMEMTRACE_PYTEST_REEXEC"
_NO_LIMIT = str(1 << 62)
_PEAK = "peak-bytes"
_LEAK = "leaked-bytes"


def pytest_addoption(parser):
    group = parser.getgroup("cumemtrace", "GPU memory limits (cumemtrace)")
    group.addoption("--cumemtrace", action="store_true", default=False,
                    help="trace CUDA device memory per test; enforce limit_gpu_memory and "
                         "limit_gpu_leaks markers")
    group.addoption("--cumemtrace-output", default=None, metavar="DIR",
                    help="directory for snapshots (default: a new temporary directory); the "
                         "snapshots of tests that failed a limit are kept there")
    group.addoption("--cumemtrace-top", type=int, default=5, metavar="N",
                    help="tests with the highest GPU peak shown at the end (default 5, 0: none)")


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_gpu_memory(size): fail the test when its peak "
                            "device memory exceeds SIZE (e.g. '1 GiB'; needs --cumemtrace)")
    config.addinivalue_line("markers", "limit_gpu_leaks(size): fail the test when device memory "
                            "it allocated and did not free exceeds SIZE (needs --cumemtrace)")
    config.addinivalue_line("markers", "limit_gpu_growth_per_step(size): fail the test when its "
                            "PyTorch tensors grow by more than SIZE a step (automatic steps; "
                            "needs --cumemtrace)")
    if not config.getoption("cumemtrace"):
        return
    if not _native.is_traced():
        if os.environ.get(_REEXEC_ENV):
            raise pytest.UsageError("cumemtrace: pytest was re-executed under `cumemtrace run` "
                                    "but the preload library is not loaded")
        _reexec(config)
    config.pluginmanager.register(_Tracker(config), "cumemtrace-tracker")


def _reexec(config):
    """Replaces this process by `cumemtrace run ... python -m pytest ARGS` (as scalene does)."""
    out = config.getoption("cumemtrace_output") or tempfile.mkdtemp(prefix="cumemtrace-pytest-")
    env = dict(os.environ, **{_REEXEC_ENV: "1"})
    argv = [executable(), "run", "-q", "-o", os.path.abspath(out), "--",
            sys.executable, "-m", "pytest", *config.invocation_params.args]
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(str(config.invocation_params.dir))
    os.execve(argv[0], argv, env)


def _size_arg(marker):
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"@pytest.mark.{marker.name} takes one size, e.g. '1 GiB'")
    v = marker.args[0]
    if isinstance(v, int) and v >= 0:
        return str(v)
    if isinstance(v, str) and v.strip():
        return v.replace(" ", "")
    raise pytest.UsageError(f"@pytest.mark.{marker.name}: not a size: {v!r}")


def _format_failure(check):
    lines = [check["message"]]
    for stack in check.get("stacks", []):
        if stack.get("title"):
            lines.append("  " + stack["title"])
        lines += ["    " + f for f in stack.get("frames", [])]
    return "\n".join(lines)


class _Tracker:
    def __init__(self, config):
        self.config = config
        self.count = 0
        self.results = {}   # nodeid -> (failures, peak bytes), or (None, why not measured)
        self.peaks = []     # (peak bytes, nodeid) of every test, on the controller

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        name = "pytest:" + item.nodeid
        _native.push(name)
        try:
            yield
        finally:
            _native.pop()
            self.results[item.nodeid] = self._check(item, name)

    def _check(self, item, name):
        peak = item.get_closest_marker("limit_gpu_memory")
        leak = item.get_closest_marker("limit_gpu_leaks")
        self.count += 1
        path = _native.snapshot(f"pytest.{self.count}")
        if path is None:
            return (None, f"no snapshot was written for {item.nodeid}")
        growth = item.get_closest_marker("limit_gpu_growth_per_step")
        args = [executable(), "check", path, "--range", name, "--format", "json",
                "--max-peak-bytes", _size_arg(peak) if peak else _NO_LIMIT,
                "--max-leaked-bytes", _size_arg(leak) if leak else _NO_LIMIT]
        if growth:  # only when asked: a test without automatic steps cannot be judged and fails
            args += ["--max-growth-per-step", _size_arg(growth)]
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            return (None, f"`cumemtrace check` exited {proc.returncode}: {proc.stderr.strip()}")
        try:
            doc = json.loads(proc.stdout)
        except ValueError as e:
            return (None, f"`cumemtrace check` output is not JSON ({e})")
        failures, top = [], 0
        for f in doc.get("files", []):
            for c in f.get("checks", []):
                if c.get("check") == _PEAK and isinstance(c.get("value"), int):
                    top = max(top, c["value"])
                if c.get("status") == "fail":
                    failures.append(_format_failure(c))
        if failures:
            failures.append(f"snapshot: {path}")
        else:
            os.unlink(path)
        return (failures, top)


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when != "call" or item.nodeid not in self.results:
            return
        failures, detail = self.results.pop(item.nodeid)
        if failures is None:  # the measurement itself failed: the test cannot be judged
            if report.passed:
                report.outcome = "failed"
                report.longrepr = f"cumemtrace: could not measure GPU memory: {detail}"
            return
        report.user_properties.append(("cumemtrace_peak_bytes", detail))
        if failures and report.passed:
            report.outcome = "failed"
            report.longrepr = "cumemtrace: GPU memory limit exceeded\n" + "\n".join(failures)

    def pytest_runtest_logreport(self, report):
        # On the controller too under xdist: user_properties travel with the report.
        if report.when == "call":
            for key, value in report.user_properties:
                if key == "cumemtrace_peak_bytes":
                    self.peaks.append((value, report.nodeid))

    def pytest_terminal_summary(self, terminalreporter):
        top = self.config.getoption("cumemtrace_top")
        if top <= 0 or not self.peaks or hasattr(self.config, "workerinput"):
            return
        tr = terminalreporter
        tr.write_sep("=", f"cumemtrace: {min(top, len(self.peaks))} tests with the highest GPU peak")
        for peak, nodeid in sorted(self.peaks, key=lambda p: (-p[0], p[1]))[:top]:
            tr.write_line(f"{_human(peak):>12}  {nodeid}")


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
