#!/usr/bin/env python3
"""Checks the GIL-less Python frame reader's CPython layout table (preload/cpython_layout.cpp)
against the live interpreter that runs this script, without headers: CPython 3.11 or 3.12 on
x86-64 (the GPU host's Python with torch).

Part 1 (always): reads this process's own thread state and frame chain with ctypes, at the
table's offsets, and compares with what Python reports: code object addresses with
id(sys._getframe(i).f_code), lines (through PyCode_Addr2Line, as the preload computes them)
with f_lineno, names and first lines with the code objects' attributes, str layouts with known
strings; then the same for another thread blocked in C without the GIL (time.sleep), found
through PyInterpreterState_ThreadHead/PyThreadState_Next and matched with
sys._current_frames(). One PASS/FAIL line per check.

Part 2 (with --build DIR, where torch sees a GPU): runs a small PyTorch program under
DIR/bin/cumemtrace and checks that the allocation made inside torch.empty (GIL released by
PyTorch's bindings) carries the exact Python frames, and that the reader was not turned off.

Usage (from the repository root):
  python3 tests/gpu/python_offsets_check.py                  # part 1
  python3 tests/gpu/python_offsets_check.py --build build    # parts 1 and 2
Exit status 0 when every check passed.
"""
import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f"  ({detail})" if detail else ""))
    if not ok:
        failures += 1
    return ok


def load_table(minor):
    """The table entry for 3.<minor> and the shared constants, parsed from the preload's source."""
    with open(os.path.join(ROOT, "preload", "cpython_layout.cpp")) as f:
        src = f.read()
    m = re.search(r"constexpr CpythonLayout k3%d\{(.*?)\};" % minor, src, re.S)
    if not m:
        return None, None
    table = {k: int(v) for k, v in re.findall(r"\.(\w+)\s*=\s*(-?\d+)", m.group(1))}
    with open(os.path.join(ROOT, "preload", "cpython_layout.h")) as f:
        hdr = f.read()
    consts = {}
    for name, expr in re.findall(r"inline constexpr \w+ (k\w+) = ([^;]+);", hdr):
        shift = re.fullmatch(r"1u << (\d+)", expr.strip())
        consts[name] = 1 << int(shift.group(1)) if shift else int(expr)
    return table, consts


api = ctypes.pythonapi  # calls keep the GIL
api.PyGILState_GetThisThreadState.restype = ctypes.c_void_p
api.PyCode_Addr2Line.argtypes = [ctypes.c_void_p, ctypes.c_int]
api.PyCode_Addr2Line.restype = ctypes.c_int
api.PyInterpreterState_Get.restype = ctypes.c_void_p
api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
api.PyThreadState_Next.restype = ctypes.c_void_p


def ptr(addr):
    return ctypes.c_void_p.from_address(addr).value or 0


def i32(addr):
    return ctypes.c_int32.from_address(addr).value


def i64(addr):
    return ctypes.c_int64.from_address(addr).value


def u32(addr):
    return ctypes.c_uint32.from_address(addr).value


def s8(addr):
    return ctypes.c_int8.from_address(addr).value


def walk(L, C, frame, limit=64):
    """The frame chain from `frame` as the preload reads it: [(code address, line, lasti)]."""
    out = []
    while frame and len(out) < limit:
        owner = s8(frame + L["frame_owner"])
        code = ptr(frame + L["frame_code"])
        prev_instr = ptr(frame + L["frame_prev_instr"])
        frame = ptr(frame + L["frame_previous"])
        if owner == L["owner_cstack"]:
            continue
        if ptr(code + C["kObType"]) != id(types.CodeType):
            out.append((code, None, None))  # reported by the caller
            break
        lasti = (prev_instr - (code + L["code_adaptive"])) // C["kCodeUnitBytes"]
        if owner != C["kOwnedByGenerator"] and lasti < i32(code + L["code_firsttraceable"]):
            continue  # incomplete, as sys._getframe skips it
        out.append((code, api.PyCode_Addr2Line(code, lasti * C["kCodeUnitBytes"]), lasti))
    return out


