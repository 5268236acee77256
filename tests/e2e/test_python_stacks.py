"""Python-aware stacks: Python frames (file, line, function) of the allocating code, placed at
the interpreter's frames, for a CPython process that allocates while holding the GIL."""
import os
import shutil

import pytest

from conftest import MiB, run_traced

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "py_alloc.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")


def line_of(marker):
    with open(SCRIPT) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def frames_of_allocation(snap):
    seg = next(s for s in snap["segments"] if s["total_size"] == 3 * MiB)
    return seg["frames"]


def test_python_frames_name_the_allocating_code(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT])
    assert p.returncode == 0, p.stderr
    (snap,) = snaps.values()
    frames = frames_of_allocation(snap)
    py = [(f["name"], f["line"]) for f in frames if f["filename"] == SCRIPT]
    assert py == [("load_weights", line_of("PY_ALLOC_LINE")),
                  ("build_model", line_of("PY_CALLER_LINE")),
                  ("<module>", line_of("MODULE_CALL_LINE"))]
    # Interleaved: ctypes' native frames are inside (before) the Python frames, the interpreter's
    # main loop outside (after) them.
    names = [f["name"] for f in frames]
    assert 0 < names.index("load_weights")
    assert any("ffi" in n for n in names[:names.index("load_weights")])


def test_python_stacks_can_be_turned_off(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT], CUMEMTRACE_PYTHON_STACKS=0)
    assert p.returncode == 0, p.stderr
    (snap,) = snaps.values()
    assert all(f["filename"] != SCRIPT for f in frames_of_allocation(snap))
