"""Drives the fake torch (tests/fake_torch) for test_torch_blocks.py: one scenario per argv[1].
Each allocation is on its own line, so the tests can name the Python line of a request."""
import os
import signal
import sys
import time

import torch

MiB = 1 << 20
KiB = 1 << 10


def basic():
    a = torch.cuda.alloc(1000)  # LINE basic-a
    b = torch.cuda.alloc(3 * MiB)
    torch.cuda.alloc(5 * MiB + 100)
    torch.cuda.alloc(11 * MiB)
    torch.cuda.free(a, deferred=True)
    torch.cuda.free(b)  # LINE basic-free-b
    e = torch.cuda.alloc(30 * MiB)  # LINE basic-e
    torch.cuda.free(e)
    torch.cuda.empty_cache()


def expandable():
    torch.cuda.alloc(1000)
    torch.cuda.alloc(3 * MiB)
    c = torch.cuda.alloc(25 * MiB)
    torch.cuda.free(c)
    torch.cuda.empty_cache()


def expandable_split():
    torch.cuda.alloc(3 * MiB)
    b = torch.cuda.alloc(5 * MiB + 100)
    c = torch.cuda.alloc(11 * MiB)
    torch.cuda.free(b)
    torch.cuda.free(c, deferred=True)


def async_backend():
    a = torch.cuda.alloc(1000)  # the pool's first sample: reserved 2 MiB
    torch.cuda.alloc(3 * MiB)  # within the sampling interval: no sample
    torch.cuda.free(a)
    time.sleep(0.03)  # past the interval: the next allocation samples again
    e = torch.cuda.alloc(30 * MiB)  # the peak; the pool grows to 34 MiB
    torch.cuda.free(e)
    torch.cuda.empty_cache()  # trims the pool to what is in use (4 MiB); the exit sample says so


def oom():
    torch.cuda.set_memory_limit(22 * MiB)
    request_after_3_mib()


def request_after_3_mib():
    torch.cuda.alloc(3 * MiB)
    try:
        torch.cuda.alloc(30 * MiB)  # LINE oom-request
    except torch.cuda.OutOfMemoryError as e:
        print("caught:", e, flush=True)


def fraction_oom():
    # PyTorch's own call: 22 MiB of the fake's 1 GiB device; then a settings change the capture
    # records (the replay then refuses to pretend one configuration held throughout).
    torch.cuda.set_per_process_memory_fraction(22 / 1024)
    request_after_3_mib()


def settings_change():
    torch.cuda.alloc(3 * MiB)
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    torch.cuda.alloc(5 * MiB)


def graph_capture():
    torch.cuda.alloc(3 * MiB)
    g = torch.cuda.graphs.CUDAGraph()
    g.capture_begin()
    torch.cuda.alloc(5 * MiB)
    g.capture_end()


def device_full():
    # Under FAKE_CUDA_MEM_LIMIT: the driver refuses the 30 MiB segment; the allocator frees its
    # cache (nothing is free) and retries, refused again, then records its own OOM.
    request_after_3_mib()


def retry_succeeds():
    # Under FAKE_CUDA_MEM_LIMIT: the driver refuses the 30 MiB segment while the cache holds a
    # free 20 MiB one; the allocator frees it and its retry succeeds: no OOM for the program.
    a = torch.cuda.alloc(3 * MiB)
    torch.cuda.free(a)
    torch.cuda.alloc(30 * MiB)
    print("allocated", flush=True)


def bench_pause():
    import ctypes
    pause = ctypes.CDLL(None).cumemtrace_bench_pause_torch_blocks
    pause.argtypes = [ctypes.c_int]
    torch.cuda.alloc(1000)
    pause(1)
    torch.cuda.alloc(3 * MiB)  # a segment and a block, neither recorded
    torch.cuda.alloc(2000)
    pause(0)
    torch.cuda.alloc(3000)


def engine_thread():
    a = torch.cuda.alloc(1000)  # LINE engine-thread-python
    # Blocks of the same segment on another thread: two by a node, then one outside any node.
    b, c, d = torch.cuda.allocs_on_engine_thread(2000)
    torch.cuda.free(d)
    torch.cuda.free(c)
    torch.cuda.free(b)
    torch.cuda.free(a)


def engine_thread_from_driver():
    # A node that allocates from the driver's pool itself, not through PyTorch's allocator.
    a = torch.cuda.alloc(1000)
    for p in torch.cuda.allocs_on_engine_thread(2000, from_driver=True):
        torch.cuda.free(p)
    torch.cuda.free(a)


def engine_thread_from_driver_sampled():
    # The same node, its engine thread making the process's first pool allocation: the pool is
    # sampled right then, on that thread, inside the node (pool_sampler.h).
    for p in torch.cuda.allocs_on_engine_thread(2000, from_driver=True):
        torch.cuda.free(p)


def engine_thread_unknown_torch():
    # A torch whose libtorch_cpu.so has no such Engine::evaluate_function.
    sys.modules["cumemtrace_torch"].ENGINE_EVALUATE = "_ZN5torch8autograd6Engine14not_in_this_oneEv"
    engine_thread()


def engine_thread_unknown_nodes():
    # A torch whose libtorch_cpu.so has no get_current_node().
    sys.modules["cumemtrace_torch"].GET_CURRENT_NODE = "_ZN5torch8autograd13not_this_nodeEv"
    engine_thread()


