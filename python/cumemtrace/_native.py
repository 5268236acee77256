"""The marks API, through ctypes on the functions libcumemtrace.so exports (cumemtrace_mark,
cumemtrace_range_push, cumemtrace_range_pop, cumemtrace_snapshot; see include/cumemtrace.h).

The preload is found in the process's global symbol scope, where LD_PRELOAD put it; when it is
absent (the program is not traced) every call does nothing and snapshot() returns None. The
library is never loaded from here: loaded late it would trace nothing."""
import contextlib
import ctypes
import glob
import os
import re

_lib = None
_looked = False


def _functions():
    global _lib, _looked
    if not _looked:
        _looked = True
        try:
            scope = ctypes.CDLL(None)
            fns = {n: getattr(scope, "cumemtrace_" + n)
                   for n in ("mark", "range_push", "range_pop", "snapshot")}
        except (OSError, AttributeError):
            fns = None
        if fns:
            for n in ("mark", "range_push", "snapshot"):
                fns[n].argtypes = [ctypes.c_char_p]
                fns[n].restype = None
            fns["range_pop"].argtypes = []
            fns["range_pop"].restype = None
        _lib = fns
    return _lib


def is_traced():
    """True when this process runs under cumemtrace (the preload is loaded)."""
    return _functions() is not None


def _bytes(name):
    return name.encode("utf-8", "replace") if isinstance(name, str) else bytes(name)


def mark(name):
    """Records a point in time named NAME (an external_annotations entry of stage MARK)."""
    f = _functions()
    if f:
        f["mark"](_bytes(name))


class range(contextlib.ContextDecorator):  # noqa: A001 (the C API's name)
    """A named phase on this thread: `with cumemtrace.range("step"):` or `@cumemtrace.range("x")`.
    Records START at entry and END (same name) at exit; ranges nest."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        push(self.name)
        return self

    def __exit__(self, *exc):
        pop()
        return False


def push(name):
    """Opens a range on this thread (prefer `with range(name)`)."""
    f = _functions()
    if f:
        f["range_push"](_bytes(name))


def pop():
    """Closes this thread's innermost range."""
    f = _functions()
    if f:
        f["range_pop"]()


def file_tag(tag):
    """The tag as the collector writes it into a file name (collector/live/process_session.cpp)."""
    t = re.sub(r"[^A-Za-z0-9._-]", "_", tag[:100])
    if not t:
        return "snapshot"
    if t[0] in ".-":
        t = "_" + t[1:]
    return t


def _tagged_files(out, tag):
    """The files this process's snapshots tagged TAG may have: EXE.PID.TAG.json, and
    EXE.PID.TAG.N.json for a name taken already (the collector never overwrites)."""
    name = re.compile(rf"\.{os.getpid()}\.{re.escape(file_tag(tag))}(\.[0-9]+)?\.json$")
    pattern = os.path.join(glob.escape(out), f"*.{os.getpid()}.{glob.escape(file_tag(tag))}*.json")
    return {p for p in glob.glob(pattern) if name.search(p)}


def snapshot(tag="snapshot"):
    """Writes a snapshot of this process now, named EXE.PID.TAG.json in the run's output
    directory (EXE.PID.TAG.1.json, .2... when the name is taken), and returns the path of the file
    this call wrote once the collector wrote it (None when not traced, or when the collector did
    not answer within ~10 s)."""
    f = _functions()
    if not f:
        return None
    out = os.environ.get("CUMEMTRACE_OUTPUT", ".")
    before = _tagged_files(out, tag)
    f["snapshot"](_bytes(tag))
    new = _tagged_files(out, tag) - before
    # Another thread's snapshot of the same tag may have landed too: the newest is this call's.
    return max(new, key=os.path.getmtime) if new else None
