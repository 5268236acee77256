"""Real-GPU check of the pages that answer each question (issue 56), where torch 2.11, a GPU and
(for the rendered checks and screenshots) Chromium are present:

    python3 tests/gpu/validate_html_pages.py BUILD_DIR [OUT_DIR]

Runs under `cumemtrace run`: an MLP, a GPT-style model and a leaking loop (tests/gpu/user_terms.py
mlp|gpt|leak, 8 steps), a fragmentation OOM (tests/gpu/validate_oom.py --child frag) and a
two-rank torchrun job with 1 GiB planted on rank 1 (tests/gpu/ddp_skew.py, 8 steps; both ranks on
one GPU when there is one). Writes OUT/page_{mlp,gpt,leak,oom}.html, OUT/page_job.html (html DIR)
and OUT/page_diff.html (html RANK0 RANK1), and checks:
  - each page's data is the CLI's document: the ledger `report --format json`'s pytorch_ledger,
    the OOM card's what-if table `whatif --format json`'s, the job page's ranks `report DIR
    --format json`'s, the diff page's `diff --format json`'s; `html` takes under 10 s;
  - with Chromium: every ledger number on the drawn page equals report's (as report formats it),
    the training pages open on the step axis, the job page lists the ranks with rank 1 flagged,
    the diff page has the planted line (ddp_skew.py:37) at +1.00 GiB; screenshots
    OUT/page_*.png (1400 px wide, whole page) for people to look at.
Prints | what | PASS/FAIL | detail | rows; exit 1 on any FAIL.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "viz"))
from browser_pages_test import Tree, fmt_bytes, ledger_paths  # noqa: E402
from browser_test import find_browser  # noqa: E402

rows = []


def row(what, ok, detail=""):
    rows.append((what, "PASS" if ok else "FAIL", " ".join(str(detail).split())[-300:]))


def page_data(page):
    text = open(page).read()
    m = re.search(r'<script type="application/json" id="cumemtrace-data">(.*?)</script>', text,
                  re.S)
    return json.loads(m.group(1))


def cli_json(ct, *args):
    p = subprocess.run([ct, *args], capture_output=True, text=True, timeout=300)
    return json.loads(p.stdout) if p.stdout.strip() else None, p


def html(ct, out, name, *inputs):
    page = os.path.join(out, "page_%s.html" % name)
    start = time.time()
    p = subprocess.run([ct, "html", *inputs, "-o", page, "-f"], capture_output=True, text=True,
                       timeout=300)
    took = time.time() - start
    row("%s: html writes the page in under 10 s" % name, p.returncode == 0 and took < 10,
        "exit %d, %.1f s, %s" % (p.returncode, took, p.stderr.strip()[-200:]))
    return page if p.returncode == 0 else None


def browse(browser, page, *extra):
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
                            "--user-data-dir=" + profile, "--window-size=1400,2400",
                            "--virtual-time-budget=10000", *extra, "file://" + page],
                           capture_output=True, text=True, timeout=180)
        return p.stdout


def rendered_ledger(browser, page, want, name):
    tree = Tree(browse(browser, page, "--dump-dom"))
    shown = {n.attrs["data-ledger"]: int(n.attrs["data-bytes"])
             for n in tree.root.find(lambda n: "data-ledger" in n.attrs)}
    bad = [k for k, n in [(n.attrs["data-ledger"], n) for n in
                          tree.root.find(lambda n: "data-ledger" in n.attrs)]
           if fmt_bytes(abs(int(n.attrs["data-bytes"]))) not in n.text()]
    row("%s: the drawn ledger shows report's numbers, as report formats them" % name,
        shown == want and not bad, "%d shown, %d in report, %d misformatted" %
        (len(shown), len(want), len(bad)))
    (svg,) = tree.root.find(lambda n: n.tag == "svg" and "chart" in n.classes())[:1] or [None]
    row("%s: the chart opens on the step axis" % name,
        svg is not None and svg.attrs.get("data-axis") == "step",
        svg.attrs.get("data-axis") if svg is not None else "no chart")
    return tree


def main():
    build = os.path.abspath(sys.argv[1])
    out = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "/tmp/cumemtrace-html-pages")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    ct = os.path.join(build, "bin", "cumemtrace")
    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    browser = find_browser()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    snaps = {}
    for m in ("mlp", "gpt", "leak"):
        d = os.path.join(out, "t_" + m)
        p = subprocess.run([ct, "run", "-q", "-o", d, "--", sys.executable,
                            os.path.join(HERE, "user_terms.py"), m, "8",
                            os.path.join(out, "truth_%s.json" % m)],
                           env=env, capture_output=True, text=True, timeout=300)
        found = [f for f in glob.glob(d + "/*.json") if ".oom." not in f]
        row("%s: run traced the loop" % m, p.returncode == 0 and found, p.stderr[-200:])
        if found:
            snaps[m] = found[0]
    d = os.path.join(out, "t_oom")
    p = subprocess.run([ct, "run", "-q", "-o", d, "--", sys.executable,
                        os.path.join(HERE, "validate_oom.py"), "--child", "frag",
                        os.path.join(out, "frag.truth.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    found = sorted(glob.glob(d + "/*.oom.json"))
    row("oom: run traced the fragmentation OOM", p.returncode == 0 and found, p.stderr[-200:])
    if found:
        snaps["oom"] = found[0]
    job = os.path.join(out, "t_job")
    os.makedirs(os.path.join(out, "torch"))
    jenv = dict(env)
    smi = shutil.which("nvidia-smi")
    ngpu = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.count("GPU ") if smi else 0
    if ngpu < 2:
        jenv["CUMEMTRACE_SHARED_GPU"] = "1"
    p = subprocess.run([ct, "run", "-q", "-o", job, "--", "torchrun", "--standalone",
                        "--nproc_per_node", "2", os.path.join(HERE, "ddp_skew.py"),
                        os.path.join(out, "torch"), "8"],
                       env=jenv, capture_output=True, text=True, timeout=600, cwd=repo)
    ranks = sorted(f for f in glob.glob(job + "/*.rank*.json") if "periodic" not in f)
    row("job: run traced both ranks", len(ranks) == 2, "%d files; %s" % (len(ranks), p.stderr[-200:]))

    pages = {}
    for m in ("mlp", "gpt", "leak", "oom"):
        if m not in snaps:
            continue
        page = html(ct, out, m, snaps[m])
        if not page:
            continue
        pages[m] = page
        data = page_data(page)
        rep, _ = cli_json(ct, "report", "--format", "json", snaps[m])
        if m != "oom":
            row("%s: the page's ledger is report --format json's" % m,
                rep is not None and data["ledger"] == rep["pytorch_ledger"] and data["ledger"],
                "steps %s" % (data["ledger"] or {}).get("steps"))
            if browser:
                rendered_ledger(browser, page, ledger_paths(rep["pytorch_ledger"]), m)
        if m == "leak":
            g = data["ledger"]["devices"][0]["growth"] if data["ledger"] else {}
            row("leak: growth per step judged, with its lines", g.get("judged") and g.get("by_site"),
                json.dumps(g)[:200])
        if m == "oom":
            want, wp = cli_json(ct, "whatif", "--format", "json", "--alloc-conf",
                                "expandable_segments:True", "--alloc-conf", "max_split_size_mb:128",
                                snaps[m])
            w = data.get("whatif") or {}
            same = (w.get("rows") == want) if want is not None else bool(w.get("why"))
            row("oom: the card's what-if table is whatif --format json's (or says why not)",
                data["ooms"] and same, w.get("why") or "%d rows" % len(w.get("rows", [])))
    if len(ranks) == 2:
        page = html(ct, out, "job", job)
        want, _ = cli_json(ct, "report", "--format", "json", job)
        if page:
            pages["job"] = page
            data = page_data(page)
            row("job: the page's rank table is report DIR --format json's",
                want is not None and data["ranks"] == want["ranks"],
                [r["process"] for r in data["ranks"]["rows"]])
            flagged = [r["process"] for r in data["ranks"]["rows"] if r["flagged"]]
            row("job: rank 1 flagged, with its lines", len(flagged) == 1 and "rank 1" in flagged[0],
                flagged)
            row("job: a chart per rank", len(data["charts"]) == 2, len(data["charts"]))
        page = html(ct, out, "diff", ranks[0], ranks[1])
        want, _ = cli_json(ct, "diff", "--format", "json", ranks[0], ranks[1])
        if page:
            pages["diff"] = page
            data = page_data(page)
            row("diff: the page's document is diff --format json's",
                want is not None and data["diff"] == want, "%d lines" % len(data["diff"]["sites"]))
            planted = [s for s in data["diff"]["sites"] if "ddp_skew.py:37" in s["site"]]
            row("diff: the planted line at +1.00 GiB", planted and
                fmt_bytes(planted[0]["peak_change_bytes"]) == "1.00 GiB", planted[:1])
    if browser:
        for name, page in pages.items():
            png = os.path.join(out, "page_%s.png" % name)
            browse(browser, page, "--screenshot=" + png)
            row("%s: screenshot" % name, os.path.exists(png), png)
        if "job" in pages:
            tree = Tree(browse(browser, pages["job"], "--dump-dom"))
            shown = [r.attrs["data-process"] for r in
                     tree.root.find(lambda n: n.tag == "tr" and "rank-row" in n.classes())]
            row("job: the drawn table lists both ranks", len(shown) == 2, shown)
        if "diff" in pages:
            text = Tree(browse(browser, pages["diff"], "--dump-dom")).root.text()
            row("diff: the drawn page shows the planted line", "ddp_skew.py:37" in text, "")
    else:
        rows.append(("the drawn pages and their screenshots", "SKIP",
                     "no chromium, chromium-browser or google-chrome on PATH: the pages are in "
                     + out + " to open elsewhere"))
    for what, verdict, detail in rows:
        print("| %-72s | %s | %s" % (what, verdict, detail))
    return 1 if any(v == "FAIL" for _, v, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
