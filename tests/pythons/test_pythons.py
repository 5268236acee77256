"""Python frames on real CPython interpreters: the host's python3 (Debian bookworm: 3.11) and the
python3 of Debian chroots (scripts/python_chroots.sh: bullseye 3.9, trixie 3.13, sid 3.14),
and other interpreters of this machine (pyenv's python.org builds, 3.9 to 3.13, where present;
3.6 to 3.8 must be refused with one line), each running frames_script.py under
`cumemtrace run` against the fake driver, with the GIL
released around the driver calls (as PyTorch does) and held. Every allocation must carry exactly
the script's frames (names, lines) expected from its source, the same on every interpreter
(except that 3.9 and 3.10 have no qualified names).

The collector runs on the host; only the traced interpreter runs in the chroot, in a private
mount namespace (unshare) where the build tree, this folder and /proc are bind-mounted at the
same paths, so nothing stays mounted afterwards. A chroot's glibc must be at least the one the
preload and the fake driver were built against: bullseye (2.31) needs a build for that floor
($CT_PORTABLE_BUILD); without it bullseye's own interpreter and standard library run on the
host's newer glibc instead.
"""
import glob
import json
import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.realpath(os.environ.get("CT_SOURCE", os.path.join(HERE, "..", "..")))
BUILD = os.path.realpath(os.environ.get("CT_BUILD", os.path.join(SOURCE, "build")))
SCRIPT = os.path.join(HERE, "frames_script.py")
PROBE = os.path.join(HERE, "layout_probe.py")
CHROOTS = os.environ.get("CUMEMTRACE_CHROOTS") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cumemtrace", "chroots")
SUITES = {"bullseye": (3, 9), "trixie": (3, 13), "sid": (3, 14)}
MiB = 1 << 20


def line_of(marker):
    with open(SCRIPT) as f:
        return next(i for i, line in enumerate(f, 1) if f"# {marker}" in line)


def expected(version):
    """Per allocation size (MiB): the script's frames, innermost first, as (name, line)."""
    def q(qualname):  # co_qualname exists from 3.11 on
        return qualname if version >= (3, 11) else qualname.rsplit(".", 1)[-1]
    alloc = ("alloc", line_of("L_ALLOC"))
    nested = [alloc, ("inner", line_of("L_INNER")), ("outer", line_of("L_OUTER"))]
    return {
        1: nested + [("<module>", line_of("L_MODULE_OUTER"))],
        2: [alloc, (q("Model.forward"), line_of("L_FORWARD")),
            ("<module>", line_of("L_MODULE_FORWARD"))],
        3: [alloc, ("produce", line_of("L_PRODUCE")), ("consume", line_of("L_CONSUME")),
            ("<module>", line_of("L_MODULE_CONSUME"))],
        4: nested + [("worker", line_of("L_WORKER"))],
        5: [alloc, ("compare", line_of("L_COMPARE")), ("run_qsort", line_of("L_QSORT")),
            ("<module>", line_of("L_MODULE_QSORT"))],
        6: [alloc, ("by_size", line_of("L_BY_SIZE")), ("sort_with_key", line_of("L_SORT")),
            ("<module>", line_of("L_MODULE_SORT"))],
        7: [alloc, ("remade", 2), ("remake", line_of("L_REMAKE")),
            ("<module>", line_of("L_MODULE_REMAKE_A"))],
        8: [alloc, ("remade", 4), ("remake", line_of("L_REMAKE")),
            ("<module>", line_of("L_MODULE_REMAKE_B"))],
    }


