"""The pytest plugin (python/cumemtrace, from the source tree with this build's bin/ and lib/)
run by the torch venv's pytest on tests that import the real torch and train on the CPU
(cases_torch.py), where tests/package/test_pytest_plugin.py runs tests without torch: the plugin
re-executes pytest under `cumemtrace run`, so our sitecustomize and the automatic phases are in the
pytest process with the real torch; each test's verdict and bytes stay its own, a failure's stack
ends at the test function, and the Python API works there."""
import glob
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

from conftest import BUILD, HERE, MiB, SOURCE, env

CASES = os.path.join(HERE, "cases_torch.py")


def package(root):
    """A cumemtrace package dir as the wheel lays it out: the sources, bin/ and lib/."""
    pkg = root / "cumemtrace"
    pkg.mkdir()
    for f in glob.glob(os.path.join(SOURCE, "python", "cumemtrace", "*.py")):
        os.symlink(f, pkg / os.path.basename(f))
    os.symlink(os.path.join(BUILD, "bin"), pkg / "bin")
    os.symlink(os.path.join(BUILD, "lib"), pkg / "lib")
    return root


def verdicts(junit):
    """{test name: (outcome, peak bytes, leaked bytes)} from the JUnit XML's properties."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): int(p.get("value")) for p in case.iter("property")}
        failed = case.find("failure") is not None or case.find("error") is not None
        out[case.get("name")] = ("failed" if failed else "passed",
                                 props.get("cumemtrace_peak_bytes"),
                                 props.get("cumemtrace_leaked_bytes"))
    return out


def test_plugin_on_tests_that_train_with_torch(tmp_path):
    junit = tmp_path / "junit.xml"
    e = env(PYTHONPATH=str(package(tmp_path)), FAKE_CUDA_DEVICES="1")
    # Not on CI's terms: with CI or BUILD_NUMBER set, pytest's short summary repeats each failure's
    # whole text, and the counts below are of the failure sections.
    e = {k: v for k, v in e.items()
         if not k.startswith("PYTEST_") and k not in ("CI", "BUILD_NUMBER")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "cumemtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--cumemtrace", "--cumemtrace-output",
                        str(tmp_path / "snaps"), "--junitxml", str(junit), CASES],
                       capture_output=True, text=True, env=e, cwd=tmp_path, timeout=300)
    text = p.stdout + p.stderr
    assert p.returncode == 1, text
    assert verdicts(junit) == {
        "test_trains_and_leaks": ("failed", 2 * MiB, 2 * MiB),
        "test_trains_within_its_peak": ("passed", 3 * MiB, 0),
        "test_over_peak_while_training": ("failed", 6 * MiB, 0),
        "test_api_with_torch": ("passed", MiB, 0),
        "test_growth_needs_tensors_on_a_device": ("failed", 0, 0)}, text
    assert re.search(r"\b3 failed, 2 passed\b", text), text
    # Each failure's heading says what happened: two limits exceeded, one that could not judge.
    headings = [l for l in p.stdout.splitlines() if l.startswith("cumemtrace: GPU memory limit")]
    assert sorted(headings) == ["cumemtrace: GPU memory limit could not be judged"] + \
        ["cumemtrace: GPU memory limit exceeded"] * 2, text
    # Its steps made no CUDA allocation: check's one no-CUDA verdict on its range (issue 57),
    # with the plugin's own way out.
    assert len(re.findall(
        r"no CUDA allocation seen within range 'pytest:\S*::test_growth_needs_tensors_on_a_device' "
        r"\(no device memory event between its start and end\): no limit can be judged \(pass "
        r"--cumemtrace-allow-no-cuda to pytest if that is expected\)\n", p.stdout)) == 1, p.stdout
    with open(CASES) as f:
        line = {m: i for i, t in enumerate(f, 1) for m in re.findall(r"# (\w+_LINE)", t)}
    stacks = re.findall(r"((?:^    at .*\n)+)", p.stdout, re.M)
    assert [s.splitlines() for s in stacks] == [
        [f"    at allocate ({CASES}:{line['ALLOC_LINE']})", f"    at {fn} ({CASES}:{line[mark]})"]
        for fn, mark in [("test_trains_and_leaks", "LEAKS_LINE"),
                         ("test_over_peak_while_training", "OVER_PEAK_LINE")]], text
