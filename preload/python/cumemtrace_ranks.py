"""The rank of a process that only PyTorch knows, for the snapshot's tool section and file name.

torchrun, SLURM and MPI put a worker's rank in its environment, which the preload reads when
tracing starts. torch.multiprocessing.spawn does not: its workers learn their rank as an argument
and tell it to torch.distributed.init_process_group. Installed by cumemtrace_torch when torch is
imported, this wraps init_process_group: after it returns, the group's rank and world size (and
LOCAL_RANK when the environment has it) go to the preload's cumemtrace_rank_info as lines of
key=value (torch.distributed.rank=1), which the collector adds to the tool section's `rank` map
(collector/analysis/rank_identity.h reads them first). Errors: the wrapped call's own result and
exceptions are the program's, untouched; a failure of ours is one `cumemtrace:` line.
"""
import ctypes
import functools
import os
import sys


def _rank_text(dist):
    lines = ["torch.distributed.rank=%d" % dist.get_rank(),
             "torch.distributed.world_size=%d" % dist.get_world_size()]
    local = os.environ.get("LOCAL_RANK", "")
    if local.isdigit():
        lines.append("torch.distributed.local_rank=%s" % local)
    return "\n".join(lines)


def _report(dist, send, err):
    try:
        if dist.is_initialized():
            send(_rank_text(dist).encode())
    except Exception as e:  # never into the program
        err.write("cumemtrace: the process group's rank not recorded: %s\n"
                  % (str(e) or type(e).__name__))


def wrap(dist, send, err=None):
    """Wraps dist.init_process_group so that `send(bytes)` gets the rank once the group exists;
    once per module, whoever installs it again."""
    err = err or sys.stderr
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "_cumemtrace_ranks", False):
        return
    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        _report(dist, send, err)
        return result

    init_process_group._cumemtrace_ranks = True
    dist.init_process_group = init_process_group
    if getattr(dist, "is_available", lambda: True)():
        _report(dist, send, err)  # a group made before torch was watched (not usual)


def install(torch):
    """Wraps torch.distributed's init_process_group when this process is traced; never raises."""
    try:
        fn = ctypes.PyDLL(None).cumemtrace_rank_info
        fn.argtypes, fn.restype = [ctypes.c_char_p], ctypes.c_int
        dist = getattr(torch, "distributed", None)
        if dist is not None:
            wrap(dist, fn)
    except AttributeError:
        return  # no preload, or one without cumemtrace_rank_info
    except Exception as e:
        sys.stderr.write("cumemtrace: ranks of torch.distributed not recorded: %s\n"
                         % (str(e) or type(e).__name__))