@pytest.fixture(scope="session")
def chroots():
    """Builds the chroots once (cached); skips, saying why, where that cannot happen here."""
    if os.geteuid() != 0:
        pytest.skip("tests/pythons need root (debootstrap, chroot, mount)")
    if not shutil.which("unshare"):
        pytest.skip("tests/pythons need unshare (util-linux)")
    p = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"tests/pythons cannot create a mount namespace here: {p.stderr.strip()}")
    p = subprocess.run([os.path.join(SOURCE, "scripts", "python_chroots.sh"), *SUITES],
                       capture_output=True, text=True, timeout=3600,
                       env=dict(os.environ, CUMEMTRACE_CHROOTS=CHROOTS))
    print(p.stderr, end="")
    if p.returncode == 3:
        pytest.skip("debootstrap cannot run here: " + p.stderr.strip())
    assert p.returncode == 0, p.stderr
    return {s: os.path.join(CHROOTS, s) for s in SUITES}


def glibc_needed(build):
    """The newest GLIBC_x.y symbol version the preload and the fake driver of `build` need."""
    need = (0, 0)
    for lib in (os.path.join(build, "lib", "libcumemtrace.so"),
                os.path.join(build, "fake", "libcuda.so.1")):
        out = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True,
                             check=True).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            need = max(need, (int(major), int(minor)))
    return need


