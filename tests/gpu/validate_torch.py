"""Compares cumemtrace's snapshot with PyTorch's own _record_memory_history snapshot taken in the
same process: every PyTorch segment event (segment_alloc/free, segment_map/unmap) must be matched
by cumemtrace events of the same kind covering exactly the same address range, and cumemtrace's
extra allocations (what PyTorch cannot see) are listed by site.
Usage: validate_torch.py MODE CUMEMTRACE.json TORCH.pickle; prints table rows; exit 1 on FAIL."""
import collections
import json
import pickle
import sys

mode, ours_path, torch_path = sys.argv[1:4]
ours = json.load(open(ours_path))
theirs = pickle.load(open(torch_path, "rb"))
KINDS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")


def events(snap):
    out = []
    for dev, trace in enumerate(snap["device_traces"]):
        out += [(e["action"], dev, e["addr"], e["size"]) for e in trace if e["action"] in KINDS]
    return out


mine = events(ours)
pool = collections.defaultdict(list)  # (action, device) -> [(addr, size, used)]
for a, d, addr, size in mine:
    pool[(a, d)].append([addr, size, False])
matched, missing = 0, []
for a, d, addr, size in events(theirs):
    # PyTorch may map a range with several cuMemMap calls: cover it with our events inside it.
    covered = 0
    for ev in pool[(a, d)]:
        if not ev[2] and addr <= ev[0] and ev[0] + ev[1] <= addr + size:
            ev[2] = True
            covered += ev[1]
            if covered == size:
                break
    if covered == size:
        matched += 1
    else:
        missing.append((a, d, hex(addr), size, covered))
extra = [(a, d, addr, size) for (a, d), evs in pool.items() for addr, size, used in evs if not used]
extra_allocs = [e for e in extra if e[0] in ("segment_alloc", "segment_map")]
sites = collections.Counter()
for seg in ours["segments"]:
    frames = [f["name"] for f in seg["frames"] if "c10::cuda" not in f["name"]]
    top = next((n for n in frames if not n.startswith(("cu", "libcudart"))), "?")
    sites[top.split("(")[0][:60]] += seg["total_size"]
if not events(theirs):
    # Without caching every PyTorch block is its own cudaMalloc: if the recorder kept block events,
    # each alloc / free_completed must be one of our allocations / frees at the same address.
    blocks = [(e["action"], dev, e["addr"], e["size"]) for dev, tr in enumerate(theirs["device_traces"])
              for e in tr if e["action"] in ("alloc", "free_completed")]
    if not blocks:
        # Nothing to compare here: validate_gpu_trace.py compares PyTorch's GPU-trace hooks.
        print(f"|   torch {mode}: _record_memory_history | info | PyTorch's recorder kept no events "
              f"in this mode ({sum(len(t) for t in theirs['device_traces'])} entries); cumemtrace "
              f"saw {len(extra_allocs)} allocations ({sum(e[3] for e in extra_allocs)} B)")
        sys.exit(0)
    ours_by = collections.Counter((("alloc" if a == "segment_alloc" else "free_completed"), d, addr)
                                  for a, d, addr, _ in mine if a in ("segment_alloc", "segment_free"))
    unmatched = []
    for a, d, addr, size in blocks:
        if ours_by[(a, d, addr)] > 0:
            ours_by[(a, d, addr)] -= 1
        else:
            unmatched.append((a, d, hex(addr), size))
    ok = not unmatched
    print(f"| torch {mode}: PyTorch block events matched one to one | {'PASS' if ok else 'FAIL'} | "
          f"{len(blocks) - len(unmatched)} of {len(blocks)} PyTorch alloc/free events are cumemtrace "
          f"allocations/frees at the same address {unmatched[:3]}; cumemtrace saw "
          f"{sum(ours_by.values())} more events PyTorch did not")
    sys.exit(0 if ok else 1)
ok = not missing and matched > 0
print(f"| torch {mode}: PyTorch segment events matched one to one | {'PASS' if ok else 'FAIL'} | "
      f"{matched} matched, {len(missing)} PyTorch events unmatched {missing[:3]}; cumemtrace saw "
      f"{len(extra_allocs)} allocations PyTorch did not ({sum(e[3] for e in extra_allocs)} B)")
print(f"|   live at exit by site (cumemtrace) | info | "
      + "; ".join(f"{n}: {b / 2**20:.1f} MiB" for n, b in sites.most_common(4)))
sys.exit(0 if ok else 1)
