"""pytest plugin (entry point pytest11 `cumemtrace`): gate tests on GPU memory.

    pytest --cumemtrace
    @pytest.mark.limit_gpu_memory("1 GiB")   the test's own peak: the most device memory it
                                             allocated that was live at one moment
    @pytest.mark.limit_gpu_leaks("0 B")      device memory allocated during the test and still
                                             allocated when it ends
    @pytest.mark.limit_gpu_growth_per_step("1 MiB")
                                             a PyTorch test's tensors kept from one automatic
                                             step to the next (after a warm-up; the steps that
                                             end within the test; fewer than 3: cannot be judged,
                                             so the test fails)

Each test's numbers are its own: memory live when it started (what earlier tests leaked, what
fixtures hold) and PyTorch's cache are no test's, so a verdict does not depend on the order of
the tests or on pytest-xdist's `-n`. Sizes are the CLI's ("1.5 GiB", "12MiB", "4096"; "MB" is
10**6 bytes, where pytest-memray's "MB" is 2**20); a marker with a bad size or argument is an
error when the tests are collected, naming the test.

Mechanism: when pytest itself is not traced, the plugin re-executes it under `cumemtrace run`
(so the preload is in place before any CUDA library loads; pytest-xdist workers inherit it).
Around each test's call phase it opens a range named after the test id, then asks the preload
for a snapshot and runs `cumemtrace check SNAPSHOT --range pytest:TESTID` with the markers'
limits (`_LIMITS`) and `--format json`: the engine's own numbers, sites and stacks (range.h says
what a range's peak and leaks are). A limit broken fails the test with that text, its stacks cut
below the test function; the session ends with the tests of highest peak.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from . import _native
from ._paths import executable
from .snapshots import limits

_REEXEC_ENV = "CUMEMTRACE_PYTEST_REEXEC"
_NO_LIMIT = str(1 << 62)
_PEAK = "peak-bytes"
_LEAK = "leaked-bytes"
# The markers, each with the limit it sets (by its name in `check`'s one table of limits,
# collector/verdicts/limits.h, which gives its flag) and what it means for a test; the one place
# the plugin names them (a marker absent from a test: no limit, or for growth, not judged).
_LIMITS = {
    "limit_gpu_memory": ("max_peak_bytes", "fail the test when its own peak (the most device "
                         "memory it allocated that was live at one moment) exceeds SIZE"),
    "limit_gpu_leaks": ("max_leaked_bytes", "fail the test when device memory it allocated "
                        "and did not free exceeds SIZE"),
    "limit_gpu_growth_per_step": ("max_growth_per_step", "fail the test when its PyTorch "
                                  "tensors grow by more than SIZE a step (automatic steps)"),
}


def _flag(limit):
    """The `check` flag of a limit of the table (the CLI's list: snapshots.limits())."""
    return limits()[limit]["flag"]
_FRAME = re.compile(r"^at (.*) \((.*):(\d+)\)$")  # a stack line of check's JSON


def pytest_addoption(parser):
    group = parser.getgroup("cumemtrace", "GPU memory limits (cumemtrace)")
    group.addoption("--cumemtrace", action="store_true", default=False,
                    help="trace CUDA device memory per test; enforce the limit_gpu_* markers")
    group.addoption("--cumemtrace-output", default=None, metavar="DIR",
                    help="directory for snapshots (default: a new temporary directory); the "
                         "snapshots of tests that failed a limit are kept there")
    group.addoption("--cumemtrace-top", type=int, default=5, metavar="N",
                    help="tests with the highest GPU peak shown at the end (default 5, 0: none)")
    group.addoption("--cumemtrace-allow-no-cuda", action="store_true", default=False,
                    help="a test with a limit_gpu_* marker that made no CUDA allocation (a run "
                         "on a machine without a GPU) passes instead of failing as not judged")


def pytest_configure(config):
    for name, (_, what) in _LIMITS.items():
        config.addinivalue_line("markers", f"{name}(size): {what} (e.g. '1 GiB'; needs "
                                "--cumemtrace)")
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


def _limit_args(item):
    """The check limits of the item's markers: [(flag, size)]. Raises ValueError naming
    what is wrong with a marker (its arguments; its size is judged by the CLI, _check_sizes)."""
    args = []
    for name, (limit, _) in _LIMITS.items():
        marker = item.get_closest_marker(name)
        if marker is None:
            continue
        v = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
        if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, int) and v < 0):
            raise ValueError(f"@pytest.mark.{name}{_call_text(marker)}: takes one size, "
                             "e.g. '1 GiB'")
        args.append((_flag(limit), str(v)))
    return args


def _call_text(marker):
    parts = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _size_problem(size):
    """None when `cumemtrace check` takes SIZE, else its own line saying why not (the CLI's
    size rule, snap::parse_bytes, is the one rule)."""
    proc = subprocess.run([executable(), "check", "--max-peak-bytes", size],
                          capture_output=True, text=True)
    line = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else ""
    prefix = "cumemtrace check: --max-peak-bytes: "
    return line[len(prefix):] if line.startswith(prefix) else None


