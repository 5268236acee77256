"""Screenshots of cumemtrace's HTML page for snapshots, for people to look at (issue 54: the page
for transformers' Trainer and FSDP2, from the GPU run of tests/gpu/validate_trainers.py):

    python3 tests/gpu/screenshot_pages.py [--cumemtrace build/bin/cumemtrace] [--width 1600]
        --out OUT_DIR INPUT...

Each INPUT is a snapshot file (cumemtrace or PyTorch JSON, or a PyTorch pickle) or a folder. A
folder with t_<name>/ subfolders (validate_trainers.py's OUT: t_trainer/, t_fsdp2/, ...) gives the
snapshots in those, each page named <name> (<name>.<file> when a subfolder has several); another
folder (OUT/t_trainer itself, say) gives its own *.json and *.pickle files (never *.summary),
named after it the same way. For each snapshot it writes
OUT/<name>.html (`cumemtrace html`) and OUT/<name>.png: the page drawn by headless Chromium
(chromium, chromium-browser or google-chrome on PATH, or CUMEMTRACE_CHROMIUM) WIDTH pixels wide
and as tall as the whole page (measured in a first pass by a copy of the page that writes its
height into the DOM; at most 16000 px), so that the ledger, the charts and the tables below them
are all in the picture. The pages and pictures go to OUT only, never over an input. The host
needs no GPU: copy the GPU run's OUT here and run it where Chromium is.
Prints | page | PASS/FAIL | detail | rows; exit 1 on any FAIL, 2 when there is nothing to draw
(no snapshot found, no Chromium, OUT an input folder).
"""
import argparse
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_HEIGHT = 16000
PROBE = ('<script>document.body.setAttribute("data-shot-height", '
         'String(Math.ceil(document.documentElement.scrollHeight)));</script>')


def find_browser():
    for name in (os.environ.get("CUMEMTRACE_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def chromium(browser, page, width, height, *extra):
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync", "--no-first-run",
                            "--hide-scrollbars", "--user-data-dir=" + profile,
                            "--window-size=%d,%d" % (width, height),
                            "--virtual-time-budget=10000", *extra,
                            "file://" + os.path.abspath(page)],
                           capture_output=True, text=True, timeout=180)
        return p


def snapshots(inputs):
    """[(page name, snapshot path)] in the order given, or raises ValueError with the reason."""
    found = []
    for path in inputs:
        if os.path.isfile(path):
            found.append((os.path.basename(path).rsplit(".", 1)[0], path))
            continue
        if not os.path.isdir(path):
            raise ValueError("no such file or folder: %s" % path)
        runs = sorted(d for d in glob.glob(os.path.join(path, "t_*")) if os.path.isdir(d))
        base = os.path.basename(os.path.normpath(path))
        folders = [(os.path.basename(d)[2:], d) for d in runs] or [
            (base[2:] if base.startswith("t_") else base, path)]
        for name, d in folders:
            files = sorted(f for ext in ("json", "pickle") for f in
                           glob.glob(os.path.join(d, "*." + ext)))
            for f in files:
                stem = os.path.basename(f).rsplit(".", 1)[0]
                found.append((name if len(files) == 1 else name + "." + stem, f))
    if not found:
        raise ValueError("no snapshot (*.json, *.pickle) in %s" % " ".join(inputs))
    return found


def png_size(path):
    """(width, height) of a PNG file, or None when it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def page_height(browser, page, width):
    """The drawn page's whole height at this width: a copy of it with PROBE after its script."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.html")
        with open(page, encoding="utf-8") as f:
            text = f.read()
        at = text.rfind("</body>")
        if at < 0:
            return None
        with open(probe, "w", encoding="utf-8") as f:
            f.write(text[:at] + PROBE + text[at:])
        p = chromium(browser, probe, width, 1000, "--dump-dom")
        m = re.search(r'data-shot-height="(\d+)"', p.stdout)
        return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cumemtrace", default=os.path.join(HERE, "..", "..", "build", "bin",
                                                         "cumemtrace"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("inputs", nargs="+")
    a = ap.parse_args()
    try:
        pages = snapshots(a.inputs)
    except ValueError as e:
        print("screenshot_pages.py: %s" % e, file=sys.stderr)
        return 2
    out = os.path.realpath(a.out)
    if any(os.path.realpath(p) == out for p in a.inputs if os.path.isdir(p)):
        print("screenshot_pages.py: --out is an input folder: %s" % a.out, file=sys.stderr)
        return 2
    browser = find_browser()
    if browser is None:
        print("screenshot_pages.py: no chromium, chromium-browser or google-chrome on PATH "
              "(or CUMEMTRACE_CHROMIUM)", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, snap in pages:
        html = os.path.join(out, name + ".html")
        png = os.path.join(out, name + ".png")
        p = subprocess.run([a.cumemtrace, "html", snap, "-o", html, "-f"], capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            rows.append((name, "FAIL", "cumemtrace html %s: exit %d: %s" % (
                snap, p.returncode, " ".join(p.stderr.split())[-300:])))
            continue
        height = page_height(browser, html, a.width)
        if height is None:
            rows.append((name, "FAIL", "the page's height could not be measured (%s)" % html))
            continue
        height = min(max(height, 600), MAX_HEIGHT)
        if os.path.lexists(png):
            os.unlink(png)
        p = chromium(browser, html, a.width, height, "--screenshot=" + png)
        size = png_size(png) if os.path.isfile(png) else None
        if size != (a.width, height):
            rows.append((name, "FAIL", "no %dx%d picture at %s (chromium exit %d, got %s): %s"
                         % (a.width, height, png, p.returncode, size,
                            " ".join(p.stderr.split())[-300:])))
            continue
        rows.append((name, "PASS", "%s (%dx%d) of %s" % (png, size[0], size[1], snap)))
    for name, verdict, detail in rows:
        print("| %s | %s | %s |" % (name, verdict, detail))
    return 1 if any(v == "FAIL" for _, v, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
