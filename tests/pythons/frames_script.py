"""Allocates through the fake CUDA driver from known Python frames, the same on every CPython
(3.9 to 3.14), so that tests/pythons/test_pythons.py can assert exact frames (names, lines) on
each interpreter. Each scenario allocates a distinct size (MiB):

  1  nested functions                    alloc <- inner <- outer <- <module>
  2  a method (qualified name on 3.11+)  alloc <- Model.forward <- <module>
  3  a generator                         alloc <- produce <- consume <- <module>
  4  another thread                      alloc <- inner <- outer <- worker
  5  C calling back into Python: libc's qsort calls a ctypes CFUNCTYPE callback
                                         alloc <- compare <- run_qsort <- <module>
  6  C calling back into Python: sorted() with a key function
                                         alloc <- by_size <- sort_with_key <- <module>
  7, 8  a function compiled anew each time from one of two sources that differ only in their
     lines, freed after its call: its code object, frame and instruction come back at the same
     addresses, and only the lines tell them apart (the reader's memo must not answer from
     the freed one)      alloc <- remade (line 2 of its source, or 4) <- remake <- <module>

All six run four times (the frame reader checks its first reads more carefully than later ones).

  frames_script.py        ctypes.CDLL: every driver call releases the GIL (as PyTorch's ops do)
  frames_script.py gil    ctypes.PyDLL: the GIL is held during the driver calls
"""
import ctypes
import sys
import threading
import types

GIL = len(sys.argv) > 1 and sys.argv[1] == "gil"
cuda = (ctypes.PyDLL if GIL else ctypes.CDLL)("libcuda.so.1")
MiB = 1 << 20


def check(rc):
    if rc != 0:
        sys.exit(f"driver call failed: {rc}")


def use_device():
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))


def alloc(mib):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib * MiB)))  # L_ALLOC
    return ptr.value


def inner(mib):
    return alloc(mib)  # L_INNER


def outer(mib):
    return inner(mib)  # L_OUTER


class Model:
    def forward(self, mib):
        return alloc(mib)  # L_FORWARD


def produce(mib):
    yield alloc(mib)  # L_PRODUCE


def consume(mib):
    return next(produce(mib))  # L_CONSUME


def worker():
    use_device()
    outer(4)  # L_WORKER


COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
calls = []


def compare(a, b):
    if not calls:
        calls.append(alloc(5))  # L_COMPARE
    return 0


def run_qsort():
    libc = ctypes.CDLL(None)
    items = (ctypes.c_int * 2)(2, 1)
    libc.qsort(items, 2, ctypes.sizeof(ctypes.c_int), COMPARE(compare))  # L_QSORT


def by_size(mib):
    alloc(mib)  # L_BY_SIZE
    return mib


def sort_with_key():
    return sorted([6], key=by_size)  # L_SORT


# The code of `remade` from two sources that differ only in their lines; each call runs a fresh
# copy (code.replace()), freed when the call returns, so that the next copy, of either source,
# is likely made at the same address (the allocator reuses the block at once).
REMADE = [next(c for c in compile(source, __file__, "exec").co_consts if hasattr(c, "co_code"))
          for source in ("def remade(mib):\n    return alloc(mib)\n",
                         "def remade(mib):\n\n\n    return alloc(mib)\n")]
remade_at = {0: set(), 1: set()}  # the addresses each source's copies had


def remake(which, mib):
    code = REMADE[which]
    if sys.version_info >= (3, 8):  # code.replace(); 3.6 and 3.7 only check that nothing is read
        code = code.replace()
    remade = types.FunctionType(code, {"alloc": alloc})
    remade_at[which].add(id(remade.__code__))
    return remade(mib)  # L_REMAKE


check(cuda.cuInit(0))
use_device()
for _ in range(4):  # enough frames to outlast the reader's checked-read probation
    outer(1)  # L_MODULE_OUTER
    Model().forward(2)  # L_MODULE_FORWARD
    consume(3)  # L_MODULE_CONSUME
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    calls.clear()
    run_qsort()  # L_MODULE_QSORT
    sort_with_key()  # L_MODULE_SORT
    remake(0, 7)  # L_MODULE_REMAKE_A
    remake(1, 8)  # L_MODULE_REMAKE_B
print(f"remade: {len(remade_at[0] & remade_at[1])} addresses held a copy of either source")
