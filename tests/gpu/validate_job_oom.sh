#!/usr/bin/env bash
# Real-GPU validation of issue 58, item 1: a torchrun job of 2 ranks (tests/gpu/job_oom.py, gloo,
# one GPU shared when there is only one) where rank 1 runs out of memory under
# set_per_process_memory_fraction while rank 0 holds 512 MiB, and torchrun kills rank 0. Checks
# that `run` prints the job's first OOM naming rank 1 with its verdict and the failing line, and
# what rank 0 held then (= its memory_allocated()), that both ranks' snapshots exist (the killed
# one's too), and that `report DIR` says the same before its rank table, with OOMs and live at
# exit per rank (each rank's = its memory_allocated() when it ended); that each final snapshot has
# its summary beside it, and `report DIR` (text, JSON) and `check DIR` print the same from the
# summaries as from the snapshots alone. Prints a table of PASS/FAIL rows; exits non-zero on any FAIL.
# Usage: tests/gpu/validate_job_oom.sh PREFIX OUT   (PREFIX has bin/cumemtrace and lib/)
set -u
P=$1
OUT=$2
CT=$P/bin/cumemtrace
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/torch"
ROWS=$OUT/rows.txt; : > "$ROWS"
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" -ge 2 ] || export CUMEMTRACE_SHARED_GPU=1
echo "GPUs: $NGPU"

timeout 300 "$CT" run -o "$OUT/traces" -- \
  torchrun --standalone --nproc_per_node 2 tests/gpu/job_oom.py "$OUT/torch" \
  > "$OUT/run.out" 2> "$OUT/run.err"
rc=$?
"$CT" report "$OUT/traces" > "$OUT/report.txt" 2> "$OUT/report.err"; rrc=$?
"$CT" report "$OUT/traces" --format json > "$OUT/report.json" 2>/dev/null
# The same views from the snapshots alone (no summary beside them: each is read whole).
mkdir -p "$OUT/alone/traces"; ln "$OUT"/traces/*.json "$OUT/alone/traces/" 2>/dev/null
for v in "report" "report --format json" "check --max-peak-bytes 100GiB --max-leaked-bytes 100GiB"; do
  f=$(echo "$v" | tr ' ' '_')
  "$CT" $v "$OUT/traces" > "$OUT/sum.$f.txt" 2>&1; echo "rc $?" >> "$OUT/sum.$f.txt"
  "$CT" $v "$OUT/alone/traces" 2>&1 | sed "s|$OUT/alone/traces|$OUT/traces|g" > "$OUT/alone.$f.txt"
  echo "rc ${PIPESTATUS[0]}" >> "$OUT/alone.$f.txt"
done
python3 - "$OUT" "$rc" "$rrc" "$(grep -n 'THE OOM' tests/gpu/job_oom.py | cut -d: -f1)" >> "$ROWS" <<'PY'
import glob, json, re, sys
out, rc, rrc, line = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def row(name, ok, detail=""):
    print(f"| {name:<62} | {'PASS' if ok else 'FAIL'} | {detail}")


row("run exits with torchrun's failure (non-zero, not 2)", rc not in (0, 2), f"exit {rc}")
finals = [f for f in glob.glob(f"{out}/traces/*.rank*.json") if not f.endswith(".oom.json")]
row("both ranks' final snapshots (rank 0 killed by torchrun)",
    sorted(re.search(r"\.rank(\d+)\.", f).group(1) for f in finals) == ["0", "1"],
    " ".join(sorted(finals)))
err = open(f"{out}/run.err").read()
first = [l for l in err.splitlines() if "first OOM of the job" in l]
row("run names the job's first OOM: rank 1/2, with a verdict",
    len(first) == 1 and ": rank 1/2 " in first[0]
    and re.search(r"s since the job's start: (exhaustion|fragmentation): ", first[0]) is not None,
    first[0] if first else err[-600:])
req = [l for l in err.splitlines() if "  the request: " in l]
row("run: the request is 256 MiB at job_oom.py's failing line",
    len(req) == 1 and re.search(r"the request: 256(\.00)? MiB at ", req[0]) is not None
    and f"job_oom.py:{line}" in req[0],
    req[0] if req else "")
try:
    t0 = json.load(open(f"{out}/torch/torch.rank0.json"))
    t1 = json.load(open(f"{out}/torch/torch.rank1.json"))
except OSError as e:
    t0, t1 = {}, {}
    row("PyTorch's counters of both ranks", False, repr(e))
row("report DIR exits 0", rrc == 0, f"exit {rrc}")
try:
    table = json.load(open(f"{out}/report.json"))["ranks"]
except Exception as e:
    table = {}
    row("report DIR --format json has a rank table", False, repr(e))
fo = table.get("first_oom") or {}
row("report DIR: first OOM is rank 1's", fo.get("process", "").startswith("rank 1/2"),
    json.dumps({k: fo.get(k) for k in ("process", "verdict", "site", "ooms")}))
others = fo.get("others", [])
held = [o for o in others if o["process"].startswith("rank 0/2")]
alloc = held[0].get("allocated_bytes") if held else None
row("rank 0 held its memory_allocated() at that moment (512 MiB)",
    alloc is not None and alloc == t0.get("memory_allocated"),
    f"{alloc} vs {t0.get('memory_allocated')}")
rows = {r["rank"]: r for r in table.get("rows", []) if r["slot"] == 0}
row("rank table: OOMs 0 on rank 0, 1 on rank 1",
    [rows.get(r, {}).get("ooms") for r in (0, 1)] == [0, 1],
    str([rows.get(r, {}).get("ooms") for r in (0, 1)]))
# Live at exit: what each rank still held when it ended (job_oom.py makes it explicit), PyTorch's
# memory_allocated() then: rank 1 left by os._exit right after its counters, rank 0 was killed
# holding its 512 MiB.
for r, t in ((0, t0), (1, t1)):
    live = rows.get(r, {}).get("live_at_exit_bytes")
    row(f"rank table: rank {r}'s live at exit = its memory_allocated() when it ended",
        live is not None and live == t.get("memory_allocated"),
        f"{live} vs {t.get('memory_allocated')}")
killed = re.search(r"\(pid \d+; rank 0/2 \(local \d+\) on [^)]*\) "
                   r"(was killed by signal \d+|ended without exit)", err)
row("rank 0 was killed by torchrun (not an exit of its own)", killed is not None,
    killed.group(0) if killed else "")
# Issue 58 item 2: each final snapshot's summary beside it, and the views the same from them.
sums = sorted(glob.glob(f"{out}/traces/*.summary"))
row("a summary beside each final snapshot",
    sorted(f[:-len(".summary")] + ".json" for f in sums) == sorted(finals), " ".join(sums))
for v in ("report", "report_--format_json",
          "check_--max-peak-bytes_100GiB_--max-leaked-bytes_100GiB"):
    a, b = open(f"{out}/sum.{v}.txt").read(), open(f"{out}/alone.{v}.txt").read()
    row(f"{v.replace('_', ' ')[:40]}: summaries = snapshots alone", a == b,
        a.splitlines()[-1] + " / " + b.splitlines()[-1])
text = open(f"{out}/report.txt").read()
row("report DIR text: the first OOM before the table",
    "First OOM of the job" in text and text.index("First OOM of the job")
    < text.find("\nProcesses, each device at its own peak"), "")
PY
echo "--- run's stderr (last 30 lines)"; tail -n 30 "$OUT/run.err"
echo "--- report DIR (first 40 lines)"; head -n 40 "$OUT/report.txt"
echo; cat "$ROWS"
! grep -q "| FAIL |" "$ROWS"
