"""A small training loop for the real-GPU tests: a CNN on random data, N steps.

Usage: torch_train.py STEPS [--history OUT.pickle] [--gpu-trace OUT.json] [--batch N]
                        [--model cnn|resnet18|gpt] [--image-size N]
--model gpt is a GPT-2-style decoder (6 layers, width 512, 8 heads, vocabulary 8,192) trained
with AdamW under bf16 autocast on sequences of 256-352 tokens (--batch sequences, use 16): the
many small tensors of a transformer step, a step of about ten milliseconds.
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


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    VOCAB = 8192

    def __init__(self, width=512, layers=6, heads=8, max_len=512):
        super().__init__()
        self.tok, self.pos = nn.Embedding(self.VOCAB, width), nn.Embedding(max_len, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, self.VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def train_step_gpt(model, opt, batch, seq):
    idx = torch.randint(0, Gpt.VOCAB, (batch, seq + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().view(-1, Gpt.VOCAB),
                                           idx[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def train_step(model, opt, batch, size=32):
    x = torch.randn(batch, 3, size, size, device="cuda")  # forward-pass allocation site
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def make_step(model_name, batch, image_size=None):
    """The model and optimizer of --model, and a function that runs training step i on them."""
    if model_name == "gpt":
        model = Gpt().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        # Batch fixed, sequence length varied: shapes change from step to step, as the other
        # models' batch sizes do, so the allocator's cache is exercised.
        return lambda i: train_step_gpt(model, opt, batch, 256 + (i % 4) * 32)
    if model_name == "resnet18":
        import torchvision
        model, size = torchvision.models.resnet18(num_classes=10).cuda(), image_size or 224
    else:
        model, size = Net().cuda(), 32
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return lambda i: train_step(model, opt, batch + (i % 4) * 16, size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--history")
    ap.add_argument("--gpu-trace")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--model", choices=("cnn", "resnet18", "gpt"), default="cnn")
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
    step = make_step(args.model, args.batch, args.image_size)
    for _ in range(3):
        step(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
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
