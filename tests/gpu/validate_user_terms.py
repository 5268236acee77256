"""Compares cumemtrace's ledger of unmarked training scripts (tests/gpu/user_terms.py) with
PyTorch's own account of the same run, and its activations with MemTracker's.

Usage: validate_user_terms.py OUT
OUT holds, per model M: truth_M.json (user_terms.py's readings), report_M.json (`cumemtrace
report --format json` of its snapshot), and for some models mt_M.json (the MemTracker run).
Prints one table row per comparison: '| what | PASS/FAIL | ours / theirs |'. Exit 1 if any fails.

What must agree (issue "Answers in the PyTorch user's terms"):
- each phase's allocated bytes before and after, first step and steady step, with PyTorch's
  memory_allocated() read by the loop at the same moments, within one block's rounding: PyTorch
  counts blocks (requests rounded to 512 B, a large block may keep up to 1 MiB it did not split),
  the trace's alloc entries carry the requested size, so a phase's delta may differ by the
  rounding of the tensors it made;
- parameters and optimizer state at the allocated peak with the bytes of model.parameters() and
  of the optimizer's state tensors, exactly (their sizes are multiples of 512 here or rounded the
  same way: both sides are printed);
- activations (what the steady step's forward left alive for backward) plus the input batch
  (MemTracker counts the root's input as an activation) with MemTracker's activations in the
  root module's Pre-Backward snapshot, within 1%, both in tensor bytes (requests rounded up to
  512 B; the blocks, shown beside, also hold large blocks' unsplit remainders); the batch is
  "input" at the allocated peak, exactly its storage's bytes; INFO rows give MemTracker's
  Pre-Backward categories and ours (forward's additions, the allocated peak) to explain a miss;
- the leak loop's growth per step with one kept output, at the loop's own line.
"""
import json
import os
import sys

MIB = 1 << 20
ROUND_SLACK = 1 * MIB  # one large block's rounding (see above)
rows, failed = [], []


def row(what, ok, detail):
    """ok None: an INFO row (what explains a comparison; judged by no one)."""
    rows.append("| %-62s | %s | %s" % (what, "INFO" if ok is None else "PASS" if ok else "FAIL",
                                      detail))
    if ok is not None and not ok:
        failed.append(what)


def mib(b):
    return "%.2f MiB" % (b / MIB)


def load(path):
    with open(path) as f:
        return json.load(f)


def ledger_of(report):
    led = report.get("pytorch_ledger")
    if not led or not led.get("devices"):
        return None
    return led["devices"][0]


def phases_by_name(step):
    """{'forward': phase, 'backward': ..., 'optimizer': ...}: the first span of each kind."""
    out = {}
    for p in step["phases"]:
        out.setdefault(p["phase"], p)
    return out


def by_category(moment):
    return dict(moment["by_category"])  # {category: bytes}


