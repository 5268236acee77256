"""Python-aware stacks: Python frames (file, line, function) of the allocating code, placed at
the interpreter's frames, for a CPython process that allocates with the GIL held (ctypes.PyDLL)
and without it (ctypes.CDLL, as PyTorch's bindings do around every op)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import MiB, run_traced

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "py_alloc.py")
# CT_PYTHON picks another interpreter for the traced program (e.g. a pyenv 3.12 or 3.13).
PYTHON = os.environ.get("CT_PYTHON") or (
    "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3"))


def python_version():
    out = subprocess.run([PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout
    return tuple(int(x) for x in re.findall(r"\d+", out))


# The GIL-less reader knows CPython 3.9 to 3.14 on x86-64 (preload/stacks/cpython_layout.h); the
# interpreters of other Debian suites are tested in tests/pythons.
GILLESS = (3, 9) <= python_version() <= (3, 14) and os.uname().machine == "x86_64"
needs_gilless = pytest.mark.skipif(not GILLESS, reason="GIL-less frames: CPython 3.9-3.14 x86-64")


def line_of(marker):
    with open(SCRIPT) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def segment_frames(snap, size):
    seg = next(s for s in snap["segments"] if s["total_size"] == size)
    return seg["frames"]


def script_frames(frames):
    return [(f["name"], f["line"]) for f in frames if f["filename"] == SCRIPT]


MAIN_CHAIN = [("load_weights", line_of("PY_ALLOC_LINE")),
              ("build_model", line_of("PY_CALLER_LINE")),
              ("<module>", line_of("MODULE_CALL_LINE"))]


def test_python_frames_name_the_allocating_code(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT])
    assert p.returncode == 0, p.stderr
    (snap,) = snaps.values()
    frames = segment_frames(snap, 3 * MiB)
    assert script_frames(frames) == MAIN_CHAIN
    # Interleaved: ctypes' native frames are inside (before) the Python frames, the interpreter's
    # main loop outside (after) them.
    names = [f["name"] for f in frames]
    assert 0 < names.index("load_weights")
    assert any("ffi" in n for n in names[:names.index("load_weights")])


@needs_gilless
def test_python_frames_without_the_gil(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT, "nogil"], CUMEMTRACE_DEBUG=1)
    assert p.returncode == 0, p.stderr
    assert "are off for this process" not in p.stderr  # the layout held on every frame
    # CUMEMTRACE_DEBUG's exit line: the cached unwinder modelled every frame of the interpreter.
    assert "cumemtrace: 0 stacks fell back to _Unwind_Backtrace\n" in p.stderr, p.stderr
    (snap,) = snaps.values()
    frames = segment_frames(snap, 3 * MiB)
    assert script_frames(frames) == MAIN_CHAIN
    names = [f["name"] for f in frames]
    assert any("ffi" in n for n in names[:names.index("load_weights")])

    # A worker thread, inside a generator: the generator's frame is in the chain, and the
    # frames of threading.py's bootstrap follow the worker's.
    frames = segment_frames(snap, 5 * MiB)
    assert script_frames(frames) == [("load_weights", line_of("PY_ALLOC_LINE")),
                                     ("produce", line_of("PY_GEN_LINE")),
                                     ("worker", line_of("PY_WORKER_LINE"))]
    names = [f["name"] for f in frames]
    # Qualified names where the version has them (3.11+).
    bootstrap = "Thread._bootstrap_inner" if python_version() >= (3, 11) else "_bootstrap_inner"
    assert names.index("worker") < names.index(bootstrap)

    # Names outside ASCII are decoded from the str objects' memory into UTF-8.
    frames = segment_frames(snap, 7 * MiB)
    assert ("<g\u00e9n_\U0001f600>", "gr\u00f6\u00dfe_\u03bb", 2) in [
        (f["filename"], f["name"], f["line"]) for f in frames]


def run_reusing_code(tmp_path, tag, rounds):
    """py_alloc.py nogil, traced; its snapshot, once its output has shown that the interpreter
    reused freed code objects' memory in the `tag` rounds (the point of the tests using it)."""
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT, "nogil"])
    assert p.returncode == 0, p.stderr
    addresses = re.findall(rf"^{tag} (\d+) (0x[0-9a-f]+)$", p.stderr, re.M)
    assert len(addresses) == rounds
    assert len({a for _, a in addresses}) < len(addresses), addresses
    (snap,) = snaps.values()
    return snap


