"""Verdict table for tests/gpu/validate_context_memory.sh.

Usage: validate_context_memory.py OUT CUMEMTRACE
For each program run under cumemtrace (OUT/traces/NAME/*.json, its output OUT/logs/NAME.txt with
"probe KEY BYTES" lines from nvidia-smi): the context the snapshot recorded on device 0 against
nvidia-smi's figure right after the program created it (nvidia-smi reports whole MiB, so they
agree within 1 MiB), and, from `cumemtrace report --format json`, the untracked remainder at
exit before the split (driver-visible - tracked) and after it (other untracked = untracked - the
contexts in being). The driver-API program's context must also show as destroyed.
"""
import glob
import json
import os
import subprocess
import sys

MiB = 1 << 20


def probes(log):
    out = {}
    try:
        with open(log) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "probe":
                    out[parts[1]] = int(parts[2])
    except OSError:
        pass
    return out


def mib(b):
    return "-" if b is None else f"{b / MiB:.1f} MiB"


def main():
    out, ct = sys.argv[1], sys.argv[2]
    rows, failed = [], False
    for name in ("runtime", "driver", "torch", "cupy"):
        rc_path = os.path.join(out, f"{name}.rc")
        rc = open(rc_path).read().strip() if os.path.exists(rc_path) else "not run"
        files = sorted(glob.glob(os.path.join(out, "traces", name, "*.json")))
        p = probes(os.path.join(out, "logs", f"{name}.txt"))
        smi = p.get("after_context")
        if rc != "0" or not files:
            rows.append((name, "FAIL", f"exit {rc}, {len(files)} snapshot(s)", None, smi, None,
                         None))
            failed = True
            continue
        # The process that made the context: the snapshot that lists one on device 0.
        snaps = [(f, json.load(open(f))) for f in files]
        with_ctx = [(f, s) for f, s in snaps if any(
            c["device"] == 0 for c in s["cumemtrace"].get("contexts", []))]
        if not with_ctx:
            rows.append((name, "FAIL", "no context recorded on device 0", None, smi, None, None))
            failed = True
            continue
        f, s = with_ctx[0]
        ctx = [c for c in s["cumemtrace"]["contexts"] if c["device"] == 0][0]
        rep = json.loads(subprocess.run([ct, "report", "--format", "json", f],
                                        capture_output=True, text=True).stdout or "{}")
        dev = next((d for d in rep.get("devices", []) if d.get("device") == 0), {})
        exit_layer = (dev.get("layers") or [{}])[-1]
        before = exit_layer.get("untracked_bytes")
        after = exit_layer.get("other_untracked_bytes")
        ok = smi is not None and smi > 0 and abs(ctx["bytes"] - smi) <= MiB
        detail = f"{ctx['api']}"
        if name == "driver":
            ended = "end_time_us" in ctx
            ok = ok and ended
            detail += ", destroyed" if ended else ", NOT marked destroyed"
            if p.get("after_destroy", 0) not in (-1, 0):
                detail += f" (nvidia-smi still {mib(p['after_destroy'])} after destroy)"
        rows.append((name, "PASS" if ok else "FAIL", detail, ctx["bytes"], smi, before, after))
        failed = failed or not ok
    print(f"| {'program':8} | {'verdict':7} | {'context recorded':>16} | {'nvidia-smi after ctx':>20} "
          f"| {'untracked at exit':>17} | {'other untracked':>15} | detail")
    for name, verdict, detail, rec, smi, before, after in rows:
        print(f"| {name:8} | {verdict:7} | {mib(rec):>16} | {mib(smi):>20} | {mib(before):>17} "
              f"| {mib(after):>15} | {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