def glibc_of(root):
    libc = glob.glob(os.path.join(root, "usr/lib/x86_64-linux-gnu/libc.so.6")) + glob.glob(
        os.path.join(root, "lib/x86_64-linux-gnu/libc.so.6"))
    out = subprocess.run(["strings", libc[0]], capture_output=True, text=True).stdout
    m = re.search(r"GNU C Library \([^)]*\) (?:stable )?release version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2)))


def run_in(root, build, args, out, extra_libs=None, extra_env=None):
    """`cumemtrace run -o out -- [chroot root] args` with the fake driver; root None: the host.
    extra_libs: a further folder for LD_LIBRARY_PATH; extra_env: further variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUMEMTRACE_", "FAKE_CUDA_")) and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "fake") + ":" + os.path.join(build, "lib")
    if extra_libs:
        env["LD_LIBRARY_PATH"] += ":" + extra_libs
    env["CUMEMTRACE_DEBUG"] = "1"
    env.update(extra_env or {})
    ct = [os.path.join(build, "bin", "cumemtrace"), "run", "-o", str(out), "--"]
    if root is None:
        cmd = ct + args
    else:
        mounts = "".join(f'mkdir -p "{root}{d}" && mount --bind "{d}" "{root}{d}" && '
                         for d in (build, HERE))
        script = f'set -e; {mounts}mount -t proc proc "{root}/proc"; exec "$@"'
        cmd = ["unshare", "-m", "sh", "-c", script, "sh"] + ct + ["chroot", root] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def frames_by_size(out):
    (path,) = glob.glob(os.path.join(str(out), "*.json"))
    with open(path) as f:
        snap = json.load(f)
    got = {}
    for e in snap["device_traces"][0]:
        if e["action"] != "alloc":
            continue
        frames = [(f["name"], f["line"]) for f in e["frames"] if f["filename"] == SCRIPT]
        got.setdefault(e["size"] // MiB, []).append(frames)
    return snap, got


def native_counts(snap):
    return [sum(1 for f in e["frames"] if not f["filename"].endswith(".py"))
            for e in snap["device_traces"][0] if e["action"] == "alloc"]


def check_frames(p, out, version, native_above_python=False, loop_named=True):
    assert p.returncode == 0, p.stderr
    # Scenarios 7 and 8 test something only where a copy of one source took the other's place.
    reused = re.search(r"remade: (\d+) addresses held a copy of either source", p.stdout)
    assert reused and int(reused.group(1)) >= 1, p.stdout
    # From 3.12 on, our sitecustomize registers a code watcher, and frames met again are answered
    # without a read of their code object; before 3.12 none is (CUMEMTRACE_DEBUG's meter).
    memo = re.search(r"^cumemtrace: of which, per driver event with a stack .* Python stack \d+ ns "
                     r"\(([0-9.]+) frames, ([0-9.]+) from the thread's memo, ([0-9.]+) of them "
                     r"without their code object\)", p.stderr, re.M)
    assert memo, p.stderr
    watched = float(memo.group(3))
    assert (watched > 0) if version >= (3, 12) else (watched == 0), p.stderr
    assert "no Python frames" not in p.stderr, p.stderr
    assert "are off for this process" not in p.stderr, p.stderr  # the layout held throughout
    snap, got = frames_by_size(out)
    want = expected(version)
    assert sorted(got) == sorted(want)
    for mib, frames in want.items():
        assert got[mib] == [frames] * 4, f"{mib} MiB"
    # From 3.11 on the native walk ends at the innermost evaluation loop, where the collector
    # puts the Python frames: nothing of the interpreter above it (CUMEMTRACE_NATIVE_ABOVE_PYTHON=1
    # keeps it; 3.9 and 3.10 say nothing of where the loop's C frame is).
    stops = version >= (3, 11) and not native_above_python
    for e in snap["device_traces"][0]:
        if e["action"] != "alloc" or not loop_named:
            continue
        names = [f["name"] for f in e["frames"]]
        loops = [i for i, n in enumerate(names) if n == "_PyEval_EvalFrameDefault"]
        assert loops, names
        if not stops:
            assert loops[0] < len(names) - 1, names
        else:
            assert loops == [len(names) - 1], names
            assert e["frames"][-2]["filename"].endswith(".py"), names  # the outermost Python
    return snap


def other_pythons():
    """Further interpreters of this machine that run here without a chroot: $CT_EXTRA_PYTHONS
    (colon-separated), else pyenv's (python.org builds of 3.6 to 3.13 where installed)."""
    paths = os.environ.get("CT_EXTRA_PYTHONS")
    if paths:
        return paths.split(":")
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    return sorted(glob.glob(os.path.join(pyenv, "versions", "*", "bin", "python3")))


def version_of(python, root=None):
    """(major, minor) of `python` (in chroot `root`), None when it does not run."""
    cmd = ([] if root is None else ["chroot", root]) + [
        python, "-c", "import sys; print(*sys.version_info[:2])"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.split()
    return tuple(int(x) for x in out) if len(out) == 2 else None


OTHERS = [(p, version_of(p)) for p in other_pythons()]
SUPPORTED = [(p, v) for p, v in OTHERS if v and (3, 9) <= v <= (3, 14)]
# frames_script.py needs 3.6 (f-strings); older Python 3s are refused the same way.
UNSUPPORTED = [(p, v) for p, v in OTHERS if v and (3, 6) <= v < (3, 9)]


@pytest.mark.parametrize("mode", ["nogil", "gil"])
@pytest.mark.parametrize("python,version", SUPPORTED, ids=[p for p, _ in SUPPORTED])
def test_other_python(tmp_path, python, version, mode):
    p = run_in(None, BUILD, [python, SCRIPT, mode], tmp_path / "out")
    check_frames(p, tmp_path / "out", version)


@pytest.mark.parametrize("python,version", UNSUPPORTED, ids=[p for p, _ in UNSUPPORTED])
def test_unsupported_python(tmp_path, python, version):
    """One line, no Python frames, the program runs on traced (native frames only)."""
    p = run_in(None, BUILD, [python, SCRIPT], tmp_path / "out")
    assert p.returncode == 0, p.stderr
    line = (f"cumemtrace: no Python frames: unsupported CPython {version[0]}.{version[1]} "
            "(supported: 3.9 to 3.14 releases)")
    assert [ln for ln in p.stderr.splitlines() if "Python frames" in ln] == [line]
    snap, got = frames_by_size(tmp_path / "out")
    assert sorted(got) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(frames == [] for stacks in got.values() for frames in stacks)
    e = next(e for e in snap["device_traces"][0] if e["action"] == "alloc")
    assert e["frames"], "native frames are still recorded"


@pytest.mark.parametrize("mode", ["nogil", "gil"])
def test_host_python(tmp_path, mode):
    version = version_of("/usr/bin/python3")
    p = run_in(None, BUILD, ["/usr/bin/python3", SCRIPT, mode], tmp_path / "out")
    check_frames(p, tmp_path / "out", version)


def test_native_frames_above_python_on_request(tmp_path):
    version = version_of("/usr/bin/python3")
    p = run_in(None, BUILD, ["/usr/bin/python3", SCRIPT, "nogil"], tmp_path / "out",
               extra_env={"CUMEMTRACE_NATIVE_ABOVE_PYTHON": "1"})
    check_frames(p, tmp_path / "out", version, native_above_python=True)


def host_shims(root, tmp_path):
    """A folder of links to the chroot's own copies of the libraries its interpreter and ctypes
    need that the host lacks (bullseye: libffi.so.7), for LD_LIBRARY_PATH."""
    shims = tmp_path / "shims"
    shims.mkdir()
    users = [os.path.join(root, "usr/bin/python3")] + glob.glob(
        os.path.join(root, "usr/lib/python3*/lib-dynload/_ctypes.*.so"))
    for user in users:
        out = subprocess.run(["ldd", os.path.realpath(user)], capture_output=True, text=True,
                             check=True).stdout
        for soname in re.findall(r"^\s*(\S+) => not found", out, re.M):
            own = os.path.join(root, "usr/lib/x86_64-linux-gnu", soname)
            assert os.path.exists(own), f"{user} needs {soname}, which {root} lacks"
            if not (shims / soname).exists():
                os.symlink(own, shims / soname)
    return str(shims)


@pytest.mark.parametrize("mode", ["nogil", "gil"])
@pytest.mark.parametrize("suite", list(SUITES))
def test_chroot_python(chroots, tmp_path, suite, mode):
    """The chroot's python3 in the chroot; where the chroot's glibc is older than this build's
    (bullseye, unless $CT_PORTABLE_BUILD names a build for its floor), the chroot's own
    interpreter and standard library run on the host instead, whose newer glibc is backward
    compatible: the same Python, with this build's preload."""
    root = chroots[suite]
    version = version_of("/usr/bin/python3", root)
    assert version == SUITES[suite]
    build = os.path.realpath(os.environ.get("CT_PORTABLE_BUILD") or BUILD)
    if glibc_needed(build) <= glibc_of(root):
        p = run_in(root, build, ["/usr/bin/python3", SCRIPT, mode], tmp_path / "out")
        # The host's collector cannot read the symbols of the chroot's interpreter, so the loop
        # frame has no name here: the walk must stop short of where it goes on request.
        snap = check_frames(p, tmp_path / "out", version, loop_named=False)
        p = run_in(root, build, ["/usr/bin/python3", SCRIPT, mode], tmp_path / "full",
                   extra_env={"CUMEMTRACE_NATIVE_ABOVE_PYTHON": "1"})
        full = check_frames(p, tmp_path / "full", version, loop_named=False)
        stopped, kept = native_counts(snap), native_counts(full)
        assert len(stopped) == len(kept) and all(a < b for a, b in zip(stopped, kept))
        return
    else:
        python = os.path.realpath(os.path.join(root, "usr/bin/python3"))
        p = run_in(None, BUILD, [python, SCRIPT, mode], tmp_path / "out",
                   extra_libs=host_shims(root, tmp_path))
    check_frames(p, tmp_path / "out", version)


@pytest.mark.parametrize("suite", list(SUITES))
def test_layout_probe(chroots, suite):
    """The built-in table of the chroot's CPython (preload/stacks/cpython_layout.cpp) read against the
    live interpreter with ctypes: frames, code objects and strings at the table's offsets."""
    root = chroots[suite]
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f'set -e; mkdir -p "{root}{SOURCE}"; mount --bind "{SOURCE}" "{root}{SOURCE}"; '
         f'exec chroot "{root}" /usr/bin/python3 "{PROBE}" "{SOURCE}"'],
        capture_output=True, text=True, timeout=60)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FAIL" not in p.stdout
