#!/usr/bin/env python3
"""The pages that answer each question, in a real browser (headless Chromium), checked by the text
a person reads on them against the CLI's own JSON:

  browser_pages_test.py --cumemtrace BIN --fixture TORCH_SNAPSHOT.pickle --out DIR

1. A PyTorch run that leaks 1 MiB a step after a 6 s idle start (make_synthetic.py --leak-mib
   --idle-us): the ledger on the page holds exactly the numbers of `report --format json`'s
   pytorch_ledger (every phase of the first and steady step, its categories and lines, the peaks
   by category, cache, other libraries, growth and its lines), each shown as report formats it;
   it says "grows 1.00 MiB a step" at the leaking line; clicking a line row marks its span on
   the chart and leaves only its category's band lit. The x axis is by step by default: steps
   equally wide, labelled "step N"; on the time axis the same steps are squeezed into a sliver.
2. Hovering the real torch 2.11 fixture's chart (by line) names the band under the pointer and
   shows its line's largest stack.
3. A job of two ranks, one holding 256 MiB more, the other refused 512 MiB once (html DIR): the
   rank table's rows, values, OOMs and live at exit are `report DIR --format json`'s, rank 1 is
   flagged with its divergence step and line, the job's first OOM is rank 0's with what rank 1
   held then, and each rank has its small chart.
4. Two runs (html A B): the diff page's rows are `diff --format json`'s, row for row.
5. `whatif --format html` on the real torch 2.11 fixture: its table is `whatif --format json`'s;
   with an OOM appended to the fixture, the OOM card carries the same table.
6. The H100 torch.compile(mode="reduce-overhead") fixture: the ledger on the page is report's,
   and it says where the replayed steps' gradients are (held in the CUDA graph pool, 32.1 MiB).
Screenshots: DIR/page-*.png. Exit 77 (skipped) only when no Chromium binary exists.
"""
import argparse
import html.parser
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from browser_test import chromium, find_browser, screenshot  # noqa: E402

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.kids = tag, dict(attrs), parent, []

    def text(self):
        return "".join(k if isinstance(k, str) else k.text() for k in self.kids)

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def find(self, pred):
        out = []
        for k in self.kids:
            if isinstance(k, Node):
                if pred(k):
                    out.append(k)
                out.extend(k.find(pred))
        return out


