"""cumemtrace's sitecustomize: PyTorch's caching-allocator events without a change to the script.

`cumemtrace run` puts this folder first on PYTHONPATH (plain LD_PRELOAD users do it themselves,
see docs/pytorch.md). Python imports it at start-up; it first runs the sitecustomize that would
have run without us (the next one on sys.path), then arranges for cumemtrace_torch.attach to run
right after CUDA's lazy initialisation once the program imports torch. Nothing here may break
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


try:
    _chain_next_sitecustomize()
finally:
    try:
        sys.path.insert(0, _HERE)
        import cumemtrace_torch

        cumemtrace_torch.install()
    except Exception as e:  # never stop the program
        sys.stderr.write("cumemtrace: PyTorch allocator capture not installed: %s\n" % e)
    finally:
        if sys.path and sys.path[0] == _HERE:
            del sys.path[0]
