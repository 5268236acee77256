#!/usr/bin/env python3
"""One size rule for every printer: the HTML page's fmtBytes (collector/viz/assets/report.js) and
the pytest plugin's format_bytes (python/cumemtrace/pytest_plugin.py) give, for each case of
tests/fixtures/size_format_cases.txt, the text C++'s snap::format_bytes gives (size_format_test.cpp
holds that side to the same file).

  size_rule_test.py --source DIR

The page's function runs in Node when present, else in headless Chromium (scripts/setup.sh
installs it); exit 77 (skipped, said why) only when neither exists."""
import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def cases(source):
    out = []
    for line in (source / "tests/fixtures/size_format_cases.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            size, text = line.split("\t")
            out.append((int(size), text))
    return out


def js_function(source):
    page = (source / "collector/viz/assets/report.js").read_text()
    m = re.search(r"^  function fmtBytes\(n\) \{\n.*?^  \}\n", page, re.S | re.M)
    if not m:
        sys.exit("size_rule_test: no fmtBytes in report.js")
    return m.group(0)


def run_js(source, sizes):
    # Numbers as JSON: the page gets its sizes the same way (above 2**53 they are already rounded).
    body = js_function(source) + f"const out = JSON.stringify({json.dumps(sizes)}.map(fmtBytes));\n"
    if shutil.which("node"):
        p = subprocess.run(["node", "-e", body + "console.log(out);"], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            sys.exit(f"size_rule_test: node failed: {p.stderr[-2000:]}")
        return json.loads(p.stdout)
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    if not browser:
        print("size_rule_test: SKIP: neither node nor chromium to run the page's fmtBytes")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "sizes.html"
        page.write_text("<!doctype html><pre id=out></pre><script>" + body +
                        "document.getElementById('out').textContent = out;</script>")
        p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--no-first-run",
                            f"--user-data-dir={tmp}/profile", "--dump-dom", page.as_uri()],
                           capture_output=True, text=True, timeout=180)
        m = re.search(r'<pre id="out">(.*?)</pre>', p.stdout, re.S)
        if p.returncode != 0 or not m:
            sys.exit(f"size_rule_test: chromium failed ({p.returncode}): {p.stderr[-2000:]}")
        return json.loads(html.unescape(m.group(1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", type=Path, required=True)
    source = ap.parse_args().source.resolve()
    want = cases(source)
    sys.path.insert(0, str(source / "python"))
    from cumemtrace.pytest_plugin import format_bytes
    bad = []
    for (size, text), js in zip(want, run_js(source, [s for s, _ in want])):
        if format_bytes(size) != text:
            bad.append(f"pytest plugin: {size} -> {format_bytes(size)!r}, the rule says {text!r}")
        if js != text:
            bad.append(f"HTML page: {size} -> {js!r}, the rule says {text!r}")
    for b in bad:
        print(b)
    if bad or len(want) < 20:
        sys.exit(f"size_rule_test: FAIL ({len(bad)} disagreements over {len(want)} cases)")
    print(f"size_rule_test: {len(want)} cases, the page and the plugin print each as C++ does")


if __name__ == "__main__":
    main()
