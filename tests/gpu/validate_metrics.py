"""Drives tests/gpu/metrics_train.py for validate_metrics.sh: at each moment the program
announces (its own torch.cuda.memory_allocated()/memory_reserved() while it waits), scrapes
`run --metrics`'s /metrics until a text built after the moment arrives (a deadline, not a sleep:
a text is built at most every max(100 ms, 9 x its cost)) and prints one PASS/FAIL row per gauge.
Usage: validate_metrics.py RUN_STDERR MOMENTS_FILE GO_FIFO"""
import json
import re
import sys
import time
import urllib.request


def row(what, ok, detail=""):
    print(f"| {what:<62} | {'PASS' if ok else 'FAIL'} | {detail}")


def follow(path, deadline=600):
    """Yields the lines of a file another process appends to, waiting for each."""
    end = time.monotonic() + deadline
    with open(path) as f:
        buf = ""
        while time.monotonic() < end:
            chunk = f.readline()
            if not chunk:
                time.sleep(0.05)
                continue
            buf += chunk
            if buf.endswith("\n"):
                yield buf
                buf = ""


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = int(value)
    return samples


def gauge(samples, name, pid, device):
    for k, v in samples.items():
        if k.split("{")[0] == name and f'pid="{pid}"' in k and f'device="{device}"' in k:
            return v
    return None


def main():
    err_path, moments_path, go_path = sys.argv[1:4]
    url = None
    for line in follow(err_path, 120):
        m = re.search(r"serving metrics at (http://\S+/metrics)", line)
        if m:
            url = m.group(1)
            break
    row("run --metrics printed its address", url is not None, url or "")
    if not url:
        return 1
    go = open(go_path, "w", buffering=1)
    failed = 0
    for line in follow(moments_path):
        m = json.loads(line)
        if m["moment"] == "end":
            break
        want = {"cumemtrace_allocated_bytes": m["allocated"],
                "cumemtrace_reserved_bytes": m["reserved"]}
        got = {}
        end = time.monotonic() + 10
        while time.monotonic() < end:  # a text built after the moment
            s = scrape(url)
            got = {k: gauge(s, k, m["pid"], m["device"]) for k in want}
            if got == want:
                break
            time.sleep(0.1)
        for k, v in want.items():
            ok = got.get(k) == v
            failed += not ok
            row(f"{m['moment']}: {k} = torch's", ok, f"torch {v}, gauge {got.get(k)}")
        go.write("go\n")
    go.close()
    return 1 if failed else 0


sys.exit(main())