class Tree(html.parser.HTMLParser):
    """The dumped DOM as a tree, to read what a person sees in each element."""

    def __init__(self, text):
        super().__init__()
        self.root = self.cur = Node("#root", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.kids.append(data)


def fmt_bytes(n):
    """format_bytes (snapshot/size_format.cpp): binary units, three significant digits."""
    if n < 1024:
        return f"{n} B"
    v, u = float(n), 0
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    d = 0 if v >= 100 else 1 if v >= 10 else 2
    return f"{v:.{d}f} {['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'][u]}"


def fmt_delta(n):
    return ("-" if n < 0 else "+") + fmt_bytes(abs(n))


class Keys(dict):
    """A dict whose keys are JSON paths written compactly, as JSON.stringify does."""

    def __setitem__(self, path, value):
        super().__setitem__(json.dumps(json.loads(path), separators=(",", ":")), value)


def run(*cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: exit {p.returncode}: {p.stderr}")
    return p.stdout


def page_tree(browser, page, fragment=""):
    t = Tree(chromium(browser, page, "--dump-dom", fragment=fragment))
    (body,) = t.root.find(lambda n: n.tag == "body")
    assert "data-render-ms" in body.attrs, f"{page}: the page script did not finish"
    return t


def ledger_paths(led):
    """Every number of report's pytorch_ledger the page must show: {JSON path as the page
    writes it (JSON.stringify): bytes}."""
    out = Keys()
    for k, d in enumerate(led["devices"]):
        base = ["devices", k]
        for key in ("first_step", "steady_step"):
            if not d[key]:
                continue
            for i, p in enumerate(d[key]["phases"]):
                path = base + [key, "phases", i]
                for f in ("allocated_before_bytes", "allocated_after_bytes",
                          "allocated_peak_bytes", "reserved_after_bytes"):
                    out[json.dumps(path + [f])] = p[f]
                for c, b in p["added_by_category"].items():
                    out[json.dumps(path + ["added_by_category", c])] = b
                for j, s in enumerate(p["added_by_site"]):
                    out[json.dumps(path + ["added_by_site", j, "bytes"])] = s["bytes"]
                for j, m in enumerate(p.get("added_by_module", [])):
                    out[json.dumps(path + ["added_by_module", j, "bytes"])] = m["bytes"]
        for key in ("allocated_peak", "reserved_peak"):
            m, path = d[key], base + [key]
            for f in ("allocated_bytes", "reserved_bytes", "cached_free_bytes", "context_bytes"):
                if m[f] is not None:
                    out[json.dumps(path + [f])] = m[f]
            for c, b in m["by_category"].items():
                out[json.dumps(path + ["by_category", c])] = b
            for lib, b in m["other_libraries"].items():
                out[json.dumps(path + ["other_libraries", lib])] = b
            for j, s in enumerate(m["by_site"]):
                out[json.dumps(path + ["by_site", j, "bytes"])] = s["bytes"]
        held = d.get("held_outside_blocks") or {}
        for key in ("gradient_bytes", "outside_segments_bytes"):
            if held.get(key):
                out[json.dumps(base + ["held_outside_blocks", key])] = held[key]
        g = d["growth"]
        if g["judged"]:
            out[json.dumps(base + ["growth", "bytes_per_step"])] = g["bytes_per_step"]
            out[json.dumps(base + ["growth", "live_bytes"])] = g["live_bytes"]
            for j, s in enumerate(g["by_site"]):
                out[json.dumps(base + ["growth", "by_site", j, "bytes"])] = s["bytes"]
    return out


def ledger_shown(cumemtrace, browser, snap, page):
    """The page's tree and report's ledger paths, after checking that the page shows exactly
    report's ledger numbers, each as report formats it."""
    rep = json.loads(run(cumemtrace, "report", "--format", "json", snap))
    want = ledger_paths(rep["pytorch_ledger"])
    tree = page_tree(browser, page)
    shown = {}
    for n in tree.root.find(lambda n: "data-ledger" in n.attrs):
        b = int(n.attrs["data-bytes"])
        text = n.text()
        # What a person reads is report's number as report formats it (deltas signed).
        assert fmt_bytes(abs(b)) in text, f"ledger {n.attrs['data-ledger']}: shows {text!r}, holds {b}"
        shown[n.attrs["data-ledger"]] = b
    assert shown == want, (f"ledger: page and report differ:\n missing {set(want) - set(shown)}\n"
                           f" extra {set(shown) - set(want)}\n differing "
                           f"{[(k, shown[k], want[k]) for k in set(shown) & set(want) if shown[k] != want[k]]}")
    return tree, want


def check_ledger(cumemtrace, browser, snap, page, out):
    tree, want = ledger_shown(cumemtrace, browser, snap, page)
    # The phases by module (the Linear calls name blocks.0 and blocks.1) are shown too.
    assert any("added_by_module" in k for k in want), sorted(want)[:5]
    growth = " ".join(n.text() for n in tree.root.find(lambda n: "growth" in n.classes()))
    assert "grows 1.00 MiB a step" in growth, growth
    lines = [n.text() for n in tree.root.find(lambda n: "ledger-growth" in n.classes())]
    assert lines and "forward (train.py:79)" in lines[0], lines
    # The step axis, the default: the steps equally wide, labelled by number.
    (svg,) = tree.root.find(lambda n: n.tag == "svg" and "chart" in n.classes())
    assert svg.attrs.get("data-axis") == "step", svg.attrs
    ticks = [n.text() for n in svg.find(lambda n: "tick" in n.classes())]
    assert ticks == ["start"] + [f"step {k}" for k in range(1, 21, 2)], ticks
    xs = [float(n.attrs["x1"]) for n in svg.find(lambda n: n.tag == "line" and "step" in n.classes())]
    widths = [b - a for a, b in zip(xs, xs[1:])]
    assert len(xs) == 20 and max(widths) - min(widths) < 0.5, widths
    step_share = (xs[-1] - xs[0]) / (float(svg.attrs["viewbox"].split()[2]) - 90)
    assert step_share > 0.8, f"the steps take {step_share:.0%} of the step axis"
    # On the time axis the 6 s start squeezes the same steps into a sliver.
    (tsvg,) = page_tree(browser, page, "#axis=time").root.find(
        lambda n: n.tag == "svg" and "chart" in n.classes())
    txs = [float(n.attrs["x1"]) for n in tsvg.find(lambda n: n.tag == "line" and "step" in n.classes())]
    time_share = (txs[-1] - txs[0]) / (float(tsvg.attrs["viewbox"].split()[2]) - 90)
    assert tsvg.attrs.get("data-axis") == "time" and time_share < 0.05, time_share
    screenshot(browser, page, out / "page-leak.png")
    print(f"ok ledger: {len(want)} numbers equal report's; steps take {step_share:.0%} of the "
          f"step axis, {time_share:.1%} of the time axis")


def check_focus(browser, page):
    """Clicking the growth line lights its span and its category's band alone (the page's own
    click handler, run by a link fragment would not reach it: a small script instead)."""
    probe = page.with_name(page.stem + "-click.html")
    text = page.read_text()
    click = ("<script>document.querySelector('table.ledger-growth tr.line-row').click();"
             "</script></body>")
    probe.write_text(text.replace("</body>", click, 1))
    tree = page_tree(browser, probe)
    focus = tree.root.find(lambda n: n.tag == "rect" and "focus" in n.classes())
    lit = [n for n in tree.root.find(lambda n: n.tag == "path" and "series" in n.classes())
           if "dim" not in n.classes()]
    titles = [n.find(lambda t: t.tag == "title")[0].text() for n in lit]
    assert len(focus) == 1 and titles == ["activation"], (len(focus), titles)
    print("ok click: the growth line's span marked, only its category lit")


def check_hover(cumemtrace, browser, fixture, out):
    """Hovering a band of the real PyTorch snapshot's chart (by line: its tensors, the cache a
    band of its own) names the band under the pointer, its bytes then, and its line's largest
    stack, as the live table lists it."""
    page = out / "fixture.html"
    run(cumemtrace, "html", fixture, "-o", page)
    probe = out / "fixture-hover.html"
    hover = ("<script>const svg = document.querySelector('svg.chart');"
             "const r = svg.getBoundingClientRect();"
             "svg.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.9, "
             "clientY: r.top + r.height * 0.88, bubbles: true}));</script></body>")
    probe.write_text(page.read_text().replace("</body>", hover, 1))
    tree = page_tree(browser, probe)
    (tip,) = tree.root.find(lambda n: "tip" in n.classes())
    (under,) = tip.find(lambda n: "under" in n.classes())
    frames = [n.text().strip() for n in tip.find(lambda n: "frame" in n.classes())]
    legend = [n.attrs.get("title") for n in tree.root.find(lambda n: "data-series" in n.attrs
                                                             and n.tag == "span")]
    name = under.text().split("  ", 1)[1]
    assert name == legend[0] and "(" in name, (under.text(), legend)
    # Its largest stack, innermost first, as the peak or exit table shows it.
    table = [n for n in tree.root.find(lambda n: n.tag == "tr" and n.attrs.get("data-site") == name)]
    stacks = table[0].parent.find(lambda n: n.tag == "ol") if table else []
    assert frames and stacks, (frames, len(stacks))
    print(f"ok hover: the band under the pointer is {name!r}, {len(frames)} frames of its stack")


def check_job(cumemtrace, browser, out):
    job = out / "job"
    job.mkdir()
    run(sys.executable, HERE / "make_synthetic.py", "--pytorch-steps", "10", "--rank", "0",
        "--world-size", "2", "--oom-mib", "512", job / "rank0.json")
    run(sys.executable, HERE / "make_synthetic.py", "--pytorch-steps", "10", "--rank", "1",
        "--world-size", "2", "--extra-mib", "256", job / "rank1.json")
    want = json.loads(run(cumemtrace, "report", "--format", "json", job))["ranks"]
    page = out / "job.html"
    run(cumemtrace, "html", job, "-o", page)
    tree = page_tree(browser, page)
    rows = tree.root.find(lambda n: n.tag == "tr" and "rank-row" in n.classes())
    assert [r.attrs["data-process"] for r in rows] == [r["process"] for r in want["rows"]], rows
    for r, w in zip(rows, want["rows"]):
        cells = {c.attrs["data-column"]: c for c in r.find(lambda n: "data-column" in n.attrs)}
        # The compared columns, then (no median) the OOMs and what was live at exit.
        assert list(cells) == want["columns"] + ["OOMs", "live at exit"], list(cells)
        for col, v in w["values"].items():
            shown = cells[col].text()
            assert shown == (fmt_bytes(v) if v is not None else "\u2013"), (col, shown, v)
            assert ("flag" in cells[col].classes()) == (col in w["flagged"]), (w["process"], col)
        assert cells["OOMs"].text() == str(w["ooms"]), (w["process"], cells["OOMs"].text())
        assert cells["live at exit"].text() == fmt_bytes(w["live_at_exit_bytes"]), w["process"]
    assert [w["ooms"] for w in want["rows"]] == [1, 0], want["rows"]
    # The job's first OOM, as report DIR says it: rank 0's, and what rank 1 held then.
    first = want["first_oom"]
    (oom,) = tree.root.find(lambda n: "first-oom" in n.classes())
    text = oom.text()
    assert first["process"] in text and first["line"] in text, text
    assert f"the request: 512 MiB at {first['site']}" in text and "train.py:95" in text, text
    others = oom.find(lambda n: n.tag == "tr" and "oom-other" in n.classes())
    assert [(o.attrs["data-process"], o.find(lambda n: "data-bytes" in n.attrs)[0].text())
            for o in others] == [(o["process"], fmt_bytes(o["bytes"])) for o in first["others"]]
    (flagged,) = [w for w in want["rows"] if w["flagged"]]
    assert flagged["rank"] == 1, flagged
    (sec,) = tree.root.find(lambda n: "flagged-rank" in n.classes())
    text = sec.text()
    assert sec.attrs["data-process"] == flagged["process"], sec.attrs
    assert f"at the end of step {flagged['divergence']['step']}" in text, text
    assert "forward (train.py:88)" in text and "+256 MiB" in text, text
    minis = tree.root.find(lambda n: "mini" in n.classes())
    assert [m.attrs["data-process"] for m in minis] == [r["process"] for r in want["rows"]], minis
    screenshot(browser, page, out / "page-job.png")
    print(f"ok job: {len(rows)} ranks as report's; {flagged['process']} flagged "
          f"({', '.join(flagged['flagged'])}), diverging at step {flagged['divergence']['step']}")


def check_diff(cumemtrace, browser, base, new, out):
    want = json.loads(run(cumemtrace, "diff", "--format", "json", base, new))
    page = out / "diff.html"
    run(cumemtrace, "html", base, new, "-o", page)
    # diff --format html is the same page.
    assert run(cumemtrace, "diff", "--format", "html", base, new) == page.read_text()
    tree = page_tree(browser, page)
    rows = tree.root.find(lambda n: n.tag == "tr" and "diff-row" in n.classes())
    expect = [("device", d["label"] or f"device {d['device']}",
               [d["base_peak_bytes"], d["new_peak_bytes"], d["peak_change_bytes"],
                d["base_live_bytes"], d["new_live_bytes"], d["live_change_bytes"]])
              for d in want["devices"]]
    for kind in ("peaks", "phases", "categories"):
        expect += [(kind, v["name"], [v["base_bytes"], v["new_bytes"], v["change_bytes"]])
                   for v in want["pytorch"][kind]]
    expect += [("site", s["site"], [s["base_peak_bytes"], s["new_peak_bytes"],
                                    s["peak_change_bytes"], s["base_live_bytes"],
                                    s["new_live_bytes"], s["live_change_bytes"]])
               for s in want["sites"]]
    got = []
    for r in rows:
        cells = r.find(lambda n: "data-bytes" in n.attrs)
        vals = [int(c.attrs["data-bytes"]) for c in cells]
        for c, v in zip(cells, vals):
            assert c.text() in (fmt_bytes(v), fmt_delta(v)), (c.text(), v)
        got.append((r.attrs["data-kind"], r.attrs["data-name"], vals))
    assert got == expect, f"diff page rows:\n{got}\nwanted\n{expect}"
    leak = [g for g in got if g[0] == "site" and g[1].startswith("forward (train.py:79)")]
    assert leak and leak[0][2][5] == 20 << 20, leak
    screenshot(browser, page, out / "page-diff.png")
    print(f"ok diff: {len(rows)} rows as diff --format json's")


def check_whatif(cumemtrace, browser, fixture, out):
    want = json.loads(run(cumemtrace, "whatif", "--format", "json", "--alloc-conf",
                          "expandable_segments:True", fixture))
    page = out / "whatif.html"
    page.write_text(run(cumemtrace, "whatif", "--format", "html", "--alloc-conf",
                        "expandable_segments:True", fixture))
    tree = page_tree(browser, page)
    rows = tree.root.find(lambda n: n.tag == "tr" and "whatif-row" in n.classes())
    assert [r.attrs["data-conf"] for r in rows] == [w["alloc_conf"] for w in want], rows
    for r, w in zip(rows, want):
        vals = [int(c.attrs["data-bytes"]) for c in r.find(lambda n: "data-bytes" in n.attrs)]
        assert vals == [w["reserved_peak_bytes"], w["allocated_peak_bytes"],
                        w["fragmentation_bytes"]], (vals, w)
        assert r.text().startswith(w["alloc_conf"] or "defaults"), r.text()
    screenshot(browser, page, out / "page-whatif.png")
    print(f"ok whatif: {len(rows)} configurations as whatif --format json's")

    # The OOM card carries the same table: the fixture with an OOM appended (100 MiB asked, 48
    # MiB free on the device: a budget of 136 MiB, which the recorded run fits until then).
    snap = pickle.loads(Path(fixture).read_bytes())
    trace = snap["device_traces"][0]
    trace.append(dict(trace[-1], action="oom", addr=0, size=100 << 20, device_free=48 << 20,
                      time_us=trace[-1]["time_us"] + 10))
    oom = out / "oom.json"
    oom.write_text(json.dumps(snap))
    want = json.loads(run(cumemtrace, "whatif", "--format", "json", "--alloc-conf",
                          "expandable_segments:True", "--alloc-conf", "max_split_size_mb:128", oom))
    page = out / "oom.html"
    run(cumemtrace, "html", oom, "-o", page)
    tree = page_tree(browser, page)
    (card,) = tree.root.find(lambda n: "oom-card" in n.classes())
    rows = card.find(lambda n: n.tag == "tr" and "whatif-row" in n.classes())
    got = [(r.attrs["data-conf"], [int(c.attrs["data-bytes"]) for c in
                                   r.find(lambda n: "data-bytes" in n.attrs)],
            "out of memory" in r.text()) for r in rows]
    assert got == [(w["alloc_conf"], [w["reserved_peak_bytes"], w["allocated_peak_bytes"],
                                      w["fragmentation_bytes"]], w["oom"]) for w in want], got
    screenshot(browser, page, out / "page-oom.png")
    print(f"ok oom card: its what-if table has whatif's {len(rows)} rows")


def check_graph_pool(cumemtrace, browser, snap, out):
    page = out / "graph_pool.html"
    run(cumemtrace, "html", snap, "-o", page)
    tree, want = ledger_shown(cumemtrace, browser, snap, page)
    assert want.get('["devices",0,"held_outside_blocks","gradient_bytes"]') == 33640960
    held = [n.text() for n in tree.root.find(lambda n: "held" in n.classes())]
    assert held == ["held outside PyTorch's allocated blocks at the end of step 6: gradient "
                    "32.1 MiB, in a CUDA graph pool: the graphs' replays rebuild their outputs "
                    "over the pool's memory with no allocator call, so memory_allocated() counts "
                    "it free and reserved holds it"], held
    print(f"ok graph pool: {len(want)} ledger numbers equal report's; the pool's gradients shown")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cumemtrace", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--graph-pool-fixture", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    browser = find_browser()
    if not browser:
        print("SKIP: no Chromium binary (chromium, chromium-browser, google-chrome) on PATH")
        return 77
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    leak = out / "leak.json"
    run(sys.executable, HERE / "make_synthetic.py", "--pytorch-steps", "20", "--leak-mib", "1",
        "--idle-us", "6000000", "--modules", leak)
    page = out / "leak.html"
    run(a.cumemtrace, "html", leak, "-o", page)
    check_ledger(a.cumemtrace, browser, leak, page, out)
    check_focus(browser, page)
    check_hover(a.cumemtrace, browser, Path(a.fixture), out)
    check_job(a.cumemtrace, browser, out)
    base = out / "base.json"
    run(sys.executable, HERE / "make_synthetic.py", "--pytorch-steps", "20", base)
    check_diff(a.cumemtrace, browser, base, leak, out)
    check_whatif(a.cumemtrace, browser, Path(a.fixture), out)
    check_graph_pool(a.cumemtrace, browser, Path(a.graph_pool_fixture), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
