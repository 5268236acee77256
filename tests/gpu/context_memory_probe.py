"""Real-GPU probe for tests/gpu/validate_context_memory.sh, the Python twin of
context_memory.cu: creates the CUDA context through a framework without allocating, prints what
nvidia-smi says this process holds ("probe after_context BYTES"), then allocates and prints again
("probe after_alloc BYTES").
Usage: context_memory_probe.py torch|cupy"""
import os
import subprocess
import sys


def smi_bytes():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(mib) << 20
    return -1


def report(key):
    print(f"probe {key} {smi_bytes()}", flush=True)


def main():
    which = sys.argv[1]
    if which == "torch":
        import torch
        torch.cuda.synchronize()  # cudaDeviceSynchronize: the primary context, no allocation
        report("after_context")
        x = torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        report("after_alloc")
        del x
    elif which == "cupy":
        import cupy
        cupy.cuda.runtime.deviceSynchronize()
        report("after_context")
        x = cupy.zeros(1)
        cupy.cuda.runtime.deviceSynchronize()
        report("after_alloc")
        del x
    else:
        sys.exit("usage: context_memory_probe.py torch|cupy")


if __name__ == "__main__":
    main()