@needs_gilless
def test_reused_code_addresses_keep_their_own_names(tmp_path):
    snap = run_reusing_code(tmp_path, "code", 24)
    seen = 0
    for entry in snap["device_traces"][0]:
        if entry["action"] != "alloc" or not 16 * MiB <= entry["size"] < 40 * MiB:
            continue
        i = entry["size"] // MiB - 16
        gen = [f for f in entry["frames"] if f["filename"].startswith("<gen_")]
        assert [(f["filename"], f["name"], f["line"]) for f in gen] == [(f"<gen_{i}>", f"fn_{i}", 2)]
        seen += 1
    assert seen == 24


@needs_gilless
def test_cached_lines_follow_the_code_object(tmp_path):
    snap = run_reusing_code(tmp_path, "same", 12)
    lines = {}
    for entry in snap["device_traces"][0]:
        if entry["action"] == "alloc" and 48 * MiB <= entry["size"] < 60 * MiB:
            i = entry["size"] // MiB - 48
            lines[i] = ([f["line"] for f in entry["frames"] if f["filename"] == "<same>"],
                        [f["line"] for f in entry["frames"] if f["name"] == "load_weights"])
    # fn's first line moves down one line a round; load_weights' line is asked every round.
    assert lines == {i: ([i + 2], [line_of("PY_ALLOC_LINE")]) for i in range(12)}


@needs_gilless
def test_memo_answers_do_not_outlive_a_reannounced_address(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT, "nogil"])
    assert p.returncode == 0, p.stderr
    reused = re.findall(r"^reused (fn_\w) (0x[0-9a-f]+)$", p.stderr, re.M)
    assert [n for n, _ in reused] == ["fn_a", "fn_b", "fn_a"]
    assert len({a for _, a in reused}) == 1, reused  # the point: one address, three code objects
    (snap,) = snaps.values()
    named = {}
    for entry in snap["device_traces"][0]:
        if entry["action"] == "alloc" and 80 * MiB <= entry["size"] <= 82 * MiB:
            named[entry["size"] // MiB] = [(f["filename"], f["name"], f["line"])
                                           for f in entry["frames"]
                                           if f["filename"].startswith("<reused_")]
    assert named == {80: [("<reused_a>", "fn_a", 2)], 81: [("<reused_b>", "fn_b", 2)],
                     82: [("<reused_a>", "fn_a", 2)]}


def test_python_stacks_can_be_turned_off(tmp_path):
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT, "nogil"], CUMEMTRACE_PYTHON_STACKS=0)
    assert p.returncode == 0, p.stderr
    (snap,) = snaps.values()
    assert all(f["filename"] != SCRIPT for f in segment_frames(snap, 3 * MiB))


def test_stackless_events_of_every_thread_carry_its_named_id(tmp_path):
    """With stacks off a thread's events are written from the hook straight into the ring
    (preload/record/recorder.h: record_fields), but not its first: that one takes the general path,
    which reads the thread's id and announces its name. Here worker threads allocate first after
    the main thread has announced the device, so nothing else would have named them."""
    p, snaps = run_traced(tmp_path, [PYTHON, SCRIPT, "nogil"], ["--stack-depth", "0"])
    assert p.returncode == 0, p.stderr
    (snap,) = snaps.values()
    entries = snap["device_traces"][0]
    assert all(e.get("frames", []) == [] for e in entries)
    tids = {e["tid"] for e in entries}
    assert 0 not in tids and len(tids) >= 3, tids  # the main thread and two workers
    assert {str(t) for t in tids} <= set(snap["cumemtrace"]["threads"]), snap["cumemtrace"]["threads"]
