"""Checks the GIL-less frame reader's layout for the CPython that runs this script (3.9 to 3.14,
x86-64 GIL builds) against the live interpreter, without headers or our binaries: the table of
preload/stacks/cpython_layout.cpp (3.9-3.12) or the _Py_DebugOffsets positions it reads (3.13+), parsed
from the source, are used with ctypes to read this thread's frame chain, its code objects and
strings, and compared with what Python reports (sys._getframe, id(), f_lineno). One PASS/FAIL
line per check; exit status 0 when all passed.

Usage: python3 layout_probe.py SOURCE_DIR
"""
import ctypes
import os
import re
import sys
import types

SOURCE = sys.argv[1]
MINOR = sys.version_info[1]
failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} 3.{MINOR} {name}" + (f"  ({detail})" if detail else ""))
    failures += not ok
    return ok


def block(src, name):
    m = re.search(r"constexpr \w+ %s\{(.*?)\};" % name, src, re.S)
    return {k: v for k, v in re.findall(r"\.(\w+)\s*=\s*([\w:-]+)", m.group(1))} if m else None


def ptr(addr):
    return ctypes.c_void_p.from_address(addr).value or 0


def i32(addr):
    return ctypes.c_int32.from_address(addr).value


def i64(addr):
    return ctypes.c_int64.from_address(addr).value


def u64(addr):
    return ctypes.c_uint64.from_address(addr).value


def s8(addr):
    return ctypes.c_int8.from_address(addr).value


with open(os.path.join(SOURCE, "preload", "stacks", "cpython_layout.cpp")) as f:
    SRC = f.read()
with open(os.path.join(SOURCE, "preload", "stacks", "cpython_layout.h")) as f:
    HDR = f.read()
C = {}
for name, expr in re.findall(r"inline constexpr \w+ (k\w+) = ([^;]+);", HDR):
    shift = re.fullmatch(r"1u << (\d+)", expr.strip())
    C[name] = 1 << int(shift.group(1)) if shift else int(expr, 0)

api = ctypes.pythonapi
api.PyGILState_GetThisThreadState.restype = ctypes.c_void_p
api.PyCode_Addr2Line.argtypes = [ctypes.c_void_p, ctypes.c_int]
api.PyCode_Addr2Line.restype = ctypes.c_int

if MINOR <= 12:
    raw = block(SRC, "k3%02d" % MINOR)
    L = {k: (C["kNoField"] if v == "kNoField" else v) for k, v in raw.items()}
    L = {k: (int(v) if isinstance(v, str) and re.fullmatch(r"-?\d+", v) else v)
         for k, v in L.items()}
    L["model"] = raw["model"].split("::")[-1]
else:
    P = {k: int(v) for k, v in block(SRC, "kDebug3%d" % MINOR).items()}
    rt = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
    check("_PyRuntime starts with the cookie", ctypes.string_at(rt, 8) == b"xdebugpy")
    check("_Py_DebugOffsets.version is sys.hexversion", u64(rt + 8) == sys.hexversion)
    check("_Py_DebugOffsets.free_threaded is 0", u64(rt + P["free_threaded"]) == 0)
    L = {"model": "kCurrentFrame", "tstate_frame": u64(rt + P["tstate_current_frame"]),
         "frame_code": u64(rt + P["frame_executable"]),
         "frame_previous": u64(rt + P["frame_previous"]),
         "frame_instr": u64(rt + P["frame_instr_ptr"]), "frame_owner": u64(rt + P["frame_owner"]),
         "owner_not_python": 3, "code_filename": u64(rt + P["code_filename"]),
         "code_name": u64(rt + P["code_qualname"]), "code_bytecode": u64(rt + P["code_adaptive"]),
         "code_linetable": u64(rt + P["code_linetable"]),
         "code_firstlineno": u64(rt + P["code_firstlineno"]),
         "ascii_size": 40, "compact_size": 56}
    if P["unicode_ascii_size"]:
        check("unicode asciiobject_size", u64(rt + P["unicode_ascii_size"]) == 40)
print(f"3.{MINOR} layout: {L}")
UNIT = C["kCodeUnitBytes"]


