"""GPU proof of `cumemtrace whatif` (issue 43), run where torch 2.11 and a GPU are present:
    python3 tests/gpu/validate_whatif.py BUILD_DIR [OUT_DIR]
Records a training script under `cumemtrace run` with the default allocator (PyTorch's own
_record_memory_history on in the same process too), then runs the same script without cumemtrace
under each other configuration and reads PyTorch's own max_memory_reserved(). `whatif` must give
the recorded run's reserved peak exactly (from cumemtrace's snapshot and from PyTorch's), and each
other configuration's within 5%. Prints a table; exit 1 on any FAIL.
The same file is the child: `validate_whatif.py --child STATS_JSON [TORCH_PICKLE]`."""
import json
import os
import subprocess
import sys

CONFS = ["expandable_segments:True", "max_split_size_mb:64"]


def child(stats_path, pickle_path):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if pickle_path:
        torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    # Varying batch and sequence sizes, as in inference servers and bucketed training: the
    # allocator's traffic the settings differ on.
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    for step in range(60):
        rows = 512 + 97 * (step % 7) + 13 * (step % 3)
        x = torch.randn(rows, 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 19:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    stats = {"max_reserved": torch.cuda.max_memory_reserved(),
             "max_allocated": torch.cuda.max_memory_allocated(),
             "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if pickle_path:
        torch.cuda.memory._dump_snapshot(pickle_path)
    with open(stats_path, "w") as f:
        json.dump(stats, f)


def whatif(build, snapshot):
    cmd = [os.path.join(build, "bin", "cumemtrace"), "whatif", snapshot, "--format", "json"]
    for c in CONFS:
        cmd += ["--alloc-conf", c]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return {r["alloc_conf"] if not r["recorded"] else "recorded": r for r in json.loads(p.stdout)}, ""


def main():
    build = os.path.abspath(sys.argv[1])
    out = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "whatif_validation")
    os.makedirs(out, exist_ok=True)
    me = os.path.abspath(__file__)
    rows = []

    rec_dir = os.path.join(out, "recorded")
    os.makedirs(rec_dir, exist_ok=True)
    rec_stats = os.path.join(out, "recorded.stats.json")
    torch_pickle = os.path.join(out, "recorded.torch.pickle")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    p = subprocess.run([os.path.join(build, "bin", "cumemtrace"), "run", "-q", "-o", rec_dir, "--",
                        sys.executable, me, "--child", rec_stats, torch_pickle],
                       env=env, capture_output=True, text=True, timeout=900)
    snaps = [os.path.join(rec_dir, f) for f in os.listdir(rec_dir)
             if f.endswith(".json") and ".oom." not in f]
    if p.returncode != 0 or len(snaps) != 1:
        print("| %-58s | FAIL | exit %d, %d snapshots: %s" % ("whatif: recorded run", p.returncode,
                                                              len(snaps), p.stderr[-300:]))
        return 1
    recorded = json.load(open(rec_stats))

    actual = {}
    for conf in CONFS:
        stats = os.path.join(out, conf.replace(":", "_") + ".stats.json")
        subprocess.run([sys.executable, me, "--child", stats, ""],
                       env=dict(env, PYTORCH_CUDA_ALLOC_CONF=conf), check=True, timeout=900)
        actual[conf] = json.load(open(stats))

    print("| %-34s | %-9s | %15s | %15s | %7s | verdict" % ("configuration", "source", "predicted",
                                                           "PyTorch", "diff"))
    for source, path in (("cumemtrace", snaps[0]), ("PyTorch", torch_pickle)):
        res, err = whatif(build, path)
        if res is None:
            rows.append(("whatif on the %s snapshot" % source, "FAIL", err))
            continue
        for conf in ["recorded"] + CONFS:
            want = recorded["max_reserved"] if conf == "recorded" else actual[conf]["max_reserved"]
            got = res[conf]["reserved_peak_bytes"]
            diff = (got - want) / want * 100
            ok = got == want if conf == "recorded" else abs(diff) <= 5
            print("| %-34s | %-9s | %15d | %15d | %6.2f%% | %s" % (
                conf if conf != "recorded" else "recorded (defaults)", source, got, want, diff,
                "PASS" if ok else "FAIL"))
            rows.append(("whatif %s (%s snapshot)" % (conf, source), "PASS" if ok else "FAIL",
                         "predicted %d, PyTorch %d (%.2f%%)" % (got, want, diff)))
    for name, verdict, detail in rows:
        print("| %-58s | %s | %s" % (name, verdict, detail))
    return 1 if any(v == "FAIL" for _, v, _ in rows) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
        sys.exit(0)
    sys.exit(main())
