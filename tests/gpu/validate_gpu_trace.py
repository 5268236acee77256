"""Compares cumemtrace's snapshot with the accounts PyTorch keeps where its memory recorder keeps
nothing (torch_train.py --gpu-trace, same process):
- GPU-trace hooks (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every device allocation and free PyTorch's
  allocator reported must be one cumemtrace allocation / free at the same address, one to one;
  the order of the two accounts is compared too. Pointer 0 is a tensor of no bytes: no memory.
- Byte counters (backend:cudaMallocAsync, whose allocator calls no hooks): allocated_bytes current
  and peak, read just before the sentinel allocation, must equal the live and peak bytes of the
  allocations cumemtrace saw PyTorch's CudaMallocAsync allocator make up to that point.
Usage: validate_gpu_trace.py MODE CUMEMTRACE.json HOOKS.json; prints table rows; exit 1 on FAIL."""
import json
import sys
from collections import defaultdict, deque

mode, ours_path, hooks_path = sys.argv[1:4]
ours = json.load(open(ours_path))
KIND = {"alloc": "alloc", "free_completed": "free"}
mine = sorted(((e["time_us"], KIND[e["action"]], e["addr"], e["size"], e.get("frames", []))
               for trace in ours["device_traces"] for e in trace if e["action"] in KIND),
              key=lambda e: e[0])


def row(label, ok, detail):
    print(f"| torch {mode}: {label} | {'PASS' if ok else 'FAIL'} | {detail}")
    return ok


def hooks_row(hooks):
    label = "PyTorch allocator events (GPU-trace hooks) matched one to one"
    empty = [ev for ev in hooks if ev[1] == 0]
    hooks = [ev for ev in hooks if ev[1] != 0]
    # Each PyTorch event takes the first unused cumemtrace event of the same kind and address.
    where = defaultdict(deque)  # (kind, addr) -> indices into mine
    for i, (_, k, a, _, _) in enumerate(mine):
        where[(k, a)].append(i)
    taken, unmatched = [], []
    for k, a in hooks:
        if where[(k, a)]:
            taken.append(where[(k, a)].popleft())
        else:
            unmatched.append((k, hex(a)))
    used = set(taken)
    extra = [s for i, (_, k, _, s, _) in enumerate(mine) if k == "alloc" and i not in used]
    # Order: PyTorch's n-th event should come after its (n-1)-th in cumemtrace's account too.
    in_order = 1 + sum(1 for x, y in zip(taken, taken[1:]) if x < y) if taken else 0
    allocs = sum(k == "alloc" for k, _ in hooks)
    return row(label, hooks and not unmatched and in_order == len(hooks),
               f"{len(hooks) - len(unmatched)} of {len(hooks)} ({allocs} allocs, "
               f"{len(hooks) - allocs} frees) are cumemtrace events at the same address "
               f"{unmatched[:3]}, {in_order} in the same order ({len(empty)} events of empty "
               f"tensors, pointer 0, left out); cumemtrace saw {len(extra)} allocations PyTorch "
               f"did not ({sum(extra)} B)")


def stats_row(stats, sentinel):
    label = "allocated bytes (current, peak) equal PyTorch's counters"
    want = (stats.get("allocated_bytes.all.current", 0), stats.get("allocated_bytes.all.peak", 0))
    live, cur, peak, seen, others = {}, 0, 0, None, 0
    for _, k, a, size, frames in mine:
        if k == "alloc":
            if not any("CudaMallocAsync" in f["name"] for f in frames):
                others += 1
                continue
            if size == sentinel:
                seen = (cur, peak)
                break
            live[a] = size
            cur += size
            peak = max(peak, cur)
        elif a in live:
            cur -= live.pop(a)
    if seen is None:
        return row(label, False, f"no {sentinel} B sentinel allocation from PyTorch's allocator")
    return row(label, seen == want and want[1] > 0,
               f"PyTorch {want[0]} B live, peak {want[1]} B; cumemtrace {seen[0]} B live, peak "
               f"{seen[1]} B over PyTorch's cudaMallocAsync allocations ({others} other "
               f"allocations before the sentinel, cuBLAS/cuDNN, not PyTorch's)")


try:
    log = json.load(open(hooks_path))
except (OSError, ValueError) as e:
    sys.exit(0 if row("PyTorch's accounts", False, f"no log: {e}") else 1)
hooks = [(k, int(p)) for k, p in log["events"]]
ok = hooks_row(hooks) if hooks else stats_row(log["stats"], log["sentinel_bytes"])
sys.exit(0 if ok else 1)