def _cut_at_test(frames, item):
    """The stack's frames up to the test function's own (as pytest-memray shows them): the
    frames of pytest and pluggy that called it are noise. Unchanged when it is not there."""
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is None:
        return frames
    names = {code.co_name, getattr(code, "co_qualname", code.co_name)}
    for i, f in enumerate(frames):
        m = _FRAME.match(f)
        if m and m.group(1) in names and m.group(2) == code.co_filename:
            return frames[:i + 1]
    return frames


# check's hint names its own flag; a pytest user's is the plugin's option.
_CHECK_HINT = "(pass --allow-no-cuda if that is expected)"
_PLUGIN_HINT = "(pass --cumemtrace-allow-no-cuda to pytest if that is expected)"


def _format_failure(check, item):
    message = check["message"]
    if check.get("check") == "cuda-used":
        message = message.replace(_CHECK_HINT, _PLUGIN_HINT)
    lines = [message]
    for stack in check.get("stacks", []):
        if stack.get("title"):
            lines.append("  " + stack["title"])
        lines += ["    " + f for f in _cut_at_test(stack.get("frames", []), item)]
    return "\n".join(lines)


class _Tracker:
    def __init__(self, config):
        self.config = config
        self.count = 0
        self.limits = {}    # nodeid -> [(check flag, size)] of its markers (from collection)
        self.results = {}   # nodeid -> (failures, {check: bytes}), or (None, why not measured)
        self.peaks = []     # (peak bytes, nodeid) of every test, on the controller

    def pytest_collection_modifyitems(self, items):
        """Markers are judged here, not when the test runs: every bad one, naming its test."""
        problems, sizes = [], {}
        for item in items:
            try:
                self.limits[item.nodeid] = args = _limit_args(item)
            except ValueError as e:
                problems.append(f"{item.nodeid}: {e}")
                continue
            for flag, size in args:
                sizes.setdefault(size, []).append((item.nodeid, flag))
        for size, users in sizes.items():
            why = _size_problem(size)
            if why:
                marker = {_flag(limit): name for name, (limit, _) in _LIMITS.items()}
                problems += [f"{nodeid}: @pytest.mark.{marker[flag]}({size!r}): {why}"
                             for nodeid, flag in users]
        if problems:
            raise pytest.UsageError("cumemtrace: bad GPU memory markers:\n  "
                                    + "\n  ".join(sorted(problems)))

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
        self.count += 1
        path = _native.snapshot(f"pytest.{self.count}")
        if path is None:
            return (None, f"no snapshot was written for {item.nodeid}")
        given = dict(self.limits.get(item.nodeid, []))
        args = [executable(), "check", path, "--range", name, "--format", "json"]
        # A test that made no CUDA allocation judges nothing: with a marker it fails as not
        # judged (check's verdict on its range, the same whatever ran before it), without one it
        # only goes unmeasured.
        if not given or self.config.getoption("cumemtrace_allow_no_cuda"):
            args.append("--allow-no-cuda")
        # Peak and leaks are always measured (the summary, the report's properties); growth only
        # when asked: a test without automatic steps cannot be judged and fails.
        for flag in (_flag("max_peak_bytes"), _flag("max_leaked_bytes")):
            args += [flag, given.pop(flag, _NO_LIMIT)]
        for flag, size in given.items():
            args += [flag, size]
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            return (None, f"`cumemtrace check` exited {proc.returncode}: {proc.stderr.strip()}")
        try:
            doc = json.loads(proc.stdout)
        except ValueError as e:
            return (None, f"`cumemtrace check` output is not JSON ({e})")
        failures, measured, exceeded = [], {_PEAK: 0, _LEAK: 0}, False
        for f in doc.get("files", []):
            for c in f.get("checks", []):
                if c.get("check") in measured and isinstance(c.get("value"), int):
                    measured[c["check"]] = max(measured[c["check"]], c["value"])
                if c.get("status") == "fail":
                    failures.append(_format_failure(c, item))
                    exceeded = exceeded or c.get("judged", True)
        if failures:
            # The heading says what happened: a limit exceeded, or only limits that could not be
            # judged (no automatic steps for a growth limit, say), which fail all the same.
            failures.insert(0, "cumemtrace: GPU memory limit exceeded" if exceeded else
                            "cumemtrace: GPU memory limit could not be judged")
            failures.append(f"snapshot: {path}")
        else:
            os.unlink(path)
        return (failures, measured)

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
        # On the call's report (the summary below) and the item's (its teardown report, which
        # --junitxml reads them from).
        measured = [("cumemtrace_peak_bytes", detail[_PEAK]),
                    ("cumemtrace_leaked_bytes", detail[_LEAK])]
        report.user_properties += measured
        item.user_properties += measured
        if failures and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(failures)

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
            tr.write_line(f"{format_bytes(peak):>12}  {nodeid}")


def format_bytes(n):
    """The project's one size rule (collector/snapshot/size_format.h): binary units, three
    significant digits, the unit chosen on the rounded value ("1.50 GiB", "12.0 MiB", "512 B")."""
    if n < 1024:
        return f"{n} B"
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    v, u = float(n), 0
    while v >= 1023.5 and u < len(units) - 1:
        v /= 1024
        u += 1
    decimals = 0 if v >= 99.95 else 1 if v >= 9.995 else 2
    return f"{v:.{decimals}f} {units[u]}"
