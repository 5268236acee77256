"""cumemtrace's sitecustomize: PyTorch's caching-allocator events without a change to the script.

`cumemtrace run` puts this folder first on PYTHONPATH (plain LD_PRELOAD users do it themselves,
see docs/pytorch.md). Python imports it at start-up; it first runs the sitecustomize that would
have run without us (the next one on sys.path), then arranges for cumemtrace_torch.attach to run
right after CUDA's lazy initialisation once the program imports torch, and for the automatic
phases (cumemtrace_phases) to be installed at that import. Nothing here may break
the program: any failure of ours is one `cumemtrace:` line on stderr.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _watch_code_objects():
    """Registers the preload's code watcher (CPython 3.12+), so that its reader of Python frames
    learns of every code object freed and may take a frame's line from its memo without
    rereading the code object (preload/stacks/python_stack.cpp: FrameAnswer). Without it (older
    Pythons, no preload, all eight watcher ids taken) every answer is checked as before."""
    if sys.version_info < (3, 12) or sys.implementation.name != "cpython":
        return
    import ctypes

    lib = ctypes.CDLL(None)
    try:
        event = lib.cumemtrace_python_code_event
        watched = lib.cumemtrace_python_code_watcher
    except AttributeError:
        return  # this process runs without our preload
    add = ctypes.pythonapi.PyCode_AddWatcher
    add.argtypes = [ctypes.c_void_p]
    add.restype = ctypes.c_int
    try:
        watcher = add(ctypes.cast(event, ctypes.c_void_p))
    except RuntimeError:  # "no more code watcher IDs available"
        return
    watched.argtypes = [ctypes.c_int]
    watched.restype = None
    watched(watcher)


try:
    _chain_next_sitecustomize()
finally:
    try:
        _watch_code_objects()
    except Exception as e:  # never stop the program
        sys.stderr.write("cumemtrace: Python code objects not watched: %s\n" % e)

    try:
        sys.path.insert(0, _HERE)
        import cumemtrace_torch

        cumemtrace_torch.install()
    except Exception as e:  # never stop the program
        sys.stderr.write("cumemtrace: PyTorch allocator capture not installed: %s\n" % e)
    finally:
        if sys.path and sys.path[0] == _HERE:
            del sys.path[0]
