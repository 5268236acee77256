"""PyTorch block capture's whole cost, measured inside one process: blocks of training steps with
block capture on and paused, alternated, on the same host at the same time.

Whole runs (torch_blocks_overhead.sh) compare separate processes, and on the GPU host two bare
runs of the same loop differ by 5-30%, more than the cost being measured. Here every block of
steps with capture on sits between two blocks with it paused (cumemtrace_bench_pause_torch_blocks,
preload/hooks/bench_switches.cpp), so a drift of the host's speed cancels out of each comparison. Unlike
CUMEMTRACE_DEBUG's meter, which sums the time spent inside the recorder, this includes what
recording costs the program indirectly: the caches and code its walks evict, the collector's
traffic. It leaves out what PyTorch itself spends building each event for an attached tracker,
which a paused block pays too (PyTorch has no detach).

Run under cumemtrace with the benchmarks' build of the library, which has the switches (the
script refuses to run without them):
  CUMEMTRACE_PRELOAD=build/lib/libcumemtrace_bench.so cumemtrace run -q -o /tmp/ab -- python3 bench/gpu/torch_blocks_ab.py [--model cnn|gpt|resnet18]
      [--batch N] [--blocks 40] [--block-steps 10] [--aa]
--aa never pauses: the same comparison between blocks that differ in nothing, the noise floor.
--phases pauses the automatic phases and ownership walks (preload/python/cumemtrace_phases.py)
instead, block capture staying on: their own cost.
--all-recording pauses all of cumemtrace's recording (cumemtrace_bench_pause_recording: driver
events too), not only the block events: the loop to use under PYTORCH_CUDA_ALLOC_CONF=
backend:cudaMallocAsync, where every tensor is a driver event of the stream-ordered pool.
Prints the median ms per step of each kind of block and the median of the per-pair costs (each
capturing block against the mean of the paused blocks on either side).

--torch-history STACKS measures PyTorch's own recorder the same way, in a process without
cumemtrace: torch.cuda.memory._record_memory_history(stacks=STACKS, context=...) turned on for
the capturing blocks and off (enabled=None) for the others. STACKS is "all" (Python and C++
frames, PyTorch's default) or "python"; --torch-context is "all" (PyTorch's default: a stack for
every allocation and free) or "alloc" (allocations only, what cumemtrace records by default).
Turning PyTorch's recorder off removes all of its cost, so its row is whole.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "gpu"))
import torch  # noqa: E402
from torch_train import make_step  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("cnn", "gpt", "resnet18"), default="cnn")
    ap.add_argument("--batch", type=int, help="default: 256 (cnn), 16 (gpt), 64 (resnet18)")
    ap.add_argument("--blocks", type=int, default=40, help="blocks of steps, half of them paused")
    ap.add_argument("--block-steps", type=int, default=10)
    ap.add_argument("--aa", action="store_true", help="never pause (the A/A control)")
    ap.add_argument("--all-recording", action="store_true",
                    help="pause all recording, driver events included, not only block events")
    ap.add_argument("--torch-history", choices=("all", "python"),
                    help="measure PyTorch's _record_memory_history with these stacks instead")
    ap.add_argument("--torch-context", choices=("all", "alloc"), default="all")
    ap.add_argument("--phases", action="store_true",
                    help="pause the automatic phases and ownership walks instead (block capture "
                         "stays on in every block)")
    args = ap.parse_args()
    try:
        lib = ctypes.CDLL(None)
        ours = (lib.cumemtrace_bench_pause_recording if args.all_recording
                else lib.cumemtrace_bench_pause_torch_blocks)
    except AttributeError:
        ours = None
    if args.torch_history:
        if ours:
            sys.exit("torch_blocks_ab.py: --torch-history runs without cumemtrace")
        record = torch.cuda.memory._record_memory_history

        def pause(paused):
            if paused:
                record(enabled=None)
            else:
                record(stacks=args.torch_history, context=args.torch_context)
    elif args.phases:
        phases = sys.modules.get("cumemtrace_phases")
        if phases is None or phases._phases is None:
            sys.exit("torch_blocks_ab.py: --phases needs the automatic phases installed "
                     "(cumemtrace run, CUMEMTRACE_PHASES unset)")

        def pause(paused):
            # Paused: every hook removed (uninstall). On again: installed afresh, so each phased
            # block also pays one step of root discovery (global hooks) and re-sends its walks:
            # the cost measured is an upper bound of the steady state's.
            if paused and phases._phases is not None:
                phases._phases.uninstall()
                phases._phases = None
            elif not paused and phases._phases is None:
                phases.install(torch)
    elif ours:
        ours.argtypes = [ctypes.c_int]
        pause = ours
    else:
        sys.exit("torch_blocks_ab.py: run it under `cumemtrace run` (no preload in this process)")
    batch = args.batch or {"cnn": 256, "gpt": 16, "resnet18": 64}[args.model]
    step = make_step(args.model, batch)
    for i in range(8):  # every shape once, twice: the allocator's cache is warm
        step(i)
    torch.cuda.synchronize()
    times = {True: [], False: []}  # capturing -> ms per step of each block
    order = []
    for b in range(args.blocks):
        capturing = b % 2 == 1  # paused first: every capturing block has a paused one before it
        pause(0 if args.aa or capturing else 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(args.block_steps):
            step(i)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000 / args.block_steps
        times[capturing].append(ms)
        order.append((capturing, ms))
    pause(1 if args.torch_history else 0)  # ours: capture on again for the rest of the run
    on, off = statistics.median(times[True]), statistics.median(times[False])
    pairs = [order[k][1] / ((order[k - 1][1] + order[k + 1][1]) / 2) - 1
             for k in range(1, len(order) - 1) if order[k][0]]
    label = "A/A (never paused)" if args.aa else "capturing vs paused"
    if args.phases and not args.aa:
        label = "automatic phases on vs off"
    if args.all_recording:
        label += " (all recording)"
    if args.torch_history:
        label = (f"PyTorch's history (stacks={args.torch_history}, context={args.torch_context}) "
                 + ("A/A (always on)" if args.aa else "on vs off"))
    print(f"{args.model} batch {batch}, {args.blocks} blocks of {args.block_steps} steps, {label}: "
          f"{on:.3f} vs {off:.3f} ms/step, {100 * (on / off - 1):+.2f}%; per-pair median "
          f"{100 * statistics.median(pairs):+.2f}% (quartiles "
          f"{100 * statistics.quantiles(pairs, n=4)[0]:+.2f}% .. "
          f"{100 * statistics.quantiles(pairs, n=4)[2]:+.2f}%)")


if __name__ == "__main__":
    main()