def python_chain(frame, limit=64):
    out = []
    while frame is not None and len(out) < limit:
        out.append(frame)
        frame = frame.f_back
    return out


def check_own_thread(L, C):
    # Read inline, without calling Python helpers: this frame must be the innermost one.
    ts = api.PyGILState_GetThisThreadState()
    cframe = ctypes.c_void_p.from_address(ts + L["tstate_cframe"]).value
    first = ctypes.c_void_p.from_address(cframe + L["cframe_current_frame"]).value
    here = sys._getframe(0)
    check("PyGILState_GetThisThreadState is non-null", bool(ts))
    chain = walk(L, C, first)
    frames = python_chain(here)
    check("tstate_cframe/cframe_current_frame: innermost frame is this function's",
          bool(chain) and chain[0][0] == id(here.f_code),
          f"read {chain[0][0] if chain else None:#x}, id {id(here.f_code):#x}")
    check("frame_code/frame_previous/frame_owner: chain of code objects matches sys._getframe",
          [c for c, _, _ in chain] == [id(f.f_code) for f in frames],
          f"{len(chain)} read, {len(frames)} from Python")
    # The callers are suspended at their call sites: their lines are exact.
    lines = [ln for _, ln, _ in chain[1:]]
    want = [f.f_lineno for f in frames[1:]]
    check("frame_prev_instr/code_adaptive: PyCode_Addr2Line lines match f_lineno (callers)",
          lines == want, f"read {lines}, Python {want}")
    code = here.f_code
    a = id(code)
    check("code_filename", ptr(a + L["code_filename"]) == id(code.co_filename))
    check("code_name", ptr(a + L["code_name"]) == id(code.co_name))
    check("code_firstlineno", i32(a + L["code_firstlineno"]) == code.co_firstlineno)
    check("kObSize: code length in code units", i64(a + C["kObSize"]) * 2 == len(code.co_code))
    ft = i32(a + L["code_firsttraceable"])
    check("code_firsttraceable in range", 0 <= ft < len(code.co_code) // 2, f"{ft}")
    check("kObType: ob_type of a code object is PyCode_Type",
          ptr(a + C["kObType"]) == id(types.CodeType))
    # Without the GIL, as the preload calls it: ctypes.CDLL releases the GIL around the call.
    nogil = ctypes.CDLL(None).PyGILState_GetThisThreadState
    nogil.restype = ctypes.c_void_p
    check("PyGILState_GetThisThreadState without the GIL: same thread state", nogil() == ts)


def check_strings(L, C):
    for text, kind, ascii in (("cumemtrace_ascii_name", 1, True), ("caf\xe9s_latin1", 1, False),
                              ("\u03b1\u03b2\u03b3_ucs2", 2, False),
                              ("\U0001f600_ucs4", 4, False)):
        s = "".join(list(text))  # a fresh compact str
        a = id(s)
        state = u32(a + C["kStrState"])
        got_kind = (state >> C["kStrKindShift"]) & 7
        ok = (ptr(a + C["kObType"]) == id(str) and i64(a + C["kStrLength"]) == len(s)
              and bool(state & C["kStrCompact"]) and bool(state & C["kStrAscii"]) == ascii
              and got_kind == kind)
        data = a + (L["ascii_size"] if ascii else L["compact_size"])
        enc = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        ok = ok and ctypes.string_at(data, len(s) * kind) == s.encode(enc)
        h = hash(s)
        ok = ok and i64(a + C["kStrHash"]) == h
        check(f"str layout kind {kind}{' ascii' if ascii else ''} "
              f"(ascii_size/compact_size, state bits, length, hash)", ok, repr(text))


def check_blocked_thread(L, C):
    """Another thread blocked in C with the GIL released (time.sleep), read from its state."""
    ready = threading.Event()

    def inner():
        ready.set()
        time.sleep(3)  # BLOCKED_LINE

    def outer():
        inner()

    t = threading.Thread(target=outer, name="blocked")
    t.start()
    ready.wait()
    time.sleep(0.3)
    want = python_chain(sys._current_frames()[t.ident])
    want = [(id(f.f_code), f.f_lineno) for f in want]
    found = False
    ts = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
    while ts:
        cframe = ptr(ts + L["tstate_cframe"])
        frame = ptr(cframe + L["cframe_current_frame"]) if cframe else 0
        got = [(c, ln) for c, ln, _ in walk(L, C, frame)]
        if got == want:
            found = True
        ts = api.PyThreadState_Next(ts)
    check("thread blocked without the GIL: chain and lines (innermost included) match",
          found, f"{len(want)} frames expected")
    t.join()


def check_end_to_end(build):
    try:
        import torch
    except ImportError:
        return check("part 2: torch importable", False)
    if not torch.cuda.is_available():
        return check("part 2: torch.cuda.is_available()", False)
    ct = os.path.join(build, "bin", "cumemtrace")
    if not check("part 2: collector binary exists", os.path.exists(ct), ct):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "torch_alloc.py")
        with open(prog, "w") as f:
            f.write(textwrap.dedent("""\
                import threading
                import torch

                def make(n):
                    return torch.empty(n, dtype=torch.uint8, device="cuda")  # ALLOC_LINE

                def layer(n):
                    return make(n)  # CALLER_LINE

                keep = [layer(96 << 20)]  # MODULE_LINE
                t = threading.Thread(target=lambda: keep.append(layer(160 << 20)))  # THREAD_LINE
                t.start()
                t.join()
                torch.cuda.synchronize()
                """))
        lines = {}
        with open(prog) as f:
            for i, text in enumerate(f, 1):
                for m in re.findall(r"# (\w+_LINE)", text):
                    lines[m] = i
        out = os.path.join(tmp, "traces")
        env = dict(os.environ, CUMEMTRACE_DEBUG="1")
        p = subprocess.run([ct, "run", "-o", out, "--", sys.executable, prog], env=env,
                           capture_output=True, text=True, timeout=300)
        check("part 2: traced torch program exits 0", p.returncode == 0, p.stderr[-2000:])
        check("part 2: the GIL-less reader stayed on", "are off for this process" not in p.stderr,
              "; ".join(ln for ln in p.stderr.splitlines() if "cumemtrace:" in ln)[:500])
        snaps = sorted(glob.glob(os.path.join(out, "*.json")))
        if not check("part 2: one snapshot written", len(snaps) >= 1):
            return False
        with open(snaps[-1]) as f:
            snap = json.load(f)
        for size, tail in ((96 << 20, [("<module>", lines["MODULE_LINE"])]),
                           (160 << 20, [("<lambda>", lines["THREAD_LINE"])])):
            segs = [s for s in snap["segments"] if s["total_size"] >= size]
            segs.sort(key=lambda s: s["total_size"])
            py = []
            if segs:
                py = [(fr["name"], fr["line"]) for fr in segs[0]["frames"]
                      if fr["filename"] == prog]
            want = [("make", lines["ALLOC_LINE"]), ("layer", lines["CALLER_LINE"])] + tail
            check(f"part 2: torch.empty({size >> 20} MiB) segment carries the exact Python frames",
                  py == want, f"got {py}, want {want}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", help="build directory: also run the traced PyTorch check")
    args = ap.parse_args()
    v = sys.hexversion
    print(f"CPython {sys.version.split()[0]} ({v:#x}) on {os.uname().machine}")
    version = ctypes.c_ulong.in_dll(api, "Py_Version").value
    check("Py_Version equals sys.hexversion", version == v, f"{version:#x}")
    table, consts = load_table(sys.version_info.minor)
    if sys.version_info[:2] not in ((3, 11), (3, 12)) or table is None:
        print(f"SKIP: no layout for {sys.version_info[:2]} in preload/cpython_layout.cpp")
        return 2
    print("table:", table)
    check("x86-64", os.uname().machine == "x86_64")
    check_own_thread(table, consts)
    check_strings(table, consts)
    check_blocked_thread(table, consts)
    if args.build:
        check_end_to_end(args.build)
    print("PASS" if failures == 0 else f"FAIL ({failures} checks failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
