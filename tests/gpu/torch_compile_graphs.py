"""CUDA graphs in PyTorch under cumemtrace: a small MLP trained and run for inference through
graph replays. Default allocator: torch.compile(mode="reduce-overhead") (CUDA graph trees, whose
memory comes from PyTorch's private pools). PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync:
PyTorch's CUDA graph trees refuse that backend ("cudaMallocAsync does not yet support
checkPoolLiveAllocations"), so the model is captured with torch.cuda.graph instead: every
allocation inside the capture is a stream-captured cudaMallocAsync, that is a CUDA graph memory
node. Prints "replays N" (N > 0 when CUDA graphs ran)."""
import os
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(64, 512, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")

if "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch's docs require
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(steps):
        graph.replay()
    out = loss
else:
    compiled = torch.compile(model, mode="reduce-overhead")
    for _ in range(steps):
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss_fn(compiled(x), y).backward()
        opt.step()
    with torch.no_grad():
        for _ in range(steps):
            torch.compiler.cudagraph_mark_step_begin()
            out = compiled(x).sum()
torch.cuda.synchronize()
print("replays", steps, float(out))
