"""torch.compile(mode="reduce-overhead") (CUDA graphs) under cumemtrace: a small MLP, trained and
then run for inference through CUDA graph replays. With PYTORCH_CUDA_ALLOC_CONF=
backend:cudaMallocAsync the graphs' allocations are stream-captured cudaMallocAsync calls, that
is CUDA graph memory nodes. Prints "replays N" (N > 0 when CUDA graphs ran)."""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()


def train_step(x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss


train = torch.compile(train_step, mode="reduce-overhead")
infer = torch.compile(model, mode="reduce-overhead")
x = torch.randn(64, 512, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
for _ in range(steps):
    torch.compiler.cudagraph_mark_step_begin()
    opt.zero_grad(set_to_none=False)
    train(x, y)
    opt.step()
with torch.no_grad():
    for _ in range(steps):
        torch.compiler.cudagraph_mark_step_begin()
        out = infer(x)
torch.cuda.synchronize()
print("replays", steps, float(out.sum()))
