"""A small training loop for the real-GPU tests: a CNN on random data, N steps.

Usage: torch_train.py STEPS [--history OUT.pickle] [--gpu-trace OUT.json] [--batch N]
                        [--model cnn|resnet18] [--image-size N]
--model resnet18 (torchvision, 224 x 224 images; use --batch 64) is a realistic step of tens of
milliseconds; with --image-size 32 (CIFAR-10's images) the same model trains the way most
ResNet-18 tutorials do, a step whose time the CPU sets; the default CNN is launch-bound (about
2 ms a step), the worst case for per-event costs.
With --history, PyTorch's own _record_memory_history runs in the same process and its snapshot
is dumped to OUT.pickle, so its segment events can be compared with cumemtrace's. With
--gpu-trace, PyTorch's GPU-trace hooks (torch.cuda._gpu_trace, what its CUDA sanitizer uses) log
every device allocation and free its allocator makes, in order, as {"events": [["alloc"|"free",
ptr], ...], "stats": torch.cuda.memory_stats(), "sentinel_bytes": N}, the stats read just before
an allocation of N bytes: PyTorch's accounts where its recorder keeps nothing (the hooks under
PYTORCH_NO_CUDA_MEMORY_CACHING=1, the byte counters under backend:cudaMallocAsync).
"""
import argparse
import json
import time

import torch
import torch.nn as nn

SENTINEL_BYTES = 1234567


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(128 * 8 * 8, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.body(x)


def train_step(model, opt, batch, size=32):
    x = torch.randn(batch, 3, size, size, device="cuda")  # forward-pass allocation site
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--history")
    ap.add_argument("--gpu-trace")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    ap.add_argument("--image-size", type=int, help="default: 224 for resnet18, 32 for cnn")
    args = ap.parse_args()
    if args.history:
        torch.cuda.memory._record_memory_history(max_entries=1000000)
    hooked = []
    if args.gpu_trace:
        from torch.cuda import _gpu_trace
        # The hooks pass the pointer last (earlier arguments, where a version adds any, are not
        # needed here).
        _gpu_trace.register_callback_for_memory_allocation(
            lambda *a: hooked.append(("alloc", a[-1])))
        _gpu_trace.register_callback_for_memory_deallocation(
            lambda *a: hooked.append(("free", a[-1])))
        torch._C._activate_gpu_trace()
    if args.model == "resnet18":
        import torchvision
        model, size = torchvision.models.resnet18(num_classes=10).cuda(), args.image_size or 224
    else:
        model, size = Net().cuda(), 32
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        train_step(model, opt, args.batch, size)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        train_step(model, opt, args.batch + (i % 4) * 16, size)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"steps={args.steps} ms_per_step={dt * 1000 / args.steps:.3f} "
          f"reserved={torch.cuda.memory_reserved()} max_reserved={torch.cuda.max_memory_reserved()}")
    if args.history:
        torch.cuda.memory._dump_snapshot(args.history)
    if args.gpu_trace:
        # The allocator's counters now, then an allocation of a size found nowhere else, so that
        # the point where they were read can be found in cumemtrace's trace.
        stats = torch.cuda.memory_stats()
        sentinel = torch.empty(SENTINEL_BYTES, dtype=torch.uint8, device="cuda")
        with open(args.gpu_trace, "w") as f:
            json.dump({"events": hooked, "stats": stats, "sentinel_bytes": sentinel.numel()}, f)


if __name__ == "__main__":
    main()
