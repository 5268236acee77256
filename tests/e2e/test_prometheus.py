"""A real Prometheus (Debian's package) scrapes `run --metrics` of a running fake-driver program
every 200 ms, and its query API returns the series with the program's exact bytes; over a launcher
(tests/e2e/ranks_job.py `hold 4`), the one endpoint serves every rank with its rank, local_rank,
node and job_id labels. The program holds its allocations until the test has seen them through
Prometheus; every wait polls with a deadline (Prometheus' readiness endpoint, then its query
API)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from conftest import MiB, snapshots
from metrics_support import Traced, wait_for
from test_ranks import JOB

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except OSError:
        return None, ""


def query(port, expr):
    """The instant vector of `expr`: [(labels, value)]."""
    status, body = get(f"http://127.0.0.1:{port}/api/v1/query?" +
                       urllib.parse.urlencode({"query": expr}))
    if status != 200:
        return []
    return [(r["metric"], r["value"][1]) for r in json.loads(body)["data"]["result"]]


@pytest.fixture
def prometheus(tmp_path):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("Debian's prometheus is not installed (scripts/setup.sh installs it)")

    def start(target):
        port = free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n"
                       "scrape_configs:\n  - job_name: cumemtrace\n    static_configs:\n"
                       f"      - targets: ['{target}']\n")
        log = open(tmp_path / "prometheus.log", "w")
        p = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}",
                              f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        wait_for("prometheus ready", lambda: get(f"http://127.0.0.1:{port}/-/ready")[0] == 200
                 or p.poll() is not None, 60)
        assert p.poll() is None, (tmp_path / "prometheus.log").read_text()
        return port

    procs = []
    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


def test_prometheus_query_api_returns_the_exact_bytes(tmp_path, prometheus):
    t = Traced(tmp_path, 100)
    try:
        port = prometheus(f"{t.host}:{t.port}")
        sel = f'{{job="cumemtrace",pid="{t.pid}",device="0"}}'

        def value(name):
            v = query(port, name + sel)
            return v[0][1] if v else None

        # The first sample Prometheus stored with the program's allocation in it.
        assert wait_for("the tracked bytes in Prometheus",
                        lambda: value("cumemtrace_tracked_bytes"), 60) == str(MiB)
        (labels, v), = query(port, "cumemtrace_tracked_bytes" + sel)
        assert labels["exe"] == "ct_static_like" and labels["host"] == socket.gethostname()
        assert "rank" not in labels  # not a rank of a job
        assert value("cumemtrace_live_allocations") == "1"
        assert value("cumemtrace_tracked_peak_bytes") == str(MiB)
        assert value("cumemtrace_driver_visible_peak_bytes") == str(3 * MiB + MiB // 2)
        assert value("cumemtrace_ooms_total") == "0"
        assert query(port, f'cumemtrace_events_dropped_total{{pid="{t.pid}"}}')[0][1] == "0"
        # Every scrape so far succeeded (Prometheus' own series for the target).
        assert query(port, 'up{job="cumemtrace"}')[0][1] == "1"
        code, err = t.finish()
    finally:
        t.kill()
    assert code == 0, err
    (snap,) = snapshots(t.out).values()
    assert snap["cumemtrace"]["events_total"] == 1 + 2 * 100 + 1


def test_one_endpoint_per_node_serves_every_rank(tmp_path, prometheus):
    """Four ranks of one job under one `run`: four series per gauge on one port, told apart and
    aggregated by their labels (Prometheus' own `job` label is the scrape job's: ours is
    job_id, so it is not renamed to exported_job)."""
    t = Traced(tmp_path, program=[sys.executable, JOB, "hold", "4"])
    try:
        port = prometheus(f"{t.host}:{t.port}")
        expr = 'cumemtrace_tracked_bytes{job="cumemtrace",device="0"}'
        series = wait_for("four ranks in Prometheus",
                          lambda: (lambda v: v if len(v) == 4 else None)(query(port, expr)), 60)
        assert sorted((m["rank"], m["local_rank"], m["node"], m["job_id"], m["host"], v)
                      for m, v in series) == [
            (str(r), str(r), "0", "ranks-job", socket.gethostname(), str((2 + r) * MiB))
            for r in range(4)]
        assert len({m["pid"] for m, _ in series}) == 4
        assert "exported_job" not in series[0][0]
        (total,) = query(port, f'sum by (job_id, node) ({expr})')
        assert total == ({"job_id": "ranks-job", "node": "0"}, str(14 * MiB))
        code, err = t.finish()
    finally:
        t.kill()
    assert code == 0, err
    assert len(snapshots(t.out)) == 4
