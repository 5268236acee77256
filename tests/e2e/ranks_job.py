"""A multi-process job on the fake driver, started the ways launchers start their workers, for
test_ranks.py. Every worker keeps 2 MiB at exit; rank 1 keeps 1 MiB more (the skew).

  ranks_job.py torchrun N   as torchrun does: N workers, each in a new session, every inherited
                            descriptor closed (close_fds), the environment kept plus RANK,
                            LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and TORCHELASTIC_RUN_ID; waits
                            for them and exits with the first failure's status.
  ranks_job.py orphans N    as torchrun, but the launcher exits once every worker has made its
                            first allocation (each says so on a pipe), and the workers finish only
                            after it is gone (EOF on a pipe it held): `run`'s direct child is
                            reaped while its traced workers still run.
The launcher itself never touches CUDA. torch.multiprocessing.spawn's workers, whose rank only
torch.distributed knows, run on the real torch: tests/real_torch/test_ranks.py.
"""
import ctypes
import os
import subprocess
import sys

MiB = 1 << 20


def allocate(rank, ready_fd=-1, launcher_gone_fd=-1):
    cuda = ctypes.PyDLL("libcuda.so.1")

    def check(rc):
        if rc != 0:
            sys.exit(f"driver call failed: {rc}")

    check(cuda.cuInit(0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    check(cuda.cuCtxSetCurrent(ctx))

    def alloc(nbytes):
        ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
        return ptr

    scratch = alloc(4 * MiB)
    if ready_fd >= 0:  # traced now: tell the launcher, wait until it has exited
        os.write(ready_fd, b"r")
        os.close(ready_fd)
        while os.read(launcher_gone_fd, 1):
            pass
    alloc(2 * MiB)  # kept by every rank
    if rank == 1:
        alloc(MiB)  # the skew
    check(cuda.cuMemFree_v2(scratch))


def torchrun(n, orphans=False):
    ready_r, ready_w = os.pipe()
    gone_r, gone_w = os.pipe()
    workers = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", TORCHELASTIC_RUN_ID="ranks-job")
        args = [sys.executable, __file__, "worker"]
        if orphans:
            args += [str(ready_w), str(gone_r)]
        workers.append(subprocess.Popen(args, env=env, close_fds=True, start_new_session=True,
                                        pass_fds=(ready_w, gone_r) if orphans else ()))
    if orphans:
        os.close(ready_w)
        got = b""
        while len(got) < n:
            chunk = os.read(ready_r, n)
            if not chunk:
                return 3  # a worker died before it was traced
            got += chunk
        return 0  # exits holding gone_w: its end tells the workers to finish
    codes = [w.wait() for w in workers]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        fds = [int(a) for a in sys.argv[2:4]] or [-1, -1]
        allocate(int(os.environ["RANK"]), *fds)
    elif sys.argv[1] in ("torchrun", "orphans"):
        sys.exit(torchrun(int(sys.argv[2]), orphans=sys.argv[1] == "orphans"))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
