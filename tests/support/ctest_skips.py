"""A pytest plugin (`-p ctest_skips`, tests/support on PYTHONPATH) for the suites CTest runs as
one test: a run in which any test was skipped and none failed exits 77, which CTest reports as
Skipped (the test's SKIP_RETURN_CODE), and each skipped test is listed with its reason. Without
it pytest exits 0 and CTest says Passed though part of the suite never ran."""
import os

# The folder CTest put on PYTHONPATH to load this plugin leaves it again (it stays on sys.path),
# so that the programs the tests start see the environment they would see without it.
_here = os.path.dirname(os.path.abspath(__file__))
_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
         if p and os.path.abspath(p) != _here]
if _path:
    os.environ["PYTHONPATH"] = os.pathsep.join(_path)
else:
    os.environ.pop("PYTHONPATH", None)

skipped = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    if skipped:
        print(f"\nctest_skips: {len(skipped)} skipped")
        for line in skipped:
            print(f"  SKIPPED {line}")
    if exitstatus == 0 and skipped:
        session.exitstatus = 77
