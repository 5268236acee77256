"""tests/gpu/screenshot_pages.py on the project's fixtures, laid out as validate_trainers.py's OUT
(t_trainer/ with PyTorch's pickle, t_fsdp2/ with two ranks' snapshots and their summaries, a
truth file beside them): one PNG per snapshot, named after its folder, 1600 px wide and as tall
as the whole page (its content's height, measured apart in Chromium), a real picture; nothing
else written; bad inputs exit 2 with one line. Exit 77 (skipped) only
when no Chromium binary exists."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "gpu", "screenshot_pages.py")
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
from screenshot_pages import chromium, find_browser, png_size  # noqa: E402

sys.path.insert(0, HERE)
from browser_test import png_is_picture  # noqa: E402

# Written into a copy of the page: the height of its content (the body's, which does not depend on
# the window's height: the page has no viewport-height units).
CONTENT = ('<script>document.body.setAttribute("data-content-height", '
           'String(document.body.scrollHeight));</script>')


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=600)


def content_height(browser, page, width):
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "content.html")
        with open(page, encoding="utf-8") as f:
            text = f.read()
        at = text.rfind("</body>")
        with open(probe, "w", encoding="utf-8") as f:
            f.write(text[:at] + CONTENT + text[at:])
        out = chromium(browser, probe, width, 700, "--dump-dom").stdout
        m = re.search(r'data-content-height="(\d+)"', out)
        assert m, "the content probe did not run"
        return int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cumemtrace", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    browser = find_browser()
    if browser is None:
        print("SKIP: no Chromium binary (chromium, chromium-browser, google-chrome) on PATH")
        return 77
    shutil.rmtree(a.out, ignore_errors=True)
    runs, out = os.path.join(a.out, "trainers"), os.path.join(a.out, "pictures")
    os.makedirs(os.path.join(runs, "t_trainer"))
    os.makedirs(os.path.join(runs, "t_fsdp2"))
    shutil.copy(os.path.join(a.fixtures, "torch-2.11", "snapshot.pickle"),
                os.path.join(runs, "t_trainer"))
    for rank in ("rank0", "rank1"):
        shutil.copy(os.path.join(a.fixtures, "h100-ddp-skew", rank + ".json"),
                    os.path.join(runs, "t_fsdp2"))
        with open(os.path.join(runs, "t_fsdp2", rank + ".summary"), "w") as f:
            f.write("{}")  # a run's summary beside its snapshot: not a page
    with open(os.path.join(runs, "trainer.truth.json"), "w") as f:
        f.write("{}")  # validate_trainers.py's figures beside the runs: not a page

    p = run("--cumemtrace", a.cumemtrace, "--out", out, runs)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = p.stdout.splitlines()
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| fsdp2.rank0", "PASS"], ["| fsdp2.rank1", "PASS"], ["| trainer", "PASS"]], p.stdout
    names = ("fsdp2.rank0", "fsdp2.rank1", "trainer")
    assert sorted(os.listdir(out)) == sorted(n + e for n in names for e in (".html", ".png"))
    for name in names:
        png, page = os.path.join(out, name + ".png"), os.path.join(out, name + ".html")
        width, height = png_size(png)
        assert width == 1600, (name, width)
        assert "(1600x%d)" % height in p.stdout
        # the whole page in the picture, and not much more: a page shorter than a window is
        # drawn as tall as the window of the script's first pass (1000 px less its frame)
        content = content_height(browser, page, width)
        assert content <= height <= max(content, 1000), (name, content, height)
        png_is_picture(Path(png))

    # One run's folder named as it is: its page is named after it, without the t_.
    one = os.path.join(a.out, "one")
    p = run("--cumemtrace", a.cumemtrace, "--out", one, os.path.join(runs, "t_trainer"))
    assert p.returncode == 0 and p.stdout.startswith("| trainer | PASS | "), p.stdout + p.stderr
    assert sorted(os.listdir(one)) == ["trainer.html", "trainer.png"]

    # Bad inputs: one line, exit 2, nothing written.
    empty = os.path.join(a.out, "empty")
    os.makedirs(empty)
    for args, line in [
            ((empty,), "screenshot_pages.py: no snapshot (*.json, *.pickle) in " + empty),
            ((os.path.join(a.out, "missing"),),
             "screenshot_pages.py: no such file or folder: " + os.path.join(a.out, "missing")),
    ]:
        p = run("--cumemtrace", a.cumemtrace, "--out", os.path.join(a.out, "none"), *args)
        assert (p.returncode, p.stdout, p.stderr) == (2, "", line + "\n"), p
    p = run("--cumemtrace", a.cumemtrace, "--out", os.path.join(runs, "t_trainer"),
            os.path.join(runs, "t_trainer"))
    assert (p.returncode, p.stderr) == (2, "screenshot_pages.py: --out is an input folder: "
                                        + os.path.join(runs, "t_trainer") + "\n"), p
    assert not os.path.exists(os.path.join(a.out, "none"))
    assert sorted(os.listdir(os.path.join(runs, "t_trainer"))) == ["snapshot.pickle"]
    print("PASS: %d pages drawn whole" % len(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
