"""The collector's own diagnostics (issue 21, item 8): levels from CUMEMTRACE_LOG / --log-level,
a log file beside the snapshots (CUMEMTRACE_LOG_FILE) for the collector that outlives the
program's terminal, never through a symlink, and the offline commands' --log-level."""
import os
import subprocess

from conftest import CT, base_env, prog, run_preloaded, run_traced


def test_run_writes_debug_records_to_a_log_file_in_the_snapshot_directory(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "basic"], CUMEMTRACE_LOG="debug",
                          CUMEMTRACE_LOG_FILE="collector.log")
    assert p.returncode == 0, p.stderr
    (name,) = snaps
    pid = name.split(".")[1]
    log = (tmp_path / "traces" / "collector.log").read_text()
    lines = log.splitlines()
    assert all(line.startswith("cumemtrace [") for line in lines), log
    assert f"[debug] pid {pid} (" in log and "session opened, ring of" in log
    assert f"[debug] pid {pid}: session closed (0 events dropped)" in log
    assert f"[debug] pid {pid}: wrote {tmp_path / 'traces' / name}" in log
    assert "[debug]" not in p.stderr  # records go to the file, not the terminal


def test_the_collector_the_preload_starts_logs_beside_the_snapshots(tmp_path):
    p, snaps = run_preloaded(tmp_path, [prog("ct_static_like"), "basic"], CUMEMTRACE_LOG="debug",
                             CUMEMTRACE_LOG_FILE="collector.log")
    assert p.returncode == 0, p.stderr
    (name,) = snaps
    # run_preloaded returns once the detached collector has exited (its handshake).
    log = (tmp_path / "plain" / "collector.log").read_text()
    assert "collector done" in log
    assert f"collector started (pid " in log
    assert f"wrote {tmp_path / 'plain' / name}" in log
    assert "[debug]" not in p.stderr


def test_warn_is_the_default_level(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "basic"],
                          CUMEMTRACE_LOG_FILE="collector.log")
    assert p.returncode == 0 and len(snaps) == 1
    assert (tmp_path / "traces" / "collector.log").read_text() == ""


def test_a_log_file_symlink_is_never_followed(tmp_path):
    out = tmp_path / "traces"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, out / "collector.log")
    p = subprocess.run([CT, "run", "-o", str(out), prog("ct_static_like"), "basic"],
                       env=base_env(CUMEMTRACE_LOG="debug", CUMEMTRACE_LOG_FILE="collector.log"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        f"cumemtrace run: cannot open log file {out}/collector.log: "
        "Too many levels of symbolic links"]
    assert victim.read_text() == "keep me\n"
    assert not list(out.glob("*.json"))  # refused before the program ran


def test_offline_commands_take_log_level(tmp_path):
    p, snaps = run_traced(tmp_path, [prog("ct_static_like"), "basic"])
    (name,) = snaps
    path = str(tmp_path / "traces" / name)
    size = os.path.getsize(path)
    entries = sum(len(t) for t in snaps[name]["device_traces"])
    segments = len(snaps[name]["segments"])
    for cmd in (["report", path], ["check", path, "--max-leaked-bytes", "1GiB"]):
        quiet = subprocess.run([CT, *cmd], env=base_env(), capture_output=True, text=True)
        assert quiet.returncode == 0 and "[debug]" not in quiet.stderr
        loud = subprocess.run([CT, *cmd, "--log-level", "debug"], env=base_env(),
                              capture_output=True, text=True)
        assert loud.returncode == 0, loud.stderr
        (line,) = [l for l in loud.stderr.splitlines() if "[debug]" in l]
        assert line.endswith(f"[debug] read {path} ({size} bytes, JSON) in "
                             f"{line.split(' in ')[-1].split(' ms')[0]} ms: {segments} segments, "
                             f"{entries} trace entries")
        env_loud = subprocess.run([CT, *cmd], env=base_env(CUMEMTRACE_LOG="debug"),
                                  capture_output=True, text=True)
        assert "[debug] read " in env_loud.stderr
    bad = subprocess.run([CT, "report", path, "--log-level", "loud"], env=base_env(),
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0] == (
        "cumemtrace report: --log-level: expected trace, debug, info, warn, error or off, "
        "got 'loud'")
