"""End-to-end: text that is not UTF-8 (argv, a thread name, mark and range names) under
`cumemtrace run` gives a snapshot that every reader opens: valid JSON, `check` passes it, and
reading it back and writing it again (`convert --to json`) gives the same bytes. Invalid bytes are
written as U+FFFD (snapshot_json_writer.h)."""
import os
import subprocess

from conftest import CT, base_env, prog, snapshots


def test_non_utf8_text_gives_a_snapshot_check_passes(tmp_path):
    out = tmp_path / "traces"
    cmd = [CT, "run", "-o", str(out), "--", prog("ct_static_like"), "bytes", b"caf\xe9", b"\xff"]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    snaps = snapshots(out)  # json.load + schema validation: fails on invalid UTF-8
    assert len(snaps) == 1
    name, snap = next(iter(snaps.items()))
    tool = snap["cumemtrace"]
    assert tool["argv"][-3:] == ["bytes", "caf\ufffd", "\ufffd"]
    assert "w\ufffdrker\ufffd" in tool["threads"].values()
    names = [a["name"] for a in snap["external_annotations"]]
    assert "caf\ufffd \ufffd\ufffd" in names
    assert "range \ufffd" in names
    path = os.path.join(str(out), name)

    c = subprocess.run([CT, "check", path], env=base_env(), capture_output=True, timeout=60)
    assert c.returncode == 0, c.stdout + c.stderr

    again = str(tmp_path / "again.json")
    r = subprocess.run([CT, "convert", path, "--to", "json", "-o", again], env=base_env(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(path, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()

    # The same data as a pickle is read by every offline command, check included.
    pickle_path = str(tmp_path / "s.pickle")
    r = subprocess.run([CT, "convert", path, "--to", "pickle", "-o", pickle_path],
                       env=base_env(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    c = subprocess.run([CT, "check", pickle_path], env=base_env(), capture_output=True, timeout=60)
    assert c.returncode == 0, c.stdout + c.stderr
    back = str(tmp_path / "back.json")
    r = subprocess.run([CT, "convert", pickle_path, "--to", "json", "-o", back], env=base_env(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(path, "rb") as a, open(back, "rb") as b:
        assert a.read() == b.read()