def check_model(out, m):
    truth_path, report_path = os.path.join(out, "truth_%s.json" % m), os.path.join(
        out, "report_%s.json" % m)
    if not (os.path.exists(truth_path) and os.path.exists(report_path)):
        row("%s: run produced truth and report" % m, False, "missing files")
        return
    truth, report = load(truth_path), load(report_path)
    dev = ledger_of(report)
    if dev is None:
        row("%s: report has a ledger" % m, False, "no pytorch_ledger in report")
        return
    readings = {(r["at"], r["step"]): r for r in truth["readings"]}
    for which in ("first_step", "steady_step"):
        step = dev.get(which)
        if not step:
            row("%s: %s in the ledger" % (m, which), False, "absent")
            continue
        n = step["step"] - 1  # 0-based, as the loop counts
        phases = phases_by_name(step)
        for ph in ("forward", "backward", "optimizer"):
            p = phases.get(ph)
            if p is None:
                row("%s step %d %s phase found" % (m, n + 1, ph), False, "absent")
                continue
            tb = readings.get((ph + "_start", n))
            te = readings.get((ph + "_end", n))
            if tb is None or te is None:
                row("%s step %d %s: truth readings" % (m, n + 1, ph), False, "absent")
                continue
            ours = p["allocated_after_bytes"] - p["allocated_before_bytes"]
            theirs = te["allocated"] - tb["allocated"]
            ok = abs(ours - theirs) <= ROUND_SLACK and \
                abs(p["allocated_before_bytes"] - tb["allocated"]) <= ROUND_SLACK * 64
            row("%s step %d %s: delta vs memory_allocated()" % (m, n + 1, ph), ok,
                "%s / %s (diff %d B; before %s / %s)" % (
                    mib(ours), mib(theirs), ours - theirs, mib(p["allocated_before_bytes"]),
                    mib(tb["allocated"])))
    peak = dev["allocated_peak"]
    # The tensors' own bytes (what named_parameters() and the optimizer's state add up to) and
    # the blocks holding them (what memory_allocated() counts: the categories add up to it).
    # (each rounded up to 512 B as MemTracker counts; numel * element_size shown beside)
    cats = dict(peak["tensor_bytes_by_category"])
    row("%s: parameters at the allocated peak (tensor bytes)" % m,
        cats.get("parameter", 0) == truth["parameter_tensor_bytes"],
        "%d / %d B (numel * element_size %d B)" % (
            cats.get("parameter", 0), truth["parameter_tensor_bytes"], truth["parameter_bytes"]))
    if truth["optimizer_state_bytes"]:
        row("%s: optimizer state at the allocated peak (tensor bytes)" % m,
            cats.get("optimizer_state", 0) == truth["optimizer_state_tensor_bytes"],
            "%d / %d B (numel * element_size %d B)" % (
                cats.get("optimizer_state", 0), truth["optimizer_state_tensor_bytes"],
                truth["optimizer_state_bytes"]))
    blocks = sum(by_category(peak).values())
    row("%s: categories' blocks add up to the allocated peak" % m,
        blocks == peak["allocated_bytes"], "%d / %d B" % (blocks, peak["allocated_bytes"]))
    row("%s: allocated peak vs max_memory_allocated()" % m,
        abs(peak["allocated_bytes"] - truth["max_allocated"]) <= ROUND_SLACK * 64,
        "%s / %s" % (mib(peak["allocated_bytes"]), mib(truth["max_allocated"])))
    mt_path = os.path.join(out, "mt_%s.json" % m)
    if os.path.exists(mt_path):
        # Activations are what forward made that is alive when backward starts: the steady
        # step's forward added exactly those (an activation is never freed inside its forward),
        # against MemTracker's activations in the root's Pre-Backward snapshot of its last step.
        # Both in tensor bytes (each request rounded up to 512 B, MemTracker's count): the blocks
        # (what memory_allocated() counts) also hold large blocks' unsplit remainders, up to
        # 1 MiB each, which MemTracker never sees.
        mt = load(mt_path).get("memtracker_pre_backward") or {}
        mt_cats = {}  # by category, every device together (the optimizer's step counts: CPU)
        for cats_mt in mt.values():
            for k, v in cats_mt.items():
                mt_cats[k] = mt_cats.get(k, 0) + v
        act = sum(v for k, v in mt_cats.items() if "ACT" in k.upper())
        steady = phases_by_name(dev["steady_step"]) if dev.get("steady_step") else {}
        fwd = steady.get("forward", {})
        blocks = dict(fwd.get("added_by_category", {})).get("activation", 0)
        ours = dict(fwd.get("added_tensor_bytes_by_category", {})).get("activation", blocks)
        # MemTracker counts the root module's input as an activation (the batch is made inside
        # its context); cumemtrace names it "input" (made before forward, passed to the root):
        # the batch live at the allocated peak, which must be the batch's own bytes.
        inputs = cats.get("input", 0)
        batch = truth.get("batch_tensor_bytes")
        if batch is not None:
            row("%s: the batch is input at the allocated peak (tensor bytes)" % m,
                inputs == batch, "%d / %d B" % (inputs, batch))
        ok = act > 0 and abs(ours + inputs - act) <= 0.01 * act
        row("%s: activations (+ input) at backward start vs MemTracker's" % m, ok,
            "%s + input %s / %s (%+.2f%%; activations' blocks %s)" % (
                mib(ours), mib(inputs), mib(act),
                100.0 * (ours + inputs - act) / act if act else 0, mib(blocks)))
        # What each side holds when backward starts, to explain a difference: MemTracker's
        # Pre-Backward snapshot by its categories, ours as the forward added it and at the peak.
        row("%s: MemTracker at the root's Pre-Backward" % m, None,
            ", ".join("%s %s" % (k.split(".")[-1], mib(v)) for k, v in sorted(mt_cats.items())))
        row("%s: ours, forward added (tensor bytes)" % m, None, ", ".join(
            "%s %s" % (k, mib(v))
            for k, v in sorted(dict(fwd.get("added_tensor_bytes_by_category", {})).items())))
        row("%s: ours at the allocated peak (step %s %s, tensor bytes)" % (
            m, peak.get("step"), peak.get("phase")), None,
            ", ".join("%s %s" % (k, mib(v)) for k, v in sorted(cats.items())))
    if m == "leak":
        g = dev["growth"]
        per = g.get("bytes_per_step", 0)
        top = g.get("by_site") or [{}]
        ok = g.get("judged") and abs(per - truth["kept_output_bytes"]) <= 512 and \
            "user_terms.py" in top[0].get("site", "")
        row("leak: growth per step at the loop's line", bool(ok),
            "%s a step at %s (%s) / kept output %s" % (
                mib(per), top[0].get("site"), top[0].get("category"),
                mib(truth["kept_output_bytes"])))
    elif dev["growth"].get("judged"):
        per = dev["growth"].get("bytes_per_step", 0)
        row("%s: no growth per step reported" % m, per == 0, mib(per))


def main():
    out = sys.argv[1]
    for m in ("mlp", "gpt", "resnet", "leak", "ckpt", "compile"):
        check_model(out, m)
    print("\n".join(rows))
    if not rows:
        print("| no comparison made | FAIL |")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
