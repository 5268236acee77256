#!/usr/bin/env python3
"""What a Prometheus scraper costs the traced program (issue 48): the fake-driver loop
`ct_static_like burst N` (N cuMemAlloc+cuMemFree pairs of 4 KiB after a "go" line) under
`cumemtrace run --metrics 127.0.0.1:0`, with no scraper and with one scraping /metrics 10 times a
second from the moment the collector listens, and no scraper again (the A/A control: the noise
floor of the machine); the modes rotate within every round. The time is
the program's loop alone: from writing "go" to the end of its stdout (it exits right after the
loop), so start-up and the final snapshot are left out. Prints the median and the spread over
the rounds for each mode, and how many scrapes were answered.
Usage: bench/bench_metrics_scrape.py [BUILD=build] [ROUNDS=9] [PAIRS=200000]"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

B = sys.argv[1] if len(sys.argv) > 1 else "build"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 9
PAIRS = int(sys.argv[3]) if len(sys.argv) > 3 else 200000
env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "fake"))


def one(scrape_hz):
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.Popen([os.path.join(B, "bin", "cumemtrace"), "run", "-q", "-o", out,
                              "--metrics", "127.0.0.1:0", "--",
                              os.path.join(B, "bin", "ct_static_like"), "burst", str(PAIRS)],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        url = re.search(r"(http://\S+/metrics)", p.stderr.readline()).group(1)
        stop = threading.Event()
        answered = [0]

        def scraper():
            while not stop.is_set():
                t = time.monotonic()
                try:
                    # As Prometheus at a 100 ms interval asks: wait at most 50 ms for a new text.
                    req = urllib.request.Request(
                        url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "0.1"})
                    urllib.request.urlopen(req, timeout=5).read()
                    answered[0] += 1
                except OSError:
                    pass
                stop.wait(max(0.0, 1 / scrape_hz - (time.monotonic() - t)))

        th = threading.Thread(target=scraper) if scrape_hz else None
        if th:
            th.start()
        assert p.stdout.readline().startswith("ready")
        t0 = time.perf_counter()
        p.stdin.write("go\n")
        p.stdin.flush()
        p.stdout.read()  # EOF: the program exited
        dt = time.perf_counter() - t0
        stop.set()
        if th:
            th.join()
        p.wait()
        assert p.returncode == 0, p.stderr.read()
        return dt, answered[0]


MODES = [("no scraper", 0), ("no scraper (A/A)", 0), ("10 Hz scraper", 10)]
res = {name: [] for name, _ in MODES}
scrapes = 0
for r in range(ROUNDS):
    for name, hz in MODES[r % 3:] + MODES[:r % 3]:
        dt, n = one(hz)
        res[name].append(dt)
        scrapes += n
print(f"{PAIRS} alloc+free pairs, {ROUNDS} rounds, modes rotating")
for name, v in res.items():
    print(f"  {name:<18} median {statistics.median(v)*1e3:8.1f} ms"
          f"  min {min(v)*1e3:8.1f}  max {max(v)*1e3:8.1f}")
base = statistics.median(res["no scraper"])
for name in ("no scraper (A/A)", "10 Hz scraper"):
    d = statistics.median(res[name]) / base - 1
    print(f"  {name} vs no scraper: {d*100:+.1f}% of the median")
print(f"  {scrapes} scrapes answered")