def engine_thread_backward():
    # Training steps as the automatic phases mark them (the fake torch has no nn or autograd for
    # cumemtrace_phases to hook: the marks and the lending are made here as it makes them), with
    # a backward whose engine thread allocates and keeps 3 blocks a step (two by a node, one
    # outside any node): a leak of the backward pass. From the second step on, the backward
    # lends this line's frames to the engine thread, as cumemtrace_phases does; the first step's
    # backward lends none (an older Python side), so its blocks have the node alone.
    import ctypes
    lib = ctypes.PyDLL(None)  # the GIL held, as cumemtrace_phases' sink calls
    push, pop, mark = lib.cumemtrace_range_push, lib.cumemtrace_range_pop, lib.cumemtrace_mark
    lend = lib.cumemtrace_torch_backward_caller
    lend.argtypes, lend.restype = [ctypes.c_int], ctypes.c_int

    def backward(step):  # as cumemtrace_phases' wrapper of autograd: lends its caller's frames
        push(b"auto:backward")
        if step and lend(1) < 2:  # this frame skipped: the scenario's line and <module>
            sys.exit("backward_caller lent no frames")
        try:
            return torch.cuda.allocs_on_engine_thread(2000)
        finally:
            lend(-1)
            pop()

    kept = []
    for step in range(int(os.environ.get("BACKWARD_STEPS", "5"))):
        push(b"auto:forward")
        x = torch.cuda.alloc(4096)
        pop()
        kept += backward(step)  # LINE backward-call
        torch.cuda.free(x)
        push(b"auto:optimizer")
        pop()
        mark(b"auto:step")


def backward_by_module():
    # A forward through module calls that makes autograd nodes (as PyTorch's ops do), then a
    # backward whose engine thread (no Python) evaluates them, each allocating and keeping its
    # bytes. The fake torch has no nn for cumemtrace_modules to read, so what it tells the preload
    # is told here as it tells it: Module._wrapped_call_impl's code (the fake's, whose first local
    # is `self`, as torch's), torch's node layout, and the module table. Bytes name the
    # module whose forward made the node: a (1 KiB, 2 KiB), Net itself between its children
    # (5 KiB), b.inner (3 KiB), and the loss outside any module (7 KiB).
    import ctypes
    lib = ctypes.PyDLL(None)
    push, pop, mark = lib.cumemtrace_range_push, lib.cumemtrace_range_pop, lib.cumemtrace_mark
    lend = lib.cumemtrace_torch_backward_caller
    lend.argtypes, lend.restype = [ctypes.c_int], ctypes.c_int
    lib.cumemtrace_torch_module_code.argtypes = [ctypes.c_void_p]
    lib.cumemtrace_torch_node_layout.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    names = lib.cumemtrace_torch_names
    names.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64]

    from torch.module_call import Module

    class Op(Module):
        def __init__(self, *sizes):
            self.sizes = sizes

        def forward(self):
            for n in self.sizes:
                torch.cuda.make_node(n)

    class Outer(Module):
        def __init__(self):
            self.inner = Op(3 * KiB)

        def forward(self):
            self.inner()

    class Net(Module):
        def __init__(self):
            self.a, self.b = Op(1 * KiB, 2 * KiB), Outer()

        def forward(self):
            self.a()
            torch.cuda.make_node(5 * KiB)  # Net's own op, between its children
            self.b()

    def backward():  # as cumemtrace_phases' wrapper of autograd: lends its caller's frames
        push(b"auto:backward")
        if lend(1) < 2:  # this frame skipped: the scenario's line and <module>
            sys.exit("backward_caller lent no frames")
        try:
            return torch.cuda.backward_of_nodes()
        finally:
            lend(-1)
            pop()

    if lib.cumemtrace_torch_module_code(id(Module._wrapped_call_impl.__code__)) != 0:
        sys.exit("module code refused")
    if lib.cumemtrace_torch_node_layout(24, 48, torch.cuda.current_thread_id_address) != 0:
        sys.exit("node layout refused")
    net = Net()
    table = "".join("%x %s\n" % (id(m), n) for m, n in (
        (net, "Net"), (net.a, "a"), (net.b, "b"), (net.b.inner, "b.inner"))).encode()
    names(0, 1, table, len(table))
    torch.cuda.alloc(4096)  # the process's first block: CUDA is initialised before the steps
    kept = []
    for step in range(2):
        push(b"auto:forward")
        net()
        pop()
        push(b"auto:loss")
        torch.cuda.make_node(7 * KiB)  # the loss: no module
        pop()
        kept += backward()  # LINE by-module-backward
        push(b"auto:optimizer")
        pop()
        mark(b"auto:step")


def kill():
    torch.cuda.alloc(1000)
    torch.cuda.alloc(3 * MiB)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    {"basic": basic, "expandable": expandable, "expandable_split": expandable_split,
     "async_backend": async_backend, "oom": oom, "device_full": device_full,
     "fraction_oom": fraction_oom, "settings_change": settings_change,
     "graph_capture": graph_capture,
     "retry_succeeds": retry_succeeds, "kill": kill, "engine_thread": engine_thread,
     "engine_thread_unknown_torch": engine_thread_unknown_torch,
     "engine_thread_unknown_nodes": engine_thread_unknown_nodes,
     "engine_thread_from_driver": engine_thread_from_driver,
     "engine_thread_from_driver_sampled": engine_thread_from_driver_sampled,
     "engine_thread_backward": engine_thread_backward,
     "backward_by_module": backward_by_module,
     "bench_pause": bench_pause}[sys.argv[1]]()
