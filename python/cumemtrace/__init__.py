"""cumemtrace: CUDA device-memory tracing from Python.

Run a program under the tracer with the command line (`cumemtrace run python train.py`); inside
it, this package names phases and asks for snapshots through the preloaded library's C API
(include/cumemtrace.h). Every call is a no-op when the program is not traced, so the calls can
stay in production code.

    import cumemtrace
    cumemtrace.mark("epoch 1")                   # a point in time
    with cumemtrace.range("forward"):             # a named phase (also a decorator)
        ...
    path = cumemtrace.snapshot("after-forward")   # writes a snapshot now, returns its path

Reading results (numbers always come from the cumemtrace CLI's own analysis, never recomputed):

    snap = cumemtrace.load("traces/python3.1234.json")
    snap.report()          # `cumemtrace report FILE --format json`, as a dict
    snap.check(max_leaked_bytes="0 B")   # any limit cumemtrace.limits() lists, by its name
"""
from ._native import is_traced, mark, range, snapshot
from ._paths import executable, preload_library
from .snapshots import CumemtraceError, Snapshot, limits, load

__all__ = ["CumemtraceError", "Snapshot", "executable", "is_traced", "limits", "load", "mark",
           "preload_library", "range", "snapshot"]
__version__ = "0.1.0"
