"""A Python program that allocates through the fake driver, so that cumemtrace's Python-aware
stacks must name load_weights() and its callers.

  py_alloc.py          ctypes.PyDLL: the driver is called with the GIL held.
  py_alloc.py nogil    ctypes.CDLL releases the GIL around the call, as PyTorch's bindings do
                       around every op: the frames must be read without the GIL. Also allocates
                       from a worker thread inside a generator, and from short-lived code
                       objects whose addresses get reused (each must keep its own name).
"""
import ctypes
import sys
import threading
import types

NOGIL = len(sys.argv) > 1 and sys.argv[1] == "nogil"
cuda = (ctypes.CDLL if NOGIL else ctypes.PyDLL)("libcuda.so.1")


def check(rc):
    if rc != 0:
        sys.exit(f"driver call failed: {rc}")


def setup():
    check(cuda.cuInit(0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))


def load_weights(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))  # PY_ALLOC_LINE
    return ptr.value


def build_model():
    return load_weights(3 << 20)  # PY_CALLER_LINE


def produce(nbytes):
    yield load_weights(nbytes)  # PY_GEN_LINE


def worker():
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))
    for _ in produce(5 << 20):  # PY_WORKER_LINE
        pass


def short_lived_code(rounds):
    """Compiles, runs and drops one function per round; prints the code object addresses so that
    the test can tell that addresses were reused."""
    for i in range(rounds):
        ns = {}
        exec(compile(f"def fn_{i}(f, n):\n    return f(n)\n", f"<gen_{i}>", "exec"), ns)
        fn = ns[f"fn_{i}"]
        print(f"code {i} {id(fn.__code__):#x}", file=sys.stderr)
        ptr = fn(load_weights, (16 + i) << 20)
        check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)))
        ns.clear()  # fn.__globals__ is ns: break the cycle so that both go at once
        del fn


def same_name_other_lines(rounds):
    """One file and function name, the same bytecode, a first line one further each round;
    compiled and dropped so that code addresses get reused: each allocation names its own line
    (line numbers are cached per code object and instruction)."""
    for i in range(rounds):
        ns = {}
        exec(compile("\n" * i + "def fn(f, n):\n    return f(n)\n", "<same>", "exec"), ns)
        print(f"same {i} {id(ns['fn'].__code__):#x}", file=sys.stderr)
        ptr = ns["fn"](load_weights, (48 + i) << 20)
        check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)))
        ns.clear()


def reannounced_address():
    """One code address named fn_a, then fn_b (announced by another thread), then fn_a again,
    with every object the reader compares at its old address: copies of one template that share
    its line table, named with the same str objects. The main thread's memo of what it read
    still holds fn_a's answer for that address and instruction when fn_a comes back: it must
    not outlive the announcement of fn_b, or the last allocation would be named fn_b."""
    template = compile("def fn(f, n):\n    return f(n)\n", "<template>", "exec").co_consts[0]
    names = {"fn_a": "<reused_a>", "fn_b": "<reused_b>"}

    def call(name, nbytes):
        fields = {"co_name": name, "co_filename": names[name]}
        if sys.version_info >= (3, 11):
            fields["co_qualname"] = name
        code = template.replace(**fields)
        print(f"reused {name} {id(code):#x}", file=sys.stderr)
        fn = types.FunctionType(code, globals())
        del code
        ptr = fn(load_weights, nbytes)
        check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)))

    def in_worker():
        ctx = ctypes.c_void_p()
        check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
        check(cuda.cuCtxSetCurrent(ctx))
        call("fn_b", 81 << 20)

    call("fn_a", 80 << 20)
    t = threading.Thread(target=in_worker, name="other")
    t.start()
    t.join()
    call("fn_a", 82 << 20)


def non_ascii_names():
    """A function and file named outside ASCII (Latin-1, 2- and 4-byte characters)."""
    ns = {}
    exec(compile("def gr\u00f6\u00dfe_\u03bb(f, n):\n    return f(n)\n", "<g\u00e9n_\U0001f600>",
                 "exec"), ns)
    return ns["gr\u00f6\u00dfe_\u03bb"](load_weights, 7 << 20)


setup()
build_model()  # MODULE_CALL_LINE
if NOGIL:
    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()
    short_lived_code(24)  # enough frames to outlast the checked-read probation
    same_name_other_lines(12)
    reannounced_address()
    non_ascii_names()
