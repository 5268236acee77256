"""End-to-end, issue 7 (security): the ring and the control channel are out of other users'
reach, and setuid/setgid programs (AT_SECURE) stay untraced. Another user is `nobody` through
setpriv, so these tests need root (CI runs as root) and skip otherwise."""
import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

import pytest

from conftest import CT, FAKE_DIR, PRELOAD, base_env, device_summary, prog, snapshots
from test_processes_and_faults import DEADLOCK_GUARD_S, read_line, ring_inodes

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root and setpriv to act as another user")


def as_nobody(cmd):
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]


@pytest.fixture
def shared_dir():
    """A directory `nobody` can reach and write (pytest's tmp_path is root's alone)."""
    d = tempfile.mkdtemp(prefix="ct-security-")
    os.chmod(d, 0o755)
    out = os.path.join(d, "traces")
    os.mkdir(out)
    os.chmod(out, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def named_ipc():
    """Everything in the shared namespaces that carries our name: files in /tmp and /dev/shm,
    and bound Unix socket paths."""
    names = {p for d in ("/tmp", "/dev/shm") for p in glob.glob(os.path.join(d, "*cumemtrace*"))}
    with open("/proc/net/unix") as f:
        names |= {line.split()[7] for line in f if len(line.split()) > 7 and "cumemtrace" in line}
    return names


def not_other_runs(paths, run_pid):
    """`paths` without other `run`s' rendezvous directories and sockets (/tmp/cumemtrace-PID-X,
    PID not `run_pid`): tests run in parallel, and another test's `run` may be alive meanwhile."""
    other = re.compile(r"/cumemtrace-(\d+)-[^/]*")
    return {path for path in paths
            if not (m := other.search(path)) or int(m.group(1)) == run_pid}


def socket_paths(pid):
    """Bound paths of the Unix sockets process `pid` holds ('' for unnamed ones)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    paths = []
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[6] in inodes:
                paths.append(parts[7] if len(parts) > 7 else "")
    return paths


PROBE = r"""
import errno, os, sys
pid, span = sys.argv[1], sys.argv[2]
def attempt(what):
    try:
        what()
        return "allowed"
    except OSError as e:
        return errno.errorcode[e.errno]
def opened(path, flags):
    return lambda: os.close(os.open(path, flags))
print(attempt(opened(f"/proc/{pid}/map_files/{span}", os.O_RDWR)),
      attempt(opened(f"/proc/{pid}/mem", os.O_RDWR)),
      attempt(opened(f"/proc/{pid}/mem", os.O_RDONLY)),
      attempt(lambda: os.listdir(f"/proc/{pid}/fd")))
"""

CONNECT = r"""
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(sys.argv[1])
    print("allowed")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def test_ring_and_control_channel_are_out_of_other_users_reach(tmp_path):
    """While a traced program runs, the ring exists only as a shared mapping of an unnamed memfd
    (its descriptor already closed) and the control channel as unnamed socketpairs plus `run`'s
    rendezvous socket (collector/live/rendezvous.h) in a directory of mode 0700, which `nobody`
    cannot connect to; nothing else in /tmp, /dev/shm or the Unix socket namespace, and `nobody`
    can neither open the mapping nor the process's memory or descriptors. Root can open the same
    mapping (the probe works). When `run` returns, the rendezvous is gone."""
    before = named_ipc()
    out = tmp_path / "traces"
    p = subprocess.Popen([CT, "run", "-o", str(out), "--", prog("ct_static_like"), "burst", "10"],
                         env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        ready = read_line(p.stdout, DEADLOCK_GUARD_S)
        target = int(ready.split()[1])
        with open(f"/proc/{target}/maps") as f:
            rings = [line.split() for line in f if "/memfd:cumemtrace-ring" in line]
        assert len(rings) == 1 and rings[0][1] == "rw-s", rings
        span = rings[0][0]
        assert len(ring_inodes(p.pid)) == 1  # the collector (`run` itself) maps the same ring
        fds = [os.readlink(f"/proc/{target}/fd/{fd}") for fd in os.listdir(f"/proc/{target}/fd")]
        assert not [link for link in fds if "memfd:" in link], fds  # handed over, then closed
        new = not_other_runs(named_ipc() - before, p.pid)
        directory = [path for path in new if os.path.isdir(path)]
        assert len(directory) == 1 and os.stat(directory[0]).st_mode & 0o777 == 0o700, new
        rendezvous = os.path.join(directory[0], "control")
        assert new == {directory[0], rendezvous}
        paths = socket_paths(target)
        assert paths and all(path == "" for path in paths), (target, paths)
        assert [path for path in socket_paths(p.pid) if path] == [rendezvous]
        connect = subprocess.run(as_nobody([sys.executable, "-c", CONNECT, rendezvous]),
                                 capture_output=True, text=True, timeout=DEADLOCK_GUARD_S)
        assert connect.stdout.split() == ["EACCES"], connect.stderr
        # Root reaches the mapping: the probe's path is right.
        os.close(os.open(f"/proc/{target}/map_files/{span}", os.O_RDWR))
        probe = subprocess.run(as_nobody([sys.executable, "-c", PROBE, str(target), span]),
                               capture_output=True, text=True, timeout=DEADLOCK_GUARD_S)
        assert probe.returncode == 0, probe.stderr
        results = probe.stdout.split()
        assert len(results) == 4 and all(r in ("EACCES", "EPERM") for r in results), results
        p.stdin.write(b"go\n")
        p.stdin.flush()
        _, err = p.communicate(timeout=DEADLOCK_GUARD_S)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err
    assert not_other_runs(named_ipc(), p.pid) == not_other_runs(before, p.pid)
    snap, = snapshots(out).values()
    d0 = device_summary(snap, 0)  # burst 10: 1 MiB, then 10 × 4096, all freed
    assert (d0["allocations"], d0["frees"], d0["live_bytes"]) == (11, 11, 0)
    assert (os.stat(next(iter(glob.glob(str(out / "*.json"))))).st_mode & 0o002) == 0


@pytest.mark.parametrize("mode", ["setuid", "setgid"])
def test_setuid_and_setgid_programs_stay_untraced(shared_dir, mode):
    """A setuid/setgid program run by another user has AT_SECURE set; the loader then ignores
    LD_PRELOAD, and a program that loads the preload itself is not traced either: its allocation
    works, no collector starts, no snapshot is written. The same program without the bit, run by
    the same user, is traced (so the test can see tracing)."""
    program = os.path.join(shared_dir, "ct_dlopen_preload")
    shutil.copy(prog("ct_dlopen_preload"), program)
    os.chown(program, 0, 0)
    os.chmod(program, 0o755)
    env = base_env(CUMEMTRACE_OUTPUT=os.path.join(shared_dir, "traces"))
    args = [program, os.path.join(FAKE_DIR, "libcuda.so.1"), PRELOAD]
    out = os.path.join(shared_dir, "traces")

    plain = subprocess.run(as_nobody(args), env=env, capture_output=True, text=True,
                           timeout=DEADLOCK_GUARD_S)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "at_secure 0 allocated\n"
    # The detached collector held the program's stdout and stderr until it wrote its file and
    # exited: subprocess.run returned after that.
    files = glob.glob(os.path.join(out, "*.json"))
    assert len(files) == 1, "the program without the bit was not traced"
    for f in os.listdir(out):  # the snapshot and its summary
        os.unlink(os.path.join(out, f))

    os.chmod(program, 0o755 | (stat.S_ISUID if mode == "setuid" else stat.S_ISGID))
    secure = subprocess.run(as_nobody(args), env=env, capture_output=True, text=True,
                            timeout=DEADLOCK_GUARD_S)
    if secure.stdout == "at_secure 0 allocated\n":
        pytest.skip(f"{shared_dir} is mounted nosuid: the {mode} bit has no effect there")
    assert secure.returncode == 0, secure.stderr
    assert secure.stdout == "at_secure 1 allocated\n"
    assert "cumemtrace" not in secure.stderr
    # A collector, had one started, would have held the pipes until its file was written.
    assert os.listdir(out) == []
