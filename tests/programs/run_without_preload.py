#!/usr/bin/env python3
"""Runs every scenario of every test program against the fake driver, without the preload, and
checks exit statuses and output. Guards the programs and the fake themselves, so that an
end-to-end failure under the preload points at the preload or the collector."""

import argparse
import os
import resource
import signal
import subprocess
import sys

MiB = 1 << 20

# Scenarios that need only init, devices and plain/async allocations: offered by every program.
COMMON = [
    (["basic"], {}, 0, ""),
    (["oom"], {"FAKE_CUDA_MEM_LIMIT": str(8 * MiB)}, 0, "allocated 8\n"),
    (["oom"], {"FAKE_CUDA_MEM_LIMIT": str(5 * MiB + MiB // 2)}, 0, "allocated 5\n"),
    (["badfree"], {}, 0, ""),
    (["threads", "4", "200"], {}, 0, ""),
    (["threads"], {}, 0, ""),
    (["fork"], {}, 0, ""),
    (["exec"], {}, 0, ""),
    (["kill"], {}, -signal.SIGKILL, ""),
    (["abort"], {}, -signal.SIGABRT, ""),
    (["segv"], {}, -signal.SIGSEGV, ""),
    (["exit", "7"], {}, 7, ""),
    (["exit"], {}, 0, ""),
    (["spin", "0.1"], {}, 0, "allocated\n"),
    # Without the preload the marks API and NVTX are no-ops.
    (["marks"], {}, 0, ""),
    (["nvtx"], {}, 0, "nvtx levels -2 -2 -2 -2\n"),
    # The ownership walks' entry point is the preload's own: without it the scenario says so.
    (["owners"], {}, 3, ""),
    (["steps", "3", "4096"], {}, 0, ""),
    (["spawn"], {}, 0, ""),
    (["setsid"], {}, 0, ""),
    (["closefds", "0"], {}, 0, ""),
    # Driver failures are exit 3: the 2nd allocation is allocate_weights', device 1 is missing.
    (["basic"], {"FAKE_CUDA_FAIL_NTH_ALLOC": "2"}, 3, ""),
    (["basic"], {"FAKE_CUDA_DEVICES": "1"}, 3, ""),
    ([], {}, 2, ""),
    (["no-such-scenario"], {}, 2, ""),
]
# Scenarios that need the VMM, host, managed, pitch, graph, IPC or array entry points.
FULL_ONLY = [
    (["vmm"], {}, 0, ""),
    (["host"], {}, 0, ""),
    (["managed"], {}, 0, ""),
    (["pitch"], {}, 0, ""),
    (["graph"], {}, 0, ""),
    (["ipc"], {}, 0, ""),
    (["arrays"], {}, 0, ""),
]

CASES = (
    [("ct_static_like", *c) for c in COMMON + FULL_ONLY]
    + [("ct_lcuda", *c) for c in COMMON + FULL_ONLY]
    + [("ct_shared_like", *c) for c in COMMON]
    + [("ct_shared_like", args, env, 2, "") for args, env, _, _ in FULL_ONLY]
    # Programs that look the driver up through cuGetProcAddress fail the call the driver lacks;
    # ct_lcuda binds symbols at load time, which FAKE_CUDA_MISSING does not affect.
    + [(p, ["basic"], {"FAKE_CUDA_MISSING": "cuMemAllocAsync"}, 3, "")
       for p in ("ct_static_like", "ct_shared_like")]
    + [("ct_lcuda", ["basic"], {"FAKE_CUDA_MISSING": "cuMemAllocAsync"}, 0, "")]
    + [
        ("ct_no_cuda", [], {}, 0, "hello from ct_no_cuda\n"),
        ("ct_no_cuda", ["5"], {}, 5, "hello from ct_no_cuda\n"),
        ("ct_dlsym_next", [], {}, 0, ""),
        ("ct_gpa_probe", ["cuMemAlloc", "cuNoSuchFunction"], {}, 0,
         "cuMemAlloc v2 0 0 set\ncuMemAlloc v1 0 set\ncuMemAlloc nullpfn 1\ncuMemAlloc dlsym set\n"
         "cuNoSuchFunction v2 500 1 null\ncuNoSuchFunction v1 500 null\n"
         "cuNoSuchFunction nullpfn 1\ncuNoSuchFunction dlsym null\n"),
        ("ct_gpa_probe", ["cuMemFree"], {"FAKE_CUDA_GPA_ERROR": "cuMemFree=999"}, 0,
         "cuMemFree v2 999 1 null\ncuMemFree v1 999 null\ncuMemFree nullpfn 1\n"
         "cuMemFree dlsym set\n"),
    ]
)


def no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="folder with the ct_* programs")
    parser.add_argument("--fake", required=True, help="folder with the fake libcuda.so.1")
    opts = parser.parse_args()

    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FAKE_CUDA_") and not k.startswith("CUMEMTRACE") and k != "LD_PRELOAD"
    }
    base_env["LD_LIBRARY_PATH"] = os.path.abspath(opts.fake)

    failures = []
    for program, args, extra_env, want_status, want_stdout in CASES:
        cmd = [os.path.join(opts.bin, program)] + args
        env = dict(base_env, **extra_env)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30,
                              preexec_fn=no_core_dumps)
        label = " ".join([program] + args) + "".join(f" [{k}={v}]" for k, v in extra_env.items())
        problems = []
        if proc.returncode != want_status:
            problems.append(f"exit status {proc.returncode}, expected {want_status}")
        if proc.stdout != want_stdout:
            problems.append(f"stdout {proc.stdout!r}, expected {want_stdout!r}")
        if want_status == 0 and proc.stderr:
            problems.append(f"stderr {proc.stderr!r}")
        if problems:
            failures.append(f"{label}: " + "; ".join(problems) + f"\n  stderr: {proc.stderr!r}")

    for f in failures:
        print("FAIL", f)
    print(f"{len(CASES) - len(failures)}/{len(CASES)} program runs as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