def walk(frame, limit=64):
    """The chain as the preload reads it: [(code address, line)]."""
    out = []
    while frame and len(out) < limit:
        code = ptr(frame + L["frame_code"])
        if MINOR >= 14:
            code &= ~3
        nxt = ptr(frame + L["frame_previous"])
        if L["model"] == "kFrameObject":
            lasti = i32(frame + L["frame_instr"])
            addrq = lasti if MINOR == 9 else lasti * UNIT
        else:
            owner = s8(frame + L["frame_owner"])
            if L["owner_not_python"] >= 0 and owner >= L["owner_not_python"]:
                frame = nxt
                continue
            lasti = (ptr(frame + L["frame_instr"]) - (code + L["code_bytecode"])) // UNIT
            if (L["model"] == "kCFrame" and owner != C["kOwnedByGenerator"]
                    and lasti < i32(code + L["code_firsttraceable"])):
                frame = nxt
                continue
            addrq = lasti * UNIT
        frame = nxt
        if ptr(code + C["kObType"]) != id(types.CodeType):
            out.append((code, None))
            break
        out.append((code, api.PyCode_Addr2Line(code, addrq)))
    return out


def chain(frame):
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def nested(depth):
    if depth:
        return nested(depth - 1)  # a caller suspended at a call: its line is exact
    # Read inline, through C calls only: this frame must be the innermost one.
    ts = api.PyGILState_GetThisThreadState()
    first = ctypes.c_void_p.from_address(ts + L["tstate_frame"]).value or 0
    if L["model"] == "kCFrame":
        first = ctypes.c_void_p.from_address(first + L["cframe_current_frame"]).value
    here = sys._getframe(0)
    read = walk(first)
    frames = chain(here)
    check("innermost frame is this function's", bool(read) and read[0][0] == id(here.f_code))
    check("chain of code objects matches sys._getframe",
          [c for c, _ in read] == [id(f.f_code) for f in frames],
          f"{len(read)} read, {len(frames)} from Python")
    check("lines of the callers match f_lineno",
          [ln for _, ln in read[1:]] == [f.f_lineno for f in frames[1:]],
          f"{[ln for _, ln in read[1:]]} vs {[f.f_lineno for f in frames[1:]]}")
    if L["model"] == "kFrameObject":
        check("PyFrameObject ob_type", ptr(first + C["kObType"]) == id(types.FrameType))
    return here.f_code


def gen():
    yield nested(2)


code = next(gen())
a = id(code)
check("code ob_type", ptr(a + C["kObType"]) == id(types.CodeType))
check("code_filename", ptr(a + L["code_filename"]) == id(code.co_filename))
name = code.co_qualname if MINOR >= 11 else code.co_name
check("code_name (qualified name from 3.11)", ptr(a + L["code_name"]) == id(name))
table = code.co_lnotab if MINOR == 9 else code.co_linetable
check("code_linetable: the line table's bytes", ptr(a + L["code_linetable"]) == id(table))
check("code_firstlineno", i32(a + L["code_firstlineno"]) == code.co_firstlineno)
if L["model"] == "kFrameObject":
    check("code_bytecode: co_code", ptr(a + L["code_bytecode"]) == id(code.co_code))
    check("bytes ob_size", i64(id(code.co_code) + C["kObSize"]) == len(code.co_code))
else:
    check("code length in code units", i64(a + C["kObSize"]) * UNIT == len(code.co_code))
for text, kind, ascii in (("cumemtrace_ascii", 1, True), ("caf\xe9s", 1, False),
                          ("\u03b1\u03b2", 2, False), ("\U0001f600x", 4, False)):
    s = "".join(list(text))
    h = hash(s)  # cached in the str from now on
    state = ctypes.c_uint32.from_address(id(s) + C["kStrState"]).value
    data = id(s) + (L["ascii_size"] if ascii else L["compact_size"])
    enc = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    check(f"str kind {kind}{' ascii' if ascii else ''}",
          i64(id(s) + C["kStrLength"]) == len(s) and bool(state & C["kStrCompact"])
          and bool(state & C["kStrAscii"]) == ascii and (state >> C["kStrKindShift"]) & 7 == kind
          and ctypes.string_at(data, len(s) * kind) == s.encode(enc)
          and i64(id(s) + C["kStrHash"]) == h)
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)
