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
  ranks_job.py oom N         as torchrun, N workers (issue 58): worker r holds 2 + r MiB, says so,
                            and waits; ranks 1 and 2 run under FAKE_CUDA_MEM_LIMIT=8 MiB. The
                            launcher tells rank 2 to allocate 1 MiB blocks until the driver
                            refuses one (it exits 1 at the OOM), then rank 1 the same, then
                            SIGKILLs the others, as torchrun ends a job whose worker failed; exits 1.
  ranks_job.py hold N       as torchrun, N workers each holding 2 + r MiB; once all hold it the
                            launcher prints "ready PID" and waits for a line on stdin, then the
                            workers end (metrics_support.py's Traced drives it).
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


OOM_LIMIT = 8 * MiB
OOM_ORDER = (2, 1)  # the ranks told to run out of memory, in this order


def driver():
    cuda = ctypes.PyDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0

    def alloc(nbytes):
        ptr = ctypes.c_uint64()
        return cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    return alloc


def holding_worker(rank, ready_fd, go_fd):
    """Holds 2 + rank MiB, says so, then waits: "o" = allocate until the OOM (exit 1); EOF =
    end."""
    alloc = driver()
    assert alloc((2 + rank) * MiB) == 0
    os.write(ready_fd, b"r")
    os.close(ready_fd)
    if os.read(go_fd, 1) == b"o":
        while alloc(MiB) == 0:
            pass
        sys.exit(f"rank {rank}: CUDA out of memory")


def holding_job(n, mode):
    """Starts N holding workers as torchrun does; returns (workers, go pipes) once all hold."""
    ready_r, ready_w = os.pipe()
    workers, go = [], []
    for rank in range(n):
        go_r, go_w = os.pipe()
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", TORCHELASTIC_RUN_ID="ranks-job")
        if mode == "oom" and rank in OOM_ORDER:
            env["FAKE_CUDA_MEM_LIMIT"] = str(OOM_LIMIT)
        workers.append(subprocess.Popen(
            [sys.executable, __file__, "holding-worker", str(ready_w), str(go_r)], env=env,
            close_fds=True, start_new_session=True, pass_fds=(ready_w, go_r)))
        os.close(go_r)
        go.append(go_w)
    os.close(ready_w)
    got = b""
    while len(got) < n:
        chunk = os.read(ready_r, n)
        if not chunk:
            sys.exit("a worker died before it held its memory")
        got += chunk
    return workers, go


def oom_job(n):
    workers, go = holding_job(n, "oom")
    for rank in OOM_ORDER:
        os.write(go[rank], b"o")
        workers[rank].wait()
    for w in workers:  # the job has failed: the others are killed, as torchrun does
        if w.poll() is None:
            w.kill()
        w.wait()
    return 1


def hold_job(n):
    workers, go = holding_job(n, "hold")
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for fd in go:
        os.close(fd)
    codes = [w.wait() for w in workers]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        fds = [int(a) for a in sys.argv[2:4]] or [-1, -1]
        allocate(int(os.environ["RANK"]), *fds)
    elif sys.argv[1] == "holding-worker":
        holding_worker(int(os.environ["RANK"]), int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "oom":
        sys.exit(oom_job(int(sys.argv[2])))
    elif sys.argv[1] == "hold":
        sys.exit(hold_job(int(sys.argv[2])))
    elif sys.argv[1] in ("torchrun", "orphans"):
        sys.exit(torchrun(int(sys.argv[2]), orphans=sys.argv[1] == "orphans"))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
