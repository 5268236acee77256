"""Snapshots as Python objects, for notebooks and scripts.

A cumemtrace snapshot is JSON in PyTorch's memory-history layout (schemas/snapshot.schema.json):
`Snapshot.data` is that document as dicts and lists. Every analysis number (peaks, leaks, sites)
comes from the cumemtrace CLI's JSON output (`cumemtrace report FILE --format json`, `cumemtrace
check FILE ... --format json`), so Python shows exactly what the command line shows; nothing here
recomputes them."""
import json
import subprocess

from ._paths import executable


class CumemtraceError(Exception):
    """The CLI refused a file or an option (its one-line message)."""


def _cli_json(args, ok_codes=(0,)):
    proc = subprocess.run([executable()] + args, capture_output=True, text=True)
    if proc.returncode not in ok_codes:
        raise CumemtraceError(proc.stderr.strip() or f"cumemtrace exited {proc.returncode}")
    try:
        return json.loads(proc.stdout)
    except ValueError as e:
        raise CumemtraceError(f"cumemtrace {args[0]}: output is not JSON ({e})") from None


def _size(v):
    return str(v) if isinstance(v, int) else v.replace(" ", "")


class Snapshot:
    """One snapshot file. `data` is its JSON document; `report()` and `check()` ask the CLI."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, encoding="utf-8") as f:
            self.data = json.load(f)

    @property
    def segments(self):
        """Live allocations when the snapshot was written (PyTorch's `segments`)."""
        return self.data.get("segments", [])

    @property
    def device_traces(self):
        """Per device, the trace of events (PyTorch's `device_traces`)."""
        return self.data.get("device_traces", [])

    @property
    def tool(self):
        """cumemtrace's own section (process, reason, tag, drops), or {} for PyTorch's files."""
        return self.data.get("cumemtrace", {}) or {}

    def report(self, *options):
        """`cumemtrace report FILE --format json [options]`, parsed."""
        return _cli_json(["report", self.path, "--format", "json", *options])

    def check(self, max_peak_bytes=None, max_leaked_bytes=None, range=None, *options):
        """`cumemtrace check FILE --format json` with the given limits (bytes or "1 GiB"),
        parsed: {"ok", "failed", "passed", "files": [...]}."""
        args = ["check", self.path, "--format", "json"]
        if max_peak_bytes is not None:
            args += ["--max-peak-bytes", _size(max_peak_bytes)]
        if max_leaked_bytes is not None:
            args += ["--max-leaked-bytes", _size(max_leaked_bytes)]
        if range is not None:
            args += ["--range", range]
        return _cli_json(args + list(options), ok_codes=(0, 1))

    def __repr__(self):
        return f"Snapshot({self.path!r})"


def load(path):
    """Reads a snapshot file written by cumemtrace (or PyTorch's, converted to JSON)."""
    return Snapshot(path)
