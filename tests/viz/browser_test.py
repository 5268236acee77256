#!/usr/bin/env python3
"""The HTML report in a real browser: headless Chromium loads `cumemtrace html` output, runs its
JS, and we check the DOM it leaves and keep a screenshot.

  browser_test.py --cumemtrace BIN --fixture TORCH_SNAPSHOT.json --out DIR

1. A synthetic snapshot with a known leak (make_synthetic.py): the chart has its series paths,
   the exit table lists `leaky_cache_grow` first, the page timed its own rendering.
2. A synthetic PyTorch run with categories and the automatic phases (make_synthetic.py
   --pytorch-steps): the timeline is stacked by category with a legend of exactly those
   categories (PyTorch's cache and other libraries included), the phase strip has forward,
   backward and optimizer bands and its legend, one step boundary per step, the user's own band
   is still drawn, and the live tables give PyTorch's cache its own row.
3. The real PyTorch snapshot (the repository's torch 2.11 fixture, PyTorch's own pickle or its
   JSON): the chart rendered and the site of the largest block still live at exit is listed
   in the exit table.
Screenshots: DIR/report-synthetic.png, DIR/report-pytorch.png, DIR/report-fixture.png. Exit 77 (skipped) only when no
Chromium binary exists (scripts/setup.sh installs Debian's `chromium`).
"""
import argparse
import html.parser
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def find_browser():
    for name in (os.environ.get("CUMEMTRACE_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def chromium(browser, page, *extra, fragment=""):
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
               "--window-size=1400,1000", "--virtual-time-budget=5000", *extra,
               page.resolve().as_uri() + fragment]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            sys.exit(f"chromium failed ({p.returncode}): {p.stderr[-2000:]}")
        return p.stdout


class Dom(html.parser.HTMLParser):
    """Collects what the checks need from the dumped DOM."""

    def __init__(self):
        super().__init__()
        self.charts = 0
        self.series_paths = []
        self.tables = {}  # data-table -> [data-site of group rows]
        self.current_table = None
        self.body = {}
        self.render_time = False
        self.hidden_rows = 0
        self.dim_paths = 0
        self.zoomed = 0
        self.h3 = []  # headings' text
        self.hist_titles = []  # the size histogram's bar tooltips
        self.in_h3 = self.in_hist = self.in_title = False
        self.legend = []  # the series legend's names
        self.phase_legend = []  # the phase legend's data-phase
        self.phase_rects = {}  # data-phase -> count of rect.phase
        self.steps = 0  # line.step
        self.bands = 0  # rect.band (the user's ranges)
        self.cache_rows = 0  # tr.cache
        self.in_legend_item = False

    def handle_data(self, data):
        if self.in_legend_item:
            self.legend[-1] += data
        if self.in_h3:
            self.h3[-1] += data
        if self.in_hist and self.in_title:
            self.hist_titles[-1] += data

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "body":
            self.body = a
        if tag == "svg" and "chart" in cls:
            self.charts += 1
        if tag == "path" and "series" in cls:
            self.series_paths.append(a.get("d", ""))
            self.dim_paths += "dim" in cls
        if tag == "span" and "zoomed" in cls:
            self.zoomed += 1
        if tag == "table" and "live" in cls:
            self.current_table = a.get("data-table")
            self.tables.setdefault(self.current_table, [])
        if tag == "tr" and "group" in cls and self.current_table:
            if "hidden" in a:
                self.hidden_rows += 1
            else:
                self.tables[self.current_table].append(a.get("data-site"))
        if tag == "span" and "data-series" in a:
            self.legend.append("")
            self.in_legend_item = True
        if tag == "span" and "data-phase" in a:
            self.phase_legend.append(a["data-phase"])
        if tag == "rect" and "phase" in cls:
            self.phase_rects[a.get("data-phase")] = self.phase_rects.get(a.get("data-phase"), 0) + 1
        if tag == "line" and "step" in cls:
            self.steps += 1
        if tag == "rect" and "band" in cls:
            self.bands += 1
        if tag == "tr" and "cache" in cls:
            self.cache_rows += 1
        if a.get("id") == "render-time":
            self.render_time = True
        if tag == "h3":
            self.in_h3 = True
            self.h3.append("")
        if tag == "svg" and "hist" in cls:
            self.in_hist = True
        if tag == "title" and self.in_hist:
            self.in_title = True
            self.hist_titles.append("")

    def handle_endtag(self, tag):
        if tag == "span":
            self.in_legend_item = False
        if tag == "table":
            self.current_table = None
        if tag == "h3":
            self.in_h3 = False
        if tag == "svg":
            self.in_hist = False
        if tag == "title":
            self.in_title = False


def check_histogram(dom, where):
    """The size histogram's heading counts what its bars count (one number, not the timeline's
    allocations, which for a file with PyTorch's blocks are its segments)."""
    (heading,) = [h for h in dom.h3 if h.startswith("Allocation sizes (")]
    said = int(heading.split("(")[1].split()[0].replace(",", ""))
    bars = sum(int(t.split(": ")[1].split()[0].replace(",", "")) for t in dom.hist_titles)
    assert said == bars > 0, f"{where}: heading {heading!r}, bars count {bars}"


def check_peak_time(cumemtrace, snapshot, dom, where):
    """The page says when the peak was as `report` does: the same moment from the same origin
    (the traced program's start), to the page's last digit."""
    rep = json.loads(subprocess.run([cumemtrace, "report", "--format", "json", snapshot],
                                    capture_output=True, text=True, check=True).stdout)
    dev = rep["devices"][0]
    want_us = dev["peak_time_us"] - rep["time_origin_us"]
    (heading,) = [h for h in dom.h3 if h.startswith("Live at peak (")]
    said = heading.split("(+", 1)[1].split(")")[0]
    value, unit = said.split()
    scale = {"s": 1e6, "ms": 1e3, "\u00b5s": 1}[unit]
    digits = len(value.split(".")[1]) if "." in value else 0
    tolerance = scale * 10 ** -digits / 2 + 0.5
    assert abs(float(value) * scale - want_us) <= tolerance, \
        f"{where}: page says the peak was at +{said}, report at +{want_us} us"


def load_dom(browser, page, fragment=""):
    dom = Dom()
    dom.feed(chromium(browser, page, "--dump-dom", fragment=fragment))
    assert dom.charts >= 1, f"{page}: no chart was drawn"
    drawn = [d for d in dom.series_paths if len(d) > 20]
    assert drawn, f"{page}: the chart has no series paths"
    assert dom.render_time and "data-render-ms" in dom.body, f"{page}: the page script did not finish"
    return dom


def png_is_picture(path):
    """A real screenshot: a PNG whose pixels are far from one flat colour."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    distinct = len(set(raw[::7]))
    assert distinct > 40, f"{path}: only {distinct} distinct byte values: a blank page?"
    return distinct


def screenshot(browser, page, png):
    if png.exists():
        png.unlink()
    chromium(browser, page, f"--screenshot={png}")
    assert png.exists(), f"no screenshot written to {png}"
    png_is_picture(png)


def html_report(cumemtrace, snapshot, page):
    p = subprocess.run([cumemtrace, "html", snapshot, "-o", page], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"cumemtrace html {snapshot}: exit {p.returncode}: {p.stderr}")
    print(p.stderr.strip())


def short(name):
    return name.split("(")[0] if not name.startswith("(") else name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cumemtrace", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    browser = find_browser()
    if not browser:
        print("SKIP: no Chromium binary (chromium, chromium-browser, google-chrome) on PATH; "
              "scripts/setup.sh installs Debian's chromium")
        return 77
    out = Path(a.out)
    # Outputs are never overwritten (html refuses an existing file without -f): start empty.
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)

    syn = out / "synthetic.json"
    # The program started 2 s before its first event: every view counts from the start.
    subprocess.run([sys.executable, HERE / "make_synthetic.py", "--events", "20000",
                    "--started-before-us", "2000000", syn], check=True)
    page = out / "synthetic.html"
    html_report(a.cumemtrace, syn, page)
    dom = load_dom(browser, page)
    exit_sites = dom.tables.get("exit", [])
    assert exit_sites and exit_sites[0] == "leaky_cache_grow (cache.py:42)", exit_sites
    assert "leaky_cache_grow (cache.py:42)" in dom.tables.get("peak", []), dom.tables
    assert len(dom.series_paths) == 8, f"synthetic: {len(dom.series_paths)} series, wanted 8 sites"
    check_histogram(dom, "synthetic")
    check_peak_time(a.cumemtrace, syn, dom, "synthetic")
    # Search and zoom, as a link can request them: only leak rows stay, other series dim.
    dom = load_dom(browser, page, "#search=leaky_cache&zoom=0.5,0.75")
    assert dom.zoomed == 1, "the chart did not zoom"
    assert dom.hidden_rows > 0 and all("leaky_cache_grow" in s for t in dom.tables.values() for s in t), dom.tables
    assert dom.dim_paths == len(dom.series_paths) - 1, f"{dom.dim_paths} of {len(dom.series_paths)} dimmed"
    screenshot(browser, page, out / "report-synthetic.png")
    print(f"ok synthetic: {len(dom.series_paths)} series paths; exit table {exit_sites}; "
          f"rendered in {dom.body['data-render-ms']} ms")

    pt = out / "pytorch.json"
    steps = 20
    subprocess.run([sys.executable, HERE / "make_synthetic.py", "--pytorch-steps", str(steps), pt],
                   check=True)
    page = out / "pytorch.html"
    html_report(a.cumemtrace, pt, page)
    dom = load_dom(browser, page)
    want = ["parameter", "gradient", "optimizer state", "activation", "temporary", "autograd",
            "other libraries", "cached, free in PyTorch's cache"]
    assert dom.legend == want, f"pytorch: legend {dom.legend}, wanted {want}"
    assert len(dom.series_paths) == len(want), f"pytorch: {len(dom.series_paths)} series paths"
    assert dom.phase_legend == ["forward", "backward", "optimizer", "step"], dom.phase_legend
    assert dom.phase_rects == {"forward": steps, "backward": steps, "optimizer": steps}, \
        dom.phase_rects
    assert dom.steps == steps, f"pytorch: {dom.steps} step boundaries, wanted {steps}"
    assert dom.bands == 1, f"pytorch: {dom.bands} user bands drawn, wanted 1 (epoch)"
    # At the peak (forward of a later step) and at exit (optimizer state held), the cache is a
    # row of its own in both tables; no site row is PyTorch's cache.
    assert dom.cache_rows == 2, f"pytorch: {dom.cache_rows} cache rows, wanted 2"
    assert not any("cache" in s for t in dom.tables.values() for s in t), dom.tables
    screenshot(browser, page, out / "report-pytorch.png")
    print(f"ok pytorch: legend {dom.legend}; phases {dom.phase_rects}; {dom.steps} steps")

    fixture = Path(a.fixture)  # the repository's own (tests/fixtures): absent is a failure
    page = out / "fixture.html"
    html_report(a.cumemtrace, fixture, page)
    dom = load_dom(browser, page)
    src = pickle.loads(fixture.read_bytes()) if fixture.suffix == ".pickle" else json.loads(fixture.read_text())
    blocks = [b for s in src["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    biggest = max(blocks, key=lambda b: b.get("requested_size") or b["size"])
    # The site rule (docs/check.md): the user's own line, the library frame beside it.
    py = [f for f in biggest["frames"] if f["filename"].endswith(".py")]
    label = lambda f: f"{f['name']} ({os.path.basename(f['filename'])}:{f['line']})"
    library = lambda f: (any(p in f["filename"] for p in ("site-packages/", "dist-packages/", "/torch/"))
                         or re.search(r"/lib(64)?/python[0-9]", f["filename"]))
    user = [f for f in py if not library(f)]
    want = None
    if user:
        want = label(user[0]) + (f" via {label(py[0])}" if py[0] is not user[0] else "")
    elif py:
        want = label(py[0])
    exit_sites = dom.tables.get("exit", [])
    check_histogram(dom, "fixture")
    check_peak_time(a.cumemtrace, fixture, dom, "fixture")
    if want:
        assert want in exit_sites, f"fixture: {want} not in the exit table {exit_sites}"
    else:
        names = {short(f["name"]) for f in biggest["frames"]}
        assert any(s.split(" (")[0] in names for s in exit_sites), exit_sites
    screenshot(browser, page, out / "report-fixture.png")
    print(f"ok fixture: {len(dom.series_paths)} series paths; exit table lists {want or exit_sites[0]}; "
          f"rendered in {dom.body['data-render-ms']} ms; screenshot {out / 'report-fixture.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
