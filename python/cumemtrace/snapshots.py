"""Snapshots as Python objects, for notebooks and scripts.

A cumemtrace snapshot is JSON in PyTorch's memory-history layout (schemas/snapshot.schema.json):
`Snapshot.data` is that document as dicts and lists (PyTorch's pickles through `cumemtrace
convert`), parsed only when asked for. Every analysis number (peaks, leaks, sites)
comes from the cumemtrace CLI's JSON output (`cumemtrace report FILE --format json`, `cumemtrace
check FILE ... --format json`), so Python shows exactly what the command line shows; nothing here
recomputes them."""
import json
import subprocess

from ._paths import executable


class CumemtraceError(Exception):
    """The CLI refused a file or an option (its one-line message)."""


def _cli_error(stderr, returncode):
    """The CLI's message without its terminal hint ("Run 'cumemtrace check --help' for usage."):
    a Python caller has no command line to run it on."""
    lines = [ln for ln in stderr.strip().splitlines()
             if not (ln.startswith("Run 'cumemtrace ") and "--help'" in ln)]
    return "\n".join(lines) or f"cumemtrace exited {returncode}"


def _cli_json(args, ok_codes=(0,)):
    proc = subprocess.run([executable()] + args, capture_output=True, text=True)
    if proc.returncode not in ok_codes:
        raise CumemtraceError(_cli_error(proc.stderr, proc.returncode))
    try:
        return json.loads(proc.stdout)
    except ValueError as e:
        raise CumemtraceError(f"cumemtrace {args[0]}: output is not JSON ({e})") from None


def _size(v):
    return str(v) if isinstance(v, int) else v.replace(" ", "")


def limits():
    """The limits `check` takes, by name, in the CLI's order (collector/verdicts/limits.h, the one
    list): {"max_leaked_bytes": {"name": "max_leaked_bytes", "flag": "--max-leaked-bytes",
    "check", "help", "needs", "at_end"}, ...}. A new dict each call."""
    global _limits
    if _limits is None:
        _limits = _cli_json(["check", "--list-limits", "--format", "json"])["limits"]
    return {entry["name"]: dict(entry) for entry in _limits}


_limits = None


def _limit_args(given):
    """`check` flags for keyword limits ({"max_peak_bytes": "1 GiB"}); an unknown name raises."""
    table = {name: entry["flag"] for name, entry in limits().items()}
    args = []
    for name, value in given.items():
        if name not in table:
            raise TypeError(f"unknown limit {name!r}; cumemtrace check takes {', '.join(table)}")
        if value is not None:
            args += [table[name], _size(value)]
    return args


def _first_byte(path):
    """The first byte after whitespace (and a UTF-8 byte order mark), or b"" for an empty file."""
    with open(path, "rb") as f:
        head = f.read(4096)
    return head.lstrip(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1]


class Snapshot:
    """One snapshot file, in any format the CLI reads (cumemtrace's or PyTorch's JSON, PyTorch's
    pickles). Nothing is parsed until `data` is asked for; `report()` and `check()` ask the CLI."""

    def __init__(self, path):
        self.path = str(path)
        self._data = None
        self._pickle = _first_byte(self.path) == b"\x80"

    @property
    def data(self):
        """The snapshot as its JSON document (dicts and lists), parsed on first use: a JSON file
        as it is, a pickle as `cumemtrace convert FILE --to json` writes it."""
        if self._data is None:
            if self._pickle:
                proc = subprocess.run([executable(), "convert", self.path, "--to", "json", "-o", "-"],
                                      capture_output=True)
                if proc.returncode != 0:
                    raise CumemtraceError(_cli_error(proc.stderr.decode(errors="replace"),
                                                     proc.returncode))
                text = proc.stdout
            else:
                with open(self.path, "rb") as f:
                    text = f.read()
            try:
                self._data = json.loads(text)
            except ValueError as e:
                raise CumemtraceError(f"{self.path}: not a snapshot ({e})") from None
        return self._data

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

    def check(self, *options, range=None, **given):  # noqa: A002 (the CLI's --range)
        """`cumemtrace check FILE --format json` with the given limits, by the names `limits()`
        lists (max_leaked_bytes, max_peak_bytes, max_growth...; bytes or "1 GiB"), parsed:
        {"ok", "failed", "passed", "files": [...]}. `options` are further CLI flags."""
        args = ["check", self.path, "--format", "json", *_limit_args(given)]
        if range is not None:
            args += ["--range", range]
        return _cli_json(args + list(options), ok_codes=(0, 1))

    def __repr__(self):
        return f"Snapshot({self.path!r})"


def load(path):
    """A snapshot file in any format the CLI reads (cumemtrace's or PyTorch's JSON, PyTorch's
    pickles), read lazily: see Snapshot. A file that cannot be opened raises OSError."""
    return Snapshot(path)
